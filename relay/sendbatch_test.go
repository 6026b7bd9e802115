package relay_test

import (
	"testing"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// TestSendBatch: over real QUIC, 24 listeners hear 10 groups each through
// the batched socket (SendBatch 64) and through one sendmsg per packet
// (the default, and SendBatch 1); /stats counts the packets and the
// system calls, fewer calls than packets only with batching.
func TestSendBatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		batch   int
		batched bool
	}{{"batched", 64, true}, {"default", 0, false}, {"off", 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			r := startRelay(t, relay.Config{SendBatch: tc.batch})
			const size, listeners, groups = 200, 24, 10
			tw, subs := showListeners(t, ctx, r, listeners)
			before := r.Stats()
			for g := uint64(0); g < groups; g++ {
				if err := tw.WriteGroup(ctx, g, [][]byte{client.Pattern(g, 0, size)}); err != nil {
					t.Fatal(err)
				}
			}
			for i, sub := range subs {
				got, err := collect(ctx, sub, groups, size)
				if err != nil || len(got) != groups {
					t.Fatalf("listener %d: %d groups, %v", i, len(got), err)
				}
			}
			st := r.Stats()
			packets, calls := st.UDPPacketsSent-before.UDPPacketsSent, st.UDPSendCalls-before.UDPSendCalls
			t.Logf("%d packets in %d system calls", packets, calls)
			if packets < listeners { // a connection packs groups sent together into one packet
				t.Errorf("udp_packets_sent_total grew by %d, want at least %d (a packet per listener)", packets, listeners)
			}
			if tc.batched && calls >= packets {
				t.Errorf("batched: %d system calls for %d packets", calls, packets)
			}
			if !tc.batched && calls != packets {
				t.Errorf("one sendmsg per packet: %d system calls for %d packets", calls, packets)
			}
		})
	}
}
