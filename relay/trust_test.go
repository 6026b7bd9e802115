package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// nonLoopbackIP is an address of this machine that is not loopback, for
// tests of what the client trusts from other hosts; the test is skipped
// when there is none.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		testutil.Skipf(t, "interface addresses: %v", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	testutil.Skipf(t, "no non-loopback IPv4 address on this machine")
	return ""
}

func startRelayOn(t *testing.T, host string, cfg relay.Config) *relay.Relay {
	t.Helper()
	cfg.Listen = net.JoinHostPort(host, "0")
	cfg.Logger = quietLogger()
	r, err := relay.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start relay: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func spkiOf(r *relay.Relay) string { return client.SPKIHash(r.Certificate().Leaf) }

// TestDialTrustsHTTPHashOnlyFromLoopbackOrOptIn: an http:// URL to a host
// that is not loopback would pin whatever /certificate.sha256 says over
// plain HTTP; Dial refuses it unless told to trust the network, and
// accepts a pin from elsewhere (the certificate hash, or #spki=).
func TestDialTrustsHTTPHashOnlyFromLoopbackOrOptIn(t *testing.T) {
	ctx := testContext(t)
	ip := nonLoopbackIP(t)
	r := startRelayOn(t, ip, relay.Config{})
	base := fmt.Sprintf("http://%s/", r.Addr())
	wrong := strings.Repeat("ab", 32)

	_, err := client.Dial(ctx, base, &client.Options{Logger: quietLogger()})
	if !errors.Is(err, client.ErrHashOverHTTP) {
		t.Fatalf("http:// to %s without opt-in: %v, want ErrHashOverHTTP", ip, err)
	}
	for _, tc := range []struct {
		name string
		url  string
		opts client.Options
		ok   bool
	}{
		{"opted in", base, client.Options{TrustHTTPHash: true}, true},
		{"certificate hash", base, client.Options{CertificateHash: r.CertificateHash()}, true},
		{"wrong certificate hash", base, client.Options{CertificateHash: wrong}, false},
		{"spki", base + "#spki=" + spkiOf(r), client.Options{}, true},
		{"spki over websocket", base + "#spki=" + spkiOf(r), client.Options{Transport: client.TransportWebSocket}, true},
		{"spki over webtransport", base + "#spki=" + spkiOf(r), client.Options{Transport: client.TransportWebTransport}, true},
		{"wrong spki", base + "#spki=" + wrong, client.Options{}, false},
		{"wrong spki over websocket", base + "#spki=" + wrong, client.Options{Transport: client.TransportWebSocket}, false},
		{"wrong spki, opted in", base + "#spki=" + wrong, client.Options{TrustHTTPHash: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Logger = quietLogger()
			s, err := client.Dial(ctx, tc.url, &tc.opts)
			if err == nil {
				s.Close()
			}
			if (err == nil) != tc.ok {
				t.Fatalf("Dial(%s): %v, want ok=%v", tc.url, err, tc.ok)
			}
			if err != nil && errors.Is(err, client.ErrHashOverHTTP) {
				t.Fatalf("Dial(%s): %v: refused for the wrong reason", tc.url, err)
			}
		})
	}
	if _, err := client.Dial(ctx, base+"#sha=1", nil); err == nil || !strings.Contains(err.Error(), "#spki=HEX") {
		t.Fatalf("Dial with a bad fragment: %v, want a fragment error", err)
	}
}

// logSink collects log messages and their error attributes.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSink) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}
func (l *logSink) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSink) WithGroup(string) slog.Handler      { return l }

func (l *logSink) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// TestEdgePinsTheOriginBySPKI: an edge whose upstream URL carries the
// origin's key pin (#spki=) pulls from it; one with a wrong pin never
// connects, and listeners on it get nothing, whatever the origin's
// /certificate.sha256 says.
func TestEdgePinsTheOriginBySPKI(t *testing.T) {
	ctx := testContext(t)
	origin := startRelay(t, relay.Config{})
	right := relayURL(origin, "") + "#spki=" + spkiOf(origin)
	wrong := relayURL(origin, "") + "#spki=" + strings.Repeat("0f", 32)
	good := startRelay(t, relay.Config{Upstreams: []string{right}})
	sink := &logSink{}
	bad, err := relay.Start(context.Background(), relay.Config{Listen: "127.0.0.1:0", Upstreams: []string{wrong}, Logger: slog.New(sink)})
	if err != nil {
		t.Fatalf("start edge: %v", err)
	}
	t.Cleanup(func() { bad.Close() })

	pubCtx, stopPub := context.WithCancel(ctx)
	defer stopPub()
	publishLoop(pubCtx, t, relayURL(origin, ""), "live", 0)
	testutil.WaitFor(t, 10*time.Second, "broadcast on the origin", func() bool { return origin.Stats().Broadcasts == 1 })

	s := dial(t, ctx, relayURL(good, ""), nil)
	sub, err := s.Subscribe(ctx, "live", "audio")
	if err != nil {
		t.Fatalf("subscribe on the pinned edge: %v", err)
	}
	if got, err := collect(ctx, sub, 3, 64); err != nil || len(got) < 3 {
		t.Fatalf("pinned edge: got %v, %v; want groups from the origin", got, err)
	}
	if !good.Stats().UpstreamConnected {
		t.Fatal("pinned edge: upstream not connected")
	}

	bs := dial(t, ctx, relayURL(bad, ""), nil)
	bsub, err := bs.Subscribe(ctx, "live", "audio")
	if err == nil {
		defer bsub.Close()
	}
	testutil.WaitFor(t, 10*time.Second, "the wrong pin refused in the edge's log", func() bool { return sink.contains("does not match the pinned spki") })
	if bad.Stats().UpstreamConnected || bad.Stats().UpstreamTracks > 0 && bad.Stats().GroupsOut > 0 {
		t.Fatalf("edge with a wrong pin: %+v", bad.Stats())
	}
	if err == nil {
		gctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if g, err := bsub.NextGroup(gctx); err == nil {
			t.Fatalf("edge with a wrong pin delivered group %d", g.Sequence)
		}
	}
}

// TestUnpinnedClearTextUpstreamRefused: an http:// upstream that is not
// loopback and carries no pin would have the edge trust a hash fetched in
// clear text; Start refuses it, naming the upstream.
func TestUnpinnedClearTextUpstreamRefused(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"http://192.0.2.10:4443/", false},
		{"http://192.0.2.10:4443/#spki=" + strings.Repeat("ab", 32), true},
		{"http://192.0.2.10:4443/#spki=abc", false},
		{"http://192.0.2.10:4443/#pin=" + strings.Repeat("ab", 32), false},
		{"https://origin.example:4443/", true},
		{"http://127.0.0.1:4443/", true},
		{"http://[::1]:4443/", true},
		{"http://localhost:4443/", true},
		{"http://192.0.2.10/", false},
	} {
		err := relay.CheckUpstream(tc.url)
		if (err == nil) != tc.ok {
			t.Errorf("CheckUpstream(%s) = %v, want ok=%v", tc.url, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), tc.url) {
			t.Errorf("CheckUpstream(%s) = %v: does not name the upstream", tc.url, err)
		}
	}
	_, err := relay.Start(context.Background(), relay.Config{Listen: "127.0.0.1:0", Upstreams: []string{"http://192.0.2.10:4443/"}, Logger: quietLogger()})
	if err == nil || !strings.Contains(err.Error(), "#spki=HEX") {
		t.Fatalf("Start with an unpinned clear-text upstream: %v", err)
	}
}
