package provision

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/relay/router"
)

// sharedRoot is the release root a FleetRollout is given; each fleetBox
// maps it to a directory of its own, as each real box has its own
// /opt/relayfleet.
const sharedRoot = "/relayfleet-fleet-rollout-test"

// fleetBox is one box of a simulated fleet: a simBox with its own release
// root. intercept, when set, sees every command first and may answer it.
type fleetBox struct {
	*simBox
	name      string
	intercept func(ctx context.Context, cmd string) (out []byte, err error, handled bool)
	// fleet, when set, records the box's restarts in fleet order.
	fleet *fleetLog
}

// fleetLog records events across the boxes of a fleet in order.
type fleetLog struct {
	mu     sync.Mutex
	events []string
}

func (l *fleetLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *fleetLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

func (b *fleetBox) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	if b.intercept != nil {
		if out, err, ok := b.intercept(ctx, cmd); ok {
			return out, err
		}
	}
	if b.fleet != nil && strings.HasPrefix(cmd, "systemctl restart ") {
		b.fleet.add(b.name + " " + strings.TrimPrefix(cmd, "systemctl restart "))
	}
	out, err := b.simBox.Run(ctx, strings.ReplaceAll(cmd, sharedRoot, b.root), stdin)
	return []byte(strings.ReplaceAll(string(out), b.root, sharedRoot)), err
}

var (
	oldBuild = []byte("#!/bin/sh\necho old\n")
	newBuild = []byte("#!/bin/sh\necho new\n")
)

// newFleetBox is a box whose processes (port: sessions) run the old
// build, current pointing at it.
func newFleetBox(t *testing.T, name string, sessions map[int]int, log *fleetLog) *fleetBox {
	t.Helper()
	b := &fleetBox{simBox: newSimBox(sessions), name: name, fleet: log}
	b.root = t.TempDir()
	installCurrent(t, Releases{Root: sharedRoot}, b, oldBuild)
	for _, p := range b.procs {
		p.release = Digest(oldBuild)
	}
	return b
}

