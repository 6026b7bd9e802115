//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/wire"
)

// regionsInventory is a lab fleet of two regions: a (the publishers')
// and b, two origins and one edge box each. Region b's prefix is
// loopback: the router, on 127.0.0.1, sees this machine's listeners
// there.
const regionsInventory = `version: 1
name: rg
access:
  public_listen: [live/]
steady:
  - {name: a-edge, provider: lab, shape: small, count: 1, processes: 1}
  - {name: b-edge, provider: lab, shape: small, count: 1, processes: 1}
regions:
  - name: a
    publish: true
    prefixes: [10.231.200.0/24]
    origins: {provider: lab, shape: small, count: 2}
    steady: [a-edge]
  - name: b
    prefixes: [127.0.0.0/8]
    origins: {provider: lab, shape: small, count: 2}
    steady: [b-edge]
`

// metricSeries is the value of each series of metric on a relay's
// /metrics at base (http://ADDR:PORT/), by its upstream label.
func metricSeries(base, metric string) (map[string]float64, error) {
	resp, err := http.Get(base + "metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	prefix := metric + `{upstream="`
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		up, val, ok := strings.Cut(strings.TrimPrefix(sc.Text(), prefix), `"} `)
		if !ok || !strings.HasPrefix(sc.Text(), prefix) {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return nil, err
		}
		out[up] = v
	}
	return out, sc.Err()
}

