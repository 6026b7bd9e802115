//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

// The event end-to-end: a steady lab fleet through fleet up, then an
// event walked through its life by fleet events reconcile on a simulated
// clock, with the real router, real listeners (more at the end than the
// steady box has room for: the end sheds only into its room), a
// reconcile killed mid-teardown and an orphan box for the sweep to find. Its own lab
// (bridge rfevt0, subnet 10.231.89.0/24).
const (
	evLabDir = "/var/lib/relayfleet/lab-events"
	evBridge = "rfevt0"
	evSubnet = "10.231.89.0/24"
)

// evFile is the lifecycle tests' events file: a peak half a small box
// above what their one steady small box carries, so that the event gets
// exactly one burst box whatever the shipped calibration says.
func evFile(t *testing.T) string {
	per := e2eSmallBoxCapacity(t)
	return e2eEventFile("show", per+per/2)
}

// routerRelay is one entry of the router's GET /relays.
type routerRelay struct {
	URL        string `json:"url"`
	Draining   bool   `json:"draining"`
	LastResort bool   `json:"last_resort"`
	Healthy    bool   `json:"healthy"`
}

// steadyCap is the sessions the lifecycle's steady relay admits (relay
// serve --max-listeners): its publisher and steadyCap-1 listeners, fewer
// than the event has at its end.
const steadyCap = 8

// capRelay restarts the relay process on port of a lab box with
// --max-listeners n.
func capRelay(t *testing.T, l *lab.Lab, box string, port, n int) {
	t.Helper()
	var out strings.Builder
	cmd := fmt.Sprintf("sed -i 's/ --max-sessions-per-address \\([0-9]*\\)/ --max-sessions-per-address \\1 --max-listeners %d/' /etc/systemd/system/relay@.service && "+
		"grep -q -- '--max-listeners %d' /etc/systemd/system/relay@.service && systemctl daemon-reload && systemctl restart relay@%d.service", n, n, port)
	if err := l.Run(context.Background(), box, cmd, nil, &out, &out); err != nil {
		t.Fatalf("cap the relay on %s: %v\n%s", box, err, out.String())
	}
}

// routerRefused is the router's count of /route answers without a relay
// (503: no relay had headroom), from its /metrics.
func routerRefused(t *testing.T, port int) int64 {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, `relay_router_routes_total{result="unavailable"} `); ok {
			var n float64
			fmt.Sscan(v, &n)
			return int64(n)
		}
	}
	return 0 // none yet: the counter is exported once it counts
}

