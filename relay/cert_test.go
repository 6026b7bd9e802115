package relay_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pebbleca "github.com/letsencrypt/pebble/v2/ca"
	pebbledb "github.com/letsencrypt/pebble/v2/db"
	pebbleva "github.com/letsencrypt/pebble/v2/va"
	pebblewfe "github.com/letsencrypt/pebble/v2/wfe"
	"github.com/miekg/dns"
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
				hash := string(testutil.Get(t, base+"/certificate.sha256"))
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
					testutil.GetJSON(t, base+"/stats", &st)
					if st.CertificateSHA256 != hash || st.SPKISHA256 != spki || !st.CertificateNotAfter.Equal(leaf.NotAfter) {
						t.Fatalf("day %.2f: /stats says %s %s %s; served %s %s %s", elapsed.Hours()/24,
							st.CertificateSHA256, st.SPKISHA256, st.CertificateNotAfter, hash, spki, leaf.NotAfter)
					}
					m := string(testutil.Get(t, base+"/metrics"))
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

// logRecorder keeps the messages a relay logs.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.msgs = append(l.msgs, r.Message)
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

// certPEM makes a self-signed certificate and key, PEM-encoded, valid
// from notBefore for 10 days.
func certPEM(t *testing.T, notBefore time.Time) (certOut, keyOut []byte, hash string) {
	t.Helper()
	key, err := relay.NewTLSKey()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(notBefore.UnixNano()), Subject: pkix.Name{CommonName: "file"},
		NotBefore: notBefore, NotAfter: notBefore.Add(relay.SelfSignedValidity),
		DNSNames: []string{"localhost"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		relay.CertificateHash(tls.Certificate{Certificate: [][]byte{der}})
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// servedHashes is what a QUIC and a TCP handshake get now.
func servedHashes(t *testing.T, r *relay.Relay) (quicHash, tcpHash string) {
	t.Helper()
	h := func(c *x509.Certificate) string {
		return relay.CertificateHash(tls.Certificate{Certificate: [][]byte{c.Raw}})
	}
	return h(quicPeerCertificate(t, r, "localhost")), h(tcpPeerCertificate(t, r, "localhost"))
}

// TestCertificateFilesReload: rewritten certificate files are picked up
// by the next handshakes (QUIC and TCP) without a restart; broken,
// mismatched or expired ones leave the old certificate in service, with an
// error logged; ReloadCertificate (SIGHUP) re-reads at once.
func TestCertificateFilesReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	c1, k1, h1 := certPEM(t, time.Now().Add(-time.Hour))
	writeFile(t, certFile, c1)
	writeFile(t, keyFile, k1)
	logs := &logRecorder{}
	r, err := relay.Start(context.Background(), relay.Config{
		Listen: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile, CertReloadInterval: 20 * time.Millisecond,
		Logger: slog.New(logs),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if q, tc := servedHashes(t, r); q != h1 || tc != h1 || r.CertificateHash() != h1 {
		t.Fatalf("serving quic %s tcp %s (CertificateHash %s), want %s", q, tc, r.CertificateHash(), h1)
	}

	c2, k2, h2 := certPEM(t, time.Now().Add(-time.Minute))
	writeFile(t, certFile, c2)
	writeFile(t, keyFile, k2)
	testutil.WaitFor(t, 10*time.Second, "the new certificate", func() bool { return r.CertificateHash() == h2 })
	if q, tc := servedHashes(t, r); q != h2 || tc != h2 {
		t.Fatalf("after rewrite: serving quic %s tcp %s, want %s", q, tc, h2)
	}
	if st := r.Stats(); st.CertificateSHA256 != h2 {
		t.Fatalf("/stats certificate_sha256 %s, want %s", st.CertificateSHA256, h2)
	}

	c3, k3, h3 := certPEM(t, time.Now().Add(-2*time.Minute))
	expired, expiredKey, _ := certPEM(t, time.Now().Add(-30*24*time.Hour))
	for _, bad := range []struct {
		name      string
		cert, key []byte
	}{
		{"garbage certificate", []byte("not a certificate"), k2},
		{"key of another certificate", c3, k2},
		{"empty key", c2, nil},
		{"expired certificate", expired, expiredKey},
	} {
		before := logs.count("reload certificate; serving the old one")
		writeFile(t, certFile, bad.cert)
		writeFile(t, keyFile, bad.key)
		testutil.WaitFor(t, 10*time.Second, "the reload error of "+bad.name, func() bool {
			return logs.count("reload certificate; serving the old one") > before
		})
		if err := r.ReloadCertificate(); err == nil {
			t.Fatalf("%s: ReloadCertificate took it", bad.name)
		}
		if q, tc := servedHashes(t, r); q != h2 || tc != h2 || r.CertificateHash() != h2 {
			t.Fatalf("%s: serving quic %s tcp %s, want the old %s", bad.name, q, tc, h2)
		}
	}

	// Good files again; an explicit reload (SIGHUP) takes them at once.
	writeFile(t, certFile, c3)
	writeFile(t, keyFile, k3)
	if err := r.ReloadCertificate(); err != nil {
		t.Fatal(err)
	}
	if q, tc := servedHashes(t, r); q != h3 || tc != h3 {
		t.Fatalf("after fix: serving quic %s tcp %s, want %s", q, tc, h3)
	}
}

// startPebble runs Pebble, the ACME test CA, in the test on loopback. With
// challengePort 0 it skips challenge validation (no DNS); otherwise it
// validates for real, resolving every name to 127.0.0.1 (a DNS server run
// here) and connecting to challengePort for HTTP-01 and TLS-ALPN-01. It
// returns the directory URL, the roots for its HTTPS endpoint, the root it
// issues under and a function that stops it.
func startPebble(t *testing.T, challengePort int) (dirURL string, apiRoots, issuedRoots *x509.CertPool, stop func()) {
	t.Helper()
	resolver := ""
	if challengePort == 0 {
		t.Setenv("PEBBLE_VA_ALWAYS_VALID", "1")
	} else {
		t.Setenv("PEBBLE_VA_ALWAYS_VALID", "0")
		resolver = startLoopbackDNS(t)
	}
	t.Setenv("PEBBLE_VA_NOSLEEP", "1")
	t.Setenv("PEBBLE_WFE_NONCEREJECT", "0")
	logger := log.New(io.Discard, "", 0)
	if testing.Verbose() {
		logger = log.New(os.Stderr, "pebble ", log.LstdFlags)
	}
	store := pebbledb.NewMemoryStore()
	authority := pebbleca.New(logger, store, "", "ecdsa", 0, 1, map[string]pebbleca.Profile{"default": {Description: "default"}})
	validator := pebbleva.New(logger, challengePort, challengePort, false, resolver, store)
	front := pebblewfe.New(logger, store, validator, authority, []string{"pebble.letsencrypt.org"}, false, false, 0, 0)
	srv := httptest.NewTLSServer(front.Handler())
	t.Cleanup(srv.Close)
	apiRoots = x509.NewCertPool()
	apiRoots.AddCert(srv.Certificate())
	issuedRoots = x509.NewCertPool()
	issuedRoots.AddCert(authority.GetRootCert(0).Cert)
	return srv.URL + pebblewfe.DirectoryPath, apiRoots, issuedRoots, srv.Close
}

// TestACMECertificateFromPebble: in ACME mode the relay gets its
// certificate from an ACME CA (Pebble, run here) and serves it on QUIC and
// TCP; a client verifies the chain against Pebble's root. A second relay
// on the same --acme-dir reuses the stored certificate.
func TestACMECertificateFromPebble(t *testing.T) {
	dirURL, apiRoots, issuedRoots, stopPebble := startPebble(t, 0)
	const domain = "relay.example.test"
	store := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	acme := &relay.ACMEConfig{Domain: domain, Email: "ops@example.test", CA: dirURL, CARoots: apiRoots, Dir: store}
	r, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", ACME: acme, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	verify := &tls.Config{RootCAs: issuedRoots, ServerName: domain}

	tc := verify.Clone()
	tc.NextProtos = []string{"http/1.1"}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", r.Addr().String(), tc)
	if err != nil {
		t.Fatalf("tcp tls with pebble's root: %v", err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close()
	if len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != domain {
		t.Fatalf("certificate for %v, want %s", leaf.DNSNames, domain)
	}
	hash := relay.CertificateHash(tls.Certificate{Certificate: [][]byte{leaf.Raw}})
	if r.CertificateHash() != hash || r.Stats().CertificateSHA256 != hash || !r.Stats().CertificateNotAfter.Equal(leaf.NotAfter) {
		t.Fatalf("relay reports %s / %+v; served %s", r.CertificateHash(), r.Stats(), hash)
	}

	qc := verify.Clone()
	qc.NextProtos = []string{"moql"}
	qconn, err := quic.DialAddr(ctx, r.Addr().String(), qc, nil)
	if err != nil {
		t.Fatalf("quic with pebble's root: %v", err)
	}
	qconn.CloseWithError(0, "")

	// Without Pebble's root the chain does not verify.
	if c, err := tls.Dial("tcp", r.Addr().String(), &tls.Config{ServerName: domain}); err == nil {
		c.Close()
		t.Fatal("a client without pebble's root accepted the certificate")
	}

	// A restart finds the certificate in the store: no CA needed.
	r.Close()
	stopPebble()
	r2, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", ACME: acme, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("restart on the same store: %v", err)
	}
	defer r2.Close()
	if r2.CertificateHash() != hash {
		t.Fatalf("restarted relay serves %s, want the stored %s", r2.CertificateHash(), hash)
	}
}

// startLoopbackDNS serves DNS over TCP on loopback, answering every A
// question with 127.0.0.1 and nothing else.
func startLoopbackDNS(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{Listener: ln, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		for _, q := range req.Question {
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
					A:   net.IPv4(127, 0, 0, 1),
				})
			}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return ln.Addr().String()
}

// freeLoopbackPort is a port number free on UDP and TCP loopback now.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	for range 20 {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		p := u.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		u.Close()
		if err == nil {
			l.Close()
			return p
		}
	}
	t.Fatal("no free port")
	return 0
}

// TestACMEChallengeAnsweredByTheRelay: Pebble validates for real, and its
// challenge connections (HTTP-01 or TLS-ALPN-01, the one certmagic picks)
// go to the relay's own port, which answers them before it has any
// certificate: the path renewals take while the relay serves.
func TestACMEChallengeAnsweredByTheRelay(t *testing.T) {
	port := freeLoopbackPort(t)
	dirURL, apiRoots, issuedRoots, _ := startPebble(t, port)
	const domain = "challenged.example.test"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := relay.Start(ctx, relay.Config{
		Listen: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Logger: quietLogger(),
		ACME: &relay.ACMEConfig{
			Domain: domain, CA: dirURL, CARoots: apiRoots, Dir: t.TempDir(),
			// Where the CA connects; taken by the relay, so certmagic
			// opens no listener of its own.
			HTTPPort: port, TLSALPNPort: port,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", r.Addr().String(),
		&tls.Config{RootCAs: issuedRoots, ServerName: domain})
	if err != nil {
		t.Fatalf("tls with pebble's root: %v", err)
	}
	defer conn.Close()
	if h := relay.CertificateHash(tls.Certificate{Certificate: [][]byte{conn.ConnectionState().PeerCertificates[0].Raw}}); h != r.CertificateHash() {
		t.Fatalf("served %s, relay reports %s", h, r.CertificateHash())
	}
}
