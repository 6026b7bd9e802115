package provision

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/text"
)

// dropIn is the content of the box's release drop-in for the instance on
// port ("" when there is none).
func (b *fleetBox) dropIn(port int) string {
	data, err := os.ReadFile(filepath.Join(b.root, "run", unitName(port), releaseDropIn))
	if err != nil {
		return ""
	}
	return string(data)
}

// dropIns lists the release drop-in files on the box.
func (b *fleetBox) dropIns(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(b.root, "run", "*", releaseDropIn))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func unitName(port int) string { return fmt.Sprintf("relay@%d.service.d", port) }

// TestRolloutCanaryRunsOnADropIn: the box's first restarted process runs
// the new build through a /run drop-in (the unit's own ExecStart, with
// releases/NEW for current) while current still points at the old one,
// so that another process that crashes meanwhile comes back on the old
// build; current moves once it passed, and the drop-in goes.
func TestRolloutCanaryRunsOnADropIn(t *testing.T) {
	a := newFleetBox(t, "a", map[int]int{4443: 0, 4444: 0}, nil)
	oldSHA, newSHA := Digest(oldBuild), Digest(newBuild)
	fr := testFleetRollout()
	var gated []string
	fr.Gate = func(ctx context.Context, tg Target, inst string) error {
		gated = append(gated, inst)
		if inst != "relay@4443.service" {
			if cur := a.current(t); cur != newSHA || len(a.dropIns(t)) != 0 {
				t.Errorf("at %s: current %s, drop-ins %v; want current moved, no drop-in", inst, text.ShortSHA(cur), a.dropIns(t))
			}
			return nil
		}
		if cur := a.current(t); cur != oldSHA {
			t.Errorf("while the canary is checked, current is %s, want the old build", text.ShortSHA(cur))
		}
		want := "[Service]\nExecStart=\nExecStart=" + sharedRoot + "/releases/" + newSHA + "/relay serve --listen [::]:%i --stateless-reset-secret %d/reset-secret --max-sessions-per-address 0\n"
		if got := a.dropIn(4443); !strings.HasSuffix(got, want) {
			t.Errorf("the canary's drop-in:\n%s\nwant it to end with\n%s", got, want)
		}
		if a.proc(4443).release != newSHA {
			t.Errorf("the canary runs %s, want the new build", text.ShortSHA(a.proc(4443).release))
		}
		// relay@4444 crashes and systemd restarts it: the old build.
		if _, err := a.Run(ctx, "systemctl restart 'relay@4444.service'", nil); err != nil {
			t.Fatal(err)
		}
		if a.proc(4444).release != oldSHA {
			t.Errorf("a process that crashed during the canary came back on %s, want the old build", text.ShortSHA(a.proc(4444).release))
		}
		return nil
	}
	rep, err := fr.Run(context.Background(), fleetTargets(a))
	if err != nil || rep.Moved != 1 {
		t.Fatalf("report %+v, %v", rep, err)
	}
	if !reflect.DeepEqual(gated, []string{"relay@4443.service", "relay@4444.service"}) {
		t.Errorf("gate asked about %v, want every restarted process in order", gated)
	}
	if cur := a.current(t); cur != newSHA || !a.runs(newSHA) || len(a.dropIns(t)) != 0 {
		t.Errorf("after: current %s, drop-ins %v, processes %v", text.ShortSHA(cur), a.dropIns(t), a.procs)
	}
	runs, err := Releases{Root: sharedRoot}.Running(context.Background(), a, []string{"relay@4443.service"})
	if err != nil || runs["relay@4443.service"] != newSHA {
		t.Errorf("Running says the canary runs %v (%v), want the new release", runs, err)
	}
}

