package relay

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

	"github.com/relayfleet/relayfleet/relay/internal/connlimit"
	"github.com/relayfleet/relayfleet/relay/internal/udpbatch"
	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// DefaultUDPBuffer is the UDP receive and send buffer the relay asks for.
const DefaultUDPBuffer = 16 << 20

// DefaultSendBatch is Config.SendBatch's default: one sendmsg per packet,
// written from the connection's own loop. Batching across connections
// parks every writer until its batch leaves; on one CPU (GOMAXPROCS 1, as
// a relay@ unit runs) that park costs more than the system calls it
// saves: 3,077 and 2,857 listeners per core (medians at 1,000 and 2,000)
// with one sendmsg each, 2,432 and 2,528 with batches of 64
// (docs/benchmarks.md, session 7; session 6: 3,126 and 2,883 against 2,508
// and 2,516). The kernel floor's own gain from sendmmsg was 1.77 to 1.50 us
// per packet. A write-behind batch (no park) measured 8% worse still.
const DefaultSendBatch = 1

// DefaultAckDelay is Config.AckDelay's default: longer than the 120 ms
// between a listener's audio packets, so that the relay's acknowledgement
// of what a listener sends (its ACKs carry a MAX_STREAMS for every group
// stream it finished) rides on the next audio packet instead of leaving
// in a packet of its own 25 ms later, quic-go's default: 9.7 packets per
// listener-second instead of 17.7, 29% and 11% more listeners per core at
// 1,000 and 2,000 (docs/benchmarks.md, "Fewer packets, fewer goroutines").
const DefaultAckDelay = 200 * time.Millisecond

// DefaultAckThreshold is Config.AckThreshold's default. A listener's ACK
// of an audio packet carries a MAX_STREAMS frame (it finished a group's
// stream), which makes it ack-eliciting; whenever two of them came
// between two audio packets (a probe, a group's end sent apart, a second
// ACK), quic-go's threshold of 2 made the relay send an ACK-only packet at
// once, 7-10% of the packets it sent at 2,000 listeners. With 10, the ACK
// rides on the next audio packet (within DefaultAckDelay); a publisher's
// stream of packets still gets an ACK every 10, and a packet reported
// missing one at once.
const DefaultAckThreshold = 10

// DefaultListenerAckDelay is Config.ListenerAckDelay's default: longer
// than the 120 ms between a listener's audio packets, so that a listener
// asked for it (with DefaultListenerAckThreshold) acknowledges every other
// packet instead of each one, 25 ms after it: half the ACKs the relay
// reads, decrypts and processes; with listeners that also give stream
// credit in batches (relayfleet's client), 26-33% more listeners per core
// at 2,000 listeners (docs/benchmarks.md, session 11). Its cost is the
// relay's probe timeout, which allows the listener the delay asked: a
// dropped frame is resent when the next frame's packet shows it lost, on
// a 10 ms path 152-158 ms after it was sent against 126-129 ms for such
// listeners asked nothing (TestLossRecoveryWithPTOAllowance); on paths of
// 30 ms or more the probe timeout is near the next frame either way. Only
// listeners whose QUIC advertises the ACK frequency extension
// (draft-ietf-quic-ack-frequency: the min_ack_delay transport parameter;
// relayfleet's own client and load generator, not Chromium 156) are
// asked.
const DefaultListenerAckDelay = 150 * time.Millisecond

// DefaultListenerAckThreshold is Config.ListenerAckThreshold's default: a
// listener asked acknowledges once more than 1 ack-eliciting packet waits,
// every other packet, as RFC 9000 asks of every receiver.
const DefaultListenerAckThreshold = 1

// MaxAckThreshold is the largest Config.AckThreshold may be.
const MaxAckThreshold = 100

// MaxAckDelay is the longest Config.AckDelay may be.
const MaxAckDelay = time.Second

// Defaults of the TCP side's limits (Config.HTTPTimeout, Config.MaxConns).
const (
	DefaultHTTPTimeout = 10 * time.Second
	DefaultMaxConns    = 10000
)

// DefaultMaxSessionsPerAddress is Config.MaxSessionsPerAddress's default:
// a household or an office behind one address has a few listeners, and
// 64 sessions of silent streams hold little (each at most
// transport.MaxIncomingStreams streams, each silent one for
// firstMessageTimeout).
const DefaultMaxSessionsPerAddress = 64

