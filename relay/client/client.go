// Package client is a Go moq-lite-02 client for the relay: it connects the
// way @moq/lite does (https:// with normal certificate verification, or
// http:// meaning "fetch /certificate.sha256 and pin that hash"), publishes
// broadcasts and subscribes to tracks.
//
// Fetching the hash over plain HTTP trusts the network, so Dial does it
// only for loopback hosts or with Options.TrustHTTPHash. Otherwise the
// certificate is pinned by what a trusted party says: a router's answer
// (Route, DialRoute: the relay URL and its certificate hash, over TLS), or
// the SHA-256 of the relay's public key as the URL fragment #spki=HEX
// (trust.go).
//
// relay listen (cmd/relay) is ListenFlags.Run; the checks of the relay's
// command-line URLs, routers and token files, with errors naming the flag,
// are in flags.go.
package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"

	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"

	"github.com/relayfleet/relayfleet/relay/internal/bpath"
)

// Transport names accepted in Options.Transport.
const (
	TransportQUIC      = "quic"
	TransportWebSocket = "websocket"
	// TransportWebTransport is WebTransport over HTTP/3 on the relay's UDP port.
	TransportWebTransport = "webtransport"
)

// Options configures Dial. The zero value dials raw QUIC with system roots.
type Options struct {
	// Logger receives the client's logs; nil means slog.Default().
	Logger *slog.Logger
	// RootCAs verifies https:// servers; nil means the system roots.
	RootCAs *x509.CertPool
	// HTTPClient fetches /certificate.sha256 for http:// URLs; nil means
	// a client with a 10 second timeout.
	HTTPClient *http.Client
	// Transport is TransportQUIC (default), TransportWebSocket or
	// TransportWebTransport.
	Transport string
	// CertificateHash, when set, is the hex SHA-256 the relay's leaf
	// certificate must have (a router's certificate_sha256): it is
	// checked in place of CA verification, and nothing is fetched.
	CertificateHash string
	// TrustHTTPHash lets an http:// URL to a host that is not loopback
	// fetch its certificate hash over plain HTTP, trusting the network
	// between here and the relay. Without it, and without a pin, such a
	// URL is refused with ErrHashOverHTTP.
	TrustHTTPHash bool
	// KeepAlive is the QUIC keep-alive period (raw QUIC and WebTransport):
	// how long after the last packet received the client sends a PING.
	// 0 means KeepAlivePeriod(DefaultSilence).
	KeepAlive time.Duration
	// TuneQUIC, if set, is called with the QUIC configuration Dial is
	// about to use (QUICConfig's, KeepAlive applied; raw QUIC and
	// WebTransport) and may change it: to measure a listener whose QUIC
	// behaves like another's, for one.
	TuneQUIC func(*quic.Config)
}

// Error codes sent on streams.
const (
	codeCancelled = 6
	codeNotFound  = 4
)

// ErrClosed is returned after the session ended.
var ErrClosed = errors.New("client: session closed")

// Session is a moq-lite session with a relay.
type Session struct {
	t   transport.Session
	log *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	uniDone chan struct{} // closed when acceptUni returns
	goAway  chan struct{} // closed when the relay's going-away notice came (notice.go)

	mu         sync.Mutex
	closeErr   error // the transport's error that ended the session
	nextSub    uint64
	subs       map[uint64]*Subscription
	broadcasts map[string]*Broadcast
	watchers   map[*announceWatcher]struct{}
}

// Dial connects to a relay URL (https://HOST:PORT/PATH or http://...) and
// performs SETUP. The URL path is the session's root on the relay; a ?jwt=
// query carries a token.
func Dial(ctx context.Context, rawURL string, opts *Options) (*Session, error) {
	if opts == nil {
		opts = &Options{}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	if u.Port() == "" {
		return nil, fmt.Errorf("dial %s: url needs a port", rawURL)
	}
	tlsConf, err := dialTLS(ctx, u, opts)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", redact(u), err)
	}
	return dialWith(ctx, u, tlsConf, opts)
}

// DialTarget connects to a resolved relay (Resolver.Resolve) and performs
// SETUP, trusting the relay as the target's TLS configuration says.
func DialTarget(ctx context.Context, tg Target, opts *Options) (*Session, error) {
	if opts == nil {
		opts = &Options{}
	}
	if tg.TLS == nil {
		return nil, errors.New("dial: target without a TLS configuration (use Resolver.Resolve)")
	}
	u, err := url.Parse(tg.URL)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	tc := tg.TLS.Clone()
	tc.NextProtos = nil
	return dialWith(ctx, u, tc, opts)
}

