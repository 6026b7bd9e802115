package quic

// Tests of the relayfleet patch's send path and ACK delay (docs/quic-go-patch.md
// in relayfleet); run by relayfleet's make test.

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go/internal/protocol"
)

// recordingConn is a sendConn that records writes and fails on demand.
type recordingConn struct {
	sendConn
	writes [][]byte
	err    error
}

func (c *recordingConn) Write(b []byte, _ uint16, _ protocol.ECN) error {
	c.writes = append(c.writes, append([]byte(nil), b...))
	return c.err
}

func buffer(s string) *packetBuffer {
	b := getPacketBuffer()
	b.Data = append(b.Data[:0], s...)
	return b
}

func TestRelayfleetSyncSenderWritesAtOnce(t *testing.T) {
	c := &recordingConn{}
	var failed []error
	s := newSyncSender(c, func(err error) { failed = append(failed, err) })
	if s.WouldBlock() {
		t.Fatal("a synchronous sender never blocks")
	}
	if err := s.Run(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	s.Send(buffer("one"), 0, protocol.ECNNon)
	s.Send(buffer("two"), 0, protocol.ECNNon)
	if len(c.writes) != 2 || string(c.writes[0]) != "one" || string(c.writes[1]) != "two" {
		t.Fatalf("writes %q, want one and two, in order, when sent", c.writes)
	}
	// EMSGSIZE (a path MTU probe too large) is not the connection's end.
	c.err = &net.OpError{Op: "write", Err: syscall.EMSGSIZE}
	s.Send(buffer("probe"), 0, protocol.ECNNon)
	if isSendMsgSizeErr(c.err) && len(failed) != 0 {
		t.Fatalf("a message-size error ended the connection: %v", failed)
	}
	c.err = errors.New("socket closed")
	s.Send(buffer("three"), 0, protocol.ECNNon)
	s.Send(buffer("four"), 0, protocol.ECNNon)
	if len(failed) != 1 || failed[0] != c.err {
		t.Fatalf("write error reported %v, want it once", failed)
	}
	if n := len(c.writes); n != 4 {
		t.Fatalf("%d writes, want none after the failed one (4)", n)
	}
	s.Close()
	c.err = nil
	s.Send(buffer("five"), 0, protocol.ECNNon)
	if n := len(c.writes); n != 4 {
		t.Fatalf("a write after Close")
	}
}

func TestRelayfleetSyncSenderAfterClose(t *testing.T) {
	c := &recordingConn{}
	s := newSyncSender(c, func(error) { t.Fatal("no error expected") })
	s.Close()
	s.Send(buffer("late"), 0, protocol.ECNNon)
	if len(c.writes) != 0 {
		t.Fatalf("wrote %q after Close", c.writes)
	}
}

func TestRelayfleetConfigMaxAckDelay(t *testing.T) {
	for _, tc := range []struct {
		in, want time.Duration
	}{
		{0, protocol.DefaultMaxAckDelay},
		{200 * time.Millisecond, 200 * time.Millisecond},
		{time.Hour, protocol.MaxMaxAckDelay - protocol.TimerGranularity},
	} {
		c := &Config{MaxAckDelay: tc.in}
		if err := validateConfig(c); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if got := populateConfig(c).maxAckDelay(); got != tc.want {
			t.Errorf("MaxAckDelay %s: %s, want %s", tc.in, got, tc.want)
		}
	}
	if err := validateConfig(&Config{MaxAckDelay: -time.Millisecond}); err == nil {
		t.Error("a negative MaxAckDelay was accepted")
	}
}