// Config configures a relay process. The zero value listens on a random
// loopback port with a self-signed certificate and no authentication.
type Config struct {
	// Listen is HOST:PORT: QUIC and WebTransport on UDP, HTTP and WebSocket
	// on TCP, with the same port number. Empty means 127.0.0.1:0.
	Listen string
	// Certificate is a fixed TLS certificate, never replaced. Without it,
	// CertFile and KeyFile, or ACME, the relay makes self-signed
	// certificates (with TLSKey, if set) and replaces each before it
	// expires. At most one of the four may be set.
	Certificate tls.Certificate
	// CertFile and KeyFile are PEM files with the certificate chain and
	// its key, re-read when they change (polled every CertReloadInterval;
	// 0 means DefaultCertReloadInterval) or on Relay.ReloadCertificate.
	// Broken new files leave the old certificate in service.
	CertFile, KeyFile  string
	CertReloadInterval time.Duration
	// ACME gets the certificate from an ACME CA and renews it.
	ACME *ACMEConfig
	// TLSKey is the key the self-signed certificates use, so that their
	// SPKI pin stays the same across rotations and restarts; nil means a
	// new key at each start.
	TLSKey *ecdsa.PrivateKey
	// Now is the clock certificates are made and rotated by, and /metrics
	// snapshots cached by; nil means time.Now. Tests move it forward.
	Now func() time.Time
	// AuthKey, when set, requires clients to present ?jwt= tokens signed
	// with this Ed25519 private key (its seed or the whole key).
	AuthKey []byte
	// Auth, when set, checks tokens instead of AuthKey: several keys
	// (rotation), public keys only (a relay that cannot sign), public
	// listen prefixes, a token lifetime limit (NewAuthenticatorKeys,
	// WithPublicListen, WithMaxLifetime). With Upstreams it needs a key
	// that signs the links' tokens: a link key, else a private key.
	Auth *Authenticator
	// RevocationFile, when set, names tokens whose sessions are closed
	// and refused (revoke.go); it is read again every RevocationPoll (0
	// means DefaultRevocationPoll). A missing file revokes nothing.
	RevocationFile string
	RevocationPoll time.Duration
	// ExpiryGrace is how long after its token's expiry a session is
	// closed with code 8, "token expired" (expiry.go); 0 means
	// DefaultExpiryGrace, negative means at the expiry.
	ExpiryGrace time.Duration
	// UDPBuffer is the receive and send buffer to ask for; 0 means
	// DefaultUDPBuffer.
	UDPBuffer int
	// SendBatch is the most QUIC packets the relay sends in one system
	// call (sendmmsg), across connections: packets that the connections'
	// send loops write at about the same time leave together (package
	// relay/internal/udpbatch; udpbatch.DefaultSize is 64). 0 means
	// DefaultSendBatch, 1 (or negative): every packet with its own
	// sendmsg, as quic-go does alone.
	SendBatch int
	// AckDelay is the longest the relay delays an acknowledgement (QUIC's
	// max_ack_delay, which it advertises, so peers wait for it before
	// they retransmit). 0 means DefaultAckDelay; 25 ms is quic-go's own.
	// It needs the patched quic-go (docs/quic-go-patch.md).
	AckDelay time.Duration
	// AckThreshold is how many ack-eliciting packets the relay receives
	// before it acknowledges at once instead of waiting up to AckDelay. 0
	// means DefaultAckThreshold; 2 is quic-go's (RFC 9000's). Needs the
	// patched quic-go (Config.AckElicitingThreshold).
	AckThreshold int
	// ListenerAckDelay is the max_ack_delay the relay asks of a peer whose
	// QUIC supports the ACK frequency extension (an ACK_FREQUENCY frame once
	// the handshake is confirmed), with ListenerAckThreshold: 0 means
	// DefaultListenerAckDelay, negative asks nothing (peers acknowledge as
	// they would, each 120 ms audio packet 25 ms after it); at most
	// MaxAckDelay. Needs the patched quic-go (Config.PeerMaxAckDelay).
	ListenerAckDelay time.Duration
	// ListenerAckThreshold is the Ack-Eliciting Threshold asked with
	// ListenerAckDelay: the peer acknowledges once more than this many
	// ack-eliciting packets wait. 0 means DefaultListenerAckThreshold; at
	// most MaxAckThreshold.
	ListenerAckThreshold int
	// PTOAckDelay is the least time the relay's probe timeout allows for a
	// peer's ACK, in place of the peer's own max_ack_delay (25 ms for
	// quic-go and browsers) when larger: with thousands of listeners on one
	// CPU the relay reads their ACKs late during its own fan-out and, at
	// 25 ms, probes packets that were not lost (docs/benchmarks.md, session
	// 7: 100 ms measured +6-9% listeners per core at 2,000 listeners). A
	// lost packet is then probed that much later: with 120 ms frames, 100
	// ms means a dropped frame waits for the next frame to show it lost,
	// 60-75 ms later than with the default (loadgen's
	// TestLossRecoveryWithPTOAllowance), so it is off by default. 0 keeps
	// the peer's; at most MaxAckDelay. Needs the patched quic-go.
	PTOAckDelay time.Duration
	// PTOIgnoresReads fires a probe timeout at its deadline even while the
	// relay has datagrams it has not read yet, as quic-go does. By default
	// (false) such a timeout waits, rechecking every 10 ms, at most 100 ms:
	// the listener's ACK it would give up on may be among them, read late
	// because the relay's one CPU is busy fanning a frame out. A relay
	// that keeps up with its reads probes a lost packet as soon as ever
	// (loadgen's TestLossRecoveryWithPTOAllowance). Needs the patched
	// quic-go (docs/quic-go-patch.md, Config.PTOAfterReads).
	PTOIgnoresReads bool
	// SendQueue hands each connection's packets to a goroutine of its
	// own, quic-go's send queue, instead of writing them from the
	// connection's loop (the default, with the patched quic-go): one
	// goroutine, and its stack, more per listener. For comparison.
	SendQueue bool
	// Upstreams are relay URLs to pull broadcasts from that are not
	// published locally (cluster links; see ServerOptions.Upstreams). Each
	// may pin the origin's key as #spki=HEX; see CheckUpstream.
	Upstreams []string
	// MemoryBudget is the memory the process may use, in bytes. 0 means
	// the cgroup's memory limit, if any; with both, the smaller wins;
	// negative means no budget. Run sets the Go soft memory limit to 90%
	// of it; admission control refuses new sessions above 80%.
	MemoryBudget int64
	// MaxSessions caps open sessions (admission control); 0 means no cap.
	MaxSessions int
	// MaxSessionsPerAddress caps the sessions open from one source address
	// (an IPv4 address; an IPv6 /64), on every transport: past it a new
	// one is refused as overloaded. 0 means DefaultMaxSessionsPerAddress;
	// negative means no cap (a relay behind a proxy, a load generator's
	// target).
	MaxSessionsPerAddress int
	// UncappedAddresses are the sources whose sessions no per-address cap
	// counts (MaxSessionsPerAddress, and the streams waiting per address):
	// the fleet's own load generators, which open thousands of sessions
	// from one address. The relay-wide caps and the memory budget still
	// hold for them.
	UncappedAddresses []netip.Prefix
	// ReapAfter is how long a QUIC or WebSocket session may receive
	// nothing before the reaper ends it (a WebSocket one is pinged
	// first); 0 means DefaultReapAfter.
	ReapAfter time.Duration
	// MemoryUsage reports the memory in use; nil means the Go runtime's
	// count. Tests use it to simulate memory pressure.
	MemoryUsage func() uint64
	// Pprof serves net/http/pprof under /debug/pprof/ on the TCP port.
	Pprof bool
	// HTTPTimeout bounds the TCP side's slow and idle connections: the
	// first byte (before TLS) and the request headers must arrive within
	// it, a whole request within twice it, an idle keep-alive connection
	// is closed after three times it, and a response must be written
	// within six times it. WebSocket sessions, once upgraded, are exempt.
	// 0 means DefaultHTTPTimeout.
	HTTPTimeout time.Duration
	// MaxConns caps the TCP connections open at once (WebSocket sessions
	// included); past it new ones are closed at once. 0 means
	// DefaultMaxConns; negative means no cap.
	MaxConns int
	// Logger receives the relay's logs; nil means slog.Default().
	Logger *slog.Logger
	// ResetSecret (at least MinResetSecret random bytes, kept on the box)
	// derives the QUIC stateless reset key for the UDP port, so that a
	// process restarted on the same port resets the connections its
	// predecessor left behind (see reset.go). nil means a random key per
	// process.
	ResetSecret []byte
	// ShedRate is how many sessions per second /shed and a graceful stop
	// close with moqlite.CodeGoingAway by default; 0 means DefaultShedRate.
	ShedRate float64
	// ShutdownGrace bounds a graceful stop (Run, when its context ends):
	// the relay stops admitting and sends going-away to every session,
	// at ShedRate or faster so that all get it within the grace, then
	// exits. 0 means DefaultShutdownGrace; negative means no going-away
	// (sessions are closed at once with code 0).
	ShutdownGrace time.Duration
	// NoticeGrace is how long /shed (and a graceful stop, within half
	// its ShutdownGrace) serves a session after sending it the going-away
	// notice (moqlite.GoAwayNotice) before closing it: time for a client
	// to move first (make-before-break). 0 means DefaultNoticeGrace;
	// negative means no notice (sessions are closed at once).
	NoticeGrace time.Duration
	// HeartbeatInterval is how often a relay without Upstreams (an origin)
	// publishes a group of the fleet heartbeat, HeartbeatPath
	// (heartbeat.go); a relay with upstreams pulls it from them instead.
	// 0 means DefaultHeartbeatInterval; negative means none. At least
	// MinHeartbeatInterval.
	HeartbeatInterval time.Duration
}

