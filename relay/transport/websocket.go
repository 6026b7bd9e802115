package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/relayfleet/relayfleet/relay/moqlite"
)

// WebSocketSubprotocol is the WebSocket subprotocol of the qmux legacy
// framing that @moq/lite (through @moq/qmux) falls back to.
const WebSocketSubprotocol = "webtransport"

// Frame types of the qmux legacy "webtransport" framing: one frame per
// WebSocket binary message, a one-byte type, then varints.
const (
	wsFrameResetStream = 0x04
	wsFrameStopSending = 0x05
	wsFrameStream      = 0x08
	wsFrameStreamFin   = 0x09
	wsFrameClose       = 0x1d
)

// Limits of the WebSocket transport. It has no flow control, so the receiver
// bounds what it buffers and the number of streams a peer may open.
const (
	wsMaxPayload  = 16384 - 24 // what @moq/qmux sends per frame
	wsMaxBuffered = 1 << 20    // per receive stream
	// wsMaxSessionBuffered bounds what all of a session's receive streams
	// hold unread together: without it, 4,096 streams of 1 MiB each.
	wsMaxSessionBuffered = 8 << 20
	wsMaxMessage         = 1 << 17
	wsAcceptBacklog      = 64
	wsWriteTimeout       = 10 * time.Second
	// wsMaxPeerUniStreams is how many unidirectional streams the peer may
	// hold open at once (group streams: few at a time in practice);
	// bidirectional ones are capped at MaxIncomingStreams.
	wsMaxPeerUniStreams = 4096
	// wsMaxSkipped bounds the stream indexes a peer may skip (open later,
	// out of order) per direction: each costs a map entry, and a peer
	// that jumps ahead by thousands with a few bytes must not buy that
	// memory. Streams opened together arrive a few apart at most.
	wsMaxSkipped      = 256
	wsErrStreamLimit  = 0x4
	wsErrFlowExceeded = 0x3
)

// MaxIncomingStreams is how many bidirectional streams a peer may hold
// open at once in one session: the relay's QUIC MaxIncomingStreams, and
// the cap on a WebSocket session, which has no flow control to say so (a
// peer that opens one more is closed, as QUIC closes a connection with
// STREAM_LIMIT_ERROR). A listener opens a handful (setup, announce, a
// subscribe per track); an edge relay one per track it pulls.
const MaxIncomingStreams = 100

// AcceptWebSocket upgrades an HTTP request to a WebSocket session with the
// "webtransport" subprotocol. It writes an error response and returns an
// error when the client did not offer that subprotocol.
func AcceptWebSocket(w http.ResponseWriter, r *http.Request) (Session, error) {
	received := new(atomic.Uint64)
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{WebSocketSubprotocol},
		// Browsers on other origins are legitimate clients of a relay.
		InsecureSkipVerify: true,
		OnPongReceived:     func(context.Context, []byte) { received.Add(1) },
	})
	if err != nil {
		return nil, fmt.Errorf("accept websocket: %w", err)
	}
	if c.Subprotocol() != WebSocketSubprotocol {
		c.Close(websocket.StatusProtocolError, "subprotocol webtransport required")
		return nil, errors.New("accept websocket: client did not offer subprotocol webtransport")
	}
	return newWSSession(c, true, remoteAddr(r.RemoteAddr), received), nil
}

// DialWebSocket connects to a ws:// or wss:// URL with the "webtransport"
// subprotocol. client may be nil.
func DialWebSocket(ctx context.Context, url string, client *http.Client) (Session, error) {
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{
		HTTPClient:   client,
		Subprotocols: []string{WebSocketSubprotocol},
	})
	if err != nil {
		return nil, fmt.Errorf("dial websocket: %w", err)
	}
	if c.Subprotocol() != WebSocketSubprotocol {
		c.Close(websocket.StatusProtocolError, "subprotocol webtransport required")
		return nil, errors.New("dial websocket: server did not choose subprotocol webtransport")
	}
	return newWSSession(c, false, nil, new(atomic.Uint64)), nil
}

