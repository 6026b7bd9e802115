package relay_test

import (
	"net"
	"testing"

	"github.com/relayfleet/relayfleet/relay"
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
			hearGroups(t, ctx, tw, subs, groups, size)
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

// TestListenAddressFamilies: the relay's packets leave through
// WriteMsgUDPAddrPort (no sockaddr allocated per packet); over real QUIC,
// listeners hear every group from an IPv4 socket, an IPv6 one, and a
// dual-stack one dialled over IPv4 (peers seen as ::ffff:127.0.0.1) and
// IPv6, with no send error counted.
func TestListenAddressFamilies(t *testing.T) {
	for _, tc := range []struct{ listen, dial string }{
		{"127.0.0.1", "127.0.0.1"}, {"::1", "::1"}, {"::", "127.0.0.1"}, {"::", "::1"},
	} {
		t.Run(tc.listen+" from "+tc.dial, func(t *testing.T) {
			ctx := testContext(t)
			r := startRelayOn(t, tc.listen, relay.Config{})
			_, port, err := net.SplitHostPort(r.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			const size, listeners, groups = 200, 3, 5
			tw, subs := showListenersAt(t, ctx, r, "http://"+net.JoinHostPort(tc.dial, port)+"/", listeners)
			hearGroups(t, ctx, tw, subs, groups, size)
			for kind, n := range r.Stats().UDPSendErrors {
				if n != 0 {
					t.Errorf("%d send errors (%s)", n, kind)
				}
			}
		})
	}
}
