package relay

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
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
// returns its drops column (the last one).
func dropsIn(path string, ino uint64) (int64, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false, err
	}
	defer f.Close()
	want := strconv.FormatUint(ino, 10)
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
		if len(fs) < 13 || fs[9] != want {
			continue
		}
		n, err := strconv.ParseInt(fs[len(fs)-1], 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s: drops column %q: %w", path, fs[len(fs)-1], err)
		}
		return n, true, nil
	}
	return 0, false, sc.Err()
}
