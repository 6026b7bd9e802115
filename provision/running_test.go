package provision

import (
	"github.com/relayfleet/relayfleet/internal/text"

	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/relay"
)

func TestReleaseOf(t *testing.T) {
	sha := strings.Repeat("ab", 32)
	for exe, want := range map[string]string{
		"/opt/relayfleet/releases/" + sha + "/relay":           sha,
		"/opt/relayfleet/releases/" + sha + "/relay (deleted)": sha,
		"/opt/relayfleet/releases/" + sha[:10] + "/relay":      "/opt/relayfleet/releases/" + sha[:10] + "/relay",
		"/usr/local/bin/relay":                                 "/usr/local/bin/relay",
		"":                                                     "",
		"/other/releases/" + sha + "/relay":                    "/other/releases/" + sha + "/relay",
	} {
		if got := releaseOf("/opt/relayfleet", exe); got != want {
			t.Errorf("releaseOf(%q) = %q, want %q", exe, got, want)
		}
	}
}

// TestDiffFindsProcessesLeftBehind: current points at the desired release
// but one process still runs the old one and another was left draining by
// a cut-off rollout (its mark says so): converge restarts the first (moved
// out first) and undrains both. Processes drained on purpose (no mark)
// stay draining, through a restart too.
func TestDiffFindsProcessesLeftBehind(t *testing.T) {
	newRel, oldRel := strings.Repeat("a", 64), strings.Repeat("b", 64)
	desired := HostState{Release: newRel, Instances: []string{"relay@4443.service", "relay@4444.service", "relay@4445.service", "relay@4446.service", "relay@4447.service"}}
	actual := HostState{Release: newRel, Instances: desired.Instances,
		Running: map[string]string{"relay@4443.service": newRel, "relay@4444.service": oldRel, "relay@4445.service": newRel,
			"relay@4446.service": newRel, "relay@4447.service": oldRel},
		Draining:       []string{"relay@4444.service", "relay@4445.service", "relay@4446.service", "relay@4447.service"},
		RolloutDrained: []string{"relay@4444.service", "relay@4445.service"},
	}
	got := Diff(desired, actual)
	want := []Change{
		{Kind: ChangeStale, What: "relay@4444.service", From: oldRel, To: newRel},
		{Kind: ChangeUndrain, What: "relay@4444.service"},
		{Kind: ChangeUndrain, What: "relay@4445.service"},
		{Kind: ChangeStale, What: "relay@4447.service", From: oldRel, To: newRel},
		{Kind: ChangeDrain, What: "relay@4447.service"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Diff =\n%v\nwant\n%v", got, want)
	}
	if s := got[0].String(); !strings.Contains(s, "runs bbbbbbbbbbbb, not the current release aaaaaaaaaaaa") {
		t.Errorf("change reads %q", s)
	}
	// A box whose processes all run current, admit or were drained on
	// purpose, is converged.
	actual.Running["relay@4444.service"], actual.Running["relay@4447.service"] = newRel, newRel
	actual.Draining, actual.RolloutDrained = []string{"relay@4446.service", "relay@4447.service"}, nil
	if got := Diff(desired, actual); len(got) != 0 {
		t.Errorf("Diff = %v on a converged box with two processes drained on purpose", got)
	}
}

// simCutOff sets up a box the way a rollout cut off mid-way leaves it:
// current points at the new release, relay@4443 already runs it, relay@4444
// still runs the old one and is draining.
func simCutOff(t *testing.T) (box *simBox, rel Releases, oldRel, newRel string, newer []byte) {
	t.Helper()
	rel = Releases{Root: t.TempDir()}
	box = newSimBox(map[int]int{4443: 3, 4444: 3})
	box.root = rel.Root
	ctx := context.Background()
	old, newer := []byte("#!/bin/sh\necho old\n"), []byte("#!/bin/sh\necho new\n")
	for _, b := range [][]byte{old, newer} {
		installCurrent(t, rel, box, b)
	}
	oldRel, newRel = Digest(old), Digest(newer)
	box.procs[4443].release = newRel
	box.procs[4444].release, box.procs[4444].draining = oldRel, true
	if err := rel.MarkRolloutDrain(ctx, box, "relay@4444.service"); err != nil {
		t.Fatal(err)
	}
	return box, rel, oldRel, newRel, newer
}

// TestRolloutResumesAfterACutOff: a re-run of the rollout finds current
// already on the new release, yet restarts the process still on the old
// one (and with it its drain), and leaves the one already moved alone.
func TestRolloutResumesAfterACutOff(t *testing.T) {
	t.Parallel()
	box, rel, oldRel, newRel, newer := simCutOff(t)
	healthy := func(context.Context, Runner, string) error { return nil }
	insts := []string{"relay@4443.service", "relay@4444.service"}
	r, err := Rollout(context.Background(), box, rel, newer, insts, healthy, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Resumed || r.From != oldRel || r.To != newRel || !reflect.DeepEqual(r.Restarted, []string{"relay@4444.service"}) {
		t.Errorf("result %+v, want resumed %s -> %s restarting relay@4444 only", r, text.ShortSHA(oldRel), text.ShortSHA(newRel))
	}
	runs, err := rel.Running(context.Background(), box, insts)
	if err != nil || runs["relay@4443.service"] != newRel || runs["relay@4444.service"] != newRel {
		t.Errorf("running %v (%v), want both on %s", runs, err, text.ShortSHA(newRel))
	}
	if box.proc(4444).draining {
		t.Error("relay@4444 is still draining")
	}
	for _, e := range box.log() {
		if strings.HasPrefix(e, "restart 4443") {
			t.Errorf("relay@4443, already on the new release, was restarted: %v", box.log())
		}
	}
	// Once more: nothing left to do.
	r, err = Rollout(context.Background(), box, rel, newer, insts, healthy, nil, nil)
	if err != nil || r.From != r.To || len(r.Restarted) != 0 {
		t.Errorf("third run: %+v, %v; want nothing to do", r, err)
	}
}

// TestApplyRepairsProcessesLeftBehind: converge's apply restarts the
// process on the old release, moved out first (drained and shed, make
// before break), and makes the one left draining admit again.
func TestApplyRepairsProcessesLeftBehind(t *testing.T) {
	t.Parallel()
	box, rel, oldRel, newRel, _ := simCutOff(t)
	box.procs[4443].draining = true
	plan := &Plan{State: HostState{Release: newRel}}
	if err := rel.MarkRolloutDrain(context.Background(), box, "relay@4443.service"); err != nil {
		t.Fatal(err)
	}
	changes := []Change{{Kind: ChangeStale, What: "relay@4444.service", From: oldRel, To: newRel}, {Kind: ChangeUndrain, What: "relay@4443.service"}}
	r, err := Apply(context.Background(), box, plan, changes, rel, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Restarted, []string{"relay@4444.service"}) {
		t.Errorf("restarted %v", r.Restarted)
	}
	want := []string{"POST /drain 4444", "shed 4444: 3 at rate 50", "restart 4444 with 0 sessions", "DELETE /drain 4443"}
	if got := box.log(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if box.proc(4444).release != newRel || box.proc(4443).draining || box.proc(4444).draining {
		t.Errorf("after apply: 4443 %+v, 4444 %+v", *box.proc(4443), *box.proc(4444))
	}
	if marks, err := rel.RolloutDrained(context.Background(), box); err != nil || len(marks) != 0 {
		t.Errorf("rollout drain marks left: %v (%v)", marks, err)
	}
}

// TestDrainingInstances asks real relay processes, the way it is done on
// a box (bash's /dev/tcp on each process's port, one command for all):
// the drained one is listed, the admitting one and a port where nothing
// listens are not.
func TestDrainingInstances(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("no bash")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var insts []string
	for range 2 {
		r, err := relay.Start(ctx, relay.Config{Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		insts = append(insts, fmt.Sprintf("relay@%d.service", r.Addr().Port))
	}
	closed := fmt.Sprintf("relay@%d.service", freePort(t))
	if err := DrainOnBox(ctx, localRunner{}, insts[1], true); err != nil {
		t.Fatal(err)
	}
	got, err := DrainingInstances(ctx, localRunner{}, append(insts, closed))
	if err != nil || !reflect.DeepEqual(got, []string{insts[1]}) {
		t.Errorf("draining %v, %v; want [%s]", got, err, insts[1])
	}
}