// heartbeatInterval resolves Config.HeartbeatInterval (0: none).
func (cfg *Config) heartbeatInterval() time.Duration {
	switch {
	case cfg.HeartbeatInterval == 0:
		return DefaultHeartbeatInterval
	case cfg.HeartbeatInterval < 0:
		return 0
	}
	return cfg.HeartbeatInterval
}

// maxPerAddress resolves Config.MaxSessionsPerAddress (0: no cap).
func (cfg *Config) maxPerAddress() int {
	switch {
	case cfg.MaxSessionsPerAddress == 0:
		return DefaultMaxSessionsPerAddress
	case cfg.MaxSessionsPerAddress < 0:
		return 0
	}
	return cfg.MaxSessionsPerAddress
}

// budget resolves Config.MemoryBudget against the cgroup limit.
func (cfg *Config) budget(logger *slog.Logger) int64 {
	if cfg.MemoryBudget < 0 {
		return 0
	}
	b := cfg.MemoryBudget
	limit, ok, err := CgroupMemoryLimit(os.DirFS("/"))
	if err != nil {
		logger.Debug("no cgroup memory limit", "err", err)
	}
	if ok && (b == 0 || limit < b) {
		b = limit
	}
	return b
}

// quicConfig keeps per-connection state small: one audio track needs few
// streams and small windows; packets are written from the connection's
// own loop (one goroutine fewer per listener) and ACKs wait for the next
// audio packet.
func (cfg *Config) quicConfig() *quic.Config {
	qc := &quic.Config{
		// A listener opens a handful of bidi streams (setup, subscribe,
		// announce); an edge relay opens one per track it pulls.
		MaxIncomingStreams:    transport.MaxIncomingStreams,
		MaxIncomingUniStreams: 64, // a publisher's groups in flight
		// Listeners send next to nothing; publishers' windows grow.
		InitialStreamReceiveWindow:     16 << 10,
		MaxStreamReceiveWindow:         256 << 10,
		InitialConnectionReceiveWindow: 64 << 10,
		MaxConnectionReceiveWindow:     1 << 20,
		MaxIdleTimeout:                 30 * time.Second,
		// A live peer answers within this; the reaper relies on it.
		KeepAlivePeriod:                  5 * time.Second,
		EnableDatagrams:                  true, // required by WebTransport
		EnableStreamResetPartialDelivery: true, // required by WebTransport
	}
	cfg.patchedQUIC(qc)
	return qc
}

