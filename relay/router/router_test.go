package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/router"
)

// fakeRelay serves /stats with a settable headroom, counts the polls, and
// can be down (500) or hung (the poll waits until the test ends).
type fakeRelay struct {
	srv      *httptest.Server
	headroom atomic.Int64
	down     atomic.Bool
	polls    atomic.Int64
	hung     atomic.Bool
	hang     chan struct{} // closed at cleanup; while hung, /stats waits on it
}

func newFakeRelay(t *testing.T, headroom int) *fakeRelay {
	f := &fakeRelay{hang: make(chan struct{})}
	f.headroom.Store(int64(headroom))
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		f.polls.Add(1)
		if f.hung.Load() {
			<-f.hang
		}
		if f.down.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, `{"sessions": 3, "headroom": %d}`, f.headroom.Load())
	}))
	t.Cleanup(func() { close(f.hang); f.srv.Close() })
	return f
}

func (f *fakeRelay) entry(draining bool) router.Relay {
	return router.Relay{URL: "https://" + f.srv.Listener.Addr().String() + "/", Stats: f.srv.URL + "/stats", Draining: draining}
}

func writeFile(t *testing.T, path string, relays ...router.Relay) {
	t.Helper()
	b, err := json.Marshal(router.File{Relays: relays})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func newRouter(t *testing.T, path string) (*router.Router, *httptest.Server) {
	t.Helper()
	return newRouterOpts(t, router.Options{File: path})
}

// newRouterOpts is a router with o (a nil Logger discards) and a server
// of its handler.
func newRouterOpts(t *testing.T, o router.Options) (*router.Router, *httptest.Server) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := router.New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return r, srv
}

// twoRelays is a router polling every poll (0: the default) and polled
// once, with fake relays a (headroom 10) and b (headroom 5) in its file.
func twoRelays(t *testing.T, poll time.Duration) (a, b *fakeRelay, r *router.Router, srv *httptest.Server) {
	t.Helper()
	a, b = newFakeRelay(t, 10), newFakeRelay(t, 5)
	path := filepath.Join(t.TempDir(), "relays.json")
	writeFile(t, path, a.entry(false), b.entry(false))
	r, srv = newRouterOpts(t, router.Options{File: path, Poll: poll})
	r.PollOnce(context.Background())
	return a, b, r, srv
}

// routeAnswer asks srv's /route for broadcast live, avoiding avoid: the
// status, the route of a 200 answer (which must be JSON) and the body.
func routeAnswer(t *testing.T, srv *httptest.Server, avoid ...string) (int, router.Route, string) {
	t.Helper()
	q := url.Values{"broadcast": {"live"}, "avoid": avoid}
	resp, err := http.Get(srv.URL + "/route?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var rt router.Route
	if resp.StatusCode == http.StatusOK {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("/route Content-Type %q, want application/json", ct)
		}
		if err := json.Unmarshal(b, &rt); err != nil {
			t.Fatalf("/route answered %q: %v", b, err)
		}
	}
	return resp.StatusCode, rt, string(b)
}

// route is routeAnswer's status, and the relay's URL of a 200 answer or
// the body of another.
func route(t *testing.T, srv *httptest.Server, avoid ...string) (int, string) {
	t.Helper()
	code, rt, body := routeAnswer(t, srv, avoid...)
	if code != http.StatusOK {
		return code, strings.TrimSpace(body)
	}
	return code, rt.URL
}

