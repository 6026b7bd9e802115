package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

func TestReconnectReason(t *testing.T) {
	for _, c := range []struct {
		err    error
		reason string
		ok     bool
	}{
		{client.ErrSilent, "silent", true},
		{fmt.Errorf("listen: %w", client.ErrSilent), "silent", true},
		{&quic.StatelessResetError{}, "stateless-reset", true},
		{fmt.Errorf("%w: %w", client.ErrClosed, &quic.IdleTimeoutError{}), "idle-timeout", true},
		{&quic.HandshakeTimeoutError{}, "handshake-timeout", true},
		{&quic.ApplicationError{Remote: true, ErrorCode: quic.ApplicationErrorCode(moqlite.CodeGoingAway)}, "going-away", true},
		{&quic.ApplicationError{Remote: true, ErrorCode: 7, ErrorMessage: "relay full"}, "refused-overloaded", true},
		{&quic.ApplicationError{Remote: true, ErrorCode: 0}, "closed", true},
		{&quic.ApplicationError{Remote: true, ErrorCode: 1}, "relay-error", true},
		{&quic.ApplicationError{Remote: true, ErrorCode: 2}, "unauthorized", false},
		{&quic.ApplicationError{Remote: true, ErrorCode: 5}, "protocol", false},
		{&webtransport.SessionError{Remote: true, ErrorCode: webtransport.SessionErrorCode(moqlite.CodeGoingAway)}, "going-away", true},
		{&webtransport.SessionError{Remote: true, ErrorCode: 2}, "unauthorized", false},
		{&transport.CloseError{Code: moqlite.CodeGoingAway, Status: -1}, "going-away", true},
		{fmt.Errorf("x: %w", websocket.CloseError{Code: websocket.StatusGoingAway}), "going-away", true},
		{websocket.CloseError{Code: websocket.StatusTryAgainLater}, "refused-overloaded", true},
		{&quic.TransportError{ErrorCode: quic.ProtocolViolation}, "transport-error", true},
		{client.ErrTrackEnded, "track-ended", true},
		{&quic.StreamError{ErrorCode: 4, Remote: true}, "stream-reset", true},
		{client.ErrClosed, "closed", true},
		{transport.ErrSessionClosed, "closed", true},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, "unreachable", true},
		{fmt.Errorf("route: %w", context.DeadlineExceeded), "timeout", true},
		{fmt.Errorf("dial: %w", context.Canceled), "cancelled", false},
		{client.ErrHashOverHTTP, "config", false},
		{errors.New("something else"), "error", true},
	} {
		reason, ok := client.ReconnectReason(c.err)
		if reason != c.reason || ok != c.ok {
			t.Errorf("ReconnectReason(%v) = %q, %v; want %q, %v", c.err, reason, ok, c.reason, c.ok)
		}
	}
	if r, ok := client.ReconnectReason(nil); r != "" || ok {
		t.Errorf("ReconnectReason(nil) = %q, %v", r, ok)
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// coreRelay is the relay's core (relay.Server) behind a QUIC transport
// and a WebSocket server that the test controls: it can close any
// session with any code, or drop the UDP socket without a word.
type coreRelay struct {
	srv  *relay.Server
	cert tls.Certificate
	hash string
	udp  *net.UDPConn
	tr   *quic.Transport
	ws   *httptest.Server

	mu       sync.Mutex
	sessions []transport.Session // in the order they came
}

func relayQUICConfig() *quic.Config {
	return &quic.Config{MaxIdleTimeout: 30 * time.Second, EnableDatagrams: true, EnableStreamResetPartialDelivery: true}
}

// startCore serves the relay core on a new UDP socket at addr (":0" for
// any port) with the given stateless reset key (nil: none), and on a
// WebSocket server.
func startCore(t *testing.T, addr string, resetKey *quic.StatelessResetKey) *coreRelay {
	t.Helper()
	cert, err := relay.SelfSignedCertificate()
	if err != nil {
		t.Fatal(err)
	}
	c := &coreRelay{srv: relay.NewServer(relay.ServerOptions{Logger: quiet()}), cert: cert, hash: relay.CertificateHash(cert)}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if c.udp, err = net.ListenUDP("udp", ua); err != nil {
		t.Fatal(err)
	}
	c.tr = &quic.Transport{Conn: c.udp, StatelessResetKey: resetKey}
	ln, err := c.tr.Listen(&tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{moqlite.ALPN}}, relayQUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			conn, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			go c.serve(ctx, transport.NewQUIC(conn), nil)
		}
	}()
	c.ws = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts, err := transport.AcceptWebSocket(w, r)
		if err != nil {
			return
		}
		c.serve(ctx, ts, r.URL)
	}))
	c.ws.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	c.ws.StartTLS()
	t.Cleanup(func() {
		cancel()
		c.ws.Close()
		_ = c.tr.Close()
		_ = c.udp.Close()
	})
	return c
}

