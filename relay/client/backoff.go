package client

import (
	"math/rand/v2"
	"time"
)

// Reconnect backoff. A relay or an origin that goes away silences every
// listener at once, and every listener then asks the router again: the
// schedule below spreads them and slows them while nothing comes back,
// and keeps the first reconnect after a healthy spell quick.
//
// Before attempt k (0 for the first after a healthy spell) a listener
// waits a time drawn uniformly from [0, c_k) ("full jitter"), with
//
//	c_k = min(BackoffMax, BackoffMin * 2^k)
//
// that is [0, 500 ms), [0, 1 s), then [0, 2 s) for every later attempt.
// k grows with every attempt, failed or not; it goes back to 0 only once
// audio has flowed without a break for BackoffSteady (10 s) on one
// subscription. A listener whose new subscription goes silent again
// (the relay is up, its origin is not) therefore keeps backing off
// instead of starting again at zero: 10 s is more than a wait at the cap
// (2 s) plus a silence timeout (960 ms) plus an attempt, so a path that
// flaps every few seconds never resets, and short enough that a listener
// that heard a quarter of a minute of audio is treated as healthy again.
//
// BackoffMax is 2 s so that a listener waiting when the audio comes back
// hears it again within 3 s: at most 2 s of wait, then a /route answer,
// a QUIC handshake and a subscription.
//
// A router (or relay) that answers 503 with Retry-After gets that much
// plus up to half again of jitter, when that is longer than the wait
// drawn (RetryAfterError).
const (
	BackoffMin    = 500 * time.Millisecond
	BackoffMax    = 2 * time.Second
	BackoffSteady = 10 * time.Second
)

// Backoff is one listener's reconnect schedule (see BackoffMin). The
// zero value is ready; it is not safe for concurrent use.
type Backoff struct {
	attempt int       // attempts since the last reset
	since   time.Time // when audio started flowing on this subscription
}

// Ceiling is c_k: the upper end of the wait before attempt k.
func Ceiling(k int) time.Duration {
	c := BackoffMin
	for range k {
		if c >= BackoffMax {
			break
		}
		c *= 2
	}
	return min(c, BackoffMax)
}

// Next draws the wait before the next attempt and counts it: uniform in
// [0, Ceiling(k)), or retryAfter plus up to half of it again when that
// is longer (retryAfter > 0: the router said when to come back). The
// audio's flow is forgotten: it must start again and last BackoffSteady
// for the schedule to reset.
func (b *Backoff) Next(retryAfter time.Duration) time.Duration {
	c := Ceiling(b.attempt)
	b.attempt++
	b.since = time.Time{}
	wait := rand.N(c)
	if retryAfter > 0 {
		wait = max(wait, retryAfter+rand.N(retryAfter/2+1))
	}
	return wait
}

// Heard records audio at now: once it has flowed for BackoffSteady since
// the last attempt (Next), the schedule starts again at attempt 0.
func (b *Backoff) Heard(now time.Time) {
	switch {
	case b.since.IsZero():
		b.since = now
	case b.attempt > 0 && now.Sub(b.since) >= BackoffSteady:
		b.attempt = 0
	}
}

// Attempt is the number of attempts since the last reset.
func (b *Backoff) Attempt() int { return b.attempt }

// PeakReconnects bounds the /route requests n listeners make in any
// window w (at most BackoffMin) when their sessions all die at once and
// no audio comes back, each attempt taking at least attempt (the time to
// find the path still silent: a subscription to a relay whose origin is
// gone ends after the silence timeout).
//
// Attempt k's request comes after a wait uniform in [0, c_k) that follows
// attempt k-1, so its time has a density of at most 1/c_k per listener.
// While c_k doubles (k = 0, 1: 500 ms, 1 s) those densities add up to
// less than 2/BackoffMin however the waves overlap; once at the cap a
// listener asks at most once per attempt+BackoffMax/2 on average. So the
// rate is at most
//
//	n * (2/BackoffMin + 1/(attempt + BackoffMax/2))  requests per second
//
// and PeakReconnects is that times w. The sum of densities assumes every
// wave overlaps the others, which they do not (each attempt lasts at
// least attempt, 960 ms here): the busiest window is in fact the first
// wave's, n*w/BackoffMin on average, so the bound leaves more than twice
// that for the randomness of a few hundred listeners. For 200 listeners,
// w = 100 ms and attempt = 960 ms: 200 * 0.1 * (4 + 0.51) = 90 requests
// in any 100 ms (902 a second), where the old schedule (every listener at
// once on every silence) sent all 200 within a few milliseconds, once per
// silence timeout, for as long as the origin was away.
func PeakReconnects(n int, w, attempt time.Duration) int {
	perSecond := 2/BackoffMin.Seconds() + 1/(attempt.Seconds()+BackoffMax.Seconds()/2)
	return int(float64(n) * w.Seconds() * perSecond)
}

// ReconnectsWithin bounds, on average, the /route requests n listeners
// make over an outage d (their sessions all died at its start), each
// attempt taking at least attempt: at most two attempts while the
// ceiling doubles, then one per attempt+BackoffMax/2 (the mean wait at
// the cap) on average:
//
//	n * (2 + d/(attempt + BackoffMax/2))
//
// For 200 listeners, a 20 s outage and attempt = 960 ms: 2,440, where
// the old schedule asked once per silence timeout, 4,000 and more.
func ReconnectsWithin(n int, d, attempt time.Duration) int {
	return int(float64(n) * (2 + d.Seconds()/(attempt.Seconds()+BackoffMax.Seconds()/2)))
}
