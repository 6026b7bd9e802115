package router_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

func TestMetrics(t *testing.T) {
	a, b, c := newFakeRelay(t, 5), newFakeRelay(t, 7), newFakeRelay(t, 100)
	b.down.Store(true)
	path := filepath.Join(t.TempDir(), "relays.json")
	writeFile(t, path, a.entry(false), b.entry(false), c.entry(true))
	r, srv := newRouter(t, path)
	route(t, srv) // before any poll: 503
	r.PollOnce(context.Background())
	route(t, srv)
	route(t, srv)
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`relay_router_relays{state="healthy"} 1`, `relay_router_relays{state="unhealthy"} 1`, `relay_router_relays{state="draining"} 1`,
		"relay_router_headroom 5", `relay_router_routes_total{result="routed"} 2`, `relay_router_routes_total{result="unavailable"} 1`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}
