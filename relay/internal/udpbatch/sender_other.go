//go:build !linux

package udpbatch

import "net"

// sender sends one packet per system call where sendmmsg is missing.
type sender struct{ reqs []*request }

func newSender(*net.UDPConn, int) (*sender, error) { return &sender{}, nil }

func (s *sender) take(rs []*request) []*request {
	s.reqs = append(s.reqs[:0], rs...)
	return s.reqs
}

func (s *sender) send(c *Conn, batch []*request) {
	for _, r := range batch {
		r.msg.N, _, r.msg.Err = c.UDPConn.WriteMsgUDP(r.msg.Buf, r.msg.OOB, r.msg.Addr)
	}
}

// Sender sends packets one system call each where sendmmsg is missing.
type Sender struct{ c *net.UDPConn }

// NewSender returns a Sender for c.
func NewSender(c *net.UDPConn) (*Sender, error) { return &Sender{c: c}, nil }

// Send sends msgs and sets each one's N or Err.
func (b *Sender) Send(msgs []Message) {
	for i := range msgs {
		m := &msgs[i]
		m.N, _, m.Err = b.c.WriteMsgUDP(m.Buf, m.OOB, m.Addr)
	}
}
