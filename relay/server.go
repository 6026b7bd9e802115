package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"

	"github.com/relayfleet/relayfleet/relay/internal/bpath"
)

// Application error codes used on sessions and streams.
const (
	codeOK           = 0
	codeInternal     = 1
	codeUnauthorized = 2
	codeProtocol     = 3
	codeNotFound     = 4
	codeVersion      = 5
	codeCancelled    = 6
	codeOverloaded   = 7
)

const setupTimeout = 10 * time.Second

// firstMessageTimeout is how long a bidirectional stream the peer opened
// may take to carry its request (the stream type and its first message):
// one that sends nothing by then is reset, so that silent streams do not
// hold a goroutine each.
const firstMessageTimeout = 5 * time.Second

// Streams awaiting their first message. Each holds a goroutine (some
// 7 KiB with its stack) until its request comes or firstMessageTimeout
// resets it; a client's request comes with the stream, so a live relay
// has few waiting at once. Silent ones are capped: maxAwaitingPerAddress
// from one source address (addressKey; 64 sessions of 99 could hold
// 6,336) where sessions per address are capped too, and over the relay its memory budget over awaitingStreamBytes,
// minAwaiting at least, or defaultMaxAwaiting without a budget. Past a
// cap a new stream is reset at once with codeOverloaded, as under memory
// pressure: the 1 s memory sample alone let 512 sessions from 8
// addresses open 50,000 silent streams and take a 256 MiB relay past its
// budget before it reacted.
const (
	maxAwaitingPerAddress = 256
	awaitingStreamBytes   = 32 << 10
	minAwaiting           = 1024
	defaultMaxAwaiting    = 65536
)

// awaiting counts the streams waiting for their first message, in all
// and by source address.
type awaiting struct {
	max, maxPerAddress int // 0: no cap per address

	mu     sync.Mutex
	total  int
	byAddr map[netip.Addr]int
}

func newAwaiting(budget int64, perAddress bool) *awaiting {
	a := &awaiting{max: defaultMaxAwaiting, byAddr: make(map[netip.Addr]int)}
	if perAddress {
		a.maxPerAddress = maxAwaitingPerAddress
	}
	if budget > 0 {
		a.max = int(max(minAwaiting, budget/awaitingStreamBytes))
	}
	return a
}

// start counts a new stream from addr (the zero Addr: counted only in
// all) and reports whether it is under the caps; one that is must be
// ended with done.
func (a *awaiting) start(addr netip.Addr) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.total >= a.max || a.maxPerAddress > 0 && addr.IsValid() && a.byAddr[addr] >= a.maxPerAddress {
		return false
	}
	a.total++
	if addr.IsValid() {
		a.byAddr[addr]++
	}
	return true
}

// done ends a stream's wait, its first message come or not.
func (a *awaiting) done(addr netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.total--
	if !addr.IsValid() {
		return
	}
	if a.byAddr[addr]--; a.byAddr[addr] <= 0 {
		delete(a.byAddr, addr)
	}
}

// sessionBufferBudget bounds the frame bytes one session's group streams
// hold at once: frames being received (allocated as their bytes arrive)
// plus the frames of its groups still open. Audio needs a few KiB; past it
// the session is closed with codeOverloaded, so a publisher that opens
// thousands of streams and declares large frames on each cannot pin memory
// in proportion.
const sessionBufferBudget = 16 << 20

// ErrUnauthorized is returned when a session's token does not allow what it
// asked for.
var ErrUnauthorized = errors.New("relay: unauthorized")

