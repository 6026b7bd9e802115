package client_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// metric is the value of a metric without labels in a Prometheus text
// exposition (-1 when absent).
func metric(body, name string) float64 {
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// TestProberServesTheHeartbeat: a scrape of /probe?target=EDGE hears the
// heartbeat through the edge (its certificate hash read from its /stats)
// and answers the groups heard and due; a target that forwards nothing
// (an edge whose origin is gone) answers 0 groups; one nobody serves
// fails the probe; a bad target is a 400.
func TestProberServesTheHeartbeat(t *testing.T) {
	origin := startProbeRelay(t, relay.Config{HeartbeatInterval: client.DefaultHeartbeatInterval})
	edge := startProbeRelay(t, relay.Config{Upstreams: []string{baseURL(origin)}})
	deadOrigin := startProbeRelay(t, relay.Config{HeartbeatInterval: -1})
	silent := startProbeRelay(t, relay.Config{Upstreams: []string{baseURL(deadOrigin)}})
	srv := httptest.NewServer(&client.Prober{Logger: quiet()})
	defer srv.Close()
	scrape := func(target string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/probe?window=1s&target=" + target)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := scrape(edge.Addr().String())
	if code != 200 || metric(body, "relayfleet_heartbeat_probe_success") != 1 || metric(body, "relayfleet_heartbeat_groups_due") != 8 || metric(body, "relayfleet_heartbeat_groups") < 6 {
		t.Fatalf("through a forwarding edge: %d\n%s", code, body)
	}
	code, body = scrape(silent.Addr().String())
	if code != 200 || metric(body, "relayfleet_heartbeat_probe_success") != 1 || metric(body, "relayfleet_heartbeat_groups") != 0 {
		t.Fatalf("through an edge that hears nothing: %d\n%s", code, body)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()
	code, body = scrape(gone)
	if code != 200 || metric(body, "relayfleet_heartbeat_probe_success") != 0 || metric(body, "relayfleet_heartbeat_groups") != -1 {
		t.Fatalf("a target nobody serves: %d\n%s", code, body)
	}
	if code, body = scrape("nonsense"); code != 400 || !strings.Contains(body, "HOST:PORT") {
		t.Fatalf("a bad target: %d %s", code, body)
	}
}
