package provision

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

// probeSim reads what Probe reads of the processes, on the simulated box.
func probeSim(t *testing.T, box *simBox, rel Releases, insts []string) HostState {
	t.Helper()
	ctx := context.Background()
	st := HostState{Instances: insts}
	var err error
	if st.Release, _, err = rel.Current(ctx, box); err != nil {
		t.Fatal(err)
	}
	if st.Running, err = rel.Running(ctx, box, insts); err != nil {
		t.Fatal(err)
	}
	if st.Draining, err = DrainingInstances(ctx, box, insts); err != nil {
		t.Fatal(err)
	}
	if st.RolloutDrained, err = rel.RolloutDrained(ctx, box); err != nil {
		t.Fatal(err)
	}
	if st.ReleaseDropIns, err = releaseDropInReleases(ctx, box); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestConvergeKeepsADrainOnPurpose: relay@4443 and relay@4444 were drained
// on purpose (a box on its way out, an operator); relay@4444 also runs an
// old release. Converge restarts relay@4444 onto the current release and
// drains it again; neither is ever undrained (before, converge undrained
// every draining process).
func TestConvergeKeepsADrainOnPurpose(t *testing.T) {
	t.Parallel()
	box, rel, _, newRel, _ := simCutOff(t)
	ctx := context.Background()
	if err := rel.ClearRolloutDrain(ctx, box, "relay@4444.service"); err != nil { // drained on purpose: no mark
		t.Fatal(err)
	}
	box.procs[4443].draining = true
	insts := []string{"relay@4443.service", "relay@4444.service"}
	desired := HostState{Release: newRel, Instances: insts}
	changes := Diff(desired, probeSim(t, box, rel, insts))
	if _, err := Apply(ctx, box, &Plan{State: desired}, changes, rel, nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range box.log() {
		if strings.HasPrefix(e, "DELETE /drain") {
			t.Errorf("converge undrained a process drained on purpose: %v", box.log())
		}
	}
	if p := box.proc(4444); p.release != newRel || !p.draining || !box.proc(4443).draining {
		t.Errorf("after converge: 4443 %+v, 4444 %+v; want both draining, 4444 on the new release", *box.proc(4443), *p)
	}
	if got := Diff(desired, probeSim(t, box, rel, insts)); len(got) != 0 {
		t.Errorf("second converge would do %v", got)
	}
}

// TestRolloutKeepsADrainOnPurpose: a rollout restarts a process drained on
// purpose onto the new release and drains it again; the others it drains
// for the move are admitting once done, and no mark is left.
func TestRolloutKeepsADrainOnPurpose(t *testing.T) {
	t.Parallel()
	box, rel, _, newRel, newer := simCutOff(t)
	ctx := context.Background()
	box.procs[4443].release, box.procs[4444].draining = box.procs[4444].release, false
	if err := rel.ClearRolloutDrain(ctx, box, "relay@4444.service"); err != nil {
		t.Fatal(err)
	}
	box.procs[4444].draining = true // on purpose
	insts := []string{"relay@4443.service", "relay@4444.service"}
	drain := func(ctx context.Context, inst string) error { return DrainOnBox(ctx, box, inst, true) }
	undrain := func(ctx context.Context, inst string) error { return DrainOnBox(ctx, box, inst, false) }
	healthy := func(context.Context, Runner, string) error { return nil }
	if _, err := Rollout(ctx, box, rel, newer, insts, healthy, drain, undrain); err != nil {
		t.Fatal(err)
	}
	if p := box.proc(4443); p.release != newRel || p.draining {
		t.Errorf("4443 %+v: want it on the new release, admitting", *p)
	}
	if p := box.proc(4444); p.release != newRel || !p.draining {
		t.Errorf("4444 %+v: want it on the new release, still draining; %v", *p, box.log())
	}
	if marks, err := rel.RolloutDrained(ctx, box); err != nil || len(marks) != 0 {
		t.Errorf("marks left: %v (%v)", marks, err)
	}
}

// deadRunner fails every command once dead is set: a box (or the link to
// it) gone mid-rollout, so not even the rollback runs.
type deadRunner struct {
	Runner
	dead atomic.Bool
}

func (d *deadRunner) Run(ctx context.Context, cmd string, stdin io.Reader) ([]byte, error) {
	if d.dead.Load() {
		return nil, errors.New("ssh: connection lost")
	}
	return d.Runner.Run(ctx, cmd, stdin)
}

// TestCutOffRolloutIsFinishedByConverge: a rollout loses the box right
// after draining relay@4444, so neither its restart nor the rollback
// runs. Its mark tells converge that a rollout drained relay@4444: converge
// restarts it onto the new release and undrains it, while relay@4445,
// drained on purpose before the rollout, stays draining.
func TestCutOffRolloutIsFinishedByConverge(t *testing.T) {
	t.Parallel()
	rel := Releases{Root: t.TempDir()}
	box := newSimBox(map[int]int{4443: 2, 4444: 2, 4445: 2})
	box.root = rel.Root
	ctx := context.Background()
	old, newer := []byte("#!/bin/sh\necho old\n"), []byte("#!/bin/sh\necho new\n")
	installCurrent(t, rel, box, old)
	for _, p := range box.procs {
		p.release = Digest(old)
	}
	box.procs[4445].draining = true // on purpose
	insts := []string{"relay@4443.service", "relay@4444.service", "relay@4445.service"}
	run := &deadRunner{Runner: box}
	drain := func(ctx context.Context, inst string) error {
		err := DrainOnBox(ctx, run, inst, true)
		if inst == "relay@4444.service" {
			run.dead.Store(true)
		}
		return err
	}
	undrain := func(ctx context.Context, inst string) error { return DrainOnBox(ctx, run, inst, false) }
	healthy := func(context.Context, Runner, string) error { return nil }
	if _, err := Rollout(ctx, run, rel, newer, insts, healthy, drain, undrain); err == nil {
		t.Fatal("the rollout that lost its box succeeded")
	}
	if !box.proc(4444).draining {
		t.Fatal("the cut-off left relay@4444 admitting: nothing to finish")
	}

	// Converge, the box back.
	st := probeSim(t, box, rel, insts)
	if !reflect.DeepEqual(st.RolloutDrained, []string{"relay@4444.service"}) {
		t.Fatalf("marks %v, want relay@4444's", st.RolloutDrained)
	}
	desired := HostState{Release: Digest(newer), Instances: insts}
	if _, err := Apply(ctx, box, &Plan{State: desired}, Diff(desired, st), rel, nil); err != nil {
		t.Fatal(err)
	}
	for port, wantDraining := range map[int]bool{4443: false, 4444: false, 4445: true} {
		if p := box.proc(port); p.release != Digest(newer) || p.draining != wantDraining {
			t.Errorf("relay@%d %+v after converge; want the new release, draining %v", port, *p, wantDraining)
		}
	}
	if got := Diff(desired, probeSim(t, box, rel, insts)); len(got) != 0 {
		t.Errorf("second converge would do %v", got)
	}
}
