package events

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optremove"

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

// ErrLocked is returned when another reconcile holds the lease.
var ErrLocked = errors.New("another reconcile is running")

// StoreProject is the Pulumi project that holds the reconciler's state,
// beside the fleet's stacks (program.Project) in the same backend.
const StoreProject = "relayfleet-events"

// RecordsStack is the stack of StoreProject whose "records" output holds
// a fleet's event records; LeaseStack exists while a reconcile of the
// fleet holds the lease.
func RecordsStack(fleet string) string { return fleet + "-records" }

// LeaseStack is the stack of StoreProject whose existence is a fleet's
// reconcile lease; its LeaseTag says who holds it and until when.
func LeaseStack(fleet string) string { return fleet + "-lease" }

// LeaseTag is the stack tag on LeaseStack: "OWNER until RFC3339".
const LeaseTag = "relayfleet-lease"

// DefaultLeaseTTL is how long a lease lives without a renewal; the holder
// renews it every third of that while it runs, so a lease outlives its
// holder by at most this much.
const DefaultLeaseTTL = 3 * time.Minute

// recordsOutput is the records stack's output that holds the records.
const recordsOutput = "records"

// PulumiStore keeps a fleet's event records as the output of a stack
// (RecordsStack, project StoreProject) in the Pulumi backend, and its
// lease as the existence of another (LeaseStack) with a tag naming the
// holder and its expiry. Creating a stack is atomic on every backend (the
// file backend creates it under the stack's own lock; the Pulumi Cloud
// refuses a second), so two reconciles cannot both take a free lease; a
// lease whose holder died is taken over once it expired, or at once when
// the holder was a process of this machine that is gone. The records hold
// no secret: addresses, public host keys, counts and times.
//
// Every operation is the Pulumi CLI's (stack init, export, import, tag,
// rm), so a file:// backend and a remote one behave the same, and any
// machine pointed at the backend (same URL and passphrase) reads the same
// state.
type PulumiStore struct {
	WS    auto.Workspace
	Fleet string
	// TTL is the lease's life without a renewal (DefaultLeaseTTL).
	TTL time.Duration
	// Grace is how long a lease stack without its tag (a holder between
	// creating it and tagging it) is waited for before it is taken as
	// left by a dead holder; default 20s.
	Grace time.Duration
	// Owner names this holder (default "HOST pid=PID machine=ID run=RANDOM",
	// ID from /etc/machine-id).
	Owner string
	// MachineID is this machine's /etc/machine-id (read when empty): a
	// lease held by a process of this machine that is gone (killed) is
	// taken over at once rather than at its expiry.
	MachineID string
	// Clock is the wall clock leases are measured on (default time.Now);
	// the reconciler's simulated clock plays no part.
	Clock func() time.Time

	mu      sync.Mutex
	loaded  bool
	stack   *outputstack.Stack
	records map[string]json.RawMessage
	lost    func() bool
}

func (s *PulumiStore) now() time.Time {
	if s.Clock != nil {
		return s.Clock()
	}
	return time.Now()
}

func (s *PulumiStore) ttl() time.Duration {
	if s.TTL > 0 {
		return s.TTL
	}
	return DefaultLeaseTTL
}

func (s *PulumiStore) owner() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Owner == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		rand.Read(b)
		s.Owner = fmt.Sprintf("%s pid=%d machine=%s run=%s", host, os.Getpid(), s.machine(), hex.EncodeToString(b))
	}
	return s.Owner
}

func (s *PulumiStore) machine() string {
	if s.MachineID == "" {
		data, _ := os.ReadFile("/etc/machine-id")
		s.MachineID = strings.TrimSpace(string(data))
	}
	return s.MachineID
}

// deadHere reports whether a lease's owner was a process of this machine
// that no longer runs.
func (s *PulumiStore) deadHere(owner string) bool {
	s.mu.Lock()
	mine := s.machine()
	s.mu.Unlock()
	var pid int
	var machine string
	for _, f := range strings.Fields(owner) {
		if v, ok := strings.CutPrefix(f, "pid="); ok {
			fmt.Sscan(v, &pid)
		}
		if v, ok := strings.CutPrefix(f, "machine="); ok {
			machine = v
		}
	}
	if mine == "" || machine != mine || pid <= 0 || pid == os.Getpid() {
		return false
	}
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// lease is a parsed LeaseTag.
type lease struct {
	Owner   string
	Expires time.Time
}

func (l lease) String() string { return l.Owner + " until " + l.Expires.UTC().Format(time.RFC3339) }

func parseLease(v string) (lease, bool) {
	owner, until, ok := strings.Cut(v, " until ")
	if !ok {
		return lease{}, false
	}
	t, err := time.Parse(time.RFC3339, until)
	if err != nil {
		return lease{}, false
	}
	return lease{Owner: owner, Expires: t}, true
}

func isNotFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no stack named")
}

func isExists(err error) bool {
	return err != nil && strings.Contains(err.Error(), "already exists")
}

// readLease returns the lease stack's tag; ok is false when the stack
// does not exist, and tagged false when it has no (valid) tag yet.
func (s *PulumiStore) readLease(ctx context.Context) (l lease, exists, tagged bool, err error) {
	tags, err := s.WS.ListTags(ctx, LeaseStack(s.Fleet))
	if isNotFound(err) {
		return lease{}, false, false, nil
	}
	if err != nil {
		return lease{}, false, false, fmt.Errorf("lease %s: %s", LeaseStack(s.Fleet), lastLine(err))
	}
	l, tagged = parseLease(tags[LeaseTag])
	return l, true, tagged, nil
}

