package exporter

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/program"
	rftest "github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
)

// fakeStore is the reconciler's state as the Pulumi backend would hold it.
type fakeStore struct {
	recs  map[string]*events.Record
	beat  events.Beat
	lease time.Time
	err   error
}

func (s *fakeStore) Load(context.Context) (map[string]*events.Record, error) { return s.recs, s.err }
func (s *fakeStore) LastBeat(context.Context) (events.Beat, error)           { return s.beat, s.err }
func (s *fakeStore) LeaseUntil(context.Context) (time.Time, error)           { return s.lease, s.err }

// fakeBackend lists boxes by label and counts its lists.
type fakeBackend struct {
	mu    sync.Mutex
	boxes []backend.Box
	fail  error
	lists int
}

func (b *fakeBackend) Create(context.Context, backend.Spec) (backend.Box, error) {
	return backend.Box{}, errors.New("not used")
}
func (b *fakeBackend) Get(context.Context, string) (backend.Box, error) {
	return backend.Box{}, backend.ErrNotFound
}
func (b *fakeBackend) Delete(context.Context, string) error { return errors.New("not used") }
func (b *fakeBackend) List(_ context.Context, labels map[string]string) ([]backend.Box, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lists++
	if b.fail != nil {
		return nil, b.fail
	}
	var out []backend.Box
	for _, x := range b.boxes {
		if backend.MatchLabels(x.Labels, labels) {
			out = append(out, x)
		}
	}
	return out, nil
}

func box(name, event string) backend.Box {
	return backend.Box{ID: name, Name: name, Labels: map[string]string{"fleet": "lab", "tier": "burst", "event": event}}
}

// t0 is 1900000000 in Unix seconds, so the figures below read plainly.
var t0 = time.Unix(1_900_000_000, 0).UTC()

// fixture: "final" in the file (starts at t0, ends at t0+2h, drain 15m)
// with its record up, 3 boxes planned, 2 routed of which one drains;
// "old" only in the records (its times from there); boxes of both on
// the lab backend, one of an event nothing knows ("ghost"), and one of
// another fleet that the list by label leaves out.
func fixture() (*Exporter, *fakeStore, *fakeBackend) {
	overrun := inventories.Duration(30 * time.Minute)
	st := &fakeStore{
		beat:  events.Beat{Run: t0.Add(-30 * time.Second), OK: t0.Add(-90 * time.Second)},
		lease: t0.Add(2 * time.Minute),
		recs: map[string]*events.Record{
			"final": {Event: "final", Backend: "lab", Phase: events.Up, Plan: &events.Sizing{Boxes: 3},
				Hosts: []program.HostEntry{{Name: "b1"}, {Name: "b2"}},
				Route: &program.StackHosts{DrainingHosts: []string{"b2"}}},
			"old": {Event: "old", Backend: "lab", Phase: events.Gone, Plan: &events.Sizing{Boxes: 2},
				Start: t0.Add(-48 * time.Hour), End: t0.Add(-46 * time.Hour), DrainTime: inventories.Duration(5 * time.Minute)},
		},
	}
	be := &fakeBackend{boxes: []backend.Box{box("b1", "final"), box("o1", "old"), box("g1", "ghost"),
		{ID: "x", Name: "x", Labels: map[string]string{"fleet": "other", "tier": "burst", "event": "final"}}}}
	evs := &inventories.Events{Events: []inventories.Event{{Name: "final",
		Start: inventories.Time{Time: t0}, End: inventories.Time{Time: t0.Add(2 * time.Hour)},
		DrainTime: inventories.Duration(15 * time.Minute), MaxOverrun: &overrun, Burst: inventories.Pool{Box: inventories.Box{Provider: "lab"}}}}}
	e := &Exporter{
		Fleet: "lab", Store: st, StaleAfter: 150 * time.Second,
		ReadEvents: func() (*inventories.Events, error) { return evs, nil },
		Backends: func(name string) (backend.Backend, error) {
			if name != "lab" {
				return nil, errors.New("no backend " + name)
			}
			return be, nil
		},
		Clock: func() time.Time { return t0 },
	}
	return e, st, be
}

