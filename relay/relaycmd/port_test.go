package relaycmd

import (
	"net"
	"strconv"
	"testing"
)

// freePort returns a port number free on both UDP and TCP loopback right now.
func freePort(t *testing.T) string {
	t.Helper()
	for i := 0; i < 20; i++ {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		p := u.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		u.Close()
		if err == nil {
			l.Close()
			return strconv.Itoa(p)
		}
	}
	t.Fatal("no free port")
	return ""
}
