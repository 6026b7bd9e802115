package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// TestServePublishListen runs the real binary: serve, then publish and
// listen through it over loopback.
func TestServePublishListen(t *testing.T) {
	testutil.Short(t, "make test-long (builds and runs the binary)")
	bin := filepath.Join(t.TempDir(), "relay")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	port := testutil.FreePort(t)
	addr := "127.0.0.1:" + port
	serve := exec.CommandContext(ctx, bin, "serve", "--listen", addr, "--udp-buffer", "1MiB")
	serveErr := &testutil.SyncBuffer{}
	serve.Stderr = serveErr
	testutil.Start(t, "relay", serve)
	if !testutil.Poll(10*time.Second, func() bool { return strings.Contains(serveErr.String(), "relay listening") }) {
		t.Fatalf("relay did not start: %s", serveErr.String())
	}
	url := "http://" + addr + "/test"
	listen := exec.CommandContext(ctx, bin, "listen", url, "--name", "b", "--groups", "10", "--check", "64")
	var listenOut bytes.Buffer
	listen.Stdout = &listenOut
	listen.Stderr = &listenOut
	listener := testutil.Start(t, "listen", listen)
	testutil.Start(t, "publish", exec.CommandContext(ctx, bin, "publish", url, "--name", "b", "--size", "64", "--interval", "20ms", "--frames", "2"))
	if err := listener.Wait(); err != nil {
		t.Fatalf("listen: %v\n%s", err, listenOut.String())
	}
	if !strings.Contains(listenOut.String(), "received 10 groups, 20 frames") {
		t.Fatalf("listen output %q", listenOut.String())
	}
}

// TestVersionStamped builds the binary as make build does, with the
// version stamped at link time, and asks it for its version both ways;
// then SIGTERM and SIGINT end its long-running commands promptly.
func TestVersionStamped(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "relay")
	const stamp = "v9.9.9-test-stamp"
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-X github.com/relayfleet/relayfleet/internal/version.stamp="+stamp, "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil || string(out) != "relay "+stamp+"\n" {
			t.Errorf("relay %s: %v, %q; want %q", args[0], err, out, "relay "+stamp+"\n")
		}
	}
	dir := t.TempDir()
	relays := filepath.Join(dir, "relays.json")
	if err := os.WriteFile(relays, []byte(`{"relays":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sig  os.Signal
		args []string
		up   string // in the output once it runs (and handles signals)
	}{
		{syscall.SIGTERM, []string{"router", "--listen", "127.0.0.1:0", "--relays", relays}, "router listening"},
		{os.Interrupt, []string{"serve", "--listen", "127.0.0.1:0", "--udp-buffer", "1MiB", "--shutdown-grace", "1s"}, "relay listening"},
	} {
		cmd := exec.Command(bin, tc.args...)
		out := &testutil.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		done := testutil.Start(t, tc.args[0], cmd).Done()
		if !testutil.Poll(30*time.Second, func() bool { return strings.Contains(out.String(), tc.up) }) {
			_ = cmd.Process.Kill()
			t.Fatalf("relay %s did not start: %s", tc.args[0], out.String())
		}
		_ = cmd.Process.Signal(tc.sig)
		select {
		case <-done:
			if cmd.ProcessState.ExitCode() == -1 {
				t.Errorf("relay %s: killed by %v instead of ending: %s", tc.args[0], tc.sig, out.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("relay %s: still running 30s after %v: %s", tc.args[0], tc.sig, out.String())
		}
	}
}
