package program

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/provision"
)

// Env is what every command on a fleet's stack is given besides its own
// options: its settings, its streams and the fleet's relay auth key.
type Env struct {
	Settings
	// IO are the command's streams: Out takes its output and the engine's
	// progress; a person at In (a terminal) is asked to confirm.
	IO *cli.IOStreams
	// Keys is the store of the fleet's relay auth key for a stack; nil is
	// the stack itself. Clock is the time keys are read and rotated at;
	// nil is time.Now.
	Keys  func(*Stack) KeyStore
	Clock func() time.Time
	// Release points a stack's program at the fleet's release, given the
	// --relay-binary value (Stack.UseRelease, which nil is).
	Release func(ctx context.Context, st *Stack, relayFlag string, first bool, notes io.Writer) error
	// Lock, when set, takes the fleet's lease for a command that changes
	// it (LockFleet), returning the context the command then runs in and
	// the release; nil takes none (tests).
	Lock func(ctx context.Context, st *Stack) (context.Context, func(), error)
}

// useRelease is e.Release, or st.UseRelease.
func (e Env) useRelease(ctx context.Context, st *Stack, first bool) error {
	if e.Release != nil {
		return e.Release(ctx, st, e.RelayBinary, first, e.IO.ErrOut)
	}
	return st.UseRelease(ctx, e.RelayBinary, first, e.IO.ErrOut)
}

func (e Env) keyStore(st *Stack) KeyStore {
	if e.Keys == nil {
		return st
	}
	return e.Keys(st)
}

func (e Env) now() time.Time {
	if e.Clock == nil {
		return time.Now()
	}
	return e.Clock()
}

// authKeys is FleetAuthKeys for st's store at e's time.
func (e Env) authKeys(ctx context.Context, st *Stack, create bool) (string, []provision.AuthKey, error) {
	return FleetAuthKeys(ctx, e.keyStore(st), e.now(), create)
}

// ApplyOptions are the options of fleet up, preview and destroy.
type ApplyOptions struct {
	Env
	// Yes goes ahead without asking when boxes that serve listeners would
	// be replaced or destroyed (--yes).
	Yes bool
	// Prober reads the listeners of the boxes of one backend, given the
	// stack's provider configuration (events.SSHProbe); one is made per
	// backend and closed after when it is an io.Closer. Required by
	// FleetUp and FleetDestroy.
	Prober func(provider.Config) ListenerProber
	// Changed, when set, is called with the state dir once an up or a
	// destroy changed the stacks (fleet monitor's targets follow).
	Changed func(stateDir string)
	// Sync, when set, rewrites the state dir's relays file from every
	// stack of the fleet in the backend once an up or a destroy changed
	// the steady stack (events.SyncIfShared: on a shared backend, the
	// events other machines run are listed too); it returns the file's
	// path, "" when it did nothing.
	Sync func(ctx context.Context, st *Stack) (string, error)
}

// sync is o.Sync, when there is one; what says which command ran.
func (o ApplyOptions) sync(ctx context.Context, st *Stack, what string) error {
	if o.Sync == nil {
		return nil
	}
	path, err := o.Sync(ctx, st)
	if err != nil {
		return fmt.Errorf("%s done, but the relays file was not rewritten from the backend (run fleet relays): %w", what, err)
	}
	if path != "" {
		fmt.Fprintf(o.IO.Out, "relays file: %s (every stack of the fleet in the backend)\n", path)
	}
	return nil
}

func (o ApplyOptions) changed(stateDir string) {
	if o.Changed != nil {
		o.Changed(stateDir)
	}
}

// loadWithKeys loads the stack, progress to Out, and gives its program
// the fleet's relay auth keys and relay TLS seed, made on the first up, and the fleet's
// release (recorded as its first when record is set and it has none).
func (o ApplyOptions) loadWithKeys(ctx context.Context, record bool) (*Stack, error) {
	st, err := o.Load(o.IO.Out)
	if err != nil {
		return nil, err
	}
	return st, o.withKeys(ctx, st, record)
}

