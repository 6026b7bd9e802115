package wire

// Fuzz targets of the relayfleet patch (0008): what the ACK frequency
// extension (patch 0005) makes the relay parse from its peers, the
// ACK_FREQUENCY and IMMEDIATE_ACK frames and the min_ack_delay transport
// parameter. scripts/fuzz.sh (make fuzz) runs every FuzzRelayfleet target.

import (
	"bytes"
	"math"
	"reflect"
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
// receives a client's and relayfleet's clients a server's (the first
// byte's low bit picks the sender). An accepted min_ack_delay carries the
// value sent (saturated, never wrapped) and is at most max_ack_delay, so
// below 2^24 µs as the draft requires: what the patched connection
// bounds the delay it asks (Config.PeerMaxAckDelay) by. Parameters that
// carry one survive a marshal and unmarshal whole (but for upstream's
// max_idle_timeout).
func FuzzRelayfleetMinAckDelay(f *testing.F) {
	base := TransportParameters{
		ActiveConnectionIDLimit:   2,
		MaxAckDelay:               25 * time.Millisecond,
		InitialSourceConnectionID: protocol.ParseConnectionID([]byte{1, 2, 3, 4}),
	}
	for _, d := range []time.Duration{0, time.Millisecond, 25 * time.Millisecond, 26 * time.Millisecond} {
		p := base
		p.MinAckDelay = &d
		f.Add(append([]byte{0}, p.Marshal(protocol.PerspectiveClient)...))
	}
	// a server's, with the largest max_ack_delay, 2^14 - 1 ms, and
	// min_ack_delay at it: the connection asked for it, and a patched
	// peer refused it (testdata/fuzz: what fuzzing found, set so)
	server := base
	server.OriginalDestinationConnectionID = protocol.ParseConnectionID([]byte{5, 6, 7, 8})
	server.StatelessResetToken = &protocol.StatelessResetToken{1}
	server.MaxAckDelay = protocol.MaxMaxAckDelay
	server.MinAckDelay = &server.MaxAckDelay
	f.Add(append([]byte{1}, server.Marshal(protocol.PerspectiveServer)...))
	// min_ack_delay of 2^64 + 384 ns in microseconds: it wrapped to 384 ns
	f.Add(quicvarint.Append(quicvarint.Append(quicvarint.Append(append([]byte{0}, base.Marshal(protocol.PerspectiveClient)...),
		uint64(minAckDelayParameterID)), uint64(quicvarint.Len(18446744073709552))), 18446744073709552))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		sentBy := protocol.PerspectiveClient
		if data[0]&1 == 1 {
			sentBy = protocol.PerspectiveServer
		}
		var p TransportParameters
		if err := p.Unmarshal(data[1:], sentBy); err != nil || p.MinAckDelay == nil {
			return
		}
		mad := *p.MinAckDelay
		if mad < 0 || mad > p.MaxAckDelay || p.MaxAckDelay > protocol.MaxMaxAckDelay || mad >= 1<<24*time.Microsecond {
			t.Fatalf("min_ack_delay %s, max_ack_delay %s accepted", mad, p.MaxAckDelay)
		}
		var again TransportParameters
		if err := again.Unmarshal(p.Marshal(sentBy), sentBy); err != nil {
			t.Fatalf("marshaled parameters do not unmarshal: %v", err)
		}
		if again.MinAckDelay == nil || *again.MinAckDelay != mad {
			t.Fatalf("min_ack_delay %s marshals to %v", mad, again.MinAckDelay)
		}
		// max_idle_timeout is upstream's: an absent one is 0, a 0 sent
		// reads as its minimum of 5 s
		again.MaxIdleTimeout = p.MaxIdleTimeout
		if !reflect.DeepEqual(again, p) {
			t.Fatalf("%s marshals to %s", &p, &again)
		}
		// the connection asks the greater of Config.PeerMaxAckDelay (at
		// most just below MaxMaxAckDelay) and min_ack_delay: a patched
		// peer must not refuse it (2^14 - 1 ms was refused: the bound
		// was MaxMaxAckDelay, 2^14 - 1 ms, not 2^14 ms)
		if d := max(protocol.MaxMaxAckDelay-time.Microsecond, mad); d >= protocol.MaxRequestMaxAckDelay {
			t.Fatalf("delay asked %s, at least %s", d, protocol.MaxRequestMaxAckDelay)
		}
	})
}

