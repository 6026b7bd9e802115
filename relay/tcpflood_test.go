package relay_test

import (
	"bufio"
	"errors"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// idleConns opens n TCP connections to addr that hold the server up in
// three ways, a third each: silent from the start (before TLS), a complete
// request answered and then silence on the keep-alive connection, and a
// request line with no end to its headers.
func idleConns(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		switch i % 3 {
		case 1:
			if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			resp.Body.Close()
		case 2:
			if _, err := c.Write([]byte("GET /stats HTTP/1.1\r\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
	return conns
}

// waitClosed reads each connection until the server closes it and returns
// how many it closed within limit.
func waitClosed(conns []net.Conn, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	var mu sync.Mutex
	closed := 0
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(deadline)
			buf := make([]byte, 512)
			for {
				_, err := c.Read(buf)
				if err == nil {
					continue
				}
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					mu.Lock()
					closed++
					mu.Unlock()
				}
				return
			}
		}()
	}
	wg.Wait()
	return closed
}

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
	conns := idleConns(t, addr, n)
	t.Logf("%d connections open in %v", n, time.Since(start).Round(time.Millisecond))
	if _, err := httpGetWithin(ctx, "http://"+addr+"/stats", 5*time.Second); err != nil {
		t.Fatalf("/stats with %d idle connections open: %v", n, err)
	}
	if closed := waitClosed(conns, 30*time.Second); closed != n {
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
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", r.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	if closed := waitClosed(conns, 5*time.Second); closed != n-max {
		t.Fatalf("%d of %d connections closed with a cap of %d, want %d", closed, n, max, n-max)
	}
	if st := r.Stats(); st.TCPConnsRefused != n-max || st.TCPConns != max {
		t.Fatalf("tcp_conns %d, refused %d; want %d and %d", st.TCPConns, st.TCPConnsRefused, max, n-max)
	}
}
