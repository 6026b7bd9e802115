package quic

// Tests of the relayfleet patch's ACK frequency extension (a relay asks
// its listeners to acknowledge every other audio packet);
// docs/quic-go-patch.md in relayfleet; run by relayfleet's make test.

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/quic-go/quic-go/internal/protocol"
	"github.com/quic-go/quic-go/internal/qerr"
	"github.com/quic-go/quic-go/internal/wire"
)

// ackFrequencyPair is a server that asks for peerDelay (0: asks nothing)
// and every other packet, and a client that honours the ACK frequency
// extension or not; neither probes the path MTU (its probes are packets
// too).
func ackFrequencyPair(t *testing.T, ctx context.Context, peerDelay time.Duration, honour bool) (srv, cli *Conn) {
	t.Helper()
	ln, err := ListenAddr("127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, NextProtos: []string{"t"}},
		&Config{PeerMaxAckDelay: peerDelay, PeerAckElicitingThreshold: 1, DisablePathMTUDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cli, err = DialAddr(ctx, ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"t"}},
		&Config{EnableAckFrequency: honour, DisablePathMTUDiscovery: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.CloseWithError(0, "") })
	srv, err = ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-srv.HandshakeComplete()
	return srv, cli
}

// acksFor10Packets is how many packets the client sends (its ACKs) while
// the server sends it ten one-packet streams 60 ms apart: more than the
// default 25 ms ACK delay, less than the 100 ms asked.
func acksFor10Packets(t *testing.T, ctx context.Context, srv, cli *Conn) uint64 {
	t.Helper()
	time.Sleep(100 * time.Millisecond) // the handshake's and the ACK_FREQUENCY frame's ACKs
	before := cli.ConnectionStats().PacketsSent
	for range 10 {
		st, err := srv.OpenUniStream()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write([]byte("opus frame")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond)
	}
	time.Sleep(250 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatal(ctx.Err())
	}
	return cli.ConnectionStats().PacketsSent - before
}

// TestRelayfleetAckFrequencyHalvesAcks: a client that honours the
// extension, asked for a 100 ms delay and every other packet, sends about
// half the ACKs; one that does not, or one not asked, acknowledges each
// packet. The server's probe timeout allows for the delay it asked.
func TestRelayfleetAckFrequencyHalvesAcks(t *testing.T) {
	waitTransportsClosed(t) // before the pairs' cleanups, so it runs after them
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name      string
		peerDelay time.Duration
		honour    bool
		lo, hi    uint64
		ptoDelay  time.Duration
	}{
		// 4-6 on an idle machine; 7 seen under load (load average 10 on 2
		// cores), still short of the 9 of a client that does not honour it
		{"asked, honoured", 100 * time.Millisecond, true, 4, 7, 100 * time.Millisecond},
		{"asked, not honoured", 100 * time.Millisecond, false, 9, 11, protocol.DefaultMaxAckDelay + protocol.TimerGranularity},
		{"honoured, not asked", 0, true, 9, 11, protocol.DefaultMaxAckDelay + protocol.TimerGranularity},
	} {
		srv, cli := ackFrequencyPair(t, ctx, tc.peerDelay, tc.honour)
		if n := acksFor10Packets(t, ctx, srv, cli); n < tc.lo || n > tc.hi {
			t.Errorf("%s: the client sent %d packets for the server's 10, want %d-%d", tc.name, n, tc.lo, tc.hi)
		}
		if got := srv.rttStats.MaxAckDelay(); got != tc.ptoDelay {
			t.Errorf("%s: the server's probe timeout allows %s for the client's ACK delay, want %s", tc.name, got, tc.ptoDelay)
		}
	}
}

