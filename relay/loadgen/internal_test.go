package loadgen

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestLossAccounting: skipped groups count as lost unless they arrive
// late; the first group only starts the count.
func TestLossAccounting(t *testing.T) {
	tests := []struct {
		name  string
		seqs  []uint64
		count uint32
		lost  int64
	}{
		{"in order", []uint64{5, 6, 7, 8}, 1, 0},
		{"one gap", []uint64{5, 6, 8}, 1, 1},
		{"reordered", []uint64{5, 7, 6, 8}, 1, 0},
		{"gap of groups of six", []uint64{0, 1, 4}, 6, 12},
		{"late start is no loss", []uint64{100, 101}, 1, 0},
	}
	t.Run("in flight at the end", func(t *testing.T) {
		l := &listener{windowStart: new(atomic.Int64)}
		now := time.Now()
		l.group(1, now)
		l.group(3, now)
		l.finish(now.Add(10*time.Millisecond), time.Second)
		if l.lost != 0 {
			t.Fatalf("lost %d: a group skipped 10 ms before the end may be in flight", l.lost)
		}
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &listener{windowStart: new(atomic.Int64)}
			start := time.Now()
			for _, s := range tt.seqs {
				l.group(s, start)
				l.frame(Frame(FrameInfo{Group: s, Count: tt.count, SentNs: start.UnixNano()}, 40), start, time.Hour)
			}
			l.finish(start.Add(time.Second), time.Second)
			if l.lost != tt.lost {
				t.Fatalf("lost %d, want %d", l.lost, tt.lost)
			}
		})
	}
}

// TestLossAccountingAcrossResume: after a resubscription the groups sent
// while away count as lost, the last group seen served again is not read
// twice, groups the old subscription skipped count as lost at once, and a
// sequence that went back restarts the count.
func TestLossAccountingAcrossResume(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name   string
		before []uint64 // on the first subscription
		after  []uint64 // on the second
		read   []bool   // group's answer for each of after
		lost   int64
	}{
		{"gap while away", []uint64{5, 6}, []uint64{10, 11}, []bool{true, true}, 3},
		{"last group again", []uint64{5, 6}, []uint64{6, 7}, []bool{false, true}, 0},
		{"skipped before the end", []uint64{5, 7}, []uint64{8}, []bool{true}, 1},
		{"publisher restarted", []uint64{500, 501}, []uint64{3, 4}, []bool{true, true}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &listener{windowStart: new(atomic.Int64)}
			for _, s := range tt.before {
				l.group(s, now)
			}
			l.resume()
			for i, s := range tt.after {
				if got := l.group(s, now); got != tt.read[i] {
					t.Fatalf("group(%d) = %v, want %v", s, got, tt.read[i])
				}
			}
			l.finish(now.Add(time.Hour), time.Second)
			if l.lost != tt.lost {
				t.Fatalf("lost %d, want %d", l.lost, tt.lost)
			}
		})
	}
}

