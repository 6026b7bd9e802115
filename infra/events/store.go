package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/relayfleet/relayfleet/infra/lease"
	"github.com/relayfleet/relayfleet/infra/outputstack"
)

// Store keeps what the reconciler needs to resume: every event's record
// (which also says what the event put in the router's list) and the lease
// that lets one reconcile run at a time. PulumiStore keeps them in the
// Pulumi backend; the state dir only caches them.
type Store interface {
	// Lock takes the fleet's lease without waiting: ErrLocked, naming the
	// holder, when another holder's lease is live. The context it returns
	// is cancelled when the lease is lost (another holder took it over
	// after it expired); unlock releases it.
	Lock(ctx context.Context) (held context.Context, unlock func(), err error)
	// Load returns every record, by event name.
	Load(ctx context.Context) (map[string]*Record, error)
	// Save keeps one record (the others stay as they are).
	Save(ctx context.Context, rec *Record) error
	// Remove forgets one event's record (the others stay as they are).
	Remove(ctx context.Context, event string) error
}

// ErrLocked is what a Lock refused because another command holds the
// fleet's lease is (errors.Is): lease.ErrHeld.
var ErrLocked = lease.ErrHeld

// StoreProject is the Pulumi project that holds the reconciler's state,
// beside the fleet's stacks (program.Project) in the same backend.
const StoreProject = "relayfleet-events"

// RecordsStack is the stack of StoreProject whose "records" output holds
// a fleet's event records.
func RecordsStack(fleet string) string { return fleet + "-records" }

// DefaultLeaseTTL is how long the fleet's lease lives without a renewal;
// the holder renews it every third of that while it runs, so a lease
// outlives its holder by at most this much.
const DefaultLeaseTTL = lease.DefaultTTL

// recordsOutput is the records stack's output that holds the records.
const recordsOutput = "records"

// PulumiStore keeps a fleet's event records as the output of a stack
// (RecordsStack, project StoreProject) in the Pulumi backend. Its lock is
// the fleet's lease (package lease) in the same backend: the one every
// fleet command that changes the fleet takes, so a reconcile and a fleet
// up never run at once. Saves and removes check the lease's fence first.
// The records hold no secret: addresses, public host keys, counts and
// times.
//
// Records are read and written with the Pulumi CLI (export, import), so
// a file:// backend and a remote one behave the same, and any machine
// pointed at the backend (same URL and passphrase) reads the same state.
type PulumiStore struct {
	WS    auto.Workspace
	Fleet string
	// Backend is the Pulumi backend's URL, where the lease lives
	// (required by Lock).
	Backend string
	// TTL is the lease's life without a renewal (DefaultLeaseTTL).
	TTL time.Duration
	// Wait is how long Lock waits for another holder (0: refuse at once).
	Wait time.Duration
	// Holder says who takes the lease (default lease.Self of Command).
	Holder lease.Holder
	// Command names the holder's command (default "fleet events reconcile").
	Command string
	// Waiting, when set, is told once that Lock waits for another holder.
	Waiting func(lease.State)
	// Clock is the wall clock leases are measured on (default time.Now);
	// the reconciler's simulated clock plays no part.
	Clock func() time.Time

	mu      sync.Mutex
	loaded  bool
	stack   *outputstack.Stack
	records map[string]json.RawMessage
	held    *lease.Held
}

// openLease opens the fleet's lease in the backend.
func (s *PulumiStore) openLease(ctx context.Context) (*lease.Lease, error) {
	if s.Backend == "" {
		return nil, errors.New("event records: no backend URL for the fleet's lease")
	}
	l, err := lease.Open(ctx, s.Backend, s.Fleet)
	if err != nil {
		return nil, err
	}
	l.TTL, l.Clock, l.Waiting = s.TTL, s.Clock, s.Waiting
	if l.TTL == 0 {
		l.TTL = DefaultLeaseTTL
	}
	return l, nil
}

// Lock implements Store: it takes the fleet's lease, waiting up to Wait.
func (s *PulumiStore) Lock(ctx context.Context) (context.Context, func(), error) {
	l, err := s.openLease(ctx)
	if err != nil {
		return nil, nil, err
	}
	h := s.Holder
	if h.Host == "" {
		cmd := s.Command
		if cmd == "" {
			cmd = "fleet events reconcile"
		}
		h = lease.Self(cmd)
	}
	held, err := l.Take(ctx, h, s.Wait)
	if err != nil {
		l.Close()
		return nil, nil, err
	}
	s.mu.Lock()
	s.held = held
	s.mu.Unlock()
	return held.Context(), func() { held.Release(); l.Close() }, nil
}

