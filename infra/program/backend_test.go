package program

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
)

const s3Backend = "s3://team-bucket/relayfleet?endpoint=127.0.0.1:8333&disableSSL=true&s3ForcePathStyle=true&region=us-east-1"

// TestFleetFileNamesTheBackend: the fleet file's state.backend is the
// stack's backend; a flag or $PULUMI_BACKEND_URL that names the same one
// is fine, another is a usage error naming both; without it, the flag,
// then the environment, then the state dir's file backend.
func TestFleetFileNamesTheBackend(t *testing.T) {
	t.Setenv(BackendEnv, "")
	dir := t.TempDir()
	fleet := &inventories.Fleet{Name: "f", State: inventories.State{Backend: s3Backend}}

	st := &Stack{Fleet: fleet, StateDir: dir}
	if got, err := st.Backend(); err != nil || got != s3Backend {
		t.Fatalf("backend = %q, %v; want the fleet file's %s", got, err, s3Backend)
	}
	if _, err := os.Stat(filepath.Join(dir, "backend")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file backend was made in the state dir beside the fleet file's: %v", err)
	}
	if remote, err := st.Remote(); !remote || err != nil {
		t.Errorf("Remote = %v, %v; want true", remote, err)
	}
	st = &Stack{Fleet: fleet, StateDir: dir, BackendURL: s3Backend}
	if got, err := st.Backend(); err != nil || got != s3Backend {
		t.Errorf("the flag naming the same backend: %q, %v", got, err)
	}
	st = &Stack{Fleet: fleet, StateDir: dir, BackendURL: "file:///tmp/other"}
	_, err := st.Backend()
	var ue *cli.UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "flag --backend file:///tmp/other differs from the fleet file's state.backend s3://team-bucket/relayfleet?...") {
		t.Errorf("a conflicting flag: %v, want a usage error naming both", err)
	}
	if strings.Contains(err.Error(), "endpoint=") {
		t.Errorf("the error shows the URL's query: %v", err)
	}
	t.Setenv(BackendEnv, "s3://another-bucket")
	if _, err := (&Stack{Fleet: fleet, StateDir: dir}).Backend(); !errors.As(err, &ue) || !strings.Contains(err.Error(), "$"+BackendEnv+" s3://another-bucket differs") {
		t.Errorf("a conflicting $%s: %v", BackendEnv, err)
	}
	// Without state.backend: the flag, then the environment.
	plain := &inventories.Fleet{Name: "f"}
	if got, _ := (&Stack{Fleet: plain, StateDir: dir, BackendURL: "file:///tmp/x"}).Backend(); got != "file:///tmp/x" {
		t.Errorf("the flag without state.backend: %q", got)
	}
	if got, _ := (&Stack{Fleet: plain, StateDir: dir}).Backend(); got != "s3://another-bucket" {
		t.Errorf("$%s without state.backend: %q", BackendEnv, got)
	}
	t.Setenv(BackendEnv, "")
	if got, _ := (&Stack{Fleet: plain, StateDir: dir}).Backend(); got != "file://"+filepath.Join(dir, "backend") {
		t.Errorf("the default: %q, want the state dir's file backend", got)
	}
}

// TestSharedBackendNeedsAGivenPassphrase: on a remote backend no
// passphrase is generated into the state dir: opening a stack or the
// records' workspace refuses in one line that says how a team shares
// it, before the Pulumi CLI runs; with one given, it is used.
func TestSharedBackendNeedsAGivenPassphrase(t *testing.T) {
	t.Setenv(BackendEnv, "")
	t.Setenv(PassphraseEnv, "")
	t.Setenv(PassphraseFileEnv, "")
	t.Setenv(PulumiEnv, "/nonexistent/pulumi") // never reached
	dir := filepath.Join(t.TempDir(), "state")
	fleet := &inventories.Fleet{Name: "f", State: inventories.State{Backend: s3Backend}}
	st := &Stack{Fleet: fleet, StateDir: dir}
	for name, call := range map[string]func() error{
		"preview":   func() error { _, err := st.Preview(context.Background()); return err },
		"workspace": func() error { _, err := st.ProjectWorkspace(context.Background(), "relayfleet-events"); return err },
	} {
		err := call()
		if !errors.Is(err, ErrNoSharedPassphrase) {
			t.Fatalf("%s: %v, want ErrNoSharedPassphrase", name, err)
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.Contains(msg, "$"+PassphraseFileEnv) || !strings.Contains(msg, "shared out of band") || strings.Contains(msg, "endpoint=") {
			t.Errorf("%s: %q: want one line naming $%s and how a team shares it, without the URL's query", name, msg, PassphraseFileEnv)
		}
		if _, err := os.Stat(filepath.Join(dir, "passphrase")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: a passphrase was generated into the state dir", name)
		}
	}
	// The file backend keeps its generated passphrase.
	local := &Stack{Fleet: &inventories.Fleet{Name: "f"}, StateDir: dir}
	if _, file, err := local.secretsPassphrase("file://" + dir + "/backend"); err != nil || file != filepath.Join(dir, "passphrase") {
		t.Fatalf("file backend: %q, %v; want the generated one", file, err)
	}
	// Now the state dir has one from before: the refusal points at it.
	if _, _, err := st.secretsPassphrase(s3Backend); !errors.Is(err, ErrNoSharedPassphrase) || !strings.Contains(err.Error(), filepath.Join(dir, "passphrase")) {
		t.Errorf("with a generated passphrase from before: %v, want the refusal naming it", err)
	}
	shared := filepath.Join(t.TempDir(), "team-pass")
	if err := os.WriteFile(shared, []byte("team secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PassphraseFileEnv, shared)
	if p, f, err := st.secretsPassphrase(s3Backend); err != nil || p != "team secret" || f != shared {
		t.Errorf("with $%s: %q from %q, %v", PassphraseFileEnv, p, f, err)
	}
	t.Setenv(PassphraseFileEnv, "")
	t.Setenv(PassphraseEnv, "env secret")
	if p, _, err := st.secretsPassphrase(s3Backend); err != nil || p != "env secret" {
		t.Errorf("with $%s: %q, %v", PassphraseEnv, p, err)
	}
}