// TestExporterMetrics: every box the backend lists by the fleet's labels
// is exported with its event, those of an event nothing knows too; each
// event's times come from the file, else its record; wanted and routed
// come from the record (a draining host is not routed); the heartbeat,
// the lease and the threshold are the store's and the flag's.
func TestExporterMetrics(t *testing.T) {
	e, _, _ := fixture()
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP relayfleet_burst_box A burst box of the fleet that the backend lists by label (fleet, tier=burst).
# TYPE relayfleet_burst_box gauge
relayfleet_burst_box{backend="lab",box="b1",event="final",fleet="lab"} 1
relayfleet_burst_box{backend="lab",box="g1",event="ghost",fleet="lab"} 1
relayfleet_burst_box{backend="lab",box="o1",event="old",fleet="lab"} 1
# HELP relayfleet_event_destroy_by_timestamp_seconds The event's end plus its max overrun and drain time: its boxes should be gone by then.
# TYPE relayfleet_event_destroy_by_timestamp_seconds gauge
relayfleet_event_destroy_by_timestamp_seconds{event="final",fleet="lab"} 1.9000099e+09
relayfleet_event_destroy_by_timestamp_seconds{event="old",fleet="lab"} 1.8998383e+09
# HELP relayfleet_event_in_file 1 when the event is in the events file, 0 when only its record is left.
# TYPE relayfleet_event_in_file gauge
relayfleet_event_in_file{event="final",fleet="lab"} 1
relayfleet_event_in_file{event="old",fleet="lab"} 0
# HELP relayfleet_event_boxes_wanted The boxes the event's plan brings up (the target of a resize down in progress).
# TYPE relayfleet_event_boxes_wanted gauge
relayfleet_event_boxes_wanted{event="final",fleet="lab"} 3
# HELP relayfleet_event_boxes_routed The event's boxes in the router's list and not draining.
# TYPE relayfleet_event_boxes_routed gauge
relayfleet_event_boxes_routed{event="final",fleet="lab"} 1
# HELP relayfleet_events_reconcile_last_success_timestamp_seconds When a reconcile of the fleet last finished without an error (0: never).
# TYPE relayfleet_events_reconcile_last_success_timestamp_seconds gauge
relayfleet_events_reconcile_last_success_timestamp_seconds{fleet="lab"} 1.89999991e+09
# HELP relayfleet_events_reconcile_last_run_timestamp_seconds When a reconcile of the fleet last finished (0: never).
# TYPE relayfleet_events_reconcile_last_run_timestamp_seconds gauge
relayfleet_events_reconcile_last_run_timestamp_seconds{fleet="lab"} 1.89999997e+09
# HELP relayfleet_events_reconcile_lease_until_timestamp_seconds When the fleet's lease, held by the reconcile or other fleet command running now, expires unless renewed (0: none runs).
# TYPE relayfleet_events_reconcile_lease_until_timestamp_seconds gauge
relayfleet_events_reconcile_lease_until_timestamp_seconds{fleet="lab"} 1.90000012e+09
# HELP relayfleet_events_reconcile_stale_after_seconds How old the last reconcile without an error may be before ReconcilerStale fires.
# TYPE relayfleet_events_reconcile_stale_after_seconds gauge
relayfleet_events_reconcile_stale_after_seconds{fleet="lab"} 150
# HELP relayfleet_burst_list_ok 1 when the backend's last list by label succeeded; 0 keeps the boxes of the last good list.
# TYPE relayfleet_burst_list_ok gauge
relayfleet_burst_list_ok{backend="lab",fleet="lab"} 1
`
	names := []string{"relayfleet_burst_box", "relayfleet_event_destroy_by_timestamp_seconds", "relayfleet_event_in_file",
		"relayfleet_event_boxes_wanted", "relayfleet_event_boxes_routed", "relayfleet_events_reconcile_last_success_timestamp_seconds",
		"relayfleet_events_reconcile_last_run_timestamp_seconds", "relayfleet_events_reconcile_lease_until_timestamp_seconds",
		"relayfleet_events_reconcile_stale_after_seconds", "relayfleet_burst_list_ok"}
	if err := testutil.CollectAndCompare(e, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
}

// TestExporterMovedLaterKeepsTheOldWindow: an event the file moved later
// while it ran (its record keeps the old window until its boxes are gone)
// should have its boxes gone by the old end plus max overrun and drain
// time, not the new one's.
func TestExporterMovedLaterKeepsTheOldWindow(t *testing.T) {
	e, st, _ := fixture()
	rec := st.recs["final"]
	rec.Start, rec.End = t0.Add(-24*time.Hour), t0.Add(-22*time.Hour)
	rec.MovedLater = &events.Window{Start: t0, End: t0.Add(2 * time.Hour), UpAt: t0.Add(-time.Hour)}
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	// t0 - 22h + 30m + 15m.
	want := `
# HELP relayfleet_event_destroy_by_timestamp_seconds The event's end plus its max overrun and drain time: its boxes should be gone by then.
# TYPE relayfleet_event_destroy_by_timestamp_seconds gauge
relayfleet_event_destroy_by_timestamp_seconds{event="final",fleet="lab"} 1.8999235e+09
relayfleet_event_destroy_by_timestamp_seconds{event="old",fleet="lab"} 1.8998383e+09
`
	if err := testutil.CollectAndCompare(e, strings.NewReader(want), "relayfleet_event_destroy_by_timestamp_seconds"); err != nil {
		t.Fatal(err)
	}
}

// TestExporterListFailureKeepsBoxes: a list that fails keeps the boxes
// of the last good one, with list_ok 0 and the time of that list; a
// store that fails keeps the last heartbeat and says so.
func TestExporterListFailureKeepsBoxes(t *testing.T) {
	e, st, be := fixture()
	ctx := context.Background()
	if err := e.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	be.fail = errors.New("503 from the cloud")
	st.err = errors.New("backend unreachable")
	now := t0.Add(time.Minute)
	e.Clock = func() time.Time { return now }
	if err := e.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "503 from the cloud") {
		t.Fatalf("Refresh = %v, want the list's error", err)
	}
	want := `
# HELP relayfleet_burst_box A burst box of the fleet that the backend lists by label (fleet, tier=burst).
# TYPE relayfleet_burst_box gauge
relayfleet_burst_box{backend="lab",box="b1",event="final",fleet="lab"} 1
relayfleet_burst_box{backend="lab",box="g1",event="ghost",fleet="lab"} 1
relayfleet_burst_box{backend="lab",box="o1",event="old",fleet="lab"} 1
# HELP relayfleet_burst_list_ok 1 when the backend's last list by label succeeded; 0 keeps the boxes of the last good list.
# TYPE relayfleet_burst_list_ok gauge
relayfleet_burst_list_ok{backend="lab",fleet="lab"} 0
# HELP relayfleet_burst_list_timestamp_seconds When the backend was last listed successfully (0: never).
# TYPE relayfleet_burst_list_timestamp_seconds gauge
relayfleet_burst_list_timestamp_seconds{backend="lab",fleet="lab"} 1.9e+09
# HELP relayfleet_events_store_ok 1 when the last refresh read the records, heartbeat and lease from the Pulumi backend.
# TYPE relayfleet_events_store_ok gauge
relayfleet_events_store_ok{fleet="lab"} 0
# HELP relayfleet_events_reconcile_last_success_timestamp_seconds When a reconcile of the fleet last finished without an error (0: never).
# TYPE relayfleet_events_reconcile_last_success_timestamp_seconds gauge
relayfleet_events_reconcile_last_success_timestamp_seconds{fleet="lab"} 1.89999991e+09
`
	if err := testutil.CollectAndCompare(e, strings.NewReader(want), "relayfleet_burst_box", "relayfleet_burst_list_ok",
		"relayfleet_burst_list_timestamp_seconds", "relayfleet_events_store_ok", "relayfleet_events_reconcile_last_success_timestamp_seconds"); err != nil {
		t.Fatal(err)
	}
}

// TestExporterScrapesListNothing: scrapes of /metrics read the last
// refresh; only Refresh lists the backend.
func TestExporterScrapesListNothing(t *testing.T) {
	e, _, be := fixture()
	srv := httptest.NewServer(e.Handler())
	defer srv.Close()
	if err := e.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if be.lists != 1 {
		t.Fatalf("the backend was listed %d times for 1 refresh and 3 scrapes, want 1", be.lists)
	}
	if n := testutil.CollectAndCount(e, "relayfleet_burst_box"); n != 3 {
		t.Fatalf("%d boxes exported, want 3", n)
	}
}

// TestExporterServe: Serve answers /metrics with the first refresh's
// boxes and returns once its context ends.
func TestExporterServe(t *testing.T) {
	e, _, _ := fixture()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- e.Serve(ctx, ln, time.Hour) }()
	var body string
	if !rftest.PollEvery(10*time.Second, 20*time.Millisecond, func() bool {
		resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return strings.Contains(body, `relayfleet_burst_box{backend="lab",box="g1",event="ghost",fleet="lab"} 1`)
	}) {
		t.Fatalf("/metrics never showed the boxes:\n%s", body)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve after its context ended: %v", err)
	}
}
