package events

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
)

// Options are what Open builds a Reconciler from: what fleet events
// reconcile and fleet burst take on their command line.
type Options struct {
	// EventsFile is the events file; the fleet file it names, and the
	// providers and calibration files beside them, are read with it.
	EventsFile string
	// Stack is the template of every stack: the Pulumi backend and CLI,
	// the state dir ("" = program.DefaultStateDir), provider config, the
	// relay build (Program.RelayBinary, Program.Release) and where
	// Pulumi's progress goes. Open sets its Fleet and Catalogue, and the
	// cloud tokens kept as secrets in the fleet's stack.
	Stack program.Stack
	// RelayBinary is --relay-binary: the fleet's recorded release, which
	// every burst box runs, may only be repeated; a fleet without one
	// takes it (or the build beside the fleet binary) as its first
	// (program.Stack.UseRelease).
	RelayBinary string
	// Lab is how boxes are reached: the lab's settings and the SSH key
	// for static servers. Open adds the cloud tokens.
	Lab provider.Config
	// LeaseTTL is how long the reconcile lease outlives a holder that
	// stopped renewing it (DefaultLeaseTTL when 0).
	LeaseTTL time.Duration
	// Retention is the Reconciler's (DefaultRetention when 0).
	Retention time.Duration
	// Log receives one line per action (nothing when nil).
	Log *slog.Logger
}

// Open reads the files and builds the Reconciler they describe: the
// event stacks (their relays verify tokens with the fleet's key), the
// records and the lease in the Pulumi backend, the SSH prober and the
// backends for the sweep. Close it when done.
func Open(ctx context.Context, o Options) (*Reconciler, error) {
	cat, err := inventories.LoadCatalogue(inventories.Beside(o.EventsFile, inventories.ProvidersFile))
	if err != nil {
		return nil, err
	}
	evs, fleet, err := inventories.LoadEvents(o.EventsFile, cat)
	if err != nil {
		return nil, err
	}
	cal, err := inventories.LoadCalibration(inventories.Beside(evs.FleetPath, inventories.CalibrationFile))
	if err != nil {
		return nil, err
	}
	st := o.Stack
	st.Fleet, st.Catalogue = fleet, cat
	if st.StateDir == "" {
		if st.StateDir, err = program.DefaultStateDir(); err != nil {
			return nil, err
		}
	}
	// Every burst box runs the fleet's release, whatever build lies
	// beside the binary running the reconcile.
	var notes strings.Builder
	if err := st.UseRelease(ctx, o.RelayBinary, true, &notes); err != nil {
		return nil, err
	}
	if o.Log != nil && notes.Len() > 0 {
		o.Log.Info(strings.TrimSpace(notes.String()))
	}
	cfg, ws, err := openBackend(ctx, &st, evs, fleet.Name, o.Lab)
	if err != nil {
		return nil, err
	}
	ttl := o.LeaseTTL
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	fleetStack := fleetStackOf(&st, fleet.Name)
	return &Reconciler{
		Events: evs, Fleet: fleet, Catalogue: cat, Calibration: cal,
		Store:       &PulumiStore{WS: ws, Fleet: fleet.Name, TTL: ttl},
		SteadyHosts: fleetStack.ReadHostsOutput,
		StateDir:    st.StateDir, Release: st.Program.Release,
		Stacks:   &KeyedStacks{PulumiStacks: PulumiStacks{Template: st}, FleetStack: fleetStack},
		Probe:    &SSHProbe{Lab: cfg, KeyFile: cfg.SSHKeyFile},
		Backends: func(name string) (backend.Backend, error) { return provider.OpenBackend(name, cfg) },
		Log:      o.Log, Retention: o.Retention,
	}, nil
}

