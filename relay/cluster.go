package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/relay/client"

	"github.com/relayfleet/relayfleet/relay/internal/bpath"
)

// Cluster links: a relay with upstreams pulls broadcasts it does not
// publish locally from them. The first local subscriber to a track starts
// one upstream subscription for it (per process, however many listeners),
// over one shared client session to an upstream; the last one to leave ends
// it. When the upstream goes away the track stays, its listeners stay
// connected, and the relay re-dials and re-subscribes with exponential
// backoff (with jitter, between upstreamBackoffMin and upstreamBackoffMax)
// until it succeeds or the last listener leaves. The same session carries
// an announce interest, so local listeners see the upstream's broadcasts
// announced (RunUpstreamAnnounces).

const (
	upstreamBackoffMin = 100 * time.Millisecond
	upstreamBackoffMax = 5 * time.Second
	upstreamDialWait   = 5 * time.Second
)

// Link probes. An upstream relay process that dies without a word (kill
// -9, OOM) leaves the link session open on the edge until its 30 s idle
// timeout, and every listener of every pulled track silent meanwhile: the
// link only receives, and its keep-alive PINGs are too small to draw a
// stateless reset from a successor on the port (reset.go). So a pulled
// track silent for upstreamSilence makes the edge probe the link: it asks
// for announcements under probePrefix, which nothing is published under
// and whose length makes the packet large enough to draw a reset. A
// successor's reset ends the session at once; no answer within
// upstreamProbeWait ends it too. Either way the edge re-dials (the next
// upstream URL) and re-subscribes. A live upstream answers in a round
// trip, and the answer stands for upstreamSilence: probes are shared by
// every track of the link.
const (
	upstreamSilence   = time.Second
	upstreamProbeWait = 2 * time.Second
	probePrefix       = "relayfleet-link-probe/00000000000000000000000000000000"
)

var errLinkClosed = errors.New("upstream link closed")

// handOrderWait bounds how long a pulled group whose first frame came
// waits for the group before it to be handed to the listeners first
// (pullRemote): a group the upstream sent earlier whose first frame is
// stuck holds the ones after it back no longer than this.
const handOrderWait = 500 * time.Millisecond

// upstreamLink is the shared client session towards the upstream relays.
// The mutex guards its fields only and is never held across a dial: a dial
// to a blackholed upstream takes upstreamDialWait, and /stats and the
// systemd watchdog read connected() meanwhile.
//
// A dial that has not connected within linkHedgeAfter is not waited on
// alone: the next caller (or a caller still waiting) starts another one
// beside it (see session), and the first to connect serves every caller.
// A QUIC dial started while the upstream was not listening yet (an origin
// started after its edges, or restarting) connects only at its next
// Initial retransmission, or fails at its handshake timeout (3 s): without
// the second dial, the first listener of a pulled track waited that long
// for its first group, past a player's silence timer.
type upstreamLink struct {
	urls   []string
	logger *slog.Logger
	auth   *Authenticator // signs the link's own token (its link key); nil: none
	// dialFn dials one upstream URL (nil: client.Dial); tests replace it.
	dialFn func(ctx context.Context, url string) (*client.Session, error)

	mu      sync.Mutex
	cur     *client.Session
	next    int
	closed  bool
	flight  *dialFlight              // the newest dial in progress, if any
	flights map[*dialFlight]struct{} // every dial in progress
	changed chan struct{}            // closed (and replaced) when a dial sets cur

	probing   *probeFlight    // the link probe in progress, if any
	probedOK  time.Time       // when a probe of probedFor last succeeded
	probedFor *client.Session // the session probedOK is about
}

// linkHedgeAfter is how long a link dial runs before another one is
// started beside it; maxCallDials bounds the dials one session call
// starts, maxLinkDials the dials at once.
var linkHedgeAfter = 500 * time.Millisecond

const (
	maxCallDials = 2
	maxLinkDials = 8
)

// probeFlight is one probe of a link session; callers that arrive while
// it is in flight share its result.
type probeFlight struct {
	sess   *client.Session
	done   chan struct{} // closed once err is set
	cancel context.CancelFunc
	err    error
}

// dialFlight is one dial of the upstream; callers that arrive while it is
// in flight wait for its result instead of dialling again.
type dialFlight struct {
	done    chan struct{} // closed once s and err are set
	cancel  context.CancelFunc
	started time.Time
	s       *client.Session
	err     error
}

