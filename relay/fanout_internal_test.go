package relay

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay/testutil"
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
	send := func(from, to int) {
		for i := from; i < to; i++ {
			g := newGroup(uint64(i))
			g.append([]byte("frame"))
			sub.sendGroup(g)
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
	scratch, _ := sub.writeOnce(nil) // opens the stream, writes the header and frame 0
	allocs := testing.AllocsPerRun(100, func() {
		g.append(frame)
		scratch, _ = sub.writeOnce(scratch[:0])
	})
	// g.append makes the group's next notify channel (once per frame for
	// all listeners); the write itself must not allocate (before the
	// pool: 3 in all).
	if allocs > 1 {
		t.Fatalf("%.2f allocations per frame appended and written, want at most 1 (the group's)", allocs)
	}
}
