package program

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// TestSettingsLoadBadInput: each bad setting is a usage error, one line
// naming its flag, found before anything is run.
func TestSettingsLoadBadInput(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "relay")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	inv := "testdata/mixed.yaml"
	for _, tc := range []struct {
		name string
		set  Settings
		want string
	}{
		{"no inventory", Settings{}, "flag --inventory: required"},
		{"bad stack", Settings{Inventory: inv, Name: "a b"}, `flag --stack: want letters, digits, '-', '_' or '.', got "a b"`},
		{"bad backend", Settings{Inventory: inv, BackendURL: "/tmp/x"}, `flag --backend: want a URL such as file:///var/lib/relayfleet/state or s3://bucket, got "/tmp/x"`},
		{"bad subnet", Settings{Inventory: inv, LabSubnet: "10.1.2.3"}, `flag --lab-subnet: want a CIDR, got "10.1.2.3"`},
		{"no ssh key", Settings{Inventory: inv, SSHKey: filepath.Join(dir, "nokey")}, "flag --ssh-key: stat " + filepath.Join(dir, "nokey")},
		{"no pulumi", Settings{Inventory: inv, Pulumi: filepath.Join(dir, "pulumi")}, "flag --pulumi: no Pulumi CLI"},
		{"not a relay", Settings{Inventory: inv, NeedsRelay: true, RelayBinary: notELF}, "flag --relay-binary: " + notELF + " is not a Linux executable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.set.Load(nil)
			var usage *cli.UsageError
			if !errors.As(err, &usage) || !strings.HasPrefix(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Load: %v; want a usage error %q", err, tc.want)
			}
		})
	}
	if _, err := (Settings{Inventory: filepath.Join(dir, "nope.yaml")}).Load(nil); err == nil || err.Error() != filepath.Join(dir, "nope.yaml")+": no such file" {
		t.Errorf("missing inventory: %v", err)
	}
}

// TestSettingsLoad: the stack carries the fleet, its name and refresh,
// absolute paths, the lab and SSH settings as provider configuration,
// and the relay build with its digest.
func TestSettingsLoad(t *testing.T) {
	exe, err := os.Executable() // any ELF file passes as the relay build
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "id")
	if err := os.WriteFile(key, []byte("key"), 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := filepath.Abs("testdata/mixed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	set := Settings{Inventory: inv, Name: "s1", Refresh: true, StateDir: "state",
		NeedsRelay: true, RelayBinary: exe, SSHKey: key, LabDir: "lab", LabBridge: "br9", LabSubnet: "10.9.0.0/24"}
	st, err := set.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	wd := must(t, os.Getwd)
	if st.Fleet.Name != "mixed" || st.Name != "s1" || !st.Refresh || st.StateDir != filepath.Join(wd, "state") {
		t.Errorf("stack %q refresh %v state %q (fleet %q)", st.Name, st.Refresh, st.StateDir, st.Fleet.Name)
	}
	// The build is the fleet's recorded release, which Stack.UseRelease
	// reads from the backend: Load only checks the flag.
	if st.Program.RelayBinary != "" || st.Program.Release != "" {
		t.Errorf("program options %+v: Load took the --relay-binary build without asking the fleet's release", st.Program)
	}
	bad := set
	bad.RelayBinary = key
	if _, err := bad.Load(nil); err == nil || !strings.Contains(err.Error(), "flag --relay-binary") {
		t.Errorf("a --relay-binary that is no executable: %v, want it named", err)
	}
	want := provider.Config{LabDir: filepath.Join(wd, "lab"), LabBridge: "br9", LabSubnet: "10.9.0.0/24", SSHKeyFile: key}
	if got := st.ProviderConfig(); got != want {
		t.Errorf("ProviderConfig() = %+v, want %+v", got, want)
	}
	if _, ok := st.Config["labImages"]; ok {
		t.Error("an unset setting reached the configuration")
	}
}

// TestSettingsStackFor: the stack of the commands that work over SSH
// alone, its flags checked.
func TestSettingsStackFor(t *testing.T) {
	f, _ := loadFleet(t, "testdata/mixed.yaml")
	st, err := Settings{Name: "s", StateDir: "rel", BackendURL: "file:///x", Pulumi: "p"}.StackFor(f)
	if err != nil || st.Fleet != f || st.Name != "s" || !filepath.IsAbs(st.StateDir) || st.BackendURL != "file:///x" || st.Pulumi != "p" {
		t.Errorf("StackFor: %+v %v", st, err)
	}
	if _, err := (Settings{Name: "a b"}).StackFor(f); err == nil || !strings.HasPrefix(err.Error(), "flag --stack: ") {
		t.Errorf("bad stack: %v", err)
	}
	if _, err := (Settings{BackendURL: "x"}).StackFor(f); err == nil || !strings.HasPrefix(err.Error(), "flag --backend: ") {
		t.Errorf("bad backend: %v", err)
	}
}

func must(t *testing.T, f func() (string, error)) string {
	t.Helper()
	s, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return s
}
