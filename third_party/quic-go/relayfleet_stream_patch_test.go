package quic

// Tests of the relayfleet patch's lighter send streams and the run loop's
// single wake-up channel (docs/quic-go-patch.md in relayfleet); run by
// relayfleet's make test.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go/internal/protocol"
	"github.com/quic-go/quic-go/internal/utils"
)

type ctxKey struct{}

// nopSender is a streamSender that ignores everything.
type nopSender struct{}

func (nopSender) onHasConnectionData()                                                {}
func (nopSender) onHasStreamData(protocol.StreamID, *SendStream)                      {}
func (nopSender) onHasStreamRetransmission(protocol.StreamID, *SendStream)            {}
func (nopSender) onHasStreamControlFrame(protocol.StreamID, streamControlFrameGetter) {}
func (nopSender) updateStreamPriority(protocol.StreamID)                              {}
func (nopSender) recordStreamPriorityUpdated(protocol.StreamID, int8, bool)           {}
func (nopSender) onStreamCompleted(protocol.StreamID)                                 {}

func testSendStream(ctx context.Context, window protocol.ByteCount) *SendStream {
	rtt := utils.NewRTTStats()
	cfc := newConnectionFlowController(1<<20, 1<<20, nil, rtt, utils.DefaultLogger)
	cfc.UpdateSendWindow(window)
	fc := newStreamFlowController(3, cfc, 1<<20, 1<<20, window, rtt, utils.DefaultLogger)
	return newSendStream(ctx, 3, nopSender{}, fc, false)
}

// A send stream is one allocation until someone asks for its context or
// waits in Write (quic-go v0.64.1: five, with two channels and a context
// registered with the connection's).
func TestRelayfleetSendStreamOneAllocation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := &streamFlowController{}
	allocs := testing.AllocsPerRun(100, func() {
		_ = newSendStream(ctx, 3, nopSender{}, fc, false)
	})
	if allocs > 1 {
		t.Fatalf("newSendStream: %.0f allocations, want 1", allocs)
	}
}

// The context made on demand behaves as the one made at once did: live
// until the write side ends, then cancelled with the first cause.
func TestRelayfleetSendStreamContext(t *testing.T) {
	parentErr := errors.New("connection gone")
	for _, tc := range []struct {
		name  string
		early bool // Context before the stream ends
		end   func(s *SendStream, cancelParent context.CancelCauseFunc)
		cause func(error) bool
	}{
		{"close, then Context", false, func(s *SendStream, _ context.CancelCauseFunc) { _ = s.Close() },
			func(err error) bool { return err == ErrStreamClosed }},
		{"Context, then close", true, func(s *SendStream, _ context.CancelCauseFunc) { _ = s.Close() },
			func(err error) bool { return err == ErrStreamClosed }},
		{"cancel, then Context", false, func(s *SendStream, _ context.CancelCauseFunc) { s.CancelWrite(7) },
			func(err error) bool {
				var se *StreamError
				return errors.As(err, &se) && se.ErrorCode == 7 && !se.Remote
			}},
		{"Context, then shutdown", true, func(s *SendStream, _ context.CancelCauseFunc) { s.closeForShutdown(parentErr) },
			func(err error) bool { return err == parentErr }},
		{"connection first, then close, then Context", false, func(s *SendStream, cancelParent context.CancelCauseFunc) {
			cancelParent(parentErr)
			_ = s.Close()
		}, func(err error) bool { return err == parentErr }},
		{"close first, then connection, then Context", false, func(s *SendStream, cancelParent context.CancelCauseFunc) {
			_ = s.Close()
			cancelParent(parentErr)
		}, func(err error) bool { return err == ErrStreamClosed }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent, cancelParent := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
			defer cancelParent(nil)
			s := testSendStream(parent, 1<<20)
			if tc.early {
				if s.Context().Err() != nil {
					t.Fatal("context ended before the stream did")
				}
			}
			tc.end(s, cancelParent)
			ctx := s.Context()
			select {
			case <-ctx.Done():
			default:
				t.Fatal("context not done after the stream ended")
			}
			if cause := context.Cause(ctx); !tc.cause(cause) {
				t.Fatalf("cause %v", cause)
			}
			if ctx.Value(ctxKey{}) != "v" {
				t.Fatal("the connection context's values are lost")
			}
			if s.Context() != ctx {
				t.Fatal("a second Context is another context")
			}
		})
	}
	// A live stream's context ends with the connection's.
	parent, cancelParent := context.WithCancelCause(context.Background())
	s := testSendStream(parent, 1<<20)
	ctx := s.Context()
	cancelParent(parentErr)
	if context.Cause(ctx) != parentErr {
		t.Fatalf("cause %v after the connection's context ended", context.Cause(ctx))
	}
}

