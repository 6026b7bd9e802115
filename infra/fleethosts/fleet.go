package fleethosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/provision"
)

// Fleet is a fleet's steady stack and how its hosts are reached: what the
// commands that work on the boxes (fleet converge, status, hosts,
// rollout, loadtest) open first.
type Fleet struct {
	// Stack is the steady stack: it lists the steady hosts, names the
	// event stacks and keeps the fleet's relay auth keys.
	Stack *program.Stack
	// Keys holds the relay auth keys (nil: Stack).
	Keys program.KeyStore
	// Now is the time the keys are read at (nil: time.Now).
	Now    func() time.Time
	Access Access
	// Warnings gets a "fleet: warning:" line for each way the stacks and
	// the inventory differ (nil: none are written).
	Warnings io.Writer
}

// ReadHosts lists the fleet's hosts from its stacks (Read), each warning
// written to f.Warnings.
func (f *Fleet) ReadHosts(ctx context.Context) (*Set, error) {
	set, err := Read(ctx, f.Stack)
	if err != nil {
		return nil, err
	}
	if f.Warnings != nil {
		for _, w := range set.Warnings {
			fmt.Fprintf(f.Warnings, "fleet: warning: %s\n", w)
		}
	}
	return set, nil
}

// SteadyTargets are the provision targets of the steady stack's hosts
// (StackTargets); close releases what reaching them holds.
func (f *Fleet) SteadyTargets(ctx context.Context) (targets []provision.Target, close func(), err error) {
	set, err := f.ReadHosts(ctx)
	if err != nil {
		return nil, nil, err
	}
	return StackTargets(ctx, f.Stack, set.SteadyHosts(), f.Access)
}

// AllTargets are the provision targets of every host of the stacks: the
// steady stack's and its events'.
func (f *Fleet) AllTargets(ctx context.Context) (targets []provision.Target, close func(), err error) {
	set, err := f.ReadHosts(ctx)
	if err != nil {
		return nil, nil, err
	}
	return StackTargets(ctx, f.Stack, set.Hosts, f.Access)
}

// AuthKeys are the fleet's relay auth key file and its keys
// (program.FleetAuthKeys); with create a fleet without a key gets its
// first.
func (f *Fleet) AuthKeys(ctx context.Context, create bool) (string, []provision.AuthKey, error) {
	ks, now := f.Keys, time.Now
	if ks == nil {
		ks = f.Stack
	}
	if f.Now != nil {
		now = f.Now
	}
	return program.FleetAuthKeys(ctx, ks, now(), create)
}

// Converge is fleet converge: the steady hosts brought to the fleet's
// relay auth keys, its public listen prefixes and its recorded release
// (program.Stack.UseRelease with relayFlag, --relay-binary)
// (provision.RunConverge, reporting on w). A fleet converged for the
// first time gets its first key and release, unless o.Check.
func (f *Fleet) Converge(ctx context.Context, w io.Writer, o provision.Options, relayFlag string, asJSON bool) error {
	targets, cleanup, err := f.SteadyTargets(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := f.Stack.UseRelease(ctx, relayFlag, !o.Check, f.Warnings); err != nil {
		return err
	}
	binary, err := os.ReadFile(f.Stack.Program.RelayBinary)
	if err != nil {
		return err
	}
	o.Binary = binary
	if !o.Check {
		ks := f.Keys
		if ks == nil {
			ks = f.Stack
		}
		if err := program.CheckKeysForRelease(ctx, ks, f.Stack.Program.RelayBinary); err != nil {
			return err
		}
	}
	keys, _, err := f.AuthKeys(ctx, !o.Check)
	if err != nil {
		return err
	}
	for i := range targets {
		targets[i].AuthKeys = []byte(keys)
		targets[i].PublicListen = f.Stack.Fleet.Access.PublicListen
		targets[i].MaxSessionsPerAddress = f.Stack.Fleet.Access.SessionsPerAddress()
		targets[i].UncappedAddresses = f.Stack.Fleet.Access.UncappedAddresses()
	}
	// Each box keeps the relay TLS key fleet up gave it (the relays
	// file pins it).
	ks := f.Keys
	if ks == nil {
		ks = f.Stack
	}
	seed, err := program.FleetTLSSeed(ctx, ks, !o.Check)
	switch {
	case errors.Is(err, program.ErrNoTLSSeed) && o.Check:
		// A fleet never up since keys came: its boxes have none.
	case err != nil:
		return err
	default:
		if err := program.TargetTLSKeys(targets, seed); err != nil {
			return err
		}
	}
	return provision.RunConverge(ctx, w, targets, o, asJSON)
}

// Status is fleet status: every host of the stacks read over SSH, and
// with heartbeat > 0 the fleet heartbeat heard through every process for
// that long (provision.RunStatus, reporting on w).
func (f *Fleet) Status(ctx context.Context, w io.Writer, asJSON bool, heartbeat time.Duration) error {
	targets, cleanup, err := f.AllTargets(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	return provision.RunStatus(ctx, w, targets, asJSON, heartbeat)
}

// ListOrigins is fleet hosts --origins: the URLs, pinned, of the origins
// publishers publish to, one a line on w (PublisherOrigins), for
// `relay publish $(fleet hosts --origins ...)`.
func (f *Fleet) ListOrigins(ctx context.Context, w io.Writer) error {
	set, err := Read(ctx, f.Stack)
	if err != nil {
		return err
	}
	urls, err := PublisherOrigins(f.Stack.Fleet, set)
	if err != nil {
		return err
	}
	for _, u := range urls {
		if _, err := fmt.Fprintln(w, u); err != nil {
			return err
		}
	}
	return nil
}

// List is fleet hosts: the stacks' hosts as a table on w (WriteText), or
// JSON (WriteJSON), the stacks' warnings among them; with release each
// box's current relay release is read over SSH, and a box that could not
// be read makes the error a cli.ExitError with
// provision.ExitHostsFailed.
func (f *Fleet) List(ctx context.Context, w io.Writer, asJSON, release bool) error {
	set, err := Read(ctx, f.Stack)
	if err != nil {
		return err
	}
	rows := set.Rows()
	failed := 0
	if release && len(set.Hosts) > 0 {
		targets, cleanup, err := StackTargets(ctx, f.Stack, set.Hosts, f.Access)
		if err != nil {
			return err
		}
		defer cleanup()
		failed = ReadReleases(ctx, targets, rows)
	}
	if asJSON {
		if err := WriteJSON(w, set, rows); err != nil {
			return err
		}
	} else if err := WriteText(w, set, rows, release); err != nil {
		return err
	}
	if failed > 0 {
		return &cli.ExitError{Code: provision.ExitHostsFailed, Msg: fmt.Sprintf("%d of %s could not be read", failed, text.Plural(len(rows), "host", "hosts"))}
	}
	return nil
}
