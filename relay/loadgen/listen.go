package loadgen

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// listen runs one listener until ctx ends; connected is closed once it is
// subscribed (or has failed).
func listen(ctx context.Context, o Options, res *resolver, sh *shard, l *listener, connected chan struct{}) {
	fail := func(err error) {
		l.err = shortError(err)
		close(connected)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// A busy server refuses connections it cannot accept in time, as a
	// real client would be refused: try three times, backing off.
	var (
		conn *quic.Conn
		sess *client.Session
		err  error
	)
	for attempt := range 3 {
		if attempt > 0 {
			select {
			case <-time.After(time.Duration(100<<attempt) * time.Millisecond):
			case <-dctx.Done():
			}
		}
		if conn, sess, err = connect(dctx, o, res, sh); err == nil || dctx.Err() != nil {
			break
		}
	}
	if err != nil {
		fail(err)
		return
	}
	defer sess.Close()
	// Ending the connection unblocks a read stuck in a frozen group.
	stop := context.AfterFunc(ctx, func() { _ = conn.CloseWithError(0, "") })
	defer stop()
	sub, err := sess.Subscribe(dctx, o.Broadcast, o.Track)
	if err != nil {
		fail(err)
		return
	}
	defer sub.Close()
	l.connected = true
	close(connected)
	for {
		g, err := sub.NextGroup(ctx)
		if err != nil {
			if ctx.Err() == nil {
				l.ended, l.err = true, shortError(err)
			}
			return
		}
		if l.frozen.Load() {
			<-ctx.Done()
			return
		}
		l.group(g.Sequence, time.Now())
		var read uint32
		var count uint32
		for {
			p, err := g.ReadFrame()
			if err != nil {
				if errors.Is(err, io.EOF) || ctx.Err() != nil {
					break
				}
				break // reset: the missing frames count as lost below
			}
			if fi, ok := l.frame(p, time.Now(), o.Late); ok {
				count = fi.Count
			}
			read++
			if l.frozen.Load() {
				<-ctx.Done()
				return
			}
		}
		g.Close()
		if ctx.Err() != nil {
			return
		}
		if count > read {
			l.lost += int64(count - read)
			l.cut++
		}
	}
}

// connect dials the relay and performs SETUP.
func connect(ctx context.Context, o Options, res *resolver, sh *shard) (*quic.Conn, *client.Session, error) {
	target, tlsConf, err := res.resolve(ctx)
	if err != nil {
		return nil, nil, err
	}
	conn, err := sh.tr.Dial(ctx, target.addr, tlsConf, &quic.Config{
		MaxIdleTimeout:  30 * time.Second,
		KeepAlivePeriod: 10 * time.Second,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("dial: %w", err)
	}
	sess, err := client.NewSession(ctx, transport.NewQUIC(conn), target.path, o.Logger)
	if err != nil {
		_ = conn.CloseWithError(0, "")
		return nil, nil, err
	}
	return conn, sess, nil
}

func shortError(err error) string {
	s := err.Error()
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// shard is one UDP socket shared by listeners; frozen drops its packets.
type shard struct {
	udp    *net.UDPConn
	tr     *quic.Transport
	frozen atomic.Bool
}

func newShard(freezable bool) (*shard, error) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("loadgen: listen udp: %w", err)
	}
	_ = udp.SetReadBuffer(8 << 20)
	_ = udp.SetWriteBuffer(8 << 20)
	sh := &shard{udp: udp}
	var pc net.PacketConn = udp
	if freezable {
		pc = &freezeConn{udp: udp, frozen: &sh.frozen}
	}
	sh.tr = &quic.Transport{Conn: pc}
	return sh, nil
}

func (s *shard) close() {
	_ = s.tr.Close()
	_ = s.udp.Close()
}

// freezeConn is a packet conn that, once frozen, drops what it reads and
// what it is asked to write: a blackhole.
type freezeConn struct {
	udp    *net.UDPConn
	frozen *atomic.Bool
}

func (c *freezeConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, a, err := c.udp.ReadFrom(p)
		if err != nil || !c.frozen.Load() {
			return n, a, err
		}
	}
}