// current is the release the box's current points at.
func (b *fleetBox) current(t *testing.T) string {
	t.Helper()
	cur, _, err := Releases{Root: sharedRoot}.Current(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// runs reports whether every process of the box runs release.
func (b *fleetBox) runs(release string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.procs {
		if p.release != release {
			return false
		}
	}
	return true
}

func fleetTargets(boxes ...*fleetBox) []Target {
	ts := make([]Target, len(boxes))
	for i, b := range boxes {
		ts[i] = Target{Host: Host{Name: b.name, Address: fmt.Sprintf("10.0.0.%d", i+1)}, Run: b}
	}
	return ts
}

// fewHealthTries makes a failing health check fail after three quick
// tries instead of 25.
func fewHealthTries(t *testing.T) {
	tries, retry := healthTries, healthRetry
	healthTries, healthRetry = 3, 10*time.Millisecond
	t.Cleanup(func() { healthTries, healthRetry = tries, retry })
}

// testFleetRollout is a fleet rollout of newBuild with short waits and no
// router (a blind wait of two 5 ms polls).
func testFleetRollout() *FleetRollout {
	return &FleetRollout{
		Binary:       newBuild,
		Releases:     Releases{Root: sharedRoot},
		Boxes:        1,
		ListenerWait: 5 * time.Second,
		RouterPoll:   5 * time.Millisecond,
		ShedRate:     DefaultShedRate,
		ShedWait:     time.Second,
		poll:         10 * time.Millisecond,
	}
}

// TestFleetRolloutOrder: one box at a time, the boxes go in the order
// given, each process restarted once, on the new build; the report
// counts them moved.
func TestFleetRolloutOrder(t *testing.T) {
	log := &fleetLog{}
	a := newFleetBox(t, "a", map[int]int{4443: 0, 4444: 0}, log)
	b := newFleetBox(t, "b", map[int]int{4443: 0}, log)
	c := newFleetBox(t, "c", map[int]int{4443: 0, 4444: 0}, log)
	fr := testFleetRollout()
	var done []string
	fr.Done = func(o BoxRollout) { done = append(done, o.Host) }
	rep, err := fr.Run(context.Background(), fleetTargets(a, b, c))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a 'relay@4443.service'", "a 'relay@4444.service'", "b 'relay@4443.service'", "c 'relay@4443.service'", "c 'relay@4444.service'"}
	if got := log.all(); !reflect.DeepEqual(got, want) {
		t.Errorf("restarts %q, want %q", got, want)
	}
	if !reflect.DeepEqual(done, []string{"a", "b", "c"}) {
		t.Errorf("boxes ended in the order %v", done)
	}
	if rep.Moved != 3 || rep.Failed != 0 || rep.Skipped != 0 || rep.Rebalanced {
		t.Errorf("report %+v", rep)
	}
	for _, x := range []*fleetBox{a, b, c} {
		if cur := x.current(t); cur != Digest(newBuild) || !x.runs(Digest(newBuild)) {
			t.Errorf("%s: current %s, processes %v", x.name, text.ShortSHA(cur), x.procs)
		}
	}
	// Again: every box is on it already, nothing restarts, nothing moved.
	rep, err = fr.Run(context.Background(), fleetTargets(a, b, c))
	if err != nil || rep.Moved != 0 || len(log.all()) != len(want) {
		t.Errorf("second run: %+v, %v; restarts %q", rep, err, log.all())
	}
}

// TestFleetRolloutBoxesAtOnce: with Boxes 2, the second box starts while
// the first is still moving its process out, and the third only once one
// of them ended.
func TestFleetRolloutBoxesAtOnce(t *testing.T) {
	testutil.NoLeaks(t) // Run returns once every box it started has ended
	a := newFleetBox(t, "a", map[int]int{4443: 0}, nil)
	b := newFleetBox(t, "b", map[int]int{4443: 0}, nil)
	c := newFleetBox(t, "c", map[int]int{4443: 0}, nil)
	bStarted := make(chan struct{})
	var once sync.Once
	var cEarly atomic.Bool
	// A box's own rollout is what touches its releases (every box's
	// rollout reads the listeners of all).
	b.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
		if strings.Contains(cmd, sharedRoot) {
			once.Do(func() { close(bStarted) })
		}
		return nil, nil, false
	}
	var aDone atomic.Bool
	a.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
		if strings.Contains(cmd, "POST /drain") {
			select {
			case <-bStarted:
			case <-time.After(10 * time.Second):
				return nil, errors.New("box b did not start while box a drained"), true
			}
		}
		return nil, nil, false
	}
	c.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
		if strings.Contains(cmd, sharedRoot) && !aDone.Load() {
			cEarly.Store(true)
		}
		return nil, nil, false
	}
	fr := testFleetRollout()
	fr.Boxes = 2
	var mu sync.Mutex
	fr.Done = func(o BoxRollout) {
		mu.Lock()
		defer mu.Unlock()
		if o.Host == "a" || o.Host == "b" {
			aDone.Store(true)
		}
	}
	rep, err := fr.Run(context.Background(), fleetTargets(a, b, c))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Moved != 3 {
		t.Errorf("report %+v", rep)
	}
	if cEarly.Load() {
		t.Error("box c started while two boxes were rolling")
	}
	// One at a time: box a waits for b, which never comes.
	a2 := newFleetBox(t, "a", map[int]int{4443: 0}, nil)
	b2 := newFleetBox(t, "b", map[int]int{4443: 0}, nil)
	never := make(chan struct{})
	a2.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
		if strings.Contains(cmd, "POST /drain") {
			select {
			case <-never:
			case <-time.After(300 * time.Millisecond):
			}
		}
		return nil, nil, false
	}
	var bEarly atomic.Bool
	var a2Done atomic.Bool
	b2.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
		if strings.Contains(cmd, sharedRoot) && !a2Done.Load() {
			bEarly.Store(true)
		}
		return nil, nil, false
	}
	fr = testFleetRollout()
	fr.Done = func(o BoxRollout) {
		if o.Host == "a" {
			a2Done.Store(true)
		}
	}
	if _, err := fr.Run(context.Background(), fleetTargets(a2, b2)); err != nil {
		t.Fatal(err)
	}
	if bEarly.Load() {
		t.Error("with Boxes 1, box b started before box a ended")
	}
}

