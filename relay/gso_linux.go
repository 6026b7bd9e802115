package relay

import (
	"syscall"
	"unsafe"
)

// udpSegment is UDP_SEGMENT (linux/udp.h): a GSO segment size.
const udpSegment = 103

// hasSegmentSize reports whether the control messages of a write carry a
// GSO segment size (quic-go sends with GSO).
func hasSegmentSize(oob []byte) bool {
	for len(oob) >= syscall.SizeofCmsghdr {
		if uintptr(unsafe.Pointer(&oob[0]))%unsafe.Alignof(syscall.Cmsghdr{}) != 0 {
			return false
		}
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		n := int(h.Len)
		if n < syscall.SizeofCmsghdr || n > len(oob) {
			return false
		}
		if h.Level == syscall.IPPROTO_UDP && h.Type == udpSegment {
			return true
		}
		step := syscall.CmsgSpace(n - syscall.CmsgLen(0))
		if step > len(oob) {
			return false
		}
		oob = oob[step:]
	}
	return false
}
