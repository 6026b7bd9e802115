package router_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/router"
)

func startRealRelay(t *testing.T) *relay.Relay {
	t.Helper()
	r, err := relay.Start(context.Background(), relay.Config{Listen: "127.0.0.1:0", MaxSessions: 10, MemoryBudget: -1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestRouteAnswersURLAndCertificateHash: /route names the relay and the
// certificate it serves, as read from its /stats, so a listener pins it
// without fetching anything from the relay in clear text.
func TestRouteAnswersURLAndCertificateHash(t *testing.T) {
	rl := startRealRelay(t)
	path := filepath.Join(t.TempDir(), "relays.json")
	u := fmt.Sprintf("http://%s/", rl.Addr())
	writeFile(t, path, router.Relay{URL: u, Stats: u + "stats"})
	r, srv := newRouter(t, path)
	r.PollOnce(context.Background())
	code, rt, body := routeAnswer(t, srv)
	if code != http.StatusOK || rt.URL != u || rt.CertificateSHA256 != rl.CertificateHash() {
		t.Fatalf("/route = %d %q, want url %s and certificate_sha256 %s", code, body, u, rl.CertificateHash())
	}
	// The answer is what the client dials with: the hash pins the relay.
	d, err := client.Route(context.Background(), srv.URL, "live", client.RouterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.CertificateHash != rl.CertificateHash() {
		t.Fatalf("client.Route = %+v", d)
	}
	s, err := client.DialRoute(context.Background(), d, &client.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("DialRoute: %v", err)
	}
	s.Close()
}

// TestHTTPRelayWithoutCertificateHashGetsNoListeners: a listener of an
// http:// relay needs the hash; a relay whose /stats lacks it is not
// routed to.
func TestHTTPRelayWithoutCertificateHashGetsNoListeners(t *testing.T) {
	f := newFakeRelay(t, 5) // serves no certificate_sha256
	path := filepath.Join(t.TempDir(), "relays.json")
	e := f.entry(false)
	e.URL = strings.Replace(e.URL, "https://", "http://", 1)
	writeFile(t, path, e)
	r, srv := newRouter(t, path)
	r.PollOnce(context.Background())
	if code, _, body := routeAnswer(t, srv); code != http.StatusServiceUnavailable {
		t.Fatalf("/route = %d %q, want 503", code, body)
	}
}

// TestPollPinnedBySPKI: with spki_sha256 the router polls the relay over
// TLS and accepts only a certificate with that key: the right pin makes
// the relay routable, a wrong one marks it unreachable.
func TestPollPinnedBySPKI(t *testing.T) {
	rl := startRealRelay(t)
	u := fmt.Sprintf("http://%s/", rl.Addr())
	spki := client.SPKIHash(rl.Certificate().Leaf)
	for _, tc := range []struct {
		name string
		pin  string
		ok   bool
	}{
		{"right pin", spki, true},
		{"right pin, upper case", strings.ToUpper(spki), true},
		{"wrong pin", strings.Repeat("0f", 32), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "relays.json")
			writeFile(t, path, router.Relay{URL: u, Stats: u + "stats", SPKI: tc.pin})
			r, srv := newRouter(t, path)
			r.PollOnce(context.Background())
			code, rt, body := routeAnswer(t, srv)
			if tc.ok {
				if code != http.StatusOK || rt.URL != u || rt.CertificateSHA256 != rl.CertificateHash() {
					t.Fatalf("/route = %d %q, want %s with its certificate hash", code, body, u)
				}
				return
			}
			if code != http.StatusServiceUnavailable {
				t.Fatalf("/route = %d %q, want 503: the relay's key does not match the pin", code, body)
			}
			resp, err := http.Get(srv.URL + "/relays")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b), "does not match the pinned spki") {
				t.Fatalf("/relays = %s, want the pin mismatch as the error", b)
			}
		})
	}
}

