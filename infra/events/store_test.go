package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/lease"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

// memStore is an in-memory Store: one per "backend", shared by the
// reconcilers of several "machines" (state dirs).
type memStore struct {
	mu    sync.Mutex
	held  bool
	recs  map[string][]byte
	saves int
}

func (m *memStore) Lock(ctx context.Context) (context.Context, func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held {
		return nil, nil, errors.New("memStore: " + ErrLocked.Error() + " (test holds it)")
	}
	m.held = true
	return ctx, func() { m.mu.Lock(); m.held = false; m.mu.Unlock() }, nil
}

func (m *memStore) Remove(_ context.Context, event string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, event)
	return nil
}

func (m *memStore) Load(context.Context) (map[string]*Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]*Record{}
	for k, v := range m.recs {
		rec := &Record{}
		if err := json.Unmarshal(v, rec); err != nil {
			return nil, err
		}
		out[k] = rec
	}
	return out, nil
}

func (m *memStore) Save(_ context.Context, rec *Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if m.recs == nil {
		m.recs = map[string][]byte{}
	}
	m.recs[rec.Event] = data
	m.saves++
	return nil
}

func (m *memStore) record(t *testing.T, event string) *Record {
	t.Helper()
	recs, err := m.Load(context.Background())
	if err != nil || recs[event] == nil {
		t.Fatalf("the store has no record of %s: %v", event, err)
	}
	return recs[event]
}

// TestResumeFromAnEmptyStateDir: a reconcile cut off mid-up on one
// machine is resumed by a reconcile with an empty state dir pointed at the
// same store: it repairs and finishes the up, and its relays file lists
// the steady fleet (from its stack) and the event's box; the teardown
// later runs there too and the sweep finds nothing.
func TestResumeFromAnEmptyStateDir(t *testing.T) {
	h := newHarness(t)
	steady := []program.HostEntry{{Name: "lab-steady-1", Address: "10.0.0.2", Ports: []int{4443}}}
	h.r.SteadyHosts = func(context.Context) ([]program.HostEntry, bool, error) { return steady, true, nil }
	h.stacks.failUp = 1
	if rec := h.run(t, h.ev.UpAt()); rec.Phase != Creating {
		t.Fatalf("after the cut-off up: phase %s", rec.Phase)
	}
	h.stacks.took()
	// Another machine: an empty state dir, the same store.
	h.r.StateDir = t.TempDir()
	rec := h.run(t, h.ev.UpAt().Add(time.Minute))
	if got := strings.Join(h.stacks.took(), ";"); got != "repair lab-event-lab-show;up lab-event-lab-show 1" {
		t.Fatalf("calls %q: want the cut-off up repaired and finished", got)
	}
	if rec.Phase != Up || len(rec.Hosts) != 1 {
		t.Fatalf("phase %s, %d hosts", rec.Phase, len(rec.Hosts))
	}
	rs := h.relays(t)
	if len(rs) != 2 || rs[0].URL != "http://10.0.0.2:4443/" || rs[1].URL != "http://10.0.0.10:4443/" {
		t.Fatalf("relays %+v: want the steady box and the burst one", rs)
	}
	// A third machine drains and tears it down.
	h.r.StateDir = t.TempDir()
	h.probe.listeners = 0
	rec = h.run(t, h.ev.End.Add(time.Minute))
	if rec.Phase != Gone || rec.Remaining != 0 || len(h.cloud.boxes) != 0 {
		t.Fatalf("phase %s, remaining %d, cloud %v", rec.Phase, rec.Remaining, h.cloud.boxes)
	}
	if rs := h.relays(t); len(rs) != 1 || rs[0].URL != "http://10.0.0.2:4443/" {
		t.Fatalf("relays %+v after the teardown: want the steady box only", rs)
	}
}

// TestRouteComesFromTheStore: a state dir whose relays file is stale
// (another machine moved the event on) is rewritten from the records at
// the start of a reconcile.
func TestRouteComesFromTheStore(t *testing.T) {
	h := newHarness(t)
	a := h.r.StateDir
	h.probe.listeners = 5
	h.run(t, h.ev.Start.Time)
	b := t.TempDir()
	h.r.StateDir = b
	if rec := h.run(t, h.ev.End.Add(time.Minute)); rec.Phase != Draining {
		t.Fatalf("phase %s, want draining", rec.Phase)
	}
	h.r.StateDir = a
	if rs := h.relays(t); len(rs) != 1 || rs[0].Draining {
		t.Fatalf("before: relays %+v", rs)
	}
	h.run(t, h.ev.End.Add(2*time.Minute))
	if rs := h.relays(t); len(rs) != 1 || !rs[0].Draining {
		t.Fatalf("machine a's relays %+v: want the drain machine b started", rs)
	}
}

