package events

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/lease"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/atomicfile"
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
	// LeaseTTL is how long the fleet's lease outlives a holder that
	// stopped renewing it (DefaultLeaseTTL when 0).
	LeaseTTL time.Duration
	// Wait is how long the reconcile waits for another command that holds
	// the fleet's lease (0: it refuses at once, naming it); Command names
	// this one in the lease ("fleet events reconcile" when empty).
	Wait    time.Duration
	Command string
	// Retention is the Reconciler's (DefaultRetention when 0).
	Retention time.Duration
	// Log receives one line per action (nothing when nil).
	Log *slog.Logger
	// FromRecords, when set, makes an events file (or a fleet file) that
	// does not parse no reason to stop: Open returns a Reconciler without
	// Events, FileErr the parse error, whose Reconcile tears down from the
	// records the events that ended (fleet events reconcile). Its fleet
	// is the one the last good read of this events file named (kept in
	// the state dir).
	FromRecords bool
}

// files are what an events file gives: the events, the fleet they are
// for, its catalogue and calibration.
type files struct {
	evs   *inventories.Events
	fleet *inventories.Fleet
	cat   *inventories.Catalogue
	cal   *inventories.Calibration
}

func loadFiles(path string) (files, error) {
	cat, err := inventories.LoadCatalogue(inventories.Beside(path, inventories.ProvidersFile))
	if err != nil {
		return files{}, err
	}
	evs, fleet, err := inventories.LoadEvents(path, cat)
	if err != nil {
		return files{cat: cat}, err
	}
	cal, err := inventories.LoadCalibration(inventories.Beside(evs.FleetPath, inventories.CalibrationFile))
	if err != nil {
		return files{cat: cat}, err
	}
	return files{evs: evs, fleet: fleet, cat: cat, cal: cal}, nil
}

// lastGood is what the state dir keeps of the last good read of an
// events file: the fleet it names, for a reconcile whose file does not
// parse (Options.FromRecords).
type lastGood struct {
	EventsFile string `json:"events_file"`
	Fleet      string `json:"fleet"`
	FleetFile  string `json:"fleet_file"`
}

// lastGoodPath is where the state dir keeps the last good read of the
// events file at path.
func lastGoodPath(stateDir, path string) string {
	sum := sha256.Sum256([]byte(absPath(path)))
	return filepath.Join(stateDir, "cache", "events-files", hex.EncodeToString(sum[:8])+".json")
}

func (g lastGood) write(stateDir string) error {
	data, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		return err
	}
	path := lastGoodPath(stateDir, g.EventsFile)
	data = append(data, '\n')
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil // as the last run left it
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("events file cache: %w", err)
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("events file cache: %w", err)
	}
	return nil
}

// errNeverRead says that no reconcile in the state dir read the events
// file: its fleet, and so its records, are unknown.
var errNeverRead = errors.New("no reconcile in this state dir ever read the events file")

// readLastGood is the last good read of the events file at path;
// errNeverRead when this state dir never had one.
func readLastGood(stateDir, path string) (lastGood, error) {
	var g lastGood
	data, err := os.ReadFile(lastGoodPath(stateDir, path))
	if errors.Is(err, fs.ErrNotExist) {
		return g, errNeverRead
	}
	if err != nil {
		return g, fmt.Errorf("events file cache: %w", err)
	}
	if err := json.Unmarshal(data, &g); err != nil || g.Fleet == "" {
		return g, fmt.Errorf("events file cache %s: no fleet in it (%v)", lastGoodPath(stateDir, path), err)
	}
	return g, nil
}

