//go:build stockquic

package transport

// HoldLoop never takes the loop against the quic-go release (the stockquic
// tag), which has no quic.Conn.HoldLoop: writes wake the connection's
// own loop, as quic-go does.
func (s quicSession) HoldLoop() bool { return false }

// ReleaseLoop is never called: HoldLoop never succeeds.
func (s quicSession) ReleaseLoop() {}
