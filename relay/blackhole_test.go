package relay_test

import (
	"context"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay"
)

// swallower is a UDP socket that reads every packet and never answers: a
// blackholed origin. It returns its address and how many packets it got.
func swallower(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var n atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := c.ReadFrom(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	return c.LocalAddr().String(), &n
}

// TestBlackholedUpstreamKeepsStatsAndWatchdog: an edge whose origin
// swallows packets keeps dialling it (5 s per try), and meanwhile answers
// /stats within 500 ms and keeps pinging the systemd watchdog. (Before,
// the dial held the link's lock that /stats and the watchdog take, so a
// blackholed origin got every edge killed by its watchdog and the router
// saw the fleet down.)
func TestBlackholedUpstreamKeepsStatsAndWatchdog(t *testing.T) {
	origin, packets := swallower(t)
	sock := filepath.Join(t.TempDir(), "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "1000000") // pings every 500 ms
	t.Setenv("WATCHDOG_PID", "")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan *relay.Relay, 1)
	done := make(chan error, 1)
	cfg := relay.Config{Listen: "127.0.0.1:0", Logger: quietLogger(), MemoryBudget: -1,
		Upstreams: []string{"https://" + origin + "/"}}
	go func() { done <- relay.Run(ctx, cfg, func(r *relay.Relay) { ready <- r }) }()
	r := <-ready
	defer func() {
		cancel()
		<-done
	}()

	// Watchdog pings, timed as they arrive.
	var lastPing atomic.Int64
	var maxGap atomic.Int64
	lastPing.Store(time.Now().UnixNano())
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := notify.Read(buf)
			if err != nil {
				return
			}
			if string(buf[:n]) == "WATCHDOG=1" {
				now := time.Now().UnixNano()
				maxGap.Store(max(maxGap.Load(), now-lastPing.Swap(now)))
			}
		}
	}()

	// Listeners ask for broadcasts nobody publishes here: more dials.
	for _, name := range []string{"a", "b", "c"} {
		l := dial(t, ctx, relayURL(r, ""), nil)
		go func() { _, _ = l.Subscribe(ctx, name, "audio") }()
	}
	testutil.WaitFor(t, 10*time.Second, "the edge to dial the blackholed origin", func() bool { return packets.Load() > 0 })

	statsURL := "http://" + r.Addr().String() + "/stats"
	end := time.Now().Add(6 * time.Second) // longer than one dial
	var slowest time.Duration
	for time.Now().Before(end) {
		start := time.Now()
		resp, err := httpGetWithin(ctx, statsURL, 10*time.Second)
		took := time.Since(start)
		if err != nil {
			t.Fatalf("/stats: %v", err)
		}
		if !strings.Contains(resp, `"upstream_connected": false`) {
			t.Fatalf("/stats %s: want upstream_connected false", resp)
		}
		slowest = max(slowest, took)
		time.Sleep(100 * time.Millisecond)
	}
	gap := time.Duration(maxGap.Load())
	if since := time.Since(time.Unix(0, lastPing.Load())); since > gap {
		gap = since
	}
	t.Logf("slowest /stats %v, longest watchdog gap %v, %d packets swallowed", slowest, gap, packets.Load())
	if slowest > 500*time.Millisecond {
		t.Errorf("/stats took %v while the upstream dial was in flight; want under 500 ms", slowest)
	}
	if gap > 2*time.Second {
		t.Errorf("watchdog silent for %v (interval 1 s) while the upstream dial was in flight", gap)
	}
}

// httpGetWithin fetches url within limit and returns the body.
func httpGetWithin(ctx context.Context, url string, limit time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
