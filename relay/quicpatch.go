//go:build !stockquic

package relay

import (
	"cmp"

	"github.com/quic-go/quic-go"
)

// PatchedQUIC reports whether the relay is built against relayfleet's
// patched quic-go (third_party/quic-go, docs/quic-go-patch.md): true
// unless built with the stockquic tag.
const PatchedQUIC = true

// patchedQUIC sets the patched quic-go's Config fields: ACKs that wait for
// the next audio packet, packets written from the connection's own loop,
// listeners asked to acknowledge every other audio packet (the ACK
// frequency extension), stream credit in batches, probe timeouts that wait
// for the ACKs not read yet. quicpatch_stock.go is its stockquic twin.
func (cfg *Config) patchedQUIC(qc *quic.Config) {
	qc.MaxAckDelay = cmp.Or(cfg.AckDelay, DefaultAckDelay)
	qc.AckElicitingThreshold = cmp.Or(cfg.AckThreshold, DefaultAckThreshold)
	qc.SendSynchronously = !cfg.SendQueue
	qc.PTOAckDelay = cfg.PTOAckDelay
	// Listeners that support the ACK frequency extension are asked to
	// acknowledge every other audio packet.
	qc.PeerMaxAckDelay = max(0, cmp.Or(cfg.ListenerAckDelay, DefaultListenerAckDelay))
	qc.PeerAckElicitingThreshold = cmp.Or(cfg.ListenerAckThreshold, DefaultListenerAckThreshold)
	// A publisher's group streams get credit in batches.
	qc.BatchMaxStreams = true
	qc.PTOAfterReads = !cfg.PTOIgnoresReads
}
