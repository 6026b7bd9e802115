package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// stuckSession is a hand-written fake transport whose uni streams never
// accept data, like a listener that stopped reading.
type stuckSession struct {
	mu        sync.Mutex
	opened    int
	cancelled int
	blocked   int
}

var errFake = errors.New("fake: not supported")

func (f *stuckSession) OpenStream(context.Context) (transport.Stream, error)   { return nil, errFake }
func (f *stuckSession) AcceptStream(context.Context) (transport.Stream, error) { return nil, errFake }
func (f *stuckSession) AcceptUniStream(context.Context) (transport.ReceiveStream, error) {
	return nil, errFake
}
func (f *stuckSession) CloseWithError(uint64, string) error { return nil }
func (f *stuckSession) Done() <-chan struct{}               { return nil }
func (f *stuckSession) RemoteAddr() net.Addr                { return &net.UDPAddr{} }

func (f *stuckSession) OpenUniStream(ctx context.Context) (transport.SendStream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opened++
	return &stuckStream{f: f, gone: make(chan struct{})}, nil
}

func (f *stuckSession) counts() (opened, cancelled, blocked int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opened, f.cancelled, f.blocked
}

type stuckStream struct {
	f    *stuckSession
	once sync.Once
	gone chan struct{}
}

func (s *stuckStream) Write(p []byte) (int, error) {
	s.f.mu.Lock()
	s.f.blocked++
	s.f.mu.Unlock()
	<-s.gone
	s.f.mu.Lock()
	s.f.blocked--
	s.f.mu.Unlock()
	return 0, errors.New("fake: stream reset")
}

func (s *stuckStream) Close() error { return nil }

func (s *stuckStream) CancelWrite(uint64) {
	s.once.Do(func() {
		s.f.mu.Lock()
		s.f.cancelled++
		s.f.mu.Unlock()
		close(s.gone)
	})
}

// TestSlowSubscriberKeepsBoundedGroups checks a subscriber that reads
// nothing holds at most maxInflightGroups groups, losing the oldest, and
// that ending the subscription frees them all and its writer.
func TestSlowSubscriberKeepsBoundedGroups(t *testing.T) {
	srv := NewServer(ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	fake := &stuckSession{}
	ctx, cancel := context.WithCancel(context.Background())
	sub := newSubscriber(srv, &session{srv: srv, t: fake}, 9, ctx)
	tr := &track{subs: map[*subscriber]struct{}{sub: {}}}
	sub.t = tr
	send := func(from, to int) {
		for i := from; i < to; i++ {
			g := newGroup(uint64(i))
			g.append([]byte("frame"))
			tr.mu.Lock()
			sub.sendGroup(g)
			tr.mu.Unlock()
		}
	}
	held := func() (int, int) {
		sub.mu.Lock()
		defer sub.mu.Unlock()
		return len(sub.pending) + len(sub.open), sub.dropped
	}
	send(0, maxInflightGroups)
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		if !testutil.Poll(10*time.Second, cond) {
			n, dropped := held()
			opened, cancelled, blocked := fake.counts()
			t.Fatalf("%s: held %d, dropped %d; streams opened %d, cancelled %d, blocked %d", what, n, dropped, opened, cancelled, blocked)
		}
	}
	waitUntil("the writer to block", func() bool { _, _, blocked := fake.counts(); return blocked == 1 })
	// Ten more groups push out the ten oldest.
	send(maxInflightGroups, maxInflightGroups+10)
	if n, dropped := held(); n != maxInflightGroups || dropped != 10 {
		t.Fatalf("holding %d groups with %d dropped; want %d and 10", n, dropped, maxInflightGroups)
	}
	cancel()
	done := make(chan struct{})
	go func() {
		srv.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer is still running after the subscription ended")
	}
	if _, _, blocked := fake.counts(); blocked != 0 {
		t.Fatalf("%d writes still blocked", blocked)
	}
	if n, _ := held(); n != 0 {
		t.Fatalf("%d groups still held", n)
	}
}

func TestGroupSizeIsBounded(t *testing.T) {
	g := newGroup(1)
	frame := make([]byte, 1<<20)
	for i := 0; i < maxGroupBytes/len(frame); i++ {
		if !g.append(frame) {
			t.Fatalf("frame %d refused below the limit", i)
		}
	}
	if g.append([]byte{1}) {
		t.Fatal("frame beyond maxGroupBytes accepted")
	}
	frames, done, err := g.read(0)
	if !done || !errors.Is(err, errGroupTooLarge) || len(frames) != maxGroupBytes/len(frame) {
		t.Fatalf("group after overflow: %d frames, done %v, err %v", len(frames), done, err)
	}
}

// sinkSession's uni streams take every write.
type sinkSession struct{ stuckSession }

func (f *sinkSession) OpenUniStream(context.Context) (transport.SendStream, error) {
	return sinkStream{}, nil
}

