package testutil

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// UDPProxy forwards UDP between its clients and a target, one upstream
// socket per client, until the test ends. While Drop is set it swallows
// every packet both ways: a blackholed path, or one not there yet (no
// close, no ICMP).
type UDPProxy struct {
	Drop   atomic.Bool
	ln     *net.UDPConn
	target *net.UDPAddr
	mu     sync.Mutex
	peers  map[string]*net.UDPConn
}

// NewUDPProxy listens on a free loopback port and forwards to target.
func NewUDPProxy(t testing.TB, target string) *UDPProxy {
	t.Helper()
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	p := &UDPProxy{ln: ln, target: ta, peers: map[string]*net.UDPConn{}}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.peers {
			c.Close()
		}
		p.mu.Unlock()
	})
	go p.serve()
	return p
}

// Addr is the proxy's address, HOST:PORT.
func (p *UDPProxy) Addr() string { return p.ln.LocalAddr().String() }

func (p *UDPProxy) serve() {
	buf := make([]byte, 65536)
	for {
		n, from, err := p.ln.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if p.Drop.Load() {
			continue
		}
		p.mu.Lock()
		c := p.peers[from.String()]
		if c == nil {
			if c, err = net.DialUDP("udp", nil, p.target); err != nil {
				p.mu.Unlock()
				continue
			}
			p.peers[from.String()] = c
			go func() {
				b := make([]byte, 65536)
				for {
					n, err := c.Read(b)
					if err != nil {
						return
					}
					if !p.Drop.Load() {
						_, _ = p.ln.WriteToUDP(b[:n], from)
					}
				}
			}()
		}
		p.mu.Unlock()
		_, _ = c.Write(buf[:n])
	}
}
