package relay_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

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
		t.Skipf("interface addresses: %v", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address on this machine")
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