// session returns the live upstream session, dialling the next upstream
// URL when there is none. Callers that arrive during a dial wait for it
// (or for their ctx) and share its result. A dial that has run
// linkHedgeAfter without connecting gets another beside it: a caller that
// arrives then starts one, and a caller waiting on a dial starts one when
// its dial turns that old; each call starts at most maxCallDials dials.
// The first dial to connect serves every caller; a caller whose own dial
// fails, with no session up, gets its error.
func (l *upstreamLink) session(ctx context.Context) (*client.Session, error) {
	var (
		f       *dialFlight // the dial this call waits on
		started int         // dials this call started
	)
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, errLinkClosed
		}
		if s := l.liveLocked(); s != nil {
			l.mu.Unlock()
			return s, nil
		}
		if f == nil {
			f = l.flight
		}
		if f == nil || started < maxCallDials && time.Since(f.started) >= linkHedgeAfter && len(l.flights) < maxLinkDials {
			f = l.startDialLocked(ctx)
			started++
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		changed := l.changed
		l.mu.Unlock()

		if s, done, err := l.await(ctx, f, changed, started < maxCallDials); done {
			return s, err
		}
	}
}

// await waits for f, for another dial to connect (changed) or for ctx;
// with hedge, at most until f has run linkHedgeAfter. done is false when
// session should look again.
func (l *upstreamLink) await(ctx context.Context, f *dialFlight, changed <-chan struct{}, hedge bool) (s *client.Session, done bool, err error) {
	var slow <-chan time.Time
	if hedge {
		t := time.NewTimer(time.Until(f.started.Add(linkHedgeAfter)))
		defer t.Stop()
		slow = t.C
	}
	select {
	case <-f.done:
		if f.err == nil {
			return f.s, true, nil
		}
		l.mu.Lock()
		s := l.liveLocked() // another dial connected
		l.mu.Unlock()
		if s != nil {
			return s, true, nil
		}
		return nil, true, f.err
	case <-changed: // another dial connected
		return nil, false, nil
	case <-slow: // f is slow: another dial beside it
		return nil, false, nil
	case <-ctx.Done():
		return nil, true, ctx.Err()
	}
}

// liveLocked is the link's session if it is up (a session that ended is
// closed and forgotten); l.mu is held.
func (l *upstreamLink) liveLocked() *client.Session {
	if l.cur == nil {
		return nil
	}
	if isDone(l.cur.Done()) {
		_ = l.cur.Close()
		l.cur = nil
		return nil
	}
	return l.cur
}

// startDialLocked starts a dial of the next upstream URL as the newest
// flight; l.mu is held.
func (l *upstreamLink) startDialLocked(ctx context.Context) *dialFlight {
	// The dial serves every caller that waits on it: the one that started
	// it leaving (its track ended) must not cancel it; close does.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), upstreamDialWait)
	f := &dialFlight{done: make(chan struct{}), cancel: cancel, started: time.Now()}
	if l.flights == nil {
		l.flights = make(map[*dialFlight]struct{})
	}
	l.flights[f] = struct{}{}
	l.flight = f
	u := l.urls[l.next%len(l.urls)]
	l.next++
	go l.dial(dctx, f, u)
	return f
}

// dial runs flight f: it dials u and records the session, or the error.
// A dial that connects after another one did hands over that session and
// closes its own.
func (l *upstreamLink) dial(ctx context.Context, f *dialFlight, u string) {
	// The URL dialled carries a fresh token; logs show u, without it.
	du, err := upstreamDialURL(l.auth, u)
	var s *client.Session
	if err == nil {
		if l.dialFn != nil {
			s, err = l.dialFn(ctx, du)
		} else {
			s, err = client.Dial(ctx, du, &client.Options{Logger: l.logger})
		}
	}
	f.cancel()
	if err != nil {
		err = fmt.Errorf("upstream %s: %w", u, err)
	}
	var late *client.Session // not kept: dialled after close, or after another dial
	l.mu.Lock()
	delete(l.flights, f)
	if l.flight == f {
		l.flight = nil
	}
	switch {
	case err != nil:
	case l.closed:
		late, s, err = s, nil, errLinkClosed
	case l.liveLocked() != nil:
		late, s = s, l.cur
	default:
		l.logger.Info("upstream connected", "url", u, "dial", time.Since(f.started).Round(time.Millisecond))
		l.cur = s
		if l.changed != nil {
			close(l.changed)
			l.changed = nil
		}
	}
	l.mu.Unlock()
	if late != nil {
		_ = late.Close()
	}
	f.s, f.err = s, err
	close(f.done)
}

// connected reports whether an upstream session is up.
func (l *upstreamLink) connected() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return false
	}
	select {
	case <-l.cur.Done():
		return false
	default:
		return true
	}
}

func (l *upstreamLink) close() {
	l.mu.Lock()
	l.closed = true
	cur := l.cur
	l.cur = nil
	for f := range l.flights {
		f.cancel()
	}
	if l.probing != nil {
		l.probing.cancel()
	}
	l.mu.Unlock()
	if cur != nil {
		_ = cur.Close()
	}
}

