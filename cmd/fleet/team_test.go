package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
)

// TestSharedBackendCommandsRefuse: with the fleet file naming an s3://
// backend, fleet up, destroy, relays, status, hosts and events status refuse without the
// team's passphrase in one line that says how it is shared, and make no
// passphrase in the state dir; a --backend naming another backend is a
// usage error naming both.
func TestSharedBackendCommandsRefuse(t *testing.T) {
	t.Setenv(program.PassphraseEnv, "")
	t.Setenv(program.PassphraseFileEnv, "")
	t.Setenv(program.BackendEnv, "")
	dir := t.TempDir()
	inv := filepath.Join(dir, "fleet.yaml")
	data := "version: 1\nname: team\nsteady:\n  - {name: a, provider: lab, shape: small, count: 1}\n" +
		"state:\n  backend: \"s3://team/relayfleet?endpoint=127.0.0.1:1&disableSSL=true&s3ForcePathStyle=true&region=us-east-1\"\n"
	if err := os.WriteFile(inv, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	for _, args := range [][]string{
		{"up", "--yes"}, {"destroy", "--yes"}, {"relays"}, {"relays", "--out", filepath.Join(dir, "r.json")}, {"status"}, {"hosts"}, {"events", "status"},
	} {
		args = append(args, "--inventory", inv, "--state-dir", state)
		_, stderr, code := fleet(t, args...)
		if code != 1 || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "no passphrase for a shared backend s3://team/relayfleet?...: set $"+program.PassphraseFileEnv) ||
			!strings.Contains(stderr, "shared out of band") {
			t.Errorf("fleet %v: exit %d, stderr %q: want one line saying how the team shares its passphrase", args, code, stderr)
		}
		if _, err := os.Stat(filepath.Join(state, "passphrase")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("fleet %s generated a passphrase into the state dir", args[0])
		}
	}
	_, stderr, code := fleet(t, "up", "--inventory", inv, "--state-dir", state, "--backend", "file:///srv/other")
	if code != 2 || !strings.Contains(stderr, "flag --backend file:///srv/other differs from the fleet file's state.backend s3://team/relayfleet?...") {
		t.Errorf("a conflicting --backend: exit %d, %q", code, stderr)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(strings.Replace(data, "region=us-east-1", "region=us-east-1&aws_secret_access_key=s3cr3t", 1)), 0o644)
	_, stderr, code = fleet(t, "up", "--inventory", bad, "--state-dir", state)
	if code == 0 || !strings.Contains(stderr, "state.backend") || !strings.Contains(stderr, "carries a credential") || strings.Contains(stderr, "s3cr3t") {
		t.Errorf("a backend URL with a key: exit %d, %q", code, stderr)
	}
}