// TestRolloutCanaryFails: the canary fails its gate: current never moved,
// the drop-in is gone, the canary is back on the old build, the other
// process was never restarted, and the error names the check.
func TestRolloutCanaryFails(t *testing.T) {
	log := &fleetLog{}
	a := newFleetBox(t, "a", map[int]int{4443: 0, 4444: 0}, log)
	var activated atomic.Bool
	a.intercept = func(context.Context, string) ([]byte, error, bool) {
		// Before each command: has current moved since the last?
		if link, _ := os.Readlink(a.root + "/current"); link != "releases/"+Digest(oldBuild) {
			activated.Store(true)
		}
		return nil, nil, false
	}
	fr := testFleetRollout()
	fr.Gate = func(context.Context, Target, string) error {
		return &CheckError{Check: "heartbeat gate", Figure: "0 groups in 3s, want 20"}
	}
	rep, err := fr.Run(context.Background(), fleetTargets(a))
	var ce *CheckError
	if !errors.Is(err, ErrBoxesFailed) || !errors.As(rep.Boxes[0].Err, &ce) || ce.Host != "10.0.0.1" || ce.Instance != "relay@4443.service" {
		t.Fatalf("err %v, box %+v; want the gate's CheckError, placed", err, rep.Boxes[0])
	}
	if activated.Load() {
		t.Error("current was switched")
	}
	if cur := a.current(t); cur != Digest(oldBuild) || !a.runs(Digest(oldBuild)) || len(a.dropIns(t)) != 0 {
		t.Errorf("after: current %s, drop-ins %v", text.ShortSHA(cur), a.dropIns(t))
	}
	if want := []string{"a 'relay@4443.service'", "a 'relay@4443.service'"}; !reflect.DeepEqual(log.all(), want) {
		t.Errorf("restarts %q, want the canary's two", log.all())
	}
	if a.proc(4443).draining {
		t.Error("the canary was left draining")
	}
}

// failGate fails the gate of the process on port of box, with the
// heartbeat figure.
func failGate(box string, port string) func(context.Context, Target, string) error {
	return func(_ context.Context, t Target, inst string) error {
		if t.Host.Name == box && inst == "relay@"+port+".service" {
			return &CheckError{Check: "heartbeat gate", Figure: "0 groups in 3s, want 20"}
		}
		return nil
	}
}

// TestFleetRolloutGateFailureRollsBackTheFleet: the gate fails on box b's
// second process: box a, which had finished, goes back to the old build
// too, box c is not touched, and the last line names the check, the
// figure and the release every process went back to.
func TestFleetRolloutGateFailureRollsBackTheFleet(t *testing.T) {
	log := &fleetLog{}
	a := newFleetBox(t, "a", map[int]int{4443: 0, 4444: 0}, log)
	b := newFleetBox(t, "b", map[int]int{4443: 0, 4444: 0}, log)
	c := newFleetBox(t, "c", map[int]int{4443: 0}, log)
	fr := testFleetRollout()
	fr.Gate = failGate("b", "4444")
	var out bytes.Buffer
	err := RunRollout(context.Background(), &out, fleetTargets(a, b, c), *fr)
	var ee *cli.ExitError
	want := "rollout failed: heartbeat gate failed on 10.0.0.2 relay@4444.service: 0 groups in 3s, want 20; every process rolled back to " + text.ShortSHA(Digest(oldBuild)) + " (1 of 3 boxes failed, 1 rolled back after it, 1 not started)"
	if !errors.As(err, &ee) || ee.Msg != want {
		t.Fatalf("err %v\nwant %s", err, want)
	}
	for _, x := range []*fleetBox{a, b, c} {
		if cur := x.current(t); cur != Digest(oldBuild) || !x.runs(Digest(oldBuild)) || len(x.dropIns(t)) != 0 {
			t.Errorf("box %s: current %s, processes %v; want the old build", x.name, text.ShortSHA(cur), x.procs)
		}
	}
	if !strings.Contains(out.String(), "a: rolled back to "+text.ShortSHA(Digest(oldBuild))) {
		t.Errorf("no line says box a was rolled back:\n%s", out.String())
	}
	for _, e := range log.all() {
		if strings.HasPrefix(e, "c ") {
			t.Errorf("box c was restarted: %q", log.all())
		}
	}
}