// TestRelayfleetAckFrequencyBadRequest: a max_ack_delay asked below the
// min_ack_delay advertised, or at 2^14 ms or above, is a protocol
// violation.
func TestRelayfleetAckFrequencyBadRequest(t *testing.T) {
	waitTransportsClosed(t) // before the pairs' cleanups, so it runs after them
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, cli := ackFrequencyPair(t, ctx, 0, true)
	for _, d := range []time.Duration{500 * time.Microsecond, 1 << 14 * time.Millisecond} {
		err := cli.handleAckFrequencyFrame(&wire.AckFrequencyFrame{RequestMaxAckDelay: d, AckElicitingThreshold: 1, ReorderingThreshold: 1})
		var te *qerr.TransportError
		if !errors.As(err, &te) || te.ErrorCode != qerr.ProtocolViolation {
			t.Errorf("ACK_FREQUENCY asking for %s: %v, want a PROTOCOL_VIOLATION", d, err)
		}
	}
	// the largest max_ack_delay a peer may advertise, and so be asked for
	// as its min_ack_delay (patch 0008; fuzzing found it refused). An
	// accepted frame changes the ACK tracker that the connection's run
	// loop reads: the loop is over first (its context is cancelled last).
	cli.CloseWithError(0, "")
	<-cli.Context().Done()
	for _, d := range []time.Duration{time.Millisecond, protocol.MaxMaxAckDelay, 1<<14*time.Millisecond - time.Microsecond} {
		if err := cli.handleAckFrequencyFrame(&wire.AckFrequencyFrame{SequenceNumber: uint64(d), RequestMaxAckDelay: d, AckElicitingThreshold: 1, ReorderingThreshold: 1}); err != nil {
			t.Errorf("ACK_FREQUENCY asking for %s: %v", d, err)
		}
	}
}

func TestRelayfleetConfigPeerAckDelay(t *testing.T) {
	for _, c := range []*Config{
		{PeerMaxAckDelay: -time.Millisecond},
		{PeerMaxAckDelay: protocol.MaxMaxAckDelay},
		{PeerMaxAckDelay: 100 * time.Millisecond, PeerAckElicitingThreshold: -1},
	} {
		if err := validateConfig(c); err == nil {
			t.Errorf("PeerMaxAckDelay %s, PeerAckElicitingThreshold %d accepted", c.PeerMaxAckDelay, c.PeerAckElicitingThreshold)
		}
	}
	if p := populateConfig(&Config{EnableAckFrequency: true}).minAckDelay(); p == nil || *p != protocol.TimerGranularity {
		t.Errorf("min_ack_delay advertised with EnableAckFrequency: %v, want 1ms", p)
	}
	if p := populateConfig(&Config{}).minAckDelay(); p != nil {
		t.Errorf("min_ack_delay advertised without EnableAckFrequency: %s", *p)
	}
}

type fakeIncomingStream struct{}

func (fakeIncomingStream) closeForShutdown(error) {}

// TestRelayfleetBatchMaxStreams: a peer that opens and finishes 60 streams
// one after another, allowed 10 at a time, is sent a MAX_STREAMS for each
// without BatchMaxStreams and one for every 5 with it (when half its 10
// are used), never running out of streams to open.
func TestRelayfleetBatchMaxStreams(t *testing.T) {
	for _, tc := range []struct {
		batch  bool
		frames int
	}{{false, 60}, {true, 12}} {
		var sent []*wire.MaxStreamsFrame
		m := newIncomingStreamsMap(protocol.StreamTypeUni, func(protocol.StreamID) fakeIncomingStream { return fakeIncomingStream{} },
			10, func(f wire.Frame) { sent = append(sent, f.(*wire.MaxStreamsFrame)) }, protocol.PerspectiveClient)
		m.setBatchMaxStreams(tc.batch)
		allowed := protocol.StreamNum(10)
		for n := protocol.StreamNum(1); n <= 60; n++ {
			if n > allowed {
				t.Fatalf("batch %v: stream %d is past the %d allowed", tc.batch, n, allowed)
			}
			id := n.StreamID(protocol.StreamTypeUni, protocol.PerspectiveServer)
			if _, err := m.GetOrOpenStream(id); err != nil {
				t.Fatal(err)
			}
			if _, err := m.AcceptStream(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := m.DeleteStream(id); err != nil {
				t.Fatal(err)
			}
			if len(sent) > 0 {
				allowed = sent[len(sent)-1].MaxStreamNum
			}
		}
		if len(sent) != tc.frames {
			t.Errorf("batch %v: %d MAX_STREAMS frames for 60 streams, want %d", tc.batch, len(sent), tc.frames)
		}
	}
}
