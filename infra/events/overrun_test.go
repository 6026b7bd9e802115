package events

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/inventories"
)

// steadyAddr is the steady box the overrun tests list for the router.
const steadyAddr = "10.9.9.1"

// newOverrunHarness is a harness whose event has a max overrun of an
// hour, a steady fleet of two hosts in the router's list (the second
// draining, so its room does not count) and the steady fleet's room.
func newOverrunHarness(t *testing.T, room int64) *harness {
	t.Helper()
	h := newHarness(t)
	hour := inventories.Duration(time.Hour)
	h.ev.MaxOverrun = &hour
	h.probe.room = room
	steady := program.StackHosts{Stack: h.r.Fleet.Name, DrainingHosts: []string{"lab-2"}, Hosts: []program.HostEntry{
		{Name: "lab-1", Address: steadyAddr, Ports: []int{4443}},
		{Name: "lab-2", Address: "10.9.9.2", Ports: []int{4443}},
	}}
	if _, err := program.PutStackHosts(h.r.StateDir, steady); err != nil {
		t.Fatal(err)
	}
	return h
}

// burstRelays are the router's list's relays that are not the steady
// fleet's.
func (h *harness) burstRelays(t *testing.T) []program.Relay {
	t.Helper()
	var out []program.Relay
	for _, r := range h.relays(t) {
		if !strings.Contains(r.URL, "10.9.9.") {
			out = append(out, r)
		}
	}
	return out
}

// lastLog is the detail of the record's last entry of action.
func lastLog(rec *Record, action string) string {
	for i := len(rec.Log) - 1; i >= 0; i-- {
		if rec.Log[i].Action == action {
			return rec.Log[i].Detail
		}
	}
	return ""
}

// TestOverrunShedsOnlyIntoRoom: at the end, with more listeners on the
// burst box than the steady fleet has room for, only the room less its
// margin is told to move; the burst relay stays in the router's list as
// last resort (not draining, its relay not told to drain) and the box
// stays; once the room is 0 nothing more is shed and the box still
// stays; once the steady fleet has room for them all, they move and the
// box is destroyed.
func TestOverrunShedsOnlyIntoRoom(t *testing.T) {
	h := newOverrunHarness(t, 30)
	ev := h.ev
	h.run(t, ev.Start.Time)
	h.probe.listeners = 100
	h.stacks.took()
	rec := h.run(t, ev.End.Add(time.Minute))
	// Room 30, margin 3: 27 told to move; then room 3, less the run's
	// margin, is none.
	if got := h.probe.sheds; len(got) != 1 || got[0] != 27 {
		t.Fatalf("sheds %v, want one of 27", got)
	}
	if rec.Phase != Draining || rec.Overrun == nil || rec.Overrun.Forced || h.probe.drained != 0 || len(h.stacks.took()) != 0 {
		t.Fatalf("phase %s overrun %+v drained %d: want the box kept, its relays admitting", rec.Phase, rec.Overrun, h.probe.drained)
	}
	if strings.Join(h.probe.roomHosts, ",") != "lab-1" {
		t.Errorf("room asked of %v, want the steady host not draining", h.probe.roomHosts)
	}
	if rs := h.burstRelays(t); len(rs) != 1 || rs[0].Draining || !rs[0].LastResort {
		t.Fatalf("burst relays %+v: want one, last resort, not draining", rs)
	}
	if rec.Overrun.AtEndListeners != 100 || rec.Overrun.AtEndRoom != 30 {
		t.Errorf("at the end: %+v, want 100 listeners and room 30", rec.Overrun)
	}
	if d := lastLog(rec, "overrun"); !strings.HasPrefix(d, "overrunning: 73 listeners left on burst boxes, steady room 3, cost so far ") || !strings.Contains(d, "27 told to move this run") {
		t.Fatalf("overrun log %q", d)
	}
	// The steady fleet full: nothing shed, the box stays.
	h.probe.room = 0
	rec = h.run(t, ev.End.Add(10*time.Minute))
	if len(h.probe.sheds) != 1 || rec.Phase != Draining || len(h.stacks.took()) != 0 {
		t.Fatalf("room 0: sheds %v phase %s", h.probe.sheds, rec.Phase)
	}
	if d := lastLog(rec, "overrun"); !strings.HasPrefix(d, "overrunning: 73 listeners left on burst boxes, steady room 0, cost so far ") {
		t.Fatalf("overrun log %q", d)
	}
	// Room for all of them: they move, the relays drain, the box goes.
	h.probe.room = 1000
	rec = h.run(t, ev.End.Add(20*time.Minute))
	if got := h.probe.sheds; len(got) != 2 || got[1] != 73 {
		t.Fatalf("sheds %v, want 73 more", got)
	}
	if rec.Phase != Gone || h.probe.drained != 1 || strings.Join(h.stacks.took(), ";") != "destroy lab-event-lab-show" {
		t.Fatalf("all moved: phase %s drained %d", rec.Phase, h.probe.drained)
	}
	if len(h.burstRelays(t)) != 0 {
		t.Fatalf("burst relays %+v after destroy", h.burstRelays(t))
	}
	// Billed from the up (at the start) until the destroy, 20 minutes
	// after the end.
	if want := ev.End.Add(20 * time.Minute).Sub(ev.Start.Time).Hours(); rec.Report == nil || rec.Report.BoxHours < want-0.01 || rec.Report.BoxHours > want+0.01 {
		t.Fatalf("report %+v, want %.2f box-hours", rec.Report, want)
	}
}

