package quic

// Tests of the relayfleet patch's HoldLoop and ReleaseLoop (a writer, or
// the goroutine that read a packet, does the run loop's work while the
// loop waits); docs/quic-go-patch.md in relayfleet; run by relayfleet's
// make test.

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

// holdPair is a server connection with SendSynchronously over a counting
// socket, and its client.
func holdPair(t *testing.T, ctx context.Context) (gc *gatedConn, srv, cli *Conn) {
	t.Helper()
	gc = newGatedConn(t)
	tr := &Transport{Conn: gc}
	t.Cleanup(func() { tr.Close() })
	ln, err := tr.Listen(&tls.Config{Certificates: []tls.Certificate{selfSigned(t)}, NextProtos: []string{"t"}},
		&Config{SendSynchronously: true, MaxAckDelay: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cli, err = DialAddr(ctx, ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"t"}}, &Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.CloseWithError(0, "") })
	srv, err = ln.Accept(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-srv.HandshakeComplete()
	return gc, srv, cli
}

// While a writer holds the loop nothing it writes is sent; ReleaseLoop
// sends it on the writer's goroutine, before it returns.
func TestRelayfleetHoldLoopSendsOnRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gc, srv, cli := holdPair(t, ctx)
	if cli.HoldLoop() {
		t.Fatal("HoldLoop took the loop of a connection without SendSynchronously")
	}
	waitFor(t, "the server's loop to wait", srv.HoldLoop)
	msg := bytes.Repeat([]byte("opus"), 100)
	st, err := srv.OpenUniStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write(msg); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	before := gc.sent.Load()
	time.Sleep(100 * time.Millisecond)
	if n := gc.sent.Load() - before; n != 0 {
		t.Fatalf("%d packets sent while the loop was held, want none", n)
	}
	srv.ReleaseLoop()
	// the stream's packet, and on a loaded machine maybe an ACK or a
	// probe that came due meanwhile (3 seen at load average 9); none if
	// ReleaseLoop left the sending to the loop
	if n := gc.sent.Load() - before; n < 1 {
		t.Fatalf("ReleaseLoop returned with %d packets sent, want the stream's", n)
	}
	rs, err := cli.AcceptUniStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(rs); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("client read %d bytes, %v", len(got), err)
	}
}

// A close asked for while the loop is held ends the connection once it
// is released, and a closed connection's loop cannot be taken.
func TestRelayfleetHoldLoopClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, srv, cli := holdPair(t, ctx)
	waitFor(t, "the server's loop to wait", srv.HoldLoop)
	closed := make(chan struct{})
	go func() {
		_ = srv.CloseWithError(7, "bye")
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("CloseWithError returned while the loop was held")
	case <-time.After(50 * time.Millisecond):
	}
	srv.ReleaseLoop()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("the connection did not close after ReleaseLoop")
	}
	select {
	case <-cli.Context().Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the client did not hear the close")
	}
	if srv.HoldLoop() {
		t.Fatal("HoldLoop took the loop of a closed connection")
	}
}

// Writers taking the loop from several goroutines while the peer sends
// streams the other way (received packets handled by the reading
// goroutine whenever the loop waits): every byte arrives both ways, and
// the race detector sees the loop's state touched by one goroutine at a
// time.
func TestRelayfleetHoldLoopConcurrent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, srv, cli := holdPair(t, ctx)
	const writers, streams = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, 4*writers*streams)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < streams; {
				if !srv.HoldLoop() {
					time.Sleep(100 * time.Microsecond)
					continue
				}
				st, err := srv.OpenUniStream()
				if err == nil {
					_, err = st.Write([]byte(fmt.Sprintf("w%d s%d", w, i)))
					_ = st.Close()
					i++
				}
				srv.ReleaseLoop()
				if err != nil {
					time.Sleep(time.Millisecond) // the stream limit: wait for credit
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the client's streams to the server
		defer wg.Done()
		for i := range writers * streams {
			st, err := cli.OpenUniStreamSync(ctx)
			if err != nil {
				errs <- err
				return
			}
			_, _ = st.Write([]byte(fmt.Sprintf("c%d", i)))
			_ = st.Close()
		}
	}()
	got := map[string]bool{}
	var mu sync.Mutex
	read := func(c *Conn) {
		defer wg.Done()
		for range writers * streams {
			rs, err := c.AcceptUniStream(ctx)
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(rs)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			got[string(b)] = true
			mu.Unlock()
		}
	}
	wg.Add(2)
	go read(cli)
	go read(srv)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := range writers {
		for i := range streams {
			if k := fmt.Sprintf("w%d s%d", w, i); !got[k] {
				t.Errorf("client did not get %q", k)
			}
		}
	}
	for i := range writers * streams {
		if k := fmt.Sprintf("c%d", i); !got[k] {
			t.Errorf("server did not get %q", k)
		}
	}
}
