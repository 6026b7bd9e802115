package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// probeBeat is the probe tests' heartbeat interval.
const probeBeat = 30 * time.Millisecond

func startProbeRelay(t *testing.T, cfg relay.Config) *relay.Relay {
	t.Helper()
	cfg.Listen, cfg.Logger = "127.0.0.1:0", quiet()
	r, err := relay.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func baseURL(r *relay.Relay) string { return fmt.Sprintf("http://%s/", r.Addr()) }

// TestHeartbeatConstants: the client's copy of the heartbeat's wire
// names is the relay's.
func TestHeartbeatConstants(t *testing.T) {
	if got := strings.TrimPrefix(client.HeartbeatRoot, "/") + "/" + client.HeartbeatBroadcast; got != relay.HeartbeatPath {
		t.Errorf("client heartbeat path %q, relay %q", got, relay.HeartbeatPath)
	}
	if client.HeartbeatTrack != relay.HeartbeatTrack || client.HeartbeatFrameLen != relay.HeartbeatFrameLen ||
		client.DefaultHeartbeatInterval != relay.DefaultHeartbeatInterval {
		t.Error("client and relay heartbeat constants differ")
	}
	if !relay.Reserved(strings.TrimPrefix(client.HeartbeatRoot, "/")) {
		t.Error("the probe's root is not under the reserved prefix")
	}
}

// TestProbeOriginAndEdge: the probe hears an origin's heartbeat, and an
// edge's pulled from it, on each transport, every group in order, none
// lost; with a token in the URL and an auth key, and without one.
func TestProbeOriginAndEdge(t *testing.T) {
	ctx := testCtx(t)
	auth, err := relay.NewAuthenticator([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	origin := startProbeRelay(t, relay.Config{Auth: auth, HeartbeatInterval: probeBeat})
	edge := startProbeRelay(t, relay.Config{Auth: auth, Upstreams: []string{baseURL(origin)}})
	tok, err := auth.NewToken("", "live", false, true, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	const window = time.Second
	for _, tc := range []struct {
		name, url, tr string
	}{
		{"origin", baseURL(origin) + "live", client.TransportQUIC},
		{"edge", baseURL(edge), client.TransportQUIC},
		{"edge websocket", baseURL(edge), client.TransportWebSocket},
		{"edge webtransport", baseURL(edge) + "?jwt=" + tok, client.TransportWebTransport},
	} {
		res, err := client.ProbeHeartbeat(ctx, client.ProbeOptions{URL: tc.url, Window: window, Interval: probeBeat,
			Dial: client.Options{Transport: tc.tr, Logger: quiet()}})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		t.Logf("%s: %v", tc.name, res)
		want := int(window / probeBeat)
		switch {
		case res.Groups < want/2 || res.Groups > want+3:
			t.Errorf("%s: %d groups in %v, want about %d", tc.name, res.Groups, window, want)
		case res.Lost > 2, res.Duplicates != 0, res.Reordered != 0, res.Malformed != 0, res.Ended != "":
			t.Errorf("%s: %v: want every group, in order, once", tc.name, res)
		case res.LastSeq-res.FirstSeq+1 != uint64(res.Groups):
			t.Errorf("%s: sequences %d to %d for %d groups", tc.name, res.FirstSeq, res.LastSeq, res.Groups)
		case res.FirstGroup <= 0 || res.FirstGroup > 500*time.Millisecond:
			t.Errorf("%s: first group after %v", tc.name, res.FirstGroup)
		case res.MaxGap < probeBeat/2 || res.P99Gap > res.MaxGap:
			t.Errorf("%s: max gap %v, p99 %v", tc.name, res.MaxGap, res.P99Gap)
		case strings.Contains(res.URL, tok):
			t.Errorf("%s: the result's URL %q holds the token", tc.name, res.URL)
		}
	}
}

// TestProbeHearsNothing: an edge whose origin publishes no heartbeat
// gives a result of no groups, every beat of the window lost, not an
// error; a relay nobody serves is an error.
func TestProbeHearsNothing(t *testing.T) {
	ctx := testCtx(t)
	origin := startProbeRelay(t, relay.Config{HeartbeatInterval: -1})
	edge := startProbeRelay(t, relay.Config{Upstreams: []string{baseURL(origin)}})
	res, err := client.ProbeHeartbeat(ctx, client.ProbeOptions{URL: baseURL(edge), Window: 600 * time.Millisecond, Interval: 100 * time.Millisecond,
		Dial: client.Options{Logger: quiet()}})
	if err != nil {
		t.Fatalf("probe of a silent edge: %v", err)
	}
	if res.Groups != 0 || res.Lost != 6 || res.FirstGroup != 0 {
		t.Errorf("silent edge: %v; want 0 groups, 6 lost", res)
	}
	b, err := json.Marshal(res)
	if err != nil || !strings.Contains(string(b), `"groups":0`) || !strings.Contains(string(b), `"window_ms":600`) {
		t.Errorf("JSON %s, %v", b, err)
	}

	dead := startProbeRelay(t, relay.Config{})
	url := baseURL(dead)
	dead.Close()
	if _, err := client.ProbeHeartbeat(ctx, client.ProbeOptions{URL: url, Window: time.Second, ConnectTimeout: 2 * time.Second,
		Dial: client.Options{Logger: quiet(), CertificateHash: strings.Repeat("ab", 32)}}); err == nil {
		t.Error("probe of a closed relay: no error")
	}
}
