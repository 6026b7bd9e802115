package events

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/units"
)

const timerEventsFile = "../../inventories/events.yaml"

// fakeExe writes an executable shell script and returns its path.
func fakeExe(t *testing.T, dir, name, script string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// myUID is the Owner a test gives InstallTimer: run by a user other than
// root, the files it makes are that user's.
func myUID() uint32 { return uint32(os.Getuid()) }

func TestInstallTimerWritesUnits(t *testing.T) {
	dir := t.TempDir()
	unitDir := filepath.Join(dir, "units")
	if err := os.Mkdir(unitDir, 0o755); err != nil {
		t.Fatal(err)
	}
	fleetBin := fakeExe(t, dir, "fleet", "exit 0\n")
	env := filepath.Join(dir, "tokens.env")
	if err := os.WriteFile(env, []byte("HCLOUD_TOKEN=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	written, err := InstallTimer(context.Background(), TimerOptions{
		Reconciler: units.Reconciler{Events: timerEventsFile, StateDir: state, Fleet: fleetBin, Interval: 30 * time.Second,
			EnvironmentFile: env, ExtraArgs: []string{"--lab-dir", "/srv/relay fleet/lab"}},
		UnitDir: unitDir, Owner: myUID(),
	})
	if err != nil {
		t.Fatal(err)
	}
	eventsAbs, _ := filepath.Abs(timerEventsFile)
	want, err := units.RenderReconciler(units.Reconciler{
		Fleet: fleetBin, Events: eventsAbs, StateDir: state, Interval: 30e9,
		EnvironmentFile: env, ExtraArgs: []string{"--lab-dir", "/srv/relay fleet/lab"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range want {
		path := filepath.Join(unitDir, filepath.Base(f.Path))
		paths = append(paths, path)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(f.Data) {
			t.Errorf("%s:\n%s\nwant:\n%s", path, got, f.Data)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
			t.Errorf("%s is mode %#o, want 0644", path, fi.Mode().Perm())
		}
	}
	if !slices.Equal(written, paths) {
		t.Errorf("written %q, want %q", written, paths)
	}
	if entries, _ := os.ReadDir(unitDir); len(entries) != 3 {
		t.Errorf("unit dir holds %v, want the three units and no temporary files", entries)
	}
}

func TestInstallTimerDefaults(t *testing.T) {
	unitDir, state := t.TempDir(), t.TempDir()
	t.Setenv("RELAYFLEET_STATE_DIR", state)
	if _, err := InstallTimer(context.Background(), TimerOptions{Reconciler: units.Reconciler{Events: timerEventsFile}, UnitDir: unitDir}); err != nil {
		t.Fatal(err)
	}
	service, err := os.ReadFile(filepath.Join(unitDir, units.ReconcilerService))
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	eventsAbs, _ := filepath.Abs(timerEventsFile)
	if want := "ExecStart=" + exe + " events reconcile --events " + eventsAbs + " --state-dir " + state + "\n"; !strings.Contains(string(service), want) {
		t.Errorf("service lacks %q:\n%s", want, service)
	}
	timer, _ := os.ReadFile(filepath.Join(unitDir, units.ReconcilerTimer))
	if !strings.Contains(string(timer), "OnUnitActiveSec=1min\n") {
		t.Errorf("timer:\n%s", timer)
	}
}

func TestInstallTimerBadInput(t *testing.T) {
	dir := t.TempDir()
	fleetBin := fakeExe(t, dir, "fleet", "exit 0\n")
	notExec := filepath.Join(dir, "notexec")
	testutil.WriteFile(t, notExec, nil, 0o644)
	groupReadable := filepath.Join(dir, "group.env")
	testutil.WriteFile(t, groupReadable, []byte("HCLOUD_TOKEN=x\n"), 0o600)
	if err := os.Chmod(groupReadable, 0o640); err != nil { // past the umask
		t.Fatal(err)
	}
	base := func(edit func(*TimerOptions)) TimerOptions {
		o := TimerOptions{Reconciler: units.Reconciler{Events: timerEventsFile, StateDir: dir, Fleet: fleetBin}, UnitDir: dir, Owner: myUID()}
		edit(&o)
		return o
	}
	for _, tc := range []struct {
		o     TimerOptions
		field string // of a TimerFieldError, else of a units.FieldError
		want  string
	}{
		{base(func(o *TimerOptions) { o.Events = filepath.Join(dir, "missing.yaml") }), "Events", "stat " + dir},
		{base(func(o *TimerOptions) { o.Events = dir }), "Events", dir + " is a directory"},
		{base(func(o *TimerOptions) { o.EnvironmentFile = groupReadable }), "EnvironmentFile", groupReadable + " is mode 0640"},
		{base(func(o *TimerOptions) { o.EnvironmentFile = filepath.Join(dir, "none.env") }), "EnvironmentFile", "stat"},
		{base(func(o *TimerOptions) { o.Interval = 5 * time.Second }), "Interval", "at least 10s, got 5s"},
		{base(func(o *TimerOptions) { o.Fleet = notExec }), "Fleet", notExec + " is not executable"},
		{base(func(o *TimerOptions) { o.UnitDir = filepath.Join(dir, "nope") }), "UnitDir", "stat"},
		{base(func(o *TimerOptions) { o.UnitDir = notExec }), "UnitDir", notExec + " is not a directory"},
		{base(func(o *TimerOptions) { o.User = "bad user" }), "User", "not a user name"},
		{base(func(o *TimerOptions) { o.ExtraArgs = []string{"--lab-dir", " "} }), "ExtraArgs[1]", "empty or only whitespace"},
		{base(func(o *TimerOptions) { o.ExtraArgs = []string{"--note=a\nExecStartPre=/bin/sh"} }), "ExtraArgs[0]", "contains a newline"},
		{base(func(o *TimerOptions) { o.ExtraArgs = []string{"--events=/other.yaml"} }), "ExtraArgs[0]", "set the reconciler's Events or StateDir instead"},
	} {
		_, err := InstallTimer(context.Background(), tc.o)
		var te *TimerFieldError
		var fe *units.FieldError
		switch {
		case errors.As(err, &te):
			if te.Field != tc.field || !strings.Contains(te.Err.Error(), tc.want) {
				t.Errorf("%+v: error %v, want field %s with %q", tc.o, err, tc.field, tc.want)
			}
		case errors.As(err, &fe):
			if fe.Field != tc.field || !strings.Contains(fe.Reason, tc.want) {
				t.Errorf("%+v: error %v, want field %s with %q", tc.o, err, tc.field, tc.want)
			}
		default:
			t.Errorf("%+v: error %v, want a field error (%s: %q)", tc.o, err, tc.field, tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("bad input wrote files: %v", entries)
	}
}

// TestInstallTimerEnvFileOwner: the environment file, which systemd
// reads for a service that runs as root, must be root's alone, and in
// directories no one else can write: whoever can write it or replace it
// chooses what that service runs (PATH, the Pulumi binary).
func TestInstallTimerEnvFileOwner(t *testing.T) {
	root := os.Getuid() == 0
	dir, state := t.TempDir(), t.TempDir() // the state dir holds none of the files made here
	fleetBin := fakeExe(t, dir, "fleet", "exit 0\n")
	unitDir := filepath.Join(dir, "units")
	os.Mkdir(unitDir, 0o755)
	owner := myUID()
	install := func(env string) error {
		_, err := InstallTimer(context.Background(), TimerOptions{
			Reconciler: units.Reconciler{Events: timerEventsFile, StateDir: state, Fleet: fleetBin, EnvironmentFile: env},
			UnitDir:    unitDir, Owner: owner,
		})
		return err
	}
	write := func(path string, mode os.FileMode) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("HCLOUD_TOKEN=x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chmod(path, mode)
		return path
	}
	good := write(filepath.Join(dir, "ok", "tokens.env"), 0o600)
	if err := install(good); err != nil {
		t.Fatalf("a file of root's, 0600, in root's directories: %v", err)
	}

	// A file someone else owns: they choose the root service's environment.
	other := write(filepath.Join(dir, "other", "tokens.env"), 0o600)
	if root {
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	} else {
		owner = myUID() + 1 // the file is not the wanted owner's
	}
	err := install(other)
	var te *TimerFieldError
	if !errors.As(err, &te) || te.Field != "EnvironmentFile" || !strings.Contains(err.Error(), other+" is owned by uid") || !strings.Contains(err.Error(), "chown root:root") {
		t.Errorf("a file owned by another user: %v, want a field error naming the owner and the fix", err)
	}
	owner = myUID()

	// A file of root's in a directory others can write: they can replace it.
	open := write(filepath.Join(dir, "open", "tokens.env"), 0o600)
	os.Chmod(filepath.Dir(open), 0o777)
	if err := install(open); !errors.As(err, &te) || !strings.Contains(err.Error(), "mode 0777, writable by others") {
		t.Errorf("a file in a directory anyone can write: %v, want a field error", err)
	}
	// A sticky directory (as /tmp) is fine: others cannot replace root's files there.
	os.Chmod(filepath.Dir(open), 0o777|os.ModeSticky)
	if err := install(open); err != nil {
		t.Errorf("a file in a sticky directory: %v", err)
	}
	if root {
		// A directory someone else owns: they can rename the file away and put theirs.
		theirs := write(filepath.Join(dir, "theirs", "tokens.env"), 0o600)
		if err := os.Chown(filepath.Dir(theirs), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := install(theirs); !errors.As(err, &te) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("a file in a directory of another user's: %v, want a field error", err)
		}
	}
}

func TestInstallTimerEnables(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "systemctl.log")
	fleetBin := fakeExe(t, dir, "fleet", "exit 0\n")
	o := TimerOptions{
		Reconciler: units.Reconciler{Events: timerEventsFile, StateDir: dir, Fleet: fleetBin},
		UnitDir:    dir, Enable: true,
		Systemctl: fakeExe(t, dir, "systemctl", `echo "$*" >> '`+log+"'\n"),
	}
	if _, err := InstallTimer(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	calls, _ := os.ReadFile(log)
	if string(calls) != "daemon-reload\nenable --now relayfleet-events.timer\nenable relayfleet-events-exporter.service\nrestart relayfleet-events-exporter.service\n" {
		t.Errorf("systemctl calls:\n%s", calls)
	}

	// A failing systemctl: its output, on one line, in the error; the
	// units were written.
	o.Systemctl = fakeExe(t, dir, "systemctl", "echo 'System has not been booted with systemd.'\necho 'Failed to connect to bus' >&2\nexit 1\n")
	written, err := InstallTimer(context.Background(), o)
	if err == nil || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), "systemctl daemon-reload: exit status 1: System has not been booted with systemd. Failed to connect to bus") {
		t.Errorf("error = %q", err)
	}
	var te *TimerFieldError
	if errors.As(err, &te) {
		t.Errorf("a systemctl failure is not bad input: %v", err)
	}
	if len(written) != 3 {
		t.Errorf("written %q, want the three units", written)
	}
}

func TestWriteInstalled(t *testing.T) {
	var b strings.Builder
	WriteInstalled(&b, TimerOptions{Reconciler: units.Reconciler{Interval: time.Minute, ExporterListen: "10.1.2.3:9000"}, Enable: true})
	if !strings.Contains(b.String(), "enabled and started "+units.ReconcilerTimer+": fleet events reconcile runs every 1m0s\n") ||
		!strings.Contains(b.String(), "enabled and started "+units.ExporterService+": /metrics on http://10.1.2.3:9000 (fleet monitor --events-exporter 10.1.2.3:9000 scrapes it)\n") {
		t.Errorf("enabled: %q", b.String())
	}
	b.Reset()
	WriteInstalled(&b, TimerOptions{})
	if !strings.HasPrefix(b.String(), "not enabled (--no-enable)") || !strings.Contains(b.String(), "journalctl -u "+units.ReconcilerService) {
		t.Errorf("not enabled: %q", b.String())
	}
}
