package transport_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// Bounds of one fuzz run of the WebSocket session.
const (
	// wsFuzzDeadline bounds a run: the peer's bytes are all written and
	// its side closed, so the session must be over well before.
	wsFuzzDeadline = 30 * time.Second
	// A run may allocate at most wsAllocPerByte bytes per input byte plus
	// wsAllocSlack (the HTTP upgrade, the session and its goroutines: 30
	// to 60 KiB measured). A stream costs the session and this test about
	// a kilobyte and takes three input bytes to open.
	wsAllocPerByte = 1 << 10
	wsAllocSlack   = 256 << 10
)

// FuzzWebSocketSession is a peer that sends arbitrary bytes over a real
// WebSocket session (net.Pipe, the HTTP upgrade, coder/websocket, the qmux
// framing). The first input byte picks the mode: 3 in its low two bits sends
// the rest as raw bytes after the upgrade; otherwise the rest is a list of
// messages, each one length byte and that many bytes, sent as binary
// WebSocket messages; bit 2 makes the reader cancel every other stream
// after its first read. The session must end, every stream reader must
// return, within wsFuzzDeadline, allocations stay within a bound, and in
// message mode each accepted stream reads a prefix of the bytes the peer
// sent on it, all of them up to its first FIN when the read ended in io.EOF.
func FuzzWebSocketSession(f *testing.F) {
	for _, msgs := range [][]string{
		// What @moq/lite sends first: SETUP on client bidi stream 0.
		{"080020", "0800002c03c0000000ff0dad02c0000000ff0dad01c0000000ff00000e02028000a455070b6d6f712d6c6974652d6a73", "0900"},
		// Two uni streams, data, FIN, then a reset of the first.
		{"080200010203", "08060405", "0902ff", "040209", "0906"},
		// Streams opened out of order, data after FIN, a stop sending.
		{"08080a", "0800", "09080b", "08080c", "050001", "0904"},
		// A jump of 64 stream indexes.
		{"084100aa"},
		// Unknown frame type, then a close with a reason.
		{"7f00", "1d05627965"},
		{"1d00"},
		// A server-initiated id, a truncated varint.
		{"080199", "08c0"},
	} {
		var b []byte
		b = append(b, 0)
		for _, m := range msgs {
			p := mustHex(f, m)
			b = append(b, byte(len(p)))
			b = append(b, p...)
		}
		f.Add(b)
		b[0] = 4 // the same, cancelling reads
		f.Add(b)
	}
	f.Add([]byte{3})
	f.Add(append([]byte{3}, wsFrame(0x2, mustHex(f, "080041"))...))
	f.Add(append([]byte{3}, mustHex(f, "88808899aabb")...))                       // a close frame
	f.Add(append([]byte{3}, mustHex(f, "027f0000000000100000")...))               // unmasked, 1 MiB declared
	f.Add(append([]byte{3}, mustHex(f, "82ff7fffffffffffffff01020304")...))       // masked, 2^63-1 declared
	f.Add(append(append([]byte{3}, wsFrame(0x9, []byte("ping"))...), 0x82, 0x80)) // ping, then half a frame

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		run := func() *wsRun { return runWebSocketPeer(t, data) }
		var r *wsRun
		got := allocatedBy(func() { r = run() })
		limit := uint64(wsAllocPerByte*len(data) + wsAllocSlack)
		for i := 0; i < 2 && got > limit; i++ {
			got = min(got, allocatedBy(func() { run() }))
		}
		if got > limit {
			t.Errorf("%d input bytes: the session run allocated %d bytes, want at most %d", len(data), got, limit)
		}
		if r.raw {
			return
		}
		r.check(t)
	})
}

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b := make([]byte, len(s)/2)
	if _, err := fmt.Sscanf(s, "%x", &b); err != nil && s != "" {
		t.Fatalf("hex %q: %v", s, err)
	}
	return b
}

func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// wsFrame is one final, masked client-to-server WebSocket frame.
func wsFrame(opcode byte, payload []byte) []byte {
	b := []byte{0x80 | opcode}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n < 1<<16:
		b = append(b, 0x80|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	mask := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	b = append(b, mask[:]...)
	for i, c := range payload {
		b = append(b, c^mask[i%4])
	}
	return b
}

// wsRead is what the test read from one accepted stream.
type wsRead struct {
	data []byte
	eof  bool
	err  error
}

// wsRun is one session's outcome: the messages the peer sent and what was
// read from the streams accepted, in accept order.
type wsRun struct {
	raw      bool
	messages [][]byte
	bidi     []*wsRead
	uni      []*wsRead
}

// pipeListener hands out one connection, then blocks until closed.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error { l.once.Do(func() { close(l.done) }); return nil }

func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4443} }

