package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/units"
)

const installEventsFile = "../../inventories/events.yaml"

func installEvents(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := rootCommand(outStreams(&out))
	root.SetArgs(append([]string{"events", "install"}, args...))
	_, err := root.ExecuteContextC(context.Background())
	return out.String(), err
}

// installFakeExe writes an executable shell script and returns its path.
func installFakeExe(t *testing.T, dir, name, script string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// ownEnvFiles lets a test that is not root own its environment files:
// the check wants them root's.
func ownEnvFiles(t *testing.T) {
	if uid := uint32(os.Getuid()); uid != 0 {
		old := envFileOwner
		envFileOwner = uid
		t.Cleanup(func() { envFileOwner = old })
	}
}

func TestEventsInstallWritesUnits(t *testing.T) {
	ownEnvFiles(t)
	dir := t.TempDir()
	unitDir := filepath.Join(dir, "units")
	if err := os.Mkdir(unitDir, 0o755); err != nil {
		t.Fatal(err)
	}
	fleetBin := installFakeExe(t, dir, "fleet", "exit 0\n")
	env := filepath.Join(dir, "tokens.env")
	if err := os.WriteFile(env, []byte("HCLOUD_TOKEN=x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	out, err := installEvents(t, "--events", installEventsFile, "--state-dir", state, "--fleet-binary", fleetBin,
		"--interval", "30s", "--environment-file", env, "--unit-dir", unitDir, "--no-enable",
		"--", "--lab-dir", "/srv/relay fleet/lab")
	if err != nil {
		t.Fatal(err)
	}
	eventsAbs, _ := filepath.Abs(installEventsFile)
	want, err := units.RenderReconciler(units.Reconciler{
		Fleet: fleetBin, Events: eventsAbs, StateDir: state, Interval: 30e9,
		EnvironmentFile: env, ExtraArgs: []string{"--lab-dir", "/srv/relay fleet/lab"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range want {
		path := filepath.Join(unitDir, filepath.Base(f.Path))
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, f.Data) {
			t.Errorf("%s:\n%s\nwant:\n%s", path, got, f.Data)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
			t.Errorf("%s is mode %#o, want 0644", path, fi.Mode().Perm())
		}
		if !strings.Contains(out, "wrote "+path+"\n") {
			t.Errorf("output does not report %s:\n%s", path, out)
		}
	}
	if entries, _ := os.ReadDir(unitDir); len(entries) != 2 {
		t.Errorf("unit dir holds %v, want the two units and no temporary files", entries)
	}
	for _, want := range []string{"--no-enable", "systemctl list-timers relayfleet-events.timer", "journalctl -u relayfleet-events.service"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestEventsInstallDefaults(t *testing.T) {
	unitDir, state := t.TempDir(), t.TempDir()
	t.Setenv("RELAYFLEET_STATE_DIR", state)
	if _, err := installEvents(t, "--events", installEventsFile, "--unit-dir", unitDir, "--no-enable"); err != nil {
		t.Fatal(err)
	}
	service, err := os.ReadFile(filepath.Join(unitDir, units.ReconcilerService))
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	eventsAbs, _ := filepath.Abs(installEventsFile)
	if want := "ExecStart=" + exe + " events reconcile --events " + eventsAbs + " --state-dir " + state + "\n"; !strings.Contains(string(service), want) {
		t.Errorf("service lacks %q:\n%s", want, service)
	}
	timer, _ := os.ReadFile(filepath.Join(unitDir, units.ReconcilerTimer))
	if !strings.Contains(string(timer), "OnUnitActiveSec=1min\n") {
		t.Errorf("timer:\n%s", timer)
	}
}

func TestEventsInstallBadInput(t *testing.T) {
	ownEnvFiles(t)
	dir := t.TempDir()
	fleetBin := installFakeExe(t, dir, "fleet", "exit 0\n")
	notExec := filepath.Join(dir, "notexec")
	testutil.WriteFile(t, notExec, nil, 0o644)
	groupReadable := filepath.Join(dir, "group.env")
	testutil.WriteFile(t, groupReadable, []byte("HCLOUD_TOKEN=x\n"), 0o600)
	if err := os.Chmod(groupReadable, 0o640); err != nil { // past the umask
		t.Fatal(err)
	}
	base := []string{"--events", installEventsFile, "--state-dir", dir, "--fleet-binary", fleetBin, "--unit-dir", dir, "--no-enable"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--unit-dir", dir, "--no-enable"}, "flag --events: required"},
		{[]string{"--events", filepath.Join(dir, "missing.yaml"), "--no-enable"}, "flag --events: stat " + dir},
		{[]string{"--events", dir, "--no-enable"}, "flag --events: " + dir + " is a directory"},
		{append(base, "--environment-file", groupReadable), "flag --environment-file: " + groupReadable + " is mode 0640"},
		{append(base, "--environment-file", filepath.Join(dir, "none.env")), "flag --environment-file: stat"},
		{append(base, "--interval", "5s"), "flag --interval: 5s is out of range: want 10s to 24h"},
		{append(base, "--interval", "often"), "flag --interval: invalid value"},
		{append(base, "--fleet-binary", notExec), "flag --fleet-binary: " + notExec + " is not executable"},
		{append(base, "--unit-dir", filepath.Join(dir, "nope")), "flag --unit-dir: stat"},
		{append(base, "--user", "bad user"), `flag --user: "bad user": not a user name`},
		{append(base, "extra"), `unexpected argument "extra" (reconcile flags go after --)`},
		{append(base, "--", "--lab-dir", " "), `arguments after --: " ": empty or only whitespace`},
		{append(base, "--", "--note=a\nExecStartPre=/bin/sh"), `arguments after --: "--note=a\nExecStartPre=/bin/sh": contains a newline`},
		{append(base, "--", "--events=/other.yaml"), `arguments after --: "--events=/other.yaml": set the reconciler's Events or StateDir instead`},
		{append(base, "--bogus"), "flag --bogus: unknown flag"},
	} {
		_, err := installEvents(t, tc.args...)
		var ue *usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("bad input wrote files: %v", entries)
	}
}

// TestEventsInstallEnvFileOwner: the environment file, which systemd
// reads for a service that runs as root, must be root's alone, and in
// directories no one else can write: whoever can write it or replace it
// chooses what that service runs (PATH, the Pulumi binary).
func TestEventsInstallEnvFileOwner(t *testing.T) {
	root := os.Getuid() == 0
	ownEnvFiles(t)
	dir := t.TempDir()
	fleetBin := installFakeExe(t, dir, "fleet", "exit 0\n")
	units := filepath.Join(dir, "units")
	os.Mkdir(units, 0o755)
	install := func(env string) error {
		_, err := installEvents(t, "--events", installEventsFile, "--state-dir", dir, "--fleet-binary", fleetBin,
			"--unit-dir", units, "--no-enable", "--environment-file", env)
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
		envFileOwner = uint32(os.Getuid()) + 1 // the file is not the wanted owner's
	}
	err := install(other)
	var ue *usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "flag --environment-file: "+other+" is owned by uid") || !strings.Contains(err.Error(), "chown root:root") {
		t.Errorf("a file owned by another user: %v, want a usage error naming the flag, the owner and the fix", err)
	}
	ownEnvFiles(t)
	if !root {
		envFileOwner = uint32(os.Getuid())
	}

	// A file of root's in a directory others can write: they can replace it.
	open := write(filepath.Join(dir, "open", "tokens.env"), 0o600)
	os.Chmod(filepath.Dir(open), 0o777)
	if err := install(open); !errors.As(err, &ue) || !strings.Contains(err.Error(), "mode 0777, writable by others") {
		t.Errorf("a file in a directory anyone can write: %v, want a usage error", err)
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
		if err := install(theirs); !errors.As(err, &ue) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("a file in a directory of another user's: %v, want a usage error", err)
		}
	}
}

func TestEventsInstallEnables(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "systemctl.log")
	defer func(s string) { systemctlPath = s }(systemctlPath)
	systemctlPath = installFakeExe(t, dir, "systemctl", `echo "$*" >> '`+log+"'\n")
	fleetBin := installFakeExe(t, dir, "fleet", "exit 0\n")
	args := []string{"--events", installEventsFile, "--state-dir", dir, "--fleet-binary", fleetBin, "--unit-dir", dir}
	out, err := installEvents(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	calls, _ := os.ReadFile(log)
	if string(calls) != "daemon-reload\nenable --now relayfleet-events.timer\n" {
		t.Errorf("systemctl calls:\n%s", calls)
	}
	if !strings.Contains(out, "enabled and started relayfleet-events.timer: fleet events reconcile runs every 1m0s") {
		t.Errorf("output:\n%s", out)
	}

	// A failing systemctl: its output, on one line, in the error.
	systemctlPath = installFakeExe(t, dir, "systemctl", "echo 'System has not been booted with systemd.'\necho 'Failed to connect to bus' >&2\nexit 1\n")
	_, err = installEvents(t, args...)
	if err == nil || strings.Contains(err.Error(), "\n") ||
		!strings.Contains(err.Error(), "systemctl daemon-reload: exit status 1: System has not been booted with systemd. Failed to connect to bus") {
		t.Errorf("error = %q", err)
	}
	var ue *usageError
	if errors.As(err, &ue) {
		t.Errorf("a systemctl failure is not bad input: %v", err)
	}
}
