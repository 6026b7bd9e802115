package relay

import (
	"context"
	"errors"
	"sync"
)

// maxInflightGroups bounds how many group streams one subscriber may have
// open at once; the oldest is reset when a newer group would exceed it.
const maxInflightGroups = 16

// errTrackEnded is the cause given to groups of a track that went away.
var errTrackEnded = errors.New("track ended")

// maxGroupBytes bounds the payload the relay holds for one group.
const maxGroupBytes = 8 << 20

var errGroupTooLarge = errors.New("group larger than 8 MiB")

// group is one group of frames, shared by every subscriber's writer. Frames
// are appended by the publisher's stream reader and read by index.
type group struct {
	seq uint64

	mu     sync.Mutex
	frames [][]byte
	size   int
	done   bool
	err    error
	notify chan struct{}
}

func newGroup(seq uint64) *group { return &group{seq: seq, notify: make(chan struct{})} }

// append adds a frame. It returns false once the group is finished, or
// when the group would exceed maxGroupBytes: the relay keeps a whole group
// for late joiners, so one endless group must not grow without bound.
func (g *group) append(frame []byte) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return false
	}
	if g.size+len(frame) > maxGroupBytes {
		g.done, g.err = true, errGroupTooLarge
		close(g.notify)
		return false
	}
	g.size += len(frame)
	g.frames = append(g.frames, frame)
	close(g.notify)
	g.notify = make(chan struct{})
	return true
}

// finish ends the group; err nil means it ended cleanly.
func (g *group) finish(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return
	}
	g.done, g.err = true, err
	close(g.notify)
}

// read returns the frames from index i on, whether the group is finished
// (with its error), and a channel closed on the next change.
func (g *group) read(i int) ([][]byte, bool, error, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var frames [][]byte
	if i < len(g.frames) {
		frames = g.frames[i:len(g.frames):len(g.frames)]
	}
	return frames, g.done, g.err, g.notify
}

// track is the relay's single upstream subscription to one track of one
// broadcast, and the set of downstream subscribers it feeds.
type track struct {
	b    *broadcast
	name string
	// upstreamID is the subscribe id the relay chose towards the publisher.
	upstreamID uint64
	ctx        context.Context // ends when the track ends
	cancel     context.CancelFunc

	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	latest *group
}

// addSubscriber attaches sub and starts it at the newest group, if any.
// It returns false when the track has already ended.
func (t *track) addSubscriber(sub *subscriber) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil {
		return false
	}
	t.subs[sub] = struct{}{}
	if t.latest != nil {
		sub.sendGroup(t.latest)
	}
	return true
}

// removeSubscriber detaches sub and reports whether none are left.
func (t *track) removeSubscriber(sub *subscriber) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.subs, sub)
	return len(t.subs) == 0
}

// startGroup records a group arriving from the publisher and hands it to
// every subscriber.
func (t *track) startGroup(g *group) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.latest == nil || g.seq >= t.latest.seq {
		t.latest = g
	}
	for sub := range t.subs {
		sub.sendGroup(g)
	}
}

// broadcast is an announced broadcast and the tracks pulled from it.
type broadcast struct {
	path   string   // full path on this relay
	suffix string   // the publisher's own name for it
	owner  *session // the publishing session
	tracks map[string]*track
	nextID uint64 // guarded by Server.mu, like tracks
}

// subscriber is one downstream subscription.
type subscriber struct {
	srv  *Server
	sess *session
	id   uint64
	ctx  context.Context
	t    *track

	mu       sync.Mutex
	inflight []*inflightGroup // oldest first
}

type inflightGroup struct{ cancel context.CancelFunc }

// sendGroup starts a writer for g. Called with the track's lock held, so
// groups start in the order they arrived. A subscriber too slow to finish
// its groups loses the oldest one when it would exceed maxInflightGroups.
func (sub *subscriber) sendGroup(g *group) {
	if sub.ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithCancel(sub.ctx)
	entry := &inflightGroup{cancel: cancel}
	sub.mu.Lock()
	sub.inflight = append(sub.inflight, entry)
	if len(sub.inflight) > maxInflightGroups {
		sub.inflight[0].cancel()
		sub.inflight = sub.inflight[1:]
	}
	sub.mu.Unlock()
	sub.srv.wg.Add(1)
	go func() {
		defer sub.srv.wg.Done()
		defer sub.done(entry)
		sub.writeGroup(ctx, g)
	}()
}

func (sub *subscriber) done(e *inflightGroup) {
	e.cancel()
	sub.mu.Lock()
	defer sub.mu.Unlock()
	for i, x := range sub.inflight {
		if x == e {
			sub.inflight = append(sub.inflight[:i], sub.inflight[i+1:]...)
			return
		}
	}
}
