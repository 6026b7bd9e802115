package provision

import (
	"github.com/relayfleet/relayfleet/internal/text"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// simBox is a Runner that plays a box: its release scripts run in a local
// shell (on a temporary release root), systemctl and the relay endpoints
// asked through onBox are simulated, one relay process per port. Like an
// SSH session, a command on a cancelled context fails.
type simBox struct {
	mu     sync.Mutex
	procs  map[int]*simProc
	events []string
	noShed bool // the relays are an old build without /shed
	// onShed, when set, is told how many sessions a shed closed (after
	// the box's lock is released): their listeners reconnect.
	onShed func(n int)
	// root, when set, is the release root: a restart runs what current
	// points at, or the release its drop-in names (runtimeUnitDir is
	// root/run, read at daemon-reload), and Releases.Running reads it.
	root string
	// loaded are the release drop-ins systemd read at the last
	// daemon-reload, by port.
	loaded map[int]string
}

type simProc struct {
	sessions int
	draining bool
	release  string // what the process runs (a sha), when root is set
}

func newSimBox(sessions map[int]int) *simBox {
	b := &simBox{procs: map[int]*simProc{}}
	for port, n := range sessions {
		b.procs[port] = &simProc{sessions: n}
	}
	return b
}

// installCurrent installs binary on box with rel and makes it current.
func installCurrent(t *testing.T, rel Releases, box Runner, binary []byte) {
	t.Helper()
	ctx := context.Background()
	if _, _, err := rel.Install(ctx, box, binary); err != nil {
		t.Fatal(err)
	}
	if _, err := rel.Activate(ctx, box, Digest(binary)); err != nil {
		t.Fatal(err)
	}
}

func (b *simBox) event(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, fmt.Sprintf(format, args...))
}

func (b *simBox) log() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.events...)
}

func (b *simBox) proc(port int) *simProc {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.procs[port]
}

var (
	onBoxRE   = regexp.MustCompile(`/dev/tcp/127\.0\.0\.1/'?(\d+)'?.*printf '(\w+) (\S+) HTTP/1\.0`)
	unitArgRE = regexp.MustCompile(`relay@(\d+)\.service`)
)

