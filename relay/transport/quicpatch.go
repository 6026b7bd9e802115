//go:build !stockquic

package transport

// HoldLoop takes the connection's loop (quic.Conn.HoldLoop, relayfleet's
// patched quic-go; quicpatch_stock.go is its stockquic twin).
func (s quicSession) HoldLoop() bool { return s.c.HoldLoop() }

// ReleaseLoop sends what was written while held and gives the loop back.
func (s quicSession) ReleaseLoop() { s.c.ReleaseLoop() }
