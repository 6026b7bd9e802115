package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/relayfleet/relayfleet/relay/client"

	"github.com/relayfleet/relayfleet/relay/internal/bpath"
)

// Cluster links: a relay with upstreams pulls broadcasts it does not
// publish locally from them. The first local subscriber to a track starts
// one upstream subscription for it (per process, however many listeners),
// over the shared client session (link) to one upstream; the last one to
// leave ends it. Each upstream URL has a link of its own. When the upstream
// goes away the track stays, its listeners stay connected, and the relay
// subscribes on the next upstream at once (see failoverSilence), or, once
// every upstream failed in a row, re-dials and re-subscribes with
// exponential backoff (with jitter, between upstreamBackoffMin and
// upstreamBackoffMax) until it succeeds or the last listener leaves. Each
// link carries an announce interest, so local listeners see the upstreams'
// broadcasts announced (RunUpstreamAnnounces).
//
// upstreamBackoffMax is short: an edge waits for its origins' return
// (every origin down at once) at most 0.5-1 s before its next try, so
// its listeners, who stay subscribed meanwhile, hear audio again within
// about a second of an origin's return (issue 32: within 3 s; the
// listeners that gave up meanwhile come back on their own backoff, at
// most 2 s). A dial to a dead origin that gets no answer is followed by
// the next at once (errNoAnswer): a link sends it about 2 Initials a
// second. A pull waiting out its backoff retries at once when an origin
// announces the broadcast or a link to one connects (retryWait).