// DefaultGCPercent is the Go GC target Run sets unless GOGC is in the
// environment: the heap may grow 50% past the live heap between
// collections instead of Go's 100%. A listener holds about 35 KiB of live
// heap (50 before the quic-go patch, docs/quic-go-patch.md), so the
// headroom is a large share of its RSS: 15-20% less RSS per
// listener at 500 and 1,000 listeners, no CPU cost per packet the bench
// could tell from its noise (docs/benchmarks.md, "Memory per listener").
const DefaultGCPercent = 50

// Relay is a running relay process: listeners plus the Server core.
type Relay struct {
	srv      *Server
	logger   *slog.Logger
	certs    *certSource
	udp      *net.UDPConn
	tcp      net.Listener
	conns    *connlimit.Listener
	tr       *quic.Transport
	ql       *quic.Listener
	http     *http.Server
	wt       *webtransport.Server
	bufRcv   int
	bufSnd   int
	bufAsked int
	batch    *udpbatch.Conn // nil: one sendmsg per packet
	// sendErrs counts the UDP socket's failed writes; dropsErr logs once
	// that its drops cannot be read.
	sendErrs sendErrors
	dropsErr sync.Once
	// snapshots counts the Stats calls (each reads /proc and /proc/sys):
	// what a /metrics scrape costs, for its test.
	snapshots atomic.Int64

	shedRate    float64       // Config.ShedRate, resolved
	grace       time.Duration // Config.ShutdownGrace, resolved
	noticeGrace time.Duration // Config.NoticeGrace, resolved (0: none)
	stopping    atomic.Bool   // a graceful stop began

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start binds the UDP and TCP listeners and starts serving in the
// background until ctx ends or Close is called.
func Start(ctx context.Context, cfg Config) (*Relay, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	addr := cfg.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", addr, err)
	}
	if cfg.PTOAckDelay < 0 || cfg.PTOAckDelay > MaxAckDelay {
		return nil, fmt.Errorf("PTO ack delay %s: want 0 (the peer's own) up to %s", cfg.PTOAckDelay, MaxAckDelay)
	}
	if cfg.AckThreshold < 0 || cfg.AckThreshold > MaxAckThreshold {
		return nil, fmt.Errorf("ack threshold %d: want 0 (the default, %d) up to %d", cfg.AckThreshold, DefaultAckThreshold, MaxAckThreshold)
	}
	if cfg.AckDelay < 0 || cfg.AckDelay > MaxAckDelay {
		return nil, fmt.Errorf("ack delay %s: want 0 (the default, %s) up to %s", cfg.AckDelay, DefaultAckDelay, MaxAckDelay)
	}
	if cfg.ListenerAckDelay > MaxAckDelay {
		return nil, fmt.Errorf("listener ack delay %s: want at most %s (0: the default, %s; negative: ask nothing)", cfg.ListenerAckDelay, MaxAckDelay, DefaultListenerAckDelay)
	}
	if cfg.ListenerAckThreshold < 0 || cfg.ListenerAckThreshold > MaxAckThreshold {
		return nil, fmt.Errorf("listener ack threshold %d: want 0 (the default, %d) up to %d", cfg.ListenerAckThreshold, DefaultListenerAckThreshold, MaxAckThreshold)
	}
	if err := checkFault(); err != nil {
		return nil, err
	}
	if m := fault(); m != "" {
		logger.Warn("FAULT BUILD: this relay misbehaves on purpose, for tests; never deploy it", "fault", m)
	}
	if hb := cfg.HeartbeatInterval; hb > 0 && hb < MinHeartbeatInterval {
		return nil, fmt.Errorf("heartbeat interval %s: want at least %s (0: the default, %s; negative: none)", hb, MinHeartbeatInterval, DefaultHeartbeatInterval)
	}
	for _, u := range cfg.Upstreams {
		if err := CheckUpstream(u); err != nil {
			return nil, err
		}
	}
	if _, err := testAllocMiB(); err != nil {
		return nil, err
	}
	auth := cfg.Auth
	if auth == nil && len(cfg.AuthKey) > 0 {
		if auth, err = NewAuthenticator(cfg.AuthKey); err != nil {
			return nil, err
		}
	}
	if auth.HasHS256() {
		logger.Warn("the auth key file holds HS256 keys of an earlier relayfleet: whoever reads it can mint tokens; fleet up or fleet auth rotate moves the fleet to Ed25519 keys (relay keygen --auth for a relay run by hand)")
	}
	if auth != nil && len(cfg.Upstreams) > 0 {
		if _, err := auth.linkKey(); err != nil {
			return nil, fmt.Errorf("upstream links: the auth key file has no key to sign their tokens with (want an ed25519-link-private line, as fleet boxes get, or ed25519-private): %w", err)
		}
	}
	certs, err := newCertSource(&cfg, host, logger)
	if err != nil {
		return nil, err
	}
	udp, tcp, err := listenPair(addr)
	if err != nil {
		certs.stop()
		return nil, err
	}
	resetKey, err := statelessResetKey(cfg.ResetSecret, udp.LocalAddr().(*net.UDPAddr).Port)
	if err != nil {
		udp.Close()
		tcp.Close()
		certs.stop()
		return nil, err
	}
	budget := cfg.budget(logger)
	r := &Relay{
		srv: NewServer(ServerOptions{
			Logger: logger, Auth: auth, Upstreams: cfg.Upstreams, MemoryBudget: budget,
			MaxSessions: cfg.MaxSessions, MaxSessionsPerAddress: cfg.maxPerAddress(), UncappedAddresses: cfg.UncappedAddresses, ReapAfter: cfg.ReapAfter, MemoryUsage: cfg.MemoryUsage,
			HeartbeatInterval: cfg.heartbeatInterval(), ExpiryGrace: cfg.ExpiryGrace,
		}),
		logger:   logger,
		certs:    certs,
		udp:      udp,
		tcp:      tcp,
		bufAsked: cfg.UDPBuffer,
		shedRate: cfg.ShedRate,
		grace:    cfg.ShutdownGrace,
	}
	if r.shedRate <= 0 {
		r.shedRate = DefaultShedRate
	}
	if r.grace == 0 {
		r.grace = DefaultShutdownGrace
	}
	switch r.noticeGrace = cfg.NoticeGrace; {
	case r.noticeGrace == 0:
		r.noticeGrace = DefaultNoticeGrace
	case r.noticeGrace < 0:
		r.noticeGrace = 0
	}
	if r.bufAsked <= 0 {
		r.bufAsked = DefaultUDPBuffer
	}
	tlsConf := &tls.Config{
		GetCertificate: certs.getCertificate,
		NextProtos:     []string{moqlite.ALPN, http3.NextProtoH3},
		MinVersion:     tls.VersionTLS13,
	}
	if certs.acme != nil {
		// TLS-ALPN-01 challenges, answered on the TCP port.
		tlsConf.NextProtos = append(tlsConf.NextProtos, acmeTLS1)
	}
	// The connection ID length stays quic-go's default (4 bytes) in every
	// version: a successor process reads its predecessor's IDs with it to
	// answer them with stateless resets.
	cc := &countingConn{UDPConn: udp, errs: &r.sendErrs}
	if batch := cmp.Or(cfg.SendBatch, DefaultSendBatch); batch > 1 {
		if cc.batch, err = udpbatch.New(udp, batch); err != nil {
			udp.Close()
			tcp.Close()
			certs.stop()
			return nil, fmt.Errorf("send batch: %w", err)
		}
		r.batch = cc.batch
	}
	r.tr = &quic.Transport{Conn: cc, StatelessResetKey: resetKey}
	err = withoutGSO(func() (err error) { // gso.go: 1,452-byte packet buffers, not 20 KiB
		r.ql, err = r.tr.Listen(tlsConf, cfg.quicConfig())
		return err
	})
	if err != nil {
		udp.Close()
		tcp.Close()
		certs.stop()
		return nil, fmt.Errorf("listen quic: %w", err)
	}
	// Ask after quic-go has set up the socket: it raises buffers below
	// 7 MiB on its own, and the size asked for is the operator's choice.
	// As root the size is forced past net.core.[rw]mem_max; otherwise the
	// kernel clamps to them without error.
	if err := setSocketBuffers(udp, r.bufAsked); err != nil {
		logger.Warn("set UDP buffers", "err", err)
	}
	r.bufRcv, r.bufSnd, err = socketBuffers(udp)
	if err != nil {
		logger.Warn("read back UDP buffers", "err", err)
	} else {
		logger.Info("UDP buffers", "asked", r.bufAsked, "receive", r.bufRcv, "send", r.bufSnd)
		if usable := r.bufRcv / kernelBufferFactor; usable < r.bufAsked {
			logger.Warn("kernel granted a smaller UDP receive buffer than asked; raise net.core.rmem_max",
				"asked", r.bufAsked, "granted", usable)
		}
		if usable := r.bufSnd / kernelBufferFactor; usable < r.bufAsked {
			logger.Warn("kernel granted a smaller UDP send buffer than asked; raise net.core.wmem_max",
				"asked", r.bufAsked, "granted", usable)
		}
	}

	r.ctx, r.cancel = context.WithCancel(ctx)
	mux := r.handler(cfg.Pprof)
	if certs.acme != nil {
		mux = certs.acme.httpHandler(mux)
	}
	r.wt = &webtransport.Server{
		H3:                   &http3.Server{Handler: mux, Logger: slog.New(redactTokens(logger.Handler()))}, // it logs request URIs: no ?jwt=, logredact.go
		ApplicationProtocols: []string{moqlite.ALPN},
		CheckOrigin:          func(*http.Request) bool { return true },
	}
	webtransport.ConfigureHTTP3Server(r.wt.H3)
	timeout := cfg.HTTPTimeout
	if timeout <= 0 {
		timeout = DefaultHTTPTimeout
	}
	maxConns := cfg.MaxConns
	if maxConns == 0 {
		maxConns = DefaultMaxConns
	}
	r.conns = connlimit.New(tcp, maxConns)
	// Hijacked connections (WebSocket) get their deadlines cleared by
	// net/http: the timeouts end at the upgrade.
	r.http = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: timeout,
		ReadTimeout:       2 * timeout,
		IdleTimeout:       3 * timeout,
		WriteTimeout:      6 * timeout,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return r.ctx },
	}
	r.wg.Add(7)
	go func() {
		defer r.wg.Done()
		certs.run(r.ctx)
	}()
	go func() {
		defer r.wg.Done()
		r.srv.RunHeartbeat(r.ctx)
	}()
	go func() {
		defer r.wg.Done()
		r.srv.RunReaper(r.ctx)
	}()
	go func() {
		defer r.wg.Done()
		r.srv.RunUpstreamAnnounces(r.ctx)
	}()
	go func() {
		defer r.wg.Done()
		r.acceptQUIC()
	}()
	go func() {
		defer r.wg.Done()
		if err := r.http.Serve(newSniffListener(r.conns, tlsConf, timeout)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("http server", "err", err)
		}
	}()
	go func() {
		defer r.wg.Done()
		<-r.ctx.Done()
		r.shutdown()
	}()
	if cfg.RevocationFile != "" {
		if _, err := LoadRevocations(cfg.RevocationFile); err != nil {
			r.Close()
			return nil, err
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.srv.RunRevocations(r.ctx, cfg.RevocationFile, cfg.RevocationPoll)
		}()
	}
	if err := certs.obtainACME(ctx); err != nil {
		r.Close()
		return nil, err
	}
	logger.Info("relay listening", "addr", r.Addr().String(), "certificate_sha256", r.CertificateHash(), "spki_sha256", r.SPKIHash(),
		"memory_budget", budget, "max_sessions", cfg.MaxSessions, "max_sessions_per_address", cfg.maxPerAddress())
	return r, nil
}

