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

// The install itself (the checks, the files, systemctl) is tested in
// infra/events (InstallTimer); these test the command: its flags, what it
// prints, and errors naming the flag.

const installEventsFile = "../../inventories/events.yaml"

// installEvents runs fleet events install ARGS in-process and returns its
// stdout and error.
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

func TestEventsInstallWritesUnits(t *testing.T) {
	dir := t.TempDir()
	unitDir := filepath.Join(dir, "units")
	if err := os.Mkdir(unitDir, 0o755); err != nil {
		t.Fatal(err)
	}
	fleetBin := installFakeExe(t, dir, "fleet", "exit 0\n")
	state := filepath.Join(dir, "state")
	out, err := installEvents(t, "--events", installEventsFile, "--state-dir", state, "--fleet-binary", fleetBin,
		"--interval", "30s", "--unit-dir", unitDir, "--no-enable",
		"--", "--lab-dir", "/srv/relay fleet/lab")
	if err != nil {
		t.Fatal(err)
	}
	eventsAbs, _ := filepath.Abs(installEventsFile)
	want, err := units.RenderReconciler(units.Reconciler{
		Fleet: fleetBin, Events: eventsAbs, StateDir: state, Interval: 30e9,
		ExtraArgs: []string{"--lab-dir", "/srv/relay fleet/lab"},
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
		if !strings.Contains(out, "wrote "+path+"\n") {
			t.Errorf("output does not report %s:\n%s", path, out)
		}
	}
	for _, want := range []string{"--no-enable", "systemctl list-timers relayfleet-events.timer", "journalctl -u relayfleet-events.service"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestEventsInstallBadInput(t *testing.T) {
	dir := t.TempDir()
	fleetBin := installFakeExe(t, dir, "fleet", "exit 0\n")
	notExec := filepath.Join(dir, "notexec")
	testutil.WriteFile(t, notExec, nil, 0o644)
	base := []string{"--events", installEventsFile, "--state-dir", dir, "--fleet-binary", fleetBin, "--unit-dir", dir, "--no-enable"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--unit-dir", dir, "--no-enable"}, "flag --events: required"},
		{[]string{"--events", filepath.Join(dir, "missing.yaml"), "--no-enable"}, "flag --events: stat " + dir},
		{[]string{"--events", dir, "--no-enable"}, "flag --events: " + dir + " is a directory"},
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
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("bad input wrote files: %v", entries)
	}
}

// TestEventsInstallRefusesUsersFiles: a binary, events file or state dir
// another user owns, which could change what the root service runs, is
// refused in one line naming the flag, the path and its owner.
func TestEventsInstallRefusesUsersFiles(t *testing.T) {
	if os.Getuid() != 0 {
		testutil.Skipf(t, "needs root: the files it makes are given to another user")
	}
	dir := t.TempDir()
	fleetBin := installFakeExe(t, dir, "fleet", "exit 0\n")
	events := filepath.Join(dir, "events.yaml")
	for dst, src := range map[string]string{events: installEventsFile, filepath.Join(dir, "example.yaml"): "../../inventories/example.yaml"} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		testutil.WriteFile(t, dst, data, 0o644)
	}
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	unitDir := filepath.Join(dir, "units")
	if err := os.Mkdir(unitDir, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"--events", events, "--state-dir", state, "--fleet-binary", fleetBin, "--unit-dir", unitDir, "--no-enable"}
	if _, err := installEvents(t, args...); err != nil {
		t.Fatalf("all root's: %v", err)
	}
	for _, tc := range []struct{ path, flag string }{{fleetBin, "--fleet-binary"}, {events, "--events"}, {state, "--state-dir"}} {
		if err := os.Chown(tc.path, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		_, err := installEvents(t, args...)
		var ue *usageError
		if want := "flag " + tc.flag + ": " + tc.path + " is owned by uid 65534"; !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s another user's: error %v, want a one-line usage error starting %q", tc.flag, err, want)
		}
		if err := os.Chown(tc.path, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
}
