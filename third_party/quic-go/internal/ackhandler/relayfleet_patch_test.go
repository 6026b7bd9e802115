package ackhandler

// Tests of the relayfleet patch's configurable ACK delay.

import (
	"testing"
	"time"

	"github.com/quic-go/quic-go/internal/monotime"
	"github.com/quic-go/quic-go/internal/protocol"
	"github.com/quic-go/quic-go/internal/utils"
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
