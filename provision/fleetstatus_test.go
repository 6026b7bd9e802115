package provision

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/sysctl"
)

// scriptRunner answers every command with out, or fails with err.
type scriptRunner struct {
	out string
	err error
}

func (r scriptRunner) Run(context.Context, string, io.Reader) ([]byte, error) {
	return []byte(r.out), r.err
}

// TestFleetStatusKeepsOrderAndErrors: every target is read, in order; one
// that cannot be read carries its error and does not stop the others.
func TestFleetStatusKeepsOrderAndErrors(t *testing.T) {
	targets := []Target{
		{Host: Host{Name: "a-1"}, Run: scriptRunner{err: errors.New("ssh: no route to host")}},
		{Host: Host{Address: "192.0.2.2:22"}, Run: scriptRunner{err: errors.New("ssh: handshake failed")}},
	}
	got := FleetStatus(context.Background(), targets, sysctl.Relay())
	if len(got) != 2 {
		t.Fatalf("%d statuses, want 2", len(got))
	}
	for i, want := range []struct{ host, err string }{{"a-1", "no route"}, {"192.0.2.2:22", "handshake failed"}} {
		if got[i].Host != want.host || got[i].Err == nil || !strings.Contains(got[i].Err.Error(), want.err) {
			t.Errorf("status %d: host %q, err %v; want %q and an error with %q", i, got[i].Host, got[i].Err, want.host, want.err)
		}
	}
}

// TestCurrentReleases: each target's current release, in order, or why
// it could not be read.
func TestCurrentReleases(t *testing.T) {
	targets := []Target{
		{Host: Host{Name: "a-1"}, Run: scriptRunner{out: "releases/abc123\nreleases/def456\n"}},
		{Host: Host{Name: "a-2"}, Run: scriptRunner{err: errors.New("ssh: no route to host")}},
		{Host: Host{Name: "a-3"}, Run: scriptRunner{out: "\n\n"}},
	}
	cur, errs := CurrentReleases(context.Background(), targets, Releases{Root: "/opt/relay"})
	if !slices.Equal(cur, []string{"abc123", "", ""}) {
		t.Errorf("current = %q, want abc123, none, none", cur)
	}
	if errs[0] != nil || errs[1] == nil || !strings.Contains(errs[1].Error(), "no route") || errs[2] != nil {
		t.Errorf("errs = %v; want only a-2's", errs)
	}
}

func TestBoxStatusCounts(t *testing.T) {
	b := BoxStatus{Processes: []ProcessStatus{
		{Unit: "relay@4443.service", Drops: 12, Stale: true},
		{Unit: "relay@4444.service", Draining: true},
		{Unit: "relay@4445.service", Drops: 1, Stale: true, Draining: true},
		{Unit: "relay@4446.service"},
	}}
	if n := b.Dropping(); n != 2 {
		t.Errorf("Dropping = %d, want 2", n)
	}
	if stale, draining := b.Behind(); stale != 2 || draining != 2 {
		t.Errorf("Behind = %d stale, %d draining; want 2, 2", stale, draining)
	}
	if n := (BoxStatus{}).Dropping(); n != 0 {
		t.Errorf("no processes: Dropping = %d", n)
	}
}

func TestTallyResults(t *testing.T) {
	changed := &Report{Changes: []Change{{Kind: "unit", What: "relay@4443.service"}}}
	rs := []HostResult{
		{Host: "a-1", Report: changed},
		{Host: "a-2", Report: &Report{}},
		{Host: "a-3", Err: errors.New("ssh: no route to host"), Report: changed}, // failed halfway
		{Host: "a-4", Report: changed},
		{Host: "a-5", Err: errors.New("facts: timeout")},
	}
	if got, want := TallyResults(rs), (Tally{Changed: 2, Unchanged: 1, Failed: 2}); got != want {
		t.Errorf("TallyResults = %+v, want %+v", got, want)
	}
	if got := TallyResults(nil); got != (Tally{}) {
		t.Errorf("no results: %+v", got)
	}
}