// A Write too large to copy waits on the channel made for it, and returns
// once the packer has taken its data; SetWriteDeadline wakes a waiting
// Write; TryWriteAll does not run beside a Write.
func TestRelayfleetSendStreamWriteWaits(t *testing.T) {
	s := testSendStream(context.Background(), 1<<20)
	data := bytes.Repeat([]byte{'x'}, 20000)
	done := make(chan error, 1)
	go func() {
		n, err := s.Write(data)
		if err == nil && n != len(data) {
			err = io.ErrShortWrite
		}
		done <- err
	}()
	for s.writeChan.Load() == nil {
		time.Sleep(time.Millisecond)
	}
	if err := s.TryWriteAll([]byte("y")); err != ErrWouldBlock {
		t.Fatalf("TryWriteAll during a Write: %v, want ErrWouldBlock", err)
	}
	var got int
	for got < len(data) {
		f, _, _ := s.popStreamFrame(1200, protocol.Version1)
		if f.Frame == nil {
			select {
			case err := <-done:
				t.Fatalf("Write returned (%v) with %d of %d bytes popped", err, got, len(data))
			default:
			}
			time.Sleep(time.Millisecond)
			continue
		}
		got += int(f.Frame.DataLen())
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Write still waits after its data was popped")
	}

	// Blocked by flow control (no window): the deadline must wake it.
	s = testSendStream(context.Background(), 0)
	go func() { _, err := s.Write(data); done <- err }()
	for s.writeChan.Load() == nil {
		time.Sleep(time.Millisecond)
	}
	_ = s.SetWriteDeadline(time.Now().Add(-time.Second))
	select {
	case err := <-done:
		var nerr net.Error
		if !errors.As(err, &nerr) || !nerr.Timeout() {
			t.Fatalf("Write after the deadline: %v, want a timeout", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("SetWriteDeadline did not wake the waiting Write")
	}
}

// With SendSynchronously the run loop waits on one channel for packets,
// sending and closing: over real UDP, data flows both ways, an idle
// connection closed from another goroutine ends at once, and its peer
// hears the close.
func TestRelayfleetSyncLoopWakes(t *testing.T) {
	waitTransportsClosed(t)
	ln, err := ListenAddr("127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{selfSigned(t)}, NextProtos: []string{"t"},
	}, &Config{SendSynchronously: true, MaxAckDelay: 200 * time.Millisecond})
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
	srv, err := ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 { // a stream each way, 20 times
		st, err := cli.OpenUniStreamSync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		msg := bytes.Repeat([]byte{byte(i)}, 100+i*500)
		if _, err := st.Write(msg); err != nil {
			t.Fatal(err)
		}
		_ = st.Close()
		rs, err := srv.AcceptUniStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rs)
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("server read %d bytes, %v", len(got), err)
		}
		ss, err := srv.OpenUniStreamSync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ss.Write(msg); err != nil {
			t.Fatal(err)
		}
		_ = ss.Close()
		rc, err := cli.AcceptUniStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, err = io.ReadAll(rc); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("client read %d bytes, %v", len(got), err)
		}
	}
	time.Sleep(50 * time.Millisecond) // the server's loop waits
	start := time.Now()
	go func() { _ = srv.CloseWithError(9, "bye") }()
	select {
	case <-srv.Context().Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the server's connection did not end after CloseWithError")
	}
	select {
	case <-cli.Context().Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the client did not hear the close")
	}
	var aerr *ApplicationError
	if !errors.As(context.Cause(cli.Context()), &aerr) || aerr.ErrorCode != 9 {
		t.Fatalf("client's cause %v", context.Cause(cli.Context()))
	}
	t.Logf("closed in %v", time.Since(start))
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// Config.PTOAckDelay raises the PTO's allowance for the peer's ACK delay to
// at least itself, never lowers it, and stays out of the RTT samples.
func TestRelayfleetPTOAckDelay(t *testing.T) {
	c := populateConfig(&Config{PTOAckDelay: 100 * time.Millisecond})
	if c.PTOAckDelay != 100*time.Millisecond {
		t.Fatalf("populateConfig dropped PTOAckDelay: %v", c.PTOAckDelay)
	}
	if err := validateConfig(&Config{PTOAckDelay: -time.Millisecond}); err == nil {
		t.Fatal("a negative PTOAckDelay was accepted")
	}
	if err := validateConfig(&Config{PTOAckDelay: 2 * time.Second}); err == nil {
		t.Fatal("a PTOAckDelay of 2s was accepted")
	}
	rtt := utils.NewRTTStats()
	rtt.SetMaxAckDelay(25 * time.Millisecond)
	rtt.UpdateRTT(10*time.Millisecond, 0)
	base := rtt.PTO(true)
	rtt.SetMinPTOAckDelay(100 * time.Millisecond)
	if got := rtt.PTO(true); got != base+75*time.Millisecond {
		t.Fatalf("PTO %v with a 100 ms allowance, want %v", got, base+75*time.Millisecond)
	}
	if got := rtt.PTO(false); got != base-25*time.Millisecond {
		t.Fatalf("PTO without the ACK delay %v, want %v", got, base-25*time.Millisecond)
	}
	if got := rtt.Clone().PTO(true); got != base+75*time.Millisecond {
		t.Fatalf("a clone's PTO %v", got)
	}
	rtt.SetMinPTOAckDelay(10 * time.Millisecond) // below the peer's: the peer's
	if got := rtt.PTO(true); got != base {
		t.Fatalf("PTO %v with a 10 ms allowance, want the peer's %v", got, base)
	}
	if rtt.MaxAckDelay() != 25*time.Millisecond {
		t.Fatal("the allowance changed the peer's max_ack_delay (used for RTT samples)")
	}
}

