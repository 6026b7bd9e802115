package events

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/inventories"
)

// loadProbe answers each relay box's listeners and headroom by name.
type loadProbe struct {
	listeners, room map[string]int64
}

func (p *loadProbe) sum(m map[string]int64, hosts []program.HostEntry) int64 {
	var n int64
	for _, h := range hosts {
		n += m[h.Name]
	}
	return n
}

func (p *loadProbe) Listeners(_ context.Context, hosts []program.HostEntry) (int64, error) {
	return p.sum(p.listeners, hosts), nil
}

func (p *loadProbe) Room(_ context.Context, hosts []program.HostEntry) (int64, error) {
	return p.sum(p.room, hosts), nil
}

func (p *loadProbe) Drain(context.Context, []program.HostEntry) error { return nil }

func (p *loadProbe) Shed(context.Context, []program.HostEntry, int64) (int64, error) { return 0, nil }

// TestSurge: a two-box steady fleet at 90% of its relays' capacity for
// less than the surge's for brings nothing; past it, a surge box comes up
// and is routed; while listeners land on it nothing more happens; once
// the load drops and the steady fleet alone has the headroom for
// back_for, the surge box is destroyed, proven gone by label, and its
// record is ready for the next surge.
func TestSurge(t *testing.T) {
	h := newHarness(t)
	r := h.r
	pool := inventories.Pool{Name: inventories.SurgeEvent, Box: inventories.Box{Provider: "lab", Shape: "small", BasePort: inventories.DefaultBasePort}, Max: 3}
	r.Fleet.Surge = &inventories.Surge{WhenHeadroomBelow: 0.2, For: inventories.Duration(time.Minute), BackFor: inventories.Duration(10 * time.Minute), Max: 3, Burst: pool}
	r.Events = &inventories.Events{}
	steady := []program.HostEntry{{Name: "s1", Address: "10.0.0.1", Ports: []int{4443}}, {Name: "s2", Address: "10.0.0.2", Ports: []int{4443}}}
	if _, err := program.SetStackHosts(r.StateDir, r.Fleet.Name, steady); err != nil {
		t.Fatal(err)
	}
	probe := &loadProbe{listeners: map[string]int64{"s1": 90, "s2": 90}, room: map[string]int64{"s1": 10, "s2": 10}}
	r.Probe = probe
	surgeBox := program.BurstBoxName("lab", inventories.SurgeEvent, "lab", 1)
	run := func(at time.Time) *Record {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), at); err != nil {
			t.Fatalf("reconcile at %s: %v", at.Format(time.RFC3339), err)
		}
		rec, _, err := ReadRecord(r.StateDir, inventories.SurgeEvent)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	// A blip under the threshold, then room again: it is forgotten, so
	// the next time under counts from then.
	run(t0.Add(-5 * time.Minute))
	probe.room = map[string]int64{"s1": 40, "s2": 40}
	if rec := run(t0.Add(-4 * time.Minute)); !rec.Surge.BelowSince.IsZero() {
		t.Fatalf("headroom back: below since %s, want none", rec.Surge.BelowSince)
	}
	probe.room = map[string]int64{"s1": 10, "s2": 10}
	run(t0)
	if rec := run(t0.Add(50 * time.Second)); len(h.stacks.took()) != 0 || rec == nil || rec.Surge.active() || !rec.Surge.BelowSince.Equal(t0) {
		t.Fatalf("under the threshold for less than its for: want no surge, below since %s; record %+v", t0, rec)
	}
	rec := run(t0.Add(61 * time.Second))
	if got := strings.Join(h.stacks.took(), ";"); got != "up lab-event-surge 1" || rec.Phase != Up || !rec.Surge.active() {
		t.Fatalf("past its for: Pulumi runs %q, phase %s; want the surge's stack up with one box", got, rec.Phase)
	}
	if !strings.Contains(h.log.String(), "action=surge") || !strings.Contains(h.log.String(), "SURGE: headroom 10%") {
		t.Errorf("the surge's start is not logged:\n%s", h.log)
	}
	if rs := h.relays(t); len(rs) != 3 {
		t.Fatalf("relays %+v: want the steady two and the surge box", rs)
	}
	// New listeners land on it: headroom back over the threshold, the
	// steady fleet alone still too full to let it go.
	probe.listeners[surgeBox], probe.room[surgeBox] = 20, 100
	for i := range 12 {
		if rec = run(t0.Add(time.Duration(2+i) * time.Minute)); rec.Phase != Up || rec.Surge.Until.Before(t0.Add(time.Duration(2+i)*time.Minute).Add(time.Hour-time.Second)) {
			t.Fatalf("while needed: phase %s, until %s; want up, its end an hour ahead", rec.Phase, rec.Surge.Until)
		}
	}
	if got := h.stacks.took(); len(got) != 0 {
		t.Fatalf("while needed: Pulumi runs %q, want none", got)
	}
	// The load drops: the steady fleet alone has the headroom; for
	// back_for, then the surge goes.
	probe.listeners = map[string]int64{"s1": 30, "s2": 30, surgeBox: 0}
	probe.room = map[string]int64{"s1": 70, "s2": 70, surgeBox: 120}
	drop := t0.Add(20 * time.Minute)
	if rec = run(drop); rec.Phase != Up || !rec.Surge.BackSince.Equal(drop) {
		t.Fatalf("the load dropped: phase %s, back since %s; want up, back since %s", rec.Phase, rec.Surge.BackSince, drop)
	}
	rec = run(drop.Add(10 * time.Minute))
	if rec.Phase != Gone || rec.Surge.active() || rec.Remaining != 0 {
		t.Fatalf("back for back_for: phase %s, surge %+v; want gone and ready for the next", rec.Phase, rec.Surge)
	}
	if got := strings.Join(h.stacks.took(), ";"); got != "destroy lab-event-surge" {
		t.Errorf("Pulumi runs %q, want the surge's destroy", got)
	}
	if !strings.Contains(h.log.String(), "action=surge-end") {
		t.Errorf("the surge's end is not logged:\n%s", h.log)
	}
	for name, l := range h.cloud.boxes {
		if l["event"] == inventories.SurgeEvent {
			t.Errorf("surge box %s left in the cloud", name)
		}
	}
	if rs := h.relays(t); len(rs) != 2 {
		t.Errorf("relays %+v: want the steady two", rs)
	}
	// Under the threshold again: a new surge, from nothing.
	probe.listeners, probe.room = map[string]int64{"s1": 95, "s2": 95}, map[string]int64{"s1": 5, "s2": 5}
	again := drop.Add(time.Hour)
	run(again)
	if rec = run(again.Add(time.Minute)); rec.Phase != Up || !rec.Surge.Since.Equal(again.Add(time.Minute)) {
		t.Fatalf("a second surge: phase %s since %s", rec.Phase, rec.Surge.Since)
	}
	// fleet burst down --event surge ends it now; the next comes up.
	if _, err := r.Manual(context.Background(), again.Add(2*time.Minute), inventories.SurgeEvent, ManualDown, 0); err != nil {
		t.Fatal(err)
	}
	if rec = run(again.Add(3 * time.Minute)); rec.Phase != Gone || rec.Manual != "" {
		t.Fatalf("after fleet burst down: phase %s manual %q; want gone, the next surge free to come", rec.Phase, rec.Manual)
	}
	run(again.Add(4 * time.Minute))
	if rec = run(again.Add(5 * time.Minute)); rec.Phase != Up {
		t.Fatalf("the surge after a burst down: phase %s, want up", rec.Phase)
	}
}