func (b *simBox) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ssh: %w", err)
	}
	unitPort := func() int {
		m := unitArgRE.FindStringSubmatch(cmd)
		if m == nil {
			return 0
		}
		p, _ := strconv.Atoi(m[1])
		return p
	}
	switch {
	case strings.HasPrefix(cmd, "systemctl restart "):
		port := unitPort()
		cur := ""
		if b.root != "" {
			link, _ := os.Readlink(b.root + "/current")
			cur = strings.TrimPrefix(link, "releases/")
		}
		b.mu.Lock()
		if m := dropInReleaseRE.FindStringSubmatch(b.loaded[port]); m != nil {
			cur = m[1]
		}
		p := b.procs[port]
		if p != nil {
			b.events = append(b.events, fmt.Sprintf("restart %d with %d sessions", port, p.sessions))
			p.draining, p.sessions, p.release = false, 0, cur
		}
		b.mu.Unlock()
		return nil, nil
	case strings.Contains(cmd, "readlink /proc/$pid/exe"):
		var out strings.Builder
		b.mu.Lock()
		seen := map[string]bool{}
		for _, m := range unitArgRE.FindAllStringSubmatch(cmd, -1) {
			if seen[m[0]] {
				continue
			}
			seen[m[0]] = true
			port, _ := strconv.Atoi(m[1])
			exe := ""
			if p := b.procs[port]; p != nil && p.release != "" {
				exe = b.root + "/releases/" + p.release + "/relay"
			}
			fmt.Fprintf(&out, "%s\t%s\n", m[0], exe)
		}
		b.mu.Unlock()
		return []byte(out.String()), nil
	case cmd == "systemctl daemon-reload":
		loaded := map[int]string{}
		files, _ := filepath.Glob(b.root + "/run/relay@*.service.d/" + releaseDropIn)
		for _, f := range files {
			port, _ := strconv.Atoi(unitArgRE.FindStringSubmatch(f)[1])
			data, _ := os.ReadFile(f)
			loaded[port] = string(data)
		}
		b.mu.Lock()
		b.loaded = loaded
		b.mu.Unlock()
		return nil, nil
	case strings.HasPrefix(cmd, "systemctl cat "):
		// The template as units renders it, then a loaded drop-in.
		out := "# /etc/systemd/system/relay@.service\n[Unit]\nDescription=relay\n\n[Service]\nType=notify\nExecStart=" + b.root + "/current/relay serve --listen [::]:%i --stateless-reset-secret %d/reset-secret --max-sessions-per-address 0\n"
		b.mu.Lock()
		if d, ok := b.loaded[unitPort()]; ok {
			out += "\n# " + releaseDropInPath(fmt.Sprintf("relay@%d.service", unitPort())) + "\n" + d
		}
		b.mu.Unlock()
		return []byte(out), nil
	case strings.HasPrefix(cmd, "systemctl is-active "):
		return []byte("active\n"), nil
	case strings.HasPrefix(cmd, "systemctl show "):
		body := b.http(unitPort(), "GET", "/stats")
		_, json, _ := strings.Cut(body, "\r\n\r\n")
		return []byte("ActiveState=active\n== stats\n" + json), nil
	case strings.HasPrefix(cmd, "systemctl list-units"):
		var out strings.Builder
		b.mu.Lock()
		for port := range b.procs {
			fmt.Fprintf(&out, "relay@%d.service loaded active running relay\n", port)
		}
		b.mu.Unlock()
		return []byte(out.String()), nil
	}
	if strings.Contains(cmd, "echo '== relayfleet-stats ") {
		// DrainingInstances: each instance's /stats body after its mark.
		var out strings.Builder
		for _, m := range regexp.MustCompile(`echo '== relayfleet-stats (relay@(\d+)\.service)'`).FindAllStringSubmatch(cmd, -1) {
			port, _ := strconv.Atoi(m[2])
			_, body, _ := strings.Cut(b.http(port, "GET", "/stats"), "\r\n\r\n")
			fmt.Fprintf(&out, "== relayfleet-stats %s\n%s\n", m[1], body)
		}
		return []byte(out.String()), nil
	}
	if m := onBoxRE.FindStringSubmatch(cmd); m != nil {
		port, _ := strconv.Atoi(m[1])
		before := b.total()
		out := b.http(port, m[2], m[3])
		if shed := before - b.total(); shed > 0 && b.onShed != nil {
			b.onShed(shed)
		}
		return []byte(out), nil
	}
	if strings.Contains(cmd, runtimeUnitDir) {
		if b.root == "" {
			return nil, errors.New("simBox: runtime units without a root")
		}
		cmd = strings.ReplaceAll(cmd, runtimeUnitDir, b.root+"/run")
	}
	c := exec.CommandContext(ctx, "bash", "-c", cmd)
	c.Stdin = stdin
	out, err := c.Output()
	if b.root != "" {
		out = []byte(strings.ReplaceAll(string(out), b.root+"/run/", runtimeUnitDir+"/"))
	}
	if err != nil {
		return out, fmt.Errorf("%q: %w", firstLine(cmd, nil), err)
	}
	return out, nil
}

// dropInReleaseRE finds the release a release drop-in runs.
var dropInReleaseRE = regexp.MustCompile(`(?m)^ExecStart=\S*/releases/([0-9a-f]{64})/relay`)

func (b *simBox) total() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, p := range b.procs {
		n += p.sessions
	}
	return n
}

