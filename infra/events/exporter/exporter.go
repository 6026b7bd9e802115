// Package exporter is the events exporter (fleet events exporter): it
// serves, on /metrics, what the reconciler's alerts need to see even
// when the reconciler has stopped. It reads the reconciler's heartbeat,
// its lease and the event records from the Pulumi backend, the events
// file, and lists each backend the events and records name by label
// (fleet=NAME, tier=burst): every burst box that exists, whether or not
// it answers scrapes. It does so once per refresh interval, in the
// background; a scrape reads the last refresh and costs no API call.
//
// A list that fails keeps the boxes the last good list found (a failing
// list never hides a box) and says so (relayfleet_burst_list_ok 0).
package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
)

// Store is what the exporter reads of the reconciler's state:
// events.PulumiStore.
type Store interface {
	Load(ctx context.Context) (map[string]*events.Record, error)
	LastBeat(ctx context.Context) (events.Beat, error)
	LeaseUntil(ctx context.Context) (time.Time, error)
}

// Defaults.
const (
	DefaultListEvery  = time.Minute
	DefaultStaleAfter = 2*time.Minute + 30*time.Second
	// listTimeout bounds one backend's list.
	listTimeout = 30 * time.Second
)

// Exporter reads a fleet's reconciler state and burst boxes (Refresh)
// and serves the last reading as metrics (it is a prometheus.Collector).
type Exporter struct {
	Fleet string
	Store Store
	// ReadEvents reads the events file as it is now.
	ReadEvents func() (*inventories.Events, error)
	// Backends opens a backend to list by label.
	Backends func(name string) (backend.Backend, error)
	// StaleAfter is how old the last reconcile without an error may be
	// before ReconcilerStale fires (exported for the rule to compare
	// with); DefaultStaleAfter when 0.
	StaleAfter time.Duration
	// Clock is the wall clock (time.Now when nil).
	Clock func() time.Time
	Log   *slog.Logger

	mu   sync.Mutex
	snap snapshot
}

// snapshot is one refresh's reading; lists and records that failed keep
// the last good reading.
type snapshot struct {
	refreshed time.Time
	beat      events.Beat
	leaseTil  time.Time
	storeOK   bool
	fileOK    bool
	records   map[string]*events.Record
	evs       *inventories.Events
	lists     map[string]*list // by backend
}

// list is one backend's boxes as last listed.
type list struct {
	ok    bool
	at    time.Time // last good list; zero: never
	boxes []backend.Box
}

func (e *Exporter) now() time.Time {
	if e.Clock != nil {
		return e.Clock()
	}
	return time.Now()
}

func (e *Exporter) log() *slog.Logger {
	if e.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.Log
}

// Refresh reads everything once: the heartbeat, the lease and the
// records from the Store, the events file, and each backend that an
// event of the file or a record names, listed by label. It returns the
// errors joined; what failed keeps its last good reading.
func (e *Exporter) Refresh(ctx context.Context) error {
	e.mu.Lock()
	prev := e.snap
	e.mu.Unlock()
	s := snapshot{refreshed: e.now(), records: prev.records, evs: prev.evs, beat: prev.beat, leaseTil: prev.leaseTil, lists: map[string]*list{}}
	var errs []error
	s.storeOK = true
	if recs, err := e.Store.Load(ctx); err != nil {
		s.storeOK = false
		errs = append(errs, err)
	} else {
		s.records = recs
	}
	if b, err := e.Store.LastBeat(ctx); err != nil {
		s.storeOK = false
		errs = append(errs, err)
	} else {
		s.beat = b
	}
	if l, err := e.Store.LeaseUntil(ctx); err != nil {
		s.storeOK = false
		errs = append(errs, err)
	} else {
		s.leaseTil = l
	}
	if evs, err := e.ReadEvents(); err != nil {
		errs = append(errs, err)
	} else {
		s.fileOK, s.evs = true, evs
	}
	names := map[string]bool{}
	for _, name := range s.backends() {
		names[name] = true
	}
	for name := range prev.lists {
		names[name] = true // a backend no longer named may still hold boxes
	}
	for name := range names {
		l := &list{}
		if p := prev.lists[name]; p != nil {
			l.at, l.boxes = p.at, p.boxes
		}
		boxes, err := e.list(ctx, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("backend %s: %w", name, err))
		} else {
			l.ok, l.at, l.boxes = true, e.now(), boxes
		}
		if err == nil && len(boxes) == 0 && !s.named(name) {
			continue // no longer named, and empty now
		}
		s.lists[name] = l
	}
	e.mu.Lock()
	e.snap = s
	e.mu.Unlock()
	err := errors.Join(errs...)
	if err != nil {
		e.log().Warn(err.Error(), "action", "refresh-failed")
	}
	return err
}

