//go:build lab

package labtest

// Origin faults on lab boxes (issue 32): a fleet brought up with fleet up
// with an origin group of two (origins: count 2) and two steady edge
// boxes, whose relays pull the broadcast from both origins; a paced
// publisher on this machine publishing to both (relay publish URL1 URL2);
// relay router on loopback over the edges (the relays file fleet up
// wrote), behind a counting proxy that notes when each /route came; 400
// listeners (relay loadgen --router --reconnect --json) through it. Four
// runs of the listeners, one after the other on the one fleet:
//
//   - floor: no fault, as long as a fault's run: what the same listeners
//     hear on this machine without one;
//   - kill: kill -9 of the relay on the origin the edges pull from
//     (systemctl kill -s KILL); systemd starts it again and the
//     publisher comes back to it;
//   - blackhole: every packet to and from that origin's relay port dropped
//     inside its box's network namespace (nft, no close), then let through
//     again;
//   - storm: both origins stopped for 20 s, then started.
//
// Each prints one ORIGINFAULT line with its figures and checks the
// issue's bounds. make lab-origins runs it (and make lab-test).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/relay/client"
	"github.com/relayfleet/relayfleet/relay/wire"
	"github.com/relayfleet/relayfleet/test/systest"
)

// The origin tests' own lab and fleet.
const (
	ofoLabDir    = "/var/lib/relayfleet/lab-ofo"
	ofoBridge    = "rfofo0"
	ofoSubnet    = "10.231.210.0/24"
	ofoFleetName = "of"
	ofoBroadcast = "live/of"
	// ofoFrame is the publisher's frame interval, one frame to a group
	// (Opus at 120 ms frames).
	ofoFrame = 120 * time.Millisecond
	// ofoListeners is the count; RELAYFLEET_ORIGINS_LISTENERS
	// sets another (to find where a loaded machine gives out).
	ofoListeners = 400
)

// The bounds.
const (
	// ofoGap is the longest gap a listener may hear when the origin its
	// edge pulls from dies or is cut off; at most that much audio
	// (ofoGap/ofoFrame frames) lost per listener.
	ofoGap = time.Second
	// ofoSecondGap: a gap past this after the failover's is a second one
	// (the origin's return must cause none). Frames come every 120 ms.
	ofoSecondGap = 500 * time.Millisecond
	// ofoOutage is how long both origins stay stopped, and ofoBack how
	// soon after the first origin's return every listener must hear audio.
	ofoOutage = 20 * time.Second
	ofoBack   = 3 * time.Second
	// ofoRateWindow is the window the router's request rate is counted
	// over (client.PeakReconnects bounds the requests in any one).
	ofoRateWindow = 100 * time.Millisecond
	// ofoCarryOn is how long the listeners listen on once the faulted
	// origin is back (for a second gap to show).
	ofoCarryOn = 4 * time.Second
)

// ofoOrigin is one origin box's relay.
type ofoOrigin struct {
	box    lab.Box
	port   int
	pinned string // its URL pinned to the key the fleet made for it
}

func (o ofoOrigin) base() string     { return fmt.Sprintf("http://%s:%d", o.box.Address, o.port) }
func (o ofoOrigin) unit() string     { return fmt.Sprintf("relay@%d.service", o.port) }
func (o ofoOrigin) String() string   { return fmt.Sprintf("%s:%d", o.box.Name, o.port) }
func (o ofoOrigin) hostPort() string { return fmt.Sprintf("%s:%d", o.box.Address, o.port) }

// ofoFleet is the fleet the origin tests share.
type ofoFleet struct {
	t         *testing.T
	lf        *labFleet
	dir       string
	relay     string
	origins   []ofoOrigin
	edges     []string // the edge relay processes' base URLs
	routerURL string   // the router itself (its /metrics)
	proxyURL  string   // the counting proxy in front of it (the listeners' --router)
	routes    *routeTimes
	listeners int
}

// routeTimes records when each /route request reached the router.
type routeTimes struct {
	mu sync.Mutex
	at []time.Time
}

