package relay

// PacketsReceivedForTest sums the packets received on every open raw
// QUIC session (the publisher's and the listeners').
func (r *Relay) PacketsReceivedForTest() uint64 {
	r.srv.mu.Lock()
	defer r.srv.mu.Unlock()
	var n uint64
	for sess := range r.srv.sessions {
		if pc, ok := sess.t.(packetCounter); ok {
			n += pc.PacketsReceived()
		}
	}
	return n
}
