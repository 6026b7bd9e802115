package relay

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
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

// read returns the frames from index i on and whether the group is
// finished, with its error.
func (g *group) read(i int) ([][]byte, bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var frames [][]byte
	if i < len(g.frames) {
		frames = g.frames[i:len(g.frames):len(g.frames)]
	}
	return frames, g.done, g.err
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
	// local: the relay makes the track itself (the heartbeat); it lives
	// on without subscribers.
	local bool
	// Pulled tracks (cluster.go): the upstream pulled from now (its
	// index in Server.links plus one; 0: none), and when the last group
	// or frame came and the time between the last two (unix ns).
	upstream   atomic.Int32
	lastActive atomic.Int64
	activeGap  atomic.Int64
	// knownUpstream: an upstream announced the broadcast when the track
	// started (runRemote keeps trying when every upstream refuses it).
	knownUpstream bool

	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	latest *group
	// writeq holds the subscribers with something to write, oldest poke
	// first, for the track's writers; writers counts them (a writer runs
	// while the queue is not empty).
	writeq  []*subscriber
	writers int
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
	sub.t = t
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
	if faultDrops(g.seq) { // a bad build (fault.go)
		return
	}
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

// subscriber is one downstream subscription. Its track's writer writes
// every group to its own stream, through calls that never wait; where one
// would, the subscriber's own goroutine takes over until it has written
// everything (no goroutine, and no stack, per listener and frame; no
// context or timer per group).
type subscriber struct {
	srv  *Server
	sess *session
	id   uint64
	ctx  context.Context
	t    *track

	mu      sync.Mutex
	pending []*group     // handed over, stream not opened yet; oldest first
	open    []*openGroup // streams being written; oldest first
	running bool         // a writer (the track's, or the subscriber's own goroutine) writes for it
	queued  bool         // on its track's write queue
	dirty   bool         // something to write since the writer last looked
	dropped int          // groups this subscriber lost to being slow
}

// newSubscriber makes a subscription's writer state; ending ctx resets
// its streams, which unblocks a write stuck on a silent listener.
func newSubscriber(srv *Server, sess *session, id uint64, ctx context.Context) *subscriber {
	sub := &subscriber{srv: srv, sess: sess, id: id, ctx: ctx}
	context.AfterFunc(ctx, sub.abandon)
	return sub
}

// openGroup is a group with its stream to one subscriber.
type openGroup struct {
	g       *group
	st      transport.SendStream
	next    int  // frames written
	started bool // header written
}

// sendGroup queues g for the subscriber. Called with the track's lock held,
// so groups queue in the order they arrived. A subscriber too slow to
// finish its groups loses the oldest once it holds maxInflightGroups.
func (sub *subscriber) sendGroup(g *group) {
	if sub.ctx.Err() != nil {
		return
	}
	sub.mu.Lock()
	if len(sub.pending)+len(sub.open) >= maxInflightGroups {
		if len(sub.pending) > 0 {
			sub.pending = sub.pending[1:]
		} else {
			sub.open[0].st.CancelWrite(codeCancelled)
			sub.open = sub.open[1:]
		}
		sub.dropped++
		sub.srv.counters.groupsDropped.Add(1)
	}
	sub.pending = append(sub.pending, g)
	sub.mu.Unlock()
	sub.poke()
}

// frameBufs holds the buffers writers encode a group's header and frames
// in: the streams copy what is written, so one buffer serves every
// listener in turn instead of an allocation per listener and frame.
var frameBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// poke tells the writer there is something to write, queueing the
// subscriber for its track's writers unless a writer has it already; it
// does not block. Called with the track's lock held.
func (sub *subscriber) poke() {
	sub.mu.Lock()
	sub.dirty = true
	queue := !sub.running && !sub.queued && sub.ctx.Err() == nil
	if queue {
		sub.queued = true
	}
	sub.mu.Unlock()
	if queue {
		sub.t.queueLocked(sub)
	}
}

// writerChunk is how many subscribers a track writer takes from the queue
// at a time; another writer starts (up to GOMAXPROCS) while more than this
// wait per writer.
const writerChunk = 256

// queueLocked adds sub to the track's write queue and starts a writer if
// none runs (or too few for the queue); t.mu is held.
func (t *track) queueLocked(sub *subscriber) {
	t.writeq = append(t.writeq, sub)
	if t.writers == 0 || (len(t.writeq) > writerChunk*t.writers && t.writers < runtime.GOMAXPROCS(0)) {
		t.writers++
		srv := sub.srv
		srv.wg.Add(1)
		go func() {
			defer srv.wg.Done()
			t.runWriter()
		}()
	}
}

// runWriter writes for the queued subscribers, without waiting on any
// listener: one whose stream limit or flow control would make it wait
// gets a goroutine of its own (subscriber.run). One writer per track, on
// the CPU the relay@ unit has, replaces a goroutine per listener and
// group; it returns when the queue is empty.
func (t *track) runWriter() {
	var batch []*subscriber
	var scratch []*openGroup
	// Let what is already runnable run first: a publisher's packet that
	// starts group N+1 usually also ends group N, and N+1's reader wakes
	// this writer before N's reader has appended the end. Each listener's
	// packet leaves as soon as its writes are done (HoldLoop below), so
	// without this the end of N would go in a packet of its own, one more
	// per listener and group.
	runtime.Gosched()
	for {
		t.mu.Lock()
		n := min(len(t.writeq), writerChunk)
		if n == 0 {
			t.writers--
			t.writeq = t.writeq[:0]
			t.mu.Unlock()
			return
		}
		batch = append(batch[:0], t.writeq[:n]...)
		rest := copy(t.writeq, t.writeq[n:])
		clear(t.writeq[rest:])
		t.writeq = t.writeq[:rest]
		t.mu.Unlock()
		for i, sub := range batch {
			scratch = sub.writeQueued(scratch)
			batch[i] = nil
		}
	}
}

// writeQueued writes what the subscriber has without waiting; where it
// would wait, the subscriber's own goroutine takes over.
func (sub *subscriber) writeQueued(scratch []*openGroup) []*openGroup {
	sub.mu.Lock()
	sub.queued = false
	if sub.running || sub.ctx.Err() != nil {
		sub.mu.Unlock()
		return scratch
	}
	sub.running = true
	sub.mu.Unlock()
	if h, ok := sub.sess.t.(transport.LoopHolder); ok && h.HoldLoop() {
		defer h.ReleaseLoop()
	}
	return sub.write(scratch, true)
}

// run is the subscription's own writer, for when writing would wait: it
// opens a stream per group and writes the frames that arrived, waiting
// as long as it must.
func (sub *subscriber) run() { sub.write(nil, false) }

// write writes until nothing is left to write (it clears running) or the
// subscription ends; the caller holds running. With try it never waits:
// where it would, it hands the subscriber, still running, to a goroutine
// of its own (run) and returns.
func (sub *subscriber) write(scratch []*openGroup, try bool) []*openGroup {
	for {
		sub.mu.Lock()
		if !sub.dirty || sub.ctx.Err() != nil {
			sub.running = false
			sub.mu.Unlock()
			if sub.ctx.Err() != nil {
				sub.abandon() // streams opened since the subscription ended
			}
			return scratch
		}
		sub.dirty = false
		sub.mu.Unlock()
		for sub.ctx.Err() == nil {
			var more, blocked bool
			scratch, more, blocked = sub.writeOnce(scratch[:0], try)
			if blocked {
				sub.mu.Lock()
				sub.dirty = true
				sub.mu.Unlock()
				sub.srv.wg.Add(1)
				go func() {
					defer sub.srv.wg.Done()
					sub.run()
				}()
				return scratch
			}
			if !more {
				break
			}
		}
	}
}

// writeOnce opens the oldest pending group's stream, if any, and writes
// what every open group has gained. more reports a group still pending.
// With try it never waits: blocked reports where it would have (what was
// not written stays for the next call).
func (sub *subscriber) writeOnce(open []*openGroup, try bool) (_ []*openGroup, more, blocked bool) {
	sub.mu.Lock()
	var g *group
	if len(sub.pending) > 0 {
		g = sub.pending[0]
		sub.pending[0] = nil
		sub.pending = sub.pending[1:]
	}
	sub.mu.Unlock()
	if g != nil {
		var st transport.SendStream
		var err error
		if !try {
			st, err = sub.sess.t.OpenUniStream(sub.ctx)
		} else if o, ok := sub.sess.t.(transport.TryUniOpener); ok {
			st, err = o.TryOpenUniStream()
		} else {
			err = transport.ErrWouldBlock
		}
		if errors.Is(err, transport.ErrWouldBlock) {
			sub.mu.Lock()
			if len(sub.pending)+len(sub.open) < maxInflightGroups {
				sub.pending = append([]*group{g}, sub.pending...)
			} else { // a newer group took its place: it is the oldest
				sub.dropped++
				sub.srv.counters.groupsDropped.Add(1)
			}
			sub.mu.Unlock()
			return open, true, true
		}
		if err != nil {
			return open, false, false
		}
		sub.mu.Lock()
		sub.open = append(sub.open, &openGroup{g: g, st: st})
		sub.mu.Unlock()
	}
	sub.mu.Lock()
	open = append(open, sub.open...)
	more = len(sub.pending) > 0
	sub.mu.Unlock()
	c := &sub.srv.counters
	bp := frameBufs.Get().(*[]byte)
	defer frameBufs.Put(bp)
	buf := *bp
	defer func() {
		if cap(buf) > 64<<10 { // a large frame: do not keep its buffer
			buf = make([]byte, 0, 2048)
		}
		*bp = buf[:0]
	}()
	for _, og := range open {
		frames, done, gerr := og.g.read(og.next)
		ok := true
		buf = buf[:0]
		if !og.started {
			buf = moqlite.AppendGroupStart(buf, moqlite.GroupHeader{Subscribe: sub.id, Sequence: og.g.seq})
		}
		if len(buf) > 0 || len(frames) > 0 {
			n := 0
			for _, f := range frames {
				buf = moqlite.AppendFrame(buf, f)
				n += len(f)
			}
			var err error
			if !try {
				_, err = og.st.Write(buf)
			} else if w, ok := og.st.(transport.TryWriter); ok {
				err = w.TryWriteAll(buf)
			} else {
				err = transport.ErrWouldBlock
			}
			if errors.Is(err, transport.ErrWouldBlock) {
				clear(open)
				return open, more, true
			}
			og.started = true
			if err != nil {
				ok = false
			} else {
				og.next += len(frames)
				c.framesOut.Add(int64(len(frames)))
				c.bytesOut.Add(int64(n))
			}
		}
		switch {
		case !ok || (done && gerr != nil):
			og.st.CancelWrite(codeCancelled)
		case done:
			_ = og.st.Close()
			c.groupsOut.Add(1)
		default:
			continue
		}
		sub.finished(og)
	}
	clear(open)
	return open, more, false
}

// finished removes og from the open groups (unless eviction did already).
func (sub *subscriber) finished(og *openGroup) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	for i, x := range sub.open {
		if x == og {
			sub.open = append(sub.open[:i], sub.open[i+1:]...)
			return
		}
	}
}

// abandon resets every open stream once the subscription ended.
func (sub *subscriber) abandon() {
	sub.mu.Lock()
	open := sub.open
	sub.open, sub.pending = nil, nil
	sub.mu.Unlock()
	for _, og := range open {
		og.st.CancelWrite(codeCancelled)
	}
}

// wakeAll tells every subscriber's writer that a group of t changed.
func (t *track) wakeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for sub := range t.subs {
		sub.poke()
	}
}
