package main

import (
	"slices"
	"testing"
)

// TestScheduleTakesTurns: every run of every variant at every step is
// scheduled once, and at each step the variants take turns run by run, so
// drift in the machine's speed falls on every variant alike.
func TestScheduleTakesTurns(t *testing.T) {
	steps := [][]int{{1000, 2000}, {1000, 2000}, {2000}} // the last: --groups' top step only
	got := schedule(steps, 3)
	if want := 2*3 + 2*3 + 1*3; len(got) != want {
		t.Fatalf("%d runs scheduled, want %d", len(got), want)
	}
	seen := map[slot]bool{}
	for _, sl := range got {
		if seen[sl] {
			t.Fatalf("run %+v scheduled twice", sl)
		}
		seen[sl] = true
	}
	var order []string
	for _, sl := range got {
		order = append(order, string(rune('a'+sl.v))+"@"+[]string{"1k", "2k"}[steps[sl.v][sl.step]/1000-1]+string(rune('1'+sl.run)))
	}
	want := []string{
		"a@1k1", "b@1k1", "a@1k2", "b@1k2", "a@1k3", "b@1k3",
		"a@2k1", "b@2k1", "c@2k1", "a@2k2", "b@2k2", "c@2k2", "a@2k3", "b@2k3", "c@2k3",
	}
	if !slices.Equal(order, want) {
		t.Fatalf("order\n%v\nwant\n%v", order, want)
	}
}
