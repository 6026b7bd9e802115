package events

import (
	"context"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
)

// TestSteadyHostsFollowTheStack: a reconcile rewrites this state dir's
// steady entry from the steady stack every time, not only when it has
// none: a box replaced by another machine's fleet up leaves the relays
// file, its replacement comes in; the old box of a replacement this
// machine's up has under way stays; a destroyed steady stack leaves it.
func TestSteadyHostsFollowTheStack(t *testing.T) {
	h := newHarness(t)
	steady := []program.HostEntry{{Name: "lab-steady-1", Address: "10.0.0.2", Ports: []int{4443}}}
	exists := true
	h.r.SteadyHosts = func(context.Context) ([]program.HostEntry, bool, error) { return steady, exists, nil }
	before := h.ev.UpAt().Add(-time.Hour)
	h.run0(t, before)
	if rs := h.relays(t); len(rs) != 1 || rs[0].URL != "http://10.0.0.2:4443/" {
		t.Fatalf("relays %+v: want the steady box", rs)
	}
	// Another operator's fleet up replaced the box.
	steady = []program.HostEntry{{Name: "lab-steady-1", Address: "10.0.0.7", Ports: []int{4443}}}
	h.run0(t, before)
	if rs := h.relays(t); len(rs) != 1 || rs[0].URL != "http://10.0.0.7:4443/" {
		t.Fatalf("relays %+v after a replacement elsewhere: want the new box only", rs)
	}
	// This machine's up is replacing it: its old box stays, draining.
	old := program.HostEntry{Name: "lab-steady-1" + program.ReplacedSuffix, Address: "10.0.0.7", Ports: []int{4443}}
	if _, err := program.PutStackHosts(h.r.StateDir, program.StackHosts{Stack: h.r.Fleet.Name, DrainingHosts: []string{old.Name}, Hosts: append(steady, old)}); err != nil {
		t.Fatal(err)
	}
	steady = []program.HostEntry{{Name: "lab-steady-1", Address: "10.0.0.8", Ports: []int{4443}}}
	h.run0(t, before)
	rs := h.relays(t)
	if len(rs) != 2 || rs[0].URL != "http://10.0.0.8:4443/" || rs[1].URL != "http://10.0.0.7:4443/" || !rs[1].Draining || rs[0].Draining {
		t.Fatalf("relays %+v during this machine's replacement: want the new box, and the old one draining", rs)
	}
	exists = false
	h.run0(t, before)
	if rs := h.relays(t); len(rs) != 1 || rs[0].URL != "http://10.0.0.7:4443/" {
		t.Fatalf("relays %+v once the steady stack is gone: want only the replacement's old box this machine's up still has", rs)
	}
}

// run0 reconciles at a time the event needs nothing done.
func (h *harness) run0(t *testing.T, at time.Time) {
	t.Helper()
	if _, err := h.r.Reconcile(context.Background(), at); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
}
