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
	switch phase {
	case Scheduled:
		return "up at " + at(ev.UpAt())
	case Up:
		if rec.Shrink != nil {
			return fmt.Sprintf("resize down to %s: remove each box that goes once it holds no listener; drain at %s", text.Plural(rec.Shrink.To, "box", "boxes"), at(ev.End.Time))
		}
		if rec.Suggested != nil {
			return fmt.Sprintf("drain at %s (the files size it at %s: fleet burst resize to shrink)", at(ev.End.Time), text.Plural(*rec.Suggested, "box", "boxes"))
		}
		return "drain at " + at(ev.End.Time)
	case Draining:
		if ov := rec.Overrun; ov != nil && !ov.Forced {
			return "move listeners as the steady fleet has room, destroy when none is left; every one told to move at " + at(ov.Until) + " (max overrun)"
		}
		return "destroy when no listener is left, at the latest " + at(rec.DrainDeadline)
	case Creating, Destroying:
		return "resume the cut-off run"
	}
	return ""
}
