package router

import (
	"math"
	"sync"
	"time"
)

// Rate limit of /route. When a relay or a whole tier goes away, every
// listener asks the router again; the clients spread and slow themselves
// (client.Backoff), and the router answers at most Rate requests a second
// on average, Burst at once (a token bucket). A request past that is
// answered 503 with a Retry-After taken from the bucket: each refused
// request is given the next free slot after those already promised, so a
// crowd refused together is told to come back spread over the seconds the
// bucket needs to serve it, not all at the same moment (the client adds
// jitter of its own). The answers themselves are never cached: each
// /route that passes is a fresh Pick from the latest poll.
const (
	// DefaultRate is Options.Rate's default: /route answers a second.
	DefaultRate = 500
	// DefaultBurst is Options.Burst's default.
	DefaultBurst = 1000
	// maxRetryAfter caps the Retry-After the router hands out.
	maxRetryAfter = 60 * time.Second
)

// bucket is a token bucket with a queue of promised slots for the
// requests it refused.
type bucket struct {
	rate, burst float64

	mu       sync.Mutex
	tokens   float64
	last     time.Time
	promised time.Time // the last slot promised to a refused request
}

func newBucket(rate float64, burst int) *bucket {
	return &bucket{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// take takes a token at now, or says how long to wait (whole seconds, at
// least one, as Retry-After has them).
func (b *bucket) take(now time.Time) (ok bool, retry time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	// The next token comes in (1-tokens)/rate; each refused request
	// after it is promised one slot later.
	next := now.Add(time.Duration((1 - b.tokens) / b.rate * float64(time.Second)))
	slot := b.promised.Add(time.Duration(float64(time.Second) / b.rate))
	if slot.Before(next) {
		slot = next
	}
	if slot.Sub(now) > maxRetryAfter {
		slot = now.Add(maxRetryAfter)
	}
	b.promised = slot
	secs := math.Ceil(slot.Sub(now).Seconds())
	return false, time.Duration(max(secs, 1)) * time.Second
}