func (c *coreRelay) serve(ctx context.Context, ts transport.Session, u *url.URL) {
	c.mu.Lock()
	c.sessions = append(c.sessions, ts)
	c.mu.Unlock()
	_ = c.srv.ServeSession(ctx, ts, u)
}

// session returns the i-th session (0-based) once it has come.
func (c *coreRelay) session(t *testing.T, i int) transport.Session {
	t.Helper()
	var n int
	var s transport.Session
	if !testutil.Poll(10*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if n = len(c.sessions); n > i {
			s = c.sessions[i]
		}
		return s != nil
	}) {
		t.Fatalf("session %d never came (%d did)", i, n)
	}
	return s
}

// kill drops the UDP socket: the relay's connections end without a
// CONNECTION_CLOSE, as when its process is killed.
func (c *coreRelay) kill() {
	_ = c.udp.Close()
	_ = c.tr.Close()
}

func (c *coreRelay) relayURL(tr string) string {
	if tr == client.TransportWebSocket {
		return "https://" + c.ws.Listener.Addr().String() + "/"
	}
	return "https://" + c.udp.LocalAddr().String() + "/"
}

// publisher publishes broadcast "b", track "t", one group of one frame
// every interval while not paused, until the test ends.
type publisher struct {
	paused atomic.Bool
	groups atomic.Int64
}

func startPublisher(t *testing.T, ctx context.Context, c *coreRelay, interval time.Duration) *publisher {
	t.Helper()
	s, err := client.Dial(ctx, c.relayURL(client.TransportQUIC), &client.Options{CertificateHash: c.hash, Logger: quiet()})
	if err != nil {
		t.Fatalf("publisher dial: %v", err)
	}
	p := &publisher{}
	b := s.Publish("b")
	tw := b.Track("t")
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for seq := uint64(0); ; {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			case <-s.Done():
				return
			}
			if p.paused.Load() {
				continue
			}
			gw, err := tw.OpenGroup(ctx, seq)
			if err != nil {
				continue
			}
			_ = gw.WriteFrame(client.Pattern(seq, 0, 32))
			_ = gw.Close()
			seq++
			p.groups.Add(1)
		}
	}()
	t.Cleanup(func() {
		b.Close()
		s.Close()
		<-done
	})
	return p
}

// subscribe dials url and subscribes to b/t once it is announced.
func subscribe(t *testing.T, ctx context.Context, c *coreRelay, tr string) (*client.Session, *client.Subscription) {
	t.Helper()
	s, err := client.Dial(ctx, c.relayURL(tr), &client.Options{CertificateHash: c.hash, Transport: tr, Logger: quiet()})
	if err != nil {
		t.Fatalf("listener dial: %v", err)
	}
	return s, subscribeOn(t, ctx, s)
}

