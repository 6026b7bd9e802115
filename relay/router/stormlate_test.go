package router_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/loadgen"
	"github.com/relayfleet/relayfleet/relay/router"
)

// TestReconnectStormPublisherLate is the lab's storm on loopback, with the
// order that makes its tail: two origins (fresh relay processes on their
// ports after the outage, knowing no broadcast), two edges pulling from
// both, one publisher to both (loadgen.Publish with Origins: the
// client.PublishOrigins re-dial schedule), 200 listeners through the
// router. Both origins stop for 20 s and start again; the publisher's path
// to them (a UDP gate) opens publisherLag after their return, so the edges
// are back on the origins, and subscribe there, before the broadcast is.
// Every listener must hear audio again within 3 s of the first origin's
// return (issue 32).
func TestReconnectStormPublisherLate(t *testing.T) {
	testutil.Short(t, "make test-long (a 30 s run of 200 listeners, two origins, two edges)")
	const (
		listeners    = 200
		outage       = 20 * time.Second
		publisherLag = 800 * time.Millisecond // the lab's publisher: on the first origin 0.76 s after the return
		bound        = 3 * time.Second
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		addrs   [2]string
		keys    [2]*ecdsa.PrivateKey
		origins [2]*relay.Relay
		gates   [2]*testutil.UDPProxy
		ups     [2]string
		pubURLs [2]string
	)
	startOrigin := func(i int) {
		t.Helper()
		r, err := relay.Start(ctx, relay.Config{Listen: addrs[i], TLSKey: keys[i], MemoryBudget: -1, Logger: testutil.Logger()})
		if err != nil {
			t.Fatalf("start origin %d on %s: %v", i, addrs[i], err)
		}
		origins[i], addrs[i] = r, r.Addr().String()
	}
	for i := range origins {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		keys[i], addrs[i] = k, "127.0.0.1:0"
		startOrigin(i)
		spki := origins[i].Stats().SPKISHA256
		ups[i] = fmt.Sprintf("http://%s/#spki=%s", addrs[i], spki)
		gates[i] = testutil.NewUDPProxy(t, addrs[i])
		pubURLs[i] = fmt.Sprintf("http://%s/#spki=%s", gates[i].Addr(), spki)
	}
	t.Cleanup(func() {
		for _, o := range origins {
			if o != nil {
				o.Close()
			}
		}
	})
	pctx, pcancel := context.WithCancel(ctx)
	pubDone := make(chan error, 1)
	go func() {
		pubDone <- loadgen.Publish(pctx, pubURLs[0], loadgen.PublishOptions{Broadcast: "live", FrameTime: 20 * time.Millisecond,
			FramesPerGroup: 5, FrameSize: 100, Logger: testutil.Logger(), Origins: pubURLs[1:]})
	}()
	defer func() { pcancel(); <-pubDone }()
	testutil.WaitFor(t, 15*time.Second, "the broadcast on both origins", func() bool {
		return origins[0].Stats().Publishers == 1 && origins[1].Stats().Publishers == 1
	})

	var edges [2]*relay.Relay
	file := `{"relays": [`
	for i := range edges {
		e, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", Upstreams: ups[:], MaxSessionsPerAddress: -1, MemoryBudget: -1, Logger: testutil.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		edges[i] = e
		if i > 0 {
			file += ","
		}
		file += fmt.Sprintf(`{"url": "http://%s/", "stats": "http://%s/stats"}`, e.Addr(), e.Addr())
	}
	file += `]}`
	path := filepath.Join(t.TempDir(), "relays.json")
	if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Options{File: path, Poll: 250 * time.Millisecond, Logger: testutil.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	rt.PollOnce(ctx)
	go rt.Run(ctx)
	srv := httptest.NewServer(rt)
	defer srv.Close()

	var (
		stoppedAt, returnedAt time.Time
		pubAt, pulledAt       [2]time.Duration // after returnedAt
	)
	faulted := make(chan struct{})
	win := func(start bool) {
		if !start {
			return
		}
		go func() {
			defer close(faulted)
			time.Sleep(2 * time.Second)
			stoppedAt = time.Now()
			for i := range origins {
				origins[i].Close()
				origins[i] = nil
				gates[i].Drop.Store(true)
			}
			time.Sleep(outage)
			for i := range origins {
				startOrigin(i)
				if i == 0 {
					returnedAt = time.Now()
				}
			}
			t.Logf("origins back at %s", returnedAt.Format("15:04:05.000"))
			var in [2]int64
			for i, e := range edges {
				in[i] = e.Stats().GroupsIn
			}
			opened := false
			for time.Since(returnedAt) < 10*time.Second {
				since := time.Since(returnedAt)
				if !opened && since >= publisherLag {
					for _, g := range gates {
						g.Drop.Store(false)
					}
					opened = true
				}
				done := opened
				for i := range origins {
					if pubAt[i] == 0 && origins[i].Stats().Publishers > 0 {
						pubAt[i] = since
					}
					if pulledAt[i] == 0 && edges[i].Stats().GroupsIn != in[i] {
						pulledAt[i] = since
					}
					done = done && pubAt[i] != 0 && pulledAt[i] != 0
				}
				if done {
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	rep, err := loadgen.Run(ctx, loadgen.Options{
		Router: srv.URL, Broadcast: "live", Listeners: listeners, Shards: 8, Duration: 2*time.Second + outage + 7*time.Second, Late: time.Hour,
		Reconnect: true, Logger: stormLogger(t), Window: win,
	})
	<-faulted
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %+v", rep)
	gap := time.Duration(rep.GapMs.Max * float64(time.Millisecond))
	back := gap - returnedAt.Sub(stoppedAt)
	t.Logf("STORMLATE audio back at most %v after the first origin's return (bound %v); publisher on the origins after %v, %v (its path opened after %v); edges pulling again after %v, %v",
		back.Round(time.Millisecond), bound, pubAt[0].Round(time.Millisecond), pubAt[1].Round(time.Millisecond), publisherLag,
		pulledAt[0].Round(time.Millisecond), pulledAt[1].Round(time.Millisecond))
	if back > bound || rep.ListenersLost != 0 || rep.SilentAtEnd != 0 || rep.Connected != listeners {
		t.Errorf("report %+v: want every listener back within %v of the first origin's return (%v), none lost or silent at the end", rep, bound, back.Round(time.Millisecond))
	}
}
