package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/moqlite"
	"github.com/relayfleet/relayfleet/relay/transport"
)

// buildRelay builds cmd/relay into a temporary directory.
func buildRelay(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "relay")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// startRelayProcess runs `bin serve` with args on a free loopback port
// and returns the process and its address.
func startRelayProcess(t *testing.T, ctx context.Context, bin string, args ...string) (*testutil.Proc, string) {
	t.Helper()
	addr := "127.0.0.1:" + testutil.FreePort(t)
	serve := exec.CommandContext(ctx, bin, append([]string{"serve", "--listen", addr, "--udp-buffer", "1MiB"}, args...)...)
	serveErr := &testutil.SyncBuffer{}
	serve.Stderr = serveErr
	p := testutil.Start(t, "relay", serve)
	waitHealthy(t, addr, serveErr)
	return p, addr
}

// vmRSS is the resident set of process pid in bytes (/proc/PID/status).
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

func relayStats(addr string) (map[string]any, error) {
	resp, err := http.Get("http://" + addr + "/stats")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st map[string]any
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// TestFrameHeaderFloodOverWebSocket runs the relay as its own process and
// floods it over WebSocket the way the 4 GiB attack goes: a publisher that
// a listener subscribed to opens 4,096 group streams, each with a group
// header and a frame header declaring ~1 MiB, and then stalls ("header");
// or sends the first 16 KiB of each frame before stalling ("header+16KiB"),
// which the relay must answer by closing the session once it holds its
// buffer budget. The relay's resident memory must stay within 64 MiB of its
// idle figure, and its Go runtime's within 256 MiB (before the fix every
// header allocated its megabyte at once: 4 GiB mapped, and resident as
// soon as bytes arrive). Prints idle, peak and delta.
func TestFrameHeaderFloodOverWebSocket(t *testing.T) {
	testutil.Short(t, "make test-hostile (builds and runs the binary)")
	bin := buildRelay(t)
	t.Run("header", func(t *testing.T) { frameHeaderFlood(t, bin, 0) })
	t.Run("header+16KiB", func(t *testing.T) { frameHeaderFlood(t, bin, 16<<10) })
}

func frameHeaderFlood(t *testing.T, bin string, payload int) {
	const streams = 4096
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	serve, addr := startRelayProcess(t, ctx, bin, "--log-level", "error")
	pid := serve.Cmd.Process.Pid
	time.Sleep(500 * time.Millisecond) // settle: the idle figure is taken once start-up's allocations are done
	idle := vmRSS(t, pid)

	// The attacker publishes "flood"; a listener subscribes, so the relay
	// subscribes to the attacker's track with id 0 and reads its groups.
	wt, err := transport.DialWebSocket(ctx, "ws://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := client.NewSession(ctx, wt, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	tw := pub.Publish("flood").Track("audio")
	lis, err := client.Dial(ctx, "http://"+addr+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	ann, err := lis.Announced(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := ann.WaitFor(ctx, "flood"); err != nil {
		t.Fatal(err)
	}
	sub, err := lis.Subscribe(ctx, "flood", "audio")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := tw.WaitSubscribers(ctx, 1); err != nil {
		t.Fatal(err)
	}

	header := moqlite.AppendVarint(nil, moqlite.MaxFrameSize-1)
	header = append(header, make([]byte, payload)...)
	peak := idle
	var open []transport.SendStream
	closed := false
flood:
	for i := range streams {
		st, err := wt.OpenUniStream(ctx)
		if err == nil {
			b := moqlite.AppendGroupStart(nil, moqlite.GroupHeader{Subscribe: 0, Sequence: uint64(i)})
			_, err = st.Write(append(b, header...))
		}
		if err != nil {
			if payload == 0 {
				t.Fatalf("stream %d: %v", i, err)
			}
			closed = true // the relay closed the session over its budget
			break
		}
		open = append(open, st)
		if i%32 != 31 {
			continue
		}
		// Stay within the WebSocket accept backlog (64): wait for the
		// relay to take up the streams sent so far.
		for {
			peak = max(peak, vmRSS(t, pid))
			st, err := relayStats(addr)
			if err != nil {
				t.Fatal(err)
			}
			if g, _ := st["groups_in"].(float64); int(g) > i-32 {
				break
			}
			select {
			case <-wt.Done():
				closed = true
				break flood
			case <-time.After(time.Millisecond):
			}
		}
	}
	// Let any allocation land, sampling as it does.
	for range 20 {
		peak = max(peak, vmRSS(t, pid))
		time.Sleep(100 * time.Millisecond)
	}
	st, err := relayStats(addr)
	if err != nil {
		t.Fatal(err)
	}
	delta := peak - idle
	used := st["memory_used"].(float64)
	fmt.Printf("flood over WebSocket, %d streams sent, each a frame header declaring %d bytes and %d payload bytes: relay RSS idle %.1f MiB, peak %.1f MiB, delta %.1f MiB; Go memory_used %.1f MiB; session closed by the relay: %v\n",
		len(open), moqlite.MaxFrameSize-1, payload, mib(idle), mib(peak), mib(delta), used/(1<<20), closed)
	if delta > 64<<20 {
		t.Errorf("relay RSS grew by %.1f MiB under the flood; want under 64 MiB", mib(delta))
	}
	if used > 256<<20 {
		t.Errorf("relay's Go runtime holds %.1f MiB under the flood", used/(1<<20))
	}
	if payload > 0 {
		if n, _ := st["sessions_overloaded_total"].(float64); !closed || n < 1 {
			t.Errorf("session closed %v, sessions_overloaded_total %v: want the relay to close the flooding session", closed, n)
		}
	} else if g, _ := st["groups_in"].(float64); g < streams {
		t.Errorf("relay read %v group headers of %d", g, streams)
	}
	for _, s := range open {
		s.CancelWrite(0)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
