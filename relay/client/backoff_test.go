package client_test

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay/client"
)

// TestBackoffSchedule: waits stay under c_k (500 ms, 1 s, then 2 s),
// audio for less than BackoffSteady does not reset the schedule, and
// BackoffSteady of it does.
func TestBackoffSchedule(t *testing.T) {
	var b client.Backoff
	now := time.Unix(1000, 0)
	for k, c := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second} {
		if got := client.Ceiling(k); got != c {
			t.Fatalf("Ceiling(%d) = %v, want %v", k, got, c)
		}
		if w := b.Next(0); w < 0 || w >= c {
			t.Fatalf("attempt %d: wait %v, want in [0, %v)", k, w, c)
		}
		// Audio for a few seconds, then silence again: no reset.
		b.Heard(now)
		b.Heard(now.Add(5 * time.Second))
	}
	if b.Attempt() != 4 {
		t.Fatalf("after 4 attempts with 5 s of audio each: attempt %d, want 4 (no reset)", b.Attempt())
	}
	b.Heard(now)
	b.Heard(now.Add(client.BackoffSteady))
	if b.Attempt() != 0 {
		t.Fatalf("after %v of audio: attempt %d, want 0", client.BackoffSteady, b.Attempt())
	}
	if w := b.Next(3 * time.Second); w < 3*time.Second || w > 4500*time.Millisecond {
		t.Fatalf("Retry-After 3 s: wait %v, want 3 s to 4.5 s", w)
	}
}

// TestPeakReconnectsBound: n listeners whose sessions die at once, each
// attempt finding the path silent after the silence timeout, for 20 s
// (the outage): the most /route requests in any 100 ms stays
// under PeakReconnects, while the old schedule (every listener at once
// after every silence) puts them all in one window.
func TestPeakReconnectsBound(t *testing.T) {
	const n, outage, w = 200, 20 * time.Second, 100 * time.Millisecond
	attempt := client.DefaultSilence
	bound := client.PeakReconnects(n, w, attempt)
	peak := func(at []time.Duration) int {
		sort.Slice(at, func(i, j int) bool { return at[i] < at[j] })
		best, j := 0, 0
		for i := range at {
			for j < len(at) && at[j]-at[i] < w {
				j++
			}
			best = max(best, j-i)
		}
		return best
	}
	var at, old []time.Duration
	for range n {
		var b client.Backoff
		for t := time.Duration(0); ; {
			t += b.Next(0)
			if t > outage {
				break
			}
			at = append(at, t)
			t += attempt
		}
		// Before: at once, after every silence.
		for t := time.Duration(0); t <= outage; t += attempt + time.Duration(rand.N(5))*time.Millisecond {
			old = append(old, t)
		}
	}
	got, was := peak(at), peak(old)
	t.Logf("%d listeners, %v outage: %d requests, peak %d per %v (bound %d); old schedule %d requests, peak %d", n, outage, len(at), got, w, bound, len(old), was)
	if got > bound {
		t.Fatalf("peak %d per %v, over the bound %d", got, w, bound)
	}
	if total := client.ReconnectsWithin(n, outage, attempt); len(at) > total || len(old) <= total {
		t.Fatalf("%d requests over the outage (old schedule %d), want at most %d (and the old over it)", len(at), len(old), total)
	}
	if was <= bound {
		t.Fatalf("old schedule's peak %d within the bound %d: the bound tells nothing", was, bound)
	}
}
