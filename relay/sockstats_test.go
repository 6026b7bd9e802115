package relay_test

import (
	"encoding/json"
	"fmt"
	"net"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay"
)

// getText fetches a relay endpoint over its TCP port.
func getText(t *testing.T, r *relay.Relay, path string) string {
	t.Helper()
	return string(testutil.Get(t, fmt.Sprintf("http://%s%s", r.Addr(), path)))
}

// seriesValue is a sample's value in a /metrics text; -1 when absent.
func seriesValue(t *testing.T, text, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}

func statsOf(t *testing.T, r *relay.Relay) relay.Stats {
	t.Helper()
	var st relay.Stats
	if err := json.Unmarshal([]byte(getText(t, r, "/stats")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestUDPDropsAtATinyBuffer: a relay given a tiny receive buffer and
// blasted with datagrams faster than it reads them counts the drops of its
// own socket in /stats and /metrics; a relay with the normal buffer that
// serves a session shows none.
func TestUDPDropsAtATinyBuffer(t *testing.T) {
	if runtime.GOOS != "linux" {
		testutil.Skipf(t, "reads /proc/self/net/udp, Linux only")
	}
	normal := startRelay(t, relay.Config{})
	tiny := startRelay(t, relay.Config{UDPBuffer: 4096})

	ctx := testContext(t)
	sess := dial(t, ctx, relayURL(normal, "room"), nil)
	_ = sess
	// The relay answers SETUP before it counts the session: wait for it.
	testutil.WaitFor(t, 10*time.Second, "the session counted", func() bool { return normal.Stats().Sessions == 1 })
	st := statsOf(t, normal)
	if st.UDPDrops != 0 {
		t.Fatalf("normal relay: udp_drops_total = %d, want 0", st.UDPDrops)
	}
	if n := st.SessionsByTransport["quic"] + st.SessionsByTransport["webtransport"]; n != 1 || st.Sessions != 1 {
		t.Fatalf("normal relay: sessions_by_transport = %v (sessions %d), want one QUIC or WebTransport session", st.SessionsByTransport, st.Sessions)
	}

	blaster, err := net.DialUDP("udp", nil, tiny.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer blaster.Close()
	junk := make([]byte, 1200) // not QUIC: quic-go reads and discards it
	deadline := time.Now().Add(30 * time.Second)
	for statsOf(t, tiny).UDPDrops == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no drops counted after 30 s of blasting a 4 KiB receive buffer")
		}
		for range 20000 {
			_, _ = blaster.Write(junk)
		}
	}
	st = statsOf(t, tiny)
	m := getText(t, tiny, "/metrics")
	if v := seriesValue(t, m, "relay_udp_receive_drops_total"); v < 1 {
		t.Fatalf("tiny relay: relay_udp_receive_drops_total = %v, want > 0 (stats say %d)", v, st.UDPDrops)
	}
	t.Logf("tiny buffer: %d datagrams dropped (receive buffer %d)", st.UDPDrops, st.UDPReceiveBuffer)

	st = statsOf(t, normal)
	m = getText(t, normal, "/metrics")
	if st.UDPDrops != 0 || seriesValue(t, m, "relay_udp_receive_drops_total") != 0 {
		t.Fatalf("normal relay after the blast elsewhere: drops %d, metrics %v; want 0", st.UDPDrops, seriesValue(t, m, "relay_udp_receive_drops_total"))
	}
	for _, series := range []string{
		`relay_udp_send_errors_total{kind="enobufs"}`, `relay_udp_send_errors_total{kind="eagain"}`,
		`relay_transport_sessions{transport="websocket"}`, `relay_certificate_expiry_timestamp_seconds`,
		`relay_udp_receive_buffer_bytes`, `relay_sessions_refused_total{reason="overloaded"}`,
	} {
		if seriesValue(t, m, series) < 0 {
			t.Errorf("metrics lack %s", series)
		}
	}
	if v := seriesValue(t, m, `relay_transport_sessions{transport="quic"}`) + seriesValue(t, m, `relay_transport_sessions{transport="webtransport"}`); v != 1 {
		t.Errorf("relay_transport_sessions quic+webtransport = %v, want 1", v)
	}
	if v := seriesValue(t, m, `relay_sysctl{key="net.core.rmem_max"}`); v <= 0 {
		t.Errorf(`relay_sysctl{key="net.core.rmem_max"} = %v, want the kernel's value`, v)
	}
}
