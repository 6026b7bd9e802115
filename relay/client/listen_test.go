package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/moqlite"
)

// fakeRouter answers /route with the first relay not avoided, and
// records the avoid= lists it was sent.
type fakeRouter struct {
	*httptest.Server
	mu     sync.Mutex
	avoids [][]string
}

func startRouter(t *testing.T, relays ...*coreRelay) *fakeRouter {
	r := &fakeRouter{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		avoid := req.URL.Query()["avoid"]
		r.mu.Lock()
		r.avoids = append(r.avoids, avoid)
		r.mu.Unlock()
		for _, c := range relays {
			u := c.relayURL(client.TransportQUIC)
			if !slices.Contains(avoid, u) {
				_ = json.NewEncoder(w).Encode(client.Destination{URL: u, CertificateHash: c.hash})
				return
			}
		}
		http.Error(w, "no relay", http.StatusServiceUnavailable)
	}))
	t.Cleanup(r.Close)
	return r
}

var reconnectLine = regexp.MustCompile(`reconnected \(([a-z-]+)\) from (\S+) to (\S+): no audio for ([0-9.]+) s`)

// runListener runs client.Listen through the router until the test ends.
func runListener(t *testing.T, ctx context.Context, router string, silence time.Duration) *testutil.SyncBuffer {
	t.Helper()
	res, err := client.NewResolver(client.ResolverOptions{Router: router, Broadcast: "b"})
	if err != nil {
		t.Fatal(err)
	}
	out := &testutil.SyncBuffer{}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- client.Listen(lctx, res, &client.Options{Logger: quiet()}, client.ListenOptions{
			Broadcast: "b", Track: "t", Silence: silence, Reconnect: true, Verbose: true,
		}, out)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Listen: %v", err)
		}
	})
	return out
}

// waitLine waits for re in out and returns its submatches.
func waitLine(t *testing.T, out *testutil.SyncBuffer, re *regexp.Regexp, within time.Duration) []string {
	t.Helper()
	var m []string
	if !testutil.Poll(within, func() bool { m = re.FindStringSubmatch(out.String()); return m != nil }) {
		t.Fatalf("no %q within %v; output:\n%s", re, within, out.String())
	}
	return m
}

func groupCount(out *testutil.SyncBuffer) int {
	return len(regexp.MustCompile(`(?m)^group \d+:`).FindAllString(out.String(), -1))
}

// TestListenerMovesOffAKilledRelay: relay A stops abruptly (its socket
// gone, no close sent, no process on its port); the listener notices the
// silence, asks the router again avoiding A, and goes on from B within
// about the silence timeout.
func TestListenerMovesOffAKilledRelay(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	a := startCore(t, "127.0.0.1:0", nil)
	b := startCore(t, "127.0.0.1:0", nil)
	startPublisher(t, ctx, a, 40*time.Millisecond)
	startPublisher(t, ctx, b, 40*time.Millisecond)
	router := startRouter(t, a, b)
	out := runListener(t, ctx, router.URL, client.DefaultSilence)
	testutil.WaitFor(t, 20*time.Second, "groups from A", func() bool { return groupCount(out) >= 5 })

	killed := time.Now()
	a.kill()
	m := waitLine(t, out, reconnectLine, 30*time.Second)
	took := time.Since(killed)
	down, _ := strconv.ParseFloat(m[4], 64)
	t.Logf("%s; line %v after the kill", m[0], took)
	if m[1] != "silent" || m[2] != a.relayURL(client.TransportQUIC) || m[3] != b.relayURL(client.TransportQUIC) {
		t.Errorf("reconnect line %q: want silent, from A to B", m[0])
	}
	if limit := client.DefaultSilence + 3*time.Second; took > limit || time.Duration(down*float64(time.Second)) > limit {
		t.Errorf("audio back %v after the kill (reported gap %.3f s), want within %v", took, down, limit)
	}
	router.mu.Lock()
	last := router.avoids[len(router.avoids)-1]
	router.mu.Unlock()
	if !slices.Equal(last, []string{a.relayURL(client.TransportQUIC)}) {
		t.Errorf("router asked to avoid %q, want A", last)
	}
	n := groupCount(out)
	testutil.WaitFor(t, 20*time.Second, "groups from B", func() bool { return groupCount(out) >= n+5 })
}

// TestListenerGoingAwayIsImmediate: a going-away close moves the listener
// at once, well before a silence timeout could have.
func TestListenerGoingAwayIsImmediate(t *testing.T) {
	testutil.NoLeaks(t)
	ctx := testCtx(t)
	a := startCore(t, "127.0.0.1:0", nil)
	b := startCore(t, "127.0.0.1:0", nil)
	startPublisher(t, ctx, a, 40*time.Millisecond)
	a.session(t, 0)
	startPublisher(t, ctx, b, 40*time.Millisecond)
	router := startRouter(t, a, b)
	const silence = 10 * time.Second
	out := runListener(t, ctx, router.URL, silence)
	testutil.WaitFor(t, 20*time.Second, "groups from A", func() bool { return groupCount(out) >= 5 })

	closed := time.Now()
	_ = a.session(t, 1).CloseWithError(moqlite.CodeGoingAway, "going away")
	m := waitLine(t, out, reconnectLine, 30*time.Second)
	took := time.Since(closed)
	t.Logf("%s; line %v after the close", m[0], took)
	if m[1] != "going-away" || m[3] != b.relayURL(client.TransportQUIC) {
		t.Errorf("reconnect line %q: want going-away, to B", m[0])
	}
	if took >= silence/2 {
		t.Errorf("audio back %v after the going-away: that is a silence timeout's pace, not an immediate reconnect", took)
	}
}

// TestListenerFirstConnectAvoidsADeadRelay: the router still names a relay
// that died since its last poll; the listener's first connection fails
// there (the handshake times out) and it asks again avoiding it.
func TestListenerFirstConnectAvoidsADeadRelay(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	dead := startCore(t, "127.0.0.1:0", nil)
	b := startCore(t, "127.0.0.1:0", nil)
	startPublisher(t, ctx, b, 40*time.Millisecond)
	dead.kill()
	router := startRouter(t, dead, b)
	out := runListener(t, ctx, router.URL, client.DefaultSilence)
	testutil.WaitFor(t, 20*time.Second, "groups from B", func() bool { return groupCount(out) >= 5 })
	router.mu.Lock()
	avoids := slices.Clone(router.avoids)
	router.mu.Unlock()
	if len(avoids) != 2 || len(avoids[0]) != 0 || !slices.Equal(avoids[1], []string{dead.relayURL(client.TransportQUIC)}) {
		t.Errorf("router asked with avoid= %q, want none, then the dead relay", avoids)
	}
}