func TestE2EEventLifecycle(t *testing.T) {
	t.Parallel() // its own lab and fleet: see e2eLab
	e := newE2ELab(t, evLabDir, evBridge, evSubnet, nil)
	cli, work, relayBin, state := e.cli, e.work, e.relayBin, e.state
	inv := filepath.Join(work, "lab.yaml")
	evPath := filepath.Join(work, "events.yaml")
	writeInventory(t, inv, 1, "small")
	if err := os.WriteFile(evPath, []byte(evFile(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	l, ctx := e.lab, context.Background()
	list := e.boxes
	eventBoxes := func() []lab.Box { return list(map[string]string{"fleet": "lab", "event": "show"}) }
	fleetCmd := func(args ...string) *exec.Cmd { return e.cmd(ctx, args...) }
	fleet := e.fleet
	reconcile := func(at time.Time) string {
		t.Helper()
		return fleet("events", "reconcile", "--events", evPath, "--now", at.UTC().Format(time.RFC3339))
	}
	record := func() *events.Record { return e.record("show") }

	// The steady fleet: one box, through fleet up.
	fleet("up", "--inventory", inv)
	steady := list(map[string]string{"fleet": "lab", "tier": "steady"})
	if len(steady) != 1 {
		t.Fatalf("%d steady boxes, want 1", len(steady))
	}
	steadyBox := steady[0]
	capRelay(t, l, steadyBox.Name, 4443, steadyCap)

	// The real router, on the relays file fleet keeps.
	port := e.startRouter(ctx)
	routerState := func(want func([]routerRelay) bool) []routerRelay {
		t.Helper()
		var rs []routerRelay
		if !testutil.PollEvery(15*time.Second, 200*time.Millisecond, func() bool {
			var doc struct{ Relays []routerRelay }
			if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/relays", port)); err == nil {
				json.NewDecoder(resp.Body).Decode(&doc)
				resp.Body.Close()
			}
			rs = doc.Relays
			return want(rs)
		}) {
			t.Fatalf("router state %+v did not become what the step wants", rs)
		}
		return rs
	}
	steadyURL := fmt.Sprintf("http://%s:4443/", steadyBox.Address)
	onlySteady := func(rs []routerRelay) bool { return len(rs) == 1 && rs[0].URL == steadyURL && rs[0].Healthy }

	start := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	end := start.Add(time.Hour)

	// 1. Before the lead time: nothing of the event exists.
	reconcile(start.Add(-11 * time.Minute))
	if rec := record(); rec.Phase != events.Scheduled || len(eventBoxes()) != 0 {
		t.Fatalf("before the lead time: phase %s, %d event boxes", rec.Phase, len(eventBoxes()))
	}
	routerState(onlySteady)

	// 2. Inside the lead time: one burst box, converged and routed.
	reconcile(start.Add(-9 * time.Minute))
	rec := record()
	if rec.Phase != events.Up || len(rec.Hosts) != 1 || len(eventBoxes()) != 1 {
		t.Fatalf("in the lead time: phase %s, %d hosts, %d event boxes", rec.Phase, len(rec.Hosts), len(eventBoxes()))
	}
	burst := eventBoxes()[0]
	if burst.Labels["tier"] != "burst" {
		t.Fatalf("burst box labels %v", burst.Labels)
	}
	burstURL := fmt.Sprintf("http://%s:4443/", burst.Address)
	routerState(func(rs []routerRelay) bool {
		return len(rs) == 2 && rs[0].URL == steadyURL && rs[1].URL == burstURL && rs[1].Healthy && !rs[1].Draining
	})
	// A second reconcile in the window changes nothing.
	reconcile(start.Add(-8 * time.Minute))
	if bs := eventBoxes(); len(bs) != 1 || bs[0].Name != burst.Name {
		t.Fatalf("second reconcile changed the event's boxes: %v", bs)
	}

	// Listeners through the router, at least one of them on the burst
	// box, so the drain has someone to move. The burst box is not an edge
	// of the steady one here: the room is published to both.
	lctx, stopListen := context.WithCancel(ctx)
	defer stopListen()
	// Publishing needs a token signed with the fleet's key, from a file.
	tokOut, err := fleetCmd("token", "--inventory", inv, "--publish", "live/", "--state-dir", state, "--pulumi", cli).Output()
	if err != nil {
		t.Fatalf("fleet token: %v", err)
	}
	tokFile := filepath.Join(work, "publish.jwt")
	if err := os.WriteFile(tokFile, tokOut, 0o600); err != nil {
		t.Fatal(err)
	}
	started := 0
	start1 := func(args ...string) *testutil.Proc {
		t.Helper()
		started++
		c := exec.CommandContext(lctx, relayBin, args...)
		c.Stdout = io.Discard
		return testutil.Start(t, fmt.Sprintf("%s%d", args[0], started), c)
	}
	// The lab boxes are containers on this machine's bridge: fetching
	// their certificate hashes over plain HTTP crosses no other network.
	for _, u := range []string{steadyURL, burstURL} {
		start1("publish", "--name", "live/show", "--paced", "--trust-http-hash", "--token-file", tokFile, u)
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
	routerURL := fmt.Sprintf("http://127.0.0.1:%d/", port)
	var listeners []*testutil.Proc
	for len(listeners) < 4 && subscribers(burstURL) < 1 {
		listeners = append(listeners, start1("listen", "--router", routerURL, "--name", "live/show"))
		n := int64(len(listeners))
		testutil.WaitFor(t, 20*time.Second, "the listeners to subscribe", func() bool { return subscribers(steadyURL)+subscribers(burstURL) >= n })
	}
	if subscribers(burstURL) < 1 {
		t.Fatalf("the router sent none of %d listeners to the burst box", len(listeners))
	}
	// More listeners than the steady relay has room for: the router sends
	// them to the burst box, which has the most headroom. b leaves after
	// the end, so that the rest fit the steady relay.
	la := startLoadgen(t, relayBin, filepath.Join(work, "loadgen-a"), routerURL, 3)
	lb := startLoadgen(t, relayBin, filepath.Join(work, "loadgen-b"), routerURL, steadyCap)
	all := int64(len(listeners) + 3 + steadyCap)
	testutil.WaitFor(t, 30*time.Second, "every listener subscribed", func() bool { return subscribers(steadyURL)+subscribers(burstURL) >= all })
	reconcile(start.Add(30 * time.Minute))
	if rec := record(); len(rec.Samples) == 0 || rec.Samples[len(rec.Samples)-1].Listeners < 1 {
		t.Fatalf("during the event: samples %+v, want the listener counted", rec.Samples)
	}

	// An orphan: a box of the event that no stack knows.
	if _, err := l.Create(ctx, lab.Spec{Name: "orphan-1", Shape: lab.Small, Labels: map[string]string{"fleet": "lab", "tier": "burst", "event": "show"}}); err != nil {
		t.Fatal(err)
	}

	// 3. After the end, more listeners on the burst box than the steady
	// relay has room for: only as many as fit are told to move; the box
	// stays, last resort in the router's list, and says so.
	endRun := time.Now()
	out := reconcile(end.Add(time.Minute))
	rec = record()
	ov := rec.Overrun
	kept := false
	for _, b := range eventBoxes() { // and the orphan
		kept = kept || b.Name == burst.Name
	}
	if rec.Phase != events.Draining || ov == nil || ov.Forced || !kept || ov.AtEndListeners <= ov.AtEndRoom || ov.Listeners < 1 {
		t.Fatalf("at the end: phase %s overrun %+v, burst box kept %v; want it kept with listeners the steady relay has no room for\n%s", rec.Phase, ov, kept, out)
	}
	status, err := fleetCmd("events", "status", "--state-dir", state, "--pulumi", cli).CombinedOutput()
	if !strings.Contains(out, "overrunning: ") || !strings.Contains(string(status), "overrunning: ") {
		t.Errorf("the reconcile or fleet events status (%v) does not say the event is overrunning:\n%s\n%s", err, out, status)
	}
	routerState(func(rs []routerRelay) bool {
		return len(rs) == 2 && rs[1].URL == burstURL && rs[1].LastResort && !rs[1].Draining
	})
	// The load falls (b's listeners leave): the rest fit, and the next
	// run moves them, drains the relays and tears the box down, killed
	// mid-way.
	if r := lb.stop(t); r.ListenersLost != 0 {
		t.Errorf("loadgen b: %d listeners lost", r.ListenersLost)
	}
	p, lines := testutil.StartLines(t, "killed-reconcile", fleetCmd(e.withFlags("events", "reconcile", "--events", evPath, "--now", end.Add(2*time.Minute).Format(time.RFC3339))...))
	killed, drained := false, false
	for line := range lines {
		t.Logf("killed run: %s", line)
		if strings.Contains(line, "action=drained") {
			drained = true
		}
		// Kill the reconcile, Pulumi and the provider plugin together
		// once Pulumi starts deleting the event's resources.
		if !killed && strings.Contains(line, "show-1 deleting") {
			p.Kill()
			killed = true
		}
	}
	p.Wait()
	if !killed || !drained {
		t.Fatalf("the reconcile never reached its destroy step after the drain (drained %v)", drained)
	}
	// Every listener moved to the steady box and listens there.
	left := int64(len(listeners) + 3)
	testutil.WaitFor(t, 20*time.Second, "every listener on the steady box", func() bool { return subscribers(steadyURL) == left })
	if rec := record(); rec.Phase != events.Destroying {
		t.Fatalf("after the kill: phase %s, want destroying", rec.Phase)
	}
	// The killed run's lease stays until it expires (the timer's next
	// run takes it over then); the operator clears it at once with fleet
	// unlock, which finds its holder dead.
	if out, err := fleetCmd("unlock", "--inventory", inv, "--state-dir", e.state, "--pulumi", e.cli).CombinedOutput(); err != nil {
		t.Fatalf("fleet unlock after the killed reconcile: %v\n%s", err, out)
	}
	out = reconcile(end.Add(3 * time.Minute))
	rec = record()
	if rec.Phase != events.Gone || rec.Remaining != 0 {
		t.Fatalf("after the resumed teardown: phase %s, %d remaining\n%s", rec.Phase, rec.Remaining, out)
	}
	if !strings.Contains(out, "action=repair") || !strings.Contains(out, "orphan-1") {
		t.Errorf("the resumed run did not repair the stack or report the orphan:\n%s", out)
	}
	if bs := eventBoxes(); len(bs) != 0 {
		t.Fatalf("%d boxes of the event remain: %v", len(bs), bs)
	}
	goneAfter := time.Since(endRun)
	routerState(onlySteady)
	ra := la.stop(t)
	refused := routerRefused(t, port)
	t.Logf("end shed into room: %d listeners on the burst box at the end, steady room %d, refused by the router %d, lost %d, burst box gone %.0fs after the end's first reconcile began",
		ov.AtEndListeners, ov.AtEndRoom, refused, ra.ListenersLost, goneAfter.Seconds())
	if refused != 0 || ra.ListenersLost != 0 {
		t.Errorf("the router refused %d listeners, loadgen a lost %d; want 0", refused, ra.ListenersLost)
	}
	// The steady box was never touched.
	now := list(map[string]string{"fleet": "lab", "tier": "steady"})
	if len(now) != 1 || now[0].Name != steadyBox.Name || now[0].Address != steadyBox.Address {
		t.Fatalf("steady boxes changed: %v -> %v", steady, now)
	}
	if _, err := os.Stat(filepath.Join(state, "backend", ".pulumi", "stacks", program.Project, "lab-event-show.json")); err == nil {
		t.Error("the event's stack was not removed")
	}
	rep := fleet("events", "report", "--event", "show", "--state-dir", state)
	if !strings.Contains(rep, "box-hours") || rec.Report == nil || rec.Report.BoxHours <= 0 || rec.Report.PeakListeners < 1 {
		t.Errorf("report %+v", rec.Report)
	}
	stopListen()
	fleet("destroy", "--inventory", inv, "--yes")
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
