// Package transport is the small session interface the relay and its client
// speak moq-lite over, with adapters for raw QUIC (quic-go), WebTransport
// (webtransport-go) and WebSocket with the qmux legacy "webtransport"
// framing.
package transport

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/quic-go/quic-go"
)

// SendStream is the sending half of a stream.
type SendStream interface {
	io.Writer
	// Close ends the stream cleanly (FIN).
	Close() error
	// CancelWrite abandons the stream (RESET_STREAM).
	CancelWrite(code uint64)
}

// ReceiveStream is the receiving half of a stream. Read returns io.EOF after
// the peer's FIN.
type ReceiveStream interface {
	io.Reader
	// CancelRead tells the peer to stop sending (STOP_SENDING).
	CancelRead(code uint64)
}

// Stream is a bidirectional stream.
type Stream interface {
	SendStream
	ReceiveStream
}

// Session is one multiplexed connection: a QUIC connection, a WebTransport
// session or a WebSocket carrying qmux frames.
type Session interface {
	OpenStream(ctx context.Context) (Stream, error)
	AcceptStream(ctx context.Context) (Stream, error)
	OpenUniStream(ctx context.Context) (SendStream, error)
	AcceptUniStream(ctx context.Context) (ReceiveStream, error)
	// CloseWithError ends the session and every stream in it.
	CloseWithError(code uint64, reason string) error
	// Done is closed when the session has ended, for whatever reason.
	Done() <-chan struct{}
	RemoteAddr() net.Addr
}

// TryUniOpener is a Session that can open a unidirectional stream without
// waiting: TryOpenUniStream returns ErrWouldBlock when the peer's stream
// limit is reached (OpenUniStream would wait for it to rise).
type TryUniOpener interface {
	TryOpenUniStream() (SendStream, error)
}

// TryWriter is a SendStream that can take a write without waiting:
// TryWriteAll queues all of p, or nothing and returns ErrWouldBlock (flow
// control, or another write in progress).
type TryWriter interface {
	TryWriteAll(p []byte) error
}

// LoopHolder is a Session whose connection's loop a writer can take for
// a while (HoldLoop, false when it cannot): what it writes meanwhile is
// sent by ReleaseLoop on the writer's goroutine, without waking the
// connection's own. Between the two the writer must not call anything
// that waits (only TryOpenUniStream, TryWriteAll, Close, CancelWrite).
type LoopHolder interface {
	HoldLoop() bool
	ReleaseLoop()
}

// ErrWouldBlock is what TryOpenUniStream and TryWriteAll return instead
// of waiting.
var ErrWouldBlock = errors.New("transport: would block")

// ErrSessionClosed is returned by stream and session operations after the
// session ended.
var ErrSessionClosed = errors.New("transport: session closed")

// NewQUIC adapts a quic-go connection.
func NewQUIC(c *quic.Conn) Session { return quicSession{c} }

type quicSession struct{ c *quic.Conn }

func (s quicSession) OpenStream(ctx context.Context) (Stream, error) {
	st, err := s.c.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	return quicStream{st}, nil
}

func (s quicSession) AcceptStream(ctx context.Context) (Stream, error) {
	st, err := s.c.AcceptStream(ctx)
	if err != nil {
		return nil, err
	}
	return quicStream{st}, nil
}

func (s quicSession) OpenUniStream(ctx context.Context) (SendStream, error) {
	st, err := s.c.OpenUniStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	return quicSend{st}, nil
}

// TryOpenUniStream opens a stream if the peer's limit allows one now.
func (s quicSession) TryOpenUniStream() (SendStream, error) {
	st, err := s.c.OpenUniStream()
	if err != nil {
		if errors.As(err, &quic.StreamLimitReachedError{}) {
			return nil, ErrWouldBlock
		}
		return nil, err
	}
	return quicSend{st}, nil
}

func (s quicSession) AcceptUniStream(ctx context.Context) (ReceiveStream, error) {
	st, err := s.c.AcceptUniStream(ctx)
	if err != nil {
		return nil, err
	}
	return quicRecv{st}, nil
}

func (s quicSession) CloseWithError(code uint64, reason string) error {
	return s.c.CloseWithError(quic.ApplicationErrorCode(code), reason)
}

func (s quicSession) Done() <-chan struct{} { return s.c.Context().Done() }

// Context ends with the connection.
func (s quicSession) Context() context.Context { return s.c.Context() }

// PacketsReceived counts the packets received on the connection so far;
// the relay's reaper watches it.
func (s quicSession) PacketsReceived() uint64 { return s.c.ConnectionStats().PacketsReceived }
func (s quicSession) RemoteAddr() net.Addr    { return s.c.RemoteAddr() }

type quicStream struct{ *quic.Stream }

func (s quicStream) CancelWrite(code uint64) { s.Stream.CancelWrite(quic.StreamErrorCode(code)) }
func (s quicStream) CancelRead(code uint64)  { s.Stream.CancelRead(quic.StreamErrorCode(code)) }

type quicSend struct{ *quic.SendStream }

func (s quicSend) CancelWrite(code uint64) { s.SendStream.CancelWrite(quic.StreamErrorCode(code)) }

// TryWriteAll queues p if the stream can take all of it now.
func (s quicSend) TryWriteAll(p []byte) error {
	if err := s.SendStream.TryWriteAll(p); err != nil {
		if errors.Is(err, quic.ErrWouldBlock) {
			return ErrWouldBlock
		}
		return err
	}
	return nil
}

type quicRecv struct{ *quic.ReceiveStream }

func (s quicRecv) CancelRead(code uint64) { s.ReceiveStream.CancelRead(quic.StreamErrorCode(code)) }
