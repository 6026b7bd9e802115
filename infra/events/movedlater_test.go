package events

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// moveLater moves the harness's event, running at now, a day later in the
// events file, with listeners on its box; it returns its old window.
func moveLater(t *testing.T, h *harness, by time.Duration) (oldStart, oldEnd time.Time) {
	t.Helper()
	ev := h.ev
	if rec := h.run(t, ev.Start.Time); rec.Phase != Up {
		t.Fatalf("at the start: phase %s", rec.Phase)
	}
	h.stacks.took()
	oldStart, oldEnd = ev.Start.Time, ev.End.Time
	ev.Start.Time, ev.End.Time = oldStart.Add(by), oldEnd.Add(by)
	h.probe.listeners = 5
	return oldStart, oldEnd
}

// TestMovedLaterRunsToItsOldEnd: a running event whose start the file
// moves a day later keeps its box routed and its listeners until its old
// end (the record keeps the old window, the move logged once, status
// saying what comes), drains at its old end as any ended event does
// (until the old end plus drain time), is destroyed, and comes up again
// (a fresh bring-up) at its new start less lead time, the record then
// with the new window.
func TestMovedLaterRunsToItsOldEnd(t *testing.T) {
	h := newHarness(t)
	ev := h.ev
	oldStart, oldEnd := moveLater(t, h, 24*time.Hour)
	for _, at := range []time.Time{oldStart.Add(time.Minute), oldEnd.Add(-time.Minute)} {
		rec := h.run(t, at)
		if rec.Phase != Up || h.probe.drained != 0 || len(h.stacks.took()) != 0 {
			t.Fatalf("moved later, at %s before the old end: phase %s, relays told to drain %d times: want up, no drain", at.Format(time.RFC3339), rec.Phase, h.probe.drained)
		}
		if rs := h.relays(t); len(rs) != 1 || rs[0].Draining {
			t.Fatalf("at %s: relays %+v, want the event's relay routed", at.Format(time.RFC3339), rs)
		}
		if !rec.Start.Equal(oldStart) || !rec.End.Equal(oldEnd) || rec.MovedLater == nil || !rec.MovedLater.UpAt.Equal(ev.UpAt()) || !rec.MovedLater.End.Equal(ev.End.Time) {
			t.Fatalf("record window %v..%v moved %+v: want the old %v..%v, the new one up at %v", rec.Start, rec.End, rec.MovedLater, oldStart, oldEnd, ev.UpAt())
		}
	}
	if n := strings.Count(h.log.String(), "action=moved-later"); n != 1 || !strings.Contains(h.log.String(), ev.UpAt().UTC().Format(time.RFC3339)) {
		t.Errorf("the log says action=moved-later %d times, want once, with the new bring-up %s:\n%s", n, ev.UpAt().UTC().Format(time.RFC3339), h.log)
	}
	rec := h.run(t, oldEnd.Add(-2*time.Minute))
	next := "runs to its old end " + oldEnd.UTC().Format("15:04") + ", then again from " + ev.UpAt().UTC().Format("15:04") + " on " + ev.UpAt().UTC().Format(time.DateOnly)
	if got := NextStep(ev, rec, oldEnd.Add(-2*time.Minute)); !strings.HasPrefix(got, next) {
		t.Errorf("next step %q, want %q...", got, next)
	}
	var status bytes.Buffer
	if err := WriteRecords(&status, []*Record{rec}, "dir"); err != nil || !strings.Contains(status.String(), next) {
		t.Errorf("fleet events status (%v):\n%s\nwant %q", err, status.String(), next)
	}

	// The old end: drained as any ended event, until the old end plus
	// its drain time.
	rec = h.run(t, oldEnd)
	if rec.Phase != Draining || h.probe.drained != 1 || !rec.DrainDeadline.Equal(oldEnd.Add(ev.DrainTime.D())) {
		t.Fatalf("at the old end: phase %s drained %d deadline %v, want draining until %v", rec.Phase, h.probe.drained, rec.DrainDeadline, oldEnd.Add(ev.DrainTime.D()))
	}
	if rs := h.relays(t); len(rs) != 1 || !rs[0].Draining {
		t.Fatalf("relays %+v: want the event's relay draining", rs)
	}
	if d := lastLog(rec, "drain"); !strings.Contains(d, "old window ended") {
		t.Errorf("drain logged %q, want it to name the old window", d)
	}
	rec = h.run(t, oldEnd.Add(ev.DrainTime.D()))
	if rec.Phase != Gone || strings.Join(h.stacks.took(), ";") != "destroy lab-event-lab-show" {
		t.Fatalf("after the old drain time: phase %s, want gone", rec.Phase)
	}
	if rec.MovedLater != nil || !rec.Start.Equal(ev.Start.Time) || !rec.End.Equal(ev.End.Time) || lastLog(rec, "rescheduled") == "" {
		t.Errorf("gone: record window %v..%v moved %+v, want the new %v..%v and a rescheduled entry", rec.Start, rec.End, rec.MovedLater, ev.Start, ev.End)
	}
	if got := NextStep(ev, rec, oldEnd.Add(ev.DrainTime.D())); !strings.HasPrefix(got, "up again at "+ev.UpAt().UTC().Format(time.RFC3339)) {
		t.Errorf("gone: next step %q, want up again at the new bring-up", got)
	}

	// The new window: nothing before its bring-up, a fresh one at it.
	if rec = h.run(t, ev.UpAt().Add(-time.Minute)); rec.Phase != Gone || len(h.stacks.took()) != 0 {
		t.Fatalf("before the new bring-up: phase %s, want gone and no Pulumi run", rec.Phase)
	}
	rec = h.run(t, ev.UpAt())
	if rec.Phase != Up || len(rec.Hosts) != 1 || strings.Join(h.stacks.took(), ";") != "up lab-event-lab-show 1" || !rec.CreatingSince.Equal(ev.UpAt()) {
		t.Fatalf("at the new bring-up: phase %s hosts %d creating since %v, want a fresh up", rec.Phase, len(rec.Hosts), rec.CreatingSince)
	}
	if rec = h.run(t, ev.End.Add(-time.Minute)); rec.Phase != Up || h.probe.drained != 1 {
		t.Fatalf("in the new window: phase %s drained %d, want up", rec.Phase, h.probe.drained)
	}
	if rec = h.run(t, ev.End.Time); rec.Phase != Draining {
		t.Fatalf("at the new end: phase %s, want draining", rec.Phase)
	}
}

