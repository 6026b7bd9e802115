package events

import (
	"context"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
)

// cheaperCalibration is one under which a small lab box carries more
// listeners (less RAM per listener): the same peak needs fewer boxes.
func cheaperCalibration(h *harness) *inventories.Calibration {
	c := *h.r.Calibration
	c.RAMPerListener /= 3
	return &c
}

// storyCalibration sets the story's calibration, which the figures of
// these tests were chosen under (the default follows the bundled relay's
// measurements and moves with them).
func storyCalibration(t *testing.T, h *harness) {
	t.Helper()
	path, ok := inventories.NamedCalibration(inventories.CalibrationStory)
	if !ok {
		t.Fatal("no story calibration")
	}
	cal, err := inventories.LoadCalibration(path)
	if err != nil {
		t.Fatal(err)
	}
	h.r.Calibration = cal
}

// boxes is how many burst boxes Size gives the harness's event now.
func (h *harness) boxes(t *testing.T) int {
	t.Helper()
	s, err := Size(h.ev, h.r.Fleet, h.r.Catalogue, h.r.Calibration)
	if err != nil {
		t.Fatal(err)
	}
	return s.Boxes
}

func (h *harness) name(n int) string {
	return program.BurstBoxName("lab", h.ev.Name, h.ev.Burst.Provider, n)
}

// routed is the router's list as "URL" or "URL draining", in order.
func (h *harness) routed(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, r := range h.relays(t) {
		s := r.URL
		if r.Draining {
			s += " draining"
		}
		out = append(out, s)
	}
	return out
}

// TestCalibrationChangeMidEventKeepsTheSize: a new calibration (or a
// lower peak) that sizes a running event smaller removes no box: no
// Pulumi run, the record keeps its size and notes the new figure once.
// Growing still happens by itself.
func TestCalibrationChangeMidEventKeepsTheSize(t *testing.T) {
	testutil.NoLeaks(t)
	h := newHarness(t)
	storyCalibration(t, h)
	h.ev.PeakListeners = 2200
	h.ev.Burst.Max = 3
	if n := h.boxes(t); n != 3 {
		t.Fatalf("a peak of 2,200 sizes %d boxes; the test wants 3", n)
	}
	rec := h.run(t, h.ev.UpAt())
	if rec.Phase != Up || len(rec.Hosts) != 3 {
		t.Fatalf("phase %s, %d hosts", rec.Phase, len(rec.Hosts))
	}
	h.stacks.took()

	h.r.Calibration = cheaperCalibration(h)
	smaller := h.boxes(t)
	if smaller >= 3 {
		t.Fatalf("the new calibration sizes %d boxes; the test wants fewer than 3", smaller)
	}
	h.probe.listeners = 900
	for i := range 3 {
		rec = h.run(t, h.ev.Start.Add(time.Duration(i+1)*time.Minute))
		if c := h.stacks.took(); len(c) != 0 {
			t.Fatalf("run %d after the calibration change: Pulumi calls %q; want none", i, c)
		}
	}
	if rec.Phase != Up || len(rec.Hosts) != 3 || rec.Plan.Boxes != 3 || rec.Suggested == nil || *rec.Suggested != smaller {
		t.Fatalf("phase %s hosts %d plan %d suggested %v: want 3 boxes kept, %d suggested", rec.Phase, len(rec.Hosts), rec.Plan.Boxes, rec.Suggested, smaller)
	}
	if rs := h.routed(t); len(rs) != 3 || strings.Contains(strings.Join(rs, ","), "draining") {
		t.Fatalf("router list %v: want the 3 boxes routed", rs)
	}
	if len(h.cloud.boxes) != 3 {
		t.Fatalf("%d boxes at the backend, want 3", len(h.cloud.boxes))
	}
	holds := 0
	for _, e := range rec.Log {
		if e.Action == "hold" {
			holds++
			if !strings.Contains(e.Detail, fmt.Sprintf("at %s; it keeps its 3", text.Plural(smaller, "box", "boxes"))) || !strings.Contains(e.Detail, "fleet burst resize --event "+h.ev.Name) {
				t.Errorf("hold note %q", e.Detail)
			}
		}
	}
	if holds != 1 {
		t.Errorf("%d hold notes over 3 runs, want 1", holds)
	}
	// A lower peak alone holds too.
	storyCalibration(t, h)
	h.ev.PeakListeners = 1000
	h.run(t, h.ev.Start.Add(5*time.Minute))
	if c := h.stacks.took(); len(c) != 0 {
		t.Fatalf("a lower peak mid-event: Pulumi calls %q; want none", c)
	}
	// A higher figure grows the event by itself.
	h.ev.PeakListeners, h.ev.Burst.Max = 5000, 4
	rec = h.run(t, h.ev.Start.Add(6*time.Minute))
	if c := h.stacks.took(); strings.Join(c, ";") != "up lab-event-lab-show 4" || len(rec.Hosts) != 4 {
		t.Fatalf("a higher peak mid-event: calls %q, %d hosts; want a grow to 4", c, len(rec.Hosts))
	}
}

