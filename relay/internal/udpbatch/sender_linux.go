package udpbatch

import (
	"errors"
	"net"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sender holds the system call's arrays, reused batch after batch by the
// writer whose turn it is.
type sender struct {
	raw    syscall.RawConn
	family int
	reqs   []*request
	msgs   []*Message
	hdrs   []unix.Mmsghdr
	iovs   []unix.Iovec
	names  []unix.RawSockaddrInet6
	idx    []int
}

func newSender(c *net.UDPConn, size int) (*sender, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	family := unix.AF_INET6
	var serr error
	if err := raw.Control(func(fd uintptr) {
		family, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
	}); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, os.NewSyscallError("getsockopt", serr)
	}
	return &sender{
		raw: raw, family: family,
		reqs: make([]*request, 0, size), msgs: make([]*Message, 0, size),
		hdrs: make([]unix.Mmsghdr, size), iovs: make([]unix.Iovec, size), names: make([]unix.RawSockaddrInet6, size),
		idx: make([]int, 0, size),
	}, nil
}

func (s *sender) take(rs []*request) []*request {
	s.reqs = append(s.reqs[:0], rs...)
	return s.reqs
}

func (s *sender) send(c *Conn, batch []*request) {
	s.msgs = s.msgs[:0]
	for _, r := range batch {
		s.msgs = append(s.msgs, &r.msg)
	}
	s.sendmmsg(c.UDPConn, s.msgs)
}

// sendmmsg sends msgs, as many per system call as the kernel takes, and
// sets each one's N or Err.
func (s *sender) sendmmsg(c *net.UDPConn, msgs []*Message) {
	if len(msgs) > len(s.hdrs) {
		s.hdrs = make([]unix.Mmsghdr, len(msgs))
		s.iovs = make([]unix.Iovec, len(msgs))
		s.names = make([]unix.RawSockaddrInet6, len(msgs))
	}
	// Build the headers of the packets that can go; the others fail here.
	// idx maps each header to its message.
	s.idx = s.idx[:0]
	for i, m := range msgs {
		m.N, m.Err = 0, nil
		k := len(s.idx)
		nl, ok := s.sockaddr(&s.names[k], m.Addr)
		if !ok {
			m.Err = opError(c, m.Addr, errors.New("address family not supported by the socket"))
			continue
		}
		s.idx = append(s.idx, i)
		h := &s.hdrs[k].Hdr
		*h = unix.Msghdr{Name: (*byte)(unsafe.Pointer(&s.names[k])), Namelen: nl}
		if len(m.Buf) > 0 {
			s.iovs[k] = unix.Iovec{Base: &m.Buf[0]}
			s.iovs[k].SetLen(len(m.Buf))
			h.Iov = &s.iovs[k]
			h.SetIovlen(1)
		}
		if len(m.OOB) > 0 {
			h.Control = &m.OOB[0]
			h.SetControllen(len(m.OOB))
		}
		s.hdrs[k].Len = 0
	}
	k := len(s.idx)
	at := func(j int) *Message { return msgs[s.idx[j]] }
	for off := 0; off < k; {
		var (
			n     int
			errno syscall.Errno
		)
		err := s.raw.Write(func(fd uintptr) bool {
			r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&s.hdrs[off])), uintptr(k-off), 0, 0, 0)
			if e == unix.EAGAIN || e == unix.EWOULDBLOCK {
				return false // wait until the socket is writable
			}
			n, errno = int(r), e
			return true
		})
		if err != nil { // closed, deadline: nothing more goes
			for j := off; j < k; j++ {
				at(j).Err = opError(c, at(j).Addr, err)
			}
			break
		}
		if errno != 0 {
			// The kernel reports the first packet's error; the others
			// were not tried. The syscall name is sendmsg's, as for one
			// packet: quic-go matches on it (its EPERM retry).
			at(off).Err = opError(c, at(off).Addr, os.NewSyscallError("sendmsg", errno))
			off++
			continue
		}
		for j := off; j < off+n; j++ {
			at(j).N = int(s.hdrs[j].Len)
		}
		off += n
	}
	// The headers point into the callers' buffers: drop the references.
	for j := range k {
		s.hdrs[j].Hdr = unix.Msghdr{}
		s.iovs[j] = unix.Iovec{}
	}
}

// sockaddr writes addr in the socket's family into sa and returns its
// length; false if addr cannot be sent from this socket.
func (s *sender) sockaddr(sa *unix.RawSockaddrInet6, addr *net.UDPAddr) (uint32, bool) {
	if addr == nil {
		return 0, false
	}
	port := addr.Port
	if s.family == unix.AF_INET {
		ip4 := addr.IP.To4()
		if ip4 == nil {
			return 0, false
		}
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET}
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		p[0], p[1] = byte(port>>8), byte(port)
		copy(sa4.Addr[:], ip4)
		return unix.SizeofSockaddrInet4, true
	}
	ip16 := addr.IP.To16()
	if ip16 == nil {
		return 0, false
	}
	*sa = unix.RawSockaddrInet6{Family: unix.AF_INET6}
	p := (*[2]byte)(unsafe.Pointer(&sa.Port))
	p[0], p[1] = byte(port>>8), byte(port)
	copy(sa.Addr[:], ip16) // an IPv4 address as ::ffff:a.b.c.d
	if addr.Zone != "" {
		if ifi, err := net.InterfaceByName(addr.Zone); err == nil {
			sa.Scope_id = uint32(ifi.Index)
		}
	}
	return unix.SizeofSockaddrInet6, true
}

func opError(c *net.UDPConn, addr *net.UDPAddr, err error) error {
	var a net.Addr
	if addr != nil {
		a = addr
	}
	return &net.OpError{Op: "write", Net: "udp", Source: c.LocalAddr(), Addr: a, Err: err}
}

// Sender sends batches of packets on one socket with sendmmsg, without
// the queue of Conn: the caller forms the batches. It is not safe for
// concurrent use.
type Sender struct {
	c    *net.UDPConn
	s    *sender
	ptrs []*Message
}

// NewSender returns a Sender for c.
func NewSender(c *net.UDPConn) (*Sender, error) {
	s, err := newSender(c, DefaultSize)
	if err != nil {
		return nil, err
	}
	return &Sender{c: c, s: s}, nil
}

// Send sends msgs, as few system calls as the kernel allows, and sets each
// one's N or Err.
func (b *Sender) Send(msgs []Message) {
	b.ptrs = b.ptrs[:0]
	for i := range msgs {
		b.ptrs = append(b.ptrs, &msgs[i])
	}
	b.s.sendmmsg(b.c, b.ptrs)
}
