package relay

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"

	"github.com/relayfleet/relayfleet/relay/procstat"
)

// socketDrops is the count of datagrams the kernel dropped at c (its
// receive buffer full, or a filter): the drops column of the socket's line
// in /proc/self/net/udp or udp6, found by the socket's inode. It is this
// socket's own count, not the host's UDP RcvbufErrors.
func socketDrops(c *net.UDPConn) (int64, error) {
	ino, err := socketInode(c)
	if err != nil {
		return 0, err
	}
	for _, f := range []string{"/proc/self/net/udp", "/proc/self/net/udp6"} {
		n, ok, err := dropsIn(f, ino)
		if err != nil {
			return 0, err
		}
		if ok {
			return n, nil
		}
	}
	return 0, fmt.Errorf("socket inode %d not in /proc/self/net/udp{,6}", ino)
}

func socketInode(c *net.UDPConn) (uint64, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var st syscall.Stat_t
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = syscall.Fstat(int(fd), &st) }); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, serr
	}
	return st.Ino, nil
}

// dropsIn finds the line of inode ino in a /proc/net/udp-format file and
// returns its drops column (the last one), with package relay/procstat's
// parser.
func dropsIn(path string, ino uint64) (int64, bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false, err
	}
	n, ok, err := procstat.SocketDrops(string(data), strconv.FormatUint(ino, 10))
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", path, err)
	}
	return n, ok, nil
}