type addr string

func (a addr) Network() string { return "tcp" }
func (a addr) String() string  { return string(a) }

func remoteAddr(s string) net.Addr {
	if a, err := net.ResolveTCPAddr("tcp", s); err == nil {
		return a
	}
	return addr(s)
}

type wsSession struct {
	conn     *websocket.Conn
	isServer bool
	remote   net.Addr
	ctx      context.Context // ends with the session
	cancel   context.CancelCauseFunc

	acceptBidi chan *wsStream
	acceptUni  chan *wsStream

	mu       sync.Mutex
	streams  map[uint64]*wsStream
	nextBidi uint64
	nextUni  uint64
	// peerMax is one more than the highest stream index the peer used, per
	// direction (0 bidi, 1 uni); peerSkipped holds the lower indexes not
	// seen yet (streams' first frames may arrive out of order), so streams
	// already finished are not reborn.
	peerMax     [2]uint64
	peerSkipped [2]map[uint64]struct{}
	peerOpen    [2]int

	// buffered is the bytes received and not read yet, over all streams.
	buffered atomic.Int64
	// received counts the messages and pongs received; pinging is set
	// while a KeepAlive ping waits for its pong.
	received *atomic.Uint64
	pinging  atomic.Bool
	// handshaking is set once the read loop closes the connection with a
	// close handshake (a protocol violation).
	handshaking atomic.Bool
}

func newWSSession(c *websocket.Conn, isServer bool, remote net.Addr, received *atomic.Uint64) *wsSession {
	c.SetReadLimit(wsMaxMessage)
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &wsSession{
		conn:       c,
		isServer:   isServer,
		remote:     remote,
		ctx:        ctx,
		cancel:     cancel,
		acceptBidi: make(chan *wsStream, wsAcceptBacklog),
		acceptUni:  make(chan *wsStream, wsAcceptBacklog),
		streams:    make(map[uint64]*wsStream),
		received:   received,
	}
	if remote == nil {
		s.remote = addr("websocket")
	}
	go s.readLoop()
	return s
}

func (s *wsSession) readLoop() {
	var err error
	for {
		var typ websocket.MessageType
		var b []byte
		typ, b, err = s.conn.Read(s.ctx)
		if err != nil {
			break
		}
		s.received.Add(1)
		if typ != websocket.MessageBinary || len(b) == 0 {
			continue
		}
		if err = s.handleFrame(b); err != nil {
			// The session and its streams end now; the close handshake
			// after it waits up to 5 s for a peer that does not read,
			// and nobody waits for it (shutdown).
			s.handshaking.Store(true)
			s.end(readError(err))
			s.conn.Close(websocket.StatusProtocolError, "protocol violation")
			return
		}
	}
	s.shutdown(readError(err))
}

func (s *wsSession) shutdown(cause error) {
	s.end(cause)
	if !s.handshaking.Load() { // CloseNow would wait for the handshake
		s.conn.CloseNow()
	}
}

// end ends the session and its streams with cause, leaving the
// connection to the caller.
func (s *wsSession) end(cause error) {
	s.cancel(cause)
	s.mu.Lock()
	streams := s.streams
	s.streams = map[uint64]*wsStream{}
	s.mu.Unlock()
	for _, st := range streams {
		st.fail(cause)
	}
}