// TestSettle: the audible gap runs to the end for a listener silent then,
// and to the whole run for one that never got a frame; what the publisher
// sent meanwhile, up to a silence before the end, counts as lost.
func TestSettle(t *testing.T) {
	const silence = 960 * time.Millisecond
	t0 := time.Unix(1000, 0)
	end := t0.Add(2 * time.Second)
	// 20 ms groups of one frame; group 1000 arrived at t0.
	tl := timeline{ok: true, seq: 1000, at: t0, count: 1, every: 20 * time.Millisecond}
	tests := []struct {
		name   string
		l      *listener
		gap    time.Duration
		silent bool
		lost   int64
	}{
		{
			name: "heard to the end",
			l: &listener{started: true, firstSeq: 900, next: 1099, count: 1, subscribedAt: t0.Add(-2 * time.Second),
				first: t0.Add(-1990 * time.Millisecond), last: end.Add(-30 * time.Millisecond), gap: 45 * time.Millisecond},
			gap: 45 * time.Millisecond,
		},
		{
			// Group 959 arrived 800 ms before t0; the publisher went on
			// to group 1052 by a silence before the end.
			name: "silent since 2.8 s before the end",
			l: &listener{started: true, firstSeq: 900, next: 960, count: 1, subscribedAt: t0.Add(-2 * time.Second),
				first: t0.Add(-1990 * time.Millisecond), last: t0.Add(-800 * time.Millisecond), gap: 30 * time.Millisecond},
			gap: 2800 * time.Millisecond, silent: true, lost: 1052 - 959,
		},
		{
			name: "silent, in the middle of a group",
			l: &listener{started: true, firstSeq: 900, next: 960, count: 1, unread: 3, subscribedAt: t0.Add(-2 * time.Second),
				first: t0.Add(-1990 * time.Millisecond), last: t0.Add(-800 * time.Millisecond), gap: 30 * time.Millisecond},
			gap: 2800 * time.Millisecond, silent: true, lost: 1052 - 959 + 3,
		},
		{
			name: "never a frame",
			l:    &listener{startedAt: end.Add(-3 * time.Second)},
			// Groups from a silence after its start to a silence before
			// the end: (3 s - 2 x 0.96 s) / 20 ms.
			gap: 3 * time.Second, silent: true, lost: 54,
		},
		{
			// Subscribed 3 s before t0, first frame (group 950) 1 s
			// before: groups 899 to 949 were sent more than a silence
			// after it subscribed.
			name: "first frame late",
			l: &listener{started: true, firstSeq: 950, next: 1099, count: 1, subscribedAt: t0.Add(-3 * time.Second),
				first: t0.Add(-time.Second), last: end.Add(-10 * time.Millisecond), gap: 2 * time.Second},
			gap: 2 * time.Second, lost: 51,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.l
			gap, silent := l.settle(end, silence, tl)
			if gap != tt.gap || silent != tt.silent || l.lost != tt.lost {
				t.Fatalf("gap %v, silent %v, lost %d; want %v, %v, %d", gap, silent, l.lost, tt.gap, tt.silent, tt.lost)
			}
		})
	}
	t.Run("no timeline", func(t *testing.T) {
		l := listener{startedAt: end.Add(-3 * time.Second)}
		if gap, silent := l.settle(end, silence, timeline{}); gap != 3*time.Second || !silent || l.lost != 0 {
			t.Fatalf("gap %v, silent %v, lost %d: nothing known of the publisher, nothing counted", gap, silent, l.lost)
		}
	})
}

// TestPublisherTimeline: the time between groups comes from the send
// times the frames carry (the publisher's clock may be off), the anchor
// from the latest arrival; a sequence that goes back starts over.
func TestPublisherTimeline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	skew := int64(5 * time.Second) // the publisher's clock is 5 s behind
	sent := func(d time.Duration) int64 { return t0.Add(d).UnixNano() - skew }
	a, b := &listener{}, &listener{}
	for i := range 50 {
		d := time.Duration(i) * 20 * time.Millisecond
		a.observe(groupStart{seq: uint64(100 + i), sent: sent(d), at: t0.Add(d + 3*time.Millisecond), count: 1})
	}
	b.observe(groupStart{seq: 140, sent: sent(800 * time.Millisecond), at: t0.Add(time.Second), count: 1})
	b.observe(groupStart{seq: 150, sent: sent(time.Second), at: t0.Add(1010 * time.Millisecond), count: 1})
	tl := publisherTimeline([]*listener{a, nil, b, {}})
	if !tl.ok || tl.every != 20*time.Millisecond || tl.seq != 150 || !tl.at.Equal(t0.Add(1010*time.Millisecond)) {
		t.Fatalf("timeline %+v: want 20 ms between groups, anchored at group 150", tl)
	}
	if got := tl.seqAt(t0.Add(2010 * time.Millisecond)); got != 200 {
		t.Fatalf("seqAt 1 s after the anchor = %d, want 200", got)
	}
	// The publisher restarted: the run before it no longer counts.
	a.observe(groupStart{seq: 3, sent: sent(2 * time.Second), at: t0.Add(2 * time.Second)})
	if a.tlFirst.seq != 3 || a.tlLast.seq != 3 {
		t.Fatalf("after the sequence went back: first %d, last %d; want 3, 3", a.tlFirst.seq, a.tlLast.seq)
	}
	if tl := publisherTimeline([]*listener{a}); tl.ok {
		t.Fatalf("timeline %+v from one group: want none", tl)
	}
}

