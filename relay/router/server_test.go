package router_test

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
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

// TestServerTimeoutsAndCap: 5,000 idle connections to the router (silent,
// idle keep-alive after a /route, unfinished headers) are closed by its
// timeouts while it keeps answering /route; past MaxConns connections are
// closed at once. (Before, the router had only a read-header timeout: an
// idle keep-alive connection was held forever, and there was no cap.)
func TestServerTimeoutsAndCap(t *testing.T) {
	t.Run("timeouts", func(t *testing.T) {
		const n = 5000
		addr, _ := serveRouter(t, router.Limits{Timeout: 500 * time.Millisecond})
		conns := testutil.IdleConns(t, addr, n, "/route?broadcast=live")
		hc := &http.Client{Timeout: 5 * time.Second}
		resp, err := hc.Get("http://" + addr + "/route?broadcast=live")
		if err != nil {
			t.Fatalf("/route with %d idle connections open: %v", n, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/route with %d idle connections open: %s", n, resp.Status)
		}
		if closed := testutil.ClosedWithin(conns, 30*time.Second); closed != n {
			t.Fatalf("%d of %d idle connections closed within 30 s", closed, n)
		}
	})
	t.Run("cap", func(t *testing.T) {
		const max, n = 20, 30
		addr, _ := serveRouter(t, router.Limits{Timeout: time.Minute, MaxConns: max})
		conns := testutil.DialConns(t, addr, n)
		if closed := testutil.ClosedWithin(conns, 3*time.Second); closed != n-max {
			t.Fatalf("%d of %d connections closed with a cap of %d, want %d", closed, n, max, n-max)
		}
	})
}
