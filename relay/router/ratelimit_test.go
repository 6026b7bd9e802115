package router_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/router"
)

// TestRouteRateLimited: past --rate and --burst /route answers 503 with a
// Retry-After from the bucket, counted as limited in /metrics, and the Go
// client hands that Retry-After to its backoff.
func TestRouteRateLimited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relays.json")
	if err := os.WriteFile(path, []byte(`{"relays": [{"url": "http://127.0.0.1:9/", "stats": "http://127.0.0.1:9/stats"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Options{File: path, Rate: 1, Burst: 2, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	defer srv.Close()
	get := func() (int, string) {
		resp, err := http.Get(srv.URL + "/route?broadcast=live")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	for range 2 { // the burst: answered (503: no relay polled yet)
		if code, _ := get(); code != http.StatusServiceUnavailable {
			t.Fatalf("within the burst: %d", code)
		}
	}
	var last string
	for range 3 {
		code, ra := get()
		if code != http.StatusServiceUnavailable || ra == "" || ra == "0" {
			t.Fatalf("past the burst: %d Retry-After %q, want 503 with a Retry-After", code, ra)
		}
		if ra == last {
			t.Fatalf("Retry-After %q twice: refused requests should be spread at 1 a second", ra)
		}
		last = ra
	}
	body := string(testutil.Get(t, srv.URL+"/metrics"))
	if !strings.Contains(body, `relay_router_routes_total{result="limited"} 3`) || !strings.Contains(body, `relay_router_routes_total{result="unavailable"} 2`) {
		t.Fatalf("/metrics:\n%s\nwant 3 limited, 2 unavailable", body)
	}
	_, err = client.Route(context.Background(), srv.URL, "live", client.RouterOptions{})
	if ra := client.RetryAfter(err); ra < 3*time.Second {
		t.Fatalf("client: %v, Retry-After %v, want the router's (at least 3 s)", err, ra)
	}
}
