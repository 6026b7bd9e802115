package router_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/loadgen"
	"github.com/relayfleet/relayfleet/relay/router"
)

// origin is a relay with a publisher of 20 ms frames, 5 to a group (a
// group every 100 ms: a fifth of the streams of one per frame, for a
// 2-core machine), that can be stopped
// and started again on the same address.
type origin struct {
	t      *testing.T
	addr   string
	r      *relay.Relay
	cancel context.CancelFunc
	done   chan error
}

func (o *origin) start() {
	o.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, err := relay.Start(ctx, relay.Config{Listen: o.addr, Logger: testutil.Logger()})
	if err != nil {
		cancel()
		o.t.Fatalf("start origin on %s: %v", o.addr, err)
	}
	o.addr, o.r, o.cancel, o.done = r.Addr().String(), r, cancel, make(chan error, 1)
	go func() {
		o.done <- loadgen.Publish(ctx, fmt.Sprintf("http://%s/", r.Addr()), loadgen.PublishOptions{
			Broadcast: "live", FrameTime: 20 * time.Millisecond, FramesPerGroup: 5, FrameSize: 100, Logger: testutil.Logger(),
		})
	}()
	testutil.WaitFor(o.t, 10*time.Second, "the publisher's announce", func() bool { return r.Stats().Broadcasts > 0 })
}

func (o *origin) stop() {
	if o.r == nil {
		return
	}
	o.cancel()
	<-o.done
	o.r.Close()
	o.r = nil
}

// routeLog records when each /route request came.
type routeLog struct {
	mu sync.Mutex
	at []time.Time
}

func (l *routeLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/route" {
			l.mu.Lock()
			l.at = append(l.at, time.Now())
			l.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// peak is the most requests in any window of length w, and when that
// window started.
func (l *routeLog) peak(w time.Duration, from, to time.Time) (int, time.Time) {
	l.mu.Lock()
	at := append([]time.Time(nil), l.at...)
	l.mu.Unlock()
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	best, bestAt, j := 0, time.Time{}, 0
	for i := range at {
		if at[i].Before(from) || at[i].After(to) {
			continue
		}
		if j < i {
			j = i
		}
		for j < len(at) && at[j].Sub(at[i]) < w {
			j++
		}
		if j-i > best {
			best, bestAt = j-i, at[i]
		}
	}
	return best, bestAt
}

func (l *routeLog) count(from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.at {
		if !a.Before(from) && a.Before(to) {
			n++
		}
	}
	return n
}

// TestReconnectStormBounded: 200 listeners (loadgen, in-process) through
// the router onto an edge relay whose origin stops for outage (20 s, as in
// the issue) and then starts again. The /route
// requests the listeners make while their audio is gone stay under the
// bound the backoff schedule gives (client.PeakReconnects), counted at
// the router, and every listener hears audio again soon after the edge
// pulls again (see the bound below).
func TestReconnectStormBounded(t *testing.T) {
	testutil.Short(t, "make test-long (a 30 s run of 200 listeners)")
	const (
		listeners = 200
		outage    = 20 * time.Second
		window    = 100 * time.Millisecond
	)
	org := &origin{t: t, addr: "127.0.0.1:0"}
	org.start()
	t.Cleanup(org.stop)
	edge, err := relay.Start(context.Background(), relay.Config{
		Listen: "127.0.0.1:0", Upstreams: []string{fmt.Sprintf("http://%s/", org.addr)}, MaxSessionsPerAddress: -1, Logger: testutil.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { edge.Close() })
	path := filepath.Join(t.TempDir(), "relays.json")
	file := fmt.Sprintf(`{"relays": [{"url": "http://%s/", "stats": "http://%s/stats"}]}`, edge.Addr(), edge.Addr())
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Options{File: path, Poll: 250 * time.Millisecond, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt.PollOnce(ctx)
	go rt.Run(ctx)
	var log routeLog
	srv := httptest.NewServer(log.wrap(rt))
	defer srv.Close()

	var stoppedAt, returnedAt, pulledAt time.Time
	faulted := make(chan struct{})
	win := func(start bool) {
		if !start {
			return
		}
		go func() {
			defer close(faulted)
			time.Sleep(2 * time.Second)
			stoppedAt = time.Now()
			org.stop()
			time.Sleep(outage)
			org.start()
			returnedAt = time.Now()
			t.Logf("origin back at %s", returnedAt.Format("15:04:05.000"))
			// When the edge pulls audio again: its re-dial backoff
			// (relay/cluster.go, 0.5-1 s at most) is the edge's, not
			// the listeners'.
			in := edge.Stats().GroupsIn
			for edge.Stats().GroupsIn == in && time.Since(returnedAt) < 10*time.Second {
				time.Sleep(10 * time.Millisecond)
			}
			pulledAt = time.Now()
		}()
	}
	rep, err := loadgen.Run(ctx, loadgen.Options{
		Router: srv.URL, Broadcast: "live", Listeners: listeners, Shards: 8, Duration: 2*time.Second + outage + 7*time.Second, Late: time.Hour,
		Reconnect: true, Logger: stormLogger(t), Window: win,
	})
	<-faulted
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %+v", rep)
	n, at := log.peak(window, stoppedAt, returnedAt.Add(3*time.Second))
	total := log.count(stoppedAt, returnedAt.Add(3*time.Second))
	bound := client.PeakReconnects(listeners, window, client.DefaultSilence)
	t.Logf("/route requests from the origin's stop to 3 s after its return: %d; peak %d in a %v window at +%v; bound %d",
		total, n, window, at.Sub(stoppedAt).Round(time.Millisecond), bound)
	if n > bound {
		t.Errorf("peak /route rate %d per %v, over the bound %d", n, window, bound)
	}
	during, most := log.count(stoppedAt, returnedAt), client.ReconnectsWithin(listeners, returnedAt.Sub(stoppedAt), client.DefaultSilence)
	t.Logf("/route requests while the origin was away (%v): %d, bound %d", returnedAt.Sub(stoppedAt).Round(time.Millisecond), during, most)
	if during > most {
		t.Errorf("%d /route requests while the origin was away, over the bound %d", during, most)
	}
	gap := time.Duration(rep.GapMs.Max * float64(time.Millisecond))
	recovered := gap - pulledAt.Sub(stoppedAt)
	t.Logf("longest gap %v: audio back at most %v after the origin's return, %v after the edge pulled again (%v after the return)",
		gap.Round(time.Millisecond), (gap - returnedAt.Sub(stoppedAt)).Round(time.Millisecond), recovered.Round(time.Millisecond),
		pulledAt.Sub(returnedAt).Round(time.Millisecond))
	// The issue asks for 3 s from the origin's return: the edge's re-dial
	// (at most 1 s, relay/cluster.go), then the listeners still
	// subscribed hear it at once and those that gave up wait at most
	// BackoffMax (2 s) for a /route, a handshake and a subscription.
	// Measured: 0.6 s (before the edge's 1.5 s dial wait, 1 s backoff
	// cap and restartQuiet: 3.1-3.8 s).
	back := gap - returnedAt.Sub(stoppedAt)
	if back > 3*time.Second || rep.ListenersLost != 0 || rep.SilentAtEnd != 0 || rep.Connected != listeners {
		t.Errorf("report %+v: want every listener back within 3 s of the origin's return (%v; the edge pulled again after %v), none lost or silent at the end", rep, back.Round(time.Millisecond), pulledAt.Sub(returnedAt).Round(time.Millisecond))
	}
}

func stormLogger(t *testing.T) *slog.Logger {
	p := os.Getenv("STORM_LOG")
	if p == "" {
		return testutil.Logger()
	}
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
