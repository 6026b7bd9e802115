package relay

import "testing"

// TestSeqFilter: pulled groups reach the listeners only in increasing
// sequence order, whichever pull brings them: a standby's copy of a group
// already delivered is dropped, the next one passes; a new pull whose
// first group is far behind is a publisher that started again.
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
		{a, 9, false, false},  // late and older: not out of order
		{b, 11, false, false}, // the standby's copy of a delivered group
		{b, 12, true, false},  // the standby is ahead: it delivers
		{a, 12, false, false}, // the old pull's copy
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
