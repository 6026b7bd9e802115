package wire

// Fuzz targets of the relayfleet patch (0008): what the ACK frequency
// extension (patch 0005) makes the relay parse from its peers, the
// ACK_FREQUENCY and IMMEDIATE_ACK frames and the min_ack_delay transport
// parameter. scripts/fuzz.sh (make fuzz) runs every FuzzRelayfleet target.

import (
	"math"
	"testing"
	"time"

	"github.com/quic-go/quic-go/internal/protocol"
	"github.com/quic-go/quic-go/quicvarint"
)

// FuzzRelayfleetAckFrequencyFrames parses the frames of a 1-RTT packet
// with ACK frequency enabled, as the patched connection does. Each
// ACK_FREQUENCY frame carries the values sent (a Request Max Ack Delay
// too large for a time.Duration saturates, never wraps to a small one)
// and serializes back to a frame that parses to the same.
func FuzzRelayfleetAckFrequencyFrames(f *testing.F) {
	for _, fr := range []Frame{
		&AckFrequencyFrame{SequenceNumber: 1, AckElicitingThreshold: 1, RequestMaxAckDelay: 200 * time.Millisecond, ReorderingThreshold: 1},
		&AckFrequencyFrame{RequestMaxAckDelay: time.Millisecond},
		&AckFrequencyFrame{SequenceNumber: quicvarint.Max, AckElicitingThreshold: quicvarint.Max, RequestMaxAckDelay: 16 * time.Second, ReorderingThreshold: 1 << 30},
		&ImmediateAckFrame{},
	} {
		b, err := fr.Append(nil, protocol.Version1)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	// 2^64 + 384 ns is a whole number of microseconds: it wrapped to 384 ns
	f.Add(quicvarint.Append(quicvarint.Append(quicvarint.Append(quicvarint.Append(
		quicvarint.Append(nil, uint64(FrameTypeAckFrequency)), 1), 1), 18446744073709552), 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		parser := NewFrameParser(true, true, true)
		for len(data) > 0 {
			typ, l, err := parser.ParseType(data, protocol.Encryption1RTT)
			if err != nil {
				return
			}
			data = data[l:]
			if typ != FrameTypeAckFrequency && typ != FrameTypeImmediateAck {
				return // the other frames are upstream's FuzzFrames'
			}
			body := data
			fr, l, err := parser.ParseLessCommonFrame(typ, data, protocol.Version1)
			if err != nil {
				return
			}
			data = data[l:]
			b, err := fr.Append(nil, protocol.Version1)
			if err != nil {
				t.Fatal(err)
			}
			if typ == FrameTypeImmediateAck {
				if _, ok := fr.(*ImmediateAckFrame); !ok || l != 0 {
					t.Fatalf("IMMEDIATE_ACK parsed as %#v, %d bytes", fr, l)
				}
				continue
			}
			af, ok := fr.(*AckFrequencyFrame)
			if !ok {
				t.Fatalf("ACK_FREQUENCY parsed as %#v", fr)
			}
			// the Request Max Ack Delay sent, in microseconds
			v := body
			for range 2 {
				_, n, _ := quicvarint.Parse(v)
				v = v[n:]
			}
			us, _, _ := quicvarint.Parse(v)
			want := time.Duration(math.MaxInt64)
			if us <= uint64(math.MaxInt64/int64(time.Microsecond)) {
				want = time.Duration(us) * time.Microsecond
			}
			if af.RequestMaxAckDelay != want {
				t.Fatalf("Request Max Ack Delay %d µs parsed as %s, want %s", us, af.RequestMaxAckDelay, want)
			}
			if want == math.MaxInt64 {
				continue // saturated: it serializes to less than was sent
			}
			typ2, l2, err := parser.ParseType(b, protocol.Encryption1RTT)
			if err != nil || typ2 != typ {
				t.Fatalf("serialized %#v: type %v, %v", af, typ2, err)
			}
			again, _, err := parser.ParseLessCommonFrame(typ2, b[l2:], protocol.Version1)
			if err != nil {
				t.Fatalf("serialized %#v does not parse: %v", af, err)
			}
			if *again.(*AckFrequencyFrame) != *af {
				t.Fatalf("%#v serializes to %#v", af, again)
			}
			if got := af.Length(protocol.Version1); got != protocol.ByteCount(len(b)) {
				t.Fatalf("%#v: Length %d, serialized %d bytes", af, got, len(b))
			}
		}
	})
}

// FuzzRelayfleetMinAckDelay unmarshals transport parameters as the relay
// receives a client's. An accepted min_ack_delay carries the value sent
// (saturated, never wrapped), is at most max_ack_delay, and survives a
// marshal and unmarshal: what the patched connection bounds the delay it
// asks (Config.PeerMaxAckDelay) by.
func FuzzRelayfleetMinAckDelay(f *testing.F) {
	base := TransportParameters{
		ActiveConnectionIDLimit:   2,
		MaxAckDelay:               25 * time.Millisecond,
		InitialSourceConnectionID: protocol.ParseConnectionID([]byte{1, 2, 3, 4}),
	}
	for _, d := range []time.Duration{0, time.Millisecond, 25 * time.Millisecond} {
		p := base
		p.MinAckDelay = &d
		f.Add(p.Marshal(protocol.PerspectiveClient))
	}
	// min_ack_delay of 2^64 + 384 ns in microseconds: it wrapped to 384 ns
	f.Add(quicvarint.Append(quicvarint.Append(quicvarint.Append(base.Marshal(protocol.PerspectiveClient),
		uint64(minAckDelayParameterID)), uint64(quicvarint.Len(18446744073709552))), 18446744073709552))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p TransportParameters
		if err := p.Unmarshal(data, protocol.PerspectiveClient); err != nil || p.MinAckDelay == nil {
			return
		}
		mad := *p.MinAckDelay
		if mad < 0 || mad > p.MaxAckDelay || p.MaxAckDelay >= protocol.MaxMaxAckDelay {
			t.Fatalf("min_ack_delay %s, max_ack_delay %s accepted", mad, p.MaxAckDelay)
		}
		var again TransportParameters
		if err := again.Unmarshal(p.Marshal(protocol.PerspectiveClient), protocol.PerspectiveClient); err != nil {
			t.Fatalf("marshaled parameters do not unmarshal: %v", err)
		}
		if again.MinAckDelay == nil || *again.MinAckDelay != mad {
			t.Fatalf("min_ack_delay %s marshals to %v", mad, again.MinAckDelay)
		}
		if d := max(24*time.Millisecond, mad); d >= protocol.MaxMaxAckDelay {
			t.Fatalf("delay asked %s", d)
		}
	})
}
