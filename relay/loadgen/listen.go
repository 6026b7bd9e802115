package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// listen runs one listener until ctx ends; connected is closed once it is
// subscribed (or has failed). With o.Reconnect it resubscribes, through
// sem, whenever its subscription ends before ctx does.
func listen(ctx context.Context, o Options, res *client.Resolver, sh *shard, l *listener, connected chan struct{}, sem chan struct{}, pg *progress) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	// A busy server refuses connections it cannot accept in time, as a
	// real client would be refused: try three times, backing off, asking
	// a router to avoid the relay the last attempt failed on.
	var (
		c     *subscription
		err   error
		avoid []string
	)
	for attempt := range 3 {
		if attempt > 0 {
			wait := time.Duration(100<<attempt) * time.Millisecond
			if ra := client.RetryAfter(err); ra > 0 {
				// The router said when to come back: then, with jitter.
				wait = max(wait, ra+rand.N(ra/2+1))
			}
			select {
			case <-time.After(wait):
			case <-dctx.Done():
			}
		}
		var relay string
		if c, relay, err = subscribe(ctx, dctx, o, res, sh, time.Time{}, avoid...); err == nil || dctx.Err() != nil {
			break
		}
		if relay != "" {
			avoid = []string{relay}
		}
	}
	cancel()
	if err != nil {
		l.err = shortError(err)
		close(connected)
		return
	}
	l.connected, l.live = true, true
	l.subscribedAt = time.Now()
	o.Logger.Debug("listener subscribed", "listener", l.id, "relay", c.relay)
	pg.connected.Add(1)
	pg.live.Add(1)
	close(connected)
	var bo client.Backoff // this listener's reconnect schedule
	for {
		mv := watchMove(ctx, o, res, sh, sem, c, l.id)
		var (
			err     error
			pending *client.GroupReader // a group the wait below brought
			waited  bool                // the first reconnect's wait is spent
		)
		for {
			err = receive(ctx, o, sh, l, withFirst(pending, c.groups()), mv, &bo)
			pending, waited = nil, false
			if !o.Reconnect || !errors.Is(err, client.ErrSilent) || c.pump != nil || ctx.Err() != nil {
				break
			}
			// Silent: the relay may be up and its upstream away. The
			// wait before the reconnect is spent still subscribed, so
			// that audio coming back there is heard at once.
			wait := bo.Next(0)
			waited = true
			if wait < time.Millisecond {
				break
			}
			g, werr := c.sub.NextGroupWithin(ctx, wait)
			if werr != nil {
				break
			}
			o.Logger.Debug("listener heard its silent subscription again", "listener", l.id, "relay", c.relay, "last_frame_ago", time.Since(l.last))
			pending = g
		}
		if errors.Is(err, errMoved) {
			// Make-before-break: the new subscription caught up with
			// the old one, which served every group before the new
			// one's first.
			old := c
			c = takeMove(mv)
			old.close()
			first, _, _ := c.pump.Span()
			o.Logger.Debug("listener moved", "listener", l.id, "from", old.relay, "to", c.relay, "first_group", first, "last_frame_ago", time.Since(l.last))
			l.moved(client.ReasonGoingAway)
			l.moveTo(first)
			pg.reconnects.Add(1)
			continue
		}
		c.close()
		if err == nil || ctx.Err() != nil {
			mv.Stop()
			return // Run is over: still subscribed
		}
		l.live, l.downSince = false, time.Now()
		l.ended, l.err = true, shortError(err)
		pg.live.Add(-1)
		// Run's own end was checked above: a cancellation from inside
		// the client (its session's context) is worth another try; a
		// refusal (unauthorized, protocol, configuration) is not.
		reason, retry := client.ReconnectReason(err)
		if !o.Reconnect || !retry && reason != client.ReasonCancelled {
			mv.Stop()
			return
		}
		// The relay's notice came before its close: the new
		// subscription is made, or being made.
		nc := takeMove(mv)
		o.Logger.Debug("listener subscription ended", "listener", l.id, "relay", c.relay, "reason", reason, "err", err, "noticed", nc != nil, "last_frame_ago", time.Since(l.last))
		if nc != nil {
			reason = client.ReasonGoingAway
		} else if nc = reconnect(ctx, o, res, sh, l, sem, &bo, c.relay, waited); nc == nil {
			return
		}
		o.Logger.Debug("listener resubscribed", "listener", l.id, "relay", nc.relay, "reason", reason, "pumped", nc.pump != nil, "last_frame_ago", time.Since(l.last))
		c = nc
		l.moved(reason)
		l.live = true
		l.resume()
		pg.live.Add(1)
		pg.reconnects.Add(1)
	}
}

// moved counts a reconnect for reason.
func (l *listener) moved(reason string) {
	l.reconnects++
	if l.reasons == nil {
		l.reasons = make(map[string]int64)
	}
	l.reasons[reason]++
}

