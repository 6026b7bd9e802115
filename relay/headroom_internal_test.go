package relay

import (
	"sync/atomic"
	"testing"
)

// TestHeadroomFollowsMeasuredMemory: a relay whose sessions take more
// memory than DefaultListenerBytes reports the headroom its budget really
// holds (it used to report the socket ceiling less its sessions, about
// twice what fits), and one under the default keeps the default.
func TestHeadroomFollowsMeasuredMemory(t *testing.T) {
	const budget = 1000 << 20
	var used atomic.Int64
	used.Store(20 << 20) // at start, no session
	a := newAdmission(budget, 0, 0, 0, func() uint64 { return uint64(used.Load()) })
	highWater := int64(budget * highWaterFraction)

	// 200 sessions of 300 KiB each.
	const sessions, per = 200, 300 << 10
	used.Store(20<<20 + sessions*per)
	a.sample()
	want := int((highWater - used.Load()) / per)
	if h := a.headroom(sessions); h != want {
		t.Errorf("headroom %d with %d sessions of %d KiB, want %d (what the budget holds)", h, sessions, per>>10, want)
	}
	if want >= socketCeiling-sessions {
		t.Fatalf("the case does not test anything: %d fits, the socket ceiling allows %d", want, socketCeiling-sessions)
	}

	// Too few sessions to tell: the default.
	if h, want := a.headroom(measureFrom-1), int((highWater-used.Load())/DefaultListenerBytes); h != min(want, socketCeiling-measureFrom+1) {
		t.Errorf("headroom %d with %d sessions, want the default's %d", h, measureFrom-1, min(want, socketCeiling-measureFrom+1))
	}
	// Sessions lighter than the default: the default.
	used.Store(20<<20 + sessions*(10<<10))
	a.sample()
	if h, want := a.headroom(sessions), min(int((highWater-used.Load())/DefaultListenerBytes), socketCeiling-sessions); h != want {
		t.Errorf("headroom %d with light sessions, want %d", h, want)
	}
}
