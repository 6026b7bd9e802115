package transport

import (
	"context"
	"net"
	"time"

	"github.com/quic-go/webtransport-go"
)

// NewWebTransport adapts a webtransport-go session. Error codes above
// 32 bits are truncated, as WebTransport carries 32-bit codes.
func NewWebTransport(s *webtransport.Session) Session { return wtSession{s} }

type wtSession struct{ s *webtransport.Session }

func (s wtSession) OpenStream(ctx context.Context) (Stream, error) {
	st, err := s.s.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	return wtStream{st}, nil
}

func (s wtSession) AcceptStream(ctx context.Context) (Stream, error) {
	st, err := s.s.AcceptStream(ctx)
	if err != nil {
		return nil, err
	}
	return wtStream{st}, nil
}

func (s wtSession) OpenUniStream(ctx context.Context) (SendStream, error) {
	st, err := s.s.OpenUniStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	return wtSend{st}, nil
}

func (s wtSession) AcceptUniStream(ctx context.Context) (ReceiveStream, error) {
	st, err := s.s.AcceptUniStream(ctx)
	if err != nil {
		return nil, err
	}
	return wtRecv{st}, nil
}

func (s wtSession) CloseWithError(code uint64, reason string) error {
	return s.s.CloseWithError(webtransport.SessionErrorCode(code), reason)
}

func (s wtSession) Done() <-chan struct{} { return s.s.Context().Done() }
func (s wtSession) RemoteAddr() net.Addr  { return s.s.RemoteAddr() }

type wtStream struct{ *webtransport.Stream }

// webtransport-go v0.13.0 can leave a Read or Write blocked after the
// session went away (it waits for a session close that a cancelled stream
// is no longer told about), so cancelling also sets a past deadline.

func (s wtStream) CancelWrite(code uint64) {
	s.Stream.CancelWrite(webtransport.StreamErrorCode(code))
	_ = s.Stream.SetWriteDeadline(time.Now())
}

func (s wtStream) CancelRead(code uint64) {
	s.Stream.CancelRead(webtransport.StreamErrorCode(code))
	_ = s.Stream.SetReadDeadline(time.Now())
}

type wtSend struct{ *webtransport.SendStream }

func (s wtSend) CancelWrite(code uint64) {
	s.SendStream.CancelWrite(webtransport.StreamErrorCode(code))
	_ = s.SendStream.SetWriteDeadline(time.Now())
}

type wtRecv struct{ *webtransport.ReceiveStream }

func (s wtRecv) CancelRead(code uint64) {
	s.ReceiveStream.CancelRead(webtransport.StreamErrorCode(code))
	_ = s.ReceiveStream.SetReadDeadline(time.Now())
}
