package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// Broadcast is a broadcast this session publishes.
type Broadcast struct {
	s    *Session
	name string

	mu     sync.Mutex
	tracks map[string]*TrackWriter
	closed bool
}

// Publish announces a broadcast under name (relative to the session root)
// and returns it. Publishing a name twice returns the same Broadcast.
func (s *Session) Publish(name string) *Broadcast {
	name = cleanPath(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.broadcasts[name]; b != nil {
		return b
	}
	b := &Broadcast{s: s, name: name, tracks: make(map[string]*TrackWriter)}
	s.broadcasts[name] = b
	for w := range s.watchers {
		w.update(name, true)
	}
	return b
}

// Name is the broadcast's name relative to the session root.
func (b *Broadcast) Name() string { return b.name }

// Track returns the writer for one track, creating it if needed.
func (b *Broadcast) Track(name string) *TrackWriter {
	b.mu.Lock()
	defer b.mu.Unlock()
	tw := b.tracks[name]
	if tw == nil {
		tw = &TrackWriter{b: b, name: name, subs: make(map[uint64]transport.Stream), changed: make(chan struct{})}
		b.tracks[name] = tw
	}
	return tw
}

// Close unannounces the broadcast and ends its subscriptions.
func (b *Broadcast) Close() {
	s := b.s
	s.mu.Lock()
	if s.broadcasts[b.name] == b {
		delete(s.broadcasts, b.name)
		for w := range s.watchers {
			w.update(b.name, false)
		}
	}
	s.mu.Unlock()
	b.mu.Lock()
	b.closed = true
	tracks := b.tracks
	b.mu.Unlock()
	for _, tw := range tracks {
		tw.closeAll()
	}
}

// TrackWriter writes groups of one track to whoever subscribed to it
// through the relay (normally the relay itself, once).
type TrackWriter struct {
	b    *Broadcast
	name string

	mu      sync.Mutex
	subs    map[uint64]transport.Stream // by the subscriber's id
	changed chan struct{}
}

func (tw *TrackWriter) signal() {
	close(tw.changed)
	tw.changed = make(chan struct{})
}

// Subscribers is how many subscriptions the track has now.
func (tw *TrackWriter) Subscribers() int {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return len(tw.subs)
}

// WaitSubscribers blocks until the track has at least n subscriptions.
func (tw *TrackWriter) WaitSubscribers(ctx context.Context, n int) error {
	for {
		tw.mu.Lock()
		have, ch := len(tw.subs), tw.changed
		tw.mu.Unlock()
		if have >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-tw.b.s.ctx.Done():
			return ErrClosed
		}
	}
}

func (tw *TrackWriter) closeAll() {
	tw.mu.Lock()
	subs := tw.subs
	tw.subs = map[uint64]transport.Stream{}
	tw.signal()
	tw.mu.Unlock()
	for _, st := range subs {
		_ = st.Close()
	}
}

// GroupWriter writes the frames of one group to every subscription the
// track had when the group was opened.
type GroupWriter struct {
	streams []transport.SendStream
	stops   []func() bool
}

// ErrNoSubscribers is returned by OpenGroup when nobody subscribed.
var ErrNoSubscribers = errors.New("client: track has no subscribers")

