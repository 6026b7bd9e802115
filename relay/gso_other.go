//go:build !linux

package relay

// hasSegmentSize: quic-go uses GSO on Linux only.
func hasSegmentSize([]byte) bool { return false }