// ErrLeaseLost is the cause of a held context's end when the lease was
// lost (its renewal failed, or another holder took it over).
var ErrLeaseLost = lease.ErrLost

// fence checks the lease before a write: nil when no lease is held here
// (a store used without Lock, as tests and reads do).
func (s *PulumiStore) fence(ctx context.Context) error {
	if s.held == nil {
		return nil
	}
	return s.held.Check(context.WithoutCancel(ctx))
}

// Load implements Store: the records stack's records output. A fleet
// never reconciled has none.
func (s *PulumiStore) Load(ctx context.Context) (map[string]*Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.load(ctx); err != nil {
		return nil, err
	}
	out := map[string]*Record{}
	for name, raw := range s.records {
		rec := &Record{}
		if err := json.Unmarshal(raw, rec); err != nil {
			return nil, fmt.Errorf("event record %s in stack %s/%s: %w", name, StoreProject, RecordsStack(s.Fleet), err)
		}
		out[name] = rec
	}
	return out, nil
}

// recordsStack is the records stack as an OutputStack.
func (s *PulumiStore) recordsStack() *outputstack.Stack {
	if s.stack == nil {
		s.stack = &outputstack.Stack{WS: s.WS, Project: StoreProject, Stack: RecordsStack(s.Fleet)}
	}
	return s.stack
}

func (s *PulumiStore) load(ctx context.Context) error {
	outputs, _, err := s.recordsStack().Load(ctx)
	if err != nil {
		return fmt.Errorf("event records: %w", err)
	}
	records := map[string]json.RawMessage{}
	if raw, ok := outputs[recordsOutput]; ok {
		if err := json.Unmarshal(raw, &records); err != nil {
			return fmt.Errorf("event records: stack %s/%s: records output: %w", StoreProject, RecordsStack(s.Fleet), err)
		}
	}
	s.loaded, s.records = true, records
	return nil
}

// Save implements Store: the records output is written whole, through
// the CLI's stack import (under the backend's own stack lock). Only the
// lease's holder saves (its fence is checked first), so a stack lock left
// by a save killed mid-way is stale and cleared.
func (s *PulumiStore) Save(ctx context.Context, rec *Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fence(ctx); err != nil {
		return fmt.Errorf("event record %s: not saved: %w", rec.Event, err)
	}
	if !s.loaded {
		if err := s.load(ctx); err != nil {
			return err
		}
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	s.records[rec.Event] = data
	if err := s.recordsStack().Save(ctx, map[string]any{recordsOutput: s.records, "version": 1}, true); err != nil {
		return fmt.Errorf("event record %s: %w", rec.Event, err)
	}
	return nil
}

// Remove implements Store.
func (s *PulumiStore) Remove(ctx context.Context, event string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fence(ctx); err != nil {
		return fmt.Errorf("event record %s: not removed: %w", event, err)
	}
	if !s.loaded {
		if err := s.load(ctx); err != nil {
			return err
		}
	}
	if _, ok := s.records[event]; !ok {
		return nil
	}
	kept := maps.Clone(s.records)
	delete(kept, event)
	if err := s.recordsStack().Save(ctx, map[string]any{recordsOutput: kept, "version": 1}, true); err != nil {
		return fmt.Errorf("event record %s: remove: %w", event, err)
	}
	s.records = kept
	return nil
}

// lastLine keeps a CLI error short: its last non-empty lines say why.
func lastLine(err error) string { return outputstack.LastLines(err.Error()) }

// StoredRecords reads the records the Pulumi backend holds for a fleet,
// or for every fleet when fleet is empty, by fleet and event name.
func StoredRecords(ctx context.Context, ws auto.Workspace, fleet string) ([]*Record, error) {
	fleets := []string{fleet}
	if fleet == "" {
		stacks, err := ws.ListStacks(ctx)
		if err != nil {
			return nil, fmt.Errorf("event records: %s", lastLine(err))
		}
		fleets = nil
		for _, st := range stacks {
			name := st.Name[strings.LastIndexByte(st.Name, '/')+1:]
			if f, ok := strings.CutSuffix(name, "-records"); ok {
				fleets = append(fleets, f)
			}
		}
		sort.Strings(fleets)
	}
	var out []*Record
	for _, f := range fleets {
		recs, err := (&PulumiStore{WS: ws, Fleet: f}).Load(ctx)
		if err != nil {
			return nil, err
		}
		names := make([]string, 0, len(recs))
		for n := range recs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			out = append(out, recs[n])
		}
	}
	return out, nil
}

func isNotFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no stack named")
}

func isExists(err error) bool {
	return err != nil && strings.Contains(err.Error(), "already exists")
}