// http answers one HTTP/1.0 request to a simulated relay process.
func (b *simBox) http(port int, method, target string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[port]
	if p == nil {
		return ""
	}
	u, _ := url.Parse(target)
	answer := func(status, body string) string {
		return "HTTP/1.0 " + status + "\r\nContent-Type: application/json\r\n\r\n" + body
	}
	switch {
	case method == "GET" && u.Path == "/healthz":
		return "ok\n" // as HealthzOnBox's filter (tail -n1) leaves it
	case method == "GET" && u.Path == "/stats":
		headroom := 100 - p.sessions
		if p.draining {
			headroom = 0
		}
		return answer("200 OK", fmt.Sprintf(`{"sessions": %d, "subscribers": %d, "headroom": %d, "draining": %v, "admitting": %v}`,
			p.sessions, p.sessions, headroom, p.draining, !p.draining))
	case u.Path == "/drain":
		p.draining = method == "POST"
		b.events = append(b.events, fmt.Sprintf("%s /drain %d", method, port))
		return answer("200 OK", "{}")
	case method == "POST" && u.Path == "/shed" && !b.noShed:
		n := p.sessions
		if k, err := strconv.Atoi(u.Query().Get("n")); err == nil {
			n = min(k, p.sessions)
		}
		p.sessions -= n
		b.events = append(b.events, fmt.Sprintf("shed %d: %d at rate %s", port, n, u.Query().Get("rate")))
		return answer("200 OK", fmt.Sprintf(`{"shed": %d, "remaining": %d}`, n, p.sessions))
	}
	return answer("404 Not Found", "not found\n")
}

// fakeRouter serves GET /relays for the simulated box's processes, each
// seen as it was a few polls ago: the router learns of a drain late.
type fakeRouter struct {
	srv  *httptest.Server
	box  *simBox
	lag  int // answers before a change shows
	seen map[int]int
	mu   sync.Mutex
}

func newFakeRouter(t *testing.T, box *simBox, lag int) *fakeRouter {
	r := &fakeRouter{box: box, lag: lag, seen: map[int]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		defer r.mu.Unlock()
		type entry struct {
			URL      string `json:"url"`
			Healthy  bool   `json:"healthy"`
			Draining bool   `json:"draining"`
			Headroom int    `json:"headroom"`
		}
		var out []entry
		box.mu.Lock()
		for port, p := range box.procs {
			headroom := 100
			if p.draining {
				// Seen only after lag answers since the drain.
				r.seen[port]++
				if r.seen[port] > r.lag {
					headroom = 0
				}
			} else {
				r.seen[port] = 0
			}
			out = append(out, entry{URL: fmt.Sprintf("https://10.0.0.9:%d/", port), Healthy: true, Headroom: headroom})
		}
		box.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"relays": out})
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *fakeRouter) routed(ctx context.Context, instance string) (bool, bool, error) {
	port, err := InstancePort(instance)
	if err != nil {
		return false, false, err
	}
	routed, known, err := RouterRoutes(ctx, nil, r.srv.URL, "10.0.0.9", port)
	if err == nil && !routed && known {
		r.box.event("router stopped routing to %d", port)
	}
	return routed, known, err
}

// TestRolloutMakeBeforeBreak: each process is drained, then shed only
// once the router no longer routes to it, then restarted with no session
// left, then made admitting again; one process at a time.
func TestRolloutMakeBeforeBreak(t *testing.T) {
	t.Parallel()
	box := newSimBox(map[int]int{4443: 60, 4444: 40})
	router := newFakeRouter(t, box, 3)
	rel := Releases{Root: t.TempDir()}
	box.root = rel.Root // the canary's drop-in lives there
	ctx := context.Background()
	old := []byte("#!/bin/sh\necho old\n")
	installCurrent(t, rel, box, old)
	m := Move{Run: box, Routed: router.routed, ShedRate: 50, Poll: time.Millisecond, RouterWait: time.Minute, EmptyWait: time.Minute}
	var reports []MoveReport
	drain := func(ctx context.Context, inst string) error {
		rep, err := m.Out(ctx, inst)
		reports = append(reports, rep)
		return err
	}
	undrain := func(ctx context.Context, inst string) error { return DrainOnBox(ctx, box, inst, false) }
	healthy := func(context.Context, Runner, string) error { return nil }
	r, err := Rollout(ctx, box, rel, []byte("#!/bin/sh\necho new\n"), []string{"relay@4443.service", "relay@4444.service"}, healthy, drain, undrain)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Restarted) != 2 {
		t.Fatalf("restarted %v", r.Restarted)
	}
	want := []string{
		"POST /drain 4443", "router stopped routing to 4443", "shed 4443: 60 at rate 50", "restart 4443 with 0 sessions", "DELETE /drain 4443",
		"POST /drain 4444", "router stopped routing to 4444", "shed 4444: 40 at rate 50", "restart 4444 with 0 sessions", "DELETE /drain 4444",
	}
	if got := box.log(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if reports[0].Sessions != 60 || reports[0].Shed != 60 || reports[0].Left != 0 || reports[1].Shed != 40 {
		t.Errorf("reports %+v", reports)
	}
}

