package relay

import (
	"net"
	"syscall"
)

// kernelBufferFactor is how much larger than the usable size Linux reports
// socket buffers (it doubles the value set, for bookkeeping).
const kernelBufferFactor = 2

// socketBuffers reads back the receive and send buffer sizes the kernel
// granted the socket (SO_RCVBUF / SO_SNDBUF; Linux reports twice the
// requested size to account for its bookkeeping).
func socketBuffers(c *net.UDPConn) (rcv, snd int, err error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		rcv, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF)
		if serr != nil {
			return
		}
		snd, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF)
	})
	if err == nil {
		err = serr
	}
	return rcv, snd, err
}

// setSocketBuffers sets both buffers to size: forced (SO_RCVBUFFORCE,
// SO_SNDBUFFORCE, which need CAP_NET_ADMIN) when allowed, else the plain
// options, which the kernel clamps to net.core.rmem_max and wmem_max.
func setSocketBuffers(c *net.UDPConn, size int) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		for _, o := range [][2]int{{syscall.SO_RCVBUFFORCE, syscall.SO_RCVBUF}, {syscall.SO_SNDBUFFORCE, syscall.SO_SNDBUF}} {
			if syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, o[0], size) == nil {
				continue
			}
			if e := syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, o[1], size); e != nil {
				serr = e
			}
		}
	})
	if err == nil {
		err = serr
	}
	return err
}
