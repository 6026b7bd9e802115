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
