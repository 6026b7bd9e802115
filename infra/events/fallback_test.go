package events

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/capacity"
)

// spillStacks is an event stack over candidates: each Up makes the boxes
// of every set it is asked for, unless refuse says candidate k cannot
// make box n; then it fails as Pulumi's up --continue-on-error does,
// with what its state holds.
type spillStacks struct {
	fleet  string
	refuse func(k, n int) bool
	// made are the box numbers the state holds, by group.
	made  map[string][]int
	calls []string
}

func (s *spillStacks) Up(_ context.Context, _ string, b program.Burst) ([]program.HostEntry, error) {
	sets := []program.Spill{{Candidate: 0, Boxes: b.Boxes}}
	sets = append(sets, b.Spill...)
	var call []string
	for _, set := range sets {
		call = append(call, fmt.Sprintf("c%d=%d", set.Candidate, set.Boxes))
	}
	s.calls = append(s.calls, strings.Join(call, " "))
	old := s.made
	s.made = map[string][]int{}
	var hosts []program.HostEntry
	var errs []string
	choices := b.Pool.Choices()
	for _, set := range sets {
		group := candidateGroup(b.Event, set.Candidate)
		for n := 1; n <= set.Boxes; n++ {
			c := choices[set.Candidate]
			name := program.BurstBoxName(s.fleet, b.Event, c.Provider, n)
			if set.Candidate > 0 {
				name = program.SpillBoxName(s.fleet, b.Event, c.Provider, set.Candidate, n)
			}
			if !slices.Contains(old[group], n) && s.refuse(set.Candidate, n) {
				errs = append(errs, fmt.Sprintf("box %s: %s create server %s: 412 resource_unavailable: error during placement", name, c.Provider, name))
				continue
			}
			s.made[group] = append(s.made[group], n)
			hosts = append(hosts, program.HostEntry{Name: name, Group: group, Backend: c.Provider, Address: fmt.Sprintf("10.0.%d.%d", set.Candidate, n), Ports: []int{4443}})
		}
	}
	if len(errs) == 0 {
		return hosts, nil
	}
	boxes := 0
	for _, ns := range s.made {
		boxes += len(ns)
	}
	return nil, &program.PartialError{Hosts: hosts, Boxes: boxes, Made: s.made, Err: errors.New("up: " + strings.Join(errs, "; "))}
}

func (s *spillStacks) Destroy(context.Context, string, program.Burst) error {
	s.calls = append(s.calls, "destroy")
	s.made = nil
	return nil
}

func (s *spillStacks) Repair(context.Context, string, program.Burst) error { return nil }

// candidateHarness is the lab event with its burst listing candidates:
// lab/small first (the lab's shape, at most first boxes), hcloud ccx33 in
// fsn1 second; its peak needs three small boxes over the steady fleet.
func candidateHarness(t *testing.T, first int, refuse func(k, n int) bool) (*harness, *spillStacks, *[]string) {
	t.Helper()
	h := newHarness(t)
	ev := h.ev
	ev.Burst.Candidates = []inventories.Candidate{
		{Provider: "lab", Shape: "small", Max: first},
		{Provider: "hcloud", Shape: "ccx33", Location: "fsn1"},
	}
	ev.Burst.Max = 0
	s, err := Size(ev, h.r.Fleet, h.r.Catalogue, h.r.Calibration)
	if err != nil {
		t.Fatal(err)
	}
	ev.PeakListeners = s.SteadyCapacity + 3*s.PerBox
	stacks := &spillStacks{fleet: h.r.Fleet.Name, refuse: refuse}
	h.r.Stacks = stacks
	var swept []string
	h.r.Backends = func(name string) (backend.Backend, error) {
		swept = append(swept, name)
		return h.cloud, nil
	}
	return h, stacks, &swept
}

// perBox is what a box of the event's candidate k carries.
func perBox(t *testing.T, h *harness, k int) int {
	t.Helper()
	box := h.ev.Burst.CandidateBox(k)
	c, err := capacity.BoxCandidate(h.r.Catalogue, capacity.Burst, h.ev.Name, &box)
	if err != nil {
		t.Fatal(err)
	}
	return capacity.PerBox(c.Box, h.r.Calibration).Capacity
}

