package relay_test

import (
	"testing"

	"github.com/relayfleet/relayfleet/relay"
)

// TestRelaySendsWithoutGSO: the relay's QUIC connections send without
// GSO (gso.go: with it, every packet queued holds a 20 KiB buffer), unless
// the operator sets QUIC_GO_DISABLE_GSO=false; then quic-go uses GSO
// where the kernel has it, which shows that the count can see it.
func TestRelaySendsWithoutGSO(t *testing.T) {
	for _, tc := range []struct {
		name, env string
		gso       bool
	}{{"default", "", false}, {"operator-enables", "false", true}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("QUIC_GO_DISABLE_GSO", tc.env)
			}
			ctx := testContext(t)
			r := startRelay(t, relay.Config{})
			const size, listeners, groups = 200, 4, 5
			tw, subs := showListeners(t, ctx, r, listeners)
			hearGroups(t, ctx, tw, subs, groups, size)
			sent, seg := r.Stats().UDPPacketsSent, r.SegmentedWritesForTest()
			t.Logf("%d packets sent, %d with a GSO segment size", sent, seg)
			if sent < listeners*groups/2 {
				t.Fatalf("only %d packets sent", sent)
			}
			switch {
			case !tc.gso && seg != 0:
				t.Errorf("%d of %d writes used GSO, want none", seg, sent)
			case tc.gso && seg == 0 && gsoAvailable(t):
				t.Errorf("QUIC_GO_DISABLE_GSO=false: no write used GSO (of %d)", sent)
			}
		})
	}
}
