package relay_test

import (
	"net"
	"syscall"
	"testing"
)

// gsoAvailable reports whether the kernel lets a UDP socket read its
// segment size (UDP_SEGMENT), which quic-go needs to use GSO.
func gsoAvailable(t *testing.T) bool {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	_ = raw.Control(func(fd uintptr) { _, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_UDP, 103) }) // UDP_SEGMENT
	return serr == nil
}