// backends are those the events file (any candidate of an event's burst)
// or a record (every backend its boxes were on) names.
func (s *snapshot) backends() []string {
	var out []string
	if s.evs != nil {
		for _, ev := range s.evs.Events {
			for _, c := range ev.Burst.Choices() {
				out = append(out, c.Provider)
			}
		}
	}
	for _, r := range s.records {
		out = append(out, r.SweepBackends()...)
	}
	return slices.DeleteFunc(out, func(n string) bool { return n == "" })
}

// named reports whether the events file or a record names the backend.
func (s *snapshot) named(name string) bool { return slices.Contains(s.backends(), name) }

func (e *Exporter) list(ctx context.Context, name string) ([]backend.Box, error) {
	b, err := e.Backends(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	return b.List(ctx, map[string]string{backend.LabelFleet: e.Fleet, "tier": provider.TierBurst})
}

var (
	descLastOK     = desc("relayfleet_events_reconcile_last_success_timestamp_seconds", "When a reconcile of the fleet last finished without an error (0: never).", "fleet")
	descLastRun    = desc("relayfleet_events_reconcile_last_run_timestamp_seconds", "When a reconcile of the fleet last finished (0: never).", "fleet")
	descLease      = desc("relayfleet_events_reconcile_lease_until_timestamp_seconds", "When the fleet's lease, held by the reconcile or other fleet command running now, expires unless renewed (0: none runs).", "fleet")
	descStaleAfter = desc("relayfleet_events_reconcile_stale_after_seconds", "How old the last reconcile without an error may be before ReconcilerStale fires.", "fleet")
	descStoreOK    = desc("relayfleet_events_store_ok", "1 when the last refresh read the records, heartbeat and lease from the Pulumi backend.", "fleet")
	descFileOK     = desc("relayfleet_events_file_ok", "1 when the last refresh read the events file.", "fleet")
	descRefreshed  = desc("relayfleet_events_exporter_refresh_timestamp_seconds", "When the exporter last refreshed.", "fleet")
	descBox        = desc("relayfleet_burst_box", "A burst box of the fleet that the backend lists by label (fleet, tier=burst).", "fleet", "event", "backend", "box")
	descListOK     = desc("relayfleet_burst_list_ok", "1 when the backend's last list by label succeeded; 0 keeps the boxes of the last good list.", "fleet", "backend")
	descListAt     = desc("relayfleet_burst_list_timestamp_seconds", "When the backend was last listed successfully (0: never).", "fleet", "backend")
	descStart      = desc("relayfleet_event_start_timestamp_seconds", "The event's start, from the events file, else from its record.", "fleet", "event")
	descEnd        = desc("relayfleet_event_end_timestamp_seconds", "The event's end, from the events file, else from its record.", "fleet", "event")
	descDestroyBy  = desc("relayfleet_event_destroy_by_timestamp_seconds", "The event's end plus its max overrun and drain time: its boxes should be gone by then.", "fleet", "event")
	descInFile     = desc("relayfleet_event_in_file", "1 when the event is in the events file, 0 when only its record is left.", "fleet", "event")
	descWanted     = desc("relayfleet_event_boxes_wanted", "The boxes the event's plan brings up (the target of a resize down in progress).", "fleet", "event")
	descRouted     = desc("relayfleet_event_boxes_routed", "The event's boxes in the router's list and not draining.", "fleet", "event")
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// Describe implements prometheus.Collector.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLastOK, descLastRun, descLease, descStaleAfter, descStoreOK, descFileOK, descRefreshed,
		descBox, descListOK, descListAt, descStart, descEnd, descDestroyBy, descInFile, descWanted, descRouted} {
		ch <- d
	}
}

