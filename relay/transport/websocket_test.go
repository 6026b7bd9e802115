package transport_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// wsServer starts a server, closed when the test ends, that hands each
// WebSocket session it accepts to got and holds it until it ends; url is
// its ws:// address.
func wsServer(t *testing.T) (url string, got <-chan transport.Session) {
	t.Helper()
	sessions := make(chan transport.Session, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := transport.AcceptWebSocket(w, r)
		if err != nil {
			return
		}
		sessions <- s
		<-s.Done()
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http"), sessions
}

// wsPair starts a server that accepts one WebSocket session and returns it
// with a raw client connection that speaks the frames by hand, as
// @moq/qmux 0.0.6 does.
func wsPair(t *testing.T) (transport.Session, *websocket.Conn) {
	t.Helper()
	url, got := wsServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		Subprotocols: []string{"qmux-00", "webtransport"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Subprotocol() != "webtransport" {
		t.Fatalf("server chose subprotocol %q, want webtransport", c.Subprotocol())
	}
	s := <-got
	t.Cleanup(func() {
		c.CloseNow()
		s.CloseWithError(0, "")
	})
	return s, c
}

func send(t *testing.T, c *websocket.Conn, hexFrame string) {
	t.Helper()
	b, err := hex.DecodeString(hexFrame)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(context.Background(), websocket.MessageBinary, b); err != nil {
		t.Fatal(err)
	}
}

func recv(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, b, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if typ != websocket.MessageBinary {
		t.Fatalf("message type %v", typ)
	}
	return hex.EncodeToString(b)
}

func TestWebSocketFramesFromMoqLite(t *testing.T) {
	s, c := wsPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// What @moq/lite 0.2.2 sends first: STREAM on client bidi stream 0
	// carrying the SETUP type 0x20, then the rest of CLIENT_SETUP.
	send(t, c, "080020")
	send(t, c, "0800002c03c0000000ff0dad02c0000000ff0dad01c0000000ff00000e02028000a455070b6d6f712d6c6974652d6a73")
	st, err := s.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := "20002c03c0000000ff0dad02c0000000ff0dad01c0000000ff00000e02028000a455070b6d6f712d6c6974652d6a73"
	buf := make([]byte, len(want)/2)
	if _, err := io.ReadFull(st, buf); err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(buf) != want {
		t.Fatalf("read %x, want %s", buf, want)
	}
	// The answer goes back on the same stream id.
	if _, err := st.Write([]byte{0x21}); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, c); got != "080021" {
		t.Fatalf("server frame %s, want 080021", got)
	}

	// A server-opened uni stream has id 3 (index 0, uni, server) and ends
	// with a FIN frame.
	u, err := s.OpenUniStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	u.Close()
	if got := recv(t, c); got != "08036869" {
		t.Fatalf("uni data frame %s", got)
	}
	if got := recv(t, c); got != "0903" {
		t.Fatalf("uni fin frame %s", got)
	}

	// Server bidi streams are 1, 5, ...; resets carry the code.
	b, err := s.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.CancelWrite(7)
	if got := recv(t, c); got != "040107" {
		t.Fatalf("reset frame %s, want 040107", got)
	}

	// The client's FIN ends the read side with io.EOF.
	send(t, c, "0900")
	if _, err := io.ReadAll(st); err != nil {
		t.Fatalf("read to FIN: %v", err)
	}

	// A client uni stream (id 2) is accepted; a RESET_STREAM fails its reads.
	send(t, c, "0802aa")
	r, err := s.AcceptUniStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	one := make([]byte, 1)
	if _, err := io.ReadFull(r, one); err != nil || one[0] != 0xaa {
		t.Fatalf("uni read %x, %v", one, err)
	}
	send(t, c, "040209")
	if _, err := r.Read(one); err == nil || !strings.Contains(err.Error(), "reset") {
		t.Fatalf("read after reset: %v", err)
	}

	// STOP_SENDING on a server stream makes writes fail and is answered
	// with RESET_STREAM.
	b2, err := s.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, c); got != "080501" {
		t.Fatalf("frame %s, want 080501", got)
	}
	send(t, c, "050504")
	if got := recv(t, c); got != "040504" {
		t.Fatalf("answer to stop sending %s, want 040504", got)
	}
	if _, err := b2.Write([]byte{2}); err == nil {
		t.Fatal("write after STOP_SENDING succeeded")
	}

	// APPLICATION_CLOSE ends the session.
	send(t, c, "1d00"+hex.EncodeToString([]byte("bye")))
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("session still open after APPLICATION_CLOSE")
	}
	if _, err := s.AcceptStream(ctx); err == nil {
		t.Fatal("accept after close succeeded")
	}
}