func (r *routeTimes) add(t time.Time) {
	r.mu.Lock()
	r.at = append(r.at, t)
	r.mu.Unlock()
}

func (r *routeTimes) sorted() []time.Time {
	r.mu.Lock()
	at := append([]time.Time(nil), r.at...)
	r.mu.Unlock()
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	return at
}

// count is how many came in [from, to).
func (r *routeTimes) count(from, to time.Time) int {
	n := 0
	for _, a := range r.sorted() {
		if !a.Before(from) && a.Before(to) {
			n++
		}
	}
	return n
}

// peak is the most requests in any window w starting in [from, to), and
// when that window started.
func (r *routeTimes) peak(w time.Duration, from, to time.Time) (int, time.Time) {
	at := r.sorted()
	best, bestAt, j := 0, time.Time{}, 0
	for i := range at {
		if at[i].Before(from) || !at[i].Before(to) {
			continue
		}
		j = max(j, i)
		for j < len(at) && at[j].Sub(at[i]) < w {
			j++
		}
		if j-i > best {
			best, bestAt = j-i, at[i]
		}
	}
	return best, bestAt
}

func newOFOFleet(t *testing.T) *ofoFleet {
	t.Helper()
	f := &ofoFleet{t: t, dir: t.TempDir(), routes: &routeTimes{}, listeners: ofoListeners}
	if v := os.Getenv("RELAYFLEET_ORIGINS_LISTENERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("RELAYFLEET_ORIGINS_LISTENERS=%q: want a positive number", v)
		}
		f.listeners = n
		t.Logf("RELAYFLEET_ORIGINS_LISTENERS: %d listeners instead of the issue's %d", n, ofoListeners)
	}
	_, f.relay = systest.Build(t)
	start := time.Now()
	f.lf = upLabFleet(t, labFleetSpec{LabDir: ofoLabDir, Bridge: ofoBridge, Subnet: ofoSubnet, Relay: f.relay, Inventory: fmt.Sprintf(`version: 1
name: %s
origins:
  provider: lab
  shape: small
  count: 2
access:
  public_listen: [live/]
  load_generators: [10.231.0.0/16]
steady:
  - name: ofedge
    provider: lab
    shape: small
    count: 2
    processes: auto
    base_port: 4443
`, ofoFleetName)})
	t.Logf("fleet up with 2 origins and 2 edges in %.1fs", time.Since(start).Seconds())

	// The origins and edges as the stack lists them; the origins' boxes
	// (the faults are made on them) by address.
	ctx := context.Background()
	boxes, err := f.lf.Lab.List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byAddr := map[string]lab.Box{}
	for _, b := range boxes {
		byAddr[b.Address.String()] = b
	}
	for _, h := range f.lf.hosts(t) {
		switch h.Tier {
		case "origin":
			b, ok := byAddr[h.Address]
			if !ok || len(h.Ports) != 1 || h.SPKI == "" {
				t.Fatalf("origin %s at %s: box found %v, ports %v, pin %q", h.Name, h.Address, ok, h.Ports, h.SPKI)
			}
			f.origins = append(f.origins, ofoOrigin{box: b, port: h.Ports[0], pinned: program.OriginURL(h.Address, h.Ports[0], h.SPKI)})
		case "steady":
			for _, p := range h.Ports {
				f.edges = append(f.edges, fmt.Sprintf("http://%s:%d", h.Address, p))
			}
		}
	}
	if len(f.origins) != 2 || len(f.edges) < 2 {
		t.Fatalf("the stack lists origins %v and edge processes %v; want 2 origins and at least 2 edges", f.origins, f.edges)
	}
	t.Logf("origins %v; edge processes %v", f.origins, f.edges)

	// The publisher: paced frames (sequence and send time in each) to
	// both origins, with a publish token the fleet signs.
	tok, errOut, code := fleet(t, append([]string{"token", "--publish", "live/", "--refresh=false", "--pulumi", f.lf.pulumi}, f.lf.args()...)...)
	if code != 0 {
		t.Fatalf("fleet token: exit %d: %s", code, systest.LastLine(errOut))
	}
	tokFile := filepath.Join(f.dir, "publish.jwt")
	testutil.WriteFile(t, tokFile, []byte(strings.TrimSpace(tok)+"\n"), 0o600)
	f.background("publisher", f.relay, "publish", "--paced", "--name", ofoBroadcast, "--interval", ofoFrame.String(),
		"--token-file", tokFile, f.origins[0].pinned, f.origins[1].pinned)
	if !testutil.PollEvery(30*time.Second, 200*time.Millisecond, func() bool {
		for _, o := range f.origins {
			if s, err := ofoStats(o.base()); err != nil || s.Publishers < 1 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the publisher is not on both origins within 30s")
	}

	// The router over the edges (the relays file fleet up wrote, pinned),
	// and in front of it a proxy that notes each /route's time.
	port, err := freeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	f.routerURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	f.background("router", f.relay, "router", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--relays", filepath.Join(f.lf.State, program.RelaysFile), "--require-pins", "--poll", "500ms", "--log-level", "warn")
	if err := pollHTTP(f.routerURL+"/healthz", 20*time.Second); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse(f.routerURL)
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/route" {
			f.routes.add(time.Now())
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	f.proxyURL = proxy.URL
	return f
}

func (f *ofoFleet) background(name, prog string, args ...string) *testutil.Proc {
	f.t.Helper()
	return testutil.StartLog(f.t, filepath.Join(f.dir, name+".log"), exec.Command(prog, args...))
}

// onBox runs a shell command on a box as root and returns its output.
func (f *ofoFleet) onBox(b lab.Box, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	if err := f.lf.Lab.Run(ctx, b.Name, cmd, nil, &out, &errOut); err != nil {
		return out.String(), fmt.Errorf("%s: %s: %v: %s", b.Name, cmd, err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

var ofoStatsClient = &http.Client{Timeout: time.Second}

func ofoStats(base string) (wire.Stats, error) {
	resp, err := ofoStatsClient.Get(base + "/stats")
	if err != nil {
		return wire.Stats{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return wire.Stats{}, fmt.Errorf("%s/stats: %s", base, resp.Status)
	}
	var s wire.Stats
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// edgeStats reads every edge's /stats; an edge that does not answer has
// ok false.
func (f *ofoFleet) edgeStats() (out []wire.Stats, ok bool) {
	out, ok = make([]wire.Stats, len(f.edges)), true
	for i, e := range f.edges {
		s, err := ofoStats(e)
		if err != nil {
			ok = false
		}
		out[i] = s
	}
	return out, ok
}

// pullsFrom is the origin (index into f.origins) each edge pulls the
// broadcast from now, -1 for none.
func (f *ofoFleet) pullsFrom(st []wire.Stats) []int {
	out := make([]int, len(st))
	for i, s := range st {
		out[i] = -1
		u := s.UpstreamPulls[ofoBroadcast]
		for j, o := range f.origins {
			if u != "" && strings.Contains(u, "//"+o.hostPort()+"/") {
				out[i] = j
			}
		}
	}
	return out
}

// ofoReport is relay loadgen --json, the figures these tests read.
type ofoReport struct {
	Listeners     int   `json:"listeners"`
	Connected     int   `json:"connected"`
	ListenersLost int   `json:"listeners_lost"`
	SilentAtEnd   int   `json:"silent_at_end"`
	FramesLost    int64 `json:"frames_lost"`
	Reconnects    int64 `json:"reconnects"`
	GapMs         struct {
		P50, P99, Max float64
	} `json:"gap_ms"`
	SecondGapMs *struct {
		P50, P99, Max float64
	} `json:"second_gap_ms"`
	ReconnectsByReason map[string]int64 `json:"reconnects_by_reason"`
}

func (r *ofoReport) lostPerListener() float64 {
	return float64(r.FramesLost) / float64(max(r.Listeners, 1))
}

func (r *ofoReport) String() string {
	s := fmt.Sprintf("connected=%d listeners_lost=%d silent_at_end=%d reconnects=%d frames_lost=%d gap_ms{p50=%.0f p99=%.0f max=%.0f}",
		r.Connected, r.ListenersLost, r.SilentAtEnd, r.Reconnects, r.FramesLost, r.GapMs.P50, r.GapMs.P99, r.GapMs.Max)
	if r.SecondGapMs != nil {
		s += fmt.Sprintf(" second_gap_ms{p50=%.0f p99=%.0f max=%.0f}", r.SecondGapMs.P50, r.SecondGapMs.P99, r.SecondGapMs.Max)
	}
	if len(r.ReconnectsByReason) > 0 {
		s += fmt.Sprintf(" reconnects_by_reason=%v", r.ReconnectsByReason)
	}
	return s
}

// listen starts the listeners through the proxy and waits until the
// edges serve them all.
func (f *ofoFleet) listen(t *testing.T, name string) *loadgenRun {
	t.Helper()
	// Every previous run's listeners gone.
	if !testutil.PollEvery(60*time.Second, 250*time.Millisecond, func() bool {
		st, ok := f.edgeStats()
		n := 0
		for _, s := range st {
			n += s.Sessions
		}
		return ok && n == 0
	}) {
		t.Fatalf("%s: the edges still have sessions from before", name)
	}
	args := []string{"loadgen", "--router", f.proxyURL, "--broadcast", ofoBroadcast, "--listeners", strconv.Itoa(f.listeners),
		"--ramp", "100", "--duration", "30m", "--reconnect", "--json", "--silence", client.DefaultSilence.String()}
	g := &loadgenRun{}
	cmd := exec.Command(f.relay, args...)
	cmd.Stdout = &g.stdout
	t.Logf("$ relay %s", strings.Join(args, " "))
	g.p = testutil.StartLog(t, filepath.Join(f.dir, name+"-loadgen.log"), cmd)
	start := time.Now()
	var per []int
	if !testutil.PollEvery(90*time.Second, 250*time.Millisecond, func() bool {
		st, _ := f.edgeStats()
		per = make([]int, len(st))
		n := 0
		for i, s := range st {
			per[i] = s.Sessions
			n += s.Sessions
		}
		return n >= f.listeners
	}) {
		g.kill()
		t.Fatalf("%s: %d listeners not attached within 90s: sessions per edge %v; loadgen: %s", name, f.listeners, per, g.p.Tail(10))
	}
	t.Logf("%s: %d listeners attached in %.1fs", name, f.listeners, time.Since(start).Seconds())
	return g
}

// stop interrupts the listeners and reads their report.
func (f *ofoFleet) stop(t *testing.T, g *loadgenRun) *ofoReport {
	t.Helper()
	g.stop(t) // checks that a JSON report came
	out := g.stdout.Bytes()
	i := bytes.LastIndex(out, []byte("\n{"))
	if i < 0 {
		i = bytes.Index(out, []byte("{"))
	}
	var r ofoReport
	if i < 0 || json.Unmarshal(bytes.TrimSpace(out[i:]), &r) != nil {
		t.Fatalf("relay loadgen: no JSON report: %s", tail(string(out), 10))
	}
	if r.SecondGapMs == nil {
		t.Fatalf("relay loadgen --json has no second_gap_ms: a second gap could not show")
	}
	return &r
}

// victim is the origin the edges pull the broadcast from now: the one
// most of them pull it from (each lists the origins in the same order
// and starts on the first, but after a failover an edge stays where it
// went, so a later pull may start elsewhere), with which edges pull from
// it and how many listeners they serve.
func (f *ofoFleet) victim(t *testing.T) (vi int, on []bool, affected int, st []wire.Stats) {
	t.Helper()
	var from []int
	if !testutil.PollEvery(20*time.Second, 200*time.Millisecond, func() bool {
		var ok bool
		st, ok = f.edgeStats()
		from = f.pullsFrom(st)
		return ok && !slices.Contains(from, -1)
	}) {
		t.Fatalf("not every edge pulls %s from an origin: %v (upstream_pulls of each: %v)", ofoBroadcast, from, pulls(st))
	}
	edges, listeners := make([]int, len(f.origins)), make([]int, len(f.origins))
	for i, o := range from {
		edges[o]++
		listeners[o] += st[i].Sessions
	}
	for o := range f.origins {
		if edges[o] > edges[vi] || (edges[o] == edges[vi] && listeners[o] > listeners[vi]) {
			vi = o
		}
	}
	on = make([]bool, len(from))
	for i, o := range from {
		on[i] = o == vi
	}
	return vi, on, listeners[vi], st
}

func pulls(st []wire.Stats) []string {
	var out []string
	for _, s := range st {
		out = append(out, s.UpstreamPulls[ofoBroadcast])
	}
	return out
}

// pullNames names the origin each edge pulls the broadcast from ("none").
func (f *ofoFleet) pullNames(st []wire.Stats) []string {
	var out []string
	for _, o := range f.pullsFrom(st) {
		if o < 0 {
			out = append(out, "none")
		} else {
			out = append(out, f.origins[o].box.Name)
		}
	}
	return out
}

func failovers(st []wire.Stats) (n int64) {
	for _, s := range st {
		n += s.UpstreamFailovers
	}
	return n
}

// mainPID is the origin's relay process.
func (f *ofoFleet) mainPID(o ofoOrigin) (int, error) {
	out, err := f.onBox(o.box, "systemctl show -p MainPID --value "+o.unit())
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// leaderPID is the box's init, the first process of its namespaces: the
// child of its launcher (systemd-nspawn).
func (f *ofoFleet) leaderPID(o ofoOrigin) (int, error) {
	b, err := f.lf.Lab.Get(context.Background(), o.box.Name)
	if err != nil {
		return 0, err
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", b.PID, b.PID))
	if err != nil {
		return 0, err
	}
	kids := strings.Fields(string(data))
	if len(kids) != 1 {
		return 0, fmt.Errorf("%s: launcher %d has children %v, want the box's init", o.box.Name, b.PID, kids)
	}
	return strconv.Atoi(kids[0])
}

// blackhole drops, or with on false lets through again, every packet to
// and from the origin's relay port (UDP: QUIC; TCP: its HTTP) inside its
// box's network namespace: nothing is closed, nothing answers.
func (f *ofoFleet) blackhole(t *testing.T, o ofoOrigin, on bool) {
	t.Helper()
	pid, err := f.leaderPID(o)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "nft", "delete", "table", "inet", "rfblackhole")
	if on {
		rules := fmt.Sprintf(`table inet rfblackhole {
	chain in { type filter hook input priority raw; policy accept; udp dport %[1]d drop; tcp dport %[1]d drop; }
	chain out { type filter hook output priority raw; policy accept; udp sport %[1]d drop; tcp sport %[1]d drop; }
}
`, o.port)
		cmd = exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s in %s's network namespace (init pid %d): %v: %s", strings.Join(cmd.Args, " "), o, pid, err, out)
	}
}

// TestOriginFaults: the floor, kill -9 and blackhole of the origin the
// edges pull from, then both origins away for 20 s, on one fleet.
func TestOriginFaults(t *testing.T) {
	if _, err := exec.LookPath("nft"); err != nil {
		testutil.Skipf(t, "nft not found (apt-get install nftables; scripts/deps.sh lab)")
	}
	begin := time.Now()
	f := newOFOFleet(t)
	ready := time.Now()
	maxLost := float64(ofoGap / ofoFrame)

	// The floor: the same listeners as long as a fault's run, no fault.
	var floor *ofoReport
	var floorLen time.Duration
	t.Run("floor", func(t *testing.T) {
		g := f.listen(t, "floor")
		start := time.Now()
		time.Sleep(10 * time.Second) // paces the run: as long as a fault's
		floor = f.stop(t, g)
		floorLen = time.Since(start)
		fmt.Printf("ORIGINFAULT floor listeners=%d no fault, %.0fs: gap_max_ms=%.0f reconnects=%d frames_lost_per_listener=%.2f %s\n",
			f.listeners, floorLen.Seconds(), floor.GapMs.Max, floor.Reconnects, floor.lostPerListener(), floor)
	})
	floorLine := func() string {
		if floor == nil {
			return "no floor"
		}
		return fmt.Sprintf("floor without a fault: gap_max_ms=%.0f p50=%.0f frames_lost_per_listener=%.2f reconnects=%d", floor.GapMs.Max, floor.GapMs.P50, floor.lostPerListener(), floor.Reconnects)
	}

	// failover runs one fault on the origin the edges pull from: inject
	// makes it, and returns a func that waits until that origin is back
	// with the publisher.
	failover := func(t *testing.T, name string, inject func(t *testing.T, o ofoOrigin) (back func())) {
		g := f.listen(t, name)
		time.Sleep(2 * time.Second) // steady state before the fault
		vi, on, affected, before := f.victim(t)
		victim, nOn := f.origins[vi], 0
		for _, b := range on {
			if b {
				nOn++
			}
		}
		pullsBefore := f.pullNames(before)
		t0 := time.Now()
		back := inject(t, victim)
		// The edges that pulled from it move off it.
		var moved time.Duration
		var st []wire.Stats
		if testutil.PollEvery(15*time.Second, 100*time.Millisecond, func() bool {
			st, _ = f.edgeStats()
			for i, o := range f.pullsFrom(st) {
				if on[i] && (o == vi || o < 0) {
					return false
				}
			}
			return true
		}) {
			moved = time.Since(t0)
		} else {
			t.Errorf("%s: the edges still pull from %s 15s after the fault: %v", name, victim, pulls(st))
		}
		pullsMoved := f.pullNames(st)
		back()
		backAt := time.Since(t0)
		time.Sleep(ofoCarryOn) // the listeners listen on with the origin back
		r := f.stop(t, g)
		after, _ := f.edgeStats()
		moves := failovers(after) - failovers(before)
		fmt.Printf("ORIGINFAULT %s listeners=%d gap_max_ms=%.0f (bound %d) reconnects=%d (bound 0) listeners_lost=%d (bound 0) frames_lost_per_listener=%.2f (bound %.0f) second_gap_max_ms=%.0f (bound %d) victim=%s edges_on_it=%d/%d affected_listeners=%d edges_moved_after=%.2fs edge_failovers=%d origin_back_after=%.1fs pulls_before=%v pulls_moved=%v; %s; %s\n",
			name, f.listeners, r.GapMs.Max, ofoGap.Milliseconds(), r.Reconnects, r.ListenersLost, r.lostPerListener(), maxLost,
			r.SecondGapMs.Max, ofoSecondGap.Milliseconds(), victim, nOn, len(f.edges), affected, moved.Seconds(), moves, backAt.Seconds(), pullsBefore, pullsMoved, floorLine(), r)
		if r.Connected != f.listeners {
			t.Errorf("%s: %d of %d listeners connected", name, r.Connected, f.listeners)
		}
		if r.GapMs.Max > float64(ofoGap.Milliseconds()) {
			t.Errorf("%s: longest gap %.0f ms, want at most %v (%s)", name, r.GapMs.Max, ofoGap, floorLine())
		}
		if r.Reconnects != 0 || r.ListenersLost != 0 || r.SilentAtEnd != 0 {
			t.Errorf("%s: %d reconnects (%v), %d listeners lost, %d silent at the end; want none", name, r.Reconnects, r.ReconnectsByReason, r.ListenersLost, r.SilentAtEnd)
		}
		if r.lostPerListener() > maxLost {
			t.Errorf("%s: %.2f frames lost per listener, want at most %v worth (%.0f)", name, r.lostPerListener(), ofoGap, maxLost)
		}
		if r.SecondGapMs.Max > float64(ofoSecondGap.Milliseconds()) {
			t.Errorf("%s: a second gap of %.0f ms (after the failover's), want none over %v: the origin's return interrupted the audio", name, r.SecondGapMs.Max, ofoSecondGap)
		}
		// The fault reached the listeners: each edge on the victim moved
		// once at least, and its listeners lost what the publisher sent
		// while the edge waited (400 ms without a frame, relay/cluster.go
		// failoverSilence) before it moved: the new origin's subscription
		// starts at its newest group (3 frames each on loopback), where
		// the floor without a fault loses none.
		if moves < int64(nOn) {
			t.Errorf("%s: the edges counted %d failovers, want one for each of the %d that pulled from %s: the fault did not move them", name, moves, nOn, victim)
		}
		if floor != nil && (r.FramesLost < int64(affected) || r.FramesLost <= floor.FramesLost) {
			t.Errorf("%s: %d frames lost for %d listeners on %s (floor without a fault %d): the listeners did not hear the fault", name, r.FramesLost, affected, victim, floor.FramesLost)
		}
	}

	// originBack waits until o's relay serves again, the publisher on it.
	originBack := func(t *testing.T, o ofoOrigin, limit time.Duration) {
		t.Helper()
		var s wire.Stats
		var err error
		if !testutil.PollEvery(limit, 200*time.Millisecond, func() bool {
			s, err = ofoStats(o.base())
			return err == nil && s.Publishers >= 1
		}) {
			t.Errorf("%s not back with the publisher within %v: %+v, %v", o, limit, s.Publishers, err)
		}
	}

	t.Run("kill", func(t *testing.T) {
		failover(t, "kill", func(t *testing.T, o ofoOrigin) func() {
			pid, err := f.mainPID(o)
			if err != nil || pid == 0 {
				t.Fatalf("%s: main pid %d, %v", o, pid, err)
			}
			if _, err := f.onBox(o.box, "systemctl kill -s KILL "+o.unit()); err != nil {
				t.Fatal(err)
			}
			return func() {
				// systemd starts it again (Restart=always); the publisher
				// comes back to it.
				if !testutil.PollEvery(30*time.Second, 250*time.Millisecond, func() bool {
					p, err := f.mainPID(o)
					return err == nil && p != 0 && p != pid
				}) {
					t.Errorf("%s: systemd did not start it again within 30s", o)
				}
				originBack(t, o, 30*time.Second)
			}
		})
	})

	t.Run("blackhole", func(t *testing.T) {
		failover(t, "blackhole", func(t *testing.T, o ofoOrigin) func() {
			f.blackhole(t, o, true)
			lifted := false
			t.Cleanup(func() {
				if !lifted {
					f.blackhole(t, o, false)
				}
			})
			return func() {
				time.Sleep(2 * time.Second) // paces the fault: cut off for a while after the edges moved
				f.blackhole(t, o, false)
				lifted = true
				// Its sessions (the publisher's, the edges' links) ended or
				// resume; the publisher is on it again.
				originBack(t, o, 30*time.Second)
			}
		})
	})

	t.Run("storm", func(t *testing.T) {
		g := f.listen(t, "storm")
		time.Sleep(2 * time.Second) // steady state before the fault
		steadyFrom := time.Now()
		time.Sleep(2 * time.Second) // the /route floor: requests in a quiet while
		stopAll := func(verb string) time.Time {
			var wg sync.WaitGroup
			errs := make([]error, len(f.origins))
			at := time.Now()
			for i, o := range f.origins {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = f.onBox(o.box, "systemctl "+verb+" "+o.unit())
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			return at
		}
		stopAsked := stopAll("stop")
		stopped := time.Now() // both stopped: no frame leaves them after this
		t.Logf("storm: both origins stopped %.2fs after the stop was asked", stopped.Sub(stopAsked).Seconds())
		steadyRoutes := f.routes.count(steadyFrom, stopAsked)
		time.Sleep(ofoOutage) // the outage itself
		// Each edge's groups in, before the origins' return.
		base := make([]int64, len(f.edges))
		for i, e := range f.edges {
			if s, err := ofoStats(e); err == nil {
				base[i] = s.GroupsIn
			}
		}
		returned := stopAll("start")
		// When each edge pulls audio again (its groups_in moves) and when
		// a link of its is up again: the edges' share of the return.
		pulledAt, linkAt := make([]time.Duration, len(f.edges)), make([]time.Duration, len(f.edges))
		testutil.PollEvery(20*time.Second, 50*time.Millisecond, func() bool {
			var wg sync.WaitGroup
			for i, e := range f.edges {
				if pulledAt[i] != 0 {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, err := ofoStats(e)
					if err != nil {
						return
					}
					at := time.Since(returned)
					if linkAt[i] == 0 && s.UpstreamConnected {
						linkAt[i] = at
					}
					if s.GroupsIn > base[i] {
						pulledAt[i] = at
					}
				}()
			}
			wg.Wait()
			return !slices.Contains(pulledAt, 0)
		})
		pulled := slices.Max(pulledAt)
		t.Logf("storm: after the return, each edge's link up again %v, pulling audio again %v (as /stats, polled every 50 ms, saw it)", linkAt, pulledAt)
		time.Sleep(ofoBack + 2*time.Second) // every listener back, and some audio after
		r := f.stop(t, g)
		end := returned.Add(ofoBack)
		peak, peakAt := f.routes.peak(ofoRateWindow, stopAsked, end)
		total := f.routes.count(stopAsked, end)
		during := f.routes.count(stopAsked, returned)
		peakBound := client.PeakReconnects(f.listeners, ofoRateWindow, client.DefaultSilence)
		outage := returned.Sub(stopped)
		duringBound := client.ReconnectsWithin(f.listeners, returned.Sub(stopAsked), client.DefaultSilence)
		// Audio back: a listener's longest gap runs from its last frame
		// (at or before stopped) to its first after the return, so
		// gap - (returned - stopped) is at least how long after the
		// return it heard audio again.
		back := time.Duration(r.GapMs.Max*float64(time.Millisecond)) - outage
		routed := routerRoutes(t, f.routerURL)
		fmt.Printf("ORIGINFAULT storm listeners=%d outage=%.1fs route_peak_per_%dms=%d (bound %d, at +%.1fs) routes_during_outage=%d (bound %d) routes_until_%.0fs_after=%d routes_in_2s_before=%d audio_back_after_return=%.2fs (bound %v) edges_pulled_after=%.2fs listeners_lost=%d silent_at_end=%d router_routes_total=%v; %s\n",
			f.listeners, outage.Seconds(), ofoRateWindow.Milliseconds(), peak, peakBound, peakAt.Sub(stopAsked).Seconds(), during, duringBound,
			ofoBack.Seconds(), total, steadyRoutes, back.Seconds(), ofoBack, pulled.Seconds(), r.ListenersLost, r.SilentAtEnd, routed, r)
		if peak > peakBound {
			t.Errorf("storm: %d /route requests in one %v window, over the bound %d (client.PeakReconnects for %d listeners)", peak, ofoRateWindow, peakBound, f.listeners)
		}
		if during > duringBound {
			t.Errorf("storm: %d /route requests while the origins were away, over the bound %d (client.ReconnectsWithin)", during, duringBound)
		}
		if back > ofoBack {
			t.Errorf("storm: audio back %.2fs after the first origin's return (the longest gap %.0f ms over an outage of %v), want every listener within %v", back.Seconds(), r.GapMs.Max, outage.Round(time.Millisecond), ofoBack)
		}
		if r.ListenersLost != 0 || r.SilentAtEnd != 0 || r.Connected != f.listeners {
			t.Errorf("storm: %d lost, %d silent at the end, %d of %d connected", r.ListenersLost, r.SilentAtEnd, r.Connected, f.listeners)
		}
		// The fault reached the listeners: they asked the router again.
		if total <= steadyRoutes {
			t.Errorf("storm: %d /route requests after the stop, no more than %d in 2 s before it: the outage did not reach the listeners", total, steadyRoutes)
		}
	})
	t.Logf("fleet ready after %.1fs, the cases took %.1fs", ready.Sub(begin).Seconds(), time.Since(ready).Seconds())
}

// routerRoutes is the router's own count of /route answers by result
// (relay_router_routes_total), from its /metrics.
func routerRoutes(t *testing.T, routerURL string) map[string]string {
	t.Helper()
	resp, err := http.Get(routerURL + "/metrics")
	if err != nil {
		t.Logf("router /metrics: %v", err)
		return nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]string{}
	for _, l := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(l, `relay_router_routes_total{result="`); ok {
			if k, v, ok := strings.Cut(rest, `"} `); ok {
				out[k] = v
			}
		}
	}
	return out
}