// listenPair binds UDP and TCP on the same port number. With port 0 it
// retries until the kernel's UDP port is also free on TCP.
func listenPair(addr string) (*net.UDPConn, net.Listener, error) {
	host, port, _ := net.SplitHostPort(addr)
	for attempt := 0; ; attempt++ {
		ua, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("listen %s: %w", addr, err)
		}
		udp, err := net.ListenUDP("udp", ua)
		if err != nil {
			return nil, nil, fmt.Errorf("listen udp %s: %w", addr, err)
		}
		p := udp.LocalAddr().(*net.UDPAddr).Port
		tcp, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p)))
		if err == nil {
			return udp, tcp, nil
		}
		udp.Close()
		if port != "0" || attempt >= 20 {
			return nil, nil, fmt.Errorf("listen tcp %s: %w", net.JoinHostPort(host, strconv.Itoa(p)), err)
		}
	}
}

func (r *Relay) acceptQUIC() {
	for {
		conn, err := r.ql.Accept(r.ctx)
		if err != nil {
			return
		}
		switch conn.ConnectionState().TLS.NegotiatedProtocol {
		case moqlite.ALPN:
			r.srv.wg.Add(1)
			remote := conn.RemoteAddr().String()
			from := r.srv.capKey(remote)
			if cause := r.srv.admit(from); cause != "" {
				r.srv.refuseAdmission(cause, viaQUIC, remote)
				go func() { // CloseWithError waits for the connection to end
					defer r.srv.wg.Done()
					_ = conn.CloseWithError(codeOverloaded, "relay full")
				}()
				continue
			}
			go func() {
				defer r.srv.wg.Done()
				if err := r.srv.serveSession(r.ctx, transport.NewQUIC(conn), nil, viaQUIC, true, from); err != nil {
					r.logger.Debug("quic session", "err", err)
				}
			}()
		case http3.NextProtoH3:
			r.srv.wg.Add(1)
			go func() {
				defer r.srv.wg.Done()
				if err := r.wt.ServeQUICConn(conn); err != nil && r.ctx.Err() == nil {
					r.logger.Debug("webtransport connection", "err", err)
				}
			}()
		default:
			r.srv.refused.refuse(ReasonProtocol, viaQUIC, conn.RemoteAddr().String(), "err", "unsupported alpn")
			_ = conn.CloseWithError(codeProtocol, "unsupported alpn")
		}
	}
}