// TestMovedLaterShedsAtItsOldEnd: with a max overrun, the old end starts
// the shed into the steady fleet's room (the relays last resort, the
// overrun until the old end plus max_overrun), not a drain, and the box
// goes once its listeners fit.
func TestMovedLaterShedsAtItsOldEnd(t *testing.T) {
	h := newOverrunHarness(t, 0)
	ev := h.ev
	_, oldEnd := moveLater(t, h, 24*time.Hour)
	if rec := h.run(t, oldEnd.Add(-time.Minute)); rec.Phase != Up || rec.Overrun != nil {
		t.Fatalf("before the old end: phase %s, want up", rec.Phase)
	}
	rec := h.run(t, oldEnd.Add(time.Minute))
	if rec.Phase != Draining || rec.Overrun == nil || !rec.Overrun.Until.Equal(oldEnd.Add(time.Hour)) || h.probe.drained != 0 {
		t.Fatalf("after the old end: phase %s overrun %+v drained %d, want the shed into room until %v", rec.Phase, rec.Overrun, h.probe.drained, oldEnd.Add(time.Hour))
	}
	if rs := h.burstRelays(t); len(rs) != 1 || rs[0].Draining || !rs[0].LastResort {
		t.Fatalf("burst relays %+v: want last resort", rs)
	}
	if got := NextStep(ev, rec, oldEnd.Add(time.Minute)); !strings.Contains(got, "then up again at "+ev.UpAt().UTC().Format(time.RFC3339)) {
		t.Errorf("overrunning: next step %q, want it to say when it comes up again", got)
	}
	h.probe.room = 100
	if rec = h.run(t, oldEnd.Add(2*time.Minute)); rec.Phase != Gone || rec.MovedLater != nil || h.probe.listeners != 0 {
		t.Fatalf("room for its listeners: phase %s listeners %d, want gone", rec.Phase, h.probe.listeners)
	}
	if rec = h.run(t, ev.UpAt()); rec.Phase != Up {
		t.Fatalf("at the new bring-up: phase %s, want up", rec.Phase)
	}
}