func runWebSocketPeer(t *testing.T, data []byte) *wsRun {
	r := &wsRun{raw: data[0]&3 == 3}
	cancelOdd := data[0]&4 != 0
	var wire []byte
	if r.raw {
		wire = data[1:]
	} else {
		for rest := data[1:]; len(rest) > 0; {
			n := min(int(rest[0]), len(rest)-1)
			m := rest[1 : 1+n]
			rest = rest[1+n:]
			r.messages = append(r.messages, m)
			wire = append(wire, wsFrame(0x2, m)...)
		}
	}

	deadline := time.Now().Add(wsFuzzDeadline)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	srvConn, cliConn := net.Pipe()
	defer cliConn.Close()
	cliConn.SetDeadline(deadline)
	l := &pipeListener{conns: make(chan net.Conn, 1), done: make(chan struct{})}
	l.conns <- srvConn
	sessions := make(chan transport.Session, 1)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			s, err := transport.AcceptWebSocket(w, req)
			if err != nil {
				return
			}
			sessions <- s
			<-s.Done()
		}),
		ErrorLog: nil,
	}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(l) }()
	defer func() { srv.Close(); <-served }()

	req := "GET /relay HTTP/1.1\r\nHost: relay.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: webtransport\r\n\r\n"
	if _, err := io.WriteString(cliConn, req); err != nil {
		t.Fatalf("write upgrade request: %v", err)
	}
	br := bufio.NewReader(cliConn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read upgrade response: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	var s transport.Session
	select {
	case s = <-sessions:
	case <-ctx.Done():
		t.Fatal("no session after the upgrade")
	}
	// Everything the server sends is read and dropped, as a peer that
	// keeps reading does.
	drained := make(chan struct{})
	go func() { defer close(drained); io.Copy(io.Discard, br) }()

	var wg sync.WaitGroup
	var mu sync.Mutex
	read := func(st io.Reader, cancelRead func(), w io.WriteCloser, res *wsRead) {
		defer wg.Done()
		buf := make([]byte, 256)
		for first := true; ; first = false {
			if !first && cancelRead != nil {
				cancelRead()
			}
			n, err := st.Read(buf)
			mu.Lock()
			res.data = append(res.data, buf[:n]...)
			mu.Unlock()
			if err != nil {
				mu.Lock()
				res.eof, res.err = err == io.EOF, err
				mu.Unlock()
				break
			}
		}
		if w != nil {
			w.Write([]byte("ok"))
			w.Close()
		}
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			st, err := s.AcceptStream(ctx)
			if err != nil {
				return
			}
			res := &wsRead{}
			mu.Lock()
			r.bidi = append(r.bidi, res)
			mu.Unlock()
			var c func()
			if cancelOdd && i%2 == 1 {
				c = func() { st.CancelRead(7) }
			}
			wg.Add(1)
			go read(st, c, st, res)
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			st, err := s.AcceptUniStream(ctx)
			if err != nil {
				return
			}
			res := &wsRead{}
			mu.Lock()
			r.uni = append(r.uni, res)
			mu.Unlock()
			var c func()
			if cancelOdd && i%2 == 1 {
				c = func() { st.CancelRead(7) }
			}
			wg.Add(1)
			go read(st, c, nil, res)
		}
	}()

	cliConn.Write(wire) // an error means the server closed; the peer stops
	cliConn.Close()

	all := make(chan struct{})
	go func() { wg.Wait(); <-drained; close(all) }()
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatalf("session not over %v after the peer closed\n%s", wsFuzzDeadline, goroutines())
	}
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatalf("stream readers still blocked %v after the peer closed\n%s", wsFuzzDeadline, goroutines())
	}
	return r
}

func goroutines() string {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String()
}

// check compares what was read with what the peer sent: stream ids are
// accepted in the order their first STREAM frame came, per direction; each
// stream reads a prefix of its payloads up to and including its first FIN,
// all of them when the read ended in io.EOF.
func (r *wsRun) check(t *testing.T) {
	type peerStream struct {
		data []byte
		fin  bool
	}
	streams := map[uint64]*peerStream{}
	var order [2][]uint64 // bidi, uni: client-initiated ids by first STREAM frame
	for _, m := range r.messages {
		if len(m) == 0 || (m[0] != 0x08 && m[0] != 0x09) {
			continue
		}
		id, n, err := moqlite.ParseVarint(m[1:])
		if err != nil || id&1 == 1 {
			continue
		}
		ps := streams[id]
		if ps == nil {
			ps = &peerStream{}
			streams[id] = ps
			dir := int(id>>1) & 1
			order[dir] = append(order[dir], id)
		}
		if !ps.fin {
			ps.data = append(ps.data, m[1+n:]...)
			ps.fin = m[0] == 0x09
		}
	}
	for dir, got := range [2][]*wsRead{r.bidi, r.uni} {
		kind := [2]string{"bidi", "uni"}[dir]
		if len(got) > len(order[dir]) {
			t.Fatalf("%d %s streams accepted, the peer opened %d", len(got), kind, len(order[dir]))
		}
		for i, res := range got {
			id := order[dir][i]
			want := streams[id]
			if res.eof {
				if !want.fin || !bytes.Equal(res.data, want.data) {
					t.Fatalf("%s stream %d (id %d) read %x then EOF; the peer sent %x, fin %v", kind, i, id, res.data, want.data, want.fin)
				}
				continue
			}
			if !bytes.HasPrefix(want.data, res.data) {
				t.Fatalf("%s stream %d (id %d) read %x (%v); the peer sent %x", kind, i, id, res.data, res.err, want.data)
			}
			if res.err == nil {
				t.Fatalf("%s stream %d (id %d): read ended without an error", kind, i, id)
			}
		}
	}
}
