package program

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// TestConfigComesBackFromTheBackend: a stack's secret configuration (the
// relay auth keys, cloud tokens) set from one state dir and used by an
// update is restored from the backend in another, empty, state dir, as
// openStack does before it reads or sets configuration.
func TestConfigComesBackFromTheBackend(t *testing.T) {
	testutil.Short(t, "make test-long (runs the Pulumi CLI)")
	if _, err := FindPulumi(""); err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(PassphraseEnv, "one passphrase for both state dirs")
	be := filepath.Join(t.TempDir(), "backend")
	os.MkdirAll(be, 0o700)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	open := func(dir string) (auto.Stack, string) {
		t.Helper()
		s := &Stack{StateDir: dir, BackendURL: "file://" + be}
		ws, err := s.ProjectWorkspace(ctx, "relayfleet-configtest")
		if err != nil {
			t.Fatal(err)
		}
		ws.SetProgram(func(ctx *pulumi.Context) error { ctx.Export("x", pulumi.String("y")); return nil })
		st, err := auto.UpsertStack(ctx, "f", ws)
		if err != nil {
			t.Fatal(err)
		}
		return st, ws.WorkDir()
	}
	a, _ := open(t.TempDir())
	if err := setSecretConfig(ctx, a, "f", RelayAuthKeysKey, "key-1 material"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Up(ctx); err != nil {
		t.Fatal(err)
	}
	b, work := open(t.TempDir())
	if err := refreshConfig(ctx, b, work, "f"); err != nil {
		t.Fatal(err)
	}
	v, err := b.GetConfig(ctx, SecretNamespace+":"+RelayAuthKeysKey)
	if err != nil || v.Value != "key-1 material" || !v.Secret {
		t.Fatalf("in the empty state dir: %+v, %v; want the secret from the backend", v, err)
	}
	// A state dir that has the stack's configuration keeps its own.
	if err := refreshConfig(ctx, b, work, "f"); err != nil {
		t.Fatal(err)
	}
}
