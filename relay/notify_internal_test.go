package relay

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// FakeNotifySocket is systemd's side of sd_notify for a test:
// NOTIFY_SOCKET names a datagram socket that the test reads, and the
// watchdog is 100 ms (a ping every 50 ms). Package relay_test uses it too.
func FakeNotifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "100000")
	t.Setenv("WATCHDOG_PID", "")
	return conn
}

// TestWatchdogStopsWhenCoreWedged: the watchdog pings only while the
// relay's core answers. With the core's lock held (a wedged core) no
// WATCHDOG=1 goes out for 20 intervals, so systemd's WatchdogSec restarts
// the process; once the lock is free the pings come back. A stopped
// process (SIGSTOP) sends nothing at all, the same to systemd.
func TestWatchdogStopsWhenCoreWedged(t *testing.T) {
	conn := FakeNotifySocket(t)
	r, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := notifySystemd(ctx, r, r.logger)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()

	buf := make([]byte, 256)
	read := func(wait time.Duration) (string, bool) {
		_ = conn.SetReadDeadline(time.Now().Add(wait))
		n, err := conn.Read(buf)
		if err != nil {
			return "", false
		}
		return string(buf[:n]), true
	}
	if m, ok := read(10 * time.Second); m != "READY=1" {
		t.Fatalf("first message %q (%v), want READY=1", m, ok)
	}
	if m, ok := read(10 * time.Second); m != "WATCHDOG=1" {
		t.Fatalf("second message %q (%v), want WATCHDOG=1", m, ok)
	}

	r.srv.mu.Lock() // the core wedges
	// The core stays wedged a while: what it sent before lands, then
	// nothing more may.
	time.Sleep(200 * time.Millisecond)
	for { // what was sent before it did
		if _, ok := read(10 * time.Millisecond); !ok {
			break
		}
	}
	m, ok := read(time.Second)
	r.srv.mu.Unlock()
	if ok {
		t.Fatalf("%q sent while the core was wedged", m)
	}
	if m, ok := read(10 * time.Second); m != "WATCHDOG=1" {
		t.Fatalf("after the wedge: %q (%v), want WATCHDOG=1", m, ok)
	}
	stopped = true
	stop()
	for {
		m, ok := read(10 * time.Second)
		if !ok {
			t.Fatal("no STOPPING=1")
		}
		if m == "STOPPING=1" {
			break
		}
	}
}
