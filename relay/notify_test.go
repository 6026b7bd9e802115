package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay"
)

// TestRunNotifiesSystemd runs the relay with a fake NOTIFY_SOCKET and checks
// the READY, WATCHDOG and STOPPING messages.
func TestRunNotifiesSystemd(t *testing.T) {
	conn := relay.FakeNotifySocket(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx, relay.Config{Listen: "127.0.0.1:0", Logger: quietLogger()}, nil) }()

	var got []string
	buf := make([]byte, 256)
	read := func() string {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("read notify socket after %q: %v", got, err)
		}
		got = append(got, string(buf[:n]))
		return string(buf[:n])
	}
	if m := read(); m != "READY=1" {
		t.Fatalf("first message %q, want READY=1", m)
	}
	if m := read(); m != "WATCHDOG=1" {
		t.Fatalf("second message %q, want WATCHDOG=1", m)
	}
	cancel()
	for {
		if m := read(); m == "STOPPING=1" {
			break
		} else if m != "WATCHDOG=1" {
			t.Fatalf("unexpected message %q (%s)", m, strings.Join(got, ", "))
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
