package udpbatch_test

import (
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// TestControlMessages: each packet's control messages go with it: a GSO
// segment size splits one write into datagrams of that size.
func TestControlMessages(t *testing.T) {
	src := wrap(t, listen(t))
	dst := listen(t)
	raw, _ := src.SyscallConn()
	var gsoErr error
	_ = raw.Control(func(fd uintptr) { _, gsoErr = unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT) })
	if gsoErr != nil {
		testutil.Skipf(t, "no UDP GSO here: %v", gsoErr)
	}
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = syscall.IPPROTO_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	*(*uint16)(unsafe.Pointer(&oob[unix.CmsgSpace(0)])) = 100
	n, oobn, err := src.WriteMsgUDP(make([]byte, 300), oob, dst.LocalAddr().(*net.UDPAddr))
	if err != nil || n != 300 || oobn != len(oob) {
		t.Fatalf("write: n=%d oobn=%d err=%v", n, oobn, err)
	}
	_ = dst.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1500)
	for i := range 3 {
		n, _, err := dst.ReadFromUDP(buf)
		if err != nil || n != 100 {
			t.Fatalf("datagram %d: %d bytes, %v; want 100", i, n, err)
		}
	}
}
