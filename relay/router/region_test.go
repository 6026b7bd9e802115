package router_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/router"
)

// regionEntry is f's entry in region rg.
func (f *fakeRelay) regionEntry(rg string, lastResort bool) router.Relay {
	e := f.entry(false)
	e.Region, e.LastResort = rg, lastResort
	return e
}

func writeRegionsFile(t *testing.T, path string, regions []router.Region, relays ...router.Relay) {
	t.Helper()
	b, err := json.Marshal(router.File{Relays: relays, Regions: regions})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// routeFrom serves one /route (query q) from the client address remote
// on r's handler: the status, the answer and its Relay-Region-Fallback
// header.
func routeFrom(t *testing.T, r *router.Router, remote string, q url.Values) (int, router.Route, string) {
	t.Helper()
	q.Set("broadcast", "live")
	req := httptest.NewRequest(http.MethodGet, "/route?"+q.Encode(), nil)
	req.RemoteAddr = remote
	w := httptest.NewRecorder()
	r.ServeHTTP(w, req)
	var rt router.Route
	if w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), &rt); err != nil {
			t.Fatalf("/route answered %q: %v", w.Body.String(), err)
		}
	}
	return w.Code, rt, w.Header().Get("Relay-Region-Fallback")
}

// TestRouteRegionHint: /route?region=us answers a relay of region us
// although an eu relay has more headroom; when the us relays are down,
// or full for this poll, or only last-resort, it answers an eu relay and
// says it fell back; an unknown region falls back too, a malformed one
// is a 400.
func TestRouteRegionHint(t *testing.T) {
	eu, us1, us2, usBurst := newFakeRelay(t, 100), newFakeRelay(t, 1), newFakeRelay(t, 1), newFakeRelay(t, 50)
	path := filepath.Join(t.TempDir(), "relays.json")
	writeRegionsFile(t, path, []router.Region{{Name: "eu"}, {Name: "us"}},
		eu.regionEntry("eu", false), us1.regionEntry("us", false), us2.regionEntry("us", false), usBurst.regionEntry("us", true))
	r, _ := newRouter(t, path)
	r.PollOnce(context.Background())
	const client = "192.0.2.7:5000"

	if code, rt, _ := routeFrom(t, r, client, url.Values{}); code != 200 || rt.URL != eu.entry(false).URL || rt.RegionFallback {
		t.Fatalf("no hint: %d %+v, want eu (most headroom), no fallback", code, rt)
	}
	got := map[string]bool{}
	for i := range 2 {
		code, rt, fb := routeFrom(t, r, client, url.Values{"region": {"us"}})
		if code != 200 || rt.Region != "us" || rt.RegionFallback || fb != "" || rt.URL == usBurst.entry(false).URL {
			t.Fatalf("region=us answer %d: %d %+v (fallback header %q), want a steady us relay", i, code, rt, fb)
		}
		got[rt.URL] = true
	}
	if len(got) != 2 {
		t.Fatalf("region=us twice went to %v, want both us relays (one listener of headroom each)", got)
	}
	// Both us relays are full for this poll: a steady relay of another
	// region with room comes before the region's last-resort relay.
	code, rt, fb := routeFrom(t, r, client, url.Values{"region": {"us"}})
	if code != 200 || rt.URL != eu.entry(false).URL || !rt.RegionFallback || fb != "us -> eu" {
		t.Fatalf("region=us with its steady relays full: %d %+v (header %q), want eu with region_fallback", code, rt, fb)
	}
	// The next poll frees them again.
	r.PollOnce(context.Background())
	if code, rt, _ := routeFrom(t, r, client, url.Values{"region": {"us"}}); code != 200 || rt.Region != "us" || rt.RegionFallback {
		t.Fatalf("region=us after a poll: %d %+v, want us again", code, rt)
	}
	// us down (its steady relays), eu down: the us last-resort relay.
	us1.down.Store(true)
	us2.down.Store(true)
	eu.down.Store(true)
	r.PollOnce(context.Background())
	if code, rt, _ := routeFrom(t, r, client, url.Values{"region": {"eu"}}); code != 200 || rt.URL != usBurst.entry(false).URL || !rt.RegionFallback {
		t.Fatalf("region=eu with eu down: %d %+v, want the us last-resort relay, fallback", code, rt)
	}
	eu.down.Store(false)
	r.PollOnce(context.Background())
	if code, rt, _ := routeFrom(t, r, client, url.Values{"region": {"us"}}); code != 200 || rt.URL != eu.entry(false).URL || !rt.RegionFallback {
		t.Fatalf("region=us with its steady relays down: %d %+v, want eu, fallback", code, rt)
	}
	if code, rt, _ := routeFrom(t, r, client, url.Values{"region": {"asia"}}); code != 200 || !rt.RegionFallback {
		t.Fatalf("region=asia (unknown): %d %+v, want an answer with region_fallback", code, rt)
	}
	if code, _, _ := routeFrom(t, r, client, url.Values{"region": {"EU; drop"}}); code != http.StatusBadRequest {
		t.Fatalf("malformed region: %d, want 400", code)
	}
}

