package relay_test

import (
	"context"
	"crypto/tls"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// storm connects n sessions to r at once over tr ("quic" or "websocket"):
// every transport connection is up (admitted or refused) before any sends
// its SETUP, so all of them are in their handshake together. It returns
// the sessions that got set up; they are closed when the test ends.
func storm(t *testing.T, ctx context.Context, r *relay.Relay, tr string, n int) []*client.Session {
	t.Helper()
	var mu sync.Mutex
	var up []*client.Session
	var dialed, done sync.WaitGroup
	dialed.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			var ts transport.Session
			var err error
			switch tr {
			case "quic":
				var c *quic.Conn
				c, err = quic.DialAddr(ctx, r.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"moql"}}, nil)
				if err == nil {
					ts = transport.NewQUIC(c)
				}
			default:
				ts, err = transport.DialWebSocket(ctx, "ws://"+r.Addr().String()+"/", nil)
			}
			dialed.Done()
			if err != nil {
				return // refused before the upgrade (503)
			}
			dialed.Wait()
			s, err := client.NewSession(ctx, ts, "/", quietLogger())
			if err != nil {
				return // refused after the QUIC handshake
			}
			mu.Lock()
			up = append(up, s)
			mu.Unlock()
			t.Cleanup(func() { s.Close() })
		}()
	}
	done.Wait()
	return up
}

// admitted checks the outcome of a storm of n sessions against room for
// m: exactly m set up, the relay counts m open and n-m refused, and each
// admitted session is served: the first publishes show/audio, every one
// of them (the publisher too) subscribes to it and hears a group. The
// refusal counters may trail the clients' errors by a moment, so the
// relay's counts are polled briefly before they fail the test.
func admitted(t *testing.T, ctx context.Context, r *relay.Relay, up []*client.Session, n, m int) {
	t.Helper()
	if len(up) != m {
		t.Fatalf("%d of %d concurrent sessions set up, want exactly %d (the rest refused)", len(up), n, m)
	}
	var st relay.Stats
	if !testutil.Poll(5*time.Second, func() bool {
		st = r.Stats()
		return st.Sessions == m && st.Refused == int64(n-m)
	}) {
		t.Fatalf("relay counts %d sessions open and %d refused, want %d and %d", st.Sessions, st.Refused, m, n-m)
	}
	tw := up[0].Publish("show").Track("audio")
	subs := make([]*client.Subscription, len(up))
	for i, s := range up {
		subs[i] = subscribeWhenAnnounced(t, ctx, s, "show", "audio")
	}
	if err := tw.WaitSubscribers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, "the admitted sessions' subscriptions", func() bool { return r.Stats().Subscribers >= int64(m) })
	hearGroups(t, ctx, tw, subs, 1, 64)
}

// TestAdmissionCountsHandshakes: a reconnect storm of 20 sessions, all in
// their handshake at once, against --max-listeners 5, or against a memory
// budget with room for 5 listeners below the high-water mark: exactly 5
// get in, the other 15 are refused, and the 5 are served (they subscribe
// and hear a group). (Before, admission counted only sessions already set
// up, so all 20 did; a relay that refused everyone would fail too.)
func TestAdmissionCountsHandshakes(t *testing.T) {
	const n, m = 20, 5
	for _, tr := range []string{"quic", "websocket"} {
		t.Run(tr+"/max-listeners", func(t *testing.T) {
			ctx := testContext(t)
			r := startRelay(t, relay.Config{MaxSessions: m, MemoryBudget: -1})
			admitted(t, ctx, r, storm(t, ctx, r, tr, n), n, m)
		})
		t.Run(tr+"/high-water", func(t *testing.T) {
			ctx := testContext(t)
			const budget = 100 << 20
			highWater := uint64(budget * 8 / 10)
			used := func() uint64 { return highWater - m*relay.DefaultListenerBytes - relay.DefaultListenerBytes/2 }
			r := startRelay(t, relay.Config{MemoryBudget: budget, MemoryUsage: used})
			if h := r.Stats().Headroom; h != m {
				t.Fatalf("headroom %d before the storm, want %d", h, m)
			}
			admitted(t, ctx, r, storm(t, ctx, r, tr, n), n, m)
		})
	}
}