func (s *wsSession) handleFrame(b []byte) error {
	typ := b[0]
	b = b[1:]
	id, n, err := moqlite.ParseVarint(b)
	if err != nil {
		return fmt.Errorf("frame: %w", err)
	}
	b = b[n:]
	switch typ {
	case wsFrameStream, wsFrameStreamFin:
		st, err := s.streamFor(id)
		if err != nil || st == nil {
			return err
		}
		return st.deliver(b, typ == wsFrameStreamFin)
	case wsFrameResetStream:
		code, _, err := moqlite.ParseVarint(b)
		if err != nil {
			return fmt.Errorf("reset frame: %w", err)
		}
		if st := s.lookup(id); st != nil {
			st.reset(code)
		}
	case wsFrameStopSending:
		code, _, err := moqlite.ParseVarint(b)
		if err != nil {
			return fmt.Errorf("stop sending frame: %w", err)
		}
		if st := s.lookup(id); st != nil {
			st.stopped(code)
		}
	case wsFrameClose:
		// id is the application error code; the rest is the reason.
		s.shutdown(&CloseError{Code: id, Reason: string(b), Status: -1})
	default:
		return fmt.Errorf("unknown frame type %#x", typ)
	}
	return nil
}

func (s *wsSession) lookup(id uint64) *wsStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streams[id]
}

// streamFor finds the stream a STREAM frame belongs to, creating it when the
// peer opens a new one. It returns nil for frames of streams already gone.
func (s *wsSession) streamFor(id uint64) (*wsStream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.streams[id]; ok {
		return st, nil
	}
	serverInitiated := id&1 == 1
	uni := id&2 == 2
	if serverInitiated == s.isServer {
		return nil, nil // ours, already finished
	}
	dir, index := 0, id>>2
	if uni {
		dir = 1
	}
	if index < s.peerMax[dir] {
		if _, ok := s.peerSkipped[dir][index]; !ok {
			return nil, nil // the peer's, already finished
		}
		delete(s.peerSkipped[dir], index)
	} else {
		if index-s.peerMax[dir] > wsMaxSkipped || len(s.peerSkipped[dir])+int(index-s.peerMax[dir]) > wsMaxSkipped {
			return nil, errors.New("stream limit exceeded")
		}
		if s.peerSkipped[dir] == nil {
			s.peerSkipped[dir] = make(map[uint64]struct{})
		}
		for i := s.peerMax[dir]; i < index; i++ {
			s.peerSkipped[dir][i] = struct{}{}
		}
		s.peerMax[dir] = index + 1
	}
	if limit := [2]int{MaxIncomingStreams, wsMaxPeerUniStreams}[dir]; s.peerOpen[dir] >= limit {
		return nil, fmt.Errorf("stream limit exceeded: %d open", s.peerOpen[dir])
	}
	s.peerOpen[dir]++
	st := newWSStream(s, id, !uni, true)
	s.streams[id] = st
	ch := s.acceptBidi
	if uni {
		ch = s.acceptUni
	}
	select {
	case ch <- st:
	default:
		return nil, errors.New("accept backlog full")
	}
	return st, nil
}

func (s *wsSession) forget(st *wsStream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams[st.id] != st {
		return
	}
	delete(s.streams, st.id)
	if (st.id&1 == 1) != s.isServer {
		dir := 0
		if st.id&2 == 2 {
			dir = 1
		}
		s.peerOpen[dir]--
	}
}

func (s *wsSession) open(uni bool) (*wsStream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return nil, context.Cause(s.ctx)
	}
	var id uint64
	if uni {
		id = s.nextUni<<2 | 2
		s.nextUni++
	} else {
		id = s.nextBidi << 2
		s.nextBidi++
	}
	if s.isServer {
		id |= 1
	}
	st := newWSStream(s, id, true, !uni)
	s.streams[id] = st
	return st, nil
}

func (s *wsSession) OpenStream(ctx context.Context) (Stream, error) { return s.open(false) }

func (s *wsSession) OpenUniStream(ctx context.Context) (SendStream, error) { return s.open(true) }

func (s *wsSession) AcceptStream(ctx context.Context) (Stream, error) {
	select {
	case st := <-s.acceptBidi:
		return st, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.ctx.Done():
		return nil, context.Cause(s.ctx)
	}
}

func (s *wsSession) AcceptUniStream(ctx context.Context) (ReceiveStream, error) {
	select {
	case st := <-s.acceptUni:
		return st, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.ctx.Done():
		return nil, context.Cause(s.ctx)
	}
}