// TestOverrunEmptyBoxes: a burst box without listeners is destroyed at the
// end when the steady fleet has room, and kept (the router's last resort)
// while it has none.
func TestOverrunEmptyBoxes(t *testing.T) {
	h := newOverrunHarness(t, 0)
	h.run(t, h.ev.Start.Time)
	rec := h.run(t, h.ev.End.Time)
	if rec.Phase != Draining || len(h.probe.sheds) != 0 {
		t.Fatalf("no listener, steady fleet full: phase %s sheds %v, want kept", rec.Phase, h.probe.sheds)
	}
	h.probe.room = 5
	if rec = h.run(t, h.ev.End.Add(time.Minute)); rec.Phase != Gone {
		t.Fatalf("no listener, steady room 5: phase %s, want gone", rec.Phase)
	}
}

// TestOverrunMaxForcesTheDrain: at the max overrun after the end, with the
// steady fleet still full, the old drain applies, loudly: relays draining
// in the router's list and told to move every listener, the boxes
// destroyed at the drain deadline whatever is left.
func TestOverrunMaxForcesTheDrain(t *testing.T) {
	h := newOverrunHarness(t, 0)
	ev := h.ev
	h.run(t, ev.Start.Time)
	h.probe.listeners = 50
	h.run(t, ev.End.Time)
	rec := h.run(t, ev.End.Add(59*time.Minute))
	if rec.Phase != Draining || rec.Overrun.Forced || h.probe.drained != 0 {
		t.Fatalf("before the max overrun: phase %s overrun %+v drained %d", rec.Phase, rec.Overrun, h.probe.drained)
	}
	at := ev.End.Add(time.Hour)
	rec = h.run(t, at)
	if rec.Phase != Draining || !rec.Overrun.Forced || h.probe.drained != 1 || !rec.DrainDeadline.Equal(at.Add(ev.DrainTime.D())) {
		t.Fatalf("at the max overrun: phase %s overrun %+v drained %d deadline %v", rec.Phase, rec.Overrun, h.probe.drained, rec.DrainDeadline)
	}
	if rs := h.burstRelays(t); len(rs) != 1 || !rs[0].Draining || rs[0].LastResort {
		t.Fatalf("burst relays %+v: want draining", rs)
	}
	if d := lastLog(rec, "overrun-max"); !strings.HasPrefix(d, "MAX OVERRUN REACHED (1h0m0s after the end): 50 listeners still on the burst boxes") {
		t.Fatalf("overrun-max log %q", d)
	}
	if !strings.Contains(h.log.String(), "level=WARN msg=\"max overrun reached") {
		t.Errorf("no warning logged:\n%s", h.log.String())
	}
	// The forced drain waits no longer than its deadline.
	if rec = h.run(t, at.Add(time.Minute)); rec.Phase != Draining {
		t.Fatalf("phase %s before the drain deadline", rec.Phase)
	}
	if rec = h.run(t, rec.DrainDeadline); rec.Phase != Gone || len(h.probe.sheds) != 0 {
		t.Fatalf("at the drain deadline: phase %s sheds %v", rec.Phase, h.probe.sheds)
	}
}