// probe checks that sess, a link session, still reaches a live upstream
// (see upstreamSilence); when it does not, the session is closed and err
// says why. One probe at a time per session; a success stands for
// upstreamSilence.
func (l *upstreamLink) probe(ctx context.Context, sess *client.Session) error {
	l.mu.Lock()
	if l.probedFor == sess && time.Since(l.probedOK) < upstreamSilence {
		l.mu.Unlock()
		return nil
	}
	f := l.probing
	if f == nil || f.sess != sess {
		pctx, cancel := context.WithTimeout(context.Background(), upstreamProbeWait)
		f = &probeFlight{sess: sess, done: make(chan struct{}), cancel: cancel}
		l.probing = f
		go l.runProbe(pctx, f)
	}
	l.mu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *upstreamLink) runProbe(ctx context.Context, f *probeFlight) {
	ann, err := f.sess.Announced(ctx, probePrefix)
	f.cancel()
	if err == nil {
		ann.Close()
	}
	l.mu.Lock()
	if l.probing == f {
		l.probing = nil
	}
	if err == nil {
		l.probedFor, l.probedOK = f.sess, time.Now()
	} else if l.cur == f.sess {
		l.cur = nil
	}
	l.mu.Unlock()
	if err != nil {
		l.logger.Warn("upstream link silent and its probe failed; re-dialling", "err", err)
		_ = f.sess.Close()
		err = fmt.Errorf("upstream link probe: %w", err)
	}
	f.err = err
	close(f.done)
}

// nextUpstreamGroup is sub.NextGroup that probes the link sess whenever
// t has been silent for upstreamSilence; a failed probe ends the session,
// and so the subscription.
func (s *Server) nextUpstreamGroup(t *track, sub *client.Subscription, sess *client.Session) (*client.GroupReader, error) {
	for {
		ctx, cancel := context.WithTimeout(t.ctx, upstreamSilence)
		gr, err := sub.NextGroup(ctx)
		cancel()
		if err == nil || t.ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			return gr, err
		}
		if err := s.link.probe(t.ctx, sess); err != nil {
			return nil, err
		}
	}
}

// remoteBroadcastLocked returns the pulled broadcast for path, creating it;
// s.mu is held.
func (s *Server) remoteBroadcastLocked(path string) *broadcast {
	b := s.remote[path]
	if b == nil {
		b = &broadcast{path: path, suffix: path, tracks: make(map[string]*track)}
		s.remote[path] = b
	}
	return b
}