type sinkStream struct{}

func (sinkStream) Write(p []byte) (int, error) { return len(p), nil }
func (sinkStream) Close() error                { return nil }
func (sinkStream) CancelWrite(uint64)          {}

// TestWriteFrameAllocations: writing a frame of an open group to a
// listener allocates nothing in the relay: the encode buffer is pooled
// (it was allocated, and grown, per listener and frame).
func TestWriteFrameAllocations(t *testing.T) {
	srv := NewServer(ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	sub := newSubscriber(srv, &session{srv: srv, t: &sinkSession{}}, 9, context.Background())
	g := newGroup(1)
	frame := make([]byte, 600)
	g.append(frame)
	sub.pending = append(sub.pending, g)
	scratch, _, _ := sub.writeOnce(nil, false) // opens the stream, writes the header and frame 0
	allocs := testing.AllocsPerRun(100, func() {
		g.append(frame)
		scratch, _, _ = sub.writeOnce(scratch[:0], false)
	})
	// g.append makes the group's next notify channel (once per frame for
	// all listeners); the write itself must not allocate (before the
	// pool: 3 in all).
	if allocs > 1 {
		t.Fatalf("%.2f allocations per frame appended and written, want at most 1 (the group's)", allocs)
	}
}

// trySession's uni streams can be opened and written without waiting up
// to a limit on streams; past it, TryOpenUniStream would block and
// OpenUniStream waits until raise. It counts the calls that could wait.
// Its connection's loop can be held (transport.LoopHolder), as a QUIC
// session's: it counts the calls that never wait made without holding it.
type trySession struct {
	stuckSession
	mu        sync.Mutex
	limit     int
	streams   []*tryStream
	syncOpens int // OpenUniStream calls (they may wait)
	raised    chan struct{}

	held, busy bool // busy: HoldLoop refuses, as when the loop runs
	holds      int
	unheld     int // TryOpenUniStream, TryWriteAll, Close not held
}

func (f *trySession) HoldLoop() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held {
		panic("HoldLoop while held")
	}
	if f.busy {
		return false
	}
	f.held = true
	f.holds++
	return true
}

func (f *trySession) ReleaseLoop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.held {
		panic("ReleaseLoop without HoldLoop")
	}
	f.held = false
}

// calledLocked counts a call that never waits made without the loop
// held (where it could have been).
func (f *trySession) calledLocked() {
	if !f.held && !f.busy {
		f.unheld++
	}
}

// loopUse says how the writer used the loop (held: whether it is held now).
func (f *trySession) loopUse() (holds, unheld int, held bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holds, f.unheld, f.held
}

func newTrySession(limit int) *trySession {
	return &trySession{limit: limit, raised: make(chan struct{})}
}

func (f *trySession) TryOpenUniStream() (transport.SendStream, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calledLocked()
	if len(f.streams) >= f.limit {
		return nil, transport.ErrWouldBlock
	}
	st := &tryStream{f: f}
	f.streams = append(f.streams, st)
	return st, nil
}

func (f *trySession) OpenUniStream(ctx context.Context) (transport.SendStream, error) {
	f.mu.Lock()
	f.syncOpens++
	for len(f.streams) >= f.limit {
		raised := f.raised
		f.mu.Unlock()
		select {
		case <-raised:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	st := &tryStream{f: f}
	f.streams = append(f.streams, st)
	return st, nil
}

// raise lifts the stream limit to n.
func (f *trySession) raise(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limit = n
	close(f.raised)
	f.raised = make(chan struct{})
}

// closed returns what each stream carried, in the order they were opened,
// once every one of want streams is closed (nil before).
func (f *trySession) closed(want int) (data [][]byte, syncOpens, syncWrites int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.streams) != want {
		return nil, f.syncOpens, 0
	}
	for _, st := range f.streams {
		if !st.closed {
			return nil, f.syncOpens, 0
		}
		data = append(data, st.data)
		syncWrites += st.syncWrites
	}
	return data, f.syncOpens, syncWrites
}

type tryStream struct {
	f          *trySession
	data       []byte
	closed     bool
	syncWrites int
}

func (s *tryStream) TryWriteAll(p []byte) error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.calledLocked()
	s.data = append(s.data, p...)
	return nil
}

func (s *tryStream) Write(p []byte) (int, error) {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.syncWrites++
	s.data = append(s.data, p...)
	return len(p), nil
}

func (s *tryStream) Close() error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	s.f.calledLocked()
	s.closed = true
	return nil
}

func (s *tryStream) CancelWrite(uint64) {}

// groupStream is what a subscriber's stream for one group of one frame
// carries.
func groupStream(id, seq uint64, frame []byte) []byte {
	b := moqlite.AppendGroupStart(nil, moqlite.GroupHeader{Subscribe: id, Sequence: seq})
	return moqlite.AppendFrame(b, frame)
}

