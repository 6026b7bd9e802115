package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"

	"github.com/relayfleet/relayfleet/relay/internal/bpath"
)

// maxQueuedGroups bounds groups received but not yet taken by NextGroup.
const maxQueuedGroups = 64

// ErrTrackEnded is returned by NextGroup once the relay ended the track.
var ErrTrackEnded = errors.New("client: track ended")

// Subscription is a subscription to one track.
type Subscription struct {
	s  *Session
	id uint64
	st transport.Stream

	mu     sync.Mutex
	queue  []*GroupReader
	notify chan struct{}
	err    error // set once ended
}

// Subscribe subscribes to track of broadcast (relative to the session
// root) and waits for the relay's SUBSCRIBE_OK.
func (s *Session) Subscribe(ctx context.Context, broadcast, track string) (*Subscription, error) {
	s.mu.Lock()
	id := s.nextSub
	s.nextSub++
	sub := &Subscription{s: s, id: id, notify: make(chan struct{}, 1)}
	s.subs[id] = sub
	s.mu.Unlock()
	fail := func(err error) (*Subscription, error) {
		s.mu.Lock()
		delete(s.subs, id)
		s.mu.Unlock()
		return nil, err
	}
	st, err := s.t.OpenStream(ctx)
	if err != nil {
		return fail(fmt.Errorf("open subscribe stream: %w", err))
	}
	sub.st = st
	b := moqlite.AppendVarint(nil, moqlite.StreamSubscribe)
	b = moqlite.AppendMessage(b, &moqlite.Subscribe{ID: id, Broadcast: broadcast, Track: track})
	if _, err := st.Write(b); err != nil {
		return fail(fmt.Errorf("write subscribe: %w", err))
	}
	stop := context.AfterFunc(ctx, func() { st.CancelRead(codeCancelled) })
	var ok moqlite.SubscribeOk
	err = moqlite.ReadMessage(st, &ok)
	stop()
	if err != nil {
		st.CancelWrite(codeCancelled)
		return fail(fmt.Errorf("subscribe %s/%s: %w", broadcast, track, err))
	}
	s.spawn(func() {
		stop := context.AfterFunc(s.ctx, func() { st.CancelRead(codeCancelled) })
		defer stop()
		_, err := io.Copy(io.Discard, st)
		if err == nil {
			err = ErrTrackEnded
		} else if serr := s.Err(); serr != nil {
			// The session ended, and ending it cancelled this read (on
			// WebTransport with a past deadline: "i/o timeout"): the
			// session's reason (going-away, ...) is the subscription's,
			// whichever of the two reached it first.
			err = serr
		}
		sub.end(err)
	})
	return sub, nil
}

// ID is the subscribe id this session chose.
func (sub *Subscription) ID() uint64 { return sub.id }

func (sub *Subscription) deliver(g *GroupReader) bool {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.err != nil || len(sub.queue) >= maxQueuedGroups {
		return false
	}
	sub.queue = append(sub.queue, g)
	select {
	case sub.notify <- struct{}{}:
	default:
	}
	return true
}

func (sub *Subscription) end(err error) {
	sub.mu.Lock()
	if sub.err == nil {
		sub.err = err
	}
	sub.mu.Unlock()
	select {
	case sub.notify <- struct{}{}:
	default:
	}
}

// NextGroup returns the next group to arrive. After the track ended it
// returns the groups already queued, then the reason (ErrTrackEnded).
func (sub *Subscription) NextGroup(ctx context.Context) (*GroupReader, error) {
	return sub.nextGroup(ctx, nil)
}

// nextGroup is NextGroup that fails with ErrSilent once silent fires.
func (sub *Subscription) nextGroup(ctx context.Context, silent <-chan time.Time) (*GroupReader, error) {
	for {
		sub.mu.Lock()
		if len(sub.queue) > 0 {
			g := sub.queue[0]
			sub.queue = sub.queue[1:]
			sub.mu.Unlock()
			return g, nil
		}
		err := sub.err
		sub.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-sub.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-silent:
			return nil, ErrSilent
		}
	}
}

