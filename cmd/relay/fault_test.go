package main

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

// faultFlag is the -X that picks a bad build's fault (relay/fault.go).
const faultFlag = "-X github.com/relayfleet/relayfleet/relay.faultMode="

// TestFaultBuilds links relay binaries as make build-faults does: with
// the relayfault tag and -X faultMode=exit, serve exits 1 right after the
// start and never tells systemd READY; a release build given the same -X
// serves as ever (its fault mode is a constant) and sends READY; relay
// probe hears that release build as an origin, and nothing through a
// noforward build as its edge (exit 1).
func TestFaultBuilds(t *testing.T) {
	testutil.Short(t, "make test-long (builds two relay binaries)")
	dir := t.TempDir()
	build := func(name string, args ...string) string {
		bin := filepath.Join(dir, name)
		cmd := exec.Command("go", append(append([]string{"build", "-trimpath"}, args...), "-o", bin, ".")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
		return bin
	}
	faulty := build("relay-exit", "-tags", "relayfault", "-ldflags", faultFlag+"exit")
	release := build("relay-release", "-ldflags", faultFlag+"exit")
	noforward := build("relay-noforward", "-tags", "relayfault", "-ldflags", faultFlag+"noforward")

	// serve runs each with NOTIFY_SOCKET set, and reports whether READY
	// came, and the exit status (-1: still running after 3 s, then
	// stopped).
	serve := func(bin string) (ready bool, code int, log string) {
		sock := filepath.Join(t.TempDir(), "notify")
		conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "serve", "--listen", "127.0.0.1:0", "--udp-buffer", "1MiB", "--shutdown-grace", "0s")
		cmd.Env = append(cmd.Environ(), "NOTIFY_SOCKET="+sock)
		out := &testutil.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		p := testutil.Start(t, filepath.Base(bin), cmd)
		msgs := make(chan string, 8)
		go func() {
			buf := make([]byte, 512)
			for {
				n, err := conn.Read(buf)
				if err != nil {
					close(msgs)
					return
				}
				msgs <- string(buf[:n])
			}
		}()
		code = -1
		select {
		case <-p.Done():
			code = cmd.ProcessState.ExitCode()
		case <-time.After(3 * time.Second):
			_ = p.Stop()
		}
		_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		for m := range msgs {
			ready = ready || strings.Contains(m, "READY=1")
		}
		return ready, code, out.String()
	}
	if ready, code, log := serve(faulty); code != 1 || ready || !strings.Contains(log, "fault build exit") {
		t.Errorf("fault build exit: exit %d, READY %v; want exit 1 before READY:\n%s", code, ready, log)
	}
	if ready, code, log := serve(release); code != -1 || !ready || strings.Contains(log, "FAULT") {
		t.Errorf("release build with -X faultMode=exit: exit %d, READY %v; want it serving, READY sent:\n%s", code, ready, log)
	}

	// relay probe hears the release origin, and nothing through a
	// noforward edge pulling from it.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := func(bin string, args ...string) string {
		addr := "127.0.0.1:" + testutil.FreePort(t)
		cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--listen", addr, "--udp-buffer", "1MiB", "--shutdown-grace", "0s"}, args...)...)
		out := &testutil.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		testutil.Start(t, filepath.Base(bin), cmd)
		if !testutil.Poll(20*time.Second, func() bool { return strings.Contains(out.String(), "relay listening") }) {
			t.Fatalf("%s did not start: %s", bin, out.String())
		}
		return "http://" + addr + "/"
	}
	origin := start(release, "--heartbeat-interval", "50ms")
	edge := start(noforward, "--upstream", origin)
	var out, errb strings.Builder
	if code := run(ctx, []string{"probe", origin, "--window", "500ms"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "groups in 500ms") {
		t.Errorf("probe of the origin: exit %d: %s%s", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run(ctx, []string{"probe", edge, "--window", "500ms"}, &out, &errb); code != 1 || !strings.Contains(out.String(), ": 0 groups") ||
		!strings.Contains(errb.String(), "no heartbeat group received") {
		t.Errorf("probe through the noforward edge: exit %d, want 1: %s%s", code, out.String(), errb.String())
	}
}
