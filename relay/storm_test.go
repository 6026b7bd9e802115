package relay_test

import (
	"context"
	"crypto/tls"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quic-go/quic-go"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// storm connects n sessions to r at once over tr ("quic" or "websocket"):
// every transport connection is up (admitted or refused) before any sends
// its SETUP, so all of them are in their handshake together. It returns
// how many sessions got set up.
func storm(t *testing.T, ctx context.Context, r *relay.Relay, tr string, n int) int {
	t.Helper()
	var up atomic.Int32
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
			up.Add(1)
			t.Cleanup(func() { s.Close() })
		}()
	}
	done.Wait()
	return int(up.Load())
}

// TestAdmissionCountsHandshakes: a reconnect storm of 20 sessions, all in
// their handshake at once, against --max-listeners 5, or against a memory
// budget with room for 5 listeners below the high-water mark: at most 5
// get in. (Before, admission counted only sessions already set up, so all
// 20 did.)
func TestAdmissionCountsHandshakes(t *testing.T) {
	const n, m = 20, 5
	for _, tr := range []string{"quic", "websocket"} {
		t.Run(tr+"/max-listeners", func(t *testing.T) {
			ctx := testContext(t)
			r := startRelay(t, relay.Config{MaxSessions: m, MemoryBudget: -1})
			if got := storm(t, ctx, r, tr, n); got > m {
				t.Fatalf("%d of %d concurrent sessions set up with a cap of %d", got, n, m)
			}
			if st := r.Stats(); st.Sessions > m || st.Refused < n-m {
				t.Fatalf("sessions %d, refused %d: want at most %d in and the rest refused", st.Sessions, st.Refused, m)
			}
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
			if got := storm(t, ctx, r, tr, n); got > m {
				t.Fatalf("%d of %d concurrent sessions set up with room for %d below the high-water mark", got, n, m)
			}
		})
	}
}
