package ackhandler

// Fuzz target of the relayfleet patch (0008): a peer's ACK_FREQUENCY and
// IMMEDIATE_ACK frames (patch 0005), applied between received packets.
// scripts/fuzz.sh (make fuzz) runs every FuzzRelayfleet target.

import (
	"testing"
	"time"

	"github.com/quic-go/quic-go/internal/monotime"
	"github.com/quic-go/quic-go/internal/protocol"
	"github.com/quic-go/quic-go/internal/utils"
	"github.com/quic-go/quic-go/internal/wire"
)

// FuzzRelayfleetAckFrequency runs a script of 1-RTT packets received,
// time passing and frames parsed from the peer (as the patched connection
// parses and checks them: a Request Max Ack Delay below min_ack_delay, 1
// ms, or from 2^14 ms closes the connection) against the received-packet
// handler, and holds it to the extension's promises: an ACK is due once
// more ack-eliciting packets wait than the Ack-Eliciting Threshold in
// force, and at the latest the max_ack_delay in force when the first of
// them arrived after it; an IMMEDIATE_ACK makes it due at once.
//
// Script bytes, by their low two bits: 0 an ack-eliciting packet (bits
// 2-3: packet numbers skipped; bits 4-7: 5 ms steps since the last
// event), 1 a frame, parsed from the bytes that follow, 2 time passing
// (bits 2-7: 10 ms steps) and the connection asking for an ACK, 3 a
// packet that elicits none.
func FuzzRelayfleetAckFrequency(f *testing.F) {
	frame := func(fr wire.Frame) []byte {
		b, err := fr.Append([]byte{1}, protocol.Version1)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(append(frame(&wire.AckFrequencyFrame{SequenceNumber: 1, AckElicitingThreshold: 1, RequestMaxAckDelay: 200 * time.Millisecond, ReorderingThreshold: 1}),
		0x10, 0x10, 0x10, 0x52, 0x10, 0x02))
	f.Add(append(frame(&wire.AckFrequencyFrame{AckElicitingThreshold: 9, RequestMaxAckDelay: time.Second}),
		append([]byte{0x10, 0x14, 0x10}, append(frame(&wire.ImmediateAckFrame{}), 0x02)...)...))
	f.Add(append(frame(&wire.AckFrequencyFrame{SequenceNumber: 5, AckElicitingThreshold: 100, RequestMaxAckDelay: 16*time.Second - time.Millisecond}),
		append([]byte{0x10, 0x1c, 0x10, 0xfe}, append(frame(&wire.AckFrequencyFrame{SequenceNumber: 4, RequestMaxAckDelay: time.Millisecond}), 0x10, 0x02)...)...))
	f.Fuzz(func(t *testing.T, script []byte) {
		const initialDelay = 25 * time.Millisecond
		h := NewReceivedPacketHandler(utils.DefaultLogger, initialDelay, 0)
		parser := wire.NewFrameParser(false, false, true)
		now := monotime.Now()
		var pn protocol.PacketNumber
		// the handler's settings as the frames applied so far set them
		delay, threshold := initialDelay, packetsBeforeAck
		var seq uint64
		seen := false
		// ack-eliciting packets waiting since the last ACK, and when the
		// ACK is due at the latest
		waiting := 0
		var due monotime.Time
		ack := func(why string) {
			t.Helper()
			if h.GetAckFrame(protocol.Encryption1RTT, now, true) == nil {
				t.Fatalf("no ACK %s (%d ack-eliciting packets waiting, threshold %d, max_ack_delay %s)", why, waiting, threshold, delay)
			}
			waiting, due = 0, 0
		}
		for len(script) > 0 {
			op := script[0]
			script = script[1:]
			switch op & 3 {
			case 0, 3:
				pn += 1 + protocol.PacketNumber(op>>2&3)
				now = now.Add(time.Duration(op>>4) * 5 * time.Millisecond)
				if !due.IsZero() && !now.Before(due) {
					ack("by the max_ack_delay in force when the first packet waiting came")
				}
				eliciting := op&3 == 0
				if err := h.ReceivedPacket(pn, protocol.ECNNon, protocol.Encryption1RTT, now, eliciting); err != nil {
					t.Fatal(err)
				}
				if !eliciting {
					continue
				}
				if waiting++; waiting == 1 {
					due = now.Add(delay)
				}
				if waiting >= threshold {
					ack("past the Ack-Eliciting Threshold")
				}
			case 1:
				typ, l, err := parser.ParseType(script, protocol.Encryption1RTT)
				if err != nil {
					return
				}
				fr, n, err := parser.ParseLessCommonFrame(typ, script[l:], protocol.Version1)
				if err != nil {
					return
				}
				script = script[l+n:]
				switch fr := fr.(type) {
				case *wire.ImmediateAckFrame:
					h.QueueImmediateAck()
					if waiting > 0 {
						ack("after IMMEDIATE_ACK")
					}
				case *wire.AckFrequencyFrame:
					if fr.RequestMaxAckDelay < protocol.TimerGranularity || fr.RequestMaxAckDelay >= protocol.MaxRequestMaxAckDelay {
						continue // the connection closes with PROTOCOL_VIOLATION
					}
					h.SetAckFrequency(fr)
					if seen && fr.SequenceNumber <= seq {
						continue // an old one: ignored
					}
					seen, seq = true, fr.SequenceNumber
					delay, threshold = fr.RequestMaxAckDelay, int(min(fr.AckElicitingThreshold, 1<<30))+1
					if waiting > 0 && waiting >= threshold {
						ack("past the new Ack-Eliciting Threshold")
					}
				}
			case 2:
				now = now.Add(time.Duration(op>>2) * 10 * time.Millisecond)
				if !due.IsZero() && !now.Before(due) {
					ack("by the max_ack_delay in force when the first packet waiting came")
				}
				if a := h.GetAlarmTimeout(); !a.IsZero() && !due.IsZero() && a.After(due) {
					t.Fatalf("ACK alarm %s after the first packet waiting, due %s after", a.Sub(due.Add(-delay)), delay)
				}
			}
		}
	})
}
