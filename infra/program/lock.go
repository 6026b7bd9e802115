package program

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/relayfleet/relayfleet/infra/lease"
	"github.com/relayfleet/relayfleet/inventories"
)

// LockOptions say how a command takes its fleet's lease.
type LockOptions struct {
	// Command names the command in the lease ("fleet up").
	Command string
	// Wait is how long to wait for another holder (0: refuse at once,
	// naming it).
	Wait time.Duration
	// TTL is the lease's life without a renewal (lease.DefaultTTL).
	TTL time.Duration
	// Waiting, when set, is told once which holder a take waits for.
	Waiting io.Writer
	// Existing says the command works on a stack that exists: a state dir
	// without a file backend (and no other backend named: the fleet file's
	// state.backend, --backend, $PULUMI_BACKEND_URL) holds none, so
	// nothing is locked (nor a backend made) and the command goes on to
	// say there is no stack.
	Existing bool
}

// LockFleet takes the lease of the stack's fleet in its backend (package
// lease), and makes the stack check its fence before every write to the
// shared state (the release record, the relays file, the fleet's keys).
// Every step taken under the lease runs in the held context; call
// release when done.
// Held is nil (and release does nothing) for an Existing stack without a
// backend.
func LockFleet(ctx context.Context, st *Stack, o LockOptions) (*lease.Held, func(), error) {
	// The backend as named (the fleet file's state.backend first): only
	// the state dir's own file backend may be missing.
	configured, err := st.Configured()
	if err != nil {
		return nil, nil, err
	}
	if o.Existing && configured == "" {
		dir := st.StateDir
		if dir == "" {
			var err error
			if dir, err = DefaultStateDir(); err != nil {
				return nil, nil, err
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "backend")); errors.Is(err, fs.ErrNotExist) {
			return nil, func() {}, nil
		}
	}
	backend, err := st.Backend()
	if err != nil {
		return nil, nil, err
	}
	// A shared backend without the team's passphrase is refused before
	// the store is touched (the lease is the first thing written there).
	if inventories.IsRemoteBackend(backend) {
		if _, _, err := st.secretsPassphrase(backend); err != nil {
			return nil, nil, err
		}
	}
	l, err := lease.Open(ctx, backend, st.Fleet.Name)
	if err != nil {
		return nil, nil, err
	}
	l.TTL = o.TTL
	if o.Waiting != nil {
		l.Waiting = func(s lease.State) {
			fmt.Fprintf(o.Waiting, "waiting for fleet %s's lease, held by %s\n", st.Fleet.Name, s.Holder)
		}
	}
	held, err := l.Take(ctx, lease.Self(o.Command), o.Wait)
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	st.Fence = held.Check
	return held, func() {
		st.Fence = nil
		held.Release()
		l.Close()
	}, nil
}

// fence checks the fleet's lease before a write to the shared state: nil
// when the stack is used without one (tests, reads).
func (s *Stack) fence(ctx context.Context) error {
	if s.Fence == nil {
		return nil
	}
	if err := s.Fence(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("stack %s: not written: %w", s.Name, err)
	}
	return nil
}

// lock takes the fleet's lease through e.Lock, when set.
func (e Env) lock(ctx context.Context, st *Stack) (context.Context, func(), error) {
	if e.Lock == nil {
		return ctx, func() {}, nil
	}
	return e.Lock(ctx, st)
}
