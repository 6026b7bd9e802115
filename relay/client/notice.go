package client

import (
	"bytes"

	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// GoingAway is closed when the relay sent its going-away notice
// (moqlite.GoAwayNotice, a relayfleet extension): it will close the
// session with moqlite.CodeGoingAway after a grace, and serves it until
// then, so a listener subscribes elsewhere first (make-before-break). A
// session over WebSocket never gets the notice.
func (s *Session) GoingAway() <-chan struct{} { return s.goAway }

// watchDatagrams reads the session's datagrams until it ends, closing
// s.goAway at the notice; other datagrams are ignored.
func (s *Session) watchDatagrams(d transport.Datagrams) {
	noticed := false
	for {
		b, err := d.ReceiveDatagram(s.ctx)
		if err != nil {
			return
		}
		if !noticed && bytes.Equal(b, moqlite.GoAwayNotice) {
			noticed = true
			s.log.Debug("relay sent going-away notice")
			close(s.goAway)
		}
	}
}