// TestFleetRolloutBake: Bake is called once, on the rollout's first
// restarted process, after it admits again; with two boxes at once, the
// second box does not start while it bakes. When it fails, the canary's
// box goes back and the other boxes are not started.
func TestFleetRolloutBake(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "passes", true: "fails"}[fail], func(t *testing.T) {
			a := newFleetBox(t, "a", map[int]int{4443: 0, 4444: 0}, nil)
			b := newFleetBox(t, "b", map[int]int{4443: 0}, nil)
			var baking atomic.Bool
			var early atomic.Bool
			b.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
				if strings.Contains(cmd, sharedRoot) && baking.Load() {
					early.Store(true)
				}
				return nil, nil, false
			}
			fr := testFleetRollout()
			fr.Boxes = 2
			var mu sync.Mutex
			var baked []string
			fr.Bake = func(_ context.Context, tg Target, inst string) error {
				mu.Lock()
				baked = append(baked, tg.Host.Name+" "+inst)
				mu.Unlock()
				if a.proc(4443).draining || a.current(t) != Digest(oldBuild) {
					t.Errorf("baking: the canary draining %v, current %s; want it admitting, current not moved yet", a.proc(4443).draining, text.ShortSHA(a.current(t)))
				}
				baking.Store(true)
				defer baking.Store(false)
				// Give box b the time to start, were it let.
				for range 20 {
					if _, err := a.Run(context.Background(), "true", nil); err != nil {
						return err
					}
				}
				if fail {
					return errors.New("the canary lost 3 heartbeats, the fleet none")
				}
				return nil
			}
			rep, err := fr.Run(context.Background(), fleetTargets(a, b))
			if !reflect.DeepEqual(baked, []string{"a relay@4443.service"}) {
				t.Errorf("baked %v, want once, on box a's first process", baked)
			}
			if early.Load() {
				t.Error("box b started while the canary baked")
			}
			if !fail {
				if err != nil || rep.Moved != 2 {
					t.Fatalf("report %+v, %v", rep, err)
				}
				return
			}
			var ce *CheckError
			if !errors.Is(err, ErrBoxesFailed) || !errors.As(rep.Boxes[0].Err, &ce) || ce.Check != "bake" || ce.Instance != "relay@4443.service" {
				t.Fatalf("err %v, box a %v; want the bake failed", err, rep.Boxes[0].Err)
			}
			if rep.Skipped != 1 || !rep.Boxes[1].Skipped {
				t.Errorf("report %+v; want box b skipped", rep)
			}
			if cur := a.current(t); cur != Digest(oldBuild) || !a.runs(Digest(oldBuild)) || len(a.dropIns(t)) != 0 {
				t.Errorf("box a: current %s, drop-ins %v; want the old build", text.ShortSHA(cur), a.dropIns(t))
			}
		})
	}
}

// TestFleetRolloutByDigest: without the bytes, a box that keeps the
// release gets none and Fetch is not asked for it; a box that lacks it
// gets Fetch's bytes; without Fetch that box fails.
func TestFleetRolloutByDigest(t *testing.T) {
	uploads := map[string]int{}
	var mu sync.Mutex
	countUploads := func(b *fleetBox) {
		b.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
			if strings.Contains(cmd, `cat >"$tmp/relay"`) {
				mu.Lock()
				uploads[b.name]++
				mu.Unlock()
			}
			return nil, nil, false
		}
	}
	a := newFleetBox(t, "a", map[int]int{4443: 0}, nil)
	b := newFleetBox(t, "b", map[int]int{4443: 0}, nil)
	if _, _, err := (Releases{Root: sharedRoot}).Install(context.Background(), a, newBuild); err != nil {
		t.Fatal(err)
	}
	countUploads(a)
	countUploads(b)
	fr := testFleetRollout()
	fr.Binary, fr.Digest = nil, Digest(newBuild)
	var fetched []string
	fr.Fetch = func(_ context.Context, sha string) ([]byte, error) {
		fetched = append(fetched, sha)
		return newBuild, nil
	}
	rep, err := fr.Run(context.Background(), fleetTargets(a, b))
	if err != nil || rep.Moved != 2 {
		t.Fatalf("report %+v, %v", rep, err)
	}
	if !reflect.DeepEqual(fetched, []string{Digest(newBuild)}) || uploads["a"] != 0 || uploads["b"] != 1 {
		t.Errorf("fetched %v, uploads %v; want one fetch and upload, for box b", fetched, uploads)
	}
	for _, x := range []*fleetBox{a, b} {
		if !x.runs(Digest(newBuild)) {
			t.Errorf("box %s: %v", x.name, x.procs)
		}
	}

	c := newFleetBox(t, "c", map[int]int{4443: 0}, nil)
	fr.Fetch = nil
	rep, err = fr.Run(context.Background(), fleetTargets(c))
	if !errors.Is(err, ErrBoxesFailed) || !strings.Contains(rep.Boxes[0].Err.Error(), "the box lacks it") || !c.runs(Digest(oldBuild)) {
		t.Errorf("no Fetch, box lacking the release: %v, %+v", err, rep.Boxes)
	}
	if _, err := (&FleetRollout{Boxes: 1, Digest: "abc"}).Run(context.Background(), nil); err == nil {
		t.Error("a digest that is no sha256 was taken")
	}
}