// TestFallbackPlansTheRestOnTheNextCandidate: the first candidate makes
// one box of three and refuses the others for capacity; in the same
// reconcile the rest of the plan is resized for the second candidate's
// boxes and made there, every box routed; the plan, the log and the report
// say which candidate carries how many listeners at what price, and the
// teardown's proof lists both candidates' clouds.
func TestFallbackPlansTheRestOnTheNextCandidate(t *testing.T) {
	h, stacks, swept := candidateHarness(t, 0, func(k, n int) bool { return k == 0 && n > 1 })
	small, big := perBox(t, h, 0), perBox(t, h, 1)
	wantBig := (2*small + big - 1) / big
	rec := h.run(t, h.ev.UpAt())
	if want := []string{"c0=3", fmt.Sprintf("c0=1 c1=%d", wantBig)}; !reflect.DeepEqual(stacks.calls, want) {
		t.Fatalf("ups %q, want %q", stacks.calls, want)
	}
	if rec.Phase != Up || len(rec.Hosts) != 1+wantBig || rec.Wanted() != 1+wantBig {
		t.Fatalf("phase %s, %d hosts, %d wanted; want up with %d", rec.Phase, len(rec.Hosts), rec.Wanted(), 1+wantBig)
	}
	c0, c1 := rec.Candidates[0], rec.Candidates[1]
	if !strings.Contains(c0.Refused, "412 resource_unavailable") || c0.Boxes != 1 || c1.Refused != "" || c1.Boxes != wantBig || c1.PerBox != big || c1.Price <= 0 {
		t.Fatalf("candidates %+v", rec.Candidates)
	}
	if !strings.Contains(h.log.String(), "action=fallback") || !strings.Contains(h.log.String(), text.Plural(wantBig, "box", "boxes")+" on hcloud/ccx33@fsn1") {
		t.Errorf("no fallback logged:\n%s", h.log.String())
	}
	if rs := h.relays(t); len(rs) != 1+wantBig {
		t.Errorf("%d relays routed, want %d", len(rs), 1+wantBig)
	}
	var status strings.Builder
	if err := WriteRecords(&status, []*Record{rec}, "dir"); err != nil {
		t.Fatal(err)
	}
	if out := status.String(); !strings.Contains(out, "lab-show by candidate") || !regexp.MustCompile(`(?m)^lab/small\s+1\s+1\s.*412 resource_unavailable`).MatchString(out) ||
		!regexp.MustCompile(fmt.Sprintf(`(?m)^hcloud/ccx33@fsn1\s+%d\s+%d\s+%s\s+\d+\.\d\d\s+-$`, wantBig, wantBig, regexp.QuoteMeta(capacity.Count(wantBig*big)))).MatchString(out) {
		t.Errorf("status without the plan by candidate:\n%s", out)
	}
	// Up and full: the next reconcile runs no Pulumi and asks the first
	// candidate again for nothing.
	stacks.calls = nil
	h.probe.perHost = map[string]int64{rec.Hosts[0].Name: 300}
	for _, hst := range rec.Hosts[1:] {
		h.probe.perHost[hst.Name] = 500
	}
	rec = h.run(t, h.ev.Start.Time)
	if len(stacks.calls) != 0 || rec.Phase != Up {
		t.Fatalf("at the start: ups %q, phase %s", stacks.calls, rec.Phase)
	}
	if s := rec.Samples[len(rec.Samples)-1]; !reflect.DeepEqual(s.Candidates, []int64{300, int64(500 * wantBig)}) {
		t.Errorf("sample %+v: want listeners by candidate", s)
	}
	h.probe.perHost = nil
	rec = h.run(t, h.ev.GoneBy())
	if rec.Phase != Gone || !reflect.DeepEqual(*swept, []string{"lab", "hcloud"}) {
		t.Fatalf("phase %s, swept %v: want gone, both clouds listed", rec.Phase, *swept)
	}
	rep := rec.Report
	if len(rep.Candidates) != 2 || rep.Candidates[0].Boxes != 1 || rep.Candidates[1].Boxes != wantBig ||
		rep.Candidates[1].PeakListeners != int64(500*wantBig) || rep.Candidates[1].Capacity != wantBig*big || rep.Candidates[1].Cost <= 0 {
		t.Fatalf("report candidates %+v", rep.Candidates)
	}
	if sum := rep.Candidates[0].Cost + rep.Candidates[1].Cost; rep.Cost < sum-0.01 || rep.Cost > sum+0.01 {
		t.Errorf("report cost %.2f, want the candidates' %.2f", rep.Cost, sum)
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "hcloud/ccx33@fsn1") || !strings.Contains(out.String(), "refused") {
		t.Errorf("report text without its candidates:\n%s", out.String())
	}
}

// TestFallbackKeepsAHoleAndTheLastCandidateIsRetried: the first candidate
// refuses box 2 but makes box 3, which stays (the stack is asked for boxes
// 1 to 3 of it, not 1 to 2: box 3 would be deleted); the second candidate,
// the last, refuses too: nothing to fall back to, the event is short and
// says so, and the next run tries the last candidate again.
func TestFallbackKeepsAHoleAndTheLastCandidateIsRetried(t *testing.T) {
	full := false
	h, stacks, _ := candidateHarness(t, 0, func(k, n int) bool { return k == 0 && n == 2 || k == 1 && !full })
	rec := h.run(t, h.ev.UpAt())
	if want := []string{"c0=3", "c0=3 c1=1"}; !reflect.DeepEqual(stacks.calls, want) {
		t.Fatalf("ups %q, want %q", stacks.calls, want)
	}
	if rec.Candidates[0].Refused == "" || !reflect.DeepEqual(rec.Candidates[0].Made, []int{1, 3}) || rec.Candidates[1].Refused != "" {
		t.Fatalf("candidates %+v", rec.Candidates)
	}
	if len(rec.Hosts) != 2 || rec.Wanted() != 3 || !strings.Contains(h.log.String(), "2 of 3 boxes routed") {
		t.Fatalf("%d hosts, %d wanted; log:\n%s", len(rec.Hosts), rec.Wanted(), h.log.String())
	}
	full, stacks.calls = true, nil
	rec = h.run(t, h.ev.UpAt().Add(time.Minute))
	if want := []string{"c0=3 c1=1"}; !reflect.DeepEqual(stacks.calls, want) || len(rec.Hosts) != 3 {
		t.Fatalf("ups %q, %d hosts: want the last candidate tried again, 3 routed", stacks.calls, len(rec.Hosts))
	}
}

// TestFallbackRespectsACandidatesMax: a first candidate capped at one box
// gets one; the rest goes to the next without any refusal.
func TestFallbackRespectsACandidatesMax(t *testing.T) {
	h, stacks, _ := candidateHarness(t, 1, func(int, int) bool { return false })
	big := perBox(t, h, 1)
	rec := h.run(t, h.ev.UpAt())
	if want := []string{fmt.Sprintf("c0=1 c1=%d", (2*perBox(t, h, 0)+big-1)/big)}; !reflect.DeepEqual(stacks.calls, want) || rec.Candidates[0].Refused != "" {
		t.Fatalf("ups %q, want %q; candidates %+v", stacks.calls, want, rec.Candidates)
	}
}
