//go:build !stockquic

// The patched quic-go's ACK and probe-timeout features are what this
// file measures: not built with the stockquic tag (docs/quic-go-patch.md).

package relay_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/relayfleet/relayfleet/relay"
	"github.com/relayfleet/relayfleet/relay/client"
)

// TestAckDelayHalvesPackets: over real QUIC, with 120 ms groups, the ACK
// of a listener whose QUIC gives stream credit for every stream it
// finished, as quic-go's does (a MAX_STREAMS with every ACK, so the relay
// must acknowledge it), is answered in the relay's next audio packet by
// default (DefaultAckDelay, 200 ms), not in a packet of its own 25 ms
// later as with quic-go's delay: about one packet per listener and group
// instead of two (/stats udp_packets_sent_total).
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
			// listeners as quic-go's: stream credit for every stream, and
			// asked nothing: each ACKs every audio packet
			per, _ := packetsPerListenerGroup(t, relay.Config{AckDelay: tc.delay, ListenerAckDelay: -1}, &client.Options{TuneQUIC: quicGoListener}, write, nil)
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
	per, _ := packetsPerListenerGroup(t, relay.Config{}, nil, write, func() { _ = gw.Close() })
	if per > 1.6 {
		t.Errorf("%.2f packets per listener and group, want at most 1.6 (a group's end in a packet of its own: 2)", per)
	}
}

// quicGoListener makes a listener's QUIC give stream credit as quic-go's
// own does: a MAX_STREAMS for every stream finished.
func quicGoListener(c *quic.Config) { c.BatchMaxStreams = false }

// packetsPerListenerGroup starts a relay with cfg and 12 listeners
// dialled with opts (nil: relayfleet's client as it is),
// publishes 3 warm-up and 12 counted one-frame groups through write, one
// every 120 ms (paced, as a live publisher), calls done (when not nil)
// after the last, waits for every listener to hear them all, and returns
// the packets the relay sent (/stats udp_packets_sent_total) and received
// (its sessions' packets, the publisher's among them), per listener and
// counted group.
func packetsPerListenerGroup(t *testing.T, cfg relay.Config, opts *client.Options, write func(ctx context.Context, tw *client.TrackWriter, g uint64, frame []byte) error, done func()) (sentPer, receivedPer float64) {
	t.Helper()
	ctx := testContext(t)
	r := startRelay(t, cfg)
	const size, listeners, warm, groups = 200, 12, 3, 12
	const interval = 120 * time.Millisecond
	tw, subs := showListenersWith(t, ctx, r, relayURL(r, ""), listeners, opts)
	errs := make(chan error, listeners)
	for _, sub := range subs {
		go func() {
			_, err := collect(ctx, sub, warm+groups, size)
			errs <- err
		}()
	}
	var before relay.Stats
	var received uint64
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for g := uint64(0); g < warm+groups; g++ {
		if g == warm { // after the handshakes' and path MTU probes' packets
			before, received = r.Stats(), r.PacketsReceivedForTest()
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
	received = r.PacketsReceivedForTest() - received
	sentPer, receivedPer = float64(sent)/(listeners*groups), float64(received)/(listeners*groups)
	t.Logf("%d packets sent, %d received for %d listeners x %d groups: %.2f and %.2f each", sent, received, listeners, groups, sentPer, receivedPer)
	return sentPer, receivedPer
}

// TestListenersAckEveryOtherPacket: over real QUIC, with 120 ms groups, the
// relay asks its listeners (relayfleet's client supports the ACK frequency
// extension, and gives stream credit in batches) to acknowledge every
// other audio packet, and they do: the relay receives about half a packet
// per listener and group, against one when it asks nothing
// (--listener-ack-delay 0) or when the listener gives credit for every
// stream (each ACK then carries a MAX_STREAMS and leaves at once), and
// sends no more.
func TestListenersAckEveryOtherPacket(t *testing.T) {
	write := func(ctx context.Context, tw *client.TrackWriter, g uint64, frame []byte) error {
		return tw.WriteGroup(ctx, g, [][]byte{frame})
	}
	cases := []struct {
		name  string
		delay time.Duration
		opts  *client.Options
	}{
		{"asks nothing", -1, nil},
		{"default", 0, nil},
		{"credit for every stream", 0, &client.Options{TuneQUIC: quicGoListener}},
		{"listeners without the extension", 0, &client.Options{TuneQUIC: func(c *quic.Config) { c.EnableAckFrequency = false }}},
	}
	// Compared with one another, run in the same test: a loaded machine
	// (make test runs packages side by side) adds packets to all of them.
	rx := make([]float64, len(cases))
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var sent float64
			sent, rx[i] = packetsPerListenerGroup(t, relay.Config{ListenerAckDelay: tc.delay}, tc.opts, write, nil)
			if sent > 1.6 {
				t.Errorf("the relay sent %.2f packets per listener and group, want at most 1.6", sent)
			}
		})
	}
	nothing := rx[0]
	if nothing < 0.9 {
		t.Fatalf("asked nothing, the relay received %.2f packets per listener and group, want at least 0.9 (an ACK of each packet)", nothing)
	}
	if rx[1] > 0.75*nothing {
		t.Errorf("listeners asked: the relay received %.2f packets per listener and group, %.2f asked nothing: want at most 0.75 times as many", rx[1], nothing)
	}
	for i := 2; i < len(cases); i++ {
		if rx[i] < 0.85*nothing {
			t.Errorf("%s: the relay received %.2f packets per listener and group, %.2f asked nothing: want about as many", cases[i].name, rx[i], nothing)
		}
	}
}

// TestListenerAckConfigOutOfRange: Start refuses a listener ack delay past
// relay.MaxAckDelay or a listener ack threshold out of range, naming it.
func TestListenerAckConfigOutOfRange(t *testing.T) {
	for _, tc := range []struct {
		cfg  relay.Config
		want string
	}{
		{relay.Config{ListenerAckDelay: relay.MaxAckDelay + time.Millisecond}, "listener ack delay 1.001s"},
		{relay.Config{ListenerAckThreshold: -1}, "listener ack threshold -1"},
		{relay.Config{ListenerAckThreshold: relay.MaxAckThreshold + 1}, fmt.Sprintf("listener ack threshold %d", relay.MaxAckThreshold+1)},
	} {
		r, err := relay.Start(testContext(t), tc.cfg)
		if err == nil {
			r.Close()
			t.Fatalf("%s accepted", tc.want)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q does not name %q", err, tc.want)
		}
	}
}