// TestFleetRolloutStopsAfterAFailure: the second box's new build fails
// its health check: that box rolls back to the old build, the third is
// not touched, and the first, which had finished, is moved back to the
// old build after it, make before break.
func TestFleetRolloutStopsAfterAFailure(t *testing.T) {
	testutil.NoLeaks(t) // Run returns once every box it started has ended
	fewHealthTries(t)
	log := &fleetLog{}
	a := newFleetBox(t, "a", map[int]int{4443: 0, 4444: 0}, log)
	b := newFleetBox(t, "b", map[int]int{4443: 0, 4444: 0}, log)
	c := newFleetBox(t, "c", map[int]int{4443: 0}, log)
	b.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
		if m := onBoxRE.FindStringSubmatch(cmd); m != nil && m[3] == "/healthz" && m[1] == "4444" && b.proc(4444).release == Digest(newBuild) {
			return []byte("down\n"), nil, true
		}
		return nil, nil, false
	}
	fr := testFleetRollout()
	var outcomes []BoxRollout
	fr.Done = func(o BoxRollout) { outcomes = append(outcomes, o) }
	rep, err := fr.Run(context.Background(), fleetTargets(a, b, c))
	if !errors.Is(err, ErrBoxesFailed) || !strings.Contains(err.Error(), "1 of 3 boxes failed, 1 rolled back after it, 1 not started") {
		t.Fatalf("err %v, want 1 of 3 failed", err)
	}
	if rep.Failed != 1 || rep.Skipped != 1 || rep.Moved != 0 || !reflect.DeepEqual(rep.RolledBack, []string{"a"}) {
		t.Errorf("report %+v", rep)
	}
	if len(outcomes) != 3 || outcomes[1].Host != "b" || !outcomes[1].Result.RolledBack || !strings.Contains(outcomes[1].Err.Error(), `/healthz answered "down"`) || !outcomes[2].Skipped {
		t.Errorf("outcomes %+v", outcomes)
	}
	if cur := a.current(t); cur != Digest(oldBuild) || !a.runs(Digest(oldBuild)) || !outcomes[0].Result.RolledBack {
		t.Errorf("box a: current %s; want it rolled back to the old build", text.ShortSHA(cur))
	}
	// Box a's processes went back one at a time, each drained first.
	var aEvents []string
	for _, e := range a.log() {
		if strings.HasPrefix(e, "POST /drain") || strings.HasPrefix(e, "restart") {
			aEvents = append(aEvents, e)
		}
	}
	if want := []string{"POST /drain 4443", "restart 4443 with 0 sessions", "POST /drain 4444", "restart 4444 with 0 sessions"}; !reflect.DeepEqual(aEvents[len(aEvents)-4:], want) {
		t.Errorf("box a's rollback: %q, want %q at the end", aEvents, want)
	}
	if cur := b.current(t); cur != Digest(oldBuild) || !b.runs(Digest(oldBuild)) {
		t.Errorf("box b: current %s; want it back on the old build", text.ShortSHA(cur))
	}
	if cur := c.current(t); cur != Digest(oldBuild) || !c.runs(Digest(oldBuild)) {
		t.Errorf("box c: current %s; want it untouched", text.ShortSHA(cur))
	}
	for _, e := range log.all() {
		if strings.HasPrefix(e, "c ") {
			t.Errorf("box c was restarted: %q", log.all())
		}
	}
}