// dialWith dials u (its port checked) with tlsConf over opts.Transport.
func dialWith(ctx context.Context, u *url.URL, tlsConf *tls.Config, opts *Options) (*Session, error) {
	u.Fragment = ""
	var (
		t   transport.Session
		err error
	)
	pathParam := ""
	switch opts.Transport {
	case "", TransportQUIC:
		tlsConf.NextProtos = []string{moqlite.ALPN}
		conn, err := quic.DialAddr(ctx, u.Host, tlsConf, opts.quicConfig())
		if err != nil {
			return nil, fmt.Errorf("dial quic %s: %w", u.Host, err)
		}
		t = transport.NewQUIC(conn)
		pathParam = u.EscapedPath()
		if pathParam == "" {
			pathParam = "/"
		}
		if u.RawQuery != "" {
			pathParam += "?" + u.RawQuery
		}
	case TransportWebSocket:
		// Always over TLS (the relay's TCP port answers a TLS handshake):
		// for http:// URLs too, checked against the pinned hash, so the
		// session is as private as over QUIC.
		wu := *u
		wu.Scheme = "wss"
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}}
		t, err = transport.DialWebSocket(ctx, wu.String(), hc)
		if err != nil {
			return nil, err
		}
	case TransportWebTransport:
		wu := *u
		wu.Scheme = "https"
		wt := &webtransport.Transport{TLSClientConfig: tlsConf, ApplicationProtocols: []string{moqlite.ALPN},
			QUICConfig: opts.webTransportQUICConfig()}
		_, sess, err := wt.Dial(ctx, wu.String(), nil)
		if err != nil {
			return nil, fmt.Errorf("dial webtransport %s: %w", u.Host, err)
		}
		t = transport.NewWebTransport(sess)
	default:
		return nil, fmt.Errorf("dial: unknown transport %q", opts.Transport)
	}
	s, err := NewSession(ctx, t, pathParam, opts.Logger)
	if err != nil {
		_ = t.CloseWithError(0, "")
		return nil, err
	}
	return s, nil
}

// dialTLS is the TLS configuration for dialling u: pinned (URL #spki,
// Options.CertificateHash, or for http:// the hash fetched from the relay
// where that is allowed) or CA-verified (https://).
func dialTLS(ctx context.Context, u *url.URL, opts *Options) (*tls.Config, error) {
	tc := &tls.Config{ServerName: u.Hostname(), RootCAs: opts.RootCAs, MinVersion: tls.VersionTLS13}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, errors.New("scheme must be https or http")
	}
	spki, err := URLPin(u)
	if err != nil {
		return nil, err
	}
	hash := strings.ToLower(opts.CertificateHash)
	if hash != "" {
		if err := CheckHash(hash); err != nil {
			return nil, fmt.Errorf("certificate hash: %w", err)
		}
	}
	if hash == "" && spki == "" && u.Scheme == "http" {
		if err := CheckHashFetch(u, opts.TrustHTTPHash); err != nil {
			return nil, err
		}
		if hash, err = FetchCertificateHash(ctx, u, opts.HTTPClient); err != nil {
			return nil, err
		}
	}
	if hash != "" || spki != "" {
		Pin(tc, hash, spki)
	}
	return tc, nil
}

// redact is u without its query (which may carry a token).
func redact(u *url.URL) string {
	r := *u
	r.RawQuery = ""
	return r.String()
}