func unix(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collect implements prometheus.Collector: the last refresh, nothing
// before the first.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	e.mu.Lock()
	s := e.snap
	e.mu.Unlock()
	if s.refreshed.IsZero() {
		return
	}
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	f := e.Fleet
	stale := e.StaleAfter
	if stale <= 0 {
		stale = DefaultStaleAfter
	}
	g(descLastOK, unix(s.beat.OK), f)
	g(descLastRun, unix(s.beat.Run), f)
	g(descLease, unix(s.leaseTil), f)
	g(descStaleAfter, stale.Seconds(), f)
	g(descStoreOK, b2f(s.storeOK), f)
	g(descFileOK, b2f(s.fileOK), f)
	g(descRefreshed, unix(s.refreshed), f)
	for name, l := range s.lists {
		g(descListOK, b2f(l.ok), f, name)
		g(descListAt, unix(l.at), f, name)
		for _, b := range l.boxes {
			g(descBox, 1, f, b.Labels["event"], name, b.Name)
		}
	}
	for _, ev := range s.events() {
		g(descInFile, b2f(ev.inFile), f, ev.name)
		if !ev.start.IsZero() {
			g(descStart, unix(ev.start), f, ev.name)
		}
		if !ev.end.IsZero() {
			g(descEnd, unix(ev.end), f, ev.name)
			g(descDestroyBy, unix(ev.end.Add(ev.overrun+ev.drain)), f, ev.name)
		}
		if ev.wanted >= 0 {
			g(descWanted, float64(ev.wanted), f, ev.name)
			g(descRouted, float64(ev.routed), f, ev.name)
		}
	}
}

// event is what the metrics say of one event.
type event struct {
	name           string
	inFile         bool
	start, end     time.Time
	drain, overrun time.Duration
	wanted, routed int // wanted -1: no plan
}

// events are the events of the file and those only a record is left
// of, by name: times from the file when the event is in it, else from
// the record (and from the record while it keeps the old window of a
// running event the file moved later).
func (s *snapshot) events() []event {
	by := map[string]*event{}
	for name, r := range s.records {
		ev := &event{name: name, start: r.Start, end: r.End, drain: r.DrainTime.D(), wanted: -1}
		ev.overrun = (&inventories.Event{MaxOverrun: r.MaxOverrun}).Overrun()
		if r.Plan != nil && r.Phase != events.Gone && r.Phase != events.Missed {
			ev.wanted, ev.routed = r.Wanted(), routed(r)
			if r.Shrink != nil {
				ev.wanted = r.Shrink.To
			}
		}
		by[name] = ev
	}
	if s.evs != nil {
		for _, fe := range s.evs.Events {
			ev := by[fe.Name]
			if ev == nil {
				ev = &event{name: fe.Name, wanted: -1}
				by[fe.Name] = ev
			}
			ev.inFile, ev.drain, ev.overrun = true, fe.DrainTime.D(), fe.Overrun()
			// A running event the file moved later runs to its old end:
			// its boxes should be gone by the record's window, not the
			// file's.
			if r := s.records[fe.Name]; r == nil || r.MovedLater == nil || r.Phase == events.Gone || r.Phase == events.Missed {
				ev.start, ev.end = fe.Start.Time, fe.End.Time
			}
		}
	}
	out := make([]event, 0, len(by))
	for _, ev := range by {
		if ev.drain <= 0 {
			ev.drain = inventories.DefaultDrainTime
		}
		out = append(out, *ev)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// routed counts the record's hosts in the router's list that are not
// draining.
func routed(r *events.Record) int {
	if r.Route == nil || r.Route.Draining || (r.Phase != events.Up && r.Phase != events.Creating) {
		return 0
	}
	n := 0
	for _, h := range r.Hosts {
		draining := false
		for _, d := range r.Route.DrainingHosts {
			draining = draining || d == h.Name
		}
		if !draining {
			n++
		}
	}
	return n
}

// Handler serves the exporter's metrics.
func (e *Exporter) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(e)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// Serve serves /metrics on ln (nothing until the first refresh ends),
// refreshes at once and then every every, until ctx ends.
func (e *Exporter) Serve(ctx context.Context, ln net.Listener, every time.Duration) error {
	if every <= 0 {
		every = DefaultListEvery
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", e.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	e.Refresh(ctx)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
			return nil
		case err := <-done:
			return err
		case <-t.C:
			e.Refresh(ctx)
		}
	}
}