// TestE2ERegions: fleet up of a two-region fleet on lab boxes. A
// listener with region b's hint, or with an address in b's prefix, is
// routed to b's edge; one with a's hint to a's. A publisher to a's two
// origins is heard through b's edge, which pulls from b's origins, which
// pull from a's over one link per origin (relay_upstream_connected on
// their /metrics), the bytes counted on relay_upstream_bytes_total; a's
// origins see no session of b's edge.
func TestE2ERegions(t *testing.T) {
	t.Parallel() // its own lab and fleet: see e2eLab
	e := newE2ELab(t, "/var/lib/relayfleet/lab-reg", "rfreg0", "10.231.200.0/24", map[string]string{"fleet": "rg"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	inv := filepath.Join(e.work, "fleet.yaml")
	if err := os.WriteFile(inv, []byte(regionsInventory), 0o644); err != nil {
		t.Fatal(err)
	}
	e.inv = inv
	e.fleet("up")

	// The boxes: per region, two origins and one edge.
	byGroup := map[string][]string{} // group -> relay base URLs
	for _, b := range e.boxes(map[string]string{"fleet": "rg"}) {
		byGroup[b.Labels["group"]] = append(byGroup[b.Labels["group"]], fmt.Sprintf("http://%s:4443/", b.Address))
	}
	aOrigins, bOrigins := byGroup["origin"], byGroup["origin-b"]
	if len(aOrigins) != 2 || len(bOrigins) != 2 || len(byGroup["a-edge"]) != 1 || len(byGroup["b-edge"]) != 1 {
		e.fatalf("boxes by group %v; want origin and origin-b of 2, a-edge and b-edge of 1", byGroup)
	}
	aEdge, bEdge := byGroup["a-edge"][0], byGroup["b-edge"][0]

	// The relays file: the edges with their regions, and the prefixes.
	data, err := os.ReadFile(filepath.Join(e.state, program.RelaysFile))
	if err != nil {
		t.Fatal(err)
	}
	var rf wire.RelaysFile
	if err := json.Unmarshal(data, &rf); err != nil {
		t.Fatal(err)
	}
	regionOf := map[string]string{}
	for _, r := range rf.Relays {
		regionOf[r.URL] = r.Region
	}
	if len(rf.Relays) != 2 || regionOf[aEdge] != "a" || regionOf[bEdge] != "b" || len(rf.Regions) != 2 {
		e.fatalf("relays file %s; want a-edge in a, b-edge in b, and both regions", data)
	}

	// The router: by hint, and by address (this machine is 127.0.0.1,
	// in b's prefix).
	port := e.startRouter(ctx)
	routerURL := fmt.Sprintf("http://127.0.0.1:%d/", port)
	route := func(region string) wire.Route {
		t.Helper()
		q := url.Values{"broadcast": {"live/show"}}
		if region != "" {
			q.Set("region", region)
		}
		var rt wire.Route
		if !testutil.PollEvery(30*time.Second, 200*time.Millisecond, func() bool {
			resp, err := http.Get(routerURL + "route?" + q.Encode())
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			rt = wire.Route{}
			return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&rt) == nil && regionOf[rt.URL] == region
		}) {
			e.fatalf("route with region %q: %+v; want that region's edge", region, rt)
		}
		return rt
	}
	if rt := route("b"); rt.URL != bEdge || rt.RegionFallback {
		e.fatalf("region=b: %+v, want %s", rt, bEdge)
	}
	if rt := route("a"); rt.URL != aEdge {
		e.fatalf("region=a: %+v, want %s", rt, aEdge)
	}
	resp, err := http.Get(routerURL + "route?broadcast=live/show")
	if err != nil {
		t.Fatal(err)
	}
	var byAddr wire.Route
	json.NewDecoder(resp.Body).Decode(&byAddr)
	resp.Body.Close()
	if byAddr.URL != bEdge || byAddr.Region != "b" {
		e.fatalf("no hint from 127.0.0.1: %+v, want b's edge %s (127.0.0.0/8 is b's)", byAddr, bEdge)
	}

	// Publish to a's origins; listen through the router from here.
	tokOut, err := e.cmd(ctx, "token", "--inventory", inv, "--publish", "live/", "--state-dir", e.state, "--pulumi", e.cli).Output()
	if err != nil {
		t.Fatalf("fleet token: %v", err)
	}
	tokFile := filepath.Join(e.work, "publish.jwt")
	if err := os.WriteFile(tokFile, tokOut, 0o600); err != nil {
		t.Fatal(err)
	}
	pub := exec.CommandContext(ctx, e.relayBin, append([]string{"publish", "--name", "live/show", "--paced", "--trust-http-hash", "--token-file", tokFile}, aOrigins...)...)
	pub.Stdout = io.Discard
	testutil.Start(t, "publish", pub)
	// One listener, with region b's hint, stays to the end (the b edge
	// pulls while it has one, and the long-haul bytes move meanwhile);
	// one, by its address, hears 40 groups.
	stay := exec.CommandContext(ctx, e.relayBin, "listen", "--router", routerURL, "--region", "b", "--name", "live/show")
	stay.Stdout = io.Discard
	testutil.Start(t, "listen-stay", stay)
	listen := testutil.Start(t, "listen", exec.CommandContext(ctx, e.relayBin, "listen", "--router", routerURL, "--name", "live/show", "--groups", "40"))
	select {
	case <-listen.Done():
		if err := listen.Wait(); err != nil {
			e.fatalf("relay listen through the router (region b): %v\n%s", err, listen.Tail(20))
		}
	case <-time.After(3 * time.Minute):
		e.fatalf("relay listen heard no 40 groups in 3 minutes:\n%s", listen.Tail(20))
	}
	t.Logf("listener through the router:\n%s", listen.Tail(5))

	// b's origins: one link up to each of a's origins; the long-haul
	// bytes move on the one the b edge pulls from.
	pinned := func(u string) string { // a's origin's URL as the b origins' --upstream has it
		for _, o := range aOrigins {
			if strings.HasPrefix(u, o) {
				return o
			}
		}
		return ""
	}
	total := func(base string) float64 {
		m, err := metricSeries(base, "relay_upstream_bytes_total")
		if err != nil {
			e.fatalf("metrics of %s: %v", base, err)
		}
		n := 0.0
		for u, v := range m {
			if pinned(u) == "" {
				e.fatalf("%s pulls from %s, none of a's origins %v", base, u, aOrigins)
			}
			n += v
		}
		return n
	}
	for _, b := range bOrigins {
		conn, err := metricSeries(b, "relay_upstream_connected")
		if err != nil {
			t.Fatal(err)
		}
		up := 0
		for u, v := range conn {
			if pinned(u) != "" && v == 1 {
				up++
			}
		}
		if up != 2 || len(conn) != 2 {
			e.fatalf("b origin %s: relay_upstream_connected %v; want one link up to each of a's 2 origins", b, conn)
		}
	}
	first := total(bOrigins[0]) + total(bOrigins[1])
	if !testutil.PollEvery(30*time.Second, 500*time.Millisecond, func() bool { return total(bOrigins[0])+total(bOrigins[1]) > first+1000 }) {
		e.fatalf("b's origins' relay_upstream_bytes_total stayed near %v", first)
	}
	t.Logf("b's origins pulled %v bytes from a's (then %v)", first, total(bOrigins[0])+total(bOrigins[1]))
	// a's origins: the publisher, a's edge and the two b origins' links, nothing
	// of b's edge.
	for _, a := range aOrigins {
		resp, err := http.Get(a + "stats")
		if err != nil {
			t.Fatal(err)
		}
		var st wire.Stats
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		t.Logf("a origin %s: %d sessions, %d subscriptions", a, st.Sessions, st.Subscribers)
		if st.Sessions != 4 || st.Subscribers > 2 {
			e.fatalf("a origin %s: %d sessions, %d subscriptions; want 4 (the publisher, a's edge, one link per b origin; none of b's edge) and at most 2 (a's edge, one b origin)", a, st.Sessions, st.Subscribers)
		}
	}
}
