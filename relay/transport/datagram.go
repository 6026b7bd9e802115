package transport

import "context"

// Datagrams is what a session that carries QUIC DATAGRAMs offers besides
// Session: raw QUIC and WebTransport do (when both ends enabled them);
// WebSocket does not. The relay sends its going-away notice
// (moqlite.GoAwayNotice) this way.
type Datagrams interface {
	// SendDatagram sends b unreliably; it fails when the peer did not
	// enable datagrams, or b does not fit in a packet.
	SendDatagram(b []byte) error
	// ReceiveDatagram waits for the next datagram, until ctx or the
	// session ends.
	ReceiveDatagram(ctx context.Context) ([]byte, error)
}

func (s quicSession) SendDatagram(b []byte) error { return s.c.SendDatagram(b) }
func (s quicSession) ReceiveDatagram(ctx context.Context) ([]byte, error) {
	return s.c.ReceiveDatagram(ctx)
}

func (s wtSession) SendDatagram(b []byte) error { return s.s.SendDatagram(b) }
func (s wtSession) ReceiveDatagram(ctx context.Context) ([]byte, error) {
	return s.s.ReceiveDatagram(ctx)
}
