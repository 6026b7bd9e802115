package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
)

// fakeStacks records calls and answers with one host per box.
type fakeStacks struct {
	mu      sync.Mutex
	calls   []string
	failUp  int // fail this many Up calls
	failDel int // fail this many Destroy calls
	refuse  int // every Up: this many boxes refused, the rest converged
	cloud   *fakeCloud
	t       testing.TB
	// beforeUp, when set, runs at the start of every Up (with the lock
	// held): what the router's list says as Pulumi starts.
	beforeUp func()
	// requests, when set, are the API requests each Up and Destroy sends,
	// as its provider plugin writes them to the request log it is given.
	requests map[string][]string
}

// sent writes the requests of a run to the request log ctx names, as a
// backend's transport in the provider plugin does.
func sent(t testing.TB, ctx context.Context, lines []string) {
	if len(lines) == 0 {
		return
	}
	path := backend.RequestLog(ctx)
	if path == "" {
		t.Errorf("a run was given no request log")
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	for _, l := range lines {
		f.WriteString(l + "\n")
	}
}

func (f *fakeStacks) Up(ctx context.Context, stack string, b program.Burst) ([]program.HostEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("up %s %d", stack, b.Boxes))
	sent(f.t, ctx, f.requests["up"])
	if f.beforeUp != nil {
		f.beforeUp()
	}
	// Fewer boxes: the stack deletes those numbered above.
	for name, l := range f.cloud.boxes {
		if n, err := boxIndex(name); l["event"] == b.Event && err == nil && n > b.Boxes {
			delete(f.cloud.boxes, name)
		}
	}
	var hosts []program.HostEntry
	for i := range b.Boxes {
		name := program.BurstBoxName("lab", b.Event, b.Pool.Provider, i+1)
		f.cloud.put(name, map[string]string{"fleet": "lab", "tier": "burst", "event": b.Event})
		hosts = append(hosts, program.HostEntry{Name: name, Backend: "lab", Address: fmt.Sprintf("10.0.0.%d", 10+i), Ports: []int{4443}})
	}
	if f.failUp > 0 {
		f.failUp--
		return nil, errors.New("killed mid-up")
	}
	if f.refuse > 0 {
		// The last boxes refused (a capacity refusal): the others made
		// and converged, one more made but not converged.
		keep := max(len(hosts)-f.refuse, 0)
		return nil, &program.PartialError{Hosts: hosts[:keep], Boxes: min(keep+1, len(hosts)), Err: errors.New("resource_unavailable")}
	}
	return hosts, nil
}

func (f *fakeStacks) Destroy(ctx context.Context, stack string, b program.Burst) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "destroy "+stack)
	sent(f.t, ctx, f.requests["destroy"])
	if f.failDel > 0 {
		f.failDel--
		return errors.New("killed mid-destroy")
	}
	// A destroy deletes what the stack knows: not the orphan.
	for name, l := range f.cloud.boxes {
		if l["event"] == b.Event && !strings.HasPrefix(name, "orphan") {
			delete(f.cloud.boxes, name)
		}
	}
	return nil
}

func (f *fakeStacks) Repair(_ context.Context, stack string, _ program.Burst) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "repair "+stack)
	return nil
}

func (f *fakeStacks) took() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

type fakeProbe struct {
	listeners int64
	drained   int
	// perHost, when set, are each box's listeners by name; Listeners sums
	// those of the hosts asked about.
	perHost      map[string]int64
	drainedHosts []string
	// room is the steady fleet's headroom Room reports; a listener Shed
	// tells to move lands there (listeners down, room down by as many).
	room int64
	// roomHosts are the hosts the last Room was asked about; sheds are the
	// n of each Shed.
	roomHosts []string
	sheds     []int64
}

func (p *fakeProbe) Room(_ context.Context, hosts []program.HostEntry) (int64, error) {
	p.roomHosts = nil
	for _, h := range hosts {
		p.roomHosts = append(p.roomHosts, h.Name)
	}
	return p.room, nil
}

func (p *fakeProbe) Shed(_ context.Context, _ []program.HostEntry, n int64) (int64, error) {
	p.sheds = append(p.sheds, n)
	k := min(n, p.listeners)
	p.listeners -= k
	p.room -= k
	return k, nil
}

func (p *fakeProbe) Listeners(_ context.Context, hosts []program.HostEntry) (int64, error) {
	if p.perHost == nil {
		return p.listeners, nil
	}
	var n int64
	for _, h := range hosts {
		n += p.perHost[h.Name]
	}
	return n, nil
}

func (p *fakeProbe) Drain(_ context.Context, hosts []program.HostEntry) error {
	p.drained++
	for _, h := range hosts {
		p.drainedHosts = append(p.drainedHosts, h.Name)
	}
	return nil
}

