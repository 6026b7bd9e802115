package relay

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"

	"github.com/relayfleet/relayfleet/relay/internal/bpath"
)

// watcher is a downstream announce stream: it queues Announce updates for
// broadcasts under its prefix.
type watcher struct {
	sess   *session
	prefix string // full path prefix on this relay

	mu      sync.Mutex
	pending []moqlite.Announce
	notify  chan struct{}
}

func (w *watcher) push(a moqlite.Announce) {
	w.mu.Lock()
	w.pending = append(w.pending, a)
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (w *watcher) take() []moqlite.Announce {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending
	w.pending = nil
	return p
}

// visible reports whether w may see full path p, and its suffix.
func (w *watcher) visible(p string) (string, bool) {
	if !w.sess.perms.CanSubscribe(p) {
		return "", false
	}
	return bpath.StripPrefix(w.prefix, p)
}

// serveAnnounce answers a client's AnnounceInterest: AnnounceInit with the
// active broadcasts under the prefix, then updates until either side ends.
func (sess *session) serveAnnounce(ctx context.Context, st transport.Stream, prefix string) error {
	s := sess.srv
	w := &watcher{sess: sess, prefix: bpath.Join(sess.root, prefix), notify: make(chan struct{}, 1)}
	var init moqlite.AnnounceInit
	s.mu.Lock()
	for p := range s.broadcasts {
		if suffix, ok := w.visible(p); ok {
			init.Suffixes = append(init.Suffixes, suffix)
		}
	}
	for p := range s.upstreamAnnounced {
		if s.broadcasts[p] != nil {
			continue // listed above
		}
		if suffix, ok := w.visible(p); ok {
			init.Suffixes = append(init.Suffixes, suffix)
		}
	}
	s.watchers[w] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.watchers, w)
		s.mu.Unlock()
	}()
	sort.Strings(init.Suffixes)
	// More suffixes than one AnnounceInit may carry follow as Announces.
	b, skipped := moqlite.AppendAnnounceInit(nil, init.Suffixes)
	if skipped > 0 {
		sess.log.Warn("announce init: names too long to send left out", "count", skipped)
	}
	if _, err := st.Write(b); err != nil {
		return fmt.Errorf("write announce init: %w", err)
	}

	// The client ends its interest by closing or resetting its side.
	readDone := make(chan struct{})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(readDone)
		var buf [64]byte
		for {
			if _, err := st.Read(buf[:]); err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-readDone:
			_ = st.Close()
			return nil
		case <-w.notify:
			var b []byte
			for _, a := range w.take() {
				b = moqlite.AppendMessage(b, &a)
			}
			if _, err := st.Write(b); err != nil {
				return fmt.Errorf("write announce: %w", err)
			}
		}
	}
}

// pullAnnounces asks the client which broadcasts it publishes and keeps the
// relay's registry in step with the answers.
func (sess *session) pullAnnounces(ctx context.Context) {
	err := sess.runPullAnnounces(ctx)
	if err != nil && ctx.Err() == nil {
		sess.log.Debug("announce stream to client ended", "err", err)
	}
}

func (sess *session) runPullAnnounces(ctx context.Context) error {
	st, err := sess.t.OpenStream(ctx)
	if err != nil {
		return fmt.Errorf("open announce stream: %w", err)
	}
	stop := context.AfterFunc(ctx, func() {
		st.CancelRead(codeCancelled)
		st.CancelWrite(codeCancelled)
	})
	defer stop()
	b := moqlite.AppendVarint(nil, moqlite.StreamAnnounce)
	b = moqlite.AppendMessage(b, &moqlite.AnnounceInterest{})
	if _, err := st.Write(b); err != nil {
		return fmt.Errorf("write announce interest: %w", err)
	}
	var init moqlite.AnnounceInit
	if err := moqlite.ReadMessage(st, &init); err != nil {
		return fmt.Errorf("read announce init: %w", err)
	}
	for _, suffix := range init.Suffixes {
		sess.srv.announce(sess, bpath.Clean(suffix), true)
	}
	for {
		var a moqlite.Announce
		if err := moqlite.ReadMessage(st, &a); err != nil {
			return fmt.Errorf("read announce: %w", err)
		}
		sess.srv.announce(sess, bpath.Clean(a.Suffix), a.Active)
	}
}

// Announce limits: a session publishes at most maxSessionBroadcasts
// broadcasts at once, each path at most maxBroadcastPath bytes, so that
// what the relay holds per publisher is bounded and every name fits the
// messages it is re-announced in. Announces past them are refused,
// counted (announces_refused_total) and logged once per session.
const (
	maxSessionBroadcasts = moqlite.MaxListLen
	maxBroadcastPath     = 1024
)

// refuseAnnounceLocked counts a refused announce; s.mu is held.
func (s *Server) refuseAnnounceLocked(sess *session, path, why string) {
	s.counters.announcesRefused.Add(1)
	level := slog.LevelDebug
	if !sess.announceRefused {
		sess.announceRefused = true
		level = slog.LevelWarn
	}
	sess.log.Log(context.Background(), level, "announce refused: "+why,
		"broadcast", path[:min(len(path), 128)], "max_broadcasts", maxSessionBroadcasts, "max_path", maxBroadcastPath)
}

// announce records that sess started or stopped publishing suffix.
func (s *Server) announce(sess *session, suffix string, active bool) {
	path := bpath.Join(sess.root, suffix)
	if active && !sess.perms.CanPublish(path) {
		s.refused.refuse(ReasonForbidden, sess.via, sess.t.RemoteAddr().String(), "op", "publish", "broadcast", path)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if active && len(path) > maxBroadcastPath {
		s.refuseAnnounceLocked(sess, path, "broadcast path too long")
		return
	}
	old := s.broadcasts[path]
	if !active {
		if old != nil && old.owner == sess {
			s.removeBroadcastLocked(old)
		}
		return
	}
	if old != nil && old.owner == sess {
		return
	}
	if sess.broadcasts >= maxSessionBroadcasts {
		s.refuseAnnounceLocked(sess, path, "too many broadcasts on one session")
		return
	}
	if old != nil {
		s.removeBroadcastLocked(old) // the newest publisher wins
	}
	b := &broadcast{path: path, suffix: suffix, owner: sess, tracks: make(map[string]*track)}
	s.broadcasts[path] = b
	sess.broadcasts++
	sess.log.Info("broadcast announced", "broadcast", path)
	if !s.upstreamAnnounced[path] {
		s.notifyLocked(path, true)
	}
}

func (s *Server) notifyLocked(path string, active bool) {
	for w := range s.watchers {
		if suffix, ok := w.visible(path); ok {
			w.push(moqlite.Announce{Active: active, Suffix: suffix})
		}
	}
}

// removeBroadcastLocked unregisters b and ends its tracks; s.mu is held.
func (s *Server) removeBroadcastLocked(b *broadcast) {
	if s.broadcasts[b.path] != b {
		return
	}
	delete(s.broadcasts, b.path)
	b.owner.broadcasts--
	for name, t := range b.tracks {
		delete(b.tracks, name)
		t.cancel()
	}
	b.owner.log.Info("broadcast ended", "broadcast", b.path)
	if !s.upstreamAnnounced[b.path] {
		s.notifyLocked(b.path, false)
	}
}

// dropSession frees everything sess held in the registry.
func (s *Server) dropSession(sess *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, sess)
	for _, b := range s.broadcasts {
		if b.owner == sess {
			s.removeBroadcastLocked(b)
		}
	}
}
