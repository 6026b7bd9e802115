//go:build relayfault

package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay/client"
)

// The bad builds' faults (fault.go), each switched on in this test binary
// (make test runs it with -tags relayfault).

// setFaultForTest makes the fault mode m until the test ends.
func setFaultForTest(t *testing.T, m string) {
	old := faultOverride.Swap(&m)
	t.Cleanup(func() { faultOverride.Store(old) })
}

func startFaultRelay(t *testing.T, cfg Config) *Relay {
	t.Helper()
	cfg.Listen, cfg.Logger = "127.0.0.1:0", slog.New(slog.DiscardHandler)
	r, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func faultURL(r *Relay) string { return fmt.Sprintf("http://%s/", r.Addr()) }

func probe(t *testing.T, r *Relay, window, interval time.Duration) client.ProbeResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), window+20*time.Second)
	defer cancel()
	res, err := client.ProbeHeartbeat(ctx, client.ProbeOptions{URL: faultURL(r), Window: window, Interval: interval,
		Dial: client.Options{Logger: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatalf("probe %s: %v", faultURL(r), err)
	}
	t.Logf("%v", res)
	return res
}

// TestFaultNoForward: the edge serves (health, sessions, the
// subscription) but forwards nothing: the origin's heartbeat is heard on
// the origin and not through the edge.
func TestFaultNoForward(t *testing.T) {
	setFaultForTest(t, FaultNoForward)
	const beat = 30 * time.Millisecond
	origin := startFaultRelay(t, Config{HeartbeatInterval: beat})
	edge := startFaultRelay(t, Config{Upstreams: []string{faultURL(origin)}})
	if res := probe(t, origin, 500*time.Millisecond, beat); res.Groups == 0 {
		t.Fatal("no heartbeat on the origin itself")
	}
	res := probe(t, edge, time.Second, beat)
	if res.Groups != 0 || res.Lost < 25 {
		t.Errorf("through a noforward edge: %v; want no groups", res)
	}
	resp, err := http.Get(faultURL(edge) + "healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("noforward edge /healthz: %s", resp.Status)
	}
	if st := edge.Stats(); st.UpstreamSubscribes != 0 || st.SessionsTotal == 0 {
		t.Errorf("noforward edge: %d upstream subscribes, %d sessions: want none pulled, the probe admitted", st.UpstreamSubscribes, st.SessionsTotal)
	}
}

// TestFaultDrop5: through an edge (both relays drop5 here, the same
// groups) about 100 heartbeat groups lose 4-6%, every 20th sequence.
func TestFaultDrop5(t *testing.T) {
	setFaultForTest(t, FaultDrop5)
	const beat = 20 * time.Millisecond
	origin := startFaultRelay(t, Config{HeartbeatInterval: beat})
	edge := startFaultRelay(t, Config{Upstreams: []string{faultURL(origin)}})
	res := probe(t, edge, 2*time.Second, beat)
	span := int(res.LastSeq - res.FirstSeq + 1)
	holes := span - res.Groups
	if span < 60 {
		t.Fatalf("%v: too few groups to judge", res)
	}
	if rate := float64(holes) / float64(span); rate < 0.04 || rate > 0.06 || res.Lost < holes {
		t.Errorf("drop5 lost %d of %d groups (%.1f%%), lost reported %d; want 4-6%%", holes, span, 100*rate, res.Lost)
	}
	if res.FirstSeq%20 == 0 || res.LastSeq%20 == 0 {
		t.Errorf("%v: a multiple of 20 got through", res)
	}
}

// TestFaultExit: Run returns an error right after the start, without
// calling ready (systemd's READY comes after it).
func TestFaultExit(t *testing.T) {
	setFaultForTest(t, FaultExit)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ready := false
	err := Run(ctx, Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)}, func(*Relay) { ready = true })
	if !errors.Is(err, errFaultExit) || ready {
		t.Errorf("Run: %v, ready %v; want %v before ready", err, ready, errFaultExit)
	}
	setFaultForTest(t, "nosuchfault")
	if _, err := Start(ctx, Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)}); err == nil {
		t.Error("an unknown fault mode started")
	}
}