// sessionCloseWait bounds how long shutdown waits for sessions to send
// their close before the socket goes.
const sessionCloseWait = time.Second

func (r *Relay) shutdown() {
	// Let the sessions close first (their context is done): each sends
	// its CONNECTION_CLOSE on the transport, so listeners learn at once
	// and reconnect through the router, instead of waiting out their
	// idle timeout after the socket is gone. Bounded: a session stuck in
	// a write does not hold the shutdown up.
	closed := make(chan struct{})
	go func() { r.srv.wg.Wait(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(sessionCloseWait):
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = r.http.Shutdown(sctx)
	_ = r.http.Close()
	_ = r.wt.Close()
	_ = r.ql.Close()
	_ = r.tr.Close()
	_ = r.udp.Close()
	r.certs.stop()
	r.srv.Close()
}

// Close stops the relay, ends every session and waits for all of its
// goroutines.
func (r *Relay) Close() error {
	r.cancel()
	r.wg.Wait()
	r.srv.Wait()
	return nil
}

// Addr is the bound address (the UDP one; TCP has the same port).
func (r *Relay) Addr() *net.UDPAddr { return r.udp.LocalAddr().(*net.UDPAddr) }

// CertificateHash is the hex SHA-256 of the leaf of the certificate
// served now.
func (r *Relay) CertificateHash() string {
	if ci := r.certs.info(); ci != nil {
		return ci.hash
	}
	return ""
}

// SPKIHash is the hex SHA-256 of the DER SubjectPublicKeyInfo of the
// certificate served now: the pin that outlives rotations when the key is
// kept (Config.TLSKey).
func (r *Relay) SPKIHash() string {
	if ci := r.certs.info(); ci != nil {
		return ci.spki
	}
	return ""
}

// Certificate is the certificate served now.
func (r *Relay) Certificate() tls.Certificate {
	if ci := r.certs.info(); ci != nil {
		return *ci.cert
	}
	return tls.Certificate{}
}

// ReloadCertificate re-reads the certificate files now (Config.CertFile);
// on error the old certificate stays in service. Other modes have nothing
// to reload.
func (r *Relay) ReloadCertificate() error { return r.certs.reload() }

// Server is the relay core.
func (r *Relay) Server() *Server { return r.srv }

// errFaultExit is what Run returns in a FaultExit build.
var errFaultExit = errors.New("fault build " + FaultExit + ": exiting right after the start")

// Run starts a relay and serves until ctx ends, then stops gracefully: it
// stops admitting, sends every session going-away (moqlite.CodeGoingAway)
// within Config.ShutdownGrace, and closes. ready, if not nil, is called
// once it listens. Under systemd (Type=notify) it sends READY=1 once
// listening, WATCHDOG=1 when WatchdogSec is set, and STOPPING=1 when ctx
// ends.
//
// Run also sets the process's Go soft memory limit to 90% of the memory
// budget, when there is one, and the GC target to DefaultGCPercent unless
// the environment sets GOGC (Start leaves process-wide settings alone).
func Run(ctx context.Context, cfg Config, ready func(*Relay)) error {
	// The relay outlives ctx by the graceful stop; ctx ending while it
	// starts still aborts the start.
	rctx, rcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer rcancel()
	abort := context.AfterFunc(ctx, rcancel)
	r, err := Start(rctx, cfg)
	if err != nil {
		return err
	}
	if !abort() { // ctx ended during the start
		return r.Close()
	}
	if fault() == FaultExit {
		r.Close()
		return errFaultExit
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultGCPercent)
	}
	if b := r.srv.adm.budget; b > 0 {
		limit := int64(float64(b) * softLimitFraction)
		debug.SetMemoryLimit(limit)
		r.logger.Info("memory budget", "budget", b, "go_soft_limit", limit, "high_water", r.srv.adm.highWater)
	}
	if ready != nil {
		ready(r)
	}
	stop := notifySystemd(ctx, r, r.logger)
	<-ctx.Done()
	stop()
	r.gracefulStop(r.grace)
	return r.Close()
}
