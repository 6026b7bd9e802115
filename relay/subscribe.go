package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"

	"github.com/relayfleet/relayfleet/relay/internal/bpath"
)

var errNotFound = errors.New("broadcast not found")

// unsubscribeGrace is how long the relay waits for a publisher to close its
// side of a subscription the relay ended, before it stops reading.
const unsubscribeGrace = 2 * time.Second

// Upstream pulls started by anonymous subscribes. On a relay with
// upstreams, the first subscriber of a track nobody publishes here starts
// an upstream subscription (a goroutine, a stream to the upstream, a log
// line when the upstream refuses it). Under a public prefix that costs an
// attacker nothing but a name, so a session without a token (on a relay
// that checks tokens) may start anonPullBurst pulls at once and
// anonPullsPerSecond after that, and all such sessions together
// unknownPullBurst and unknownPullsPerSecond of broadcasts the upstream
// does not announce. A subscribe over either limit is refused at once as
// not found (counted and logged as an overloaded refusal, rate-limited as
// refusals are). A listener subscribes to a track or two of a broadcast
// the upstream announces: within its own burst, and not counted globally.
const (
	anonPullBurst         = 8
	anonPullsPerSecond    = 2.0
	unknownPullBurst      = 32
	unknownPullsPerSecond = 8.0
)

// pullLogsPerSecond caps the Info lines of upstream subscriptions the
// upstream refused (runRemote); past it they are logged at Debug.
const pullLogsPerSecond = 10

// Causes of a throttled subscribe, as logged (cause=).
const (
	causePullsSession = "upstream pulls per session"
	causePullsUnknown = "upstream pulls of unknown broadcasts"
)

// pullThrottled is attach's error for a subscribe over a pull limit.
type pullThrottled struct{ cause string }

func (e *pullThrottled) Error() string { return "throttled: " + e.cause }

// mayPullLocked says why sess may not start an upstream pull of the
// broadcast path now (nil when it may); s.mu is held.
func (s *Server) mayPullLocked(sess *session, path string) error {
	if s.auth == nil || !sess.anonymous {
		return nil
	}
	if sess.pulls == nil {
		sess.pulls = rate.NewLimiter(anonPullsPerSecond, anonPullBurst)
	}
	if !sess.pulls.Allow() {
		return &pullThrottled{causePullsSession}
	}
	if !s.upstreamAnnounced[path] && !s.unknownPulls.Allow() {
		return &pullThrottled{causePullsUnknown}
	}
	return nil
}

// serveSubscribe runs one downstream subscription until the client ends it,
// the track ends or the session ends.
func (sess *session) serveSubscribe(ctx context.Context, st transport.Stream, m *moqlite.Subscribe) error {
	s := sess.srv
	path := bpath.Join(sess.root, bpath.Clean(m.Broadcast))
	log := sess.log.With("broadcast", path, "track", m.Track, "id", m.ID)
	if !sess.perms.CanSubscribe(path) {
		s.refused.refuse(ReasonForbidden, sess.via, sess.t.RemoteAddr().String(), "op", "subscribe", "broadcast", path)
		st.CancelWrite(codeUnauthorized)
		st.CancelRead(codeUnauthorized)
		return fmt.Errorf("subscribe %s: %w", path, ErrUnauthorized)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub := newSubscriber(s, sess, m.ID, ctx)
	t, err := s.attach(path, m.Track, m.Priority, sub)
	if pt, ok := errors.AsType[*pullThrottled](err); ok {
		s.refused.refuse(ReasonOverloaded, sess.via, sess.t.RemoteAddr().String(), "op", "subscribe", "broadcast", path, "cause", pt.cause)
	}
	if err != nil {
		st.CancelWrite(codeNotFound)
		st.CancelRead(codeNotFound)
		return fmt.Errorf("subscribe %s/%s: %w", path, m.Track, err)
	}
	s.counters.subscribers.Add(1)
	defer s.counters.subscribers.Add(-1)
	defer s.detach(t, sub)
	log.Debug("subscribed")

	if _, err := st.Write(moqlite.AppendMessage(nil, &moqlite.SubscribeOk{})); err != nil {
		return fmt.Errorf("write subscribe ok: %w", err)
	}
	// The client may send SUBSCRIBE_UPDATE; it ends the subscription by
	// closing or resetting its side. This goroutine reads them; the end of
	// the track stops the read (no second goroutine per subscription).
	var trackEnded atomic.Bool
	stopTrack := context.AfterFunc(t.ctx, func() {
		trackEnded.Store(true)
		_ = st.Close() // FIN: the track is over
		st.CancelRead(codeOK)
	})
	defer stopTrack()
	for {
		var u moqlite.SubscribeUpdate
		err := moqlite.ReadMessage(st, &u)
		if err == nil {
			continue
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case trackEnded.Load():
			log.Debug("track ended")
			return nil
		}
		if err == io.EOF {
			err = nil
		}
		cancel()
		_ = st.Close()
		log.Debug("unsubscribed", "err", err)
		return nil
	}
}

// attach finds or creates the track and adds sub to it, starting the
// upstream subscription when this is the track's first subscriber.
func (s *Server) attach(path, name string, priority uint8, sub *subscriber) (*track, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hb := s.heartbeat; hb != nil && path == HeartbeatPath {
		if name != HeartbeatTrack || !hb.addSubscriber(sub) {
			return nil, errNotFound
		}
		return hb, nil
	}
	b := s.broadcasts[path]
	if b == nil {
		if len(s.links) == 0 {
			return nil, errNotFound
		}
		b = s.remote[path] // nil until its first track is pulled
	}
	var t *track
	if b != nil {
		t = b.tracks[name]
	}
	if t == nil && (b == nil || b.owner == nil) {
		// Pulled from upstream; it lives as long as it has subscribers.
		if err := s.mayPullLocked(sub.sess, path); err != nil {
			return nil, err
		}
		if b == nil {
			b = s.remoteBroadcastLocked(path)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t = &track{b: b, name: name, ctx: ctx, cancel: cancel, subs: make(map[*subscriber]struct{}), knownUpstream: s.upstreamAnnounced[path]}
		b.tracks[name] = t
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.runRemote(t)
			s.endTrack(t)
		}()
	} else if t == nil {
		pub := b.owner
		ctx, cancel := context.WithCancel(pub.ctx)
		t = &track{b: b, name: name, upstreamID: b.nextID, ctx: ctx, cancel: cancel, subs: make(map[*subscriber]struct{})}
		b.nextID++
		b.tracks[name] = t
		pub.mu.Lock()
		pub.upstream[t.upstreamID] = t
		pub.mu.Unlock()
		pub.startAcceptUni() // its group streams
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.runUpstream(t, priority)
		}()
	}
	if !t.addSubscriber(sub) {
		return nil, errNotFound
	}
	return t, nil
}