// runRemote keeps t's upstream subscription alive until t ends.
func (s *Server) runRemote(t *track) {
	if fault() == FaultNoForward { // a bad build (fault.go): pulls nothing
		<-t.ctx.Done()
		return
	}
	log := s.logger.With("broadcast", t.b.path, "track", t.name)
	delay := upstreamBackoffMin
	everOK := false
	for t.ctx.Err() == nil {
		sess, err := s.link.session(t.ctx)
		if err == nil {
			var ok bool
			ok, err = s.pullRemote(t, sess)
			switch {
			case ok:
				everOK = true
				delay = upstreamBackoffMin
			case !everOK && !isDone(sess.Done()) && t.ctx.Err() == nil:
				// The upstream is up and refused the first subscription:
				// there is no such broadcast anywhere. Logged at Info
				// pullLogsPerSecond at most (subscribe.go).
				level := slog.LevelDebug
				if s.pullLogs.Allow() {
					level = slog.LevelInfo
				}
				log.Log(t.ctx, level, "upstream refused subscription", "err", err)
				return
			}
		}
		if t.ctx.Err() != nil {
			return
		}
		log.Info("upstream subscription lost; retrying", "err", err, "in", delay)
		wait := delay/2 + rand.N(delay/2+1)
		tm := time.NewTimer(wait)
		select {
		case <-tm.C:
		case <-t.ctx.Done():
			tm.Stop()
			return
		}
		delay = min(delay*2, upstreamBackoffMax)
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// pullRemote subscribes to t upstream and feeds its groups into t until
// the subscription or t ends. ok reports whether the upstream accepted.
func (s *Server) pullRemote(t *track, sess *client.Session) (ok bool, err error) {
	sub, err := sess.Subscribe(t.ctx, t.b.path, t.name)
	if err != nil {
		return false, err
	}
	defer sub.Close()
	s.counters.upstreamSubscribes.Add(1)
	// Sequences may restart with a new publisher: forget the old newest.
	t.mu.Lock()
	old := t.latest
	t.latest = nil
	t.mu.Unlock()
	if old != nil {
		old.finish(errTrackEnded)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	c := &s.counters
	// Each group is handed to the track once the one before it was
	// (handed: closed then), or handOrderWait after its first frame came,
	// so that listeners get them in the order the upstream sent them,
	// though each is read by a goroutine of its own.
	handed := make(chan struct{})
	close(handed)
	for {
		gr, err := s.nextUpstreamGroup(t, sub, sess)
		if err != nil {
			return true, err
		}
		c.groupsIn.Add(1)
		g := newGroup(gr.Sequence)
		prev, mine := handed, make(chan struct{})
		handed = mine
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop := context.AfterFunc(t.ctx, gr.Abort)
			defer stop()
			started := false // as in readGroup: hand over with the first frame
			afterPrev := func() {
				select {
				case <-prev:
					return
				default:
				}
				tm := time.NewTimer(handOrderWait)
				defer tm.Stop()
				select {
				case <-prev:
				case <-t.ctx.Done():
				case <-tm.C: // the one before is stuck: not this one too
				}
			}
			defer func() {
				if !started {
					afterPrev()
					t.startGroup(g)
					close(mine)
				}
				t.wakeAll()
			}()
			for {
				frame, err := gr.ReadFrame()
				if err != nil {
					if errors.Is(err, io.EOF) {
						err = nil
					}
					g.finish(err)
					return
				}
				if !g.append(frame) {
					gr.Abort()
					return
				}
				if !started {
					afterPrev()
					c.frameIn(t, g, len(frame), &started)
					close(mine)
					continue
				}
				c.frameIn(t, g, len(frame), &started)
			}
		}()
	}
}

// RunUpstreamAnnounces mirrors the upstream's announcements to this relay's
// announce watchers, so that a listener can wait for a broadcast on an edge
// as it would on the origin, until ctx ends. It keeps the upstream session
// up, re-dialling with backoff. Relay runs it when there are upstreams.
// What the upstream announced stays announced here across a reconnection
// until the new session's initial list lacks it.
func (s *Server) RunUpstreamAnnounces(ctx context.Context) {
	if s.link == nil {
		return
	}
	delay := upstreamBackoffMin
	for ctx.Err() == nil {
		sess, err := s.link.session(ctx)
		if err == nil {
			var got bool
			got, err = s.mirrorAnnounces(ctx, sess)
			if got {
				delay = upstreamBackoffMin
			}
		}
		if ctx.Err() != nil {
			return
		}
		s.logger.Debug("upstream announcements lost; retrying", "err", err, "in", delay)
		tm := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			return
		}
		delay = min(delay*2, upstreamBackoffMax)
	}
}

func (s *Server) mirrorAnnounces(ctx context.Context, sess *client.Session) (bool, error) {
	ann, err := sess.Announced(ctx, "")
	if err != nil {
		return false, err
	}
	defer ann.Close()
	stop := context.AfterFunc(ctx, ann.Close)
	defer stop()
	// The initial list comes first, then changes. Anything announced
	// before that the new list lacks has ended.
	initial := map[string]bool{}
	for _, p := range ann.Initial() {
		initial[bpath.Clean(p)] = true
	}
	s.mu.Lock()
	for p := range s.upstreamAnnounced {
		if !initial[p] {
			s.setUpstreamAnnouncedLocked(p, false)
		}
	}
	for p := range initial {
		s.setUpstreamAnnouncedLocked(p, true)
	}
	s.mu.Unlock()
	for {
		a, err := ann.Next(ctx)
		if err != nil {
			return true, err
		}
		s.mu.Lock()
		s.setUpstreamAnnouncedLocked(bpath.Clean(a.Path), a.Active)
		s.mu.Unlock()
	}
}

// setUpstreamAnnouncedLocked records an upstream announcement and tells
// the watchers, unless a local publisher already answers for the path;
// s.mu is held.
func (s *Server) setUpstreamAnnouncedLocked(path string, active bool) {
	if s.upstreamAnnounced[path] == active {
		return
	}
	if active {
		s.upstreamAnnounced[path] = true
	} else {
		delete(s.upstreamAnnounced, path)
	}
	if s.broadcasts[path] == nil {
		s.notifyLocked(path, active)
	}
}

// upstreamTokenTTL is how long a cluster link's own token is valid: it is
// signed afresh for every dial, and checked only at connect.
const upstreamTokenTTL = time.Hour

// upstreamDialURL returns rawURL with a fresh ?jwt= token signed by auth's
// link key (else its signing key) that may subscribe to everything (an
// edge pulls any broadcast from its origin), or rawURL itself without
// auth. Its lifetime, upstreamTokenTTL, is within any relay's maximum.
// The result holds a secret: never log it.
func upstreamDialURL(auth *Authenticator, rawURL string) (string, error) {
	if auth == nil {
		return rawURL, nil
	}
	now := auth.now()
	id, err := NewTokenID()
	if err != nil {
		return "", err
	}
	tok, err := auth.signLink(Claims{Get: []string{""}, IssuedAt: now.Unix(), Expires: now.Add(upstreamTokenTTL).Unix(), ID: id, Link: true})
	if err != nil {
		return "", err
	}
	return client.WithToken(rawURL, tok)
}
