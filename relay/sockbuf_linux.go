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