func (c *freezeConn) WriteTo(p []byte, a net.Addr) (int, error) {
	if c.frozen.Load() {
		return len(p), nil
	}
	return c.udp.WriteTo(p, a)
}

func (c *freezeConn) Close() error                       { return c.udp.Close() }
func (c *freezeConn) LocalAddr() net.Addr                { return c.udp.LocalAddr() }
func (c *freezeConn) SetDeadline(t time.Time) error      { return c.udp.SetDeadline(t) }
func (c *freezeConn) SetReadDeadline(t time.Time) error  { return c.udp.SetReadDeadline(t) }
func (c *freezeConn) SetWriteDeadline(t time.Time) error { return c.udp.SetWriteDeadline(t) }

// target is where a listener connects: a resolved UDP address and the
// SETUP path parameter.
type target struct {
	addr *net.UDPAddr
	path string
}

// resolver turns the relay URL, or the router's answer, into a target and
// a TLS config, fetching each relay's certificate hash once.
type resolver struct {
	o  Options
	hc *http.Client

	mu     sync.Mutex
	hashes map[string]string // host -> hash
}

func newResolver(o Options) *resolver {
	return &resolver{o: o, hc: &http.Client{Timeout: 10 * time.Second}, hashes: make(map[string]string)}
}

func (r *resolver) resolve(ctx context.Context) (target, *tls.Config, error) {
	raw := r.o.URL
	if r.o.Router != "" {
		var err error
		if raw, err = r.route(ctx); err != nil {
			return target{}, nil, err
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return target{}, nil, fmt.Errorf("relay url: %w", err)
	}
	if u.Port() == "" {
		return target{}, nil, fmt.Errorf("relay url %s: needs a port", raw)
	}
	addr, err := net.ResolveUDPAddr("udp", u.Host)
	if err != nil {
		return target{}, nil, fmt.Errorf("relay url: %w", err)
	}
	tc := &tls.Config{ServerName: u.Hostname(), RootCAs: r.o.RootCAs, NextProtos: []string{moqlite.ALPN}, MinVersion: tls.VersionTLS13}
	switch u.Scheme {
	case "https":
	case "http":
		hash, err := r.hash(ctx, u)
		if err != nil {
			return target{}, nil, err
		}
		tc.InsecureSkipVerify = true // replaced by the pin below
		tc.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("no certificate")
			}
			sum := sha256.Sum256(raw[0])
			if !strings.EqualFold(hex.EncodeToString(sum[:]), hash) {
				return errors.New("certificate hash does not match the pinned one")
			}
			return nil
		}
	default:
		return target{}, nil, fmt.Errorf("relay url %s: scheme must be http or https", raw)
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	return target{addr: addr, path: path}, tc, nil
}

func (r *resolver) hash(ctx context.Context, u *url.URL) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock() // one fetch per host, not one per listener
	if h, ok := r.hashes[u.Host]; ok {
		return h, nil
	}
	b, err := r.get(ctx, (&url.URL{Scheme: "http", Host: u.Host, Path: "/certificate.sha256"}).String())
	if err != nil {
		return "", fmt.Errorf("certificate hash: %w", err)
	}
	h := strings.TrimSpace(string(b))
	if d, err := hex.DecodeString(h); err != nil || len(d) != sha256.Size {
		return "", fmt.Errorf("certificate hash: not a hex sha-256: %.70q", h)
	}
	r.hashes[u.Host] = h
	return h, nil
}

// route asks the router for a relay URL.
func (r *resolver) route(ctx context.Context) (string, error) {
	ru, err := url.Parse(strings.TrimSuffix(r.o.Router, "/") + "/route")
	if err != nil {
		return "", fmt.Errorf("router url: %w", err)
	}
	ru.RawQuery = url.Values{"broadcast": {r.o.Broadcast}}.Encode()
	b, err := r.get(ctx, ru.String())
	if err != nil {
		return "", fmt.Errorf("route: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (r *resolver) get(ctx context.Context, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", u, resp.Status)
	}
	return b, nil
}

func (c *freezeConn) SetReadBuffer(n int) error  { return c.udp.SetReadBuffer(n) }
func (c *freezeConn) SetWriteBuffer(n int) error { return c.udp.SetWriteBuffer(n) }
