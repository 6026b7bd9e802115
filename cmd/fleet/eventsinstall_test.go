package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/relay/testutil"
	"github.com/relayfleet/relayfleet/units"
)

const installEventsFile = "../../inventories/events.yaml"

func installEvents(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := runEventsInstall(context.Background(), args, &out)
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

func TestEventsInstallWritesUnits(t *testing.T) {
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
		{append(base, "--interval", "5s"), "flag --interval: at least 10s, got 5s"},
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