func (s *wsSession) CloseWithError(code uint64, reason string) error {
	if s.ctx.Err() == nil {
		b := moqlite.AppendVarint([]byte{wsFrameClose}, code)
		b = append(b, reason...)
		_ = s.send(b)
		status := websocket.StatusNormalClosure
		if code == moqlite.CodeGoingAway {
			status = websocket.StatusGoingAway // 1001: reconnect elsewhere
		}
		s.conn.Close(status, "")
	}
	s.shutdown(fmt.Errorf("%w: closed locally: code %d: %s", ErrSessionClosed, code, reason))
	return nil
}

// PacketsReceived counts the WebSocket messages received, pongs to
// KeepAlive's pings included (on the accepting side): the relay's reaper
// watches it as it watches a QUIC connection's packets.
func (s *wsSession) PacketsReceived() uint64 { return s.received.Load() }

// KeepAlive pings the peer unless a ping is waiting for its pong already;
// it does not wait. A live peer's pong counts in PacketsReceived (the
// accepting side: AcceptWebSocket). The relay's reaper calls it for a
// session that has been silent a while: a listener over WebSocket sends
// nothing of its own once subscribed.
func (s *wsSession) KeepAlive() {
	if s.ctx.Err() != nil || !s.pinging.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.pinging.Store(false)
		ctx, cancel := context.WithTimeout(s.ctx, wsWriteTimeout)
		defer cancel()
		_ = s.conn.Ping(ctx)
	}()
}

func (s *wsSession) Done() <-chan struct{} { return s.ctx.Done() }
func (s *wsSession) RemoteAddr() net.Addr  { return s.remote }

// send writes one frame. A write that fails or stalls for wsWriteTimeout
// (a peer that stopped reading) ends the whole session: the framing is
// shared, and this bounds what a stalled listener can pin.
func (s *wsSession) send(b []byte) error {
	ctx, cancel := context.WithTimeout(s.ctx, wsWriteTimeout)
	defer cancel()
	if err := s.conn.Write(ctx, websocket.MessageBinary, b); err != nil {
		if s.ctx.Err() != nil {
			return context.Cause(s.ctx)
		}
		err = fmt.Errorf("websocket write: %w", err)
		s.shutdown(fmt.Errorf("%w: %v", ErrSessionClosed, err))
		return err
	}
	return nil
}

// wsStream is one stream of a wsSession; either half may be absent.
type wsStream struct {
	sess *wsSession
	id   uint64

	mu       sync.Mutex
	notify   chan struct{} // closed and replaced when recv state changes
	buf      []byte
	fin      bool
	recvErr  error
	recvDone bool // no receive half, or finished with it
	sendErr  error
	sendDone bool // no send half, or finished with it
}

func newWSStream(s *wsSession, id uint64, canSend, canRecv bool) *wsStream {
	return &wsStream{sess: s, id: id, notify: make(chan struct{}), sendDone: !canSend, recvDone: !canRecv}
}

func (st *wsStream) wake() {
	close(st.notify)
	st.notify = make(chan struct{})
}

// maybeForget drops the stream from the session once both halves are done.
// Called with st.mu held.
func (st *wsStream) maybeForget() {
	if st.recvDone && st.sendDone {
		st.sess.forget(st) // lock order: st.mu, then sess.mu
	}
}

func (st *wsStream) deliver(b []byte, fin bool) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.recvDone || st.fin {
		return nil // cancelled by us, or data after FIN: drop
	}
	if len(st.buf)+len(b) > wsMaxBuffered {
		return errors.New("receive buffer exceeded")
	}
	if st.sess.buffered.Add(int64(len(b))) > wsMaxSessionBuffered {
		st.sess.buffered.Add(-int64(len(b)))
		return errors.New("session receive buffer exceeded")
	}
	st.buf = append(st.buf, b...)
	st.fin = fin
	st.wake()
	return nil
}