// detach removes sub; the last subscriber to leave ends the upstream
// subscription.
func (s *Server) detach(t *track, sub *subscriber) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.removeSubscriber(sub) && !t.local {
		s.forgetTrackLocked(t)
		t.cancel()
	}
}

// forgetTrackLocked removes t from its broadcast, and a pulled broadcast
// left without tracks from the registry; s.mu is held.
func (s *Server) forgetTrackLocked(t *track) {
	if t.b.tracks[t.name] == t {
		delete(t.b.tracks, t.name)
	}
	if t.b.owner == nil && len(t.b.tracks) == 0 && s.remote[t.b.path] == t.b {
		delete(s.remote, t.b.path)
	}
}

// endTrack ends a pulled track: its subscribers end and its newest group
// is released.
func (s *Server) endTrack(t *track) {
	s.mu.Lock()
	s.forgetTrackLocked(t)
	s.mu.Unlock()
	t.cancel()
	t.mu.Lock()
	latest := t.latest
	t.latest = nil
	t.mu.Unlock()
	if latest != nil {
		latest.finish(errTrackEnded)
	}
}

// runUpstream subscribes to the publisher for t and keeps the subscription
// until t is cancelled or the publisher ends it.
func (s *Server) runUpstream(t *track, priority uint8) {
	pub := t.b.owner
	log := pub.log.With("broadcast", t.b.path, "track", t.name, "upstream_id", t.upstreamID)
	err := s.subscribeUpstream(t, priority)
	if err != nil && t.ctx.Err() == nil {
		log.Info("upstream subscription ended", "err", err)
	}
	// Make sure the track is gone from the registry and its subscribers end.
	s.mu.Lock()
	if t.b.tracks[t.name] == t {
		delete(t.b.tracks, t.name)
	}
	s.mu.Unlock()
	t.cancel()
	pub.mu.Lock()
	delete(pub.upstream, t.upstreamID)
	pub.mu.Unlock()
	t.mu.Lock()
	latest := t.latest
	t.latest = nil
	t.mu.Unlock()
	if latest != nil {
		latest.finish(errTrackEnded)
	}
}

func (s *Server) subscribeUpstream(t *track, priority uint8) error {
	ctx := t.ctx
	st, err := t.b.owner.t.OpenStream(ctx)
	if err != nil {
		return fmt.Errorf("open upstream subscribe: %w", err)
	}
	var grace *time.Timer
	var graceMu sync.Mutex
	stop := context.AfterFunc(ctx, func() {
		// A FIN ends the subscription cleanly: @moq/lite publishers answer
		// with their own FIN. Stop reading if one does not in time.
		_ = st.Close()
		graceMu.Lock()
		grace = time.AfterFunc(unsubscribeGrace, func() { st.CancelRead(codeCancelled) })
		graceMu.Unlock()
	})
	defer func() {
		if !stop() {
			graceMu.Lock()
			if grace != nil {
				grace.Stop()
			}
			graceMu.Unlock()
		}
	}()
	b := moqlite.AppendVarint(nil, moqlite.StreamSubscribe)
	b = moqlite.AppendMessage(b, &moqlite.Subscribe{ID: t.upstreamID, Broadcast: t.b.suffix, Track: t.name, Priority: priority})
	if _, err := st.Write(b); err != nil {
		return fmt.Errorf("write upstream subscribe: %w", err)
	}
	var ok moqlite.SubscribeOk
	if err := moqlite.ReadMessage(st, &ok); err != nil {
		return fmt.Errorf("read upstream subscribe ok: %w", err)
	}
	// Nothing more arrives on the stream in lite-02 until the publisher ends it.
	_, err = io.Copy(io.Discard, st)
	if err == nil {
		err = io.EOF
	}
	return err
}
