package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/client"
)

// PublishGroups publishes broadcast/audio on url, one 64-byte frame per
// group every 20 ms, sequences from first on, until ctx ends or the
// session does; then it closes the session, and done. Package relay_test
// publishes with it too (publishLoop).
func PublishGroups(t *testing.T, ctx context.Context, url, broadcast string, first uint64) (s *client.Session, done <-chan struct{}) {
	t.Helper()
	s, err := client.Dial(ctx, url, &client.Options{Logger: testLogger()})
	if err != nil {
		t.Fatalf("dial publisher: %v", err)
	}
	tw := s.Publish(broadcast).Track("audio")
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		defer s.Close()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for seq := first; ; seq++ {
			_ = tw.WriteGroup(ctx, seq, [][]byte{client.Pattern(seq, 0, 64)})
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			case <-s.Done():
				return
			}
		}
	}()
	return s, stopped
}

// hear subscribes to live/audio on r and counts the groups it hears in
// groups, and in last the time the last came (unix nanoseconds), until
// ctx ends; the session is closed at the test's end.
func hear(t *testing.T, ctx context.Context, r *Relay) (groups, last *atomic.Int64) {
	t.Helper()
	lis, err := client.Dial(ctx, fmt.Sprintf("http://%s/", r.Addr()), &client.Options{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lis.Close() })
	sub, err := lis.Subscribe(ctx, "live", "audio")
	if err != nil {
		t.Fatal(err)
	}
	groups, last = new(atomic.Int64), new(atomic.Int64)
	go func() {
		for {
			g, err := sub.NextGroup(ctx)
			if err != nil {
				return
			}
			groups.Add(1)
			last.Store(time.Now().UnixNano())
			g.Abort()
		}
	}()
	return groups, last
}

// TestEdgeLinkSurvivesOriginRestart: the origin relay process crashes
// under an edge that pulls a track from it for a listener, and a new
// origin process starts on its port with the same reset secret. The
// edge's link only receives, so nothing would end it before the 30 s idle
// timeout; the silent track makes the edge probe the link, the probe draws
// a stateless reset, and the edge re-dials and re-subscribes: the listener
// on the edge hears the new origin's publisher within seconds.
func TestEdgeLinkSurvivesOriginRestart(t *testing.T) {
	t.Parallel()
	secret := randomSecret(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	origin, err := Start(ctx, Config{Listen: "127.0.0.1:0", Logger: testLogger(), ResetSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	addr := origin.Addr().String()
	edge := startTestRelay(t, Config{Upstreams: []string{"http://" + addr + "/"}})

	pctx, pcancel := context.WithCancel(ctx)
	pub, _ := PublishGroups(t, pctx, "http://"+addr+"/", "live", 0)
	if !testutil.Poll(15*time.Second, func() bool { return origin.Stats().Publishers == 1 }) {
		t.Fatal("the broadcast was not announced on the origin")
	}
	groups, last := hear(t, ctx, edge)
	testutil.WaitFor(t, 15*time.Second, "groups on the edge's listener", func() bool { return groups.Load() >= 5 })
	// Past the link's first moments, whose path MTU probes are large
	// enough to draw a reset by themselves.
	time.Sleep(1500 * time.Millisecond)

	origin.crash()
	pcancel()
	pub.Close()
	origin.Close()
	crashed := time.Now()
	next, err := Start(ctx, Config{Listen: addr, Logger: testLogger(), ResetSecret: secret})
	if err != nil {
		t.Fatalf("start the new origin on %s: %v", addr, err)
	}
	defer next.Close()
	before := groups.Load()
	pub2, _ := PublishGroups(t, ctx, "http://"+addr+"/", "live", 1000)
	defer pub2.Close()
	if !testutil.Poll(10*time.Second, func() bool { return groups.Load() >= before+5 }) {
		t.Fatalf("the listener on the edge heard nothing from the new origin in 10 s (edge: %+v)", edge.Stats())
	}
	t.Logf("the listener on the edge heard the new origin %v after the crash", time.Unix(0, last.Load()).Sub(crashed).Round(time.Millisecond))
}

// TestEdgeLinkFailsOverFromDeadOrigin: the first of an edge's two
// upstreams crashes and nothing takes its port. The silent track's probe
// gets no answer within upstreamProbeWait, so the edge drops the link and
// dials the second upstream, which carries the same broadcast: the
// listener hears it within seconds, not after the 30 s idle timeout.
func TestEdgeLinkFailsOverFromDeadOrigin(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := Start(ctx, Config{Listen: "127.0.0.1:0", Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second := startTestRelay(t, Config{})
	edge := startTestRelay(t, Config{Upstreams: []string{
		fmt.Sprintf("http://%s/", first.Addr()), fmt.Sprintf("http://%s/", second.Addr()),
	}})
	pub1, _ := PublishGroups(t, ctx, fmt.Sprintf("http://%s/", first.Addr()), "live", 0)
	defer pub1.Close()
	pub2, _ := PublishGroups(t, ctx, fmt.Sprintf("http://%s/", second.Addr()), "live", 0)
	defer pub2.Close()
	if !testutil.Poll(15*time.Second, func() bool { return first.Stats().Publishers == 1 && second.Stats().Publishers == 1 }) {
		t.Fatal("the broadcast was not announced on both origins")
	}
	groups, _ := hear(t, ctx, edge)
	testutil.WaitFor(t, 15*time.Second, "groups on the edge's listener", func() bool { return groups.Load() >= 5 })
	if first.Stats().Subscribers != 1 || second.Stats().Subscribers != 0 {
		t.Fatalf("the edge pulls from the second upstream already (subscribers %d and %d)",
			first.Stats().Subscribers, second.Stats().Subscribers)
	}
	time.Sleep(1500 * time.Millisecond) // past the link's path MTU probes

	first.crash()
	crashed := time.Now()
	before := groups.Load()
	if !testutil.Poll(12*time.Second, func() bool { return groups.Load() >= before+5 }) {
		t.Fatalf("the listener on the edge heard nothing in 12 s after the first upstream died (edge: %+v)", edge.Stats())
	}
	t.Logf("the listener on the edge heard the second upstream %v after the first died", time.Since(crashed).Round(time.Millisecond))
}