// TestRelayfleetAckElicitingThreshold: over real UDP, a peer that sends
// ack-eliciting packets to an endpoint with nothing to send back gets an
// ACK-only packet per two of them with the default threshold, and per ten
// with AckElicitingThreshold 10 (the server's max ack delay is long, so
// its timer sends none meanwhile).
func TestRelayfleetAckElicitingThreshold(t *testing.T) {
	waitTransportsClosed(t)
	const writes = 40
	sent := map[int]uint64{}
	for _, threshold := range []int{0, 10} {
		ln, err := ListenAddr("127.0.0.1:0", &tls.Config{
			Certificates: []tls.Certificate{selfSigned(t)}, NextProtos: []string{"t"},
		}, &Config{MaxAckDelay: 2 * time.Second, AckElicitingThreshold: threshold})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cli, err := DialAddr(ctx, ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"t"}}, &Config{})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := ln.Accept(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st, err := cli.OpenUniStreamSync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
		rs, err := srv.AcceptUniStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 100)
		if _, err := io.ReadFull(rs, buf[:1]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the handshake's packets are done
		before := srv.ConnectionStats().PacketsSent
		for range writes { // one packet each, read before the next is sent
			if _, err := st.Write(buf); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(rs, buf); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		sent[threshold] = srv.ConnectionStats().PacketsSent - before
		t.Logf("threshold %d: the server sent %d packets for %d ack-eliciting ones", threshold, sent[threshold], writes)
		_ = cli.CloseWithError(0, "")
		_ = ln.Close()
		cancel()
	}
	// 20 and 4 ACKs, plus a few more in both: an ACK leaves at once for a
	// gap in the packet numbers, and quic-go's sender skips one now and
	// then (against optimistic ACKs).
	if sent[0] < 16 || 2*sent[10] > sent[0] {
		t.Fatalf("packets the server sent for %d ack-eliciting ones: %d with the default threshold (want 16 or more), %d with 10 (want at most half the default's)", writes, sent[0], sent[10])
	}
}

// waitTransportsClosed makes the test wait at its end, up to 2 s, for the
// transports that ListenAddr and DialAddr made to stop: they stop after
// their listener or connection closes, on goroutines of their own, and
// upstream's TestMain (quic_test.go) fails on one still running.
func waitTransportsClosed(t *testing.T) {
	t.Cleanup(func() {
		for deadline := time.Now().Add(2 * time.Second); areTransportsRunning() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
	})
}
