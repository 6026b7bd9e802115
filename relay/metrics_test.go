package relay_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/relay"
)

// TestMetricsTakesOneSnapshot: a /metrics scrape reads the relay's state
// (sysctls, /proc/self/net/udp) once, not once per metric; a second scrape
// within the second reuses that snapshot. (It took about 32 per scrape.)
func TestMetricsTakesOneSnapshot(t *testing.T) {
	r := startRelay(t, relay.Config{MemoryBudget: -1})
	scrape := func() string {
		t.Helper()
		resp, err := http.Get("http://" + r.Addr().String() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /metrics: %s %v", resp.Status, err)
		}
		return string(b)
	}
	before := r.StatsSnapshotsForTest()
	m := scrape()
	if n := r.StatsSnapshotsForTest() - before; n != 1 {
		t.Errorf("one scrape took %d Stats snapshots, want 1", n)
	}
	for _, want := range []string{"relay_sessions ", "relay_udp_receive_drops_total ", `relay_sysctl{key=`, `relay_transport_sessions{transport="quic"}`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	before = r.StatsSnapshotsForTest()
	scrape()
	if n := r.StatsSnapshotsForTest() - before; n > 1 {
		t.Errorf("a second scrape took %d snapshots, want at most 1", n)
	}
}