// errMoved: receive stopped between two groups because the move's new
// subscription is ready.
var errMoved = errors.New("loadgen: moved to the new subscription")

// watchMove watches old's session for the going-away notice
// (client.Session.GoingAway) and then makes a new subscription through
// the router, avoiding that relay, whose groups are queued while the old
// one is still read (client.Move); receive switches to the queue between
// two groups once the new subscription has caught up (ready). Only with
// o.Reconnect through a router: there is nowhere else to go otherwise.
// The attempt holds a place in sem, as reconnects do.
func watchMove(ctx context.Context, o Options, res *client.Resolver, sh *shard, sem chan struct{}, old *subscription, id int) *client.Move[*subscription] {
	var sess *client.Session
	if o.Reconnect && res.Routed() {
		sess = old.sess
	}
	var silence time.Duration
	if o.Reconnect {
		silence = o.Silence
	}
	return client.WatchMove(ctx, sess, client.MoveOptions[*subscription]{
		Silence: silence,
		Close:   (*subscription).close,
		Subscribe: func(wctx context.Context) (*subscription, *client.Subscription, error) {
			select {
			case sem <- struct{}{}:
			case <-wctx.Done():
				return nil, nil, wctx.Err()
			}
			actx, cancel := context.WithTimeout(wctx, 10*time.Second)
			start := time.Now()
			c, relay, err := subscribe(ctx, actx, o, res, sh, time.Now(), old.relay)
			cancel()
			<-sem
			o.Logger.Debug("listener noticed going-away: new subscription", "listener", id, "from", old.relay, "to", relay, "took", time.Since(start), "err", err)
			if err != nil {
				return nil, nil, err
			}
			return c, c.sub, nil
		},
	})
}

// ready says mv's new subscription has caught up: its latest group is
// the old one's latest or later, and the old one served every group
// before the new one's first (but those missing for longer than
// maxOutOfOrder; a group the old one skipped over at or after first may
// still come on the new one). It does not wait.
func ready(mv *client.Move[*subscription], l *listener) bool {
	if !mv.Ready(l.next) {
		return false
	}
	first, _, _ := mv.Span()
	for seq, at := range l.missing {
		if seq < first && time.Since(at) < maxOutOfOrder {
			return false
		}
	}
	return true
}

// maxOutOfOrder is how long a move waits for a group the old
// subscription skipped over.
const maxOutOfOrder = 500 * time.Millisecond

// takeMove returns mv's new subscription, reading through its pump, or
// nil if there is none (see client.Move.Wait).
func takeMove(mv *client.Move[*subscription]) *subscription {
	c, p, ok := mv.Wait()
	if !ok {
		return nil
	}
	c.pump = p
	return c
}

// withFirst is next, but g first when it is not nil.
func withFirst(g *client.GroupReader, next func(context.Context, time.Duration) (*client.GroupReader, error)) func(context.Context, time.Duration) (*client.GroupReader, error) {
	if g == nil {
		return next
	}
	return func(ctx context.Context, silence time.Duration) (*client.GroupReader, error) {
		if g != nil {
			first := g
			g = nil
			return first, nil
		}
		return next(ctx, silence)
	}
}

// groups is where receive takes c's next group: its pump, once moved,
// or the subscription.
func (c *subscription) groups() func(ctx context.Context, silence time.Duration) (*client.GroupReader, error) {
	if c.pump == nil {
		return c.sub.NextGroupWithin
	}
	return func(ctx context.Context, _ time.Duration) (*client.GroupReader, error) {
		return c.pump.Next(ctx)
	}
}

// reconnect resubscribes until it succeeds or ctx ends (nil), waiting
// bo.Next before each attempt (but the first when waited: the caller
// spent that wait on the silent subscription) (client.Backoff: full jitter from 500 ms
// to 2 s, reset only by 10 s of audio, so that a listener whose new
// subscription goes silent again keeps backing off), or the Retry-After
// the router sent, with jitter, when that is longer. A router is asked to
// avoid failed, the relay that failed the listener, and the relay the
// last attempt failed on; a router that answered no relay (503) is asked
// plainly next time, since with every relay avoided it has nothing to
// give. Each attempt holds a place in sem, as first dials do, so that a
// crowd reconnecting at once is not refused by the relay's accept queue.
func reconnect(ctx context.Context, o Options, res *client.Resolver, sh *shard, l *listener, sem chan struct{}, bo *client.Backoff, failed string, waited bool) *subscription {
	since := l.downSince // resolve afresh: the relay may have restarted
	avoid := []string{failed}
	var err error
	for {
		var wait time.Duration
		if !waited {
			wait = bo.Next(client.RetryAfter(err))
		}
		waited = false
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var (
			c     *subscription
			relay string
		)
		start := time.Now()
		c, relay, err = subscribe(ctx, actx, o, res, sh, since, avoid...)
		cancel()
		<-sem
		o.Logger.Debug("listener reconnect attempt", "listener", l.id, "relay", relay, "waited", wait, "took", time.Since(start), "err", err)
		if err == nil {
			if ctx.Err() != nil {
				c.close()
				return nil
			}
			return c
		}
		l.err = shortError(err)
		since = time.Now()
		switch {
		case relay == "":
			avoid = nil
		case relay != failed:
			avoid = []string{failed, relay}
		}
	}
}