// TestFleetRolloutWaitsForListeners: a restarted process's listeners
// must come back to the fleet (90% of what it served before the drain).
// When the shed listeners land on another box, the rollout goes on; when
// they vanish, the box fails its check and rolls back.
func TestFleetRolloutWaitsForListeners(t *testing.T) {
	fewHealthTries(t)
	for _, reconnect := range []bool{true, false} {
		t.Run(fmt.Sprint("reconnect=", reconnect), func(t *testing.T) {
			a := newFleetBox(t, "a", map[int]int{4443: 40}, nil)
			b := newFleetBox(t, "b", map[int]int{4443: 10}, nil)
			if reconnect {
				// They reconnect through the router to whichever box
				// still serves.
				a.onShed = func(n int) { b.mu.Lock(); b.procs[4443].sessions += n; b.mu.Unlock() }
				b.onShed = func(n int) { a.mu.Lock(); a.procs[4443].sessions += n; a.mu.Unlock() }
			}
			fr := testFleetRollout()
			fr.ListenerWait = 300 * time.Millisecond
			rep, err := fr.Run(context.Background(), fleetTargets(a, b))
			if reconnect {
				if err != nil || rep.Moved != 2 {
					t.Fatalf("report %+v, %v", rep, err)
				}
				if n := a.total() + b.total(); n != 50 {
					t.Errorf("the fleet serves %d listeners, want 50", n)
				}
				return
			}
			if !errors.Is(err, ErrBoxesFailed) || rep.Failed != 1 || rep.Skipped != 1 {
				t.Fatalf("report %+v, %v; want box a failed, b skipped", rep, err)
			}
			if !strings.Contains(rep.Boxes[0].Err.Error(), "listeners did not come back: the fleet serves 10 of the 50") {
				t.Errorf("box a: %v", rep.Boxes[0].Err)
			}
			if cur := a.current(t); cur != Digest(oldBuild) {
				t.Errorf("box a: current %s, want it rolled back", text.ShortSHA(cur))
			}
		})
	}
}

// TestFleetRolloutOneBoxFailedSaysBox: the error of a one-box fleet whose
// box failed counts it in the singular ("1 of 1 box"), not "1 of 1 boxes".
func TestFleetRolloutOneBoxFailedSaysBox(t *testing.T) {
	fewHealthTries(t)
	a := newFleetBox(t, "a", map[int]int{4443: 0}, nil)
	a.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
		if m := onBoxRE.FindStringSubmatch(cmd); m != nil && m[3] == "/healthz" && a.proc(4443).release == Digest(newBuild) {
			return []byte("down\n"), nil, true
		}
		return nil, nil, false
	}
	_, err := testFleetRollout().Run(context.Background(), fleetTargets(a))
	if !errors.Is(err, ErrBoxesFailed) || !strings.HasPrefix(err.Error(), "1 of 1 box failed, 0 rolled back after it, 0 not started: ") {
		t.Fatalf("err %v, want 1 of 1 box failed", err)
	}
}

// TestFleetRolloutListenerCheckWaitsOnce: the listener check waits
// ListenerWait itself, so a failed one is not asked again (which would
// make the wait healthTries times as long): with no wait at all, the
// fleet's listeners are read once before the drain, once after the
// restart and once after the rollback's restart.
func TestFleetRolloutListenerCheckWaitsOnce(t *testing.T) {
	fewHealthTries(t)
	a := newFleetBox(t, "a", map[int]int{4443: 40}, nil)
	b := newFleetBox(t, "b", map[int]int{4443: 10}, nil)
	var reads atomic.Int32
	b.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
		if strings.HasPrefix(cmd, "systemctl list-units") {
			reads.Add(1)
		}
		return nil, nil, false
	}
	fr := testFleetRollout()
	fr.ListenerWait = 0
	rep, err := fr.Run(context.Background(), fleetTargets(a, b))
	if !errors.Is(err, ErrBoxesFailed) || rep.Failed != 1 || !strings.Contains(rep.Boxes[0].Err.Error(), "listeners did not come back") {
		t.Fatalf("report %+v, %v; want box a failed on its listeners", rep, err)
	}
	if n := reads.Load(); n != 3 {
		t.Errorf("the fleet's listeners were read %d times, want 3 (before the drain, after the restart, after the rollback's)", n)
	}
}