const (
	upstreamBackoffMin = 100 * time.Millisecond
	upstreamBackoffMax = time.Second
	// upstreamDialWait bounds one link dial. A QUIC dial to an upstream
	// that is down retransmits its Initial ever more slowly (its PTO
	// doubles): a dial kept for 5 s sent its last packet seconds before
	// an origin's return and connected 3.6 s after it (TestReconnectStorm-
	// Bounded). Given up after 1.5 s, the next dial (after the backoff)
	// starts its schedule afresh. A healthy handshake takes a round trip
	// or two, far less, even between regions.
	upstreamDialWait = 1500 * time.Millisecond
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
// upstreamProbeWait ends it too. Either way the link re-dials, and the
// track re-subscribes (on the next upstream, with several). A live upstream answers in a round
// trip, and the answer stands for upstreamSilence: probes are shared by
// every track of the link.
const (
	upstreamSilence   = time.Second
	upstreamProbeWait = 2 * time.Second
	probePrefix       = "relayfleet-link-probe/00000000000000000000000000000000"
)

var errLinkClosed = errors.New("upstream link closed")

// errNoAnswer: a link dial ran its whole upstreamDialWait without an
// answer (the upstream is down or cut off). Its Initials were sent ever
// more slowly, the last about 0.6 s before it gave up: the next dial
// starts at once (runLinkAnnounces), so that an upstream's return is
// answered within about 0.6 s, not after that and a backoff too (up to
// 1.6 s without a packet). A dead upstream gets a dial every 1.5 s per
// link, each a QUIC Initial or three (about 2 a second, 2.4 kB/s).
var errNoAnswer = errors.New("no answer")

// handOrderWait bounds how long a pulled group whose first frame came
// waits for the group before it to be handed to the listeners first
// (groupFeeder): a group the upstream sent earlier whose first frame is
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
	// onConnect, if set, is called when a dial sets the link's session.
	onConnect func()

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

	// pulledGroups and pulledBytes count the groups and frame payload
	// bytes pulled over this link (every track, every session of it):
	// between regions, the long-haul traffic (relay_upstream_bytes_total).
	pulledGroups, pulledBytes atomic.Int64
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
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
	f.cancel()
	switch {
	case err != nil && timedOut:
		err = fmt.Errorf("upstream %s: %w within %v: %w", u, errNoAnswer, upstreamDialWait, err)
	case err != nil:
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
	if err == nil && late == nil && l.onConnect != nil {
		l.onConnect()
	}
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

// Failover between origins. With several upstreams the edge keeps a link
// to each (one per URL; RunUpstreamAnnounces keeps every one dialled, so
// a switch costs a SUBSCRIBE round trip, no handshake) and pulls each
// track from one of them, the current pull. When the current pull's link
// dies, the next upstream's pull replaces it at once. When the track goes
// silent for failoverSilence (no group start and no frame), the edge
// subscribes on the next upstream as a standby, beside the current pull,
// and probes the current link (upstreamProbeWait; a failed probe ends its
// session, so its pull). The first of the two to deliver a group newer
// than every group already handed to the listeners becomes the current
// pull; the other is ended. Listeners stay subscribed to the edge's
// track throughout and hear at most the gap: the pull that takes over
// hands on only groups newer than every one delivered (seqFilter), so
// none comes twice and the switch never goes back.
//
// failoverSilence is 400 ms: audio frames come every 20 to 120 ms, so a
// healthy track is silent that long only after three lost frames in a
// row at the longest frame time; and a false alarm costs no gap or
// duplicate, only a standby subscription that takes over when it is
// ahead, and is dropped otherwise. A track whose frames come further
// apart (a publisher of one group a second) waits three of its own
// frame intervals instead. The edge stays on the upstream it failed over
// to when the first one comes back (no second switch, so no second
// gap); every track starts on the upstream the edge last failed over to.
const (
	failoverSilence = 400 * time.Millisecond
	// restartSlack is how far back (in groups) a new subscription's first
	// sequence may be from the last one delivered and still be a copy of
	// what was delivered, not a publisher that started again from 0.
	restartSlack = 64
	// restartQuiet: a new subscription's first group at or behind the
	// last one delivered, when nothing was delivered for this long, is a
	// publisher that started again too (within restartSlack of 0: an
	// origin and its publisher back after an outage of any length, whose
	// groups waited until their sequence passed the old one: 2.2 s more
	// silence in TestReconnectStormBounded). A standby's copy of the live
	// stream comes within a group of the silence that started it
	// (failoverSilence), far sooner.
	restartQuiet = time.Second
)

// pull is one subscription to one upstream for a track.
type pull struct {
	idx    int // into Server.links
	ctx    context.Context
	cancel context.CancelFunc
	sess   *client.Session // set once subscribed

	floor    uint64 // groups up to this were delivered before it took over (hasFloor)
	hasFloor bool
}

// pullEvent is what a pull's goroutine reports to runRemote.
type pullEvent struct {
	p          *pull
	sess       *client.Session
	subscribed bool
	gr         *client.GroupReader
	err        error
	refused    bool // the upstream was up and refused the subscription
}

// seqFilter decides which pulled groups go to the listeners: none whose
// sequence was delivered already. A pull that has not delivered yet (a
// standby, or the next upstream's after a failure) passes only groups
// newer than every one delivered, so a switch never repeats or goes back;
// once it delivers, it passes whatever is newer than what was delivered
// before it took over, in the order its upstream sends them (as with one
// upstream: a group whose stream opened late still comes).
type seqFilter struct {
	any  bool
	last uint64
	at   time.Time // when last was delivered
	src  *pull     // the pull that delivered last
}

// accept reports whether group seq of pull p goes to the listeners, and
// records it, at now. A sequence far behind the last one delivered, or
// behind it after restartQuiet without a group, first on a pull, is a
// publisher that started again (restarted).
func (f *seqFilter) accept(p *pull, seq uint64, now time.Time) (ok, restarted bool) {
	if p != f.src {
		switch {
		case !f.any || seq > f.last:
			p.floor, p.hasFloor = f.last, f.any
		case f.last-seq > restartSlack || now.Sub(f.at) >= restartQuiet:
			p.hasFloor, restarted = false, true
		default:
			return false, false
		}
		f.src = p
	} else if p.hasFloor && seq <= p.floor {
		return false, false
	}
	if !f.any || seq > f.last || restarted {
		f.any, f.last = true, seq
	}
	f.at = now
	return true, restarted
}

// startPull subscribes to t on upstream idx in a goroutine of its own
// (wg) that reports to events until the pull's context ends.
func (s *Server) startPull(t *track, idx int, events chan<- pullEvent, wg *sync.WaitGroup) *pull {
	ctx, cancel := context.WithCancel(t.ctx)
	p := &pull{idx: idx, ctx: ctx, cancel: cancel}
	wg.Add(1)
	go func() {
		defer wg.Done()
		send := func(ev pullEvent) bool {
			ev.p = p
			select {
			case events <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		sess, err := s.links[idx].session(ctx)
		if err != nil {
			send(pullEvent{err: err})
			return
		}
		sub, err := sess.Subscribe(ctx, t.b.path, t.name)
		if err != nil {
			send(pullEvent{sess: sess, err: err, refused: ctx.Err() == nil && !isDone(sess.Done())})
			return
		}
		defer sub.Close()
		s.counters.upstreamSubscribes.Add(1)
		if !send(pullEvent{sess: sess, subscribed: true}) {
			return
		}
		for {
			gr, err := sub.NextGroup(ctx)
			if err != nil {
				send(pullEvent{sess: sess, err: err})
				return
			}
			if !send(pullEvent{gr: gr}) {
				gr.Abort()
				return
			}
		}
	}()
	return p
}

// runRemote pulls t from the upstreams until t ends, failing over
// between them (see failoverSilence); with one upstream, it re-dials and
// re-subscribes with backoff, probing the link when the track is silent
// for upstreamSilence.
func (s *Server) runRemote(t *track) {
	if fault() == FaultNoForward { // a bad build (fault.go): pulls nothing
		<-t.ctx.Done()
		return
	}
	log := s.logger.With("broadcast", t.b.path, "track", t.name)
	n := len(s.links)
	events := make(chan pullEvent)
	var pulls, groups sync.WaitGroup
	var cur, standby *pull
	defer func() {
		for _, p := range []*pull{cur, standby} {
			if p != nil {
				p.cancel()
			}
		}
		pulls.Wait()
		groups.Wait()
		t.upstream.Store(0)
	}()
	feed := s.groupFeeder(t, &groups)
	var filter seqFilter
	quiet := failoverSilence
	if n == 1 {
		quiet = upstreamSilence
	}
	silence := time.NewTimer(quiet)
	defer silence.Stop()
	rearm := func(d time.Duration) {
		silence.Stop()
		select {
		case <-silence.C:
		default:
		}
		silence.Reset(d)
	}
	next := func(idx int) int { return (idx + 1) % n }

	delay := upstreamBackoffMin
	everOK := false
	refused, failed := 0, 0
	cur = s.startPull(t, int(s.preferred.Load())%n, events, &pulls)
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-silence.C:
			wait := quiet
			if n > 1 {
				wait = max(failoverSilence, 3*time.Duration(t.activeGap.Load()))
			}
			if idle := time.Since(time.Unix(0, t.lastActive.Load())); t.lastActive.Load() != 0 && idle < wait {
				rearm(wait - idle)
				continue
			}
			if cur.sess != nil {
				l, sess := s.links[cur.idx], cur.sess
				go func() { _ = l.probe(t.ctx, sess) }() // a failed one ends cur
			}
			// A standby, if there is none; with more than two upstreams,
			// one that delivered nothing moves on to the next.
			if n > 1 && (standby == nil || n > 2) {
				to := next(cur.idx)
				if standby != nil {
					standby.cancel()
					if to = next(standby.idx); to == cur.idx {
						to = next(to)
					}
				}
				standby = s.startPull(t, to, events, &pulls)
				log.Debug("track silent; subscribing on the standby upstream", "current", s.links[cur.idx].urls[0], "standby", s.links[to].urls[0])
			}
			rearm(wait)
		case ev := <-events:
			p := ev.p
			if p != cur && p != standby {
				if ev.gr != nil {
					ev.gr.Abort()
				}
				continue
			}
			switch {
			case ev.subscribed:
				p.sess = ev.sess
				everOK = true
				if p == cur {
					t.upstream.Store(int32(p.idx) + 1)
				}
			case ev.gr != nil:
				ok, restarted := filter.accept(p, ev.gr.Sequence, time.Now())
				if !ok {
					ev.gr.Abort()
					continue
				}
				if restarted {
					t.forgetLatest()
				}
				if p == standby { // it is ahead: it takes over
					log.Info("failed over to upstream", "from", s.links[cur.idx].urls[0], "to", s.links[p.idx].urls[0], "group", ev.gr.Sequence)
					cur.cancel()
					cur, standby = p, nil
					s.counters.upstreamFailovers.Add(1)
					s.preferred.Store(int32(p.idx))
					t.upstream.Store(int32(p.idx) + 1)
				}
				failed, refused, delay = 0, 0, upstreamBackoffMin
				t.markActive()
				rearm(quiet)
				feed(p, ev.gr)
			case p == standby:
				standby.cancel()
				standby = nil
			default: // the current pull ended
				cur.cancel()
				if ev.refused && !everOK && !t.knownUpstream {
					// Every upstream was up and refused the first
					// subscription: there is no such broadcast anywhere.
					// Logged at Info pullLogsPerSecond at most
					// (subscribe.go).
					if refused++; refused >= n {
						level := slog.LevelDebug
						if s.pullLogs.Allow() {
							level = slog.LevelInfo
						}
						log.Log(t.ctx, level, "upstream refused subscription", "err", ev.err)
						return
					}
				}
				if standby != nil {
					log.Info("upstream subscription lost; the standby takes over", "err", ev.err, "to", s.links[standby.idx].urls[0])
					cur, standby = standby, nil
					if cur.sess != nil {
						t.upstream.Store(int32(cur.idx) + 1)
					}
					s.preferred.Store(int32(cur.idx))
					continue
				}
				// The next upstream at once; once every one failed in a
				// row, with backoff, cut short when an upstream announces
				// the broadcast (see retryWait).
				to := cur.idx
				if n > 1 {
					to = next(cur.idx)
				}
				if failed++; failed >= n {
					failed = 0
					log.Info("upstream subscription lost; retrying", "err", ev.err, "in", delay)
					i, ok := s.retryWait(t, delay/2+rand.N(delay/2+1))
					if !ok {
						return
					}
					if i >= 0 {
						log.Info("upstream announced the broadcast; retrying now", "upstream", s.links[i].urls[0])
						to = i
					}
					delay = min(delay*2, upstreamBackoffMax)
				} else {
					log.Info("upstream subscription lost; trying the next upstream", "err", ev.err, "to", s.links[to].urls[0])
				}
				if n > 1 {
					s.preferred.Store(int32(to))
				}
				cur = s.startPull(t, to, events, &pulls)
				rearm(quiet)
			}
		}
	}
}

// wakeRetriesLocked wakes the pulls waiting to retry (retryWait); s.mu
// is held.
func (s *Server) wakeRetriesLocked() {
	if s.linkAnnounce != nil {
		close(s.linkAnnounce)
		s.linkAnnounce = nil
	}
}

// linkConnected is every link's onConnect: pulls waiting to retry look
// again.
func (s *Server) linkConnected() {
	s.mu.Lock()
	s.wakeRetriesLocked()
	s.mu.Unlock()
}

// linkAnnounceWait returns a channel closed when an upstream next
// announces a broadcast it did not announce before, or a link connects.
func (s *Server) linkAnnounceWait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.linkAnnounce == nil {
		s.linkAnnounce = make(chan struct{})
	}
	return s.linkAnnounce
}

// readyLink is the first upstream whose link is up and that announces
// path (or announced it before its link went down), or -1.
func (s *Server) readyLink(path string) int {
	for i, l := range s.links {
		s.mu.Lock()
		announced := s.linkAnnounced[i][path]
		s.mu.Unlock()
		if announced && l.connected() {
			return i
		}
	}
	return -1
}

// retryWait waits d, or less: until an upstream that announces t's
// broadcast is reachable again (its link connected, or it announced the
// broadcast anew: an origin that came back before its publisher did, now
// with it). It returns that upstream, or -1 after d, and false when t
// ended.
func (s *Server) retryWait(t *track, d time.Duration) (int, bool) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	wake := s.linkAnnounceWait()
	for {
		select {
		case <-tm.C:
			return -1, true
		case <-t.ctx.Done():
			return -1, false
		case <-wake:
			wake = s.linkAnnounceWait()
			if i := s.readyLink(t.b.path); i >= 0 {
				return i, true
			}
		}
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

// markActive records that a group or frame of t came now (the silence
// timer of runRemote reads it).
func (t *track) markActive() {
	now := time.Now().UnixNano()
	if prev := t.lastActive.Swap(now); prev != 0 {
		t.activeGap.Store(now - prev)
	}
}

// forgetLatest drops t's newest group: the publisher started its
// sequence again, and a late joiner must not start at the old one.
func (t *track) forgetLatest() {
	t.mu.Lock()
	old := t.latest
	t.latest = nil
	t.mu.Unlock()
	if old != nil {
		old.finish(errTrackEnded)
	}
}

// groupFeeder returns the function that feeds pulled groups into t, each
// read by a goroutine of its own (wg) until it ends or its pull does.
// Each group is handed to the track once the one before it was (handed:
// closed then), or handOrderWait after its first frame came, so that
// listeners get them in the order they were accepted.
func (s *Server) groupFeeder(t *track, wg *sync.WaitGroup) func(p *pull, gr *client.GroupReader) {
	c := &s.counters
	handed := make(chan struct{})
	close(handed)
	return func(p *pull, gr *client.GroupReader) {
		c.groupsIn.Add(1)
		link := s.links[p.idx]
		link.pulledGroups.Add(1)
		g := newGroup(gr.Sequence)
		prev, mine := handed, make(chan struct{})
		handed = mine
		wg.Add(1)
		go func() {
			defer wg.Done()
			stop := context.AfterFunc(p.ctx, gr.Abort)
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
				t.markActive()
				link.pulledBytes.Add(int64(len(frame)))
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

// RunUpstreamAnnounces mirrors the upstreams' announcements to this
// relay's announce watchers, so that a listener can wait for a broadcast
// on an edge as it would on the origin, until ctx ends. It keeps every
// upstream's session up, re-dialling with backoff, so that a failover
// finds the next upstream dialled (see failoverSilence). Relay runs it
// when there are upstreams. A broadcast is announced here while any
// upstream announces it; what an upstream announced stays announced
// across its reconnection until its new session's initial list lacks it.
func (s *Server) RunUpstreamAnnounces(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range s.links {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.runLinkAnnounces(ctx, i)
		}()
	}
	wg.Wait()
}

// runLinkAnnounces is RunUpstreamAnnounces for upstream i.
func (s *Server) runLinkAnnounces(ctx context.Context, i int) {
	delay := upstreamBackoffMin
	for ctx.Err() == nil {
		sess, err := s.links[i].session(ctx)
		if err == nil {
			var got bool
			got, err = s.mirrorAnnounces(ctx, i, sess)
			if got {
				delay = upstreamBackoffMin
			}
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNoAnswer) {
			continue // the dial's own wait was the backoff (errNoAnswer)
		}
		s.logger.Debug("upstream announcements lost; retrying", "upstream", s.links[i].urls[0], "err", err, "in", delay)
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

func (s *Server) mirrorAnnounces(ctx context.Context, i int, sess *client.Session) (bool, error) {
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
	for p := range s.linkAnnounced[i] {
		if !initial[p] {
			s.setLinkAnnouncedLocked(i, p, false)
		}
	}
	for p := range initial {
		s.setLinkAnnouncedLocked(i, p, true)
	}
	s.mu.Unlock()
	for {
		a, err := ann.Next(ctx)
		if err != nil {
			return true, err
		}
		s.mu.Lock()
		s.setLinkAnnouncedLocked(i, bpath.Clean(a.Path), a.Active)
		s.mu.Unlock()
	}
}

// setLinkAnnouncedLocked records upstream i's announcement of path; the
// path is announced here while any upstream announces it. s.mu is held.
func (s *Server) setLinkAnnouncedLocked(i int, path string, active bool) {
	if active {
		if !s.linkAnnounced[i][path] {
			s.wakeRetriesLocked()
		}
		s.linkAnnounced[i][path] = true
	} else {
		delete(s.linkAnnounced[i], path)
	}
	for _, m := range s.linkAnnounced {
		if m[path] {
			active = true
			break
		}
	}
	s.setUpstreamAnnouncedLocked(path, active)
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
