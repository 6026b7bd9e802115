package transport

// ProbeSize is the payload size of the datagram Probe sends. quic-go
// (v0.64.1, Transport.maybeSendStatelessReset) answers a packet of an
// unknown connection with a stateless reset only when the packet is
// longer than 42 bytes (protocol.MinStatelessResetSize); a keep-alive
// PING is about 25 to 45 bytes, depending on the connection ID length the
// server chose and on an ACK riding along. A 48-byte datagram makes the
// packet at least 1+4+1+2+48+16 = 72 bytes with the shortest connection
// ID and packet number.
const ProbeSize = 48

// Probe sends one ack-eliciting packet that is long enough to be answered
// with a stateless reset by a relay restarted on the same port: a QUIC
// DATAGRAM of ProbeSize zero bytes (the relay's QUIC listener enables
// datagrams for WebTransport, for every connection, and ignores them on
// moq-lite ones). It fails when the peer did not enable datagrams.
func (s quicSession) Probe() error { return s.c.SendDatagram(make([]byte, ProbeSize)) }

// Probe sends a WebTransport datagram of ProbeSize zero bytes on the
// session's QUIC connection (see quicSession.Probe).
func (s wtSession) Probe() error { return s.s.SendDatagram(make([]byte, ProbeSize)) }