// TestFleetRolloutResumes: a box a cut-off rollout left half done (one
// process on the new build, one still on the old and draining) is
// finished: only the process left behind restarts; the next box rolls as
// usual.
func TestFleetRolloutResumes(t *testing.T) {
	log := &fleetLog{}
	a := newFleetBox(t, "a", map[int]int{4443: 0, 4444: 0}, log)
	b := newFleetBox(t, "b", map[int]int{4443: 0}, log)
	rel := Releases{Root: sharedRoot}
	ctx := context.Background()
	installCurrent(t, rel, a, newBuild)
	a.procs[4443].release = Digest(newBuild)
	a.procs[4444].draining = true
	if err := rel.MarkRolloutDrain(ctx, a, "relay@4444.service"); err != nil {
		t.Fatal(err)
	}
	fr := testFleetRollout()
	rep, err := fr.Run(ctx, fleetTargets(a, b))
	if err != nil {
		t.Fatal(err)
	}
	ra := rep.Boxes[0].Result
	if rep.Boxes[0].Host != "a" || !ra.Resumed || ra.From != Digest(oldBuild) || !reflect.DeepEqual(ra.Restarted, []string{"relay@4444.service"}) {
		t.Errorf("box a: %+v; want resumed from the old build, relay@4444 restarted", ra)
	}
	if want := []string{"a 'relay@4444.service'", "b 'relay@4443.service'"}; !reflect.DeepEqual(log.all(), want) {
		t.Errorf("restarts %q, want %q", log.all(), want)
	}
	if rep.Moved != 2 || !a.runs(Digest(newBuild)) || a.proc(4444).draining {
		t.Errorf("report %+v; box a %v", rep, a.procs)
	}
}

// TestFleetRolloutCancelled: Ctrl-C while the second box drains its
// process: that box rolls back on a fresh context (its process admits
// again, on the old build), the third is not started, and the first is
// moved back to the old build, on a fresh context too.
func TestFleetRolloutCancelled(t *testing.T) {
	testutil.NoLeaks(t) // Run returns once every box it started has ended
	a := newFleetBox(t, "a", map[int]int{4443: 0}, nil)
	b := newFleetBox(t, "b", map[int]int{4443: 0, 4444: 0}, nil)
	c := newFleetBox(t, "c", map[int]int{4443: 0}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
		if m := onBoxRE.FindStringSubmatch(cmd); m != nil && m[1] == "4444" && m[2] == "POST" && m[3] == "/drain" {
			cancel() // the operator presses Ctrl-C while it drains
		}
		return nil, nil, false
	}
	rep, err := testFleetRollout().Run(ctx, fleetTargets(a, b, c))
	if !errors.Is(err, ErrBoxesFailed) || rep.Failed != 1 || rep.Skipped != 1 {
		t.Fatalf("report %+v, %v", rep, err)
	}
	ob := rep.Boxes[1]
	if ob.Host != "b" || !errors.Is(ob.Err, context.Canceled) || !ob.Result.RolledBack || !strings.Contains(ob.Err.Error(), "rolled back to") {
		t.Errorf("box b: %+v", ob)
	}
	if cur := b.current(t); cur != Digest(oldBuild) || !b.runs(Digest(oldBuild)) {
		t.Errorf("box b: current %s; want the old build back", text.ShortSHA(cur))
	}
	if b.proc(4444).draining || b.proc(4443).draining {
		t.Error("box b: a process was left draining")
	}
	if cur := c.current(t); cur != Digest(oldBuild) || !rep.Boxes[2].Skipped {
		t.Errorf("box c: current %s, outcome %+v; want it untouched", text.ShortSHA(cur), rep.Boxes[2])
	}
	if cur := a.current(t); cur != Digest(oldBuild) || !a.runs(Digest(oldBuild)) || !reflect.DeepEqual(rep.RolledBack, []string{"a"}) {
		t.Errorf("box a: current %s, rolled back %v; want the old build back", text.ShortSHA(cur), rep.RolledBack)
	}
}

// unbalancedFleet is box a, on the old build with no listeners, and box
// b, already on the new build and holding the fleet's 30 listeners; the
// sessions b sheds land on a.
func unbalancedFleet(t *testing.T) (a, b *fleetBox) {
	t.Helper()
	a = newFleetBox(t, "a", map[int]int{4443: 0}, nil)
	b = newFleetBox(t, "b", map[int]int{4443: 30}, nil)
	installCurrent(t, Releases{Root: sharedRoot}, b, newBuild)
	b.procs[4443].release = Digest(newBuild)
	b.onShed = func(n int) { a.mu.Lock(); a.procs[4443].sessions += n; a.mu.Unlock() }
	return a, b
}

