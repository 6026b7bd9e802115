package testutil

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// DialConns opens n TCP connections to addr, closed when the test ends.
func DialConns(t testing.TB, addr string, n int) []net.Conn {
	t.Helper()
	return dialConns(t, addr, n, nil)
}

// IdleConns opens n TCP connections to the HTTP server at addr that hold
// it up in three ways, a third each: silent from the start, a complete
// GET of target answered and then silence on the keep-alive connection,
// and a GET of target with no end to its headers. They are closed when
// the test ends.
func IdleConns(t testing.TB, addr string, n int, target string) []net.Conn {
	t.Helper()
	return dialConns(t, addr, n, func(i int, c net.Conn) {
		switch i % 3 {
		case 1:
			if _, err := c.Write([]byte("GET " + target + " HTTP/1.1\r\nHost: test\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			resp.Body.Close()
		case 2:
			if _, err := c.Write([]byte("GET " + target + " HTTP/1.1\r\n")); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// dialConns opens n TCP connections to addr, closed when the test ends,
// calling use, when set, on each as soon as it is open (a server's
// timeouts run from then).
func dialConns(t testing.TB, addr string, n int, use func(i int, c net.Conn)) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		if use != nil {
			use(i, c)
		}
	}
	return conns
}

// ClosedWithin reads each connection until the server closes it and
// returns how many it closed within limit.
func ClosedWithin(conns []net.Conn, limit time.Duration) int {
	deadline := time.Now().Add(limit)
	var closed atomic.Int32
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(deadline)
			buf := make([]byte, 512)
			for {
				if _, err := c.Read(buf); err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						closed.Add(1)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	return int(closed.Load())
}