// Server is the transport-agnostic moq-lite relay core: it runs sessions
// handed to it by ServeSession and fans broadcasts out between them.
// The zero value is not usable; create one with NewServer.
type Server struct {
	logger *slog.Logger
	auth   *Authenticator

	wg sync.WaitGroup

	mu         sync.Mutex
	broadcasts map[string]*broadcast
	remote     map[string]*broadcast // pulled from upstream relays
	// upstreamAnnounced: broadcasts the upstream announces, mirrored to
	// local announce watchers.
	upstreamAnnounced map[string]bool
	watchers          map[*watcher]struct{}
	sessions          map[*session]struct{}
	// pending counts sessions admitted and not yet registered in
	// sessions (in their handshake); admission counts them too.
	pending int
	// perAddress counts the admitted sessions by source (addressKey).
	perAddress map[netip.Addr]int
	// uncapped are the sources no per-address cap counts (capKey).
	uncapped []netip.Prefix

	// links: one per upstream URL, in the order given; none without
	// upstreams. preferred is the one new pulls start on: the one the
	// last failover went to (cluster.go).
	links     []*upstreamLink
	preferred atomic.Int32
	// linkAnnounced: what each upstream announces (by link index).
	linkAnnounced []map[string]bool
	// linkAnnounce is closed (and replaced) when an upstream announces a
	// broadcast: a pull waiting to retry looks again (cluster.go).
	linkAnnounce chan struct{}
	// heartbeat is the fleet heartbeat's track (heartbeat.go), nil when
	// the server publishes none; RunHeartbeat feeds it every
	// heartbeatEvery.
	heartbeat      *track
	heartbeatEvery time.Duration
	adm            *admission
	awaiting       *awaiting

	counters counters
	refused  refusals
	// unknownPulls limits the upstream pulls anonymous sessions start of
	// broadcasts the upstream does not announce (subscribe.go); guarded
	// by mu. pullLogs limits the log lines of upstream refusals.
	unknownPulls *rate.Limiter
	pullLogs     *rate.Limiter

	// goingAway: sessions ending with the relay's context get
	// moqlite.CodeGoingAway (a graceful stop), not code 0.
	goingAway atomic.Bool
	// open sessions by transport (relay_transport_sessions)
	transports transportSessions

	// revocations name tokens whose sessions are closed and refused
	// (revoke.go); expiryGrace is how long after its token's expiry a
	// session is closed (expiry.go).
	revocations atomic.Pointer[Revocations]
	expiryGrace time.Duration
}

type counters struct {
	sessionsTotal atomic.Int64
	subscribers   atomic.Int64
	groupsIn      atomic.Int64
	framesIn      atomic.Int64
	bytesIn       atomic.Int64
	groupsOut     atomic.Int64
	framesOut     atomic.Int64
	bytesOut      atomic.Int64

	upstreamSubscribes atomic.Int64
	upstreamFailovers  atomic.Int64
	groupsDropped      atomic.Int64
	sessionsOverloaded atomic.Int64
	announcesRefused   atomic.Int64

	sessionsShed atomic.Int64 // closed with going-away (shed.go)

	// bidirectional streams reset: opened under memory pressure, or
	// silent past firstMessageTimeout
	streamsRefused  atomic.Int64
	streamsTimedOut atomic.Int64
}

// frameIn counts a frame of size bytes appended to g, and hands g to t's
// writers with its first frame (started) or wakes them for the next.
func (c *counters) frameIn(t *track, g *group, size int, started *bool) {
	c.framesIn.Add(1)
	c.bytesIn.Add(int64(size))
	if !*started {
		*started = true
		t.startGroup(g)
	} else {
		t.wakeAll()
	}
}

// ServerOptions configures a Server.
type ServerOptions struct {
	// Logger receives the relay's logs; nil means slog.Default().
	Logger *slog.Logger
	// Auth, if set, requires every session to present a token, except
	// for subscribing under its public listen prefixes. The upstream
	// links then carry tokens it signs.
	Auth *Authenticator
	// Upstreams are relay URLs (http:// or https://, as for package
	// client) to pull broadcasts from that nobody publishes locally; they
	// are tried in turn.
	Upstreams []string
	// MemoryBudget is the memory the process may use, in bytes; 0 means
	// none. Admission control refuses sessions above 80% of it.
	MemoryBudget int64
	// MaxSessions caps open sessions; 0 means no cap.
	MaxSessions int
	// MaxSessionsPerAddress caps the sessions open from one source
	// address (an IPv4 address, an IPv6 /64); 0 means no cap.
	MaxSessionsPerAddress int
	// UncappedAddresses are sources no per-address cap counts
	// (Config.UncappedAddresses).
	UncappedAddresses []netip.Prefix
	// ReapAfter is how long a session may receive no packet before the
	// reaper ends it; 0 means DefaultReapAfter.
	ReapAfter time.Duration
	// MemoryUsage reports the memory in use; nil means the Go runtime's
	// own count (what the soft memory limit governs).
	MemoryUsage func() uint64
	// HeartbeatInterval, when positive and without Upstreams, makes the
	// server publish the fleet heartbeat (HeartbeatPath) once
	// RunHeartbeat runs, a group every HeartbeatInterval; 0 means none.
	HeartbeatInterval time.Duration
	// ExpiryGrace is how long after its token's expiry a session is
	// closed (code 8, "token expired"); 0 means DefaultExpiryGrace,
	// negative means at the expiry.
	ExpiryGrace time.Duration
}