// dropBuf discards what was received and not read; st.mu is held.
func (st *wsStream) dropBuf() {
	st.sess.buffered.Add(-int64(len(st.buf)))
	st.buf = nil
}

func (st *wsStream) reset(code uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.recvErr == nil && !st.fin {
		st.recvErr = fmt.Errorf("stream reset by peer: code %d", code)
		st.dropBuf()
	}
	st.recvDone = true
	st.wake()
	st.maybeForget()
}

func (st *wsStream) stopped(code uint64) {
	st.mu.Lock()
	already := st.sendDone
	if st.sendErr == nil {
		st.sendErr = fmt.Errorf("stop sending by peer: code %d", code)
	}
	st.sendDone = true
	st.maybeForget()
	st.mu.Unlock()
	if !already {
		b := moqlite.AppendVarint([]byte{wsFrameResetStream}, st.id)
		_ = st.sess.send(moqlite.AppendVarint(b, code))
	}
}

func (st *wsStream) fail(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.recvErr == nil {
		st.recvErr = err
	}
	if st.sendErr == nil {
		st.sendErr = err
	}
	st.recvDone, st.sendDone = true, true
	st.wake()
}

func (st *wsStream) Read(p []byte) (int, error) {
	for {
		st.mu.Lock()
		if len(st.buf) > 0 {
			n := copy(p, st.buf)
			st.sess.buffered.Add(-int64(n))
			st.buf = st.buf[n:]
			if len(st.buf) == 0 {
				st.buf = nil
			}
			st.mu.Unlock()
			return n, nil
		}
		if st.fin {
			if !st.recvDone {
				st.recvDone = true
				st.maybeForget()
			}
			st.mu.Unlock()
			return 0, io.EOF
		}
		if st.recvErr != nil {
			err := st.recvErr
			st.mu.Unlock()
			return 0, err
		}
		if st.recvDone {
			st.mu.Unlock()
			return 0, errors.New("read on cancelled stream")
		}
		wait := st.notify
		st.mu.Unlock()
		select {
		case <-wait:
		case <-st.sess.ctx.Done():
			return 0, context.Cause(st.sess.ctx)
		}
	}
}

func (st *wsStream) CancelRead(code uint64) {
	st.mu.Lock()
	if st.recvDone || st.fin {
		st.recvDone = true
		st.maybeForget()
		st.mu.Unlock()
		return
	}
	st.recvDone = true
	st.recvErr = errors.New("read cancelled")
	st.dropBuf()
	st.wake()
	st.maybeForget()
	st.mu.Unlock()
	b := moqlite.AppendVarint([]byte{wsFrameStopSending}, st.id)
	_ = st.sess.send(moqlite.AppendVarint(b, code))
}

func (st *wsStream) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		st.mu.Lock()
		err := st.sendErr
		if err == nil && st.sendDone {
			err = errors.New("write on closed stream")
		}
		st.mu.Unlock()
		if err != nil {
			return written, err
		}
		n := min(len(p), wsMaxPayload)
		b := moqlite.AppendVarint(make([]byte, 0, 9+n), st.id)
		b = append([]byte{wsFrameStream}, append(b, p[:n]...)...)
		if err := st.sess.send(b); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

func (st *wsStream) finishSend(frame []byte) error {
	st.mu.Lock()
	if st.sendDone {
		err := st.sendErr
		st.mu.Unlock()
		return err
	}
	st.sendDone = true
	st.maybeForget()
	st.mu.Unlock()
	return st.sess.send(frame)
}

func (st *wsStream) Close() error {
	return st.finishSend(moqlite.AppendVarint([]byte{wsFrameStreamFin}, st.id))
}

func (st *wsStream) CancelWrite(code uint64) {
	b := moqlite.AppendVarint([]byte{wsFrameResetStream}, st.id)
	_ = st.finishSend(moqlite.AppendVarint(b, code))
}