// TestSurgeFallsBack: a surge whose burst lists candidates comes up as an
// event's does: its first candidate refusing every box for capacity, the
// plan is resized for the next and its boxes are made there in the same
// reconcile and routed; at its end the proof of teardown lists the cloud
// that held them.
func TestSurgeFallsBack(t *testing.T) {
	h := newHarness(t)
	r := h.r
	pool := inventories.Pool{Name: inventories.SurgeEvent, Box: inventories.Box{Provider: "lab", Shape: "small", BasePort: inventories.DefaultBasePort}, Max: 3, // the first candidate is the pool's, as the fleet file's check makes it
		Candidates: []inventories.Candidate{{Provider: "lab", Shape: "small"}, {Provider: "hcloud", Shape: "ccx33", Location: "fsn1"}}}
	r.Fleet.Surge = &inventories.Surge{WhenHeadroomBelow: 0.2, For: inventories.Duration(time.Minute), BackFor: inventories.Duration(10 * time.Minute), Max: 3, Burst: pool}
	r.Events = &inventories.Events{}
	steady := []program.HostEntry{{Name: "s1", Address: "10.9.0.1", Ports: []int{4443}}, {Name: "s2", Address: "10.9.0.2", Ports: []int{4443}}}
	if _, err := program.SetStackHosts(r.StateDir, r.Fleet.Name, steady); err != nil {
		t.Fatal(err)
	}
	probe := &loadProbe{listeners: map[string]int64{"s1": 90, "s2": 90}, room: map[string]int64{"s1": 10, "s2": 10}}
	r.Probe = probe
	stacks := &spillStacks{fleet: r.Fleet.Name, refuse: func(k, n int) bool { return k == 0 }}
	r.Stacks = stacks
	var swept []string
	r.Backends = func(name string) (backend.Backend, error) {
		swept = append(swept, name)
		return h.cloud, nil
	}
	run := func(at time.Time) *Record {
		t.Helper()
		if _, err := r.Reconcile(context.Background(), at); err != nil { // a refused candidate fails the run that meets it
			t.Logf("reconcile at %s: %v", at.Format(time.RFC3339), err)
		}
		rec, _, err := ReadRecord(r.StateDir, inventories.SurgeEvent)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	run(t0)
	rec := run(t0.Add(61 * time.Second))
	if len(stacks.calls) != 2 || !strings.HasPrefix(stacks.calls[0], "c0=") || !strings.Contains(stacks.calls[1], " c1=") {
		t.Fatalf("Pulumi ups %q: want the first candidate asked, then the plan on the second", stacks.calls)
	}
	if rec.Phase != Up || len(rec.Candidates) != 2 || !strings.Contains(rec.Candidates[0].Refused, "resource_unavailable") || rec.Candidates[1].Boxes < 1 || len(rec.Hosts) != rec.Candidates[1].Boxes {
		t.Fatalf("surge past its for: phase %s, candidates %+v, hosts %+v; want up on the second candidate", rec.Phase, rec.Candidates, rec.Hosts)
	}
	for _, hst := range rec.Hosts {
		if hst.Backend != "hcloud" {
			t.Errorf("surge box %s on %s, want hcloud (the second candidate)", hst.Name, hst.Backend)
		}
	}
	if !strings.Contains(h.log.String(), "action=fallback") {
		t.Errorf("the surge's fallback is not logged:\n%s", h.log)
	}
	if rs := h.relays(t); len(rs) != 2+len(rec.Hosts) {
		t.Fatalf("relays %+v: want the steady two and the surge's boxes", rs)
	}
	// The load drops: back for back_for, the surge goes, proven gone on
	// the cloud that held its boxes.
	probe.listeners, probe.room = map[string]int64{"s1": 30, "s2": 30}, map[string]int64{"s1": 70, "s2": 70}
	drop := t0.Add(20 * time.Minute)
	run(drop)
	swept = nil
	if rec = run(drop.Add(10 * time.Minute)); rec.Phase != Gone || rec.Remaining != 0 {
		t.Fatalf("back for back_for: phase %s, %d remaining; want gone", rec.Phase, rec.Remaining)
	}
	if !slices.Contains(swept, "hcloud") {
		t.Errorf("the proof of teardown listed %v, want hcloud (where the surge's boxes were)", swept)
	}
}