// Close unsubscribes.
func (sub *Subscription) Close() {
	s := sub.s
	s.mu.Lock()
	if s.subs[sub.id] == sub {
		delete(s.subs, sub.id)
	}
	s.mu.Unlock()
	_ = sub.st.Close()
	sub.st.CancelRead(codeCancelled)
	sub.end(ErrClosed)
	sub.mu.Lock()
	q := sub.queue
	sub.queue = nil
	sub.mu.Unlock()
	for _, g := range q {
		g.Close()
	}
}

// GroupReader reads the frames of one group.
type GroupReader struct {
	Sequence uint64
	st       transport.ReceiveStream
	done     bool
}

// ReadFrame returns the next frame; io.EOF after the last.
func (g *GroupReader) ReadFrame() ([]byte, error) {
	f, err := moqlite.ReadFrame(g.st)
	if err != nil {
		g.done = true
	}
	return f, err
}

// Abort stops the group from another goroutine: a ReadFrame in progress
// returns an error.
func (g *GroupReader) Abort() { g.st.CancelRead(codeCancelled) }

// Close stops reading the group.
func (g *GroupReader) Close() {
	if !g.done {
		g.st.CancelRead(codeCancelled)
		g.done = true
	}
}

// Announcements is a stream of broadcasts announced under a prefix.
type Announcements struct {
	st     transport.Stream
	prefix string
	init   []string
}

// Announcement is one change: a broadcast path (relative to the session
// root) becoming active or ending.
type Announcement struct {
	Path   string
	Active bool
}

// Announced asks the relay for broadcasts under prefix.
func (s *Session) Announced(ctx context.Context, prefix string) (*Announcements, error) {
	prefix = bpath.Clean(prefix)
	st, err := s.t.OpenStream(ctx)
	if err != nil {
		return nil, fmt.Errorf("open announce stream: %w", err)
	}
	b := moqlite.AppendVarint(nil, moqlite.StreamAnnounce)
	b = moqlite.AppendMessage(b, &moqlite.AnnounceInterest{Prefix: prefix})
	if _, err := st.Write(b); err != nil {
		return nil, fmt.Errorf("write announce interest: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { st.CancelRead(codeCancelled) })
	defer stop()
	var init moqlite.AnnounceInit
	if err := moqlite.ReadMessage(st, &init); err != nil {
		st.CancelWrite(codeCancelled)
		return nil, fmt.Errorf("read announce init: %w", err)
	}
	return &Announcements{st: st, prefix: prefix, init: init.Suffixes}, nil
}

// Initial returns the broadcasts that were active when the interest
// started (paths relative to the session root); Next then returns only
// the changes after them.
func (a *Announcements) Initial() []string {
	out := make([]string, 0, len(a.init))
	for _, p := range a.init {
		out = append(out, bpath.Join(a.prefix, p))
	}
	a.init = nil
	return out
}

// Next returns the next announcement; the initial set comes first.
func (a *Announcements) Next(ctx context.Context) (Announcement, error) {
	if len(a.init) > 0 {
		p := a.init[0]
		a.init = a.init[1:]
		return Announcement{Path: bpath.Join(a.prefix, p), Active: true}, nil
	}
	stop := context.AfterFunc(ctx, func() { a.st.CancelRead(codeCancelled) })
	defer stop()
	var m moqlite.Announce
	if err := moqlite.ReadMessage(a.st, &m); err != nil {
		if ctx.Err() != nil {
			return Announcement{}, ctx.Err()
		}
		return Announcement{}, fmt.Errorf("read announce: %w", err)
	}
	return Announcement{Path: bpath.Join(a.prefix, bpath.Clean(m.Suffix)), Active: m.Active}, nil
}

// WaitFor reads announcements until path is active.
func (a *Announcements) WaitFor(ctx context.Context, path string) error {
	path = bpath.Clean(path)
	for {
		ann, err := a.Next(ctx)
		if err != nil {
			return err
		}
		if ann.Active && ann.Path == path {
			return nil
		}
	}
}

// Close ends the announce interest.
func (a *Announcements) Close() {
	_ = a.st.Close()
	a.st.CancelRead(codeCancelled)
}