// fakeCloud is an in-memory backend.Backend.
type fakeCloud struct {
	boxes map[string]map[string]string
	// listRequests, when set, is the request each List sends, written to
	// the request log its context names.
	listRequests []string
	t            testing.TB
}

func (c *fakeCloud) put(name string, labels map[string]string) {
	if c.boxes == nil {
		c.boxes = map[string]map[string]string{}
	}
	c.boxes[name] = labels
}

func (c *fakeCloud) Create(context.Context, backend.Spec) (backend.Box, error) {
	return backend.Box{}, errors.New("not used")
}

func (c *fakeCloud) Get(_ context.Context, id string) (backend.Box, error) {
	if l, ok := c.boxes[id]; ok {
		return backend.Box{ID: id, Name: id, Labels: l}, nil
	}
	return backend.Box{}, backend.ErrNotFound
}

func (c *fakeCloud) List(ctx context.Context, labels map[string]string) ([]backend.Box, error) {
	sent(c.t, ctx, c.listRequests)
	var bs []backend.Box
	for n, l := range c.boxes {
		if backend.MatchLabels(l, labels) {
			bs = append(bs, backend.Box{ID: n, Name: n, Labels: l})
		}
	}
	return bs, nil
}

func (c *fakeCloud) Delete(_ context.Context, id string) error { delete(c.boxes, id); return nil }

type harness struct {
	r      *Reconciler
	stacks *fakeStacks
	probe  *fakeProbe
	cloud  *fakeCloud
	log    *bytes.Buffer
	ev     *inventories.Event
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	cat, err := inventories.LoadCatalogue(inventories.Embedded(inventories.ProvidersFile))
	if err != nil {
		t.Fatal(err)
	}
	cal, err := inventories.LoadCalibration(inventories.Embedded(inventories.CalibrationFile))
	if err != nil {
		t.Fatal(err)
	}
	evs, f, err := inventories.LoadEvents(inventories.Embedded("lab-events.yaml"), cat)
	if err != nil {
		t.Fatal(err)
	}
	// The drain at the end as it was before max_overrun (0: none): the
	// tests of the overrun (overrun_test.go) turn it on.
	for i := range evs.Events {
		none := inventories.Duration(0)
		evs.Events[i].MaxOverrun = &none
	}
	cloud := &fakeCloud{t: t}
	h := &harness{stacks: &fakeStacks{cloud: cloud, t: t}, probe: &fakeProbe{}, cloud: cloud, log: &bytes.Buffer{}}
	h.r = &Reconciler{
		Events: evs, Fleet: f, Catalogue: cat, Calibration: cal, StateDir: t.TempDir(), Release: "r1",
		Stacks: h.stacks, Probe: h.probe, Store: &memStore{},
		Backends: func(string) (backend.Backend, error) { return cloud, nil },
		Log:      slog.New(slog.NewTextHandler(h.log, nil)),
	}
	h.ev = &evs.Events[0]
	return h
}

func (h *harness) run(t *testing.T, at time.Time) *Record {
	t.Helper()
	_, err := h.r.Reconcile(context.Background(), at)
	if err != nil {
		t.Logf("reconcile at %s: %v", at.Format(time.RFC3339), err)
	}
	rec, ok, rerr := ReadRecord(h.r.StateDir, h.ev.Name)
	if rerr != nil || !ok {
		t.Fatalf("no record after reconcile at %s: %v", at, rerr)
	}
	return rec
}

func (h *harness) relays(t *testing.T) []program.Relay {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(h.r.StateDir, program.RelaysFile))
	if err != nil {
		return nil
	}
	var f struct{ Relays []program.Relay }
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return f.Relays
}

func TestSizeLabEvent(t *testing.T) {
	h := newHarness(t)
	s, err := Size(h.ev, h.r.Fleet, h.r.Catalogue, h.r.Calibration)
	if err != nil {
		t.Fatal(err)
	}
	// Two steady small lab boxes (1 core, 1 GiB) carry less than the
	// event's peak; one more small box covers the rest.
	peak := h.ev.PeakListeners
	if s.SteadyCapacity >= peak || s.SteadyCapacity+s.PerBox < peak || s.Boxes != 1 || s.Needed != 1 {
		t.Fatalf("sizing %+v: want 1 burst box", s)
	}
	ev := *h.ev
	ev.PeakListeners = s.SteadyCapacity + 3*s.PerBox // three boxes' worth, from the calibration
	ev.Burst.Max = 2
	s, err = Size(&ev, h.r.Fleet, h.r.Catalogue, h.r.Calibration)
	if err != nil {
		t.Fatal(err)
	}
	if s.Boxes != 2 || s.Needed <= 2 || s.Short() == "" {
		t.Fatalf("capped sizing %+v: want max 2 and a warning", s)
	}
	ev.PeakListeners = 100
	if s, _ = Size(&ev, h.r.Fleet, h.r.Catalogue, h.r.Calibration); s.Boxes != 0 {
		t.Fatalf("a peak the steady fleet carries got %d burst boxes", s.Boxes)
	}
}

