package relay_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/relayfleet/relayfleet/relay"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// tcpPeerCertificate does a real TLS handshake with the relay's TCP port
// and returns the leaf it served.
func tcpPeerCertificate(t *testing.T, r *relay.Relay, serverName string) *x509.Certificate {
	t.Helper()
	d := &net.Dialer{Timeout: 10 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", r.Addr().String(), &tls.Config{
		InsecureSkipVerify: true, ServerName: serverName, NextProtos: []string{"http/1.1"},
	})
	if err != nil {
		t.Fatalf("tls handshake over tcp: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0]
}

// quicPeerCertificate does a real QUIC handshake (moq-lite ALPN) and
// returns the leaf the relay served.
func quicPeerCertificate(t *testing.T, r *relay.Relay, serverName string) *x509.Certificate {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, r.Addr().String(), &tls.Config{
		InsecureSkipVerify: true, ServerName: serverName, NextProtos: []string{"moql"},
	}, nil)
	if err != nil {
		t.Fatalf("quic handshake: %v", err)
	}
	defer conn.CloseWithError(0, "")
	return conn.ConnectionState().TLS.PeerCertificates[0]
}

// checkValidAt verifies a served self-signed leaf as its own root at time
// now, as a client whose clock reads now would.
func checkValidAt(t *testing.T, leaf *x509.Certificate, now time.Time) {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now}); err != nil {
		t.Fatalf("at %s the relay served a certificate a client refuses: %v (valid %s to %s)",
			now.Format(time.RFC3339), err, leaf.NotBefore.Format(time.RFC3339), leaf.NotAfter.Format(time.RFC3339))
	}
	if v := leaf.NotAfter.Sub(leaf.NotBefore); v > 14*24*time.Hour {
		t.Fatalf("certificate valid for %v; browsers take at most 14 days", v)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v", url, resp.Status, err)
	}
	return string(b)
}

// metricValue finds a metric's value in a Prometheus text exposition.
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestSelfSignedCertificateRotates moves the relay's clock 30 days
// forward, six hours at a time: the relay keeps serving certificates valid
// at that time, on QUIC and TCP, replacing each well before it expires;
// /certificate.sha256, /stats and /metrics follow; a session opened at the
// start stays up. With a kept key (TLSKey) the SPKI pin never changes.
func TestSelfSignedCertificateRotates(t *testing.T) {
	key, err := relay.NewTLSKey()
	if err != nil {
		t.Fatal(err)
	}
	keySPKI, err := relay.SPKIHash(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, kept := range []bool{true, false} {
		t.Run(fmt.Sprintf("tls-key=%v", kept), func(t *testing.T) {
			ctx := testContext(t)
			clock := &fakeClock{now: time.Now()}
			cfg := relay.Config{Now: clock.Now}
			if kept {
				cfg.TLSKey = key
			}
			r := startRelay(t, cfg)
			base := fmt.Sprintf("http://%s", r.Addr())
			spki := r.SPKIHash()
			if kept && spki != keySPKI {
				t.Fatalf("SPKIHash = %s, want the key's %s", spki, keySPKI)
			}
			if len(spki) != 64 {
				t.Fatalf("SPKIHash = %q", spki)
			}
			// A session opened now: it pinned the first certificate.
			old := dial(t, ctx, relayURL(r, "live"), nil)
			tw := old.Publish("early").Track("audio")

			hashes := map[string]bool{}
			const step, total = 6 * time.Hour, 30 * 24 * time.Hour
			for elapsed := time.Duration(0); elapsed <= total; elapsed += step {
				now := clock.Now()
				hash := httpGet(t, base+"/certificate.sha256")
				hashes[hash] = true
				leaf := tcpPeerCertificate(t, r, "localhost")
				checkValidAt(t, leaf, now)
				if got := relay.CertificateHash(tls.Certificate{Certificate: [][]byte{leaf.Raw}}); got != hash {
					t.Fatalf("day %.2f: TCP served %s, /certificate.sha256 says %s", elapsed.Hours()/24, got, hash)
				}
				if left := leaf.NotAfter.Sub(now); left < relay.SelfSignedRenewBefore-step {
					t.Fatalf("day %.2f: certificate has only %v left; it should have been replaced", elapsed.Hours()/24, left)
				}
				if got, _ := relay.SPKIHash(leaf.PublicKey); got != spki {
					t.Fatalf("day %.2f: SPKI %s, want %s all along", elapsed.Hours()/24, got, spki)
				}
				if elapsed%(24*time.Hour) == 0 {
					ql := quicPeerCertificate(t, r, "localhost")
					checkValidAt(t, ql, now)
					if !ql.Equal(leaf) {
						t.Fatalf("day %.2f: QUIC and TCP serve different certificates", elapsed.Hours()/24)
					}
					var st relay.Stats
					if err := json.Unmarshal([]byte(httpGet(t, base+"/stats")), &st); err != nil {
						t.Fatal(err)
					}
					if st.CertificateSHA256 != hash || st.SPKISHA256 != spki || !st.CertificateNotAfter.Equal(leaf.NotAfter) {
						t.Fatalf("day %.2f: /stats says %s %s %s; served %s %s %s", elapsed.Hours()/24,
							st.CertificateSHA256, st.SPKISHA256, st.CertificateNotAfter, hash, spki, leaf.NotAfter)
					}
					m := httpGet(t, base+"/metrics")
					if v := metricValue(t, m, "relay_certificate_expiry_timestamp_seconds"); int64(v) != leaf.NotAfter.Unix() {
						t.Fatalf("day %.2f: expiry gauge %v, want %d", elapsed.Hours()/24, v, leaf.NotAfter.Unix())
					}
				}
				clock.Add(step)
			}
			// A rotation every 6 days: 30 days see 5 or so; not one per step.
			if n := len(hashes); n < 5 || n > 8 {
				t.Fatalf("%d distinct certificates over 30 days, want about 6", n)
			}
			if r.SPKIHash() != spki {
				t.Fatal("SPKI changed")
			}
			// The early session still works, and a new one pins the new hash.
			select {
			case <-old.Done():
				t.Fatal("the session opened before the rotations ended")
			default:
			}
			fresh := dial(t, ctx, relayURL(r, "live"), nil)
			sub := subscribeWhenAnnounced(t, ctx, fresh, "early", "audio")
			defer sub.Close()
			if err := tw.WaitSubscribers(ctx, 1); err != nil {
				t.Fatalf("publisher from before the rotations: %v", err)
			}
		})
	}
}
