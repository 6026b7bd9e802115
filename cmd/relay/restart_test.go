package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// startServeOn runs `bin serve --listen addr args...` and waits for its
// /healthz.
func startServeOn(t *testing.T, bin, addr string, args ...string) *testutil.Proc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", addr, "--udp-buffer", "1MiB"}, args...)...)
	logs := &testutil.SyncBuffer{}
	cmd.Stderr = logs
	p := testutil.Start(t, "relay", cmd)
	waitHealthy(t, addr, logs)
	return p
}

// waitHealthy waits up to 20 s for the relay on addr to answer /healthz,
// failing the test with its log otherwise.
func waitHealthy(t *testing.T, addr string, logs *testutil.SyncBuffer) {
	t.Helper()
	if !testutil.Poll(20*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("relay did not start: %s", logs.String())
	}
}

// dialSession opens a raw QUIC moq-lite session to addr.
func dialSession(t *testing.T, ctx context.Context, addr string) *quic.Conn {
	t.Helper()
	conn, err := quic.DialAddr(ctx, addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{moqlite.ALPN}},
		&quic.Config{MaxIdleTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.CloseWithError(0, "") })
	s, err := client.NewSession(ctx, transport.NewQUIC(conn), "/", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	var st map[string]any
	if !testutil.Poll(10*time.Second, func() bool {
		st, err = relayStats(addr)
		return err == nil && st["sessions"] == 1.0
	}) {
		t.Fatalf("the session did not register: %v %v", st, err)
	}
	return conn
}

// TestRestartedProcessResetsAndSIGTERMSheds runs the binary: relay A,
// started with --stateless-reset-secret, is killed with SIGKILL under a
// connected client; relay B starts on the port with the same secret, and
// the client's next packet draws a stateless reset (within seconds; the
// idle timeout is 30 s). Then B gets SIGTERM: a client connected to it
// is closed with going-away (0x10) and B exits 0.
func TestRestartedProcessResetsAndSIGTERMSheds(t *testing.T) {
	testutil.Short(t, "make test-long (builds and runs the binary)")
	bin := buildRelay(t)
	secret := filepath.Join(t.TempDir(), "reset-secret")
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	if err := os.WriteFile(secret, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	addr := "127.0.0.1:" + testutil.FreePort(t)

	a := startServeOn(t, bin, addr, "--stateless-reset-secret", secret)
	conn := dialSession(t, ctx, addr)
	if err := a.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.Wait()
	bproc := startServeOn(t, bin, addr, "--stateless-reset-secret", secret)
	// The client may already have sent a packet (an ACK, a PING) to B while
	// B came up; then the reset has arrived before our poke and OpenStream
	// fails with it, which is the same outcome.
	poked := time.Now()
	if st, err := conn.OpenStream(); err == nil {
		_, _ = st.Write(make([]byte, 100))
	}
	select {
	case <-conn.Context().Done():
		var sr *quic.StatelessResetError
		if err := context.Cause(conn.Context()); !errors.As(err, &sr) {
			t.Fatalf("the connection ended with %v, want a stateless reset", err)
		}
		t.Logf("stateless reset %v after the write to the restarted port", time.Since(poked).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("no stateless reset within 10 s")
	}

	conn2 := dialSession(t, ctx, addr)
	term := time.Now()
	if err := bproc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-conn2.Context().Done():
		var ae *quic.ApplicationError
		if err := context.Cause(conn2.Context()); !errors.As(err, &ae) || !ae.Remote || uint64(ae.ErrorCode) != moqlite.CodeGoingAway {
			t.Fatalf("on SIGTERM the session ended with %v, want going-away (0x10)", err)
		}
		t.Logf("going-away %v after SIGTERM", time.Since(term).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("no going-away within 10 s of SIGTERM")
	}
	select {
	case <-bproc.Done():
		if err := bproc.Wait(); err != nil {
			t.Fatalf("relay B after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("relay B did not exit within 15 s of SIGTERM")
	}
}
