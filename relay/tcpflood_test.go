package relay_test

import (
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// TestIdleConnectionFlood: 5,000 idle TCP connections (silent before TLS,
// idle keep-alive, unfinished headers) are closed by the HTTP timeouts,
// while the relay keeps serving /stats, and a WebSocket session outlives
// every timeout. (Before, an idle keep-alive connection was held forever:
// the server had no idle or read timeout.)
func TestIdleConnectionFlood(t *testing.T) {
	const n = 5000
	const timeout = 500 * time.Millisecond
	ctx := testContext(t)
	r := startRelay(t, relay.Config{HTTPTimeout: timeout, MemoryBudget: -1})
	addr := r.Addr().String()
	ws := dial(t, ctx, relayURL(r, ""), &client.Options{Transport: client.TransportWebSocket})

	start := time.Now()
	conns := testutil.IdleConns(t, addr, n, "/healthz")
	t.Logf("%d connections open in %v", n, time.Since(start).Round(time.Millisecond))
	if _, err := httpGetWithin(ctx, "http://"+addr+"/stats", 5*time.Second); err != nil {
		t.Fatalf("/stats with %d idle connections open: %v", n, err)
	}
	if closed := testutil.ClosedWithin(conns, 30*time.Second); closed != n {
		t.Fatalf("%d of %d idle connections closed by the server within 30 s (timeout %v)", closed, n, timeout)
	}
	testutil.WaitFor(t, 10*time.Second, "the connection count to fall", func() bool { return r.Stats().TCPConns <= 2 })

	// The WebSocket session, upgraded before the flood, outlived every
	// timeout (the longest is 6 x 500 ms) and still answers.
	time.Sleep(time.Until(start.Add(4 * time.Second)))
	ann, err := ws.Announced(ctx, "")
	if err != nil {
		t.Fatalf("WebSocket session after the timeouts: %v", err)
	}
	ann.Close()
	select {
	case <-ws.Done():
		t.Fatal("WebSocket session ended")
	default:
	}
}

// TestConnectionCap: past Config.MaxConns a TCP connection is closed at
// once, long before any timeout, and counted.
func TestConnectionCap(t *testing.T) {
	const max, n = 50, 80
	r := startRelay(t, relay.Config{MaxConns: max, HTTPTimeout: time.Minute, MemoryBudget: -1})
	conns := testutil.DialConns(t, r.Addr().String(), n)
	if closed := testutil.ClosedWithin(conns, 5*time.Second); closed != n-max {
		t.Fatalf("%d of %d connections closed with a cap of %d, want %d", closed, n, max, n-max)
	}
	if st := r.Stats(); st.TCPConnsRefused != n-max || st.TCPConns != max {
		t.Fatalf("tcp_conns %d, refused %d; want %d and %d", st.TCPConns, st.TCPConnsRefused, max, n-max)
	}
}
