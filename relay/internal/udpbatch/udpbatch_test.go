package udpbatch_test

import (
	"encoding/binary"
	"errors"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/internal/udpbatch"
)

func listen(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func wrap(t *testing.T, c *net.UDPConn) *udpbatch.Conn {
	t.Helper()
	b, err := udpbatch.New(c, 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestManyWriters: 32 goroutines each send 200 packets spread over four
// destinations; every packet arrives exactly once, and each writer's
// packets to a destination arrive in the order written.
func TestManyWriters(t *testing.T) {
	const writers, perWriter, dests = 32, 200, 4
	src := wrap(t, listen(t))
	var rcv [dests]*net.UDPConn
	for i := range rcv {
		rcv[i] = listen(t)
		_ = rcv[i].SetReadBuffer(4 << 20)
	}
	type key struct{ writer, dest int }
	var mu sync.Mutex
	next := map[key]int{}
	var bad []string
	var got sync.WaitGroup
	perDest := writers * perWriter / dests
	for d := range rcv {
		got.Add(1)
		go func() {
			defer got.Done()
			buf := make([]byte, 2048)
			_ = rcv[d].SetReadDeadline(time.Now().Add(60 * time.Second))
			for range perDest {
				n, _, err := rcv[d].ReadFromUDP(buf)
				if err != nil {
					mu.Lock()
					bad = append(bad, err.Error())
					mu.Unlock()
					return
				}
				w, seq := int(binary.BigEndian.Uint16(buf)), int(binary.BigEndian.Uint32(buf[2:]))
				mu.Lock()
				k := key{w, d}
				want, seen := next[k]
				if !seen {
					want = d // writer w's first packet to d
				}
				if n != 520 || seq != want {
					bad = append(bad, "out of order or wrong size")
				}
				next[k] = seq + dests
				mu.Unlock()
			}
		}()
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 520)
			for seq := range perWriter {
				binary.BigEndian.PutUint16(p, uint16(w))
				binary.BigEndian.PutUint32(p[2:], uint32(seq))
				n, err := src.WriteTo(p, rcv[seq%dests].LocalAddr())
				if err != nil || n != len(p) {
					t.Errorf("writer %d packet %d: n=%d err=%v", w, seq, n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d problems, first: %s", len(bad), bad[0])
	}
	for w := range writers {
		for d := range dests {
			if want := d + perWriter; next[key{w, d}] != want {
				t.Errorf("writer %d, destination %d: next sequence %d, want %d", w, d, next[key{w, d}], want)
			}
		}
	}
	batches, packets := src.Stats()
	t.Logf("%d packets in %d system calls", packets, batches)
	if packets != writers*perWriter {
		t.Errorf("packets = %d, want %d", packets, writers*perWriter)
	}
	if runtime.GOOS == "linux" && batches >= packets {
		t.Errorf("%d system calls for %d packets from %d concurrent writers: nothing was batched", batches, packets, writers)
	}
}

// TestIdleFlush: a packet written alone leaves at once, with no other
// write to push it out.
func TestIdleFlush(t *testing.T) {
	src := wrap(t, listen(t))
	dst := listen(t)
	if n, err := src.WriteTo([]byte("alone"), dst.LocalAddr()); err != nil || n != 5 {
		t.Fatalf("write: n=%d err=%v", n, err)
	}
	_ = dst.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	n, _, err := dst.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != "alone" {
		t.Fatalf("read: %q %v", buf[:n], err)
	}
	if b, p := src.Stats(); b != 1 || p != 1 {
		t.Errorf("stats: %d batches, %d packets; want 1, 1", b, p)
	}
}

// TestErrorsPerPacket: in one batch, the packets the kernel refuses get
// their own error and the others go.
func TestErrorsPerPacket(t *testing.T) {
	src := listen(t)
	dst := listen(t)
	s, err := udpbatch.NewSender(src)
	if err != nil {
		t.Fatal(err)
	}
	to := dst.LocalAddr().(*net.UDPAddr)
	msgs := []udpbatch.Message{
		{Buf: []byte("one"), Addr: to},
		{Buf: make([]byte, 70000), Addr: to}, // over UDP's 65507: EMSGSIZE
		{Buf: []byte("two"), Addr: to},
		{Buf: []byte("v6"), Addr: &net.UDPAddr{IP: net.IPv6loopback, Port: to.Port}}, // not from an IPv4 socket
		{Buf: []byte("three"), Addr: to},
	}
	s.Send(msgs)
	for i, m := range msgs {
		switch i {
		case 1:
			if !errors.Is(m.Err, syscall.EMSGSIZE) {
				t.Errorf("oversized packet: err = %v, want EMSGSIZE", m.Err)
			}
			var op *net.OpError
			if !errors.As(m.Err, &op) {
				t.Errorf("oversized packet: err %T is not a *net.OpError", m.Err)
			}
		case 3:
			if m.Err == nil {
				t.Errorf("IPv6 destination from an IPv4 socket: no error")
			}
		default:
			if m.Err != nil || m.N != len(m.Buf) {
				t.Errorf("packet %d: n=%d err=%v", i, m.N, m.Err)
			}
		}
	}
	_ = dst.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	for _, want := range []string{"one", "two", "three"} {
		n, _, err := dst.ReadFromUDP(buf)
		if err != nil || string(buf[:n]) != want {
			t.Fatalf("read %q, %v; want %q", buf[:n], err, want)
		}
	}

	// Through Conn, with concurrent writers: each oversized write fails
	// on its own.
	c := wrap(t, listen(t))
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			size := 100
			if i%4 == 0 {
				size = 70000
			}
			n, err := c.WriteTo(make([]byte, size), to)
			switch {
			case size > 65507 && !errors.Is(err, syscall.EMSGSIZE):
				t.Errorf("writer %d (oversized): err = %v", i, err)
			case size <= 65507 && (err != nil || n != size):
				t.Errorf("writer %d: n=%d err=%v", i, n, err)
			}
		}()
	}
	wg.Wait()
}

// TestCloseWhileWriting: closing the socket under 16 busy writers fails
// their writes with net.ErrClosed; none hangs.
func TestCloseWhileWriting(t *testing.T) {
	raw := listen(t)
	src := wrap(t, raw)
	dst := listen(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 520)
			for {
				if _, err := src.WriteTo(p, dst.LocalAddr()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	testutil.WaitFor(t, 30*time.Second, "the writers to get going", func() bool {
		_, p := src.Stats()
		return p > 1000
	})
	raw.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("writers still blocked 30 s after close")
	}
	close(errs)
	for err := range errs {
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("write after close: %v, want net.ErrClosed", err)
		}
	}
}
