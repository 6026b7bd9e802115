package backend

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fastRetry keeps the tests quick while still exercising the backoff.
var fastRetry = Retry{Attempts: 4, Base: time.Millisecond, Max: 20 * time.Millisecond}

// scripted answers with the statuses in order, then 200, and records the
// bodies it was sent.
type scripted struct {
	mu       sync.Mutex
	statuses []int
	header   http.Header
	bodies   []string
	times    []time.Time
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, string(b))
	s.times = append(s.times, time.Now())
	code := http.StatusOK
	if len(s.statuses) > 0 {
		code, s.statuses = s.statuses[0], s.statuses[1:]
	}
	s.mu.Unlock()
	if code != http.StatusOK {
		for k, v := range s.header {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(code)
	io.WriteString(w, `{"ok":true}`)
}

func TestRetryTransport(t *testing.T) {
	for _, tc := range []struct {
		name     string
		method   string
		statuses []int
		header   http.Header
		want     int // final status
		tries    int
		minGap   time.Duration // least time between the first two tries
	}{
		{"429 then ok", http.MethodGet, []int{429}, nil, 200, 2, 0},
		{"429 on POST is retried", http.MethodPost, []int{429, 429}, nil, 200, 3, 0},
		{"503 then ok", http.MethodGet, []int{503}, nil, 200, 2, 0},
		{"500 502 504 on DELETE", http.MethodDelete, []int{500, 502, 504}, nil, 200, 4, 0},
		{"503 on POST is not retried", http.MethodPost, []int{503}, nil, 503, 1, 0},
		{"501 is not retried", http.MethodGet, []int{501}, nil, 501, 1, 0},
		{"400 is not retried", http.MethodGet, []int{400}, nil, 400, 1, 0},
		{"404 is not retried", http.MethodGet, []int{404}, nil, 404, 1, 0},
		{"bounded", http.MethodGet, []int{503, 503, 503, 503, 503}, nil, 503, 4, 0},
		{"Retry-After honoured up to Max", http.MethodGet, []int{429}, http.Header{"Retry-After": {"1"}}, 200, 2, fastRetry.Max},
		{"RateLimit-Reset honoured up to Max", http.MethodGet, []int{429}, http.Header{"Ratelimit-Reset": {"9999999999"}}, 200, 2, fastRetry.Max},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &scripted{statuses: tc.statuses, header: tc.header}
			srv := httptest.NewServer(s)
			defer srv.Close()
			c := &http.Client{Transport: fastRetry.Transport(srv.Client().Transport)}
			req, err := http.NewRequest(tc.method, srv.URL, strings.NewReader(`{"name":"relay-1"}`))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
			if string(body) != `{"ok":true}` {
				t.Errorf("body %q", body)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if len(s.bodies) != tc.tries {
				t.Fatalf("%d tries, want %d", len(s.bodies), tc.tries)
			}
			for i, b := range s.bodies {
				if b != `{"name":"relay-1"}` {
					t.Errorf("try %d sent body %q", i+1, b)
				}
			}
			if tc.minGap > 0 {
				if gap := s.times[1].Sub(s.times[0]); gap < tc.minGap {
					t.Errorf("retried after %v, want at least %v", gap, tc.minGap)
				}
			}
		})
	}
}

func TestRetryTransportStopsOnCancel(t *testing.T) {
	s := &scripted{statuses: []int{503, 503, 503, 503}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	slow := Retry{Attempts: 4, Base: time.Hour, Max: time.Hour}
	c := &http.Client{Transport: slow.Transport(srv.Client().Transport)}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	start := time.Now()
	_, err := c.Do(req)
	if err == nil {
		t.Fatal("no error after cancel")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("cancel took %v", d)
	}
}

func TestBackoff(t *testing.T) {
	r := Retry{Base: 100 * time.Millisecond, Max: time.Second}
	for retry, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second} {
		for range 50 {
			d := r.Backoff(retry)
			if d < want/2 || d > want {
				t.Fatalf("Backoff(%d) = %v, want in [%v, %v]", retry, d, want/2, want)
			}
		}
	}
	if d := r.Backoff(1000); d > time.Second {
		t.Errorf("Backoff(1000) = %v", d)
	}
	if got := (Retry{}).MaxAttempts(); got != DefaultAttempts {
		t.Errorf("default attempts %d", got)
	}
}

// TestPace: the gap between requests once less than a tenth of the
// budget is left, as both clouds' headers say it.
func TestPace(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	h := func(limit, remaining int, resetIn time.Duration) http.Header {
		hd := http.Header{}
		hd.Set("RateLimit-Limit", strconv.Itoa(limit)) // Hetzner's spelling
		hd.Set("Ratelimit-Remaining", strconv.Itoa(remaining))
		hd.Set("Ratelimit-Reset", strconv.FormatInt(now.Add(resetIn).Unix(), 10))
		return hd
	}
	for _, c := range []struct {
		name string
		h    http.Header
		want time.Duration
	}{
		{"plenty left", h(3600, 3000, time.Hour), 0},
		{"a tenth left", h(3600, 360, time.Hour), 0},
		{"under a tenth", h(3600, 100, 100*time.Second), time.Second},
		{"none left", h(3600, 0, 10*time.Second), 10 * time.Second},
		{"capped", h(5000, 1, time.Hour), 30 * time.Second},
		{"reset past", h(3600, 10, -time.Second), 0},
		{"no headers", http.Header{}, 0},
	} {
		if got := Pace(c.h, now, 30*time.Second); got != c.want {
			t.Errorf("%s: Pace = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestTransportPacesTheBudget: after an answer that says the budget is
// nearly gone, the next request waits its share of the time to the reset;
// after one with budget to spare, none does.
func TestTransportPacesTheBudget(t *testing.T) {
	remaining := "5"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Ratelimit-Limit", "100")
		w.Header().Set("Ratelimit-Remaining", remaining)
		w.Header().Set("Ratelimit-Reset", strconv.FormatInt(time.Now().Add(10*time.Second).Unix(), 10))
	}))
	defer srv.Close()
	tr := Retry{}.Transport(nil).(*retryTransport)
	var waits []time.Duration
	tr.sleep = func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil }
	c := &http.Client{Transport: tr}
	get := func() {
		t.Helper()
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	get()
	if len(waits) != 0 {
		t.Fatalf("the first request waited %v", waits)
	}
	remaining = "50"
	get() // paced by the first answer: 10s over 5 requests left
	if len(waits) != 1 || waits[0] < time.Second || waits[0] > 2*time.Second {
		t.Fatalf("waits %v: want one of about 2s (10s to the reset over 5 requests)", waits)
	}
	get() // the second answer left half the budget: no wait
	if len(waits) != 1 {
		t.Fatalf("waits %v after an answer with budget to spare", waits)
	}
}