// TestFleetRolloutRebalances: after a rollout that moved a box, the
// process holding more than the mean by over the tolerance sheds the
// excess, which lands on the restarted one; the report has the sessions
// before and after. Without Rebalance, or after a rollout that moved
// nothing, nothing is shed.
func TestFleetRolloutRebalances(t *testing.T) {
	for _, rebalance := range []bool{true, false} {
		t.Run(fmt.Sprint("rebalance=", rebalance), func(t *testing.T) {
			a, b := unbalancedFleet(t)
			fr := testFleetRollout()
			fr.Rebalance, fr.RebalanceTolerance, fr.RebalanceRate, fr.RebalanceWait = rebalance, 0.2, 20, 5*time.Second
			var lines []string
			fr.Log = func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
			rep, err := fr.Run(context.Background(), fleetTargets(a, b))
			if err != nil || rep.Moved != 1 {
				t.Fatalf("report %+v, %v", rep, err)
			}
			if !rebalance {
				if rep.Rebalanced || b.total() != 30 {
					t.Errorf("rebalanced without Rebalance: %+v, b holds %d", rep, b.total())
				}
				return
			}
			want := []ProcLoad{{Box: "a", Unit: "relay@4443.service", Sessions: 0}, {Box: "b", Unit: "relay@4443.service", Sessions: 30}}
			if !rep.Rebalanced || !rep.Balanced || !reflect.DeepEqual(rep.Before, want) {
				t.Errorf("report %+v; want rebalanced from %v", rep, want)
			}
			if a.total() != 15 || b.total() != 15 {
				t.Errorf("after: a %d, b %d; want 15 each", a.total(), b.total())
			}
			if !strings.Contains(strings.Join(lines, "\n"), "rebalancing: processes above the mean by more than 20% shed the excess, 20 sessions a second") {
				t.Errorf("log %q", lines)
			}
			rep, err = fr.Run(context.Background(), fleetTargets(a, b))
			if err != nil || rep.Rebalanced {
				t.Errorf("nothing moved, yet: %+v, %v", rep, err)
			}
		})
	}
}

// TestRoutersRoute asks a real router's GET /relays whether it still
// routes to a relay process: yes while it reports headroom, no once a poll
// saw it drained; a process no router lists is unknown.
func TestRoutersRoute(t *testing.T) {
	var draining atomic.Bool
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		headroom := 50
		if draining.Load() {
			headroom = 0
		}
		fmt.Fprintf(w, `{"sessions": 3, "headroom": %d, "certificate_sha256": "%s"}`, headroom, strings.Repeat("ab", 32))
	}))
	t.Cleanup(relay.Close)
	host, port, _ := net.SplitHostPort(relay.Listener.Addr().String())
	path := filepath.Join(t.TempDir(), "relays.json")
	data, _ := json.Marshal(router.File{Relays: []router.Relay{{URL: "http://" + relay.Listener.Addr().String() + "/", Stats: relay.URL + "/stats"}}})
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Options{File: path, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	rt.PollOnce(ctx)
	inst := "relay@" + port + ".service"
	routers := []string{srv.URL, srv.URL + "/"}
	if routed, known, err := RoutersRoute(ctx, nil, routers, host, inst); err != nil || !routed || !known {
		t.Fatalf("before the drain: routed %v known %v err %v; want routed", routed, known, err)
	}
	draining.Store(true)
	rt.PollOnce(ctx)
	if routed, known, err := RoutersRoute(ctx, nil, routers, host, inst); err != nil || routed || !known {
		t.Fatalf("after the drain: routed %v known %v err %v; want known, not routed", routed, known, err)
	}
	if _, known, err := RoutersRoute(ctx, nil, routers, "10.9.9.9", inst); err != nil || known {
		t.Fatalf("another host: known %v err %v", known, err)
	}
	if _, _, err := RoutersRoute(ctx, nil, []string{"http://127.0.0.1:1"}, host, inst); err == nil {
		t.Fatal("an unreachable router gave no error")
	}
}