// trackOf makes a track with a subscriber on each session, subscribe id
// its index.
func trackOf(t *testing.T, srv *Server, ctx context.Context, sessions ...*trySession) *track {
	t.Helper()
	tr := &track{ctx: ctx, subs: make(map[*subscriber]struct{})}
	for i, f := range sessions {
		if !tr.addSubscriber(newSubscriber(srv, &session{srv: srv, t: f}, uint64(i), ctx)) {
			t.Fatal("track refused a subscriber")
		}
	}
	return tr
}

// startEndedGroups hands the track groups 0 to n-1 of one frame each, each
// ended as soon as it starts.
func startEndedGroups(tr *track, n int, frame []byte) {
	for seq := range uint64(n) {
		g := newGroup(seq)
		g.append(frame)
		tr.startGroup(g)
		g.finish(nil)
		tr.wakeAll()
	}
}

// TestTrackWriterWritesWithoutWaiting: the track's writers write every
// listener's groups, in order, through the calls that never wait (no
// goroutine per listener and group), over more listeners than one writer
// takes at a time.
func TestTrackWriterWritesWithoutWaiting(t *testing.T) {
	srv := NewServer(ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const listeners, groups = 3*writerChunk + 7, 5
	sessions := make([]*trySession, listeners)
	for i := range sessions {
		sessions[i] = newTrySession(1000)
	}
	sessions[1].busy = true // its loop cannot be held: written all the same
	tr := trackOf(t, srv, ctx, sessions...)
	frame := []byte("opus frame")
	startEndedGroups(tr, groups, frame)
	var last string
	if !testutil.Poll(10*time.Second, func() bool {
		for i, f := range sessions {
			data, syncOpens, syncWrites := f.closed(groups)
			if data == nil {
				last = fmt.Sprintf("listener %d: not all %d streams closed", i, groups)
				return false
			}
			if syncOpens != 0 || syncWrites != 0 {
				t.Fatalf("listener %d: %d opens and %d writes that could wait, want none", i, syncOpens, syncWrites)
			}
			for seq, d := range data {
				if want := groupStream(uint64(i), uint64(seq), frame); !bytes.Equal(d, want) {
					t.Fatalf("listener %d, stream %d: %x, want %x", i, seq, d, want)
				}
			}
		}
		return true
	}) {
		t.Fatal(last)
	}
	// Every listener's streams were opened, written and closed with its
	// connection's loop held (so its packets leave when the writer is
	// done with it), and every loop was given back.
	testutil.Poll(2*time.Second, func() bool {
		for _, f := range sessions {
			if _, _, held := f.loopUse(); held {
				return false
			}
		}
		return true
	})
	for i, f := range sessions {
		holds, unheld, held := f.loopUse()
		if f.busy {
			if holds != 0 {
				t.Errorf("listener %d: loop held %d times while it refused", i, holds)
			}
			continue
		}
		if holds == 0 || unheld != 0 || held {
			t.Errorf("listener %d: loop held %d times, %d calls without it, held at the end %v; want held for every call and given back", i, holds, unheld, held)
		}
	}
	cancel()
	srv.Wait()
}

// TestTrackWriterHandsOverWhenBlocked: a listener whose stream limit is
// reached gets a goroutine of its own, which waits for the limit to rise
// and then writes the rest, in order; the track's writer does not wait
// for it (another listener's groups arrive meanwhile).
func TestTrackWriterHandsOverWhenBlocked(t *testing.T) {
	srv := NewServer(ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow, fast := newTrySession(2), newTrySession(1000)
	tr := trackOf(t, srv, ctx, slow, fast)
	const groups = 4
	frame := []byte("opus frame")
	startEndedGroups(tr, groups, frame)
	if !testutil.Poll(10*time.Second, func() bool { d, _, _ := fast.closed(groups); return d != nil }) {
		t.Fatal("the other listener's groups did not arrive while one listener was blocked")
	}
	if !testutil.Poll(10*time.Second, func() bool {
		slow.mu.Lock()
		defer slow.mu.Unlock()
		return slow.syncOpens > 0
	}) {
		t.Fatal("the blocked listener's writer never waited for its stream limit")
	}
	if d, _, _ := slow.closed(2); d == nil {
		t.Fatal("the blocked listener's first two groups were not written before its limit")
	}
	slow.raise(groups)
	var data [][]byte
	if !testutil.Poll(10*time.Second, func() bool { data, _, _ = slow.closed(groups); return data != nil }) {
		t.Fatal("the blocked listener's groups did not arrive after its limit rose")
	}
	for seq, d := range data {
		if want := groupStream(0, uint64(seq), frame); !bytes.Equal(d, want) {
			t.Fatalf("stream %d: %x, want %x", seq, d, want)
		}
	}
	cancel()
	srv.Wait()
}