// TestMoveWithoutRouterWaitsBlind: without a router, the shed waits the
// blind wait (two router polls) after the drain; a relay build without
// /shed is restarted as before, with its sessions.
func TestMoveWithoutRouterWaitsBlind(t *testing.T) {
	box := newSimBox(map[int]int{4443: 7})
	var drainedAt, shedAt time.Time
	m := Move{
		Run:       box,
		BlindWait: 300 * time.Millisecond,
		Drain: func(ctx context.Context, inst string) error {
			drainedAt = time.Now()
			return DrainOnBox(ctx, box, inst, true)
		},
		Shed: func(ctx context.Context, inst, n string, rate int) (ShedResult, error) {
			shedAt = time.Now()
			return ShedOnBox(ctx, box, inst, n, rate)
		},
	}
	rep, err := m.Out(context.Background(), "relay@4443.service")
	if err != nil {
		t.Fatal(err)
	}
	if d := shedAt.Sub(drainedAt); d < 300*time.Millisecond {
		t.Errorf("shed %v after the drain, want at least the blind wait", d)
	}
	if rep.Shed != 7 || rep.Left != 0 || box.proc(4443).sessions != 0 {
		t.Errorf("report %+v", rep)
	}

	old := newSimBox(map[int]int{4443: 5})
	old.noShed = true
	rep, err = Move{Run: old, BlindWait: time.Millisecond}.Out(context.Background(), "relay@4443.service")
	if err != nil || !rep.NoShed || rep.Left != 5 {
		t.Fatalf("old build: %+v, %v; want NoShed with 5 left", rep, err)
	}
}

// TestRolloutInterruptedRollsBackOnAFreshContext: Ctrl-C (ctx cancelled)
// during the second process's move: the box goes back to its release, the
// process already moved restarts on it, and the drained one admits again,
// although the rollout's own context is dead.
func TestRolloutInterruptedRollsBackOnAFreshContext(t *testing.T) {
	t.Parallel()
	box := newSimBox(map[int]int{4443: 3, 4444: 3})
	rel := Releases{Root: t.TempDir()}
	box.root = rel.Root // the canary's drop-in lives there
	old := []byte("#!/bin/sh\necho old\n")
	installCurrent(t, rel, box, old)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	drain := func(ctx context.Context, inst string) error {
		if err := DrainOnBox(ctx, box, inst, true); err != nil {
			return err
		}
		if inst == "relay@4444.service" {
			cancel() // the operator presses Ctrl-C while it drains
			return ctx.Err()
		}
		return nil
	}
	undrain := func(ctx context.Context, inst string) error { return DrainOnBox(ctx, box, inst, false) }
	healthy := func(context.Context, Runner, string) error { return nil }
	r, err := Rollout(ctx, box, rel, []byte("#!/bin/sh\necho new\n"), []string{"relay@4443.service", "relay@4444.service"}, healthy, drain, undrain)
	if err == nil || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "rolled back to") {
		t.Fatalf("err %v, want cancelled and rolled back", err)
	}
	if !r.RolledBack {
		t.Error("not marked rolled back")
	}
	cur, _, err := rel.Current(context.Background(), box)
	if err != nil || cur != Digest(old) {
		t.Fatalf("current %s, %v; want the old release back", text.ShortSHA(cur), err)
	}
	if box.proc(4444).draining {
		t.Error("relay@4444 was left draining")
	}
	restarts := 0
	for _, e := range box.log() {
		if strings.HasPrefix(e, "restart 4443") {
			restarts++
		}
	}
	if restarts != 2 {
		t.Errorf("relay@4443 restarted %d times, want 2 (new release, then back): %v", restarts, box.log())
	}
}