// dialWithoutPMTUD dials c over raw QUIC as Dial does (client.QUICConfig),
// but without path MTU discovery, whose large probe packets, sent
// whenever a quiet connection next sends, draw a stateless reset by
// themselves: what draws one is then known.
func dialWithoutPMTUD(t *testing.T, ctx context.Context, c *coreRelay) *client.Session {
	t.Helper()
	tc := &tls.Config{ServerName: "127.0.0.1", NextProtos: []string{moqlite.ALPN}, MinVersion: tls.VersionTLS13}
	client.Pin(tc, c.hash, "")
	qc := client.QUICConfig(client.DefaultSilence)
	qc.DisablePathMTUDiscovery = true
	conn, err := quic.DialAddr(ctx, c.udp.LocalAddr().String(), tc, qc)
	if err != nil {
		t.Fatalf("listener dial: %v", err)
	}
	s, err := client.NewSession(ctx, transport.NewQUIC(conn), "/", quiet())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// subscribeOn subscribes to b/t on s once it is announced; s and the
// subscription end with the test.
func subscribeOn(t *testing.T, ctx context.Context, s *client.Session) *client.Subscription {
	t.Helper()
	t.Cleanup(func() { s.Close() })
	sub, err := s.SubscribeAnnounced(ctx, "b", "t")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	return sub
}

// readGroups reads n groups, each within d.
func readGroups(t *testing.T, ctx context.Context, sub *client.Subscription, n int, d time.Duration) {
	t.Helper()
	for i := range n {
		g, err := sub.NextGroupWithin(ctx, d)
		if err != nil {
			t.Fatalf("group %d of %d: %v", i+1, n, err)
		}
		drain(g)
	}
}

func drain(g *client.GroupReader) {
	for {
		if _, err := g.ReadFrame(); err != nil {
			g.Close()
			return
		}
	}
}

// nextError reads groups until NextGroupWithin(d) fails, and returns
// how long after start that came, and its error.
func nextError(t *testing.T, ctx context.Context, sub *client.Subscription, d time.Duration, start time.Time) (time.Duration, error) {
	t.Helper()
	for {
		g, err := sub.NextGroupWithin(ctx, d)
		if err != nil {
			return time.Since(start), err
		}
		drain(g)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestNextGroupWithinSilence(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	c := startCore(t, "127.0.0.1:0", nil)
	pub := startPublisher(t, ctx, c, 40*time.Millisecond)
	_, sub := subscribe(t, ctx, c, client.TransportQUIC)
	readGroups(t, ctx, sub, 10, 2*time.Second)

	pub.paused.Store(true)
	const d = 400 * time.Millisecond
	start := time.Now()
	took, err := nextError(t, ctx, sub, d, start)
	if !errors.Is(err, client.ErrSilent) {
		t.Fatalf("after the publisher paused: %v, want ErrSilent", err)
	}
	if r, ok := client.ReconnectReason(err); r != "silent" || !ok {
		t.Errorf("ReconnectReason = %q, %v", r, ok)
	}
	if took < d || took > 10*time.Second {
		t.Errorf("ErrSilent %v after the pause, want at least %v", took, d)
	}

	// Silence leaves the subscription as it was: audio that comes back
	// is read from it.
	pub.paused.Store(false)
	readGroups(t, ctx, sub, 3, 5*time.Second)

	// d <= 0: no limit; the context's deadline ends the wait.
	pub.paused.Store(true)
	for {
		sctx, cancel := context.WithTimeout(ctx, 3*d)
		g, err := sub.NextGroupWithin(sctx, 0)
		cancel()
		if err == nil {
			drain(g) // in flight when the publisher paused
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("NextGroupWithin(0) = %v, want the context's deadline", err)
		}
		break
	}
}

// TestRelayCloseCodeReachesListener: the code a relay closes a listener's
// session with is what ReconnectReason reads from the subscription's
// error and the session's, on raw QUIC and on WebSocket, and it comes at
// once, not after a silence.
func TestRelayCloseCodeReachesListener(t *testing.T) {
	testutil.NoLeaks(t)
	for _, tr := range []string{client.TransportQUIC, client.TransportWebSocket} {
		for _, c := range []struct {
			code   uint64
			reason string
			ok     bool
		}{
			{moqlite.CodeGoingAway, "going-away", true},
			{7, "refused-overloaded", true},
			{2, "unauthorized", false},
		} {
			t.Run(fmt.Sprintf("%s/%#x", tr, c.code), func(t *testing.T) {
				ctx := testCtx(t)
				core := startCore(t, "127.0.0.1:0", nil)
				startPublisher(t, ctx, core, 40*time.Millisecond)
				core.session(t, 0)
				sess, sub := subscribe(t, ctx, core, tr)
				readGroups(t, ctx, sub, 3, 2*time.Second)
				start := time.Now()
				_ = core.session(t, 1).CloseWithError(c.code, "bye")
				const silence = 10 * time.Second
				took, err := nextError(t, ctx, sub, silence, start)
				if took > 5*time.Second {
					t.Errorf("the subscription ended %v after the close", took)
				}
				if r, ok := client.ReconnectReason(err); r != c.reason || ok != c.ok {
					t.Errorf("subscription: ReconnectReason(%v) = %q, %v; want %q, %v", err, r, ok, c.reason, c.ok)
				}
				select {
				case <-sess.Done():
				case <-time.After(5 * time.Second):
					t.Fatal("session still open 5 s after the relay closed it")
				}
				if r, ok := client.ReconnectReason(sess.Err()); r != c.reason || ok != c.ok {
					t.Errorf("session: ReconnectReason(%v) = %q, %v; want %q, %v", sess.Err(), r, ok, c.reason, c.ok)
				}
			})
		}
	}
}

// TestStatelessResetReachesListener kills a relay without a word (its UDP
// socket closed) and starts another on the same port. With the same
// stateless reset key, the listener's probe is answered with a stateless
// reset and its subscription ends with that reason before the silence
// timeout; with another key it ends as silent. Without the probe (plain
// NextGroup, keep-alive PINGs only) no reset comes: quic-go resets only
// packets longer than 42 bytes. (Path MTU discovery is off, so that its
// probes, large packets, draw no reset of their own.)
func TestStatelessResetReachesListener(t *testing.T) {
	t.Parallel()
	const silence = 3 * time.Second
	var key, other quic.StatelessResetKey
	copy(key[:], "relayfleet test stateless reset key.")
	copy(other[:], "another key, as a relay without the secret")
	for _, c := range []struct {
		name   string
		key    *quic.StatelessResetKey
		probe  bool
		reason string
	}{
		{"same-key", &key, true, "stateless-reset"},
		{"other-key", &other, true, "silent"},
		{"same-key-keepalive-only", &key, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testCtx(t)
			a := startCore(t, "127.0.0.1:0", &key)
			startPublisher(t, ctx, a, 40*time.Millisecond)
			sess := dialWithoutPMTUD(t, ctx, a)
			sub := subscribeOn(t, ctx, sess)
			// 1.5 s of audio: a connection under way, as a listener's.
			for start := time.Now(); time.Since(start) < 1500*time.Millisecond; {
				readGroups(t, ctx, sub, 1, 2*time.Second)
			}
			addr := a.udp.LocalAddr().String()
			a.kill()
			startCore(t, addr, c.key)
			start := time.Now()
			if !c.probe {
				wctx, cancel := context.WithTimeout(ctx, silence)
				defer cancel()
				for {
					g, err := sub.NextGroup(wctx)
					if err != nil {
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Fatalf("without probes the subscription ended: %v", err)
						}
						break
					}
					drain(g)
				}
				if sess.Err() != nil {
					t.Fatalf("without probes the session ended: %v", sess.Err())
				}
				return
			}
			took, err := nextError(t, ctx, sub, silence, start)
			r, ok := client.ReconnectReason(err)
			if r != c.reason || !ok {
				t.Fatalf("after %v: ReconnectReason(%v) = %q, %v; want %q", took, err, r, ok, c.reason)
			}
			if c.reason == "stateless-reset" && took >= silence {
				t.Errorf("the reset came %v after the kill, not before the silence timeout %v", took, silence)
			}
			t.Logf("%s after %v", r, took)
		})
	}
}