// Open reads the files and builds the Reconciler they describe: the
// event stacks (their relays verify tokens with the fleet's key), the
// records and the lease in the Pulumi backend, the SSH prober and the
// backends for the sweep. Close it when done.
func Open(ctx context.Context, o Options) (*Reconciler, error) {
	f, fileErr := loadFiles(o.EventsFile)
	if fileErr != nil && !o.FromRecords {
		return nil, fileErr
	}
	st := o.Stack
	var err error
	if st.StateDir == "" {
		if st.StateDir, err = program.DefaultStateDir(); err != nil {
			return nil, errors.Join(fileErr, err)
		}
	}
	if fileErr != nil {
		// The records say what to tear down; the fleet is the one the
		// last good read named. A file never read here has none.
		g, err := readLastGood(st.StateDir, o.EventsFile)
		if errors.Is(err, errNeverRead) {
			return nil, fileErr
		}
		if err != nil {
			return nil, errors.Join(fileErr, err)
		}
		f.fleet = &inventories.Fleet{Name: g.Fleet}
		if f.cat == nil {
			f.cat, _ = inventories.LoadCatalogue(inventories.Beside(o.EventsFile, inventories.ProvidersFile))
		}
		f.cal, _ = inventories.LoadCalibration(inventories.Beside(g.FleetFile, inventories.CalibrationFile))
	} else if err := (lastGood{EventsFile: absPath(o.EventsFile), Fleet: f.fleet.Name, FleetFile: absPath(f.evs.FleetPath)}).write(st.StateDir); err != nil {
		return nil, err
	}
	evs, fleet, cat, cal := f.evs, f.fleet, f.cat, f.cal
	st.Fleet, st.Catalogue = fleet, cat
	if evs != nil {
		// Every burst box runs the fleet's release, whatever build lies
		// beside the binary running the reconcile.
		var notes strings.Builder
		if err := st.UseRelease(ctx, o.RelayBinary, true, &notes); err != nil {
			return nil, err
		}
		if o.Log != nil && notes.Len() > 0 {
			o.Log.Info(strings.TrimSpace(notes.String()))
		}
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
	backendURL, err := st.Backend()
	if err != nil {
		return nil, err
	}
	return &Reconciler{
		Events: evs, Fleet: fleet, Catalogue: cat, Calibration: cal,
		Store: &PulumiStore{WS: ws, Fleet: fleet.Name, Backend: backendURL, TTL: ttl, Wait: o.Wait, Command: o.Command, Waiting: func(s lease.State) {
			if o.Log != nil {
				o.Log.Info("waiting for the fleet's lease", "holder", s.Holder.String(), "until", s.Expires.UTC().Format(time.RFC3339))
			}
		}},
		SteadyHosts: fleetStack.ReadHostsOutput,
		StateDir:    st.StateDir, Release: st.Program.Release,
		Stacks:   &KeyedStacks{PulumiStacks: PulumiStacks{Template: st}, FleetStack: fleetStack},
		Probe:    &SSHProbe{Lab: cfg, KeyFile: cfg.SSHKeyFile},
		Backends: func(name string) (backend.Backend, error) { return provider.OpenBackend(name, cfg) },
		Log:      o.Log, Retention: o.Retention, FileErr: fileErr,
	}, nil
}

// absPath is path made absolute, or path when that fails.
func absPath(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// openBackend puts the cloud tokens kept as secrets in the fleet's stack
// (fleet secret set) into st (each event's stack gets them) and into the
// backends' settings (for the sweep and the exporter's lists), and opens
// the workspace of the reconciler's records and lease, which live in the
// Pulumi backend beside the stacks: the state dir only caches them.
func openBackend(ctx context.Context, st *program.Stack, evs *inventories.Events, fleet string, lab provider.Config) (provider.Config, auto.Workspace, error) {
	// Every event's backend could be a cloud when the events file does
	// not parse.
	cloud := []inventories.Event{{Burst: inventories.Pool{Box: inventories.Box{Provider: provider.BackendHcloud}}}}
	if evs != nil {
		cloud = evs.Events
	}
	for _, ev := range cloud {
		if !slices.ContainsFunc(ev.Burst.Choices(), func(c inventories.Candidate) bool {
			return c.Provider == provider.BackendHcloud || c.Provider == provider.BackendDigitalOcean
		}) {
			continue
		}
		steady := *st
		steady.Name = fleet
		secrets, err := steady.ReadSecrets(ctx)
		if err != nil {
			return provider.Config{}, nil, err
		}
		// Host inputs, not provider config.
		delete(secrets, program.RelayAuthKeysKey)
		delete(secrets, program.RelayTLSSeedKey)
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
	backendURL, err := st.Backend()
	if err != nil {
		return nil, err
	}
	return &Watch{
		Fleet: fleet.Name,
		Store: &PulumiStore{WS: ws, Fleet: fleet.Name, Backend: backendURL},
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

// FleetOrigins are the URLs, pinned, of the origin boxes the fleet's
// stack holds (program.OriginURLs of its hosts output), which an event's
// edges pull from; none for a fleet without an origin group.
func FleetOrigins(ctx context.Context, fleetStack *program.Stack) ([]string, error) {
	if fleetStack.Fleet == nil || fleetStack.Fleet.Origins == nil {
		return nil, nil
	}
	hosts, _, err := fleetStack.ReadHostsOutput(ctx)
	if err != nil {
		return nil, fmt.Errorf("fleet's origins: %w", err)
	}
	return program.OriginURLs(hosts), nil
}

// KeyedStacks are event stacks whose relays verify tokens with the
// fleet's key: it is read from the fleet's stack when a burst stack first
// goes up in this run (so a rotation reaches burst boxes at the next
// reconcile), and handed to its Hosts as a secret input, with the fleet's
// relay TLS seed, from which each burst box's TLS key (pinned in the
// relays file) derives, and the fleet's origin URLs with their pins
// (from the fleet stack's hosts output), which its edges pull from.
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
		if err := program.CheckKeysForRelease(ctx, k.FleetStack, k.Template.Program.RelayBinary); err != nil {
			k.mu.Unlock()
			return nil, err
		}
		keys, _, err := program.FleetAuthKeys(ctx, k.FleetStack, time.Now(), true)
		if err != nil {
			k.mu.Unlock()
			return nil, err
		}
		seed, err := program.FleetTLSSeed(ctx, k.FleetStack, true)
		if err != nil {
			k.mu.Unlock()
			return nil, err
		}
		// The fleet's origin boxes, pinned from the fleet's stack: the
		// event's edges pull from them (program.DeployBurst).
		up, err := FleetOrigins(ctx, k.FleetStack)
		if err != nil {
			k.mu.Unlock()
			return nil, err
		}
		k.Template.Program.Upstream = up
		// Set once, before any Up reads the template.
		k.keys, k.Template.Program.AuthKeys, k.Template.Program.TLSSeed = keys, keys, seed
	}
	k.mu.Unlock()
	return k.PulumiStacks.Up(ctx, stack, b)
}