func TestPlanRebalance(t *testing.T) {
	procs := []ProcLoad{{Box: "a", Unit: "relay@4443.service", Sessions: 230}, {Box: "a", Unit: "relay@4444.service", Sessions: 10},
		{Box: "b", Unit: "relay@4443.service", Sessions: 0}, {Box: "b", Unit: "relay@4444.service", Sessions: 0}}
	mean, plans := PlanRebalance(procs, 0.2)
	if mean != 60 || len(plans) != 1 || plans[0].Box != "a" || plans[0].Unit != "relay@4443.service" || plans[0].Shed != 170 {
		t.Fatalf("mean %v plans %+v; want a's 4443 to shed 170", mean, plans)
	}
	// Within 20% of the mean: nothing to do.
	if _, plans := PlanRebalance([]ProcLoad{{Sessions: 65}, {Sessions: 55}}, 0.2); len(plans) != 0 {
		t.Errorf("balanced fleet: plans %+v", plans)
	}
	if !Balanced([]ProcLoad{{Sessions: 71}, {Sessions: 60}, {Sessions: 50}}, 0.2) || Balanced(procs, 0.2) {
		t.Error("Balanced")
	}
	if _, plans := PlanRebalance(nil, 0.2); plans != nil {
		t.Error("empty fleet")
	}
}