// TestOverrunAfterTimerOutage: a reconcile that first runs hours after the
// end (the timer was down), past even the max overrun, sheds only into
// the room as any other run, and gives the listeners left the drain time
// from now at the steady fleet's pace before the forced drain.
func TestOverrunAfterTimerOutage(t *testing.T) {
	h := newOverrunHarness(t, 20)
	ev := h.ev
	h.run(t, ev.Start.Time)
	h.probe.listeners = 100
	back := ev.End.Add(3 * time.Hour)
	rec := h.run(t, back)
	if got := h.probe.sheds; len(got) != 1 || got[0] != 18 {
		t.Fatalf("sheds %v, want one of 18 (room 20 less its margin)", got)
	}
	if rec.Phase != Draining || rec.Overrun.Forced || h.probe.drained != 0 || !rec.Overrun.Until.Equal(back.Add(ev.DrainTime.D())) {
		t.Fatalf("back from the outage: phase %s overrun %+v drained %d", rec.Phase, rec.Overrun, h.probe.drained)
	}
	if rec = h.run(t, rec.Overrun.Until); !rec.Overrun.Forced || h.probe.drained != 1 {
		t.Fatalf("at the end of the outage's overrun: overrun %+v drained %d", rec.Overrun, h.probe.drained)
	}
}

// TestOverrunZeroIsTheOldDrain: max_overrun 0 drains at the end as
// before: relays draining, every listener told to move, nothing shed by
// room.
func TestOverrunZeroIsTheOldDrain(t *testing.T) {
	h := newOverrunHarness(t, 1000)
	none := inventories.Duration(0)
	h.ev.MaxOverrun = &none
	h.run(t, h.ev.Start.Time)
	h.probe.listeners = 10
	rec := h.run(t, h.ev.End.Time)
	if rec.Phase != Draining || rec.Overrun != nil || h.probe.drained != 1 || len(h.probe.sheds) != 0 {
		t.Fatalf("max_overrun 0: phase %s overrun %+v drained %d sheds %v", rec.Phase, rec.Overrun, h.probe.drained, h.probe.sheds)
	}
}

// TestOverrunBurstDown: fleet burst down during an overrun drains at once,
// for its --drain-time, whatever the steady fleet's room.
func TestOverrunBurstDown(t *testing.T) {
	h := newOverrunHarness(t, 0)
	h.run(t, h.ev.Start.Time)
	h.probe.listeners = 50
	at := h.ev.End.Add(time.Minute)
	if rec := h.run(t, at); rec.Phase != Draining || rec.Overrun == nil {
		t.Fatalf("phase %s overrun %+v, want overrunning", rec.Phase, rec.Overrun)
	}
	res, err := h.r.Manual(context.Background(), at.Add(time.Minute), h.ev.Name, ManualDown, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Phase != Gone || h.probe.drained != 1 || len(h.probe.sheds) != 0 {
		t.Fatalf("burst down with no drain time during an overrun: phase %s drained %d sheds %v", res.Phase, h.probe.drained, h.probe.sheds)
	}
}
