//go:build e2e

// The end-to-end test of a fleet run by a team (issue 33): the fleet's
// state on a real object store (SeaweedFS on loopback, named by the fleet
// file's state.backend), two operators' state dirs on one bucket, on lab
// boxes through the real Pulumi CLI. Its own lab (bridge rfteam0, subnet
// 10.231.170.0/24, dir /var/lib/relayfleet/lab-team) and fleet (tm), no box
// left behind.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/lease"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/test/systest"
)

const (
	teamLabDir = "/var/lib/relayfleet/lab-team"
	teamBridge = "rfteam0"
	teamSubnet = "10.231.170.0/24"
	teamFleet  = "tm"
	// teamWatch is B's fleet relays --watch interval: the poll the
	// router's file follows within.
	teamWatch = time.Second
)

// teamInventory writes the fleet file: the backend, two steady groups of
// one box each (so that a shape change of group b replaces one box), a
// boxes in group a.
func teamInventory(t *testing.T, path, backend string, a int, bShape string) {
	t.Helper()
	inv := fmt.Sprintf(`version: 1
name: %s
state:
  backend: %q
access:
  public_listen: [live/]
steady:
  - name: tm-a
    provider: lab
    shape: small
    count: %d
    processes: auto
    base_port: 4443
  - name: tm-b
    provider: lab
    shape: %s
    count: 1
    processes: auto
    base_port: 4443
`, teamFleet, backend, a, bShape)
	testutil.WriteFile(t, path, []byte(inv), 0o644)
}

