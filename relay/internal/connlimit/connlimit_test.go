package connlimit_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay/internal/connlimit"
)

// Past the cap a connection is closed at once; closing one under the cap
// makes room for the next.
func TestCap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := connlimit.New(ln, 2)
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := dial(), dial()
	_, _ = a, b
	sa, sb := <-accepted, <-accepted
	_ = sb
	over := dial()
	_ = over.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := over.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("third connection with a cap of 2: read %v, want EOF (closed)", err)
	}
	if l.Refused() != 1 || l.Open() != 2 {
		t.Fatalf("refused %d open %d, want 1 and 2", l.Refused(), l.Open())
	}
	sa.Close()
	sa.Close() // twice counts once
	dial()
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("no room after closing one")
	}
	if l.Open() != 2 {
		t.Fatalf("open %d, want 2", l.Open())
	}
}
