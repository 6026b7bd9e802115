//go:build !stockquic

package client

import "github.com/quic-go/quic-go"

// SetAckFrequency turns the ACK frequency extension on or off in c (a
// relay may then ask the listener to acknowledge every other audio packet)
// and, with it on, stream credit in batches: features of relayfleet's
// patched quic-go (docs/quic-go-patch.md). quicpatch_stock.go is its
// stockquic twin.
func SetAckFrequency(c *quic.Config, on bool) {
	c.EnableAckFrequency = on
	c.BatchMaxStreams = true
}