func TestWebSocketRejectsOtherSubprotocols(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := transport.AcceptWebSocket(w, r); err == nil {
			t.Error("accepted a session without subprotocol webtransport")
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{Subprotocols: []string{"qmux-00"}})
	if err != nil {
		return // refused at the handshake: fine
	}
	defer c.CloseNow()
	if _, _, err := c.Read(ctx); err == nil {
		t.Fatal("connection stayed usable without subprotocol webtransport")
	}
}

func TestWebSocketSessionStreams(t *testing.T) {
	testutil.NoLeaks(t)
	// Two Go ends: large writes are split into frames and reassembled.
	url, got := wsServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := transport.DialWebSocket(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.CloseWithError(0, "")
	srvSess := <-got
	payload := bytes.Repeat([]byte("0123456789"), 10000) // 100 kB, several frames
	st, err := cli.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		st.Write(payload)
		st.Close()
	}()
	in, err := srvSess.AcceptStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(in)
	if err != nil || !bytes.Equal(b, payload) {
		t.Fatalf("read %d bytes, %v; want %d", len(b), err, len(payload))
	}
	// Echo back on the same bidi stream.
	if _, err := in.Write([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	in.Close()
	back, err := io.ReadAll(st)
	if err != nil || string(back) != "ok" {
		t.Fatalf("echo %q, %v", back, err)
	}
	cli.CloseWithError(0, "done")
	select {
	case <-srvSess.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server session did not see the close")
	}
}

// TestWebSocketStreamsOutOfOrder: a peer's streams may start in any order
// (their first frames come from different writers); none may be lost, and
// a finished stream's late frames must not open it again.
func TestWebSocketStreamsOutOfOrder(t *testing.T) {
	testutil.NoLeaks(t)
	s, c := wsPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Client uni streams 2 (index 0), 6 (index 1), 10 (index 2): 2 first, then 10, then 6.
	send(t, c, "0902aa")
	send(t, c, "090acc")
	send(t, c, "0906bb")
	got := map[byte]bool{}
	for i := 0; i < 3; i++ {
		r, err := s.AcceptUniStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		if err != nil || len(b) != 1 {
			t.Fatalf("stream %d: %x, %v", i, b, err)
		}
		got[b[0]] = true
	}
	if !got[0xaa] || !got[0xbb] || !got[0xcc] {
		t.Fatalf("streams received: %v", got)
	}
	// A late frame for finished stream 6 is ignored, not a new stream.
	send(t, c, "0906dd")
	send(t, c, "090eee") // index 3: a real new stream
	r, err := s.AcceptUniStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(r); len(b) != 1 || b[0] != 0xee {
		t.Fatalf("next stream carried %x, want ee", b)
	}
}

// A peer cannot make the receiver hold more than wsMaxSessionBuffered
// unread over all its streams (each under the per-stream cap): the session
// ends with a protocol error instead.
func TestWebSocketSessionBufferCap(t *testing.T) {
	s, c := wsPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	chunk := bytes.Repeat([]byte{0xaa}, 16000)
	// 24 uni streams of 512 KiB each: 12 MiB unread, never accepted.
	var err error
sending:
	for i := range 24 {
		id := uint64(i)<<2 | 2 // client-initiated uni
		for sent := 0; sent < 512<<10; sent += len(chunk) {
			b := append([]byte{0x08}, byte(0x40|id>>8), byte(id))
			if err = c.Write(ctx, websocket.MessageBinary, append(b, chunk...)); err != nil {
				break sending
			}
		}
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("session still open with 12 MiB unread over 24 streams (last write err %v)", err)
	}
}

// TestWebSocketGoingAway: a session closed with moqlite.CodeGoingAway
// sends the qmux close frame with the code, then closes the WebSocket with
// status 1001 (going away); other codes close it with 1000.
func TestWebSocketGoingAway(t *testing.T) {
	for _, tt := range []struct {
		code   uint64
		frame  string
		status websocket.StatusCode
	}{
		{moqlite.CodeGoingAway, "1d10", websocket.StatusGoingAway},
		{0, "1d00", websocket.StatusNormalClosure},
	} {
		s, c := wsPair(t)
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			_ = s.CloseWithError(tt.code, "")
		}()
		if got := recv(t, c); got != tt.frame {
			t.Errorf("code %d: close frame %s, want %s", tt.code, got, tt.frame)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := c.Read(ctx)
		cancel()
		if st := websocket.CloseStatus(err); st != tt.status {
			t.Errorf("code %d: WebSocket closed with %v (%v), want %v", tt.code, st, err, tt.status)
		}
		<-closed
	}
}
