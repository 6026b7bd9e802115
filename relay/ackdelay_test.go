package relay_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// TestAckDelayHalvesPackets: over real QUIC, with 120 ms groups, a
// listener's ACK (which carries a MAX_STREAMS for every group stream it
// finished, so the relay must acknowledge it) is answered in the relay's
// next audio packet by default (DefaultAckDelay, 200 ms), not in a packet
// of its own 25 ms later as with quic-go's delay: about one packet per
// listener and group instead of two (/stats udp_packets_sent_total).
func TestAckDelayHalvesPackets(t *testing.T) {
	for _, tc := range []struct {
		name     string
		delay    time.Duration
		min, max float64 // packets sent per listener and group
	}{{"default", 0, 0.9, 1.5}, {"quic-go's 25ms", 25 * time.Millisecond, 1.6, 2.6}} {
		t.Run(tc.name, func(t *testing.T) {
			write := func(ctx context.Context, tw *client.TrackWriter, g uint64, frame []byte) error {
				return tw.WriteGroup(ctx, g, [][]byte{frame})
			}
			per := packetsPerListenerGroup(t, relay.Config{AckDelay: tc.delay}, write, nil)
			if per < tc.min || per > tc.max {
				t.Errorf("ack delay %v: %.2f packets per listener and group, want %.1f to %.1f", tc.delay, per, tc.min, tc.max)
			}
		})
	}
}

// TestAckDelayOutOfRange: Start refuses a negative ack delay or one past
// relay.MaxAckDelay, naming it, before it binds anything.
func TestAckDelayOutOfRange(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, relay.MaxAckDelay + time.Millisecond} {
		r, err := relay.Start(testContext(t), relay.Config{AckDelay: d})
		if err == nil {
			r.Close()
			t.Fatalf("ack delay %v accepted", d)
		}
		if !strings.Contains(err.Error(), "ack delay "+d.String()) {
			t.Errorf("ack delay %v: error %q does not name it", d, err)
		}
	}
}

// TestAckThresholdOutOfRange: Start refuses a negative ack threshold or
// one past relay.MaxAckThreshold, naming it.
func TestAckThresholdOutOfRange(t *testing.T) {
	for _, n := range []int{-1, relay.MaxAckThreshold + 1} {
		r, err := relay.Start(testContext(t), relay.Config{AckThreshold: n})
		if err == nil {
			r.Close()
			t.Fatalf("ack threshold %d accepted", n)
		}
		if want := fmt.Sprintf("ack threshold %d", n); !strings.Contains(err.Error(), want) {
			t.Errorf("ack threshold %d: error %q does not name it", n, err)
		}
	}
}

// TestGroupEndRidesWithNextGroup: a live publisher ends group N when
// group N+1's frame is due, so one packet from it carries both; on one
// CPU (GOMAXPROCS 1, as a relay@ unit) the relay's writer lets N's end be
// appended before it writes N+1, and each listener gets one packet for
// both, not N's end alone and then N+1 (/stats udp_packets_sent_total).
func TestGroupEndRidesWithNextGroup(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var gw *client.GroupWriter
	write := func(ctx context.Context, tw *client.TrackWriter, g uint64, frame []byte) error {
		if gw != nil { // the previous group ends as this one starts
			if err := gw.Close(); err != nil {
				return err
			}
		}
		var err error
		if gw, err = tw.OpenGroup(ctx, g); err != nil {
			return err
		}
		return gw.WriteFrame(frame)
	}
	per := packetsPerListenerGroup(t, relay.Config{}, write, func() { _ = gw.Close() })
	if per > 1.6 {
		t.Errorf("%.2f packets per listener and group, want at most 1.6 (a group's end in a packet of its own: 2)", per)
	}
}

// packetsPerListenerGroup starts a relay with cfg and 12 listeners,
// publishes 3 warm-up and 12 counted one-frame groups through write, one
// every 120 ms (paced, as a live publisher), calls done (when not nil)
// after the last, waits for every listener to hear them all, and returns
// the packets the relay sent per listener and counted group
// (/stats udp_packets_sent_total).
func packetsPerListenerGroup(t *testing.T, cfg relay.Config, write func(ctx context.Context, tw *client.TrackWriter, g uint64, frame []byte) error, done func()) float64 {
	t.Helper()
	ctx := testContext(t)
	r := startRelay(t, cfg)
	const size, listeners, warm, groups = 200, 12, 3, 12
	const interval = 120 * time.Millisecond
	tw, subs := showListeners(t, ctx, r, listeners)
	errs := make(chan error, listeners)
	for _, sub := range subs {
		go func() {
			_, err := collect(ctx, sub, warm+groups, size)
			errs <- err
		}()
	}
	var before relay.Stats
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for g := uint64(0); g < warm+groups; g++ {
		if g == warm { // after the handshakes' and path MTU probes' packets
			before = r.Stats()
		}
		if err := write(ctx, tw, g, client.Pattern(g, 0, size)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-tick.C:
		}
	}
	if done != nil {
		done()
	}
	for range subs {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	sent := r.Stats().UDPPacketsSent - before.UDPPacketsSent
	per := float64(sent) / (listeners * groups)
	t.Logf("%d packets for %d listeners x %d groups: %.2f each", sent, listeners, groups, per)
	return per
}
