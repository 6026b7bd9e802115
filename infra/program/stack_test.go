package program

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

func TestPassphraseGeneratedOnceAndPrivate(t *testing.T) {
	t.Setenv(PassphraseEnv, "")
	t.Setenv(PassphraseFileEnv, "")
	dir := t.TempDir()
	p1, file, err := passphrase(dir)
	if err != nil {
		t.Fatal(err)
	}
	if file != filepath.Join(dir, "passphrase") {
		t.Fatalf("passphrase file %q, want the state dir's (the CLI reads it through %s)", file, PassphraseFileEnv)
	}
	if len(p1) < 32 {
		t.Fatalf("passphrase of %d characters", len(p1))
	}
	st, err := os.Stat(filepath.Join(dir, "passphrase"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("passphrase file mode %v, want 0600", st.Mode().Perm())
	}
	p2, _, err := passphrase(dir)
	if err != nil || p2 != p1 {
		t.Fatalf("second read: %v, same=%v; want the stored passphrase", err, p2 == p1)
	}
	other := filepath.Join(t.TempDir(), "pass")
	os.WriteFile(other, []byte("from-a-file\n"), 0o600)
	t.Setenv(PassphraseFileEnv, other)
	if p, f, err := passphrase(t.TempDir()); p != "from-a-file" || f != other || err != nil {
		t.Fatalf("with $%s: %q from %q (%v), want the operator's file", PassphraseFileEnv, p, f, err)
	}
	t.Setenv(PassphraseFileEnv, filepath.Join(t.TempDir(), "missing"))
	if _, _, err := passphrase(dir); err == nil || !strings.Contains(err.Error(), PassphraseFileEnv) {
		t.Fatalf("a missing passphrase file: %v", err)
	}
	t.Setenv(PassphraseFileEnv, "")
	t.Setenv(PassphraseEnv, "from-env")
	if p, f, _ := passphrase(dir); p != "from-env" || f != "" {
		t.Fatal("the environment's passphrase does not win")
	}
	if got := redact("decrypt with "+p1+" failed", p1); strings.Contains(got, p1) {
		t.Fatalf("redact left the passphrase in %q", got)
	}
}

func TestRelaysFile(t *testing.T) {
	hosts := []HostEntry{
		{Name: "b1", Address: "10.0.0.11", Ports: []int{4443, 4444}},
		{Name: "b2", Address: "2001:db8::1", Ports: []int{4443}},
	}
	dir := t.TempDir()
	path, err := SetStackHosts(dir, "lab", hosts)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, RelaysFile) {
		t.Fatalf("relays file at %s", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Relays []struct {
			URL      string `json:"url"`
			Stats    string `json:"stats"`
			Draining *bool  `json:"draining"`
		} `json:"relays"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := []string{"http://10.0.0.11:4443/", "http://10.0.0.11:4444/", "http://[2001:db8::1]:4443/"}
	if len(got.Relays) != len(want) {
		t.Fatalf("relays %s", data)
	}
	for i, r := range got.Relays {
		if r.URL != want[i] || r.Stats != want[i]+"stats" || r.Draining == nil || *r.Draining {
			t.Errorf("relay %d: %+v, want %s", i, r, want[i])
		}
	}
	if _, err := SetStackHosts(dir, "lab", nil); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(path)
	if !strings.Contains(string(data), `"relays": []`) {
		t.Fatalf("no hosts: %s, want an empty list", data)
	}
}

func TestHostsFromOutputs(t *testing.T) {
	out := auto.OutputMap{"hosts": {Value: []any{
		map[string]any{"name": "b2", "address": "10.0.0.12", "ports": []any{4443.0}},
		map[string]any{"name": "b1", "address": "10.0.0.11", "ports": []any{4443.0, 4444.0}},
	}}}
	hosts, err := HostsFromOutputs(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 2 || hosts[0].Name != "b1" || len(hosts[0].Ports) != 2 || hosts[1].Ports[0] != 4443 {
		t.Fatalf("hosts %+v", hosts)
	}
	if hs, err := HostsFromOutputs(auto.OutputMap{}); err != nil || hs != nil {
		t.Fatalf("no output: %v %v", hs, err)
	}
}

func TestFindPulumi(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "pulumi")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PulumiEnv, "")
	if got, err := FindPulumi(exe); err != nil || got != exe {
		t.Fatalf("explicit path: %q %v", got, err)
	}
	if _, err := FindPulumi(filepath.Join(dir, "missing")); !errors.Is(err, ErrNoPulumi) {
		t.Fatalf("missing explicit path: %v, want ErrNoPulumi", err)
	}
	t.Setenv(PulumiEnv, exe)
	if got, err := FindPulumi(""); err != nil || got != exe {
		t.Fatalf("from $%s: %q %v", PulumiEnv, got, err)
	}
}

// TestStateAndPassphraseModes: a state dir or a passphrase file that
// others may read (or write) is refused, with the chmod that fixes it and
// never the passphrase; private ones pass.
func TestStateAndPassphraseModes(t *testing.T) {
	t.Setenv(PassphraseEnv, "")
	t.Setenv(PassphraseFileEnv, "")
	const secret = "s3cret-passphrase-value"

	open := func(t *testing.T, dirMode, fileMode os.FileMode) (string, error) {
		dir := filepath.Join(t.TempDir(), "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if fileMode != 0 {
			if err := os.WriteFile(filepath.Join(dir, "passphrase"), []byte(secret+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(dir, "passphrase"), fileMode); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Mkdir(filepath.Join(dir, "backend"), 0o700); err != nil {
			t.Fatal(err) // the state, encrypted with a passphrase from elsewhere
		}
		if err := os.Chmod(dir, dirMode); err != nil {
			t.Fatal(err)
		}
		s := &Stack{StateDir: dir, BackendURL: "file://" + t.TempDir()}
		if _, err := s.Backend(); err != nil {
			return dir, err
		}
		_, _, err := passphrase(dir)
		return dir, err
	}
	for _, tc := range []struct {
		name              string
		dirMode, fileMode os.FileMode
		want              string // "" = passes; STATE is the state dir
	}{
		{"private", 0o700, 0o600, ""},
		{"private, read-only passphrase", 0o700, 0o400, ""},
		{"state dir with a backend, no passphrase", 0o700, 0, ""},
		{"world-readable state dir with a backend, no passphrase", 0o755, 0, "state dir STATE is mode 0755, open to others"},
		{"world-readable state dir", 0o755, 0o600, "state dir STATE is mode 0755, open to others; it holds the stack's passphrase: chmod 700 STATE"},
		{"group-readable state dir", 0o750, 0o600, "state dir STATE is mode 0750, open to others"},
		{"group-readable passphrase", 0o700, 0o640, "passphrase file STATE/passphrase is mode 0640, open to others: chmod 600 STATE/passphrase"},
		{"world-readable passphrase", 0o700, 0o644, "passphrase file STATE/passphrase is mode 0644"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state, err := open(t, tc.dirMode, tc.fileMode)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("passed, want %q", tc.want)
			}
			if want := strings.ReplaceAll(tc.want, "STATE", state); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q\nlacks %q", err, want)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q holds the passphrase or a newline", err)
			}
		})
	}

	// A state dir without a passphrase or backend yet (mkdir under umask
	// 022; caches and the relays file are no secret) is made private, not
	// refused: no secret was ever in it.
	empty := filepath.Join(t.TempDir(), "fresh")
	if err := os.MkdirAll(filepath.Join(empty, "cache"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := (&Stack{StateDir: empty, BackendURL: "file://" + t.TempDir()}).Backend(); err != nil {
		t.Errorf("a fresh state dir of mode 0755: %v", err)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("a fresh state dir: %v %v, want it made 0700", fi, err)
	}

	// The operator's $PULUMI_CONFIG_PASSPHRASE_FILE is held to the same.
	other := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(other, []byte(secret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PassphraseFileEnv, other)
	_, _, err := passphrase(t.TempDir())
	if want := "$" + PassphraseFileEnv + ": " + other + " is mode 0644, open to others: chmod 600 " + other; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("an operator's readable passphrase file: %v, want %q", err, want)
	}
	if err := os.Chmod(other, 0o600); err != nil {
		t.Fatal(err)
	}
	if p, _, err := passphrase(t.TempDir()); err != nil || p != secret {
		t.Errorf("an operator's private passphrase file: %v", err)
	}
}
