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
		{"gone, its window to come", &Record{Phase: Gone}, "up again at 2026-12-05T18:30:00Z (in 30m0s)"},
		{"gone, held down", &Record{Phase: Gone, Manual: ManualDown}, ""},
		{"moved later, up", &Record{Phase: Up, Start: start.Add(-time.Hour), End: start.Add(time.Hour), MovedLater: &Window{UpAt: start.Add(23 * time.Hour)}},
			"runs to its old end 20:00, then again from 18:00 on 2026-12-06 (up at 2026-12-06T18:00:00Z (in 24h0m0s))"},
		{"moved later, draining", &Record{Phase: Draining, End: start.Add(time.Hour), DrainDeadline: now.Add(time.Minute), MovedLater: &Window{UpAt: start.Add(23 * time.Hour)}},
			"destroy when no listener is left, at the latest 2026-12-05T18:01:00Z (in 1m0s); then up again at 2026-12-06T18:00:00Z (in 24h0m0s)"},
		{"moved later, overlapping", &Record{Phase: Up, End: start.Add(time.Hour), MovedLater: &Window{UpAt: start.Add(30 * time.Minute)}},
			"runs on into its new window (up again from 19:30, before its old end 20:00) (up at 2026-12-05T19:30:00Z (in 1h30m0s))"},
	} {
		if got := NextStep(ev, tc.rec, now); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