// withKeys is loadWithKeys for a loaded stack.
func (o ApplyOptions) withKeys(ctx context.Context, st *Stack, record bool) (err error) {
	if o.NeedsRelay {
		if err := o.useRelease(ctx, st, record); err != nil {
			return err
		}
		if err := CheckKeysForRelease(ctx, o.keyStore(st), st.Program.RelayBinary); err != nil {
			return err
		}
	}
	if st.Program.AuthKeys, _, err = o.authKeys(ctx, st, true); err != nil {
		return err
	}
	if st.Program.TLSSeed, err = FleetTLSSeed(ctx, o.keyStore(st), true); err != nil {
		return err
	}
	return nil
}

// FleetUp is fleet up: it brings the fleet to the inventory through
// Pulumi and writes the router's relays file. The fleet's relay auth key
// is made on the first up, kept encrypted in the stack and handed to
// every Host as a secret input. Boxes the up would replace or destroy,
// and the listeners on them, are shown and confirmed first (Confirm).
func FleetUp(ctx context.Context, o ApplyOptions) error {
	stdout := o.IO.Out
	st, err := o.Load(stdout)
	if err != nil {
		return err
	}
	ctx, unlock, err := o.lock(ctx, st)
	if err != nil {
		return err
	}
	defer unlock()
	if err := o.withKeys(ctx, st, true); err != nil {
		return err
	}
	_, doomed, err := st.PreviewDoomed(ctx)
	if err != nil {
		return err
	}
	if len(doomed) > 0 {
		if err := o.confirm(ctx, st, doomed, "up", "replace or destroy"); err != nil {
			return err
		}
	}
	res, err := st.Up(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nup: stack %s: %s\n", st.Name, ChangeSummary(res.Changes))
	for _, h := range res.Hosts {
		fmt.Fprintf(stdout, "  %-14s %-8s %-16s ports %s\n", h.Name, h.Backend, h.Address, ports(h.Ports))
	}
	fmt.Fprintf(stdout, "relays file: %s\n", res.RelaysFile)
	err = o.sync(ctx, st, "up")
	o.changed(filepath.Dir(res.RelaysFile))
	return err
}

// FleetPreview is fleet preview: what fleet up would change, drift
// included.
func FleetPreview(ctx context.Context, o ApplyOptions) error {
	st, err := o.loadWithKeys(ctx, false)
	if err != nil {
		return err
	}
	changes, err := st.Preview(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.IO.Out, "\npreview: stack %s: %s\n", st.Name, ChangeSummary(changes))
	return nil
}

// FleetDestroy is fleet destroy: it destroys the stack's boxes. The boxes
// it would delete are shown with their listeners and confirmed first, as
// FleetUp's; static servers are left as they are (their relays run on)
// and not asked about.
func FleetDestroy(ctx context.Context, o ApplyOptions) error {
	stdout := o.IO.Out
	st, err := o.Load(stdout)
	if err != nil {
		return err
	}
	ctx, unlock, err := o.lock(ctx, st)
	if err != nil {
		return err
	}
	defer unlock()
	doomed, err := st.PreviewDestroyDoomed(ctx)
	if err != nil {
		return err
	}
	if doomed = DestroyedBoxes(doomed); len(doomed) > 0 {
		if err := o.confirm(ctx, st, doomed, "destroy", "destroy"); err != nil {
			return err
		}
	}
	changes, err := st.Destroy(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\ndestroy: stack %s: %s\n", st.Name, ChangeSummary(changes))
	err = o.sync(ctx, st, "destroy")
	o.changed(st.StateDir)
	return err
}

// confirm reads the listeners of the doomed boxes over SSH
// (DoomedListeners, one prober per backend: each logs in its own way)
// and asks (Confirm) before cmd goes ahead.
func (o ApplyOptions) confirm(ctx context.Context, st *Stack, doomed []Doomed, cmd, verb string) error {
	probes := map[string]ListenerProber{}
	defer func() {
		for _, p := range probes {
			if c, ok := p.(io.Closer); ok {
				c.Close()
			}
		}
	}()
	boxes := st.DoomedListeners(ctx, doomed, func(backend string) ListenerProber {
		p := probes[backend]
		if p == nil {
			p = o.Prober(st.ProviderConfig())
			probes[backend] = p
		}
		return p
	})
	return Confirm(o.IO.Out, cli.ContextReader(ctx, o.IO.In), o.IO.InTerminal(), o.Yes, boxes, cmd, verb)
}

func ports(ps []int) string {
	var s []string
	for _, p := range ps {
		s = append(s, fmt.Sprint(p))
	}
	return strings.Join(s, ",")
}
