//go:build stockquic

package client

import "github.com/quic-go/quic-go"

// SetAckFrequency does nothing against the quic-go release (the stockquic
// tag): it has neither the ACK frequency extension nor batched stream
// credit.
func SetAckFrequency(*quic.Config, bool) {}