// TestMovedLaterRunsOnIntoItsNewWindow: a start moved later by less than
// the event lasts (the new bring-up before the old end): the box is never
// drained; at the new bring-up the record takes the new window and the
// event drains at its new end.
func TestMovedLaterRunsOnIntoItsNewWindow(t *testing.T) {
	h := newHarness(t)
	ev := h.ev
	oldStart, oldEnd := moveLater(t, h, time.Hour)
	if rec := h.run(t, oldStart.Add(time.Minute)); rec.MovedLater == nil || !strings.Contains(lastLog(rec, "moved-later"), "run on into the new window") {
		t.Fatalf("moved an hour later: moved %+v log %q", rec.MovedLater, lastLog(rec, "moved-later"))
	}
	rec := h.run(t, ev.UpAt())
	if rec.Phase != Up || rec.MovedLater != nil || !rec.End.Equal(ev.End.Time) {
		t.Fatalf("at the new bring-up: phase %s moved %+v end %v, want up with the new end %v", rec.Phase, rec.MovedLater, rec.End, ev.End)
	}
	if rec = h.run(t, oldEnd.Add(time.Minute)); rec.Phase != Up || h.probe.drained != 0 || len(h.stacks.took()) != 0 {
		t.Fatalf("past the old end: phase %s drained %d, want up", rec.Phase, h.probe.drained)
	}
	if rec = h.run(t, ev.End.Time); rec.Phase != Draining {
		t.Fatalf("at the new end: phase %s, want draining", rec.Phase)
	}
}

// TestMovedLaterBeforeItsBringUp: an event not yet up whose start the
// file moves later simply moves: nothing at the old bring-up, up at the
// new one.
func TestMovedLaterBeforeItsBringUp(t *testing.T) {
	h := newHarness(t)
	ev := h.ev
	oldUp := ev.UpAt()
	h.run(t, oldUp.Add(-time.Hour))
	ev.Start.Time, ev.End.Time = ev.Start.Add(24*time.Hour), ev.End.Add(24*time.Hour)
	if rec := h.run(t, oldUp.Add(time.Minute)); rec.Phase != Scheduled || rec.MovedLater != nil || len(h.stacks.took()) != 0 {
		t.Fatalf("at the old bring-up: phase %s, want scheduled, nothing brought up", rec.Phase)
	}
	if strings.Contains(h.log.String(), "action=moved-later") {
		t.Errorf("an event not started logged moved-later:\n%s", h.log)
	}
	if rec := h.run(t, ev.UpAt()); rec.Phase != Up {
		t.Fatalf("at the new bring-up: phase %s, want up", rec.Phase)
	}
}

// TestMovedLaterThenBack: the file moving the start back ends the hold:
// the record follows the file again (action=rescheduled) and the event,
// never drained meanwhile, ends at its end as before.
func TestMovedLaterThenBack(t *testing.T) {
	h := newHarness(t)
	ev := h.ev
	oldStart, oldEnd := moveLater(t, h, 24*time.Hour)
	if rec := h.run(t, oldStart.Add(time.Minute)); rec.MovedLater == nil {
		t.Fatalf("moved later: no hold")
	}
	ev.Start.Time, ev.End.Time = oldStart, oldEnd
	rec := h.run(t, oldStart.Add(2*time.Minute))
	if rec.Phase != Up || rec.MovedLater != nil || !rec.End.Equal(oldEnd) || !strings.Contains(lastLog(rec, "rescheduled"), "no longer moves its start later") || h.probe.drained != 0 {
		t.Fatalf("moved back: phase %s moved %+v log %q drained %d, want up on the file's window", rec.Phase, rec.MovedLater, lastLog(rec, "rescheduled"), h.probe.drained)
	}
	if rec = h.run(t, oldEnd); rec.Phase != Draining {
		t.Fatalf("at the end: phase %s, want draining", rec.Phase)
	}
}

// TestMovedLaterPastItsOldEnd: a reconcile that first sees the move after
// the old end (the timer was down) drains as an ended event does, on the
// old window (until the old end plus drain time), not for a drain time
// from now.
func TestMovedLaterPastItsOldEnd(t *testing.T) {
	h := newHarness(t)
	ev := h.ev
	_, oldEnd := moveLater(t, h, 24*time.Hour)
	rec := h.run(t, oldEnd.Add(time.Minute))
	if rec.Phase != Draining || !rec.DrainDeadline.Equal(oldEnd.Add(ev.DrainTime.D())) || !strings.Contains(lastLog(rec, "moved-later"), "has passed") {
		t.Fatalf("first seen past the old end: phase %s deadline %v log %q, want draining until %v", rec.Phase, rec.DrainDeadline, lastLog(rec, "moved-later"), oldEnd.Add(ev.DrainTime.D()))
	}
	if rec = h.run(t, oldEnd.Add(ev.DrainTime.D())); rec.Phase != Gone || rec.MovedLater != nil {
		t.Fatalf("after the old drain time: phase %s, want gone", rec.Phase)
	}
}