// OpenGroup starts group seq on a new stream per subscription.
func (tw *TrackWriter) OpenGroup(ctx context.Context, seq uint64) (*GroupWriter, error) {
	tw.mu.Lock()
	ids := make([]uint64, 0, len(tw.subs))
	for id := range tw.subs {
		ids = append(ids, id)
	}
	tw.mu.Unlock()
	if len(ids) == 0 {
		return nil, ErrNoSubscribers
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	g := &GroupWriter{}
	s := tw.b.s
	for _, id := range ids {
		st, err := s.t.OpenUniStream(ctx)
		if err != nil {
			g.Abort()
			return nil, fmt.Errorf("open group stream: %w", err)
		}
		stop := context.AfterFunc(s.ctx, func() { st.CancelWrite(codeCancelled) })
		if _, err := st.Write(moqlite.AppendGroupStart(nil, moqlite.GroupHeader{Subscribe: id, Sequence: seq})); err != nil {
			stop()
			continue
		}
		g.streams = append(g.streams, st)
		g.stops = append(g.stops, stop)
	}
	if len(g.streams) == 0 {
		return nil, ErrNoSubscribers
	}
	return g, nil
}

// WriteFrame sends one frame to every stream of the group; a stream that
// fails is dropped. It fails only when every stream failed.
func (g *GroupWriter) WriteFrame(payload []byte) error {
	b := moqlite.AppendFrame(nil, payload)
	ok := 0
	for i, st := range g.streams {
		if st == nil {
			continue
		}
		if _, err := st.Write(b); err != nil {
			g.stops[i]()
			g.streams[i] = nil
			continue
		}
		ok++
	}
	if ok == 0 {
		return ErrNoSubscribers
	}
	return nil
}

// Close ends the group cleanly.
func (g *GroupWriter) Close() error {
	for i, st := range g.streams {
		if st != nil {
			_ = st.Close()
			g.stops[i]()
		}
	}
	return nil
}

// Abort resets the group's streams.
func (g *GroupWriter) Abort() {
	for i, st := range g.streams {
		if st != nil {
			st.CancelWrite(codeCancelled)
			g.stops[i]()
		}
	}
}

// WriteGroup writes a complete group.
func (tw *TrackWriter) WriteGroup(ctx context.Context, seq uint64, frames [][]byte) error {
	g, err := tw.OpenGroup(ctx, seq)
	if err != nil {
		return err
	}
	for _, f := range frames {
		if err := g.WriteFrame(f); err != nil {
			return err
		}
	}
	return g.Close()
}

// serveSubscribe answers the relay's SUBSCRIBE for one of our tracks.
func (s *Session) serveSubscribe(st transport.Stream, m *moqlite.Subscribe) {
	s.mu.Lock()
	b := s.broadcasts[cleanPath(m.Broadcast)]
	s.mu.Unlock()
	if b == nil {
		st.CancelWrite(codeNotFound)
		st.CancelRead(codeNotFound)
		return
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		st.CancelWrite(codeNotFound)
		st.CancelRead(codeNotFound)
		return
	}
	tw := b.Track(m.Track)
	if _, err := st.Write(moqlite.AppendMessage(nil, &moqlite.SubscribeOk{})); err != nil {
		return
	}
	tw.mu.Lock()
	tw.subs[m.ID] = st
	tw.signal()
	tw.mu.Unlock()
	// Until the subscriber ends it (FIN or reset); SUBSCRIBE_UPDATE is ignored.
	_, _ = io.Copy(io.Discard, st)
	tw.mu.Lock()
	if tw.subs[m.ID] == st {
		delete(tw.subs, m.ID)
		tw.signal()
	}
	tw.mu.Unlock()
	_ = st.Close()
}

// announceWatcher is the relay's interest in our broadcasts.
type announceWatcher struct {
	prefix  string
	mu      sync.Mutex
	pending []moqlite.Announce
	notify  chan struct{}
}

func (w *announceWatcher) update(name string, active bool) {
	suffix, ok := stripPathPrefix(w.prefix, name)
	if !ok {
		return
	}
	w.mu.Lock()
	w.pending = append(w.pending, moqlite.Announce{Active: active, Suffix: suffix})
	w.mu.Unlock()
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func (s *Session) serveAnnounce(st transport.Stream, prefix string) {
	w := &announceWatcher{prefix: prefix, notify: make(chan struct{}, 1)}
	var init moqlite.AnnounceInit
	s.mu.Lock()
	for name := range s.broadcasts {
		if suffix, ok := stripPathPrefix(prefix, name); ok {
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
	if _, err := st.Write(moqlite.AppendMessage(nil, &init)); err != nil {
		return
	}
	readDone := make(chan struct{})
	s.spawn(func() {
		defer close(readDone)
		_, _ = io.Copy(io.Discard, st)
	})
	for {
		select {
		case <-readDone:
			_ = st.Close()
			return
		case <-s.ctx.Done():
			return
		case <-w.notify:
			w.mu.Lock()
			p := w.pending
			w.pending = nil
			w.mu.Unlock()
			var b []byte
			for _, a := range p {
				b = moqlite.AppendMessage(b, &a)
			}
			if _, err := st.Write(b); err != nil {
				return
			}
		}
	}
}
