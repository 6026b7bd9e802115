package events

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
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

// TestRelaysWatch: the watcher writes the relays file when the routes
// change and only then, keeps it as it was when a read fails, and stops
// with the context's error.
func TestRelaysWatch(t *testing.T) {
	out := filepath.Join(t.TempDir(), "relays.json")
	steady := program.StackHosts{Stack: "team", Hosts: []program.HostEntry{{Name: "a", Address: "10.0.0.1", Ports: []int{4443}}}}
	reads := make(chan func() ([]program.StackHosts, error))
	read := func(ctx context.Context) ([]program.StackHosts, error) {
		select {
		case f := <-reads:
			return f()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var log testutil.SyncBuffer
	done := make(chan error, 1)
	go func() {
		done <- RelaysWatch{Out: out, Every: time.Millisecond, Log: &log, Read: read}.Run(ctx)
	}()
	give := func(f func() ([]program.StackHosts, error)) {
		t.Helper()
		select {
		case reads <- f:
		case <-time.After(time.Minute):
			t.Fatal("the watcher did not read again")
		}
	}
	routes := func(sh ...program.StackHosts) func() ([]program.StackHosts, error) {
		return func() ([]program.StackHosts, error) { return sh, nil }
	}
	give(routes(steady))
	give(routes(steady)) // the first write is done once the second read starts
	first, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	give(func() ([]program.StackHosts, error) { return nil, errors.New("backend: connection refused") })
	give(routes(steady))
	if fi, err := os.Stat(out); err != nil || !os.SameFile(first, fi) {
		t.Fatalf("the file was rewritten though nothing changed (or a failed read touched it): %v", err)
	}
	if got := readFile(out); !strings.Contains(got, "http://10.0.0.1:4443/") {
		t.Fatalf("relays file %q", got)
	}
	event := program.StackHosts{Stack: StackName("team", "show"), Draining: true, Hosts: []program.HostEntry{{Name: "e", Address: "10.0.1.1", Ports: []int{4443}}}}
	give(routes(steady, event))
	give(routes(steady, event))
	if got := relayURLs(t, out); got != "http://10.0.0.1:4443/ http://10.0.1.1:4443/(draining)" {
		t.Fatalf("after the change: %q", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("stopped with %v, want context.Canceled", err)
	}
	want := "relays: " + out + " now lists 1 relay\nrelays: " + out + " kept as it was: backend: connection refused\nrelays: " + out + " now lists 2 relays\n"
	if log.String() != want {
		t.Errorf("log %q, want %q", log.String(), want)
	}
}

// TestRelaysWatchWorksApart: a watcher reads its stacks in a workspace of
// its own in the state dir, not the state dir's work/ that fleet up and
// the other commands rewrite each time they open the stack (opened there
// every poll, it left fleet up an empty Pulumi.yaml), and removes it when
// it stops.
func TestRelaysWatchWorksApart(t *testing.T) {
	state := t.TempDir()
	st := &program.Stack{Fleet: &inventories.Fleet{Name: "team"}, StateDir: state}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var seen []string
	read := func(context.Context) ([]program.StackHosts, error) {
		seen, _ = filepath.Glob(filepath.Join(state, "work-private-*"))
		cancel()
		return nil, errors.New("stop")
	}
	w := RelaysWatch{Stack: st, Out: filepath.Join(t.TempDir(), "relays.json"), Every: time.Second, Read: read}
	if err := w.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	if len(seen) != 1 {
		t.Fatalf("workspaces of the watcher's own while it read: %v, want one", seen)
	}
	if st.WorkDir != "" {
		t.Errorf("the caller's stack got the watcher's workspace %s", st.WorkDir)
	}
	if left, _ := filepath.Glob(filepath.Join(state, "work-*")); len(left) != 0 {
		t.Errorf("left after the watcher stopped: %v", left)
	}
}
