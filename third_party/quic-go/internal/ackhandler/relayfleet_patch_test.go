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
		h := NewReceivedPacketHandler(utils.DefaultLogger, d)
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