// TestE2ETeamOnS3: two operators, A and B, each with a state dir of their
// own, one fleet in one bucket on SeaweedFS, the team's passphrase from a
// file, the store's credentials from the environment:
//
//  1. A's fleet up makes two boxes; B keeps a router's relays file
//     current (fleet relays --out FILE --watch 1s) and a real router
//     reads it. A replaces one box (a shape change, fleet up): B's file
//     and router list the new box, not the old, within a few polls.
//  2. A's fleet rollout holds the fleet's lock (stopped mid-run): B's
//     fleet converge refuses in one line naming it (command, user, host,
//     pid), and with --wait runs once the rollout is done.
//  3. A's fleet up adding a box, killed with SIGKILL mid-run (with its
//     Pulumi CLI and plugins): B's fleet unlock clears its lease and
//     Pulumi lock, B's fleet up completes, and no box is duplicated (lab
//     boxes and the stack's Box resources).
//  4. The Pulumi CLI in infra/pulumi on the S3 backend: pulumi preview
//     --expect-no-changes after fleet up; pulumi up removes a box; fleet
//     preview then plans no change.
//  5. B's fleet destroy: no box left.
func TestE2ETeamOnS3(t *testing.T) {
	began := time.Now()
	a := newE2ELab(t, teamLabDir, teamBridge, teamSubnet, map[string]string{"fleet": teamFleet})
	s3 := testutil.StartSeaweedFS(t)
	s3.MakeBucket(t, "relayfleet")
	s3.SetEnv(t)
	backend := s3.Backend("relayfleet", "team")
	t.Setenv(program.BackendEnv, "")
	t.Setenv(program.StateDirEnv, "")
	secret := make([]byte, 16)
	rand.Read(secret)
	passFile := filepath.Join(a.work, "team-passphrase") // the team's, shared out of band
	testutil.WriteFile(t, passFile, []byte(hex.EncodeToString(secret)+"\n"), 0o600)
	t.Setenv(program.PassphraseFileEnv, passFile)

	a.inv = filepath.Join(a.work, "tm.yaml")
	teamInventory(t, a.inv, backend, 1, "small")
	// B: the same fleet file, lab and builds, a state dir of its own.
	bl := *a
	b := &bl
	b.state = filepath.Join(a.work, "state-b")
	boxes := func() []lab.Box { return a.boxes(a.owned) }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	// 1. A's fleet up: two boxes.
	a.fleet("up")
	before := boxes()
	if len(before) != 2 {
		a.fatalf("%d boxes after A's fleet up, want 2", len(before))
	}
	for _, dir := range []string{a.state, b.state} {
		if _, err := os.Stat(filepath.Join(dir, "passphrase")); err == nil {
			a.fatalf("a passphrase was generated into %s: the team's is in %s", dir, passFile)
		}
	}
	if _, err := os.Stat(filepath.Join(a.state, "backend")); err == nil {
		a.fatalf("A's state dir got a file backend beside the fleet file's s3 one")
	}

	// B's watcher and the router on its file.
	relaysFile := filepath.Join(a.work, "b-relays.json")
	watcher := testutil.StartLog(t, filepath.Join(a.work, "b-relays.log"), b.cmd(ctx, "relays", "--inventory", b.inv,
		"--state-dir", b.state, "--pulumi", b.cli, "--out", relaysFile, "--watch", teamWatch.String()))
	// The router refuses a relays file that is not there: it starts once
	// the watcher wrote it (docs/operations.md: fleet relays --out once,
	// then the watcher and the router).
	testutil.WaitFor(t, 2*time.Minute, "B's watcher to write "+relaysFile, func() bool {
		_, err := os.Stat(relaysFile)
		return err == nil
	})
	port := freePort(t)
	testutil.Start(t, "router", exec.CommandContext(ctx, a.relayBin, "router", "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--relays", relaysFile, "--poll", "200ms", "--log-level", "warn"))
	routed := func() []routerRelay {
		var doc struct{ Relays []routerRelay }
		if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/relays", port)); err == nil {
			json.NewDecoder(resp.Body).Decode(&doc)
			resp.Body.Close()
		}
		return doc.Relays
	}
	// lists: whether B's relays file and router list a box's address
	// (routable: to new listeners, not draining), each.
	lists := func(addr string, routable bool) (inFile, inRouter bool) {
		var f struct{ Relays []program.Relay }
		data, _ := os.ReadFile(relaysFile)
		json.Unmarshal(data, &f)
		for _, r := range f.Relays {
			inFile = inFile || strings.Contains(r.URL, "//"+addr+":") && !(routable && r.Draining)
		}
		for _, r := range routed() {
			inRouter = inRouter || strings.Contains(r.URL, "//"+addr+":") && !(routable && r.Draining)
		}
		return inFile, inRouter
	}
	if !testutil.Poll(2*time.Minute, func() bool {
		f0, r0 := lists(before[0].Address.String(), true)
		f1, r1 := lists(before[1].Address.String(), true)
		return f0 && r0 && f1 && r1
	}) {
		a.fatalf("B's relays file and router do not list both boxes %v %v: the router lists %+v; watcher:\n%s",
			before[0].Address, before[1].Address, routed(), watcher.Tail(10))
	}

	// A replaces tm-b's box (a new shape: a new box, then the old one
	// drained and deleted). A sampler records when B's file and router
	// list the new box and no longer the old.
	var old lab.Box
	for _, bx := range before {
		if strings.HasPrefix(bx.Name, "tm-b") {
			old = bx
		}
	}
	teamInventory(t, a.inv, backend, 1, "medium")
	// seen: the new box (found in the lab as it is made), when the old box
	// left the lab, and when the new box was first listed without the old
	// one: in B's file, by B's router.
	type seen struct {
		box                lab.Box
		gone, file, router time.Time
	}
	samples := make(chan seen, 1)
	sampling, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go func() {
		var s seen
		for sampling.Err() == nil && (s.file.IsZero() || s.router.IsZero() || s.gone.IsZero()) {
			if s.box.Name == "" || s.gone.IsZero() {
				if bs, err := a.lab.List(sampling, a.owned); err == nil {
					for _, bx := range bs {
						if strings.HasPrefix(bx.Name, "tm-b") && bx.Name != old.Name {
							s.box = bx
						}
					}
					if s.box.Name != "" && addrOf(bs, old.Name) == "" {
						s.gone = time.Now()
					}
				}
			}
			if s.box.Name != "" {
				fNew, rNew := lists(s.box.Address.String(), true)
				fOld, rOld := lists(old.Address.String(), false)
				now := time.Now()
				if s.file.IsZero() && fNew && !fOld {
					s.file = now
				}
				if s.router.IsZero() && rNew && !rOld {
					s.router = now
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		samples <- s
	}()
	out, code := a.run(nil, "up", "--yes")
	upDone := time.Now()
	if sum := summary(out, "up: stack "+teamFleet+": "); code != 0 || !strings.Contains(sum, "1 replace") {
		a.fatalf("A's fleet up with tm-b medium: exit %d, summary %q, want 1 replace: %s", code, sum, lastLine(out))
	}
	// B follows within a few polls, or the sampler is stopped.
	const followLimit = 30 * time.Second
	var s seen
	select {
	case s = <-samples:
	case <-time.After(followLimit):
		stopSampling()
		s = <-samples
	}
	after := boxes()
	if len(after) != 2 || s.box.Name == "" || addrOf(after, s.box.Name) == "" || addrOf(after, old.Name) != "" {
		a.fatalf("boxes after the replacement: %v, want tm-a's and %s's replacement (seen made: %q)", after, old.Name, s.box.Name)
	}
	if s.file.IsZero() || s.router.IsZero() || s.gone.IsZero() {
		a.fatalf("%v after A's fleet up returned, B's relays file (%v) or router (%v) did not list %s's replacement %s (%s) without %s (gone from the lab: %v): the router lists %+v; watcher:\n%s",
			followLimit, !s.file.IsZero(), !s.router.IsZero(), old.Name, s.box.Name, s.box.Address, old.Address, !s.gone.IsZero(), routed(), watcher.Tail(10))
	}
	// From the old box's deletion (Pulumi's update then writes the stack's
	// hosts): what B's watcher and router took to follow.
	fileDelay, routerDelay := s.file.Sub(s.gone), s.router.Sub(s.gone)
	t.Logf("TEAM step 1: B's relays file listed %s's replacement without it %.1fs and B's router %.1fs after the old box left the lab (A's fleet up returned %.1fs after it; watch %v, router poll 200ms)",
		old.Name, fileDelay.Seconds(), routerDelay.Seconds(), upDone.Sub(s.gone).Seconds(), teamWatch)
	// A few polls: each poll reads every stack through the Pulumi CLI,
	// seconds on a loaded machine.
	if limit := 15 * teamWatch; routerDelay > limit {
		a.fatalf("B's router followed A's replacement %.1fs after the old box left the lab, more than %v (a few polls of %v)", routerDelay.Seconds(), limit, teamWatch)
	}

	// 2. A's rollout holds the fleet's lock, stopped mid-run (SIGSTOP) so
	// that the overlap is certain; B's converge refuses naming it, then
	// with --wait waits for it and runs.
	l, err := lease.Open(ctx, backend, teamFleet)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	holder := func() lease.State {
		st, _ := l.Read(ctx)
		return st
	}
	hostArgs := func(e *e2eLab, args ...string) []string {
		return append(args, "--inventory", e.inv, "--state-dir", e.state, "--pulumi", e.cli, "--lab-dir", e.labDir, "--relay-binary", e.relayBin)
	}
	var rollOut bytes.Buffer
	roll := a.cmd(ctx, hostArgs(a, "rollout", "--canary-bake", "0s")...)
	roll.Stdout, roll.Stderr = &rollOut, &rollOut
	if err := roll.Start(); err != nil {
		t.Fatal(err)
	}
	if !testutil.PollEvery(3*time.Minute, 200*time.Millisecond, func() bool {
		st := holder()
		return !st.Free(time.Now()) && st.Holder.Command == "fleet rollout"
	}) {
		a.fatalf("A's fleet rollout did not take the fleet's lock: %+v\n%s", holder(), rollOut.String())
	}
	syscall.Kill(-roll.Process.Pid, syscall.SIGSTOP)
	host, _ := os.Hostname()
	me, _ := user.Current()
	want := fmt.Sprintf(`is locked by "fleet rollout" by %s@%s (pid %d)`, me.Username, host, roll.Process.Pid)
	out, code = systest.Combined(t, b.cmd(ctx, hostArgs(b, "converge")...))
	t.Logf("B's fleet converge: exit %d\n%s", code, out)
	if code == 0 || !strings.Contains(lastLine(out), want) {
		a.fatalf("B's fleet converge during A's rollout: exit %d: %q; want a refusal containing %q", code, lastLine(out), want)
	}
	var convOut testutil.SyncBuffer
	conv := b.cmd(ctx, hostArgs(b, "converge", "--wait", "5m")...)
	conv.Stdout, conv.Stderr = &convOut, &convOut
	if err := conv.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, time.Minute, "B's converge --wait to say it waits", func() bool {
		return strings.Contains(convOut.String(), fmt.Sprintf("waiting for fleet %s's lease, held by %q", teamFleet, "fleet rollout"))
	})
	syscall.Kill(-roll.Process.Pid, syscall.SIGCONT)
	if err := roll.Wait(); err != nil {
		a.fatalf("A's fleet rollout: %v\n%s", err, rollOut.String())
	}
	if err := conv.Wait(); err != nil {
		a.fatalf("B's fleet converge --wait: %v\n%s", err, convOut.String())
	}
	t.Logf("A's rollout:\n%s\nB's converge --wait:\n%s", rollOut.String(), convOut.String())

	// 3. A's fleet up adding a box to tm-a, killed with SIGKILL once the
	// box is being made, with every process under it (a machine that went
	// down): B's unlock clears the lease and the stack lock, B's up
	// completes, no box duplicated.
	teamInventory(t, a.inv, backend, 2, "medium")
	var upOut testutil.SyncBuffer
	up := a.cmd(ctx, a.withFlags("up", "--yes")...)
	up.Stdout, up.Stderr = &upOut, &upOut
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	if !testutil.PollEvery(3*time.Minute, 200*time.Millisecond, func() bool {
		locks, _ := l.PulumiLocks(ctx)
		return len(locks) > 0 && len(boxes()) >= 3
	}) {
		a.fatalf("A's fleet up did not start a third box under a Pulumi lock:\n%s", upOut.String())
	}
	under := descendants(up.Process.Pid)
	syscall.Kill(-up.Process.Pid, syscall.SIGKILL)
	for _, pid := range under {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	up.Wait()
	out, code = b.run(nil, "up", "--yes")
	if code == 0 || !strings.Contains(lastLine(out), `is locked by "fleet up"`) || !strings.Contains(lastLine(out), "fleet unlock") {
		a.fatalf("B's fleet up after A's killed one: exit %d: %q; want a refusal naming it and fleet unlock", code, lastLine(out))
	}
	out, code = systest.Combined(t, b.cmd(ctx, "unlock", "--inventory", b.inv, "--state-dir", b.state, "--pulumi", b.cli))
	t.Logf("B's fleet unlock: exit %d\n%s", code, out)
	if code != 0 || !strings.Contains(out, "cleared fleet "+teamFleet+"'s lease") || !strings.Contains(out, "removed Pulumi lock on stack") {
		a.fatalf("B's fleet unlock: exit %d: %s", code, out)
	}
	b.fleet("up", "--yes")
	if bs := boxes(); len(bs) != 3 {
		a.fatalf("%d boxes after B's up that followed the unlock, want 3: %v", len(bs), bs)
	}
	p := newPulumiProject(b, backend, passFile, teamFleet)
	if n := p.resources("relayfleet:index:Box"); n != 3 {
		a.fatalf("the stack holds %d Box resources after B's up, want 3", n)
	}

	// 4. The Pulumi CLI on the same stack in the bucket: no change after
	// fleet up; pulumi up removes the box the fleet file no longer asks
	// for; fleet preview then plans no change.
	p.must("preview", "--expect-no-changes", "--config-file", p.cfg)
	teamInventory(t, a.inv, backend, 1, "medium")
	p.must("up", "--yes", "--skip-preview", "--config-file", p.cfg)
	if bs := boxes(); len(bs) != 2 {
		a.fatalf("%d boxes after pulumi up with tm-a count 1, want 2", len(bs))
	}
	if n := p.resources("relayfleet:index:Box"); n != 2 {
		a.fatalf("the stack holds %d Box resources after pulumi up, want 2", n)
	}
	a.previewSame(teamFleet)

	// 5. B's destroy: nothing left.
	b.fleet("destroy", "--yes")
	if bs := boxes(); len(bs) != 0 {
		a.fatalf("%d boxes after B's fleet destroy, want 0: %v", len(bs), bs)
	}
	t.Logf("TEAM: the whole test took %.0fs", time.Since(began).Seconds())
}