// NewSession performs SETUP over an established transport session and
// starts serving it. path, if not empty, is sent as the SETUP path
// parameter (raw QUIC has no URL of its own).
func NewSession(ctx context.Context, t transport.Session, path string, logger *slog.Logger) (*Session, error) {
	if logger == nil {
		logger = slog.Default()
	}
	st, err := t.OpenStream(ctx)
	if err != nil {
		return nil, fmt.Errorf("open setup stream: %w", err)
	}
	cs := &moqlite.ClientSetup{
		Versions: []uint64{moqlite.Version02},
		Params:   moqlite.Params{{Key: moqlite.ParamImplementation, Bytes: []byte("relayfleet")}},
	}
	if path != "" {
		cs.Params = append(cs.Params, moqlite.Param{Key: moqlite.ParamPath, Bytes: []byte(path)})
	}
	b, err := moqlite.AppendSetup(nil, moqlite.StreamClientSetup, cs)
	if err != nil {
		return nil, err
	}
	if _, err := st.Write(b); err != nil {
		return nil, fmt.Errorf("write client setup: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { st.CancelRead(codeCancelled) })
	typ, err := moqlite.ReadVarint(st)
	if err != nil {
		stop()
		return nil, fmt.Errorf("read server setup: %w", err)
	}
	if typ != moqlite.StreamServerSetup {
		stop()
		return nil, fmt.Errorf("server setup: unexpected type %#x", typ)
	}
	body, err := moqlite.ReadSetupBody(st)
	stop()
	if err != nil {
		return nil, err
	}
	var ss moqlite.ServerSetup
	if err := ss.DecodeBody(body); err != nil {
		return nil, err
	}
	if ss.Version != moqlite.Version02 {
		return nil, fmt.Errorf("server chose version %#x, want moq-lite-02", ss.Version)
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &Session{
		t:          t,
		log:        logger,
		ctx:        sctx,
		cancel:     cancel,
		uniDone:    make(chan struct{}),
		goAway:     make(chan struct{}),
		subs:       make(map[uint64]*Subscription),
		broadcasts: make(map[string]*Broadcast),
		watchers:   make(map[*announceWatcher]struct{}),
	}
	s.spawn(func() {
		select {
		case <-t.Done():
			// acceptUni records the transport's error as it returns:
			// wait for it, so that the subscriptions end with it.
			select {
			case <-s.uniDone:
			case <-time.After(time.Second):
			}
		case <-sctx.Done():
		}
		s.shutdown()
	})
	s.spawn(func() {
		stop := context.AfterFunc(sctx, func() {
			st.CancelRead(codeCancelled)
			st.CancelWrite(codeCancelled)
		})
		defer stop()
		_, _ = io.Copy(io.Discard, st) // the session stream: nothing for us in lite-02
	})
	s.spawn(s.acceptBidi)
	s.spawn(s.acceptUni)
	if d, ok := t.(transport.Datagrams); ok {
		s.spawn(func() { s.watchDatagrams(d) })
	}
	return s, nil
}

func (s *Session) spawn(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

func (s *Session) shutdown() {
	s.cancel()
	_ = s.t.CloseWithError(0, "")
	err := s.Err()
	s.mu.Lock()
	subs := s.subs
	s.subs = map[uint64]*Subscription{}
	s.mu.Unlock()
	for _, sub := range subs {
		sub.end(err)
	}
}

// fail records err, from the transport, as why the session ended unless
// the session was closed here first, and ends the session.
func (s *Session) fail(err error) {
	s.mu.Lock()
	if s.closeErr == nil && s.ctx.Err() == nil {
		s.closeErr = err
	}
	s.mu.Unlock()
	s.cancel()
}

// Err is why the session ended: nil while it is open, else ErrClosed,
// wrapping the transport's error (a *quic.ApplicationError with the
// relay's close code, a *quic.StatelessResetError, ...) when the relay or
// the network ended it. ReconnectReason classifies it.
func (s *Session) Err() error {
	if s.ctx.Err() == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeErr != nil {
		return fmt.Errorf("%w: %w", ErrClosed, s.closeErr)
	}
	return ErrClosed
}

// Close ends the session and waits for its goroutines.
func (s *Session) Close() error {
	s.shutdown()
	s.wg.Wait()
	return nil
}

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

func (s *Session) acceptBidi() {
	for {
		st, err := s.t.AcceptStream(s.ctx)
		if err != nil {
			s.fail(err)
			return
		}
		s.spawn(func() { s.handleBidi(st) })
	}
}

func (s *Session) handleBidi(st transport.Stream) {
	stop := context.AfterFunc(s.ctx, func() {
		st.CancelRead(codeCancelled)
		st.CancelWrite(codeCancelled)
	})
	defer stop()
	typ, err := moqlite.ReadVarint(st)
	if err != nil {
		return
	}
	switch typ {
	case moqlite.StreamAnnounce:
		var m moqlite.AnnounceInterest
		if err := moqlite.ReadMessage(st, &m); err != nil {
			st.CancelWrite(codeCancelled)
			return
		}
		s.serveAnnounce(st, bpath.Clean(m.Prefix))
	case moqlite.StreamSubscribe:
		var m moqlite.Subscribe
		if err := moqlite.ReadMessage(st, &m); err != nil {
			st.CancelWrite(codeCancelled)
			return
		}
		s.serveSubscribe(st, &m)
	default:
		st.CancelRead(codeCancelled)
		st.CancelWrite(codeCancelled)
	}
}

// acceptUni takes the relay's group streams in the order it opened them
// (streams are accepted in stream ID order) and hands each to its
// subscription once its header is read, one after the other: a group is
// delivered after the groups the relay opened before it. (A goroutine per
// stream reading its header raced, and delivered a burst of groups, such
// as a new subscription's first ones, out of order.) A header that has
// not arrived yet holds the next groups back, as the relay writes it with
// the stream's first bytes.
func (s *Session) acceptUni() {
	defer close(s.uniDone)
	for {
		st, err := s.t.AcceptUniStream(s.ctx)
		if err != nil {
			s.fail(err)
			return
		}
		s.handleGroup(st)
	}
}

func (s *Session) handleGroup(st transport.ReceiveStream) {
	h, err := moqlite.ReadGroupStart(st)
	if err != nil {
		st.CancelRead(codeCancelled)
		return
	}
	s.mu.Lock()
	sub := s.subs[h.Subscribe]
	s.mu.Unlock()
	if sub == nil || !sub.deliver(&GroupReader{Sequence: h.Sequence, st: st}) {
		st.CancelRead(codeCancelled)
	}
}

// RemoteAddr is the relay's address.
func (s *Session) RemoteAddr() net.Addr { return s.t.RemoteAddr() }
