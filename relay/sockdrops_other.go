//go:build !linux

package relay

import (
	"errors"
	"net"
)

func socketDrops(*net.UDPConn) (int64, error) {
	return 0, errors.New("reading socket drops is supported on linux only")
}