// FuzzRelayfleetFrames parses a packet's payload frame by frame as the
// patched connection does with the ACK frequency extension enabled (and
// datagrams and RESET_STREAM_AT, which the relay may enable too), at the
// encryption level the first byte picks. Every frame parsed serializes
// to as many bytes as its Length says, no more than it was read from, and
// parses back from them, consuming them all, to the same frame; the
// extension's frames never parse in Initial or Handshake packets. Only
// delays too large for a time.Duration, which saturate, may change, and
// then once: the serialized frame serializes to itself.
func FuzzRelayfleetFrames(f *testing.F) {
	packet := func(level protocol.EncryptionLevel, frames ...Frame) []byte {
		b := []byte{byte(level)}
		for _, fr := range frames {
			var err error
			if b, err = fr.Append(b, protocol.Version1); err != nil {
				f.Fatal(err)
			}
		}
		return b
	}
	af := &AckFrequencyFrame{SequenceNumber: 3, AckElicitingThreshold: 1, RequestMaxAckDelay: 150 * time.Millisecond, ReorderingThreshold: 1}
	f.Add(packet(protocol.Encryption1RTT, &AckFrame{AckRanges: []AckRange{{Smallest: 3, Largest: 9}, {Smallest: 1, Largest: 1}}, DelayTime: 8 * time.Millisecond},
		af, &ImmediateAckFrame{}, &MaxStreamsFrame{Type: protocol.StreamTypeUni, MaxStreamNum: 100},
		&StreamFrame{StreamID: 3, Offset: 7, Data: []byte("group"), DataLenPresent: true, Fin: true}))
	f.Add(packet(protocol.Encryption1RTT, &PingFrame{}, &ImmediateAckFrame{}, &DatagramFrame{Data: []byte("d"), DataLenPresent: true},
		&ResetStreamFrame{StreamID: 2, ErrorCode: 1, FinalSize: 10, ReliableSize: 4}, af, &StreamFrame{StreamID: 2, Data: []byte("last")}))
	f.Add(append(packet(protocol.Encryption0RTT, af, &StreamFrame{StreamID: 4, Data: []byte("x"), DataLenPresent: true}), 0, 0, 0))
	f.Add(packet(protocol.EncryptionInitial, &CryptoFrame{Data: []byte("hello")}, &ImmediateAckFrame{}))
	f.Add(packet(protocol.EncryptionHandshake, &AckFrame{AckRanges: []AckRange{{Smallest: 0, Largest: 2}}}, af))
	levels := []protocol.EncryptionLevel{protocol.EncryptionInitial, protocol.EncryptionHandshake, protocol.Encryption0RTT, protocol.Encryption1RTT}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		level := levels[int(data[0])%len(levels)]
		data = data[1:]
		// ParseAckFrame hands out the parser's own ACK frame: the frame
		// read back needs a parser of its own
		parser, again := NewFrameParser(true, true, true), NewFrameParser(true, true, true)
		// a peer's ack_delay_exponent as ours, which ACK frames serialize with
		parser.SetAckDelayExponent(protocol.AckDelayExponent)
		again.SetAckDelayExponent(protocol.AckDelayExponent)
		parse := func(p *FrameParser, typ FrameType, b []byte) (Frame, int, error) {
			switch {
			case typ.IsStreamFrameType():
				return p.ParseStreamFrame(typ, b, protocol.Version1)
			case typ.IsAckFrameType():
				return p.ParseAckFrame(typ, b, level, protocol.Version1)
			case typ.IsDatagramFrameType():
				return p.ParseDatagramFrame(typ, b, protocol.Version1)
			}
			return p.ParseLessCommonFrame(typ, b, protocol.Version1)
		}
		reparse := func(b []byte) Frame {
			t.Helper()
			typ, l, err := again.ParseType(b, level)
			if err != nil {
				t.Fatalf("serialized %x: type: %v", b, err)
			}
			fr, n, err := parse(again, typ, b[l:])
			if err != nil {
				t.Fatalf("serialized %x does not parse: %v", b, err)
			}
			if l+n != len(b) {
				t.Fatalf("serialized %x: parsed %d bytes of %d", b, l+n, len(b))
			}
			return fr
		}
		for len(data) > 0 {
			typ, l, err := parser.ParseType(data, level)
			if err != nil {
				return // io.EOF after trailing PADDING, or an error closing the connection
			}
			if (typ == FrameTypeAckFrequency || typ == FrameTypeImmediateAck) &&
				(level == protocol.EncryptionInitial || level == protocol.EncryptionHandshake) {
				t.Fatalf("%v parsed at encryption level %v", typ, level)
			}
			fr, n, err := parse(parser, typ, data[l:])
			if err != nil {
				return
			}
			read := l + n
			// the frame's own bytes, without the PADDING ParseType skipped
			for data[0] == 0 {
				data, read = data[1:], read-1
			}
			data = data[read:]
			if sf, ok := fr.(*StreamFrame); ok && sf.DataLen() == 0 && !sf.Fin {
				sf.PutBack()
				continue // upstream's: parsed, and never serialized
			}
			b, err := fr.Append(nil, protocol.Version1)
			if err != nil {
				t.Fatalf("%#v: %v", fr, err)
			}
			if got := fr.Length(protocol.Version1); got != protocol.ByteCount(len(b)) {
				t.Fatalf("%#v: Length %d, serialized %d bytes", fr, got, len(b))
			}
			if len(b) > read {
				t.Fatalf("%#v: read from %d bytes, serialized to %d", fr, read, len(b))
			}
			back := reparse(b)
			if !reflect.DeepEqual(back, fr) {
				if !saturated(fr) {
					t.Fatalf("%#v serializes to %x, which parses to %#v", fr, b, back)
				}
				if b2, _ := back.Append(nil, protocol.Version1); !bytes.Equal(b2, b) {
					t.Fatalf("%#v (saturated) serializes to %x, which serializes to %x", fr, b, b2)
				}
			}
			if sf, ok := fr.(*StreamFrame); ok {
				sf.PutBack()
			}
			if sf, ok := back.(*StreamFrame); ok {
				sf.PutBack()
			}
		}
	})
}

// saturated says whether a parsed frame carries a delay that was too large
// for a time.Duration (the parsers saturate it; it serializes smaller).
func saturated(fr Frame) bool {
	switch fr := fr.(type) {
	case *AckFrame:
		return fr.DelayTime == math.MaxInt64
	case *AckFrequencyFrame:
		return fr.RequestMaxAckDelay == math.MaxInt64
	}
	return false
}
