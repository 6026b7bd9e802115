package relay

import (
	"testing"
	"time"
)

// TestSeqFilter: a pull that takes over passes only groups newer than
// every one delivered: a standby's copy of a group already delivered is
// dropped, the next one passes, and from then on nothing at or below what
// was delivered before it; within one pull a group that comes late still
// passes (as with one upstream). A new pull whose first group is far
// behind, or behind after restartQuiet without a group, is a publisher
// that started again.
func TestSeqFilter(t *testing.T) {
	var f seqFilter
	a, b, c, d, e := &pull{}, &pull{}, &pull{}, &pull{}, &pull{}
	now := time.Now()
	steps := []struct {
		p         *pull
		seq       uint64
		ok, reset bool
		after     time.Duration // since the step before
	}{
		{a, 10, true, false, 0},
		{a, 11, true, false, 0},
		{a, 9, true, false, 0},   // late on its own pull: passes, as with one upstream
		{b, 11, false, false, 0}, // the standby's copy of a delivered group
		{b, 12, true, false, 0},  // the standby is ahead: it delivers
		{a, 12, false, false, 0}, // the old pull's copy (runRemote ends it anyway)
		{b, 11, false, false, 0}, // at or below what was delivered before b took over
		{b, 13, true, false, 0},
		{c, 5, false, false, 0}, // behind by less than restartSlack: a lagging copy
		{b, 13 + restartSlack + 1, true, false, 0},
		{d, 0, true, true, 0}, // further behind, first on its pull: a restart
		{d, 1, true, false, 0},
		{e, 0, false, false, failoverSilence}, // a lagging copy soon after the silence
		{d, 2, true, false, 0},
		{e, 0, true, true, restartQuiet}, // behind, after restartQuiet without a group: a restart
		{e, 1, true, false, 0},
	}
	for i, s := range steps {
		now = now.Add(s.after)
		ok, reset := f.accept(s.p, s.seq, now)
		if ok != s.ok || reset != s.reset {
			t.Errorf("step %d: group %d: accept %v, restart %v; want %v, %v", i, s.seq, ok, reset, s.ok, s.reset)
		}
	}
}