// TestRouteRegionByAddress: without a hint, the client's address picks
// the region by the longest prefix holding it (IPv4-mapped IPv6
// included); a hint beats the address; an address in no prefix is routed
// over every relay.
func TestRouteRegionByAddress(t *testing.T) {
	eu, us := newFakeRelay(t, 100), newFakeRelay(t, 10)
	path := filepath.Join(t.TempDir(), "relays.json")
	writeRegionsFile(t, path, []router.Region{
		{Name: "eu", Prefixes: []string{"10.0.0.0/8", "2001:db8:e::/48"}},
		{Name: "us", Prefixes: []string{"10.2.0.0/16", "2001:db8:5::/48"}},
	}, eu.regionEntry("eu", false), us.regionEntry("us", false))
	r, srv := newRouter(t, path)
	r.PollOnce(context.Background())
	for _, c := range []struct {
		remote, hint, want string
		fallback           bool
	}{
		{"10.2.3.4:999", "", "us", false},          // the /16 inside eu's /8
		{"[::ffff:10.2.3.4]:999", "", "us", false}, // mapped
		{"10.9.9.9:999", "", "eu", false},
		{"[2001:db8:5::1]:999", "", "us", false},
		{"10.2.3.4:999", "eu", "eu", false}, // the hint wins
		{"192.0.2.1:999", "", "eu", false},  // no region: most headroom
	} {
		r.PollOnce(context.Background()) // forget earlier answers
		q := url.Values{}
		if c.hint != "" {
			q.Set("region", c.hint)
		}
		code, rt, _ := routeFrom(t, r, c.remote, q)
		if code != 200 || rt.Region != c.want || rt.RegionFallback != c.fallback {
			t.Errorf("from %s hint %q: %d %+v, want region %s fallback %v", c.remote, c.hint, code, rt, c.want, c.fallback)
		}
	}
	// Per-region counts on /metrics, and the regions on /relays.
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`relay_router_region_routes_total{region="us",result="in_region"} 3`,
		`relay_router_region_routes_total{region="eu",result="in_region"} 2`,
		`relay_router_region_relays{region="us"} 1`,
		`relay_router_region_headroom{region="eu"} 100`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	resp, err = http.Get(srv.URL + "/relays")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Relays  []struct{ Region string }
		Regions []router.Region
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || len(st.Regions) != 2 || st.Relays[1].Region != "us" {
		t.Fatalf("/relays: %+v %v, want both regions and the relays' regions", st, err)
	}
}

// TestRegionCountsBounded: hints the relays file does not know are
// counted under "unknown", not as labels of their own.
func TestRegionCountsBounded(t *testing.T) {
	a := newFakeRelay(t, 100)
	path := filepath.Join(t.TempDir(), "relays.json")
	writeRegionsFile(t, path, nil, a.regionEntry("eu", false))
	r, srv := newRouter(t, path)
	r.PollOnce(context.Background())
	for _, h := range []string{"x1", "x2", "x3", "eu"} {
		routeFrom(t, r, "192.0.2.1:1", url.Values{"region": {h}})
	}
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `relay_router_region_routes_total{region="unknown",result="fallback"} 3`+"\n") ||
		!strings.Contains(string(body), `relay_router_region_routes_total{region="eu",result="in_region"} 1`+"\n") ||
		strings.Contains(string(body), `region="x1"`) {
		t.Fatalf("/metrics:\n%s\nwant 3 unknown fallbacks, 1 eu and no x1 label", body)
	}
}

func TestParseRegions(t *testing.T) {
	rel := `{"url": "http://a/", "stats": "http://a/stats"`
	for in, want := range map[string]string{
		`{"relays": [], "regions": [{"name": "eu", "prefixes": ["10.0.0.0/33"]}]}`:                                            `regions 0 (eu): prefixes: "10.0.0.0/33"`,
		`{"relays": [], "regions": [{"name": "eu"}, {"name": "eu"}]}`:                                                         `regions 1: region "eu" listed twice`,
		`{"relays": [], "regions": [{"name": "EU"}]}`:                                                                         `regions 0: name: region "EU"`,
		`{"relays": [], "regions": [{"name": "a", "prefixes": ["10.1.0.0/16"]}, {"name": "b", "prefixes": ["10.1.2.3/16"]}]}`: `10.1.0.0/16 is already region "a"'s`,
		`{"relays": [` + rel + `, "region": "us west"}]}`:                                                                     `relay 0: region: region "us west"`,
		`{"relays": [], "regions": [{"name": "eu", "cidrs": []}]}`:                                                            `unknown field "cidrs"`,
	} {
		if _, err := router.Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%s) = %v, want %q", in, err, want)
		}
	}
	if _, err := router.Parse([]byte(`{"relays": [` + rel + `, "region": "eu"}], "regions": [{"name": "eu", "prefixes": ["10.0.0.0/8", "fd00::/8"]}]}`)); err != nil {
		t.Fatal(err)
	}
}

// TestClientRegionHint: client.RouterOptions.Region sends the hint, and
// the destination carries the relay's region.
func TestClientRegionHint(t *testing.T) {
	eu, us := newFakeRelay(t, 100), newFakeRelay(t, 10)
	path := filepath.Join(t.TempDir(), "relays.json")
	writeRegionsFile(t, path, nil, eu.regionEntry("eu", false), us.regionEntry("us", false))
	r, srv := newRouter(t, path)
	r.PollOnce(context.Background())
	for rg, want := range map[string]string{"us": us.entry(false).URL, "": eu.entry(false).URL} {
		d, err := client.Route(context.Background(), srv.URL, "live", client.RouterOptions{Region: rg})
		if err != nil || d.URL != want || (rg != "" && d.Region != rg) || d.RegionFallback {
			t.Errorf("client.Route region %q: %+v %v, want %s", rg, d, err, want)
		}
	}
}