// receive reads sub's groups, counting into l, until sub ends (its error)
// or ctx does (nil). With o.Reconnect a subscription that brings no group,
// or no next frame of a group, within o.Silence ends with client.ErrSilent.
// A frozen listener reads nothing until it thaws.
//
// It takes the groups from next, and returns errMoved between two groups
// once mv's new subscription is ready.
func receive(ctx context.Context, o Options, sh *shard, l *listener, next func(context.Context, time.Duration) (*client.GroupReader, error), mv *client.Move[*subscription], bo *client.Backoff) error {
	var silence time.Duration // 0: wait as long as the session lasts
	if o.Reconnect {
		silence = o.Silence
	}
	for {
		g, err := next(ctx, silence)
		if ctx.Err() != nil {
			if g != nil {
				g.Close()
			}
			return nil
		}
		if err != nil {
			if errors.Is(err, client.ErrSilent) && l.frozen.Load() {
				// Silent because frozen: the listener's own doing.
				if !l.waitThaw(ctx) {
					return nil
				}
				continue
			}
			return err
		}
		now := time.Now()
		if l.frozen.Load() {
			if !l.waitThaw(ctx) {
				g.Close()
				return nil
			}
			now = time.Now()
		}
		if !l.group(g.Sequence, now) {
			g.Close()
			continue
		}
		bo.Heard(now)
		err = l.readGroup(ctx, o, sh, g, silence)
		if err != nil || ctx.Err() != nil {
			return err
		}
		if ready(mv, l) {
			return errMoved
		}
	}
}

// readGroup reads g's frames into l. It returns client.ErrSilent when the
// next frame does not come within silence (if positive), and nil
// otherwise, the group complete or cut short (its missing frames count as
// lost) or ctx ended (then the frames the group still had to bring are
// kept in l.unread).
func (l *listener) readGroup(ctx context.Context, o Options, sh *shard, g *client.GroupReader, silence time.Duration) error {
	defer g.Close()
	var (
		read, count uint32
		cut         bool
		quiet       *time.Timer
		silent      atomic.Bool
		pos         uint32 // frames of the group so far
	)
	// A group cut short on the last subscription, served again from its
	// start on this one: the frames before resumeAt were received then.
	read, resumeAt := l.resumeAt, l.resumeAt
	l.resumeAt = 0
	if silence > 0 {
		quiet = time.AfterFunc(silence, func() { silent.Store(true); g.Abort() })
		defer quiet.Stop()
	}
	for {
		p, err := g.ReadFrame()
		if err != nil {
			// A reset (or the session's end): the missing frames count
			// as lost below.
			cut = !errors.Is(err, io.EOF)
			break
		}
		if quiet != nil {
			quiet.Reset(silence)
		}
		if idx := pos; resumeAt > 0 {
			pos++
			if fi, ok := ParseFrame(p); ok {
				idx, count = fi.Index, fi.Count
			}
			if idx < resumeAt {
				continue
			}
		}
		// The time is taken before the freeze is checked, so that a
		// frame counted as received before a freeze was received before
		// it.
		now := time.Now()
		if l.frozen.Load() {
			if quiet != nil {
				quiet.Stop()
			}
			if !l.waitThaw(ctx) {
				return nil // frozen to the end: not measured
			}
			now = time.Now()
		}
		sh.frames.Add(1)
		fi, ok := l.frame(p, now, o.Late)
		if ok {
			count = fi.Count
		}
		if read == 0 && (!ok || fi.Index == 0) {
			l.observe(groupStart{seq: g.Sequence, sent: fi.SentNs, at: now, count: fi.Count})
		}
		read++
	}
	if ctx.Err() != nil {
		if count > read {
			l.unread = int64(count - read)
		}
		return nil
	}
	l.countCut(g.Sequence, count, read, cut)
	if cut && silent.Load() {
		if l.frozen.Load() {
			l.waitThaw(ctx) // silent because frozen: the listener's own doing
			return nil
		}
		return client.ErrSilent
	}
	return nil
}