// NewServer returns a relay core with no sessions.
func NewServer(opts ServerOptions) *Server {
	l := opts.Logger
	if l == nil {
		l = slog.Default()
	}
	s := &Server{
		logger:     l,
		auth:       opts.Auth,
		broadcasts: make(map[string]*broadcast),
		remote:     make(map[string]*broadcast),

		upstreamAnnounced: make(map[string]bool),
		watchers:          make(map[*watcher]struct{}),
		sessions:          make(map[*session]struct{}),
		perAddress:        make(map[netip.Addr]int),
		uncapped:          opts.UncappedAddresses,
		adm:               newAdmission(opts.MemoryBudget, opts.MaxSessions, opts.MaxSessionsPerAddress, opts.ReapAfter, opts.MemoryUsage),
		awaiting:          newAwaiting(opts.MemoryBudget, opts.MaxSessionsPerAddress > 0),
		unknownPulls:      rate.NewLimiter(unknownPullsPerSecond, unknownPullBurst),
		pullLogs:          rate.NewLimiter(pullLogsPerSecond, pullLogsPerSecond),
		expiryGrace:       expiryGrace(opts.ExpiryGrace),
	}
	s.refused.logger = l
	if len(opts.Upstreams) > 0 {
		for _, u := range opts.Upstreams {
			s.links = append(s.links, &upstreamLink{urls: []string{u}, logger: l, auth: opts.Auth, onConnect: s.linkConnected})
			s.linkAnnounced = append(s.linkAnnounced, make(map[string]bool))
		}
	} else if opts.HeartbeatInterval > 0 {
		s.heartbeat, s.heartbeatEvery = newHeartbeat(), max(opts.HeartbeatInterval, MinHeartbeatInterval)
	}
	return s
}

// Close ends the upstream link; sessions end with their contexts.
func (s *Server) Close() {
	for _, l := range s.links {
		l.close()
	}
}

// Wait blocks until every goroutine the server started has returned.
func (s *Server) Wait() { s.wg.Wait() }

// session is one client connection.
type session struct {
	srv    *Server
	t      transport.Session
	via    string // transport name, for refusal logs
	log    *slog.Logger
	root   string
	perms  Permissions
	ctx    context.Context
	cancel context.CancelFunc
	// from is the source address it was admitted from (addressKey); the
	// zero Addr when not known (ServeSession).
	from netip.Addr

	// budget bounds what the session's group streams hold together.
	budget *moqlite.Budget

	mu       sync.Mutex
	upstream map[uint64]*track // tracks we pull from this session, by upstream id
	// spawn starts a goroutine the session waits for when it ends; ending
	// is set before it waits, so no goroutine starts after. uniStarted:
	// the uni-stream accept loop runs (startAcceptUni).
	spawn      func(func())
	ending     bool
	uniStarted bool

	// broadcasts it publishes now, and whether an announce of it was
	// refused yet (logged once); guarded by Server.mu.
	broadcasts      int
	announceRefused bool
	// anonymous: the session presented no token; pulls limits the
	// upstream pulls it starts (subscribe.go), made with its first one
	// and guarded by Server.mu.
	anonymous bool
	pulls     *rate.Limiter

	// Reaper state, touched only by the sweeping goroutine.
	sweepPackets uint64
	sweepSeen    time.Time
	reaped       bool

	shed atomic.Bool // sent going-away (shed.go)
}

