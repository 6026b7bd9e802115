package backend

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/internal/ctxtime"
)

// Retry is how a cloud backend retries API calls that the API refused for
// now: 429 (rate limited) and 5xx. The zero value is the default policy.
type Retry struct {
	Attempts int           // tries in all, the first included; default 6
	Base     time.Duration // the first wait; default 1s; doubles each retry
	Max      time.Duration // the longest wait, Retry-After included; default 30s
}

// Defaults of Retry.
const (
	DefaultAttempts = 6
	DefaultBase     = time.Second
	DefaultMax      = 30 * time.Second
)

func (r Retry) withDefaults() Retry {
	if r.Attempts <= 0 {
		r.Attempts = DefaultAttempts
	}
	if r.Base <= 0 {
		r.Base = DefaultBase
	}
	if r.Max <= 0 {
		r.Max = DefaultMax
	}
	if r.Max < r.Base {
		r.Max = r.Base
	}
	return r
}

// MaxAttempts is r.Attempts, or its default.
func (r Retry) MaxAttempts() int { return r.withDefaults().Attempts }

// Backoff is the wait before retry number retry (0 for the first): a
// random duration between half of and the full Base x 2^retry, capped at Max.
func (r Retry) Backoff(retry int) time.Duration {
	r = r.withDefaults()
	d := r.Max
	if retry < 30 {
		d = min(r.Base<<retry, r.Max)
	}
	return d/2 + rand.N(d/2+1)
}

// RetryStatus reports whether an API answer with this status is worth
// retrying: 429 and 5xx, except 501 (not implemented).
func RetryStatus(code int) bool {
	return code == http.StatusTooManyRequests || code >= 500 && code <= 599 && code != http.StatusNotImplemented
}

// Transport returns an http.RoundTripper that sends requests through base
// (http.DefaultTransport when nil) and retries them with r's backoff,
// honouring Retry-After (seconds or a date) and, on a 429, hcloud's
// RateLimit-Reset, both capped at r.Max.
//
// It also keeps the API's request budget from running out: when an
// answer's rate-limit headers (RateLimit-Limit, -Remaining, -Reset, as
// Hetzner and DigitalOcean send them) say that less than a tenth of the
// budget is left, the next requests are spaced so that what is left lasts
// until the reset (Pace).
//
// Every request it sends, each retry included, is appended to the
// request's request log, when it has one (RequestLogEnv).
//
// A 429 is retried for every method: the API did not act on the request.
// A 5xx or a network error is retried only for GET, HEAD, PUT, DELETE and
// OPTIONS; a POST that failed that way may have created something, so the
// backends look before they post again (see the Create methods).
func (r Retry) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &retryTransport{policy: r.withDefaults(), base: base, sleep: ctxtime.Sleep, now: time.Now}
}

type retryTransport struct {
	policy Retry
	base   http.RoundTripper
	// sleep and now are ctxtime.Sleep and time.Now; tests replace them.
	sleep func(context.Context, time.Duration) error
	now   func() time.Time

	mu   sync.Mutex
	next time.Time // no request before this (the budget's pace)
}

// Pace is the gap to keep between requests after an answer with these
// headers: 0 while a tenth of the budget or more is left, else the time
// to the reset shared out over what is left, capped at most.
func Pace(h http.Header, now time.Time, most time.Duration) time.Duration {
	limit, err1 := strconv.Atoi(h.Get("Ratelimit-Limit"))
	remaining, err2 := strconv.Atoi(h.Get("Ratelimit-Remaining"))
	reset, err3 := strconv.ParseInt(h.Get("Ratelimit-Reset"), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || limit <= 0 || remaining*10 >= limit {
		return 0
	}
	left := time.Unix(reset, 0).Sub(now)
	if left <= 0 {
		return 0
	}
	return min(left/time.Duration(max(remaining, 1)), most)
}

// paced waits until the budget's pace lets the next request go.
func (t *retryTransport) paced(ctx context.Context) error {
	t.mu.Lock()
	wait := t.next.Sub(t.now())
	t.mu.Unlock()
	if wait <= 0 {
		return nil
	}
	return t.sleep(ctx, wait)
}

// learn sets the pace from an answer's rate-limit headers.
func (t *retryTransport) learn(resp *http.Response) {
	if resp == nil {
		return
	}
	now := t.now()
	gap := Pace(resp.Header, now, t.policy.Max)
	t.mu.Lock()
	t.next = now.Add(gap)
	t.mu.Unlock()
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions:
		return true
	}
	return false
}

func (t *retryTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	for retry := 0; ; retry++ {
		if err := t.paced(ctx); err != nil {
			return nil, err
		}
		resp, err := t.base.RoundTrip(req)
		logRequest(req, resp)
		t.learn(resp)
		if retry+1 >= t.policy.Attempts || ctx.Err() != nil {
			return resp, err
		}
		var wait time.Duration
		switch {
		case err != nil:
			var ne net.Error
			if !idempotent(req.Method) || !(errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)) {
				return resp, err
			}
			wait = t.policy.Backoff(retry)
		case resp.StatusCode == http.StatusTooManyRequests || RetryStatus(resp.StatusCode) && idempotent(req.Method):
			wait = max(t.policy.Backoff(retry), t.retryAfter(resp.Header, time.Now()))
		default:
			return resp, nil
		}
		// The next try needs the body again.
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return resp, err
			}
			body, gerr := req.GetBody()
			if gerr != nil {
				return resp, err
			}
			next := req.Clone(ctx)
			next.Body = body
			req = next
		}
		if resp != nil {
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		if serr := t.sleep(ctx, wait); serr != nil {
			return nil, serr
		}
	}
}

// retryAfter is the wait the API asked for, capped at the policy's Max.
func (t *retryTransport) retryAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.Atoi(v); err == nil && s >= 0 {
			d = time.Duration(s) * time.Second
		} else if at, err := http.ParseTime(v); err == nil {
			d = at.Sub(now)
		}
	} else if v := h.Get("RateLimit-Reset"); v != "" {
		if s, err := strconv.ParseInt(v, 10, 64); err == nil {
			d = time.Unix(s, 0).Sub(now)
		}
	}
	return min(max(d, 0), t.policy.Max)
}