// pinnedStatsServer is a TLS server (its own key) whose /stats reports
// the certificate hash *hash returns: a relay that lies about it, or a
// man in the middle who holds the pinned key's certificate for the TLS
// handshake only. It returns the server, its leaf's hash and SPKI pin.
func pinnedStatsServer(t *testing.T, hash func(real string) string) (*httptest.Server, string, string) {
	t.Helper()
	var real string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"headroom": 4, "certificate_sha256": %q}`, hash(real))
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	leaf, err := x509.ParseCertificate(srv.TLS.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(leaf.Raw)
	real = hex.EncodeToString(sum[:])
	return srv, real, client.SPKIHash(leaf)
}

// TestPollWithPinUsesTLS: a relay entry with a pin is polled over https://
// even when its stats URL says http:// (here the relay speaks only TLS),
// and the certificate hash it reports is the one it presented.
func TestPollWithPinUsesTLS(t *testing.T) {
	srv, real, spki := pinnedStatsServer(t, func(real string) string { return real })
	u := "http://" + srv.Listener.Addr().String() + "/"
	path := filepath.Join(t.TempDir(), "relays.json")
	writeFile(t, path, router.Relay{URL: u, Stats: u + "stats", SPKI: spki})
	r, rs := newRouter(t, path)
	r.PollOnce(context.Background())
	if code, rt, body := routeAnswer(t, rs); code != http.StatusOK || rt.CertificateSHA256 != real {
		t.Fatalf("/route = %d %q, want 200 with %s", code, body, real)
	}
}

// TestPinnedRelayForgedCertificateHashRefused: a pinned relay whose
// /stats names a certificate other than the one it presented under the
// pinned key (a forged hash: whoever writes /stats does not hold the
// certificate that the hash names) is not routed, and the router says
// why, once, however many polls fail the same way.
func TestPinnedRelayForgedCertificateHashRefused(t *testing.T) {
	forged := strings.Repeat("cd", 32)
	srv, _, spki := pinnedStatsServer(t, func(string) string { return forged })
	u := "http://" + srv.Listener.Addr().String() + "/"
	path := filepath.Join(t.TempDir(), "relays.json")
	writeFile(t, path, router.Relay{URL: u, Stats: u + "stats", SPKI: spki})
	var logs syncBuffer
	r, rs := newRouterOpts(t, router.Options{File: path, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 3 {
		r.PollOnce(context.Background())
	}
	if code, rt, body := routeAnswer(t, rs); code != http.StatusServiceUnavailable {
		t.Fatalf("/route = %d %q (hash %s), want 503: the relay's /stats hash is not the certificate it presented", code, body, rt.CertificateSHA256)
	}
	resp, err := http.Get(rs.URL + "/relays")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "not the certificate it presented") {
		t.Fatalf("/relays = %s, want the forged hash as the error", b)
	}
	if n := strings.Count(logs.String(), "not the certificate it presented"); n != 1 {
		t.Fatalf("the refusal was logged %d times over 3 polls, want once:\n%s", n, logs.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestParseChecksSPKI(t *testing.T) {
	for _, pin := range []string{"abc", strings.Repeat("zz", 32), strings.Repeat("ab", 33)} {
		in := fmt.Sprintf(`{"relays": [{"url": "http://a:1/", "stats": "http://a:1/stats", "spki_sha256": %q}]}`, pin)
		if _, err := router.Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), "spki_sha256") {
			t.Errorf("Parse with spki %q: %v, want an spki_sha256 error", pin, err)
		}
	}
	in := fmt.Sprintf(`{"relays": [{"url": "http://a:1/", "stats": "http://a:1/stats", "spki_sha256": %q}]}`, strings.Repeat("ab", 32))
	if f, err := router.Parse([]byte(in)); err != nil || f.Relays[0].SPKI != strings.Repeat("ab", 32) {
		t.Fatalf("Parse = %+v, %v", f, err)
	}
}

// TestRequirePins: with RequirePins (relay router --require-pins) a relay
// without spki_sha256 is never routed, and /relays says why; the pinned
// one is.
func TestRequirePins(t *testing.T) {
	pinned, unpinned := startRealRelay(t), startRealRelay(t)
	pu := fmt.Sprintf("http://%s/", pinned.Addr())
	uu := fmt.Sprintf("http://%s/", unpinned.Addr())
	path := filepath.Join(t.TempDir(), "relays.json")
	writeFile(t, path,
		router.Relay{URL: uu, Stats: uu + "stats"},
		router.Relay{URL: pu, Stats: pu + "stats", SPKI: client.SPKIHash(pinned.Certificate().Leaf)})
	r, srv := newRouterOpts(t, router.Options{File: path, RequirePins: true})
	r.PollOnce(context.Background())
	for range 3 {
		if code, rt, body := routeAnswer(t, srv); code != http.StatusOK || rt.URL != pu {
			t.Fatalf("/route = %d %q, want only the pinned relay %s", code, body, pu)
		}
	}
	resp, err := http.Get(srv.URL + "/relays")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), "no spki_sha256 pin") {
		t.Fatalf("/relays = %s, want the missing pin as the unpinned relay's error", b)
	}
}