// ServeSession runs one moq-lite session until it ends or ctx is done, then
// frees everything it held. u is the URL the client connected to, or nil
// for raw QUIC, where the path comes from the SETUP path parameter.
func (s *Server) ServeSession(ctx context.Context, t transport.Session, u *url.URL) error {
	via := viaQUIC
	if u != nil {
		via = viaWebTransport
	}
	return s.serveSession(ctx, t, u, via, false, netip.Addr{})
}

// serveSession is ServeSession over the transport named via; admitted says
// the session went through admit from address from, which it ends with
// abandon, or with leave once registered.
func (s *Server) serveSession(ctx context.Context, t transport.Session, u *url.URL, via string, admitted bool, from netip.Addr) error {
	if admitted {
		defer func() {
			if admitted {
				s.abandon(from)
			} else {
				s.leave(from)
			}
		}()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = t.CloseWithError(s.closeCode(), "") })
	defer stop()
	if c, ok := t.(interface{ Context() context.Context }); ok {
		// No goroutine per session for this: a few KiB each at scale.
		stopDone := context.AfterFunc(c.Context(), cancel)
		defer stopDone()
	} else {
		go func() {
			select {
			case <-t.Done():
				cancel()
			case <-ctx.Done():
			}
		}()
	}

	sess := &session{srv: s, t: t, via: via, ctx: ctx, cancel: cancel, from: from, upstream: make(map[uint64]*track),
		budget: moqlite.NewBudget(sessionBufferBudget)}
	remote := t.RemoteAddr().String()
	sess.log = s.logger.With("remote", remote)

	setupStream, u, err := sess.setup(ctx, u)
	if err != nil {
		// A client gone or a relay stopping is no refusal; read this
		// before the close below ends ctx too.
		refused := ctx.Err() == nil
		code := uint64(codeProtocol)
		if errors.Is(err, ErrUnauthorized) {
			code = codeUnauthorized
		} else if errors.Is(err, errVersion) {
			code = codeVersion
		}
		_ = t.CloseWithError(code, err.Error())
		if refused {
			s.refused.refuse(ReasonProtocol, via, remote, "err", err)
		}
		return fmt.Errorf("session setup: %w", err)
	}
	perms, err := s.auth.Authorize(u)
	if err != nil {
		_ = t.CloseWithError(codeUnauthorized, "unauthorized")
		s.refused.refuse(ReasonUnauthorized, via, remote, "err", err)
		return fmt.Errorf("session %s: %w", t.RemoteAddr(), err)
	}
	sess.perms = perms
	sess.anonymous = u.Query().Get("jwt") == ""
	sess.root = bpath.Clean(u.Path)
	sess.log = sess.log.With("root", sess.root)
	sess.log.Debug("session started")

	s.counters.sessionsTotal.Add(1)
	s.transports.add(via, 1)
	defer s.transports.add(via, -1)
	s.mu.Lock()
	s.sessions[sess] = struct{}{}
	if admitted {
		s.pending-- // counted in sessions from now on
		admitted = false
	}
	s.mu.Unlock()
	// Registered first, checked after: a revocation applied meanwhile
	// either finds the session or is seen here.
	if s.revoked(perms) {
		sess.closeWith(codeUnauthorized, reasonRevoked)
		s.refused.refuse(ReasonUnauthorized, via, remote, "err", reasonRevoked)
	}
	defer s.watchExpiry(sess)()

	var wg sync.WaitGroup
	spawn := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	sess.mu.Lock()
	sess.spawn = spawn
	sess.mu.Unlock()
	// The session stream carries nothing more in lite-02: nobody reads it
	// (a goroutine and a copy buffer per session saved); it ends with the
	// session.
	stopSetup := context.AfterFunc(ctx, func() {
		setupStream.CancelRead(codeCancelled)
		setupStream.CancelWrite(codeCancelled)
	})
	defer stopSetup()
	// Group streams come only from a session the relay subscribed to (a
	// publisher): the uni-stream accept loop starts with the first such
	// subscription (startAcceptUni), not a goroutine per listener.
	// Announces are pulled from every session, also those that may not
	// publish, so that a publisher without the right token is refused
	// (counted and logged), not silently ignored.
	spawn(func() { sess.pullAnnounces(ctx) })
	// This goroutine accepts the bidi streams itself: one goroutine fewer
	// per session. acceptBidi returns once the session ends.
	sess.acceptBidi(ctx, spawn)

	<-ctx.Done()
	_ = t.CloseWithError(s.closeCode(), "")
	s.dropSession(sess)
	sess.mu.Lock()
	sess.ending = true
	sess.mu.Unlock()
	wg.Wait()
	sess.log.Debug("session ended")
	return nil
}

