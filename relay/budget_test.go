package relay_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// TestAdmissionControl: above the memory high-water mark, or at the session
// cap, new sessions are refused, visibly in /stats and /metrics; below it
// they are admitted again.
func TestAdmissionControl(t *testing.T) {
	ctx := testContext(t)
	var used atomic.Uint64
	used.Store(10 << 20)
	r := startRelay(t, relay.Config{MemoryBudget: 100 << 20, MemoryUsage: used.Load})
	if st := r.Stats(); !st.Admitting || st.MemoryBudget != 100<<20 || st.Headroom <= 0 {
		t.Fatalf("stats %+v: want admitting with a 100 MiB budget and headroom", st)
	}
	s := dial(t, ctx, relayURL(r, ""), nil)
	s.Close()

	used.Store(90 << 20) // above 80%
	testutil.WaitFor(t, 10*time.Second, "admission to close", func() bool { return !r.Stats().Admitting })
	if st := r.Stats(); st.Headroom != 0 {
		t.Fatalf("headroom %d while refusing, want 0", st.Headroom)
	}
	if s, err := client.Dial(ctx, relayURL(r, ""), &client.Options{Logger: quietLogger()}); err == nil {
		s.Close()
		t.Fatal("raw QUIC session admitted above the high-water mark")
	}
	if s, err := client.Dial(ctx, relayURL(r, ""), &client.Options{Logger: quietLogger(), Transport: client.TransportWebSocket}); err == nil {
		s.Close()
		t.Fatal("WebSocket session admitted above the high-water mark")
	}
	if st := r.Stats(); st.Refused != 2 {
		t.Fatalf("refused %d, want 2", st.Refused)
	}
	resp, err := http.Get("http://" + r.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`relay_sessions_refused_total{reason="overloaded"} 2`, "relay_admitting 0", "relay_memory_budget_bytes 1.048576e+08"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	used.Store(78 << 20) // between the marks: still refusing
	time.Sleep(1500 * time.Millisecond)
	if r.Stats().Admitting {
		t.Fatal("admitting again above the low-water mark")
	}
	used.Store(50 << 20)
	testutil.WaitFor(t, 10*time.Second, "admission to reopen", func() bool { return r.Stats().Admitting })
	s = dial(t, ctx, relayURL(r, ""), nil)
	s.Close()
}

func TestSessionCap(t *testing.T) {
	ctx := testContext(t)
	r := startRelay(t, relay.Config{MaxSessions: 2, MemoryBudget: -1})
	a := dial(t, ctx, relayURL(r, ""), nil)
	_ = dial(t, ctx, relayURL(r, ""), nil)
	testutil.WaitFor(t, 10*time.Second, "two sessions", func() bool { return r.Stats().Sessions == 2 })
	if st := r.Stats(); st.Headroom != 0 || st.Admitting {
		t.Fatalf("stats %+v: want no headroom at the cap", st)
	}
	if s, err := client.Dial(ctx, relayURL(r, ""), &client.Options{Logger: quietLogger()}); err == nil {
		s.Close()
		t.Fatal("third session admitted with a cap of 2")
	}
	a.Close()
	testutil.WaitFor(t, 10*time.Second, "one session", func() bool { return r.Stats().Sessions == 1 })
	if st := r.Stats(); st.Headroom != 1 {
		t.Fatalf("headroom %d, want 1", st.Headroom)
	}
}

// blackhole is a packet conn that drops everything, both ways, once frozen.
type blackhole struct {
	*net.UDPConn
	frozen atomic.Bool
}

func (b *blackhole) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, a, err := b.UDPConn.ReadFrom(p)
		if err != nil || !b.frozen.Load() {
			return n, a, err
		}
	}
}

func (b *blackhole) WriteTo(p []byte, a net.Addr) (int, error) {
	if b.frozen.Load() {
		return len(p), nil
	}
	return b.UDPConn.WriteTo(p, a)
}

// bufferedConn hides the UDP conn's batch interfaces (so reads go through
// blackhole.ReadFrom) but keeps the buffer setters quic-go asks for.
type bufferedConn struct{ *blackhole }

func (c bufferedConn) SyscallConn() {} // shadows the embedded method: not a syscall.Conn

// dialBlackholable connects a raw-QUIC listener whose network can be cut.
func dialBlackholable(t *testing.T, ctx context.Context, r *relay.Relay) (*client.Session, *blackhole) {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	bh := &blackhole{UDPConn: udp}
	tr := &quic.Transport{Conn: bufferedConn{bh}}
	t.Cleanup(func() { tr.Close(); udp.Close() })
	hash := r.CertificateHash()
	tc := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"moql"}, VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
		if relay.CertificateHash(tls.Certificate{Certificate: raw}) != hash {
			t.Error("certificate hash mismatch")
		}
		return nil
	}}
	conn, err := tr.Dial(ctx, r.Addr(), tc, &quic.Config{MaxIdleTimeout: time.Minute, KeepAlivePeriod: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s, err := client.NewSession(ctx, transport.NewQUIC(conn), "/", quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, bh
}

// TestReaperEndsSilentSessions: a listener whose network goes silent is
// reaped long before QUIC's idle timeout; a live one is kept.
func TestReaperEndsSilentSessions(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	r := startRelay(t, relay.Config{ReapAfter: 2 * time.Second, MemoryBudget: -1})
	pubCtx, stopPub := context.WithCancel(ctx)
	pubDone := publishLoop(pubCtx, t, relayURL(r, ""), "live", 0)
	defer func() { stopPub(); <-pubDone }()
	testutil.WaitFor(t, 10*time.Second, "broadcast", func() bool { return r.Stats().Broadcasts == 1 })

	live, _ := dialBlackholable(t, ctx, r)
	frozen, bh := dialBlackholable(t, ctx, r)
	for _, s := range []*client.Session{live, frozen} {
		sub, err := s.Subscribe(ctx, "live", "audio")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				g, err := sub.NextGroup(ctx)
				if err != nil {
					return
				}
				_, _ = readGroup(g, 64)
			}
		}()
	}
	testutil.WaitFor(t, 10*time.Second, "three sessions", func() bool { return r.Stats().Sessions == 3 })
	bh.frozen.Store(true)
	testutil.WaitFor(t, 10*time.Second, "the silent session to be reaped", func() bool { return r.Stats().Reaped == 1 })
	testutil.WaitFor(t, 10*time.Second, "its state to go", func() bool { st := r.Stats(); return st.Sessions == 2 && st.Subscribers == 1 })
	select {
	case <-live.Done():
		t.Fatal("the live session was ended")
	default:
	}
}
