package relay_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// publishLoop publishes broadcast/audio on url (relay.PublishGroups)
// until ctx ends or the session dies; the channel is closed then.
func publishLoop(ctx context.Context, t *testing.T, url, broadcast string, first uint64) <-chan struct{} {
	t.Helper()
	_, done := relay.PublishGroups(t, ctx, url, broadcast, first)
	return done
}

// TestClusterLinkOneUpstreamSubscriptionPerTrack runs an origin and an edge
// relay: listeners on the edge share one upstream subscription, and when the
// origin dies and comes back they keep receiving on the same sessions.
func TestClusterLinkOneUpstreamSubscriptionPerTrack(t *testing.T) {
	ctx := testContext(t)
	origin := startRelay(t, relay.Config{})
	originAddr := origin.Addr().String()
	edge := startRelay(t, relay.Config{Upstreams: []string{relayURL(origin, "")}})

	pubCtx, stopPub := context.WithCancel(ctx)
	pubDone := publishLoop(pubCtx, t, relayURL(origin, ""), "live", 0)
	testutil.WaitFor(t, 10*time.Second, "broadcast on the origin", func() bool { return origin.Stats().Broadcasts == 1 })

	const listeners = 8
	lctx, stopListeners := context.WithCancel(ctx)
	var maxSeq [listeners]atomic.Uint64
	var ended atomic.Int32
	var wg sync.WaitGroup
	for i := range listeners {
		s := dial(t, ctx, relayURL(edge, ""), nil)
		sub, err := s.Subscribe(ctx, "live", "audio")
		if err != nil {
			t.Fatalf("listener %d: subscribe on the edge: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sub.Close()
			for {
				g, err := sub.NextGroup(lctx)
				if err != nil {
					if lctx.Err() == nil {
						ended.Add(1)
					}
					return
				}
				if _, err := readGroup(g, 64); err == nil && g.Sequence+1 > maxSeq[i].Load() {
					maxSeq[i].Store(g.Sequence + 1)
				}
			}
		}()
	}
	defer func() { stopListeners(); wg.Wait() }()
	allPast := func(seq uint64) func() bool {
		return func() bool {
			for i := range listeners {
				if maxSeq[i].Load() <= seq {
					return false
				}
			}
			return true
		}
	}
	testutil.WaitFor(t, 10*time.Second, "every edge listener to receive", allPast(0))
	if st := origin.Stats(); st.Subscribers != 1 || st.Sessions != 2 {
		t.Fatalf("origin has %d subscriptions over %d sessions, want 1 over 2 (publisher, edge)", st.Subscribers, st.Sessions)
	}
	if st := edge.Stats(); st.UpstreamTracks != 1 || st.Subscribers != listeners || !st.UpstreamConnected {
		t.Fatalf("edge stats %+v: want 1 upstream track, %d subscribers, upstream connected", st, listeners)
	}

	// Kill the origin and its publisher, then bring both back on the same port.
	stopPub()
	<-pubDone
	origin.Close()
	// The origin's CONNECTION_CLOSE usually tells the edge at once; when it
	// is lost (a loaded machine), the edge notices at its QUIC idle timeout
	// (30 s), as it would after a crash.
	testutil.WaitFor(t, 40*time.Second, "the edge to notice", func() bool { return !edge.Stats().UpstreamConnected })
	origin2, err := relay.Start(context.Background(), relay.Config{Listen: originAddr, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("restart origin: %v", err)
	}
	defer origin2.Close()
	pubCtx2, stopPub2 := context.WithCancel(ctx)
	defer stopPub2()
	pubDone2 := publishLoop(pubCtx2, t, relayURL(origin2, ""), "live", 1_000_000)
	defer func() { stopPub2(); <-pubDone2 }()

	testutil.WaitFor(t, 10*time.Second, "every edge listener to receive from the new origin", allPast(1_000_000))
	if n := ended.Load(); n != 0 {
		t.Fatalf("%d listeners lost their subscription across the origin restart", n)
	}
	if st := origin2.Stats(); st.Subscribers != 1 {
		t.Fatalf("restarted origin has %d subscriptions, want 1", st.Subscribers)
	}
	if st := edge.Stats(); st.UpstreamSubscribes < 2 || st.Sessions != listeners {
		t.Fatalf("edge: %d upstream subscribes and %d sessions, want at least 2 and %d", st.UpstreamSubscribes, st.Sessions, listeners)
	}
}

// TestClusterLinkUnknownBroadcast: an edge listener asking for a broadcast
// the upstream does not have sees the track end, and nothing is left.
func TestClusterLinkUnknownBroadcast(t *testing.T) {
	ctx := testContext(t)
	origin := startRelay(t, relay.Config{})
	edge := startRelay(t, relay.Config{Upstreams: []string{relayURL(origin, "")}})
	s := dial(t, ctx, relayURL(edge, ""), nil)
	sub, err := s.Subscribe(ctx, "nope", "audio")
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	defer sub.Close()
	if _, err := sub.NextGroup(ctx); err == nil {
		t.Fatal("got a group of a broadcast nobody publishes")
	}
	testutil.WaitFor(t, 10*time.Second, "the pulled track to go", func() bool { return edge.Stats().UpstreamTracks == 0 })
}

// TestClusterLinkLeavesNoGoroutines: closing the listeners, the edge and
// the origin ends every goroutine the link started.
func TestClusterLinkLeavesNoGoroutines(t *testing.T) {
	testutil.NoLeaks(t)
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		origin, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer origin.Close()
		edge, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", Logger: quietLogger(), Upstreams: []string{relayURL(origin, "")}})
		if err != nil {
			t.Fatal(err)
		}
		defer edge.Close()
		pubCtx, stopPub := context.WithCancel(ctx)
		pubDone := publishLoop(pubCtx, t, relayURL(origin, ""), "live", 0)
		defer func() { stopPub(); <-pubDone }()
		testutil.WaitFor(t, 10*time.Second, "broadcast", func() bool { return origin.Stats().Broadcasts == 1 })
		s, err := client.Dial(ctx, relayURL(edge, ""), &client.Options{Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sub, err := s.Subscribe(ctx, "live", "audio")
		if err != nil {
			t.Fatal(err)
		}
		g, err := sub.NextGroup(ctx)
		if err != nil {
			t.Fatal(err)
		}
		g.Close()
		sub.Close()
		testutil.WaitFor(t, 10*time.Second, "the pulled track to end with its last listener", func() bool { return edge.Stats().UpstreamTracks == 0 })
		testutil.WaitFor(t, 10*time.Second, "the upstream subscription to end", func() bool { return origin.Stats().Subscribers == 0 })
	}()
}

// TestClusterLinkMirrorsAnnouncements: a listener on the edge sees the
// origin's broadcasts come and go, as it would on the origin.
func TestClusterLinkMirrorsAnnouncements(t *testing.T) {
	ctx := testContext(t)
	origin := startRelay(t, relay.Config{})
	edge := startRelay(t, relay.Config{Upstreams: []string{relayURL(origin, "")}})
	s := dial(t, ctx, relayURL(edge, ""), nil)
	ann, err := s.Announced(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer ann.Close()

	pubCtx, stopPub := context.WithCancel(ctx)
	pubDone := publishLoop(pubCtx, t, relayURL(origin, ""), "room/1", 0)
	if err := ann.WaitFor(ctx, "room/1"); err != nil {
		t.Fatalf("wait for the origin's broadcast on the edge: %v", err)
	}
	stopPub()
	<-pubDone
	a, err := ann.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a.Path != "room/1" || a.Active {
		t.Fatalf("got %+v, want room/1 ended", a)
	}
	// A listener that connects later gets it in the initial list, and can
	// then subscribe through the edge.
	pubCtx2, stopPub2 := context.WithCancel(ctx)
	pubDone2 := publishLoop(pubCtx2, t, relayURL(origin, ""), "room/2", 0)
	defer func() { stopPub2(); <-pubDone2 }()
	testutil.WaitFor(t, 10*time.Second, "the edge to learn of room/2", func() bool {
		s2, err := client.Dial(ctx, relayURL(edge, ""), &client.Options{Logger: quietLogger()})
		if err != nil {
			return false
		}
		defer s2.Close()
		a2, err := s2.Announced(ctx, "")
		if err != nil {
			return false
		}
		defer a2.Close()
		for _, p := range a2.Initial() {
			if p == "room/2" {
				return true
			}
		}
		return false
	})
	sub := subscribeWhenAnnounced(t, ctx, s, "room/2", "audio")
	defer sub.Close()
	g, err := sub.NextGroup(ctx)
	if err != nil {
		t.Fatalf("no group through the edge: %v", err)
	}
	g.Close()
}