// TestLifecycle walks an event through its life on a simulated clock.
func TestLifecycle(t *testing.T) {
	testutil.NoLeaks(t)
	h := newHarness(t)
	ev := h.ev
	// Before the lead time: nothing.
	rec := h.run(t, ev.UpAt().Add(-time.Minute))
	if rec.Phase != Scheduled || len(h.stacks.took()) != 0 || len(h.relays(t)) != 0 {
		t.Fatalf("before the lead time: phase %s", rec.Phase)
	}
	// The lead time starts: one box, routed. A kill mid-up is resumed.
	h.stacks.failUp = 1
	rec = h.run(t, ev.UpAt())
	if rec.Phase != Creating {
		t.Fatalf("after a failed up: phase %s, want creating", rec.Phase)
	}
	rec = h.run(t, ev.UpAt().Add(time.Minute))
	if got := h.stacks.took(); strings.Join(got, ";") != "up lab-event-lab-show 1;repair lab-event-lab-show;up lab-event-lab-show 1" {
		t.Fatalf("calls %q", got)
	}
	if rec.Phase != Up || len(rec.Hosts) != 1 {
		t.Fatalf("phase %s hosts %d", rec.Phase, len(rec.Hosts))
	}
	if rs := h.relays(t); len(rs) != 1 || rs[0].Draining {
		t.Fatalf("relays %+v: want the burst box routed", rs)
	}
	// During: no Pulumi run, listeners sampled.
	h.probe.listeners = 700
	rec = h.run(t, ev.Start.Add(10*time.Minute))
	if c := h.stacks.took(); len(c) != 0 || rec.Phase != Up || len(rec.Samples) != 1 {
		t.Fatalf("during the event: calls %q phase %s samples %d", c, rec.Phase, len(rec.Samples))
	}
	h.run(t, ev.End.Add(-time.Minute))
	// After the end with listeners: draining, not destroyed.
	h.probe.listeners = 40
	rec = h.run(t, ev.End.Add(time.Minute))
	if rec.Phase != Draining || h.probe.drained != 1 || len(h.stacks.took()) != 0 {
		t.Fatalf("after the end: phase %s drained %d", rec.Phase, h.probe.drained)
	}
	if rs := h.relays(t); len(rs) != 1 || !rs[0].Draining {
		t.Fatalf("relays %+v: want the burst relay draining", rs)
	}
	if !rec.DrainDeadline.Equal(ev.GoneBy()) {
		t.Fatalf("drain deadline %v, want %v", rec.DrainDeadline, ev.GoneBy())
	}
	rec = h.run(t, ev.End.Add(2*time.Minute))
	if rec.Phase != Draining {
		t.Fatalf("listeners left before the drain time: phase %s", rec.Phase)
	}
	// A box the stack does not know about: the sweep must find it.
	h.cloud.put("orphan-1", map[string]string{"fleet": "lab", "tier": "burst", "event": ev.Name})
	h.cloud.put("steady-1", map[string]string{"fleet": "lab", "tier": "steady", "event": "none"})
	// After the drain time: destroyed whatever the listeners; killed once.
	h.stacks.failDel = 1
	rec = h.run(t, ev.GoneBy())
	if rec.Phase != Destroying {
		t.Fatalf("after a failed destroy: phase %s", rec.Phase)
	}
	rec = h.run(t, ev.GoneBy().Add(time.Minute))
	if got := strings.Join(h.stacks.took(), ";"); got != "destroy lab-event-lab-show;repair lab-event-lab-show;destroy lab-event-lab-show" {
		t.Fatalf("calls %q", got)
	}
	if rec.Phase != Gone || len(rec.Orphans) != 1 || rec.Orphans[0] != "orphan-1" || rec.Remaining != 0 {
		t.Fatalf("phase %s orphans %v", rec.Phase, rec.Orphans)
	}
	if _, ok := h.cloud.boxes["steady-1"]; !ok || len(h.cloud.boxes) != 1 {
		t.Fatalf("cloud after the sweep: %v, want only the steady box", h.cloud.boxes)
	}
	if len(h.relays(t)) != 0 {
		t.Fatalf("relays %+v after destroy", h.relays(t))
	}
	rep := rec.Report
	// One box from UpAt to GoneBy+1m on the simulated clock.
	wantHours := ev.GoneBy().Add(time.Minute).Sub(ev.UpAt()).Hours()
	if rep == nil || rep.BoxHours < wantHours-0.01 || rep.BoxHours > wantHours+0.01 || rep.PeakListeners != 700 || rep.ListenerHours <= 0 || rep.EgressBytes <= 0 || rep.Orphans != 1 {
		t.Fatalf("report %+v, want %.2f box-hours, peak 700", rep, wantHours)
	}
	// Gone stays gone; every action was logged with the event's name.
	rec = h.run(t, ev.GoneBy().Add(time.Hour))
	if rec.Phase != Gone || len(h.stacks.took()) != 0 {
		t.Fatalf("after gone: phase %s", rec.Phase)
	}
	for _, a := range []string{"action=up", "action=ready", "action=drain", "action=destroy", "action=orphan", "action=gone", "action=repair"} {
		if !strings.Contains(h.log.String(), a) {
			t.Errorf("log has no %s", a)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(h.log.String()), "\n") {
		if strings.Contains(line, "action=") && !strings.Contains(line, "event=lab-show") {
			t.Errorf("log line without the event: %s", line)
		}
	}
}

// TestServeWhatIsUp: an up that made some of an event's boxes and was
// refused the rest routes those that converged at once, says how many
// are wanted, made, converged and routed, exits non-zero, and tries the
// rest on every run until they come; still short at the event's start,
// it says SHORT.
func TestServeWhatIsUp(t *testing.T) {
	h := newHarness(t)
	s, err := Size(h.ev, h.r.Fleet, h.r.Catalogue, h.r.Calibration)
	if err != nil {
		t.Fatal(err)
	}
	h.ev.PeakListeners = s.SteadyCapacity + 3*s.PerBox - 1
	h.ev.Burst.Max = 5
	h.stacks.refuse = 1
	at := h.ev.UpAt()
	_, err = h.r.Reconcile(t.Context(), at)
	if err == nil || !strings.Contains(err.Error(), "2 of 3 boxes routed") || !strings.Contains(err.Error(), "resource_unavailable") {
		t.Fatalf("a partial up: %v; want an error saying 2 of 3 boxes routed and why", err)
	}
	rec, _, _ := ReadRecord(h.r.StateDir, h.ev.Name)
	if rec.Phase != Up || len(rec.Hosts) != 2 || rec.Created != 3 || rec.Converged != 2 || rec.Routed() != 2 || rec.Plan.Boxes != 3 {
		t.Fatalf("after a partial up: phase %s hosts %d made %d converged %d routed %d", rec.Phase, len(rec.Hosts), rec.Created, rec.Converged, rec.Routed())
	}
	if rs := h.relays(t); len(rs) != 2 {
		t.Fatalf("router's list %+v: want the two converged boxes", rs)
	}
	if !strings.Contains(h.log.String(), "action=up-partial") || strings.Contains(h.log.String(), "SHORT") {
		t.Errorf("log after a partial up before the start:\n%s", h.log.String())
	}
	var b bytes.Buffer
	if err := WriteRecords(&b, []*Record{rec}, ""); err != nil || !strings.Contains(b.String(), "lab-show  up     -       3       3     2          2") {
		t.Errorf("status:\n%s", b.String())
	}

	// Still refused at the start: SHORT, and the run fails again.
	h.stacks.took()
	_, err = h.r.Reconcile(t.Context(), h.ev.Start.Time)
	if err == nil || !strings.Contains(h.log.String(), "SHORT at its start: 2 of 3 boxes routed") {
		t.Fatalf("short at the start: %v\n%s", err, h.log.String())
	}
	if got := h.stacks.took(); len(got) != 1 || got[0] != "up lab-event-lab-show 3" {
		t.Fatalf("calls %q: want the up tried again", got)
	}

	// Capacity comes back: the next run brings the event to its size, and
	// the one after runs no Pulumi.
	h.stacks.refuse = 0
	if _, err := h.r.Reconcile(t.Context(), h.ev.Start.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	rec, _, _ = ReadRecord(h.r.StateDir, h.ev.Name)
	if len(rec.Hosts) != 3 || rec.Routed() != 3 || len(h.relays(t)) != 3 {
		t.Fatalf("after capacity came back: hosts %d routed %d relays %d", len(rec.Hosts), rec.Routed(), len(h.relays(t)))
	}
	h.stacks.took()
	if _, err := h.r.Reconcile(t.Context(), h.ev.Start.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := h.stacks.took(); len(got) != 0 {
		t.Fatalf("calls %q once the event has its size", got)
	}
}

// TestNothingConvergedStaysCreating: an up refused every box routes
// nothing and is resumed (repaired, then tried again) by the next run.
func TestNothingConvergedStaysCreating(t *testing.T) {
	h := newHarness(t)
	h.stacks.refuse = 5
	_, err := h.r.Reconcile(t.Context(), h.ev.UpAt())
	rec, _, _ := ReadRecord(h.r.StateDir, h.ev.Name)
	if err == nil || rec.Phase != Creating || len(rec.Hosts) != 0 || rec.Created != 1 || len(h.relays(t)) != 0 {
		t.Fatalf("nothing converged: %v, phase %s hosts %d made %d", err, rec.Phase, len(rec.Hosts), rec.Created)
	}
	h.stacks.refuse = 0
	rec = h.run(t, h.ev.UpAt().Add(time.Minute))
	if rec.Phase != Up || len(rec.Hosts) != 1 {
		t.Fatalf("after capacity came back: phase %s hosts %d", rec.Phase, len(rec.Hosts))
	}
}

// TestRecordsPrunedAfterRetention: the record of an event that is gone
// and no longer in the file is forgotten once the retention has passed
// since its last action, from the store and the cache; within it, or
// while the event is still in the file, it stays.
func TestRecordsPrunedAfterRetention(t *testing.T) {
	h := newHarness(t)
	h.r.Retention = 48 * time.Hour
	h.run(t, h.ev.Start.Time)
	h.probe.listeners = 0
	if rec := h.run(t, h.ev.End.Time); rec.Phase != Gone {
		t.Fatalf("phase %s, want gone", rec.Phase)
	}
	last := h.ev.End.Time
	// Still in the file, long after: kept.
	if rec := h.run(t, last.Add(72*time.Hour)); rec.Phase != Gone {
		t.Fatalf("an event in the file lost its record: phase %s", rec.Phase)
	}
	evs := h.r.Events.Events
	h.r.Events.Events = nil
	t.Cleanup(func() { h.r.Events.Events = evs })
	store := h.r.Store.(*memStore)
	if _, err := h.r.Reconcile(t.Context(), last.Add(47*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.recs[h.ev.Name]; !ok {
		t.Fatal("the record went within the retention")
	}
	if _, err := h.r.Reconcile(t.Context(), last.Add(73*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.recs[h.ev.Name]; ok {
		t.Fatal("the record outlived the retention in the store")
	}
	if _, ok, err := ReadRecord(h.r.StateDir, h.ev.Name); ok || err != nil {
		t.Fatalf("the record outlived the retention in the cache (%v)", err)
	}
	if !strings.Contains(h.log.String(), "action=forget") {
		t.Errorf("no forget in the log:\n%s", h.log.String())
	}
}

// TestProviderMovedInTheFile: an event moved to another provider in the
// events file while its boxes exist keeps them where they are (a hold,
// noted once; no Pulumi run replaces them under listeners), and its
// teardown's proof lists the backend its boxes are on. An event moved
// before its boxes came up follows the file.
func TestProviderMovedInTheFile(t *testing.T) {
	h := newHarness(t)
	var listed []string
	h.r.Backends = func(name string) (backend.Backend, error) { listed = append(listed, name); return h.cloud, nil }
	was := h.ev.Burst.Provider
	h.run(t, h.ev.Start.Time)
	h.stacks.took()
	h.ev.Burst.Provider, h.ev.Burst.Shape = "hcloud", "cx33"
	rec := h.run(t, h.ev.Start.Add(time.Minute))
	if got := h.stacks.took(); len(got) != 0 {
		t.Fatalf("calls %q after the file moved a running event: want none", got)
	}
	if rec.Pool.Provider != was || rec.Backend != was || !strings.Contains(rec.PoolHeld, "hcloud/cx33") {
		t.Fatalf("record pool %+v backend %s held %q: want the boxes' provider kept and the move noted", rec.Pool, rec.Backend, rec.PoolHeld)
	}
	h.run(t, h.ev.Start.Add(2*time.Minute))
	if n := strings.Count(h.log.String(), "the events file moves the event"); n != 1 {
		t.Errorf("the move noted %d times, want once", n)
	}
	h.probe.listeners = 0
	if rec = h.run(t, h.ev.End.Time); rec.Phase != Gone {
		t.Fatalf("phase %s after the end, want gone", rec.Phase)
	}
	if len(listed) == 0 || listed[len(listed)-1] != was {
		t.Errorf("the teardown's proof listed %v, want %s (where the boxes were)", listed, was)
	}
}

// TestProviderMovedBeforeTheBoxes: moved before its bring-up, an event
// follows the file, its record's backend with it.
func TestProviderMovedBeforeTheBoxes(t *testing.T) {
	h := newHarness(t)
	h.run(t, h.ev.UpAt().Add(-time.Hour))
	h.ev.Burst.Shape = "medium"
	rec := h.run(t, h.ev.UpAt())
	if rec.Pool.Shape != "medium" || rec.PoolHeld != "" || rec.Phase != Up {
		t.Fatalf("pool %+v held %q: a scheduled event follows the file", rec.Pool, rec.PoolHeld)
	}
}

// TestRequestsCounted: the API requests an event's Pulumi runs send (as
// their provider plugins write them to the request log the reconciler
// names for the run) and those of the reconciler's own sweep add up in
// the event's record and its report, by route and status; a new life of
// the event (rescheduled after it was gone) counts from zero.
func TestRequestsCounted(t *testing.T) {
	h := newHarness(t)
	h.stacks.requests = map[string][]string{
		"up":      {"GET /v1/servers 200", "POST /v1/servers 429", "POST /v1/servers 201", "GET /v1/actions/{id} 200"},
		"destroy": {"DELETE /v1/servers/{id} 200", "GET /v1/actions/{id} 200"},
	}
	h.cloud.listRequests = []string{"GET /v1/servers 200"}
	rec := h.run(t, h.ev.Start.Time)
	if rec.Phase != Up || rec.Requests.Total != 4 || rec.Requests.Statuses["429"] != 1 {
		t.Fatalf("after the up: phase %s requests %+v, want 4, one 429", rec.Phase, rec.Requests)
	}
	h.probe.listeners = 0
	rec = h.run(t, h.ev.End.Time)
	// The sweep lists twice: before it deletes, and to prove none is left.
	want := map[string]int{"GET /v1/servers": 3, "POST /v1/servers": 2, "GET /v1/actions/{id}": 2, "DELETE /v1/servers/{id}": 1}
	if rec.Phase != Gone || rec.Requests.Total != 8 || !maps.Equal(rec.Requests.Routes, want) {
		t.Fatalf("after the teardown: phase %s requests %+v, want 8 by route %v", rec.Phase, rec.Requests, want)
	}
	if rec.Report == nil || rec.Report.Requests.Total != 8 || rec.Report.Requests.Statuses["200"] != 6 {
		t.Fatalf("report requests %+v, want the record's 8 (the sweep's included)", rec.Report)
	}
	var text strings.Builder
	if err := rec.Report.WriteText(&text); err != nil || !strings.Contains(text.String(), "cloud API requests 8") || !strings.Contains(text.String(), "429 x 1") {
		t.Errorf("report text does not give the 8 requests by status (%v):\n%s", err, text.String())
	}
	// Moved to a later day: a new life, counted from zero.
	h.ev.Start.Time, h.ev.End.Time = h.ev.Start.Add(48*time.Hour), h.ev.End.Add(48*time.Hour)
	if rec = h.run(t, h.ev.Start.Time); rec.Phase != Up || rec.Requests.Total != 4 {
		t.Fatalf("the event up again: phase %s requests %d, want the new up's 4", rec.Phase, rec.Requests.Total)
	}
}

// TestPulumiStacksNameTheRequestLog: a Pulumi run of an event's stack
// gets the context's request log in its environment, which the CLI
// passes to the provider plugin; the template is left as it was.
func TestPulumiStacksNameTheRequestLog(t *testing.T) {
	p := &PulumiStacks{Template: program.Stack{Env: map[string]string{"A": "1"}}}
	ctx := backend.WithRequestLog(context.Background(), "/state/requests/ev.log")
	s := p.stack(ctx, "lab-event-ev", program.Burst{Event: "ev"})
	if s.Env[backend.RequestLogEnv] != "/state/requests/ev.log" || s.Env["A"] != "1" {
		t.Errorf("stack env %v, want the request log and the template's", s.Env)
	}
	if _, ok := p.Template.Env[backend.RequestLogEnv]; ok {
		t.Errorf("the template's env was changed: %v", p.Template.Env)
	}
}

// TestEndMovedLaterKeepsTheEvent: an end moved later while the event
// runs keeps its boxes up until the new end (an overrun).
func TestEndMovedLaterKeepsTheEvent(t *testing.T) {
	h := newHarness(t)
	ev := h.ev
	h.run(t, ev.Start.Time)
	h.stacks.took()
	oldEnd := ev.End.Time
	ev.End.Time = oldEnd.Add(2 * time.Hour)
	h.probe.listeners = 5
	if rec := h.run(t, oldEnd.Add(time.Minute)); rec.Phase != Up || len(h.stacks.took()) != 0 || h.probe.drained != 0 || !rec.End.Equal(ev.End.Time) {
		t.Fatalf("past the old end: phase %s drained %d end %v, want up until %v", rec.Phase, h.probe.drained, rec.End, ev.End)
	}
	if rec := h.run(t, ev.End.Time); rec.Phase != Draining {
		t.Fatalf("at the new end: phase %s, want draining", rec.Phase)
	}
}

// TestTeardownFromRecordsWhenTheFileIsInvalid: with an events file that
// does not parse, a reconcile says so (action=events-file-invalid, the
// error returned), drains and destroys from its record an event whose
// recorded end has passed, on its recorded drain time, and leaves the
// others exactly as they are: a running one not ended keeps its boxes
// routed, a scheduled one is not brought up though its time came. Once
// the running one's recorded end passes, it goes too.
func TestTeardownFromRecordsWhenTheFileIsInvalid(t *testing.T) {
	h := newHarness(t)
	show := *h.ev
	overrun, later := show, show
	overrun.Name, overrun.End.Time = "lab-overrun", show.End.Add(3*time.Hour)
	later.Name, later.Start.Time, later.End.Time = "lab-later", show.End.Add(time.Hour), show.End.Add(2*time.Hour)
	h.r.Events.Events = []inventories.Event{show, overrun, later}
	h.ev = &h.r.Events.Events[0]
	h.probe.listeners = 5
	h.run(t, show.Start.Time)
	h.stacks.took()
	recOf := func(name string) *Record {
		t.Helper()
		rec, ok, err := ReadRecord(h.r.StateDir, name)
		if err != nil || !ok {
			t.Fatalf("no record of %s: %v", name, err)
		}
		return rec
	}
	before := recOf(overrun.Name)

	h.r.Events, h.r.FileErr = nil, errors.New("events.yaml: line 9: end: want an RFC 3339 time")
	h.probe.listeners = 0
	at := later.UpAt().Add(time.Minute) // after show's end, before overrun's; later's bring-up due
	_, err := h.r.Reconcile(context.Background(), at)
	if err == nil || !strings.Contains(err.Error(), "line 9") {
		t.Errorf("reconcile with an invalid events file returned %v, want its parse error", err)
	}
	if !strings.Contains(h.log.String(), "action=events-file-invalid") || !strings.Contains(h.log.String(), "line 9") {
		t.Errorf("the log does not report the invalid events file:\n%s", h.log)
	}
	if rec := recOf(show.Name); rec.Phase != Gone || rec.Report == nil {
		t.Errorf("the ended event: phase %s, want gone with its report", rec.Phase)
	}
	if got := strings.Join(h.stacks.took(), ";"); got != "destroy lab-event-lab-show" {
		t.Errorf("Pulumi runs %q, want only the ended event's destroy", got)
	}
	if rec := recOf(overrun.Name); rec.Phase != Up || len(rec.Log) != len(before.Log) || len(rec.Samples) != len(before.Samples) || len(rec.Hosts) != 1 {
		t.Errorf("the running event: phase %s, %d log entries (was %d): want it left exactly as it was", rec.Phase, len(rec.Log), len(before.Log))
	}
	if rec := recOf(later.Name); rec.Phase != Scheduled {
		t.Errorf("the scheduled event: phase %s, want scheduled (nothing brought up)", rec.Phase)
	}
	if rs := h.relays(t); len(rs) != 1 || rs[0].Draining {
		t.Errorf("relays %+v: want the running event's relay, routed", rs)
	}
	// Past the running event's recorded end: drained, for its recorded
	// drain time, then destroyed.
	h.probe.listeners = 3
	end := overrun.End.Add(time.Minute)
	h.r.Reconcile(context.Background(), end)
	if rec := recOf(overrun.Name); rec.Phase != Draining || !rec.DrainDeadline.Equal(overrun.GoneBy()) {
		t.Errorf("the overrun past its recorded end: phase %s deadline %v, want draining until %v", rec.Phase, rec.DrainDeadline, overrun.GoneBy())
	}
	h.r.Reconcile(context.Background(), overrun.GoneBy())
	if rec := recOf(overrun.Name); rec.Phase != Gone {
		t.Errorf("the overrun after its drain time: phase %s, want gone", rec.Phase)
	}
}

func TestDrainEndsEarlyWhenListenersLeave(t *testing.T) {
	h := newHarness(t)
	h.run(t, h.ev.Start.Time)
	h.probe.listeners = 0
	rec := h.run(t, h.ev.End.Time)
	if rec.Phase != Gone {
		t.Fatalf("no listeners at the end: phase %s, want gone at once", rec.Phase)
	}
}

func TestMissedEvent(t *testing.T) {
	h := newHarness(t)
	rec := h.run(t, h.ev.GoneBy().Add(time.Hour))
	if rec.Phase != Missed || len(h.stacks.took()) != 0 {
		t.Fatalf("phase %s", rec.Phase)
	}
}

func TestEventRemovedFromFileIsTornDown(t *testing.T) {
	h := newHarness(t)
	h.run(t, h.ev.Start.Time)
	h.r.Events = &inventories.Events{Version: 1}
	h.probe.listeners = 3
	_, err := h.r.Reconcile(context.Background(), h.ev.Start.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// Its listeners move as the steady fleet has room, for the default
	// max overrun (the file no longer says).
	rec, _, _ := ReadRecord(h.r.StateDir, h.ev.Name)
	now := h.ev.Start.Add(time.Minute)
	if rec.Phase != Draining || rec.Overrun == nil || !rec.Overrun.Until.Equal(now.Add(inventories.DefaultMaxOverrun)) ||
		!rec.DrainDeadline.Equal(now.Add(inventories.DefaultMaxOverrun+inventories.DefaultDrainTime)) {
		t.Fatalf("phase %s overrun %+v deadline %v", rec.Phase, rec.Overrun, rec.DrainDeadline)
	}
}

func TestManualUpAndDown(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	early := h.ev.UpAt().Add(-24 * time.Hour)
	if _, err := h.r.Manual(ctx, early, h.ev.Name, ManualUp, -1); err != nil {
		t.Fatal(err)
	}
	rec := h.run(t, early.Add(time.Minute)) // the clock alone would want nothing yet
	if rec.Phase != Up || rec.Manual != ManualUp {
		t.Fatalf("burst up: phase %s", rec.Phase)
	}
	h.probe.listeners = 9
	res, err := h.r.Manual(ctx, early.Add(2*time.Minute), h.ev.Name, ManualDown, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Phase != Gone {
		t.Fatalf("burst down with no drain time: phase %s", res.Phase)
	}
	// Down stays down inside the event's window.
	rec = h.run(t, h.ev.Start.Time)
	if rec.Phase != Gone {
		t.Fatalf("after burst down, the clock brought it back: %s", rec.Phase)
	}
	if _, err := h.r.Manual(ctx, h.ev.End.Add(time.Minute), h.ev.Name, ManualUp, -1); err == nil {
		t.Fatal("burst up of an ended event accepted")
	}
	if _, err := h.r.Manual(ctx, early, "nope", ManualUp, -1); err == nil {
		t.Fatal("burst up of an unknown event accepted")
	}
}

func TestLockStopsASecondReconcile(t *testing.T) {
	h := newHarness(t)
	_, unlock, err := h.r.Store.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.r.Reconcile(context.Background(), h.ev.Start.Time)
	if err == nil || !strings.Contains(err.Error(), ErrLocked.Error()) || !strings.Contains(err.Error(), "test holds it") {
		t.Fatalf("err = %v, want ErrLocked naming the holder", err)
	}
	unlock()
	if _, err := h.r.Reconcile(context.Background(), h.ev.Start.Time); err != nil {
		t.Fatalf("after unlock: %v", err)
	}
}

func TestSweepFailureKeepsTheEventDestroying(t *testing.T) {
	h := newHarness(t)
	h.run(t, h.ev.Start.Time)
	h.r.Backends = func(string) (backend.Backend, error) { return nil, errors.New("no token") }
	rec := h.run(t, h.ev.GoneBy())
	if rec.Phase != Destroying {
		t.Fatalf("sweep failed but phase %s", rec.Phase)
	}
	h.r.Backends = func(string) (backend.Backend, error) { return h.cloud, nil }
	if rec = h.run(t, h.ev.GoneBy().Add(time.Minute)); rec.Phase != Gone {
		t.Fatalf("phase %s after the sweep could run", rec.Phase)
	}
}

func TestPlural(t *testing.T) {
	for n, want := range map[int]string{0: "0 boxes", 1: "1 box", 2: "2 boxes", 1200: "1,200 boxes"} {
		if got := text.Plural(n, "box", "boxes"); got != want {
			t.Errorf("text.Plural(%d) = %q, want %q", n, got, want)
		}
	}
	s := Sizing{Needed: 1, Boxes: 0, PerBox: 10}
	if got := s.Short(); !strings.HasPrefix(got, "the peak needs 1 box but") {
		t.Errorf("Short() = %q", got)
	}
}

// TestEndedEventWithoutRecordSweepsItsBoxes: an event that ended with no
// record of boxes (the record was lost with a disk, or its save cut off)
// but whose burst boxes exist, found by the fleet and event labels, is
// swept: its stack destroyed and its boxes deleted, not marked missed
// while they bill on. One without boxes is missed, as before.
func TestEndedEventWithoutRecordSweepsItsBoxes(t *testing.T) {
	h := newHarness(t)
	ev := *h.ev
	name := program.BurstBoxName("lab", ev.Name, ev.Burst.Provider, 1)
	h.cloud.put(name, map[string]string{"fleet": "lab", "tier": "burst", "event": ev.Name})
	h.cloud.put("steady-1", map[string]string{"fleet": "lab", "tier": "steady", "event": "none"})
	rec := h.run(t, ev.End.Add(time.Minute))
	if rec.Phase != Gone {
		t.Fatalf("phase %s, want gone (log: %s)", rec.Phase, h.log.String())
	}
	if _, ok := h.cloud.boxes[name]; ok || len(h.cloud.boxes) != 1 {
		t.Fatalf("cloud after the sweep: %v, want only the steady box", h.cloud.boxes)
	}
	if got := strings.Join(h.stacks.took(), ";"); got != "destroy "+rec.Stack {
		t.Fatalf("calls %q, want the event's stack destroyed (it may hold the boxes)", got)
	}
	if !strings.Contains(h.log.String(), "action=lost-boxes") {
		t.Errorf("log has no action=lost-boxes: %s", h.log.String())
	}

	// No boxes: missed, nothing destroyed.
	h2 := newHarness(t)
	if rec := h2.run(t, h2.ev.End.Add(time.Minute)); rec.Phase != Missed || len(h2.stacks.took()) != 0 {
		t.Fatalf("no boxes: phase %s calls %v, want missed and none", rec.Phase, h2.stacks.took())
	}
}