func TestPercentiles(t *testing.T) {
	var v []time.Duration
	for i := 10; i >= 1; i-- {
		v = append(v, time.Duration(i)*10*time.Millisecond)
	}
	if got := percentiles(v); got != (GapStats{P50: 50, P99: 100, Max: 100}) {
		t.Fatalf("percentiles = %+v", got)
	}
	if got := percentiles(nil); got != (GapStats{}) {
		t.Fatalf("percentiles(nil) = %+v", got)
	}
}

// TestResumeCutGroup: a group cut short (the relay went) and served again
// from its start after the reconnect is read on from where it was cut: its
// missing frames are no longer lost; a group that was complete is not
// read again.
func TestResumeCutGroup(t *testing.T) {
	now := time.Now()
	l := &listener{windowStart: new(atomic.Int64)}
	l.group(5, now)
	l.countCut(5, 8, 8, false)
	l.group(6, now)
	l.countCut(6, 8, 3, true) // 3 of 8 frames, then the session died
	if l.lost != 5 || l.cut != 1 {
		t.Fatalf("lost %d, cut %d after the cut: want 5, 1", l.lost, l.cut)
	}
	l.resume()
	if !l.group(6, now) || l.resumeAt != 3 || l.lost != 0 || l.cut != 0 {
		t.Fatalf("group 6 served again: resume at %d, lost %d, cut %d; want read on from 3, nothing lost", l.resumeAt, l.lost, l.cut)
	}
	// Complete this time; then the next reconnect serves it again.
	l.resumeAt = 0
	l.countCut(6, 8, 8, false)
	l.resume()
	if l.group(6, now) {
		t.Fatal("a complete group served again is read twice")
	}
}

// TestSecondGap: a listener keeps its longest and second longest gap; a
// second interruption after a first shows in the second, and the silence
// at the end counts as a gap.
func TestSecondGap(t *testing.T) {
	t0 := time.Now()
	l := &listener{subscribedAt: t0, windowStart: new(atomic.Int64)}
	at := func(ms ...int) {
		for _, m := range ms {
			l.frame(nil, t0.Add(time.Duration(m)*time.Millisecond), time.Second)
		}
	}
	at(100, 220, 340, 840, 960, 1080) // a 500 ms gap
	if l.gap != 500*time.Millisecond || l.gap2 != 120*time.Millisecond {
		t.Fatalf("after one gap: gap %v, second %v; want 500ms, 120ms", l.gap, l.gap2)
	}
	if got := l.secondGap(t0.Add(1100 * time.Millisecond)); got != 120*time.Millisecond {
		t.Errorf("second gap %v, want 120ms", got)
	}
	at(1380, 1500) // a second interruption, 300 ms
	if got := l.secondGap(t0.Add(1520 * time.Millisecond)); got != 300*time.Millisecond {
		t.Errorf("second gap after two interruptions %v, want 300ms", got)
	}
	if l.gapEnd != t0.Add(840*time.Millisecond) {
		t.Errorf("the longest gap ended at +%v, want +840ms", l.gapEnd.Sub(t0))
	}
	// Silent for 400 ms at the end: the second longest is that silence.
	if got := l.secondGap(t0.Add(1900 * time.Millisecond)); got != 400*time.Millisecond {
		t.Errorf("second gap with 400 ms of silence at the end %v, want 400ms", got)
	}
	// Silent for 2 s: that is the longest, and 500 ms the second.
	if got := l.secondGap(t0.Add(3500 * time.Millisecond)); got != 500*time.Millisecond {
		t.Errorf("second gap with 2 s of silence at the end %v, want 500ms", got)
	}
	if got := (&listener{}).secondGap(t0); got != 0 {
		t.Errorf("a listener with no frame: second gap %v, want 0", got)
	}
}