func (s *PulumiStore) writeLease(ctx context.Context, owner string) error {
	l := lease{Owner: owner, Expires: s.now().Add(s.ttl()).UTC().Truncate(time.Second)}
	if err := s.WS.SetTag(ctx, LeaseStack(s.Fleet), LeaseTag, l.String()); err != nil {
		return fmt.Errorf("lease %s: %s", LeaseStack(s.Fleet), lastLine(err))
	}
	return nil
}

// Lock implements Store.
func (s *PulumiStore) Lock(ctx context.Context) (context.Context, func(), error) {
	owner := s.owner()
	grace := s.Grace
	if grace <= 0 {
		grace = 20 * time.Second
	}
	for attempt := 0; ; attempt++ {
		err := s.WS.CreateStack(ctx, LeaseStack(s.Fleet))
		if err == nil {
			if err := s.writeLease(ctx, owner); err != nil {
				s.WS.RemoveStack(context.WithoutCancel(ctx), LeaseStack(s.Fleet), optremove.Force())
				return nil, nil, err
			}
			return s.hold(ctx, owner)
		}
		if !isExists(err) {
			return nil, nil, fmt.Errorf("lease %s: %s", LeaseStack(s.Fleet), lastLine(err))
		}
		if attempt >= 3 {
			return nil, nil, fmt.Errorf("%w: lease %s keeps changing hands", ErrLocked, LeaseStack(s.Fleet))
		}
		l, exists, tagged, err := s.readLease(ctx)
		if err != nil {
			return nil, nil, err
		}
		if !exists {
			continue // released in between: take it
		}
		// A holder between creating the stack and tagging it gets the
		// grace time to tag it.
		for deadline := time.Now().Add(grace); !tagged && time.Now().Before(deadline); {
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-time.After(time.Second):
			}
			if l, exists, tagged, err = s.readLease(ctx); err != nil {
				return nil, nil, err
			}
			if !exists {
				break
			}
		}
		if !exists {
			continue
		}
		if tagged && s.now().Before(l.Expires) && !s.deadHere(l.Owner) {
			return nil, nil, fmt.Errorf("%w (%s holds the lease in the Pulumi backend, stack %s/%s)", ErrLocked, l, StoreProject, LeaseStack(s.Fleet))
		}
		// Expired (or never tagged): its holder is gone. Take it over,
		// unless it changed since it was read.
		again, exists, tagged2, err := s.readLease(ctx)
		if err != nil {
			return nil, nil, err
		}
		if exists && (tagged2 != tagged || again.Owner != l.Owner || !again.Expires.Equal(l.Expires)) {
			continue
		}
		if exists {
			if err := s.WS.RemoveStack(ctx, LeaseStack(s.Fleet), optremove.Force()); err != nil && !isNotFound(err) {
				return nil, nil, fmt.Errorf("lease %s: take over: %s", LeaseStack(s.Fleet), lastLine(err))
			}
		}
	}
}

// hold renews the lease every third of its TTL until unlock, and cancels
// the held context once it finds the lease taken over.
func (s *PulumiStore) hold(ctx context.Context, owner string) (context.Context, func(), error) {
	held, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	done := make(chan struct{})
	s.mu.Lock()
	// Lost only when the lease itself ended (taken over, or released): a
	// caller's context that ended (a signal) still holds it, to save what
	// happened before it unlocks.
	s.lost = func() bool {
		c := context.Cause(held)
		return errors.Is(c, ErrLeaseLost) || errors.Is(c, errLeaseReleased)
	}
	s.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(s.ttl() / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-held.Done():
				return
			case <-t.C:
			}
			if err := s.renew(held, owner); err != nil {
				cancel(err)
				return
			}
		}
	}()
	var once sync.Once
	unlock := func() {
		once.Do(func() {
			close(stop)
			<-done
			bg := context.WithoutCancel(ctx)
			if l, exists, _, err := s.readLease(bg); err == nil && exists && l.Owner == owner {
				s.WS.RemoveStack(bg, LeaseStack(s.Fleet), optremove.Force())
			}
			cancel(errLeaseReleased)
		})
	}
	return held, unlock, nil
}

// errLeaseReleased is the cause of a held context's end after unlock.
var errLeaseReleased = errors.New("lease released")

// ErrLeaseLost is the cause of a held context's end when another holder
// took the lease over.
var ErrLeaseLost = errors.New("the reconcile lease was taken over by another holder (this run was too slow to renew it)")

// renew extends the lease, or reports it lost.
func (s *PulumiStore) renew(ctx context.Context, owner string) error {
	l, exists, _, err := s.readLease(ctx)
	if err != nil {
		return nil // a failed read is retried at the next tick
	}
	if !exists || l.Owner != owner {
		return fmt.Errorf("%w: now %s", ErrLeaseLost, l)
	}
	s.writeLease(ctx, owner)
	return nil
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
// lease's holder saves, so a stack lock left by a save killed mid-way is
// stale and cleared.
func (s *PulumiStore) Save(ctx context.Context, rec *Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost != nil && s.lost() {
		return fmt.Errorf("event record %s: not saved: %w", rec.Event, ErrLeaseLost)
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
	if s.lost != nil && s.lost() {
		return fmt.Errorf("event record %s: not removed: %w", event, ErrLeaseLost)
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