// openBackend puts the cloud tokens kept as secrets in the fleet's stack
// (fleet secret set) into st (each event's stack gets them) and into the
// backends' settings (for the sweep and the exporter's lists), and opens
// the workspace of the reconciler's records and lease, which live in the
// Pulumi backend beside the stacks: the state dir only caches them.
func openBackend(ctx context.Context, st *program.Stack, evs *inventories.Events, fleet string, lab provider.Config) (provider.Config, auto.Workspace, error) {
	for _, ev := range evs.Events {
		if ev.Burst.Provider != provider.BackendHcloud && ev.Burst.Provider != provider.BackendDigitalOcean {
			continue
		}
		steady := *st
		steady.Name = fleet
		secrets, err := steady.ReadSecrets(ctx)
		if err != nil {
			return provider.Config{}, nil, err
		}
		delete(secrets, program.RelayAuthKeysKey) // a Host input, not provider config
		st.Secrets = secrets
		break
	}
	cfg := lab
	cfg.HcloudToken, cfg.DigitalOceanToken = st.Secrets[program.HcloudTokenKey], st.Secrets[program.DigitalOceanTokenKey]
	ws, err := st.ProjectWorkspace(ctx, StoreProject)
	if err != nil {
		return provider.Config{}, nil, err
	}
	return cfg, ws, nil
}

// Watch is what the events exporter reads of a fleet: its records, its
// heartbeat and lease (Store), the events file as it is now, and the
// backends its events' boxes are on.
type Watch struct {
	Fleet string
	Store *PulumiStore
	// ReadEvents reads the events file again.
	ReadEvents func() (*inventories.Events, error)
	Backends   func(name string) (backend.Backend, error)
}

// OpenWatch reads the files as Open does (the events file, the fleet and
// providers files beside it) and opens what the exporter reads, for the
// same backend and passphrase as the reconciler; it starts nothing and
// locks nothing.
func OpenWatch(ctx context.Context, o Options) (*Watch, error) {
	cat, err := inventories.LoadCatalogue(inventories.Beside(o.EventsFile, inventories.ProvidersFile))
	if err != nil {
		return nil, err
	}
	evs, fleet, err := inventories.LoadEvents(o.EventsFile, cat)
	if err != nil {
		return nil, err
	}
	st := o.Stack
	st.Fleet, st.Catalogue = fleet, cat
	if st.StateDir == "" {
		if st.StateDir, err = program.DefaultStateDir(); err != nil {
			return nil, err
		}
	}
	cfg, ws, err := openBackend(ctx, &st, evs, fleet.Name, o.Lab)
	if err != nil {
		return nil, err
	}
	path := o.EventsFile
	return &Watch{
		Fleet: fleet.Name,
		Store: &PulumiStore{WS: ws, Fleet: fleet.Name},
		ReadEvents: func() (*inventories.Events, error) {
			cat, err := inventories.LoadCatalogue(inventories.Beside(path, inventories.ProvidersFile))
			if err != nil {
				return nil, err
			}
			evs, _, err := inventories.LoadEvents(path, cat)
			return evs, err
		},
		Backends: func(name string) (backend.Backend, error) { return provider.OpenBackend(name, cfg) },
	}, nil
}

// Close closes what the Reconciler holds open: its prober's SSH
// connections.
func (r *Reconciler) Close() error {
	if c, ok := r.Probe.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// fleetStackOf is the fleet's own stack, as st's template sees it.
func fleetStackOf(st *program.Stack, name string) *program.Stack {
	s := *st
	s.Name, s.Burst, s.Secrets = name, nil, nil
	return &s
}

// KeyedStacks are event stacks whose relays verify tokens with the
// fleet's key: it is read from the fleet's stack when a burst stack first
// goes up in this run (so a rotation reaches burst boxes at the next
// reconcile), and handed to its Hosts as a secret input.
type KeyedStacks struct {
	PulumiStacks
	FleetStack *program.Stack

	mu   sync.Mutex
	keys string
}

// Up implements Stacks.
func (k *KeyedStacks) Up(ctx context.Context, stack string, b program.Burst) ([]program.HostEntry, error) {
	k.mu.Lock()
	if k.keys == "" {
		keys, _, err := program.FleetAuthKeys(ctx, k.FleetStack, time.Now(), true)
		if err != nil {
			k.mu.Unlock()
			return nil, err
		}
		// Set once, before any Up reads the template.
		k.keys, k.Template.Program.AuthKeys = keys, keys
	}
	k.mu.Unlock()
	return k.PulumiStacks.Up(ctx, stack, b)
}
