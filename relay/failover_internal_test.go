package relay

import "testing"

// TestSeqFilter: a pull that takes over passes only groups newer than
// every one delivered: a standby's copy of a group already delivered is
// dropped, the next one passes, and from then on nothing at or below what
// was delivered before it; within one pull a group that comes late still
// passes (as with one upstream). A new pull whose first group is far
// behind is a publisher that started again.
func TestSeqFilter(t *testing.T) {
	var f seqFilter
	a, b, c, d := &pull{}, &pull{}, &pull{}, &pull{}
	steps := []struct {
		p         *pull
		seq       uint64
		ok, reset bool
	}{
		{a, 10, true, false},
		{a, 11, true, false},
		{a, 9, true, false},   // late on its own pull: passes, as with one upstream
		{b, 11, false, false}, // the standby's copy of a delivered group
		{b, 12, true, false},  // the standby is ahead: it delivers
		{a, 12, false, false}, // the old pull's copy (runRemote ends it anyway)
		{b, 11, false, false}, // at or below what was delivered before b took over
		{b, 13, true, false},
		{c, 5, false, false}, // behind by less than restartSlack: a lagging copy
		{b, 13 + restartSlack + 1, true, false},
		{d, 0, true, true}, // further behind, first on its pull: a restart
		{d, 1, true, false},
	}
	for i, s := range steps {
		ok, reset := f.accept(s.p, s.seq)
		if ok != s.ok || reset != s.reset {
			t.Errorf("step %d: group %d: accept %v, restart %v; want %v, %v", i, s.seq, ok, reset, s.ok, s.reset)
		}
	}
}
