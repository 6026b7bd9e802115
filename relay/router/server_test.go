package router_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay/router"
)

// serveRouter serves a router on loopback with lim and returns its address.
func serveRouter(t *testing.T, lim router.Limits) (string, *router.Router) {
	t.Helper()
	f := newFakeRelay(t, 100)
	path := filepath.Join(t.TempDir(), "relays.json")
	writeFile(t, path, f.entry(false))
	r, _ := newRouter(t, path)
	r.PollOnce(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := r.HTTPServer(lim)
	go func() { _ = srv.Serve(router.LimitListener(ln, lim)) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), r
}

// closedBy reads each connection until the server closes it and returns
// how many it closed before deadline.
func closedBy(conns []net.Conn, deadline time.Time) int {
	var closed atomic.Int32
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(deadline)
			buf := make([]byte, 512)
			for {
				if _, err := c.Read(buf); err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						closed.Add(1)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	return int(closed.Load())
}

// TestServerTimeoutsAndCap: 5,000 idle connections to the router (silent,
// idle keep-alive after a /route, unfinished headers) are closed by its
// timeouts while it keeps answering /route; past MaxConns connections are
// closed at once. (Before, the router had only a read-header timeout: an
// idle keep-alive connection was held forever, and there was no cap.)
func TestServerTimeoutsAndCap(t *testing.T) {
	t.Run("timeouts", func(t *testing.T) {
		const n = 5000
		addr, _ := serveRouter(t, router.Limits{Timeout: 500 * time.Millisecond})
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for i := range n {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			conns = append(conns, c)
			switch i % 3 {
			case 1:
				_, _ = c.Write([]byte("GET /route?broadcast=live HTTP/1.1\r\nHost: router\r\n\r\n"))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("connection %d: %v", i, err)
				}
				resp.Body.Close()
			case 2:
				_, _ = c.Write([]byte("GET /route HTTP/1.1\r\n"))
			}
		}
		hc := &http.Client{Timeout: 5 * time.Second}
		resp, err := hc.Get("http://" + addr + "/route?broadcast=live")
		if err != nil {
			t.Fatalf("/route with %d idle connections open: %v", n, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/route with %d idle connections open: %s", n, resp.Status)
		}
		if closed := closedBy(conns, time.Now().Add(30*time.Second)); closed != n {
			t.Fatalf("%d of %d idle connections closed within 30 s", closed, n)
		}
	})
	t.Run("cap", func(t *testing.T) {
		const max, n = 20, 30
		addr, _ := serveRouter(t, router.Limits{Timeout: time.Minute, MaxConns: max})
		var conns []net.Conn
		for range n {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			conns = append(conns, c)
		}
		if closed := closedBy(conns, time.Now().Add(3*time.Second)); closed != n-max {
			t.Fatalf("%d of %d connections closed with a cap of %d, want %d", closed, n, max, n-max)
		}
	})
}