// TestRunRollout: fleet rollout's output is a line per box as it ends,
// the seconds since the start first, then the balance table when it
// rebalanced; a failed box ends it with exit 3 and one line.
func TestRunRollout(t *testing.T) {
	lineRE := regexp.MustCompile(`^ +\d+\.\ds `)
	t.Run("a box failed", func(t *testing.T) {
		fewHealthTries(t)
		a := newFleetBox(t, "a", map[int]int{4443: 0}, nil)
		b := newFleetBox(t, "b", map[int]int{4443: 0}, nil)
		b.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
			if m := onBoxRE.FindStringSubmatch(cmd); m != nil && m[3] == "/healthz" && b.proc(4443).release == Digest(newBuild) {
				return []byte("down\n"), nil, true
			}
			return nil, nil, false
		}
		var out bytes.Buffer
		err := RunRollout(context.Background(), &out, fleetTargets(a, b), *testFleetRollout())
		var ee *cli.ExitError
		want := `rollout failed: healthz failed on 10.0.0.2 relay@4443.service: /healthz answered "down"; every process rolled back to ` + text.ShortSHA(Digest(oldBuild)) + ` (1 of 2 boxes failed, 1 rolled back after it, 0 not started)`
		if !errors.As(err, &ee) || ee.Code != ExitHostsFailed || ee.Msg != want {
			t.Fatalf("err %#v; want exit %d, 1 of 2 boxes failed", err, ExitHostsFailed)
		}
		var moved, failed bool
		for line := range strings.SplitSeq(strings.TrimSuffix(out.String(), "\n"), "\n") {
			if !lineRE.MatchString(line) {
				t.Errorf("line %q lacks the seconds", line)
			}
			s := lineRE.ReplaceAllString(line, "")
			moved = moved || s == "a: "+text.ShortSHA(Digest(oldBuild))+" -> "+text.ShortSHA(Digest(newBuild))+", 1 process restarted one at a time"
			failed = failed || strings.HasPrefix(s, "b: FAILED: ")
		}
		if !moved || !failed {
			t.Errorf("want a line for a moved and one for b failed:\n%s", out.String())
		}
	})
	t.Run("rebalanced", func(t *testing.T) {
		a, b := unbalancedFleet(t)
		fr := testFleetRollout()
		fr.Rebalance, fr.RebalanceTolerance, fr.RebalanceRate, fr.RebalanceWait = true, DefaultRebalanceTolerance, 20, 5*time.Second
		var out bytes.Buffer
		if err := RunRollout(context.Background(), &out, fleetTargets(a, b), *fr); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"s rebalancing: processes above the mean by more than 20% shed the excess, 20 sessions a second\n", "sessions before", "\nmean "} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
		if strings.Contains(out.String(), "still more than") {
			t.Errorf("the fleet evened out, yet:\n%s", out.String())
		}
	})
}

// TestFleetRolloutOriginsLast: the fleet's origin boxes roll after every
// edge, one at a time even with Boxes 3 (the edges keep another origin),
// and an edge, not an origin, is the canary.
func TestFleetRolloutOriginsLast(t *testing.T) {
	log := &fleetLog{}
	o1 := newFleetBox(t, "o1", map[int]int{4443: 0}, log)
	e1 := newFleetBox(t, "e1", map[int]int{4443: 0}, log)
	o2 := newFleetBox(t, "o2", map[int]int{4443: 0}, log)
	e2 := newFleetBox(t, "e2", map[int]int{4443: 0}, log)
	ts := fleetTargets(o1, e1, o2, e2)
	ts[0].Origin, ts[2].Origin = "http://10.0.0.1:4443/", "http://10.0.0.3:4443/"
	fr := testFleetRollout()
	fr.Boxes = 3
	var mu sync.Mutex
	var baked []string
	fr.Bake = func(_ context.Context, t Target, _ string) error {
		mu.Lock()
		baked = append(baked, t.Host.Name)
		mu.Unlock()
		return nil
	}
	var done []string
	fr.Done = func(o BoxRollout) { mu.Lock(); done = append(done, o.Host); mu.Unlock() }
	if _, err := fr.Run(context.Background(), ts); err != nil {
		t.Fatal(err)
	}
	if len(done) != 4 || !slices.Equal(done[2:], []string{"o1", "o2"}) {
		t.Errorf("boxes ended in the order %v, want the edges, then o1, then o2", done)
	}
	if len(baked) != 1 || !strings.HasPrefix(baked[0], "e") {
		t.Errorf("canary %v, want one edge", baked)
	}
}
