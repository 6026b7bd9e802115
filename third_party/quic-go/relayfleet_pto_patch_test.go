package quic

// Tests of the relayfleet patch's probe timeout that waits for reads
// (Config.PTOAfterReads, docs/quic-go-patch.md in relayfleet); run by
// relayfleet's make test.

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go/internal/ackhandler"
	"github.com/quic-go/quic-go/internal/monotime"
)

// readBacklog sees a datagram in the socket's queue, then the one read and
// not yet handed out, and nothing once the read loop waits for more.
func TestRelayfleetReadBacklog(t *testing.T) {
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	c, err := newConn(uc, false)
	if err != nil {
		t.Fatal(err)
	}
	if c.readBacklog() {
		t.Fatal("backlog on a fresh socket")
	}
	peer, err := net.DialUDP("udp", nil, uc.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if _, err := peer.Write([]byte("ack")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a datagram in the socket's queue", func() bool { return c.readBacklog() })
	if _, err := c.ReadPacket(); err != nil {
		t.Fatal(err)
	}
	if !c.readBacklog() {
		t.Fatal("no backlog while the datagram read is not handed out")
	}
	go func() { _, _ = c.ReadPacket() }() // hands it out, then waits
	waitFor(t, "no backlog once the read loop waits", func() bool { return !c.readBacklog() })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// ptoArmedHandler is a SentPacketHandler whose timer is, or is not, a PTO.
type ptoArmedHandler struct {
	ackhandler.SentPacketHandler
	pto bool
}

func (h ptoArmedHandler) PTOArmed() bool { return h.pto }

// backlogConn is a rawConn with, or without, datagrams waiting.
type backlogConn struct {
	rawConn
	backlog bool
}

func (c backlogConn) readBacklog() bool { return c.backlog }

// A due PTO of application data is held back while datagrams wait,
// for the socket or for the connection itself, and only then, and not
// past its limit.
func TestRelayfleetHoldPTO(t *testing.T) {
	now := monotime.Now()
	for _, tc := range []struct {
		name                                   string
		on, confirmed, pto, backlog, ownQueued bool
		late                                   time.Duration
		hold                                   bool
	}{
		{"datagrams in the socket", true, true, true, true, false, 0, true},
		{"datagrams queued for the connection", true, true, true, false, true, 0, true},
		{"held 90 ms already", true, true, true, true, false, 90 * time.Millisecond, true},
		{"nothing to read", true, true, true, false, false, 0, false},
		{"at the limit", true, true, true, true, false, ptoHoldLimit, false},
		{"a loss timer, not a PTO", true, true, false, true, false, 0, false},
		{"handshake not confirmed", true, false, true, true, false, 0, false},
		{"PTOAfterReads off", false, true, true, true, false, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Conn{
				config:             &Config{PTOAfterReads: tc.on},
				handshakeConfirmed: tc.confirmed,
				sentPacketHandler:  ptoArmedHandler{pto: tc.pto},
				conn:               &sconn{rawConn: backlogConn{backlog: tc.backlog}},
			}
			if tc.ownQueued {
				c.receivedPackets.PushBack(receivedPacket{})
			}
			deadline := now.Add(-tc.late)
			if got := c.ptoHeld(deadline, now); got != tc.hold {
				t.Fatalf("ptoHeld = %v, want %v", got, tc.hold)
			}
			if want := now.Add(ptoHoldStep); tc.hold && c.ptoNotBefore != want {
				t.Fatalf("held until %v, want %v", c.ptoNotBefore, want)
			}
		})
	}
}

// A probe timeout held back waits until it is due again; a loss timer
// that comes due meanwhile (an ACK showed a packet lost) does not wait for
// it (the run loop spun until the hold ended when it did).
func TestRelayfleetHeldPTOLeavesLossTimers(t *testing.T) {
	now := monotime.Now()
	h := &ptoArmedHandler{pto: true}
	c := &Conn{
		config:             &Config{PTOAfterReads: true},
		handshakeConfirmed: true,
		sentPacketHandler:  h,
		conn:               &sconn{rawConn: backlogConn{backlog: false}},
		ptoNotBefore:       now.Add(5 * time.Millisecond),
	}
	if !c.ptoHeld(now, now) {
		t.Fatal("a held probe timeout fired before it was due again")
	}
	h.pto = false
	if c.ptoHeld(now, now) {
		t.Fatal("a loss timer waited for a probe timeout's hold")
	}
	h.pto = true
	if c.ptoHeld(now, now.Add(5*time.Millisecond)) {
		t.Fatal("a probe timeout due again, nothing to read, still held")
	}
}

// gatedConn is a UDP socket whose reads can be paused (inside the read
// quic-go's batch reader makes, so the kernel queues what arrives) and
// whose writes are counted.
type gatedConn struct {
	*net.UDPConn
	mu     sync.Mutex
	paused bool
	resume *sync.Cond
	sent   atomic.Int64
}

func newGatedConn(t *testing.T) *gatedConn {
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedConn{UDPConn: uc}
	g.resume = sync.NewCond(&g.mu)
	return g
}

func (g *gatedConn) pause(p bool) {
	g.mu.Lock()
	g.paused = p
	g.mu.Unlock()
	g.resume.Broadcast()
}

func (g *gatedConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (int, int, error) {
	g.sent.Add(1)
	return g.UDPConn.WriteMsgUDP(b, oob, addr)
}

func (g *gatedConn) WriteMsgUDPAddrPort(b, oob []byte, addr netip.AddrPort) (int, int, error) {
	g.sent.Add(1)
	return g.UDPConn.WriteMsgUDPAddrPort(b, oob, addr)
}

func (g *gatedConn) SyscallConn() (syscall.RawConn, error) {
	rc, err := g.UDPConn.SyscallConn()
	return gatedRawConn{RawConn: rc, g: g}, err
}

type gatedRawConn struct {
	syscall.RawConn
	g *gatedConn
}

func (r gatedRawConn) Read(f func(fd uintptr) bool) error {
	return r.RawConn.Read(func(fd uintptr) bool {
		r.g.mu.Lock()
		for r.g.paused {
			r.g.resume.Wait()
		}
		r.g.mu.Unlock()
		return f(fd)
	})
}

// A server whose reads stall (its CPU busy elsewhere, as a relay's is
// during a fan-out) while the client's ACK waits in its socket: with
// PTOAfterReads it sends no probe before reading it (nor before the most a
// timeout is held); without, quic-go's PTO probes the packet the ACK is
// for.
func TestRelayfleetPTOWaitsForReads(t *testing.T) {
	for _, on := range []bool{true, false} {
		sent := ptoProbesWhileReadsStall(t, on)
		t.Logf("PTOAfterReads %v: %d packets sent after the data, up to half-way past the most a probe timeout is held, reads stalled", on, sent)
		if on && sent != 0 {
			t.Errorf("PTOAfterReads: %d packets sent while the ACK waited unread, want none", sent)
		}
		if !on && sent == 0 {
			t.Errorf("without PTOAfterReads: no probe sent (the test would not see a probe held)")
		}
	}
}

func ptoProbesWhileReadsStall(t *testing.T, on bool) int64 {
	gc := newGatedConn(t)
	tr := &Transport{Conn: gc}
	defer tr.Close()
	ln, err := tr.Listen(&tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, NextProtos: []string{"t"}},
		&Config{SendSynchronously: true, PTOAfterReads: on})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := DialAddr(ctx, ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"t"}}, &Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.CloseWithError(0, "")
	srv, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-srv.HandshakeComplete()
	msg := []byte("one frame of audio")
	for range 3 { // RTT samples, and the handshake confirmed on both sides
		st, err := srv.OpenUniStreamSync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = st.Write(msg)
		_ = st.Close()
		rs, err := cli.AcceptUniStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadAll(rs); err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond) // the ACK (25 ms delayed) comes back
	}
	// Half-way between the probe timeout's deadline and the most it may
	// be held (ptoHoldLimit): quic-go has probed, a held one has not.
	window := srv.rttStats.PTO(true) + ptoHoldLimit/2
	gc.pause(true)
	st, err := srv.OpenUniStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = st.Write(msg)
	_ = st.Close()
	// The data and its FIN go out at once (one packet or two); a probe
	// cannot come before the peer's 25 ms max_ack_delay has passed.
	const settle = 5 * time.Millisecond
	time.Sleep(settle)
	before := gc.sent.Load()
	time.Sleep(window - settle)
	sent := gc.sent.Load() - before
	gc.pause(false)
	rs, err := cli.AcceptUniStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(rs); err != nil || string(got) != string(msg) {
		t.Fatalf("client read %q, %v after the stall", got, err)
	}
	return sent
}