// TestRebalance: after a rollout one process holds 230 listeners and the
// other three 10, 0 and 0; the full one sheds what it holds above the
// mean, its listeners reconnect (here: to the emptiest process, as the
// router sends them where the headroom is) and the fleet ends within 20%
// of its mean.
func TestRebalance(t *testing.T) {
	a, b := newSimBox(map[int]int{4443: 230, 4444: 10}), newSimBox(map[int]int{4443: 0, 4444: 0})
	boxes := []*simBox{a, b}
	reconnect := func(n int) {
		go func() { // the listeners come back over the next moments
			for range n {
				var best *simProc
				var bestBox *simBox
				for _, bx := range boxes {
					bx.mu.Lock()
					for _, p := range bx.procs {
						if best == nil || p.sessions < best.sessions {
							best, bestBox = p, bx
						}
					}
					bx.mu.Unlock()
				}
				bestBox.mu.Lock()
				best.sessions++
				bestBox.mu.Unlock()
			}
		}()
	}
	a.onShed, b.onShed = reconnect, reconnect
	before, after, err := Rebalance(context.Background(), []Box{{"a", a}, {"b", b}}, 0.2, 20, time.Minute, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 4 || !Balanced(after, 0.2) {
		t.Fatalf("before %+v after %+v: want balanced within 20%%", before, after)
	}
	if got := strings.Join(a.log(), "\n"); got != "shed 4443: 170 at rate 20" {
		t.Errorf("a's events: %s", got)
	}
	if len(b.log()) != 0 {
		t.Errorf("b shed: %v", b.log())
	}
}

// TestBurstDrain: every process of every box is drained before any is
// shed, and the shed waits for the router; an old build without /shed is
// only drained.
func TestBurstDrain(t *testing.T) {
	a, b := newSimBox(map[int]int{4443: 5, 4444: 6}), newSimBox(map[int]int{4443: 7})
	var drained, shed []time.Time
	var mu sync.Mutex
	record := func(bx *simBox) {
		bx.onShed = func(int) { mu.Lock(); shed = append(shed, time.Now()); mu.Unlock() }
	}
	record(a)
	record(b)
	start := time.Now()
	if err := BurstDrain(context.Background(), []Box{{"a", a}, {"b", b}}, 200*time.Millisecond, 50); err != nil {
		t.Fatal(err)
	}
	for _, bx := range []*simBox{a, b} {
		for _, e := range bx.log() {
			if strings.HasPrefix(e, "POST /drain") {
				drained = append(drained, start)
			}
		}
		for port, p := range bx.procs {
			if !p.draining || p.sessions != 0 {
				t.Errorf("process %d: draining %v with %d sessions", port, p.draining, p.sessions)
			}
		}
	}
	if len(drained) != 3 || len(shed) != 3 {
		t.Fatalf("%d drained, %d shed; want 3 and 3", len(drained), len(shed))
	}
	for _, at := range shed {
		if at.Sub(start) < 200*time.Millisecond {
			t.Errorf("shed %v after the start, before the router wait", at.Sub(start))
		}
	}
	if got := strings.Join(b.log(), "\n"); got != "POST /drain 4443\nshed 4443: 7 at rate 50" {
		t.Errorf("b's events:\n%s", got)
	}
	old := newSimBox(map[int]int{4443: 4})
	old.noShed = true
	if err := BurstDrain(context.Background(), []Box{{"old", old}}, time.Millisecond, 50); err != nil {
		t.Fatalf("old build: %v", err)
	}
	if p := old.proc(4443); !p.draining || p.sessions != 4 {
		t.Errorf("old build: %+v", p)
	}
}

// TestRebalanceAgain: the first pass's listeners all land on one process
// (as when the router's view was stale), which leaves the fleet off its
// mean; the next pass sheds from that one and the fleet ends balanced.
func TestRebalanceAgain(t *testing.T) {
	defer func(d time.Duration) { rebalanceSettle = d }(rebalanceSettle)
	rebalanceSettle = 100 * time.Millisecond
	a := newSimBox(map[int]int{4443: 200, 4444: 40, 4445: 0})
	pass := 0
	a.onShed = func(n int) {
		a.mu.Lock()
		defer a.mu.Unlock()
		pass++
		if pass == 1 {
			a.procs[4444].sessions += n // all to one process
			return
		}
		for range n { // then to the emptiest
			best := a.procs[4443]
			for _, p := range a.procs {
				if p.sessions < best.sessions {
					best = p
				}
			}
			best.sessions++
		}
	}
	before, after, err := Rebalance(context.Background(), []Box{{"a", a}}, 0.2, 1000, time.Minute, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if !Balanced(after, 0.2) || len(before) != 3 {
		t.Fatalf("before %+v after %+v: want balanced", before, after)
	}
	sheds := 0
	for _, e := range a.log() {
		if strings.HasPrefix(e, "shed ") {
			sheds++
		}
	}
	if sheds < 2 {
		t.Errorf("%d sheds, want a second pass: %v", sheds, a.log())
	}
}

// TestShedListeners: at most n listeners are told to move, across the
// boxes' processes, none of which is marked draining; BoxHeadroom sums
// the processes' headroom, a draining one's as 0.
func TestShedListeners(t *testing.T) {
	a, b := newSimBox(map[int]int{4443: 5}), newSimBox(map[int]int{4443: 7})
	shed, err := ShedListeners(context.Background(), []Box{{"a", a}, {"b", b}}, 8, 50)
	if err != nil {
		t.Fatal(err)
	}
	if left := a.proc(4443).sessions + b.proc(4443).sessions; shed != 8 || left != 4 {
		t.Fatalf("shed %d, %d left; want 8 and 4", shed, left)
	}
	for _, bx := range []*simBox{a, b} {
		if bx.proc(4443).draining {
			t.Errorf("a process was marked draining: %v", bx.log())
		}
	}
	if got := strings.Join(b.log(), "\n"); got != "shed 4443: 3 at rate 50" {
		t.Errorf("b's events:\n%s", got)
	}
	c := newSimBox(map[int]int{4443: 30, 4444: 10})
	c.proc(4444).draining = true
	if room, err := BoxHeadroom(context.Background(), c); err != nil || room != 70 {
		t.Fatalf("headroom %d, %v; want 70 (the draining process counts 0)", room, err)
	}
}
