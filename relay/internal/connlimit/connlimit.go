// Package connlimit caps the connections a listener holds open: past the
// cap, new connections are closed as soon as they are accepted, so an
// idle-connection flood costs the server a bounded number of sockets and
// goroutines while the ones it holds wait out their timeouts.
package connlimit

import (
	"net"
	"sync"
	"sync/atomic"
)

// Listener is a net.Listener that holds at most Max connections open.
type Listener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	refused atomic.Int64
}

// New wraps l; max <= 0 means no cap.
func New(l net.Listener, max int) *Listener {
	return &Listener{Listener: l, max: int64(max)}
}

// Accept returns the next connection under the cap; connections past it
// are closed at once and counted.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.open.Add(1); l.max > 0 && n > l.max {
			l.open.Add(-1)
			l.refused.Add(1)
			_ = c.Close()
			continue
		}
		return &conn{Conn: c, l: l}, nil
	}
}

// Open is the connections open now.
func (l *Listener) Open() int { return int(l.open.Load()) }

// Refused is the connections closed for being past the cap so far.
func (l *Listener) Refused() int64 { return l.refused.Load() }

type conn struct {
	net.Conn
	l    *Listener
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