// status is the status of a GET of u.
func status(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestRouteMostHeadroom(t *testing.T) {
	a, b, c := newFakeRelay(t, 2), newFakeRelay(t, 3), newFakeRelay(t, 100)
	path := filepath.Join(t.TempDir(), "relays.json")
	writeFile(t, path, a.entry(false), b.entry(false), c.entry(true)) // c is draining
	r, srv := newRouter(t, path)

	if code, _ := route(t, srv); code != http.StatusServiceUnavailable {
		t.Fatalf("before any poll: status %d, want 503", code)
	}
	r.PollOnce(context.Background())
	// b (3), then a and b tie at 2 (a is listed first), then b, a, then full.
	want := []string{b.entry(false).URL, a.entry(false).URL, b.entry(false).URL, a.entry(false).URL, b.entry(false).URL}
	for i, w := range want {
		code, got := route(t, srv)
		if code != http.StatusOK || got != w {
			t.Fatalf("route %d: %d %q, want 200 %q", i, code, got, w)
		}
	}
	// Answers reserve headroom for the ranking only: with every polled
	// listener reserved, the router still answers (the relays' own
	// admission is the limit), first listed first.
	if code, got := route(t, srv); code != http.StatusOK || got != a.entry(false).URL {
		t.Fatalf("with every headroom reserved: %d %q, want 200 and a", code, got)
	}
	// A new poll resets what was routed; an unreachable relay is skipped.
	b.down.Store(true)
	r.PollOnce(context.Background())
	if code, got := route(t, srv); code != http.StatusOK || got != a.entry(false).URL {
		t.Fatalf("with b down: %d %q, want a", code, got)
	}
	if code := status(t, srv.URL+"/route"); code != http.StatusBadRequest {
		t.Fatalf("/route without broadcast: %d, want 400", code)
	}
}

func TestReload(t *testing.T) {
	a, b := newFakeRelay(t, 10), newFakeRelay(t, 5)
	path := filepath.Join(t.TempDir(), "relays.json")
	writeFile(t, path, a.entry(false), b.entry(false))
	r, srv := newRouter(t, path)
	r.PollOnce(context.Background())
	if _, got := route(t, srv); got != a.entry(false).URL {
		t.Fatalf("routed to %q, want a", got)
	}
	writeFile(t, path, a.entry(true), b.entry(false)) // drain a
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, got := route(t, srv); got != b.entry(false).URL {
		t.Fatalf("after draining a: routed to %q, want b", got)
	}
	if err := os.WriteFile(path, []byte(`{"relays": [{"url": "x"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(); err == nil {
		t.Fatal("a bad file reloaded")
	}
	if _, got := route(t, srv); got != b.entry(false).URL {
		t.Fatalf("after a failed reload: routed to %q, want b still", got)
	}
}

func TestParse(t *testing.T) {
	bad := map[string]string{
		"unknown field": `{"relays": [{"url": "http://a:1/", "stats": "http://a:1/stats", "weight": 3}]}`,
		"bad url":       `{"relays": [{"url": "quic://a:1/", "stats": "http://a:1/stats"}]}`,
		"no stats":      `{"relays": [{"url": "http://a:1/"}]}`,
		"duplicate":     `{"relays": [{"url": "http://a:1/", "stats": "http://a:1/stats"}, {"url": "http://a:1/", "stats": "http://a:1/stats"}]}`,
		"trailing":      `{"relays": []} {}`,
		"not json":      `relays: []`,
	}
	for name, in := range bad {
		t.Run(name, func(t *testing.T) {
			if _, err := router.Parse([]byte(in)); err == nil {
				t.Fatalf("Parse(%s) succeeded", in)
			}
		})
	}
	f, err := router.Parse([]byte(`{"relays": [{"url": "https://r1:4443/", "stats": "http://r1:4443/stats", "draining": true}]}`))
	if err != nil || len(f.Relays) != 1 || !f.Relays[0].Draining {
		t.Fatalf("Parse = %+v, %v", f, err)
	}
}

// TestRouteToRealRelays polls real relays' /stats: the one with the larger
// session cap gets the listener.
func TestRouteToRealRelays(t *testing.T) {
	testutil.NoLeaks(t)
	start := func(max int) *relay.Relay {
		r, err := relay.Start(context.Background(), relay.Config{Listen: "127.0.0.1:0", MaxSessions: max, MemoryBudget: -1, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	small, big := start(10), start(20)
	entry := func(r *relay.Relay) router.Relay {
		return router.Relay{URL: fmt.Sprintf("http://%s/", r.Addr()), Stats: fmt.Sprintf("http://%s/stats", r.Addr())}
	}
	path := filepath.Join(t.TempDir(), "relays.json")
	writeFile(t, path, entry(small), entry(big))
	r, srv := newRouter(t, path)
	r.PollOnce(context.Background())
	if code, got := route(t, srv); code != http.StatusOK || got != entry(big).URL {
		t.Fatalf("routed %d %q, want the relay with 20 sessions of headroom", code, got)
	}
}

// TestRunStops: Run returns once its context ends.
func TestRunStops(t *testing.T) {
	testutil.NoLeaks(t)
	a := newFakeRelay(t, 1)
	path := filepath.Join(t.TempDir(), "relays.json")
	writeFile(t, path, a.entry(false))
	r, _ := newRouter(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	cancel()
	<-done
}

// TestRunReloadsAChangedFile: the fleet tool renames a new relays file
// into place; Run picks it up within a poll, without SIGHUP.
func TestRunReloadsAChangedFile(t *testing.T) {
	testutil.NoLeaks(t)
	a, b := newFakeRelay(t, 10), newFakeRelay(t, 5)
	dir := t.TempDir()
	path := filepath.Join(dir, "relays.json")
	writeFile(t, path, a.entry(false))
	logs, warned := newLoadWarnings()
	r, srv := newRouterOpts(t, router.Options{File: path, Poll: 20 * time.Millisecond, Logger: slog.New(logs)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	waitRoute := func(want string) {
		t.Helper()
		var code int
		var got string
		if !testutil.Poll(5*time.Second, func() bool { code, got = route(t, srv); return code == http.StatusOK && got == want }) {
			t.Fatalf("routed %d %q, want %q", code, got, want)
		}
	}
	waitRoute(a.entry(false).URL)
	tmp := filepath.Join(dir, "relays.json.tmp")
	writeFile(t, tmp, a.entry(true), b.entry(false)) // a drains, b joins
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitRoute(b.entry(false).URL)
	// A broken file leaves the last good list in force.
	if err := os.WriteFile(tmp, []byte(`{"relays": [{"url": "x"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	// The watcher must see the broken file (it says so) and keep the list,
	// through the polls after it too.
	select {
	case <-warned:
	case <-time.After(10 * time.Second):
		t.Fatal("the router never reported the broken relays file: the case was not exercised")
	}
	r.PollOnce(ctx)
	if code, got := route(t, srv); code != http.StatusOK || got != b.entry(false).URL {
		t.Fatalf("after the broken file: routed %d %q, want %q (the last good list)", code, got, b.entry(false).URL)
	}
}

// loadWarnings is a slog.Handler that closes its channel when the router
// warns that a changed relays file did not load: the signal a test waits
// on instead of sleeping.
type loadWarnings struct {
	ch   chan struct{}
	once *sync.Once
}

func newLoadWarnings() (loadWarnings, <-chan struct{}) {
	w := loadWarnings{ch: make(chan struct{}), once: new(sync.Once)}
	return w, w.ch
}

func (w loadWarnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w loadWarnings) Handle(_ context.Context, rec slog.Record) error {
	if strings.Contains(rec.Message, "did not load") {
		w.once.Do(func() { close(w.ch) })
	}
	return nil
}
func (w loadWarnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w loadWarnings) WithGroup(string) slog.Handler      { return w }

// TestRouteCallsDoNotFillTheFleet: /route is anonymous; 10,000 calls
// between two polls must not make the router report the fleet full (before,
// each answer took one listener of headroom until the next poll, so anyone
// could drain it).
func TestRouteCallsDoNotFillTheFleet(t *testing.T) {
	a, b := newFakeRelay(t, 3), newFakeRelay(t, 5)
	path := filepath.Join(t.TempDir(), "relays.json")
	writeFile(t, path, a.entry(false), b.entry(false))
	r, err := router.New(router.Options{File: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r.PollOnce(context.Background())
	counts := map[string]int{}
	for i := range 10000 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/route?broadcast=live", nil))
		if w.Code != http.StatusOK {
			t.Fatalf("route %d: status %d: the router reports the fleet full", i, w.Code)
		}
		var rt router.Route
		if err := json.Unmarshal(w.Body.Bytes(), &rt); err != nil {
			t.Fatalf("route %d: %v: %s", i, err, w.Body.String())
		}
		counts[rt.URL]++
	}
	if counts[a.entry(false).URL] == 0 || counts[b.entry(false).URL] == 0 {
		t.Fatalf("answers %v: want both relays", counts)
	}
	// The relays' polled headroom still decides: one that reports none
	// gets no more listeners.
	b.headroom.Store(0)
	r.PollOnce(context.Background())
	for range 100 {
		if u, err := r.Pick(); err != nil || u.URL != a.entry(false).URL {
			t.Fatalf("with b full: %q %v, want a", u.URL, err)
		}
	}
	a.headroom.Store(0)
	r.PollOnce(context.Background())
	if _, err := r.Pick(); err != router.ErrNoHeadroom {
		t.Fatalf("with every relay full: err %v, want ErrNoHeadroom", err)
	}
}

// TestRouteLastResort: a relay marked last_resort (an ended event's burst
// relay) gets no new listener while another relay has headroom left, and
// gets them, rather than a 503, once none has.
func TestRouteLastResort(t *testing.T) {
	steady, burst := newFakeRelay(t, 2), newFakeRelay(t, 100)
	last := burst.entry(false)
	last.LastResort = true
	path := filepath.Join(t.TempDir(), "relays.json")
	writeFile(t, path, steady.entry(false), last)
	r, srv := newRouter(t, path)
	r.PollOnce(context.Background())
	// The steady relay's two, though the burst relay has far more.
	for i := range 2 {
		if code, got := route(t, srv); code != http.StatusOK || got != steady.entry(false).URL {
			t.Fatalf("route %d: %d %q, want the steady relay", i, code, got)
		}
	}
	// Its headroom is reserved by those answers: the burst relay now.
	if code, got := route(t, srv); code != http.StatusOK || got != last.URL {
		t.Fatalf("steady relay's headroom used: %d %q, want the last-resort relay", code, got)
	}
	// Full at the next poll: the burst relay, no 503.
	steady.headroom.Store(0)
	r.PollOnce(context.Background())
	if code, got := route(t, srv); code != http.StatusOK || got != last.URL {
		t.Fatalf("steady relay full: %d %q, want the last-resort relay", code, got)
	}
	// Room again: the steady relay first.
	steady.headroom.Store(5)
	r.PollOnce(context.Background())
	if code, got := route(t, srv); code != http.StatusOK || got != steady.entry(false).URL {
		t.Fatalf("steady relay with room: %d %q, want it", code, got)
	}
	// Draining wins over last resort: nowhere to go then.
	steady.headroom.Store(0)
	last.Draining = true
	writeFile(t, path, steady.entry(false), last)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	r.PollOnce(context.Background())
	if code, _ := route(t, srv); code != http.StatusServiceUnavailable {
		t.Fatalf("last-resort relay draining, steady full: %d, want 503", code)
	}
}
