package client

import (
	"testing"
	"time"
)

// TestProbeArithmetic: lost counts the holes between the first and last
// sequence and the beats due after the last arrival; duplicates and
// late arrivals are counted apart; the gaps are between arrivals.
func TestProbeArithmetic(t *testing.T) {
	const iv = 100 * time.Millisecond
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name  string
		seqs  []uint64
		ms    []int // arrival, from start
		end   int   // window end, from start
		want  ProbeResult
		badAt int // index of a malformed frame, or -1
	}{
		{"all", []uint64{10, 11, 12, 13}, []int{50, 150, 250, 350}, 400, ProbeResult{Groups: 4, FirstSeq: 10, LastSeq: 13, FirstGroup: 50 * time.Millisecond, MaxGap: iv, P99Gap: iv}, -1},
		{"hole and silent tail", []uint64{10, 12}, []int{50, 250}, 600, ProbeResult{Groups: 2, FirstSeq: 10, LastSeq: 12, Lost: 1 + 3, FirstGroup: 50 * time.Millisecond, MaxGap: 200 * time.Millisecond, P99Gap: 200 * time.Millisecond}, -1},
		{"duplicate and reordered", []uint64{10, 12, 11, 12}, []int{10, 20, 30, 40}, 100, ProbeResult{Groups: 3, FirstSeq: 10, LastSeq: 12, Duplicates: 1, Reordered: 1, Malformed: 1, FirstGroup: 10 * time.Millisecond, MaxGap: 10 * time.Millisecond, P99Gap: 10 * time.Millisecond}, 2},
		{"none", nil, nil, 550, ProbeResult{Lost: 5}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h hearing
			for i, s := range tc.seqs {
				h.group(at(tc.ms[i]), s, i != tc.badAt)
			}
			var got ProbeResult
			h.result(&got, start, at(tc.end), iv)
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
