package ackhandler

// Tests of the relayfleet patch's configurable ACK delay.

import (
	"testing"
	"time"

	"github.com/quic-go/quic-go/internal/monotime"
	"github.com/quic-go/quic-go/internal/protocol"
	"github.com/quic-go/quic-go/internal/utils"
	"github.com/quic-go/quic-go/internal/wire"
)

func TestRelayfleetAckAlarmWaitsMaxAckDelay(t *testing.T) {
	for _, d := range []time.Duration{MaxAckDelay, 200 * time.Millisecond} {
		h := NewReceivedPacketHandler(utils.DefaultLogger, d, 0)
		now := monotime.Now()
		// One ack-eliciting packet: the ACK waits for the alarm, d later.
		if err := h.ReceivedPacket(0, protocol.ECNNon, protocol.Encryption1RTT, now, true); err != nil {
			t.Fatal(err)
		}
		if got := h.GetAlarmTimeout(); got != now.Add(d) {
			t.Errorf("max ack delay %s: alarm %s after the packet, want %s", d, got.Sub(now), d)
		}
		if ack := h.GetAckFrame(protocol.Encryption1RTT, now.Add(d-time.Millisecond), true); ack != nil {
			t.Errorf("max ack delay %s: an ACK queued before the alarm", d)
		}
		if ack := h.GetAckFrame(protocol.Encryption1RTT, now.Add(d), true); ack == nil {
			t.Errorf("max ack delay %s: no ACK at the alarm", d)
		}
	}
}

// TestRelayfleetAckElicitingThreshold: the ACK is queued at once after
// the threshold's count of ack-eliciting packets (2 when 0), not before;
// a packet that was reported missing still gets one at once.
func TestRelayfleetAckElicitingThreshold(t *testing.T) {
	for _, tc := range []struct{ threshold, want int }{{0, 2}, {2, 2}, {10, 10}} {
		h := NewReceivedPacketHandler(utils.DefaultLogger, 200*time.Millisecond, tc.threshold)
		now := monotime.Now()
		for pn := protocol.PacketNumber(0); pn < protocol.PacketNumber(tc.want); pn++ {
			if err := h.ReceivedPacket(pn, protocol.ECNNon, protocol.Encryption1RTT, now, true); err != nil {
				t.Fatal(err)
			}
			queued := h.GetAckFrame(protocol.Encryption1RTT, now, true) != nil
			if last := int(pn) == tc.want-1; queued != last {
				t.Fatalf("threshold %d: ACK queued %v after %d ack-eliciting packets, want %v", tc.threshold, queued, pn+1, last)
			}
		}
	}
	// Packet 1 goes missing, the ACK of 0 and 2 reports it; when it comes,
	// it is acknowledged at once despite a threshold of 10.
	h := NewReceivedPacketHandler(utils.DefaultLogger, 200*time.Millisecond, 10)
	now := monotime.Now()
	for _, pn := range []protocol.PacketNumber{0, 2} {
		if err := h.ReceivedPacket(pn, protocol.ECNNon, protocol.Encryption1RTT, now, true); err != nil {
			t.Fatal(err)
		}
	}
	if ack := h.GetAckFrame(protocol.Encryption1RTT, now, false); ack == nil || !ack.HasMissingRanges() {
		t.Fatalf("ACK of 0 and 2: %v, want one reporting 1 missing", ack)
	}
	if err := h.ReceivedPacket(1, protocol.ECNNon, protocol.Encryption1RTT, now, true); err != nil {
		t.Fatal(err)
	}
	if h.GetAckFrame(protocol.Encryption1RTT, now, true) == nil {
		t.Fatal("a packet reported missing was not acknowledged at once")
	}
}

// TestRelayfleetAckAlarmFromFirstPacket: the ACK alarm runs from the first
// ack-eliciting packet not yet acknowledged; later packets below the
// threshold do not push it back (they did: with a threshold of 10 and a
// packet every 120 ms, a 200 ms delay waited 1.2 s).
func TestRelayfleetAckAlarmFromFirstPacket(t *testing.T) {
	h := NewReceivedPacketHandler(utils.DefaultLogger, 200*time.Millisecond, 10)
	now := monotime.Now()
	for i := range 3 {
		if err := h.ReceivedPacket(protocol.PacketNumber(i), protocol.ECNNon, protocol.Encryption1RTT, now.Add(time.Duration(i)*120*time.Millisecond), true); err != nil {
			t.Fatal(err)
		}
		if got := h.GetAlarmTimeout(); got != now.Add(200*time.Millisecond) {
			t.Fatalf("after packet %d: ACK alarm %s after the first packet, want 200ms", i, got.Sub(now))
		}
		if i == 0 {
			continue
		}
		if ack := h.GetAckFrame(protocol.Encryption1RTT, now.Add(200*time.Millisecond), true); ack == nil {
			t.Fatal("no ACK at the alarm, 200 ms after the first packet")
		} else if ack.LargestAcked() != 1 {
			t.Fatalf("ACK at the alarm acknowledges up to %d, want 1", ack.LargestAcked())
		}
		break
	}
}

