package relay

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSendErrorsByKind: a write the kernel refuses is counted under its
// kind; a closed socket is not an error worth counting.
func TestSendErrorsByKind(t *testing.T) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var errs sendErrors
	c := &countingConn{UDPConn: udp, errs: &errs}
	// Port 0 is no destination: the kernel refuses the write (EINVAL).
	if _, err := c.WriteTo([]byte("x"), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 0}); err == nil {
		t.Fatal("write to port 0 succeeded")
	}
	if _, _, err := c.WriteMsgUDP([]byte("x"), nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 0}); err == nil {
		t.Fatal("write to port 0 succeeded")
	}
	if got := errs.byKind(); got[SendErrOther] != 2 || got[SendErrENOBUFS] != 0 || got[SendErrEAGAIN] != 0 {
		t.Fatalf("after two refused writes: %v, want other=2", got)
	}
	udp.Close()
	_, _ = c.WriteTo([]byte("x"), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9})
	if got := errs.byKind(); got[SendErrOther] != 2 {
		t.Fatalf("a write on a closed socket was counted: %v", got)
	}
	for err, want := range map[error]string{
		&net.OpError{Op: "write", Err: os.NewSyscallError("sendmsg", syscall.ENOBUFS)}: SendErrENOBUFS,
		&net.OpError{Op: "write", Err: os.NewSyscallError("sendmsg", syscall.EAGAIN)}:  SendErrEAGAIN,
		fmt.Errorf("x: %w", syscall.ECONNREFUSED):                                      SendErrOther,
	} {
		if got := SendErrorKinds[sendErrorIndex(err)]; got != want {
			t.Errorf("%v: kind %s, want %s", err, got, want)
		}
	}
}

func TestDropsColumnByInode(t *testing.T) {
	f := filepath.Join(t.TempDir(), "udp6")
	const text = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  118: 00000000000000000000000000000000:0BB8 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000   998        0 4242 2 0000000000000000 17
  119: 00000000000000000000000000000000:0BB9 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000   998        0 4243 2 0000000000000000 0
`
	if err := os.WriteFile(f, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	for ino, want := range map[uint64]int64{4242: 17, 4243: 0} {
		n, ok, err := dropsIn(f, ino)
		if err != nil || !ok || n != want {
			t.Errorf("inode %d: %d %v %v, want %d", ino, n, ok, err, want)
		}
	}
	if _, ok, err := dropsIn(f, 17); ok || err != nil {
		t.Errorf("inode 17 found (%v)", err)
	}
}

func TestReadSysctls(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "net/core"), 0o700); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(root, "net/core/rmem_max"), []byte("16777216\n"), 0o600)
	_ = os.WriteFile(filepath.Join(root, "net/core/wmem_max"), []byte("junk\n"), 0o600)
	got := readSysctls(root)
	if len(got) != 1 || got["net.core.rmem_max"] != 16777216 {
		t.Fatalf("readSysctls = %v, want only net.core.rmem_max=16777216", got)
	}
}