// TestLegacyRecordsMoveIntoTheStore: records an older relayfleet kept in
// STATE/events are saved into the store once and their files set aside;
// the next reconcile goes on from them.
func TestLegacyRecordsMoveIntoTheStore(t *testing.T) {
	h := newHarness(t)
	state := h.r.StateDir
	host := program.HostEntry{Name: "lab-e-lab-show-1", Address: "10.0.0.10", Ports: []int{4443}}
	legacy := &Record{Event: h.ev.Name, Stack: StackName("lab", h.ev.Name), Backend: "lab", Phase: Up, Pool: h.ev.Burst,
		StackMade: true, Hosts: []program.HostEntry{host}, Release: "r1", UpSince: h.ev.UpAt(),
		Log: []Entry{{At: h.ev.UpAt(), Action: "ready", Detail: "1 box converged"}}}
	size, err := Size(h.ev, h.r.Fleet, h.r.Catalogue, h.r.Calibration)
	if err != nil {
		t.Fatal(err)
	}
	legacy.Plan = size
	other := &Record{Event: "x", Stack: StackName("otherfleet", "x"), Phase: Gone}
	dir := filepath.Join(state, "events")
	os.MkdirAll(dir, 0o700)
	for _, r := range []*Record{legacy, other} {
		data, _ := json.Marshal(r)
		if err := os.WriteFile(filepath.Join(dir, r.Event+".json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := program.SetStackHosts(state, legacy.Stack, legacy.Hosts); err != nil {
		t.Fatal(err)
	}
	store := h.r.Store.(*memStore)
	h.probe.listeners = 3
	rec := h.run(t, h.ev.Start.Add(time.Minute))
	if rec.Phase != Up || len(h.stacks.took()) != 0 || len(rec.Samples) != 1 {
		t.Fatalf("after the move: phase %s, samples %d: want the event going on from its old record", rec.Phase, len(rec.Samples))
	}
	got := store.record(t, h.ev.Name)
	if got.Route == nil || len(got.Route.Hosts) != 1 || got.Log[0].Action != "ready" {
		t.Fatalf("stored record %+v: want the old record with its route", got)
	}
	if _, err := os.Stat(filepath.Join(state, MigratedDir, h.ev.Name+".json")); err != nil {
		t.Fatalf("the old file was not set aside: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, h.ev.Name+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old file is still in STATE/events: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "x.json")); err != nil {
		t.Fatalf("another fleet's record was moved: %v", err)
	}
	if recs, _ := store.Load(context.Background()); len(recs) != 1 {
		t.Fatalf("store holds %d records: want this fleet's one", len(recs))
	}
	// Once: a second reconcile finds nothing to move.
	if !strings.Contains(h.log.String(), "action=migrate ") {
		t.Fatalf("no migrate line in the log:\n%s", h.log.String())
	}
	h.log.Reset()
	h.run(t, h.ev.Start.Add(2*time.Minute))
	if strings.Contains(h.log.String(), "action=migrate") {
		t.Fatalf("moved again:\n%s", h.log.String())
	}
}

// pulumiStore opens a PulumiStore on backend be from state dir dir, as a
// machine would, with the real Pulumi CLI.
func pulumiStore(t *testing.T, dir, be string) *PulumiStore {
	t.Helper()
	if _, err := program.FindPulumi(""); err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := &program.Stack{StateDir: dir, BackendURL: be}
	ws, err := st.ProjectWorkspace(ctx, StoreProject)
	if err != nil {
		t.Fatal(err)
	}
	return &PulumiStore{WS: ws, Fleet: "lab", Backend: be}
}

func sharedBackend(t *testing.T) string {
	t.Helper()
	t.Setenv(program.PassphraseEnv, "the same passphrase on every machine")
	be := filepath.Join(t.TempDir(), "backend")
	if err := os.MkdirAll(be, 0o700); err != nil {
		t.Fatal(err)
	}
	return "file://" + be
}

// TestPulumiStoreKeepsRecords: records saved through the real Pulumi CLI
// are read back whole from another state dir on the same backend, and
// saving one keeps the others.
func TestPulumiStoreKeepsRecords(t *testing.T) {
	testutil.Short(t, "make test-long (runs the Pulumi CLI)")
	be := sharedBackend(t)
	a := pulumiStore(t, t.TempDir(), be)
	ctx := context.Background()
	if recs, err := a.Load(ctx); err != nil || len(recs) != 0 {
		t.Fatalf("a new backend: %v, %v", recs, err)
	}
	held, unlock, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 3
	at := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	one := &Record{Event: "show", Stack: "lab-event-show", Backend: "lab", Phase: Draining, StackMade: true,
		Hosts:         []program.HostEntry{{Name: "lab-e-show-1", Address: "10.0.0.1", HostKey: "ssh-ed25519 AAAA", Ports: []int{4443, 4444}}},
		Route:         &program.StackHosts{Stack: "lab-event-show", Draining: true, Hosts: []program.HostEntry{{Name: "lab-e-show-1", Address: "10.0.0.1", Ports: []int{4443}}}},
		Suggested:     &n,
		Shrink:        &Shrink{To: 1, Going: nil, Since: at},
		DrainDeadline: at.Add(5 * time.Minute), BoxSeconds: 1234.5,
		Samples: []Sample{{At: at, Listeners: 12}}, Log: []Entry{{At: at, Action: "drain", Detail: "the event ended: \"quoted\" <b>"}}}
	two := &Record{Event: "final", Stack: "lab-event-final", Phase: Scheduled, Log: []Entry{}}
	for _, r := range []*Record{one, two} {
		if err := a.Save(held, r); err != nil {
			t.Fatal(err)
		}
	}
	unlock()
	b := pulumiStore(t, t.TempDir(), be)
	recs, err := b.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []*Record{one, two} {
		wj, _ := json.Marshal(want)
		gj, _ := json.Marshal(recs[want.Event])
		if string(wj) != string(gj) {
			t.Errorf("record %s read back as\n%s\nwant\n%s", want.Event, gj, wj)
		}
	}
	// b saves one; a, loading again, sees both.
	held, unlock, err = b.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	two.Phase = Gone
	if err := b.Save(held, two); err != nil {
		t.Fatal(err)
	}
	unlock()
	a2 := pulumiStore(t, t.TempDir(), be)
	recs, err = a2.Load(ctx)
	if err != nil || len(recs) != 2 || recs["final"].Phase != Gone || !reflect.DeepEqual(recs["show"].Samples, one.Samples) {
		t.Fatalf("after b's save: %v %v", recs, err)
	}
}

// twoHolders is two machines' stores, owners machine-a and machine-b,
// on one backend.
func twoHolders(t *testing.T) (a, b *PulumiStore) {
	t.Helper()
	be := sharedBackend(t)
	a, b = pulumiStore(t, t.TempDir(), be), pulumiStore(t, t.TempDir(), be)
	a.Holder, b.Holder = holderOn("machine-a", 1), holderOn("machine-b", 1)
	return a, b
}

// holderOn is a reconcile on host as pid.
func holderOn(host string, pid int) lease.Holder {
	return lease.Holder{Host: host, User: "ops", Command: "fleet events reconcile", PID: pid, Started: time.Now().UTC(), Run: host}
}

// TestPulumiStoreLeaseTwoHolders: while one machine holds the lease a
// second gets ErrLocked naming it; once released the second takes it.
func TestPulumiStoreLeaseTwoHolders(t *testing.T) {
	testutil.Short(t, "make test-long (runs the Pulumi CLI)")
	a, b := twoHolders(t)
	ctx := context.Background()
	_, unlockA, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = b.Lock(ctx)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "ops@machine-a") {
		t.Fatalf("second holder: %v, want ErrLocked naming machine-a", err)
	}
	unlockA()
	heldB, unlockB, err := b.Lock(ctx)
	if err != nil {
		t.Fatalf("after a released it: %v", err)
	}
	defer unlockB()
	if err := b.Save(heldB, &Record{Event: "e", Stack: "lab-event-e"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Lock(ctx); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "machine-b") {
		t.Fatalf("a while b holds it: %v", err)
	}
}

// TestPulumiStoreLeaseExpires: a holder that stops renewing (killed)
// loses the lease once it expired, not before; the one that takes it
// over holds it, and the old holder's saves are refused by the fence.
func TestPulumiStoreLeaseExpires(t *testing.T) {
	testutil.Short(t, "make test-long (runs the Pulumi CLI)")
	a, b := twoHolders(t)
	a.TTL, b.TTL = time.Hour, time.Hour // no renewal during the test
	ctx := context.Background()
	heldA, _, err := a.Lock(ctx) // never unlocked: a dies
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Lock(ctx); !errors.Is(err, ErrLocked) {
		t.Fatalf("before the expiry: %v", err)
	}
	later := time.Now().Add(2 * time.Hour)
	b.Clock = func() time.Time { return later }
	heldB, unlockB, err := b.Lock(ctx)
	if err != nil {
		t.Fatalf("after the expiry: %v, want the lease taken over", err)
	}
	defer unlockB()
	if err := a.Save(heldA, &Record{Event: "e", Stack: "lab-event-e"}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a's save after the take-over: %v, want ErrLeaseLost", err)
	}
	if err := b.Save(heldB, &Record{Event: "e", Stack: "lab-event-e"}); err != nil {
		t.Fatalf("b's save: %v", err)
	}
}

// TestPulumiStoreLeaseNoTakeoverByMachine: a lease whose holder was a
// process of this host that no longer runs is not taken over before its
// expiry (a cloned VM has the same machine id and host name, so "gone
// here" proves nothing about the holder): fleet unlock clears it.
func TestPulumiStoreLeaseNoTakeoverByMachine(t *testing.T) {
	testutil.Short(t, "make test-long (runs the Pulumi CLI)")
	be := sharedBackend(t)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	ctx := context.Background()
	a := pulumiStore(t, t.TempDir(), be)
	a.TTL, a.Holder = time.Hour, holderOn(host, gone.Process.Pid)
	if _, _, err := a.Lock(ctx); err != nil { // never unlocked
		t.Fatal(err)
	}
	here := pulumiStore(t, t.TempDir(), be)
	if _, _, err := here.Lock(ctx); !errors.Is(err, ErrLocked) {
		t.Fatalf("a gone holder here, before the expiry: %v, want ErrLocked", err)
	}
	l, err := lease.Open(ctx, be, "lab")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Unlock(ctx, io.Discard, lease.Self("fleet unlock")); err != nil {
		t.Fatalf("fleet unlock of a gone holder: %v", err)
	}
	_, unlock, err := here.Lock(ctx)
	if err != nil {
		t.Fatalf("after fleet unlock: %v", err)
	}
	unlock()
}

// TestLockAndLoad: the records load under the lease, which stays held
// until unlock; a store that cannot load releases it again and returns
// the error.
func TestLockAndLoad(t *testing.T) {
	m := &memStore{recs: map[string][]byte{"show": []byte(`{"event":"show"}`)}}
	r := &Reconciler{Store: m, StateDir: t.TempDir()}
	_, known, unlock, err := r.lockAndLoad(context.Background())
	if err != nil || known["show"] == nil {
		t.Fatalf("lockAndLoad = %v, %v", known, err)
	}
	if _, _, _, err := r.lockAndLoad(context.Background()); err == nil || !strings.Contains(err.Error(), ErrLocked.Error()) {
		t.Fatalf("second lockAndLoad while held: %v, want the lease refused", err)
	}
	unlock()

	m.recs["bad"] = []byte("{")
	if _, _, _, err := r.lockAndLoad(context.Background()); err == nil {
		t.Fatal("lockAndLoad of a bad record: no error")
	}
	if m.held {
		t.Fatal("the lease is still held after a failed load")
	}
}

// TestStoppedByTheStore: a run that failed because its store stopped
// answering, or its lease was lost, fails with that cause alone, in one
// line naming the store, not the pages of what failed after it; any
// other failure is left as it is.
func TestStoppedByTheStore(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // a store that does not answer
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "the-secret")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ls, err := lease.Open(ctx, "s3://bucket/team?endpoint="+addr+"&disableSSL=true&s3ForcePathStyle=true&region=us-east-1", "f")
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	_, readErr := ls.Read(ctx)
	pulumi := errors.New("destroy: @ destroying....\n^C received; cancelling.\nstderr: SDK 2026/12/07 22:24:00 WARN Response has no supported checksum.")
	failed := errors.Join(fmt.Errorf("event show: %w", errors.Join(pulumi, fmt.Errorf("event record show: not saved: %w", readErr))))

	got := stopped(context.Background(), failed)
	want := "the fleet's store does not answer: fleet f lease in s3://bucket/team: list: unreachable (dial tcp " + addr +
		": connect: connection refused); stopped, the next run resumes from the records"
	if got == nil || got.Error() != want {
		t.Errorf("store down:\n got %v\nwant %s", got, want)
	}

	held, lose := context.WithCancelCause(context.Background())
	lose(fmt.Errorf("%w: renewals failed for 23s (%v); stopping before it expires", ErrLeaseLost, readErr))
	got = stopped(held, failed)
	if got == nil || strings.Contains(got.Error(), "\n") || !strings.Contains(got.Error(), "s3://bucket/team") ||
		!strings.Contains(got.Error(), "dial tcp "+addr) || !errors.Is(got, ErrLeaseLost) || strings.Contains(got.Error(), "destroying") {
		t.Errorf("lease lost: %v", got)
	}
	if strings.Contains(got.Error(), "the-secret") {
		t.Error("the store's secret is in the error")
	}

	other := errors.New("event show: destroy: box show-1: quota exceeded")
	if stopped(context.Background(), other) != other || stopped(held, nil) != nil {
		t.Error("a failure the store did not cause was changed")
	}
}
