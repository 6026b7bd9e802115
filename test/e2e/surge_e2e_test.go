//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/wire"
)

const (
	srgLabDir = "/var/lib/relayfleet/lab-surge"
	srgBridge = "rfsrg0"
	srgSubnet = "10.231.125.0/24"
	// srgCap is the sessions each steady relay admits (its publisher and
	// srgCap-1 listeners): the two-box fleet is full at 2*(srgCap-1).
	srgCap = 6
)

// TestE2ESurge: a two-box lab fleet with a surge (under 20% headroom
// for a minute, back for two). Load through the router past 80% of the
// steady relays' capacity: the next reconcile notes it, the one a minute
// later brings a surge box up and routes it, and new listeners land on
// it. The load drops: two minutes later the surge box is destroyed and
// no lab box carries the surge's label. The reconciles run on a clock
// given by --now; the load and the relays are real.
func TestE2ESurge(t *testing.T) {
	t.Parallel() // its own lab and fleet: see e2eLab
	e := newE2ELab(t, srgLabDir, srgBridge, srgSubnet, nil)
	work, relayBin, state, cli := e.work, e.relayBin, e.state, e.cli
	inv := filepath.Join(work, "lab.yaml")
	writeInventory(t, inv, 2, "small")
	data, err := os.ReadFile(inv)
	if err != nil {
		t.Fatal(err)
	}
	surge := "surge:\n  when_headroom_below: 20%\n  for: 1m\n  back_for: 2m\n  max: 1\n  burst: {provider: lab, shape: small}\n"
	if err := os.WriteFile(inv, append(data, surge...), 0o644); err != nil {
		t.Fatal(err)
	}
	evPath := filepath.Join(work, "events.yaml")
	if err := os.WriteFile(evPath, []byte("version: 1\nfleet: lab.yaml\nevents: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reconcile := func(at time.Time) string {
		t.Helper()
		return e.fleet("events", "reconcile", "--events", evPath, "--now", at.UTC().Format(time.RFC3339))
	}
	surgeBoxes := func() int { return len(e.boxes(map[string]string{"fleet": "lab", "event": "surge"})) }

	e.fleet("up", "--inventory", inv)
	steady := e.boxes(map[string]string{"fleet": "lab", "tier": "steady"})
	if len(steady) != 2 {
		t.Fatalf("%d steady boxes, want 2", len(steady))
	}
	var urls []string
	for _, b := range steady {
		capRelay(t, e.lab, b.Name, 4443, srgCap)
		urls = append(urls, fmt.Sprintf("http://%s:4443/", b.Address))
	}
	port := e.startRouter(ctx)
	routerURL := fmt.Sprintf("http://127.0.0.1:%d/", port)
	tokOut, err := e.cmd(ctx, "token", "--inventory", inv, "--publish", "live/", "--state-dir", state, "--pulumi", cli).Output()
	if err != nil {
		t.Fatalf("fleet token: %v", err)
	}
	tokFile := filepath.Join(work, "publish.jwt")
	if err := os.WriteFile(tokFile, tokOut, 0o600); err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	published := 0
	publish := func(u string) {
		t.Helper()
		published++
		testutil.Start(t, fmt.Sprintf("publish%d", published), exec.CommandContext(lctx, relayBin, "publish", "--name", "live/show", "--paced", "--trust-http-hash", "--token-file", tokFile, u))
	}
	for _, u := range urls {
		publish(u)
	}
	subscribers := func(u string) int64 {
		var st struct{ Subscribers int64 }
		resp, err := http.Get(u + "stats")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&st) != nil {
			return -1
		}
		return st.Subscribers
	}
	// 9 of the 10 listener places: 10% headroom.
	full := 2*(srgCap-1) - 1
	la := startLoadgen(t, relayBin, filepath.Join(work, "loadgen-a"), routerURL, full)
	testutil.WaitFor(t, 60*time.Second, "the steady relays nearly full", func() bool { return subscribers(urls[0])+subscribers(urls[1]) >= int64(full) })

	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	out := reconcile(t0)
	if !strings.Contains(out, "action=surge-look") || surgeBoxes() != 0 {
		e.fatalf("under the threshold for less than a minute: %d surge boxes\n%s", surgeBoxes(), slogLines(out))
	}
	first := slogLines(out)
	begin := time.Now()
	out = reconcile(t0.Add(61 * time.Second))
	upTook := time.Since(begin)
	rec := e.record("surge")
	if !strings.Contains(out, "action=surge ") || rec.Phase != events.Up || len(rec.Hosts) != 1 || surgeBoxes() != 1 {
		e.fatalf("a minute under the threshold: phase %s, %d hosts, %d surge boxes, surge state %+v\nthe first reconcile:\n%s\nthis one:\n%s", rec.Phase, len(rec.Hosts), surgeBoxes(), rec.Surge, first, slogLines(out))
	}
	surgeURL := fmt.Sprintf("http://%s:4443/", rec.Hosts[0].Address)
	publish(surgeURL)
	// The router routes the surge box once it has polled it (its relays
	// file is rewritten by the reconcile; the poll follows within a
	// second): until then a new listener takes the steady fleet's last
	// place, and that is not what this test is about.
	testutil.WaitFor(t, 30*time.Second, "the router routing the surge box", func() bool {
		return routerRoutes(routerURL, rec.Hosts[0].Address)
	})
	// New listeners land on the surge box: it has the most headroom. One
	// more than the three the test wants there: the steady fleet's last
	// place may go to one of them. With three, CI (stop 42) and a loaded
	// run here failed on "2 after 60s (steady relays 5, 5)": not a small
	// headroom (the surge box reports about 6,500); the likeliest cause,
	// not proven, is a poll of the new box missing the router's poll
	// timeout (200 ms here), which takes it out of the pool for a period.
	free := 2*(srgCap-1) - full
	before := routerRelaysJSON(routerURL)
	lb := startLoadgen(t, relayBin, filepath.Join(work, "loadgen-b"), routerURL, 3+free)
	if !testutil.PollEvery(60*time.Second, 100*time.Millisecond, func() bool { return subscribers(surgeURL) >= 3 }) {
		e.fatalf("new listeners on the surge box: %d of %d after 60s (steady relays %d, %d); the router's relays before they started: %s; now: %s",
			subscribers(surgeURL), 3+free, subscribers(urls[0]), subscribers(urls[1]), before, routerRelaysJSON(routerURL))
	}
	t.Logf("the router's relays as the new listeners started: %s", before)
	onSurge := subscribers(surgeURL)

	// The load drops: the steady fleet alone has the headroom again.
	rb, ra := lb.stop(t), la.stop(t)
	testutil.WaitFor(t, 30*time.Second, "the listeners gone", func() bool {
		return subscribers(urls[0])+subscribers(urls[1])+subscribers(surgeURL) == 0
	})
	reconcile(t0.Add(5 * time.Minute))
	if rec := e.record("surge"); rec.Phase != events.Up || surgeBoxes() != 1 {
		t.Fatalf("the load just dropped: phase %s, %d surge boxes; want it kept for back_for", rec.Phase, surgeBoxes())
	}
	begin = time.Now()
	out = reconcile(t0.Add(7 * time.Minute))
	goneTook := time.Since(begin)
	rec = e.record("surge")
	if !strings.Contains(out, "action=surge-end") || rec.Phase != events.Gone || rec.Remaining != 0 || surgeBoxes() != 0 {
		e.fatalf("back for two minutes: phase %s, %d remaining, %d surge boxes\n%s", rec.Phase, rec.Remaining, surgeBoxes(), slogLines(out))
	}
	if n := len(e.boxes(map[string]string{"fleet": "lab", "tier": "steady"})); n != 2 {
		t.Errorf("%d steady boxes after the surge, want 2", n)
	}
	refused := routerRefused(t, port)
	t.Logf("SURGE: steady relays %d of %d places taken -> surge box up and routed in %.0fs, %d new listeners on it, refused by the router %d, lost %d; load dropped -> surge box gone (proven by label) in %.0fs",
		full, 2*(srgCap-1), upTook.Seconds(), onSurge, refused, ra.ListenersLost+rb.ListenersLost, goneTook.Seconds())
	if ra.ListenersLost+rb.ListenersLost != 0 {
		t.Errorf("%d listeners lost", ra.ListenersLost+rb.ListenersLost)
	}
	stop()
	e.fleet("destroy", "--inventory", inv, "--yes")
}

// routerRoutes reports whether the router at routerURL lists a healthy
// relay with headroom on address.
func routerRoutes(routerURL, address string) bool {
	resp, err := http.Get(routerURL + "relays")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st wire.RelaysState
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return false
	}
	for _, r := range st.Relays {
		if u, err := url.Parse(r.URL); err == nil && u.Hostname() == address && r.Healthy && r.Headroom > 0 {
			return true
		}
	}
	return false
}

// routerRelaysJSON is the router's GET /relays, compact, for a failure's
// message ("" when it does not answer).
func routerRelaysJSON(routerURL string) string {
	resp, err := http.Get(routerURL + "relays")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var st wire.RelaysState
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return ""
	}
	out, _ := json.Marshal(st.Relays)
	return string(out)
}
