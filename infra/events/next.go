package events

import (
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"time"

	"github.com/relayfleet/relayfleet/inventories"
)

// NextStep says what the next reconcile will do for an event whose
// record is rec (nil: none yet), at now.
func NextStep(ev *inventories.Event, rec *Record, now time.Time) string {
	at := func(t time.Time) string {
		return t.UTC().Format(time.RFC3339) + " (in " + t.Sub(now).Round(time.Second).String() + ")"
	}
	phase := Scheduled
	if rec != nil {
		phase = rec.Phase
	}
	moved := rec != nil && rec.MovedLater != nil
	switch phase {
	case Scheduled:
		return "up at " + at(ev.UpAt())
	case Up:
		if moved {
			return movedNext(rec) + " (up at " + at(rec.MovedLater.UpAt) + ")"
		}
		if rec.Shrink != nil {
			return fmt.Sprintf("resize down to %s: remove each box that goes once it holds no listener; drain at %s", text.Plural(rec.Shrink.To, "box", "boxes"), at(ev.End.Time))
		}
		if rec.Suggested != nil {
			return fmt.Sprintf("drain at %s (the files size it at %s: fleet burst resize to shrink)", at(ev.End.Time), text.Plural(*rec.Suggested, "box", "boxes"))
		}
		return "drain at " + at(ev.End.Time)
	case Draining:
		then := ""
		if moved {
			then = "; then up again at " + at(rec.MovedLater.UpAt)
		}
		if ov := rec.Overrun; ov != nil && !ov.Forced {
			return "move listeners as the steady fleet has room, destroy when none is left; every one told to move at " + at(ov.Until) + " (max overrun)" + then
		}
		return "destroy when no listener is left, at the latest " + at(rec.DrainDeadline) + then
	case Creating, Destroying:
		return "resume the cut-off run"
	case Gone, Missed:
		if now.Before(ev.UpAt()) && rec.Manual != ManualDown {
			return "up again at " + at(ev.UpAt())
		}
	}
	return ""
}

// movedNext is what a running event whose start the file moved later
// does next (Record.MovedLater): "runs to its old end 21:00, then again
// from 18:30 on 2026-12-06", in UTC, the date given when it is not the
// old end's.
func movedNext(rec *Record) string {
	w := rec.MovedLater
	if w.UpAt.Before(rec.End) {
		return fmt.Sprintf("runs on into its new window (up again from %s, before its old end %s)", hhmm(w.UpAt, rec.End), hhmm(rec.End, rec.End))
	}
	return fmt.Sprintf("runs to its old end %s, then again from %s", hhmm(rec.End, rec.End), hhmm(w.UpAt, rec.End))
}

// hhmm is t as HH:MM in UTC, with " on DATE" when its day is not ref's.
func hhmm(t, ref time.Time) string {
	t, ref = t.UTC(), ref.UTC()
	s := t.Format("15:04")
	if t.Format(time.DateOnly) != ref.Format(time.DateOnly) {
		s += " on " + t.Format(time.DateOnly)
	}
	return s
}

// statusNext is the next step fleet events status shows from a record
// alone (it has no events file, nor the lead time): "-" when the record
// does not say.
func statusNext(rec *Record) string {
	switch rec.Phase {
	case Up:
		if rec.MovedLater != nil {
			return movedNext(rec)
		}
		if !rec.End.IsZero() {
			return "drain at " + rfc(rec.End)
		}
	case Draining:
		next := "destroy by " + rfc(rec.DrainDeadline)
		if ov := rec.Overrun; ov != nil && !ov.Forced {
			next = "shed into the steady fleet's room, every listener told to move at " + rfc(ov.Until)
		}
		if rec.MovedLater != nil {
			next = "drains its old window (" + next + "), then again from " + hhmm(rec.MovedLater.UpAt, rec.End)
		}
		return next
	case Creating, Destroying:
		return "resume the cut-off run"
	}
	return "-"
}