// countCut counts the frames group seq of count (0: not known) lacked
// when it ended after read frames, cut short or not. A group cut short is
// remembered: a resubscription that serves it again reads it on.
func (l *listener) countCut(seq uint64, count, read uint32, cut bool) {
	if count == 0 && !cut && read > 0 {
		l.count = read // frames that do not say: the group's size as read
	}
	if cut && count == 0 {
		count = max(l.count, 1) // cut before its first frame
	}
	if count > read {
		l.lost += int64(count - read)
		l.cut++
		if cut {
			l.cutAt = groupCut{ok: true, seq: seq, read: read, lost: int64(count - read)}
		}
	}
}

// waitThaw waits while the listener is frozen: false when ctx ended first.
func (l *listener) waitThaw(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-l.thaw:
		return true
	}
}

// subscription is one listener session and its subscription.
type subscription struct {
	relay string // as the router (or Options.URL) named it, without the token
	conn  *quic.Conn
	sess  *client.Session
	sub   *client.Subscription
	stop  func() bool

	// A moved subscription's pump: its groups come from there.
	pump *client.Pump
}

func (s *subscription) close() {
	if s.pump != nil {
		s.pump.Stop()
	}
	s.sub.Close()
	s.stop()
	s.sess.Close()
}

// subscribe connects (within dctx) and subscribes; the connection ends
// with ctx, which unblocks a read stuck in a frozen group. It returns the
// relay it tried ("" if the router did not answer), failing or not.
func subscribe(ctx, dctx context.Context, o Options, res *client.Resolver, sh *shard, since time.Time, avoid ...string) (*subscription, string, error) {
	relay, conn, sess, err := connect(dctx, o, res, sh, since, avoid)
	if err != nil {
		return nil, relay, err
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.CloseWithError(0, "") })
	sub, err := sess.Subscribe(dctx, o.Broadcast, o.Track)
	if err != nil {
		stop()
		sess.Close()
		return nil, relay, err
	}
	return &subscription{relay: relay, conn: conn, sess: sess, sub: sub, stop: stop}, relay, nil
}

// connect dials the relay (a router is asked to avoid those in avoid) and
// performs SETUP; a certificate hash fetched before since is fetched
// again.
func connect(ctx context.Context, o Options, res *client.Resolver, sh *shard, since time.Time, avoid []string) (string, *quic.Conn, *client.Session, error) {
	target, err := res.Resolve(ctx, since, avoid...)
	if err != nil {
		return "", nil, nil, err
	}
	idle := o.IdleTimeout
	if idle <= 0 {
		idle = 30 * time.Second
	}
	// The client's configuration keeps datagrams on: NextGroupWithin's
	// probe halfway through a silence is what a relay restarted on the
	// same port answers with a stateless reset.
	qc := client.QUICConfig(o.Silence)
	client.SetAckFrequency(qc, !o.NoAckFrequency)
	if o.TuneQUIC != nil {
		o.TuneQUIC(qc)
	}
	// A relay that is restarting does not answer: give up on it sooner
	// than quic-go's 5 s and ask the router again.
	qc.HandshakeIdleTimeout = 3 * time.Second
	qc.MaxIdleTimeout = idle
	qc.KeepAlivePeriod = min(qc.KeepAlivePeriod, idle/3)
	conn, err := sh.tr.Dial(ctx, target.Addr, target.TLS, qc)
	if err != nil {
		return target.Relay, nil, nil, fmt.Errorf("dial: %w", err)
	}
	sess, err := client.NewSession(ctx, transport.NewQUIC(conn), target.Path, o.Logger)
	if err != nil {
		_ = conn.CloseWithError(0, "")
		return target.Relay, nil, nil, err
	}
	return target.Relay, conn, sess, nil
}

// newResolver is the listeners' shared client.Resolver for o.
func newResolver(o Options) (*client.Resolver, error) {
	r, err := client.NewResolver(client.ResolverOptions{
		URL: o.URL, Router: o.Router, Broadcast: o.Broadcast, Token: o.Token, TokenSource: o.TokenSource,
		RouterOptions:   client.RouterOptions{SPKI: o.RouterSPKI, RootCAs: o.RootCAs, Insecure: o.InsecureRouter, Region: o.RouterRegion},
		CertificateHash: o.CertificateHash, RootCAs: o.RootCAs, TrustHTTPHash: o.TrustHTTPHash,
	})
	if err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	return r, nil
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
	frames atomic.Int64 // frames its listeners received, for Snapshot
}

func newShard(freezable bool) (*shard, error) {
	// Any address: the relays may be on loopback, a lab bridge or a
	// real network.
	udp, err := net.ListenUDP("udp", &net.UDPAddr{})
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

func (c *freezeConn) SetReadBuffer(n int) error  { return c.udp.SetReadBuffer(n) }
func (c *freezeConn) SetWriteBuffer(n int) error { return c.udp.SetWriteBuffer(n) }