var errVersion = errors.New("no supported version offered")

// setup performs the SETUP exchange on the first bidi stream.
func (sess *session) setup(ctx context.Context, u *url.URL) (transport.Stream, *url.URL, error) {
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	st, err := sess.t.AcceptStream(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("accept setup stream: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { st.CancelRead(codeProtocol) })
	defer stop()
	typ, err := moqlite.ReadVarint(st)
	if err != nil {
		return nil, nil, fmt.Errorf("read setup type: %w", err)
	}
	if typ != moqlite.StreamClientSetup {
		return nil, nil, fmt.Errorf("unsupported first stream type %#x", typ)
	}
	body, err := moqlite.ReadSetupBody(st)
	if err != nil {
		return nil, nil, err
	}
	var cs moqlite.ClientSetup
	if err := cs.DecodeBody(body); err != nil {
		return nil, nil, err
	}
	if !cs.Supports(moqlite.Version02) {
		return nil, nil, fmt.Errorf("%w: %x", errVersion, cs.Versions)
	}
	if u == nil {
		p, _ := cs.Params.Bytes(moqlite.ParamPath)
		u, err = url.Parse(string(p))
		if err != nil {
			// Not the text itself: it may hold a token.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, nil, fmt.Errorf("setup path parameter: %w", err)
		}
	}
	reply, err := moqlite.AppendSetup(nil, moqlite.StreamServerSetup, &moqlite.ServerSetup{Version: moqlite.Version02})
	if err != nil {
		return nil, nil, err
	}
	if _, err := st.Write(reply); err != nil {
		return nil, nil, fmt.Errorf("write server setup: %w", err)
	}
	return st, u, nil
}

func (sess *session) acceptBidi(ctx context.Context, spawn func(func())) {
	for {
		st, err := sess.t.AcceptStream(ctx)
		if err != nil {
			sess.cancel()
			return
		}
		if sess.srv.adm.pressure.Load() || !sess.srv.awaiting.start(sess.from) {
			// Memory above the high-water mark: no new streams, as no
			// new sessions (budget.go); or too many silent ones.
			st.CancelRead(codeOverloaded)
			st.CancelWrite(codeOverloaded)
			sess.srv.counters.streamsRefused.Add(1)
			continue
		}
		spawn(func() {
			if err := sess.handleBidi(ctx, st); err != nil && ctx.Err() == nil {
				sess.log.Debug("stream ended", "err", err)
			}
		})
	}
}

func (sess *session) handleBidi(ctx context.Context, st transport.Stream) error {
	stop := context.AfterFunc(ctx, func() {
		st.CancelRead(codeCancelled)
		st.CancelWrite(codeCancelled)
	})
	defer stop()
	deadline := time.AfterFunc(firstMessageTimeout, func() {
		st.CancelRead(codeProtocol)
		st.CancelWrite(codeProtocol)
	})
	msg, bad, err := readRequest(st)
	sess.srv.awaiting.done(sess.from)
	if !deadline.Stop() {
		sess.srv.counters.streamsTimedOut.Add(1)
		return fmt.Errorf("no request within %v", firstMessageTimeout)
	}
	if err != nil {
		if bad {
			st.CancelRead(codeProtocol)
			st.CancelWrite(codeProtocol)
		}
		return err
	}
	switch m := msg.(type) {
	case *moqlite.AnnounceInterest:
		return sess.serveAnnounce(ctx, st, bpath.Clean(m.Prefix))
	case *moqlite.Subscribe:
		return sess.serveSubscribe(ctx, st, m)
	}
	return fmt.Errorf("request %T not served", msg) // readRequest returns none other
}

// readRequest reads a bidirectional stream's type and first message; bad
// says an error is the peer's fault (a type or message that does not
// parse): the stream is to be reset.
func readRequest(st transport.Stream) (m moqlite.Message, bad bool, err error) {
	typ, err := moqlite.ReadVarint(st)
	if err != nil {
		return nil, false, fmt.Errorf("read stream type: %w", err)
	}
	switch typ {
	case moqlite.StreamAnnounce:
		m = &moqlite.AnnounceInterest{}
	case moqlite.StreamSubscribe:
		m = &moqlite.Subscribe{}
	default:
		return nil, true, fmt.Errorf("unsupported stream type %d", typ)
	}
	if err := moqlite.ReadMessage(st, m); err != nil {
		return nil, true, err
	}
	return m, false, nil
}

// startAcceptUni starts the session's uni-stream accept loop (the
// publisher's group streams) unless it runs or the session ends. Streams
// the peer opened before wait in quic-go (at most MaxIncomingUniStreams,
// within the connection's flow-control window), then are read as before.
func (sess *session) startAcceptUni() {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.uniStarted || sess.ending || sess.spawn == nil {
		return
	}
	sess.uniStarted = true
	spawn := sess.spawn
	spawn(func() { sess.acceptUni(sess.ctx, spawn) })
}

func (sess *session) acceptUni(ctx context.Context, spawn func(func())) {
	for {
		st, err := sess.t.AcceptUniStream(ctx)
		if err != nil {
			sess.cancel()
			return
		}
		spawn(func() {
			if err := sess.readGroup(ctx, st); err != nil && ctx.Err() == nil {
				sess.log.Debug("group stream ended", "err", err)
			}
		})
	}
}

// readGroup reads one group stream from a publisher into its track.
func (sess *session) readGroup(ctx context.Context, st transport.ReceiveStream) error {
	stop := context.AfterFunc(ctx, func() { st.CancelRead(codeCancelled) })
	defer stop()
	h, err := moqlite.ReadGroupStart(st)
	if err != nil {
		st.CancelRead(codeProtocol)
		return err
	}
	sess.mu.Lock()
	t := sess.upstream[h.Subscribe]
	sess.mu.Unlock()
	if t == nil {
		st.CancelRead(codeNotFound)
		return nil // unsubscribed meanwhile
	}
	stopTrack := context.AfterFunc(t.ctx, func() { st.CancelRead(codeCancelled) })
	defer stopTrack()
	c := &sess.srv.counters
	c.groupsIn.Add(1)
	g := newGroup(h.Sequence)
	// Hand the group to the subscribers' writers once it has its first
	// frame: a writer then finds data at once instead of waking twice.
	started := false
	defer func() {
		if !started {
			t.startGroup(g)
		}
	}()
	held := 0 // bytes of this group's frames reserved in the session budget
	defer func() { sess.budget.Release(held) }()
	for {
		frame, err := moqlite.ReadFrameBudget(st, sess.budget)
		if errors.Is(err, moqlite.ErrOverBudget) {
			g.finish(err)
			t.wakeAll()
			sess.overloaded(err)
			return err
		}
		if err == io.EOF {
			g.finish(nil)
			t.wakeAll()
			return nil
		}
		if err != nil {
			g.finish(err)
			t.wakeAll()
			return err
		}
		held += len(frame)
		if !g.append(frame) { // too large: append ended it
			st.CancelRead(codeProtocol)
			t.wakeAll() // its writers reset the listeners' streams
			return errGroupTooLarge
		}
		c.frameIn(t, g, len(frame), &started)
	}
}

// overloaded ends a session that holds more than it may.
func (sess *session) overloaded(err error) {
	sess.srv.counters.sessionsOverloaded.Add(1)
	sess.log.Warn("closing session over its buffer budget", "err", err, "budget", sessionBufferBudget)
	_ = sess.t.CloseWithError(codeOverloaded, "session buffer budget exceeded")
	sess.cancel()
}