// TestResizeDownDrainsThenRemovesOnlyEmptyBoxes: fleet burst resize after
// a calibration change drains the boxes that go, and removes a box only
// once it and every box numbered above it hold no listener, each time
// taking it out of the router's list before Pulumi runs.
func TestResizeDownDrainsThenRemovesOnlyEmptyBoxes(t *testing.T) {
	h := newHarness(t)
	storyCalibration(t, h)
	ctx := context.Background()
	h.ev.PeakListeners = 2200
	h.ev.Burst.Max = 3
	h.run(t, h.ev.UpAt())
	h.stacks.took()
	h.r.Calibration = cheaperCalibration(h)
	to := h.boxes(t)
	if to != 1 {
		t.Fatalf("the new calibration sizes %d boxes; the test wants 1", to)
	}
	b1, b2, b3 := h.name(1), h.name(2), h.name(3)
	h.probe.perHost = map[string]int64{b1: 300, b2: 0, b3: 20}
	var atUp [][]string
	h.stacks.beforeUp = func() { atUp = append(atUp, h.routed(t)) }

	// The resize marks boxes 2 and 3 draining and tells their listeners
	// to move; box 3 still holds some, so nothing is removed, box 2
	// (empty) neither: it is numbered below box 3.
	now := h.ev.Start.Add(10 * time.Minute)
	res, err := h.r.Resize(ctx, now, h.ev.Name)
	if err != nil {
		t.Fatal(err)
	}
	if res.Phase != Up || strings.Join(h.probe.drainedHosts, ",") != b2+","+b3 {
		t.Fatalf("resize: phase %s, drained %v; want %s and %s drained", res.Phase, h.probe.drainedHosts, b2, b3)
	}
	if c := h.stacks.took(); len(c) != 0 {
		t.Fatalf("resize with listeners on %s: Pulumi calls %q; want none", b3, c)
	}
	want := []string{"http://10.0.0.10:4443/", "http://10.0.0.11:4443/ draining", "http://10.0.0.12:4443/ draining"}
	if rs := h.routed(t); strings.Join(rs, ",") != strings.Join(want, ",") {
		t.Fatalf("router list %v, want %v", rs, want)
	}
	rec := h.run(t, now.Add(time.Minute))
	if c := h.stacks.took(); len(c) != 0 || len(rec.Hosts) != 3 || rec.Shrink == nil {
		t.Fatalf("box 3 still busy: calls %q, %d hosts", c, len(rec.Hosts))
	}

	// Box 3 empties while one listener landed on box 2 before the router
	// saw it draining: box 3 goes, out of the router's list first.
	h.probe.perHost[b3], h.probe.perHost[b2] = 0, 1
	rec = h.run(t, now.Add(2*time.Minute))
	if c := h.stacks.took(); strings.Join(c, ";") != "up lab-event-lab-show 2" {
		t.Fatalf("box 3 empty: calls %q; want an up to 2 boxes", c)
	}
	if len(atUp) != 1 || strings.Join(atUp[0], ",") != strings.Join(want[:2], ",") {
		t.Fatalf("router list as Pulumi started: %v; want %v (box 3 out, box 2 draining)", atUp, want[:2])
	}
	if _, ok := h.cloud.boxes[b3]; ok || len(rec.Hosts) != 2 || rec.Shrink == nil {
		t.Fatalf("after removing box 3: %d hosts, shrink %+v", len(rec.Hosts), rec.Shrink)
	}

	// Box 2 empties: it goes, the resize is done.
	h.probe.perHost[b2] = 0
	rec = h.run(t, now.Add(3*time.Minute))
	if c := h.stacks.took(); strings.Join(c, ";") != "up lab-event-lab-show 1" {
		t.Fatalf("box 2 empty: calls %q; want an up to 1 box", c)
	}
	if len(atUp) != 2 || strings.Join(atUp[1], ",") != want[0] {
		t.Fatalf("router list as Pulumi started: %v; want only box 1", atUp[1])
	}
	if rec.Shrink != nil || len(rec.Hosts) != 1 || rec.Plan.Boxes != 1 || rec.Phase != Up {
		t.Fatalf("after the resize: shrink %+v, %d hosts, plan %d, phase %s", rec.Shrink, len(rec.Hosts), rec.Plan.Boxes, rec.Phase)
	}
	if rs := h.routed(t); strings.Join(rs, ",") != want[0] {
		t.Fatalf("router list %v, want box 1 routed alone", rs)
	}
	if _, ok := h.cloud.boxes[b1]; !ok || len(h.cloud.boxes) != 1 {
		t.Fatalf("boxes at the backend: %v", h.cloud.boxes)
	}
	// Reconciles after that leave it as it is.
	h.run(t, now.Add(4*time.Minute))
	if c := h.stacks.took(); len(c) != 0 {
		t.Fatalf("after the resize: calls %q", c)
	}
}

func TestResizeRefusesAnEventNotUp(t *testing.T) {
	h := newHarness(t)
	_, err := h.r.Resize(context.Background(), h.ev.UpAt().Add(-time.Hour), h.ev.Name)
	if err == nil || !strings.Contains(err.Error(), `event "lab-show" is scheduled`) {
		t.Errorf("resize before the event: %v", err)
	}
	if _, err := h.r.Resize(context.Background(), h.ev.UpAt(), "nope"); err == nil || !strings.Contains(err.Error(), "not in the events file") {
		t.Errorf("resize of an unknown event: %v", err)
	}
}