func ackFrequency(seq, threshold uint64, delay time.Duration, reordering protocol.PacketNumber) *wire.AckFrequencyFrame {
	return &wire.AckFrequencyFrame{SequenceNumber: seq, AckElicitingThreshold: threshold, RequestMaxAckDelay: delay, ReorderingThreshold: reordering}
}

// TestRelayfleetAckFrequencyFrame: an ACK_FREQUENCY frame sets when the
// ACK leaves (more than its threshold of packets, or its delay after the
// first); an older or repeated sequence number is ignored.
func TestRelayfleetAckFrequencyFrame(t *testing.T) {
	// count returns how many ack-eliciting packets, numbered on from
	// the last and received at once, queue an ACK.
	var next protocol.PacketNumber
	count := func(h *ReceivedPacketHandler, now monotime.Time) int {
		for n := 1; n <= 50; n++ {
			if err := h.ReceivedPacket(next, protocol.ECNNon, protocol.Encryption1RTT, now, true); err != nil {
				t.Fatal(err)
			}
			next++
			if h.GetAckFrame(protocol.Encryption1RTT, now, true) != nil {
				return n
			}
		}
		return -1
	}
	h := NewReceivedPacketHandler(utils.DefaultLogger, MaxAckDelay, 0)
	now := monotime.Now()
	if n := count(h, now); n != 2 {
		t.Fatalf("before any ACK_FREQUENCY frame: ACK after %d packets, want 2", n)
	}
	h.SetAckFrequency(ackFrequency(3, 4, 150*time.Millisecond, 1))
	if n := count(h, now); n != 5 {
		t.Fatalf("threshold 4: ACK after %d packets, want 5 (more than 4)", n)
	}
	if err := h.ReceivedPacket(next, protocol.ECNNon, protocol.Encryption1RTT, now, true); err != nil {
		t.Fatal(err)
	}
	next++
	if got := h.GetAlarmTimeout(); got != now.Add(150*time.Millisecond) {
		t.Fatalf("ACK alarm %s after the packet, want the frame's 150ms", got.Sub(now))
	}
	h.GetAckFrame(protocol.Encryption1RTT, now.Add(150*time.Millisecond), true)
	h.SetAckFrequency(ackFrequency(3, 0, time.Millisecond, 1)) // the same sequence number: ignored
	h.SetAckFrequency(ackFrequency(2, 0, time.Millisecond, 1)) // older: ignored
	if n := count(h, now); n != 5 {
		t.Fatalf("after frames with sequence numbers 3 and 2 (not above 3): ACK after %d packets, want still 5", n)
	}
	h.SetAckFrequency(ackFrequency(4, 0, time.Millisecond, 1))
	if n := count(h, now); n != 1 {
		t.Fatalf("threshold 0: ACK after %d packets, want 1", n)
	}
}

// TestRelayfleetAckFrequencyReordering: with a Reordering Threshold of 1 a
// packet after a gap is acknowledged at once, as without the frame; with 0
// it waits for the threshold like any other.
func TestRelayfleetAckFrequencyReordering(t *testing.T) {
	for _, tc := range []struct {
		reordering protocol.PacketNumber
		atOnce     bool
	}{{1, true}, {0, false}} {
		h := NewReceivedPacketHandler(utils.DefaultLogger, MaxAckDelay, 0)
		h.SetAckFrequency(ackFrequency(0, 9, 150*time.Millisecond, tc.reordering))
		now := monotime.Now()
		for _, pn := range []protocol.PacketNumber{0, 1} {
			if err := h.ReceivedPacket(pn, protocol.ECNNon, protocol.Encryption1RTT, now, true); err != nil {
				t.Fatal(err)
			}
		}
		if ack := h.GetAckFrame(protocol.Encryption1RTT, now.Add(150*time.Millisecond), true); ack == nil {
			t.Fatal("no ACK at the alarm")
		}
		// 2 is lost; 3 arrives out of order
		if err := h.ReceivedPacket(3, protocol.ECNNon, protocol.Encryption1RTT, now, true); err != nil {
			t.Fatal(err)
		}
		if got := h.GetAckFrame(protocol.Encryption1RTT, now, true) != nil; got != tc.atOnce {
			t.Errorf("reordering threshold %d: ACK at once for a packet after a gap: %v, want %v", tc.reordering, got, tc.atOnce)
		}
	}
}

// TestRelayfleetImmediateAck: an IMMEDIATE_ACK frame queues the ACK at
// once, whatever the threshold and delay.
func TestRelayfleetImmediateAck(t *testing.T) {
	h := NewReceivedPacketHandler(utils.DefaultLogger, MaxAckDelay, 0)
	h.SetAckFrequency(ackFrequency(0, 9, 150*time.Millisecond, 1))
	now := monotime.Now()
	if err := h.ReceivedPacket(0, protocol.ECNNon, protocol.Encryption1RTT, now, true); err != nil {
		t.Fatal(err)
	}
	if h.GetAckFrame(protocol.Encryption1RTT, now, true) != nil {
		t.Fatal("ACK queued for one packet with a threshold of 9")
	}
	h.QueueImmediateAck()
	if h.GetAckFrame(protocol.Encryption1RTT, now, true) == nil {
		t.Fatal("no ACK queued after IMMEDIATE_ACK")
	}
}
