package program

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/relayfleet/relayfleet/infra/lease"
	"github.com/relayfleet/relayfleet/inventories"
)

// TestLockFleetOnTheFleetFilesBackend: a command on an existing stack
// (converge, rollout: LockOptions.Existing) whose fleet file names the
// backend (state.backend) takes the fleet's lease there, though its state
// dir has no file backend of its own; a second is refused naming it. (It
// took none: only --backend and $PULUMI_BACKEND_URL were looked at, so
// two operators on an s3:// fleet converged and rolled out unlocked.)
func TestLockFleetOnTheFleetFilesBackend(t *testing.T) {
	t.Setenv(BackendEnv, "")
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.MkdirAll(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	f := &inventories.Fleet{Name: "tm", State: inventories.State{Backend: "file://" + shared}}
	ctx := context.Background()
	a := &Stack{Fleet: f, StateDir: filepath.Join(t.TempDir(), "a")}
	held, release, err := LockFleet(ctx, a, LockOptions{Command: "fleet rollout", Existing: true})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if held == nil {
		t.Fatal("fleet rollout on the fleet file's backend took no lease")
	}
	b := &Stack{Fleet: f, StateDir: filepath.Join(t.TempDir(), "b")}
	_, _, err = LockFleet(ctx, b, LockOptions{Command: "fleet converge", Existing: true})
	var he *lease.HeldError
	if !errors.As(err, &he) || he.State.Holder.Command != "fleet rollout" {
		t.Fatalf("a second command while the rollout holds the lease: %v, want it refused naming fleet rollout", err)
	}
	if _, err := os.Stat(filepath.Join(b.StateDir, "backend")); err == nil {
		t.Error("the refused command made a file backend in its state dir")
	}

	// Without a backend named and none in the state dir: nothing locked.
	c := &Stack{Fleet: &inventories.Fleet{Name: "tm"}, StateDir: filepath.Join(t.TempDir(), "c")}
	held, release, err = LockFleet(ctx, c, LockOptions{Command: "fleet converge", Existing: true})
	if err != nil || held != nil {
		t.Fatalf("no backend: held %v, err %v; want nothing locked", held, err)
	}
	release()
}
