//go:build !linux

package relay

import (
	"errors"
	"net"
)

const kernelBufferFactor = 1

func socketBuffers(c *net.UDPConn) (rcv, snd int, err error) {
	return 0, 0, errors.New("reading socket buffers is supported on linux only")
}

func setSocketBuffers(c *net.UDPConn, size int) error {
	if err := c.SetReadBuffer(size); err != nil {
		return err
	}
	return c.SetWriteBuffer(size)
}
