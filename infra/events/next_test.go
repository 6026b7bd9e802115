package events

import (
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/inventories"
)

// TestNextStep: what fleet events status and reconcile say the next run
// does, for each phase an event's record can be in.
func TestNextStep(t *testing.T) {
	start := time.Date(2026, 12, 5, 19, 0, 0, 0, time.UTC)
	ev := &inventories.Event{Name: "show", Start: inventories.Time{Time: start}, End: inventories.Time{Time: start.Add(2 * time.Hour)},
		LeadTime: inventories.Duration(30 * time.Minute)}
	now := start.Add(-time.Hour)
	three := 3
	for _, tc := range []struct {
		name string
		rec  *Record
		want string
	}{
		{"no record", nil, "up at 2026-12-05T18:30:00Z (in 30m0s)"},
		{"scheduled", &Record{Phase: Scheduled}, "up at 2026-12-05T18:30:00Z (in 30m0s)"},
		{"up", &Record{Phase: Up}, "drain at 2026-12-05T21:00:00Z (in 3h0m0s)"},
		{"up, resized in the files", &Record{Phase: Up, Suggested: &three}, "drain at 2026-12-05T21:00:00Z (in 3h0m0s) (the files size it at 3 boxes: fleet burst resize to shrink)"},
		{"up, shrinking", &Record{Phase: Up, Shrink: &Shrink{To: 1}}, "resize down to 1 box: remove each box that goes once it holds no listener; drain at 2026-12-05T21:00:00Z (in 3h0m0s)"},
		{"draining", &Record{Phase: Draining, DrainDeadline: now.Add(90 * time.Second)}, "destroy when no listener is left, at the latest 2026-12-05T18:01:30Z (in 1m30s)"},
		{"overrunning", &Record{Phase: Draining, Overrun: &Overrun{Until: now.Add(time.Hour)}, DrainDeadline: now.Add(2 * time.Hour)},
			"move listeners as the steady fleet has room, destroy when none is left; every one told to move at 2026-12-05T19:00:00Z (in 1h0m0s) (max overrun)"},
		{"overrun forced", &Record{Phase: Draining, Overrun: &Overrun{Until: now, Forced: true}, DrainDeadline: now.Add(90 * time.Second)},
			"destroy when no listener is left, at the latest 2026-12-05T18:01:30Z (in 1m30s)"},
		{"creating", &Record{Phase: Creating}, "resume the cut-off run"},
		{"destroying", &Record{Phase: Destroying}, "resume the cut-off run"},
		{"gone", &Record{Phase: Gone}, ""},
	} {
		if got := NextStep(ev, tc.rec, now); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
