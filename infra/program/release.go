package program

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/relayfleet/relayfleet/infra/releases"
)

// Releases opens the fleet's release state in the stack's backend: the
// history (a stack of releases.Project named after the fleet) and the
// builds, cached in STATEDIR/releases. Close it when done.
func (s *Stack) Releases(ctx context.Context) (*releases.Store, error) {
	backend, err := s.Backend()
	if err != nil {
		return nil, err
	}
	ws, err := s.ProjectWorkspace(ctx, releases.Project)
	if err != nil {
		return nil, err
	}
	store, err := releases.OpenStore(ctx, ws, s.Fleet.Name, backend, filepath.Join(s.StateDir, "releases"))
	if err != nil {
		return nil, err
	}
	store.Fence = s.Fence
	return store, nil
}

// UseRelease points the program at the relay build every Host runs: the
// fleet's recorded release (releases.Store.Resolve), or for a fleet
// without one the --relay-binary build (flagValue, "" for the one beside
// the fleet binary), recorded as its first when first is set. A note on
// where the build came from goes to notes (nil: nowhere).
func (s *Stack) UseRelease(ctx context.Context, flagValue string, first bool, notes io.Writer) error {
	store, err := s.Releases(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	r, err := store.Resolve(ctx, flagValue, first)
	if err != nil {
		return err
	}
	if r.Note != "" && notes != nil {
		fmt.Fprintln(notes, r.Note)
	}
	s.Program.RelayBinary, s.Program.Release = r.Path, r.Digest
	return nil
}