// cutOffCanary is what a rollout cut off while its canary ran leaves on
// box a: relay@4443 on the new build through a drop-in, current on the
// old build.
func cutOffCanary(t *testing.T, a *fleetBox) {
	t.Helper()
	rel := Releases{Root: sharedRoot}
	ctx := context.Background()
	if _, _, err := rel.Install(ctx, a, newBuild); err != nil {
		t.Fatal(err)
	}
	if err := rel.tryRelease(ctx, a, "relay@4443.service", Digest(newBuild)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Run(ctx, "systemctl restart 'relay@4443.service'", nil); err != nil {
		t.Fatal(err)
	}
	if a.proc(4443).release != Digest(newBuild) || a.dropIn(4443) == "" || a.current(t) != Digest(oldBuild) {
		t.Fatalf("the cut-off canary: %+v, drop-in %q", *a.proc(4443), a.dropIn(4443))
	}
}

// TestRolloutClearsALeftDropIn: a rollout cut off while its canary ran
// on a drop-in left relay@4443 on the new build and the drop-in in /run.
// The next rollout removes it first and tries relay@4444 as its canary;
// a rollback (by digest, to the old release current still points at)
// removes it and puts relay@4443 back on current.
func TestRolloutClearsALeftDropIn(t *testing.T) {
	for _, back := range []bool{false, true} {
		t.Run(map[bool]string{false: "rollout", true: "rollback"}[back], func(t *testing.T) {
			a := newFleetBox(t, "a", map[int]int{4443: 0, 4444: 0}, nil)
			ctx := context.Background()
			cutOffCanary(t, a)
			want := Digest(newBuild)
			fr := testFleetRollout()
			if back {
				want = Digest(oldBuild)
				fr.Binary, fr.Digest = nil, want
			}
			var canaryDropIns []string
			fr.Gate = func(_ context.Context, _ Target, inst string) error {
				canaryDropIns = append(canaryDropIns, strings.Join(a.dropIns(t), ","))
				return nil
			}
			if _, err := fr.Run(ctx, fleetTargets(a)); err != nil {
				t.Fatal(err)
			}
			if cur := a.current(t); cur != want || !a.runs(want) || len(a.dropIns(t)) != 0 {
				t.Errorf("after: current %s, processes %v, drop-ins %v; want all on %s", text.ShortSHA(cur), a.procs, a.dropIns(t), text.ShortSHA(want))
			}
			if !back && (len(canaryDropIns) != 1 || !strings.HasSuffix(canaryDropIns[0], "relay@4444.service.d/"+releaseDropIn)) {
				t.Errorf("drop-ins while the canary was checked: %q; want relay@4444's alone", canaryDropIns)
			}
		})
	}
}

// TestApplyClearsALeftDropIn: converge restarts a process a cut-off
// canary left on the new build onto current, the drop-in removed (else
// it would restart on the drop-in's release again).
func TestApplyClearsALeftDropIn(t *testing.T) {
	a := newFleetBox(t, "a", map[int]int{4443: 0}, nil)
	rel := Releases{Root: sharedRoot}
	ctx := context.Background()
	cutOffCanary(t, a)
	changes := []Change{{Kind: ChangeStale, What: "relay@4443.service", From: Digest(newBuild), To: Digest(oldBuild)}}
	if _, err := Apply(ctx, a, &Plan{State: HostState{Release: Digest(oldBuild)}}, changes, rel, nil); err != nil {
		t.Fatal(err)
	}
	if a.proc(4443).release != Digest(oldBuild) || len(a.dropIns(t)) != 0 {
		t.Errorf("after converge: %+v, drop-ins %v", *a.proc(4443), a.dropIns(t))
	}
}

// cutOffBeforeRestart is what a rollout cut off between writing its
// canary's drop-in and restarting it leaves on box a: the drop-in for
// relay@4443 (loaded), the process still on current, the old build.
func cutOffBeforeRestart(t *testing.T, a *fleetBox) {
	t.Helper()
	rel := Releases{Root: sharedRoot}
	ctx := context.Background()
	if _, _, err := rel.Install(ctx, a, newBuild); err != nil {
		t.Fatal(err)
	}
	if err := rel.tryRelease(ctx, a, "relay@4443.service", Digest(newBuild)); err != nil {
		t.Fatal(err)
	}
	if a.proc(4443).release != Digest(oldBuild) || a.dropIn(4443) == "" || a.current(t) != Digest(oldBuild) {
		t.Fatalf("the cut-off rollout: %+v, drop-in %q", *a.proc(4443), a.dropIn(4443))
	}
}

// probeFleetBox is Probe on box a for a plan of its processes on the
// release current points at, managing no file: the box's unit list is
// the simulated one (the probe's first command reads it with the file
// hashes, which stay the test machine's own otherwise).
func probeFleetBox(t *testing.T, a *fleetBox, plan *Plan) HostState {
	t.Helper()
	a.intercept = func(ctx context.Context, cmd string) ([]byte, error, bool) {
		if !strings.Contains(cmd, "echo '== units'") {
			return nil, nil, false
		}
		out, err := a.simBox.Run(ctx, "systemctl list-units", nil)
		return append([]byte("== units\n"), out...), err, true
	}
	defer func() { a.intercept = nil }()
	st, err := Probe(context.Background(), a, plan, Releases{Root: sharedRoot})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestConvergeRemovesALeftDropIn: a rollout cut off between writing its
// canary's drop-in and restarting it (or a rollback that put the process
// back on current by other means) left relay@4443 on current with the
// drop-in: its next start (systemd's Restart= after a crash) would run
// the new build. Converge finds it, removes it and reloads systemd, and
// restarts nothing; once done it finds nothing, and a crash of the
// process brings it back on current.
func TestConvergeRemovesALeftDropIn(t *testing.T) {
	a := newFleetBox(t, "a", map[int]int{4443: 0, 4444: 0}, nil)
	ctx := context.Background()
	rel := Releases{Root: sharedRoot}
	cutOffBeforeRestart(t, a)
	oldSHA, newSHA := Digest(oldBuild), Digest(newBuild)
	plan := &Plan{State: HostState{Release: oldSHA, Instances: []string{"relay@4443.service", "relay@4444.service"}}}

	changes := Diff(plan.State, probeFleetBox(t, a, plan))
	want := []Change{{Kind: ChangeDropIn, What: "relay@4443.service", From: newSHA, To: oldSHA}}
	if !reflect.DeepEqual(changes, want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	wantText := "remove relay@4443.service's release drop-in (left by a cut-off rollout: its next start would run release " + text.ShortSHA(newSHA) + ", not current)"
	if got := changes[0].String(); got != wantText {
		t.Errorf("the change reads %q, want %q", got, wantText)
	}
	var cmds []string
	a.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
		cmds = append(cmds, cmd)
		return nil, nil, false
	}
	rep, err := Apply(ctx, a, plan, changes, rel, nil)
	a.intercept = nil
	if err != nil {
		t.Fatal(err)
	}
	if len(a.dropIns(t)) != 0 || len(rep.Restarted) != 0 {
		t.Errorf("after apply: drop-ins %v, restarted %v; want no drop-in, nothing restarted", a.dropIns(t), rep.Restarted)
	}
	for _, c := range cmds {
		if strings.Contains(c, "systemctl restart") || strings.Contains(c, "systemctl start") || strings.Contains(c, "/drain") {
			t.Errorf("apply ran %q; want no restart", c)
		}
	}
	if !slices.Contains(cmds, "systemctl daemon-reload") {
		t.Errorf("apply did not reload systemd: %q", cmds)
	}
	if ev := a.log(); len(ev) != 0 {
		t.Errorf("events on the box: %v; want none", ev)
	}
	if left := Diff(plan.State, probeFleetBox(t, a, plan)); len(left) != 0 {
		t.Errorf("second converge would do %v", left)
	}
	// Applied again (a converge that probed before the first): nothing
	// to remove, still no restart.
	if rep, err := Apply(ctx, a, plan, changes, rel, nil); err != nil || len(rep.Restarted) != 0 || len(a.log()) != 0 {
		t.Errorf("applied twice: %+v, %v, events %v", rep, err, a.log())
	}
	// relay@4443 crashes and systemd starts it again: current.
	if _, err := a.Run(ctx, "systemctl restart 'relay@4443.service'", nil); err != nil {
		t.Fatal(err)
	}
	if !a.runs(oldSHA) {
		t.Errorf("after a crash: %+v, %+v; want both on current", *a.proc(4443), *a.proc(4444))
	}
}

// TestApplyStartsOnCurrent: an instance converge restarts (a changed
// unit) or starts (it was stopped or crashed) while a release drop-in
// is left on it comes up on current: the drop-in goes first.
func TestApplyStartsOnCurrent(t *testing.T) {
	for _, kind := range []string{ChangeRestart, ChangeStart} {
		t.Run(kind, func(t *testing.T) {
			a := newFleetBox(t, "a", map[int]int{4443: 0}, nil)
			cutOffBeforeRestart(t, a)
			// systemctl enable --now relay.target relay@4443.service starts
			// it as a restart does in the simulation.
			a.intercept = func(ctx context.Context, cmd string) ([]byte, error, bool) {
				if !strings.HasPrefix(cmd, "systemctl enable --now ") {
					return nil, nil, false
				}
				out, err := a.simBox.Run(ctx, "systemctl restart 'relay@4443.service'", nil)
				return out, err, true
			}
			plan := &Plan{State: HostState{Release: Digest(oldBuild), Instances: []string{"relay@4443.service"}}}
			changes := []Change{{Kind: kind, What: "relay@4443.service"}}
			rep, err := Apply(context.Background(), a, plan, changes, Releases{Root: sharedRoot}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rep.Restarted, []string{"relay@4443.service"}) || a.proc(4443).release != Digest(oldBuild) || len(a.dropIns(t)) != 0 {
				t.Errorf("after %s: restarted %v, %+v, drop-ins %v; want it on current %s, no drop-in",
					kind, rep.Restarted, *a.proc(4443), a.dropIns(t), text.ShortSHA(Digest(oldBuild)))
			}
		})
	}
}

// TestFleetRolloutPlan: the dry run reads each box and says what would
// move, which process is the canary, what is on the release already; it
// changes nothing on the boxes.
func TestFleetRolloutPlan(t *testing.T) {
	a := newFleetBox(t, "a", map[int]int{4443: 0, 4444: 0}, nil)
	b := newFleetBox(t, "b", map[int]int{4443: 0, 4444: 0}, nil)
	ctx := context.Background()
	installCurrent(t, Releases{Root: sharedRoot}, b, newBuild)
	b.procs[4443].release = Digest(newBuild) // a rollout cut off
	var cmds []string
	var mu sync.Mutex
	for _, x := range []*fleetBox{a, b} {
		x.intercept = func(_ context.Context, cmd string) ([]byte, error, bool) {
			mu.Lock()
			cmds = append(cmds, cmd)
			mu.Unlock()
			return nil, nil, false
		}
	}
	snapshot := func() string {
		var s strings.Builder
		for _, x := range []*fleetBox{a, b} {
			filepath.Walk(x.root, func(p string, fi os.FileInfo, err error) error {
				if err == nil {
					link, _ := os.Readlink(p)
					s.WriteString(p + " " + fi.Mode().String() + " " + link + "\n")
				}
				return nil
			})
			for _, port := range []int{4443, 4444} {
				fmt.Fprintf(&s, "%s %d %+v\n", x.name, port, *x.procs[port])
			}
			s.WriteString(strings.Join(x.log(), "\n"))
		}
		return s.String()
	}
	before := snapshot()
	fr := testFleetRollout()
	fr.Bake = func(context.Context, Target, string) error { return nil }
	plan, err := fr.Plan(ctx, fleetTargets(a, b))
	if err != nil {
		t.Fatal(err)
	}
	if after := snapshot(); after != before {
		t.Errorf("the plan changed the boxes:\n%s\nwas\n%s", after, before)
	}
	for _, c := range cmds {
		for _, verb := range []string{"systemctl restart", "daemon-reload", "ln -sfn", "rm ", "mv ", "POST", "DELETE"} {
			if strings.Contains(c, verb) {
				t.Errorf("the plan ran %q", c)
			}
		}
	}
	oldSHA, newSHA := Digest(oldBuild), Digest(newBuild)
	want := []BoxPlan{
		{Host: "a", Current: oldSHA, Procs: []ProcPlan{
			{Instance: "relay@4443.service", From: oldSHA, To: newSHA, Canary: true, FleetCanary: true},
			{Instance: "relay@4444.service", From: oldSHA, To: newSHA}}},
		{Host: "b", Current: newSHA, Has: true, Procs: []ProcPlan{
			{Instance: "relay@4444.service", From: oldSHA, To: newSHA},
			{Instance: "relay@4443.service", From: newSHA}}},
	}
	if plan.To != newSHA || !plan.Bake || !reflect.DeepEqual(plan.Boxes, want) {
		t.Errorf("plan %+v\nwant %+v", plan.Boxes, want)
	}
	var out bytes.Buffer
	WritePlan(&out, plan)
	o, n := text.ShortSHA(oldSHA), text.ShortSHA(newSHA)
	wantOut := "rollout to " + n + ", one process at a time; nothing was changed\n" +
		"a: current " + o + "; " + n + " to upload\n" +
		"  relay@4443.service  " + o + "  -> " + n + "  canary: runs it through a drop-in, current moves once it passed; the fleet's first, baked before anything else moves\n" +
		"  relay@4444.service  " + o + "  -> " + n + "\n" +
		"b: current " + n + "; " + n + " kept on the box, no upload\n" +
		"  relay@4444.service  " + o + "  -> " + n + "\n" +
		"  relay@4443.service  " + n + "  already on it\n"
	if out.String() != wantOut {
		t.Errorf("WritePlan:\n%s\nwant\n%s", out.String(), wantOut)
	}
}

// TestExecStart reads the ExecStart in effect from systemctl cat output:
// a reset empties the list, continuation lines are kept, the release
// drop-in is left out.
func TestExecStart(t *testing.T) {
	skip := releaseDropInPath("relay@4443.service")
	for _, tc := range []struct {
		name, cat string
		want      []string
	}{
		{"template", "# /etc/systemd/system/relay@.service\n[Unit]\nExecStart=/not/service\n[Service]\nExecStart=/opt/relayfleet/current/relay serve --listen [::]:%i\n", []string{"/opt/relayfleet/current/relay serve --listen [::]:%i"}},
		{"reset by a drop-in", "# /etc/systemd/system/relay@.service\n[Service]\nExecStart=/a\n\n# /etc/systemd/system/relay@.service.d/10-x.conf\n[Service]\nExecStart=\nExecStart=/b %i\n", []string{"/b %i"}},
		{"continued", "# /u\n[Service]\nExecStart=/a \\\n  --x %i\n", []string{"/a \\\n  --x %i"}},
		{"release drop-in left out", "# /u\n[Service]\nExecStart=/a\n\n# " + skip + "\n[Service]\nExecStart=\nExecStart=/b\n", []string{"/a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := execStart(tc.cat, skip); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
