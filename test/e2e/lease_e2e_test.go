//go:build e2e

// The end-to-end test of the fleet's one lock (package lease) on lab
// boxes through the real Pulumi CLI: its own lab (bridge rflse0, subnet
// 10.231.97.0/24) and state directory, no box left behind.
package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/lease"
	"github.com/relayfleet/relayfleet/test/systest"
)

// TestE2ELease: (1) a fleet rollout while a fleet converge holds the
// fleet's lock refuses in one line naming it, and with --wait runs once
// the converge is done; (2) a fleet up killed with SIGKILL mid-run leaves
// its lease and the Pulumi stack lock: the next fleet up refuses naming
// it, fleet unlock clears both (the holder's pid is gone), and fleet up
// then completes with no box duplicated.
func TestE2ELease(t *testing.T) {
	t.Parallel() // its own lab and fleet: see e2eLab
	e := newE2ELab(t, "/var/lib/relayfleet/lab-lease", "rflse0", "10.231.97.0/24", map[string]string{"fleet": "lk"})
	e.inv = filepath.Join(e.work, "lab.yaml")
	// A fleet name of its own: lab box names are machine names, shared
	// by every lab on this host.
	inventory := func(count int) {
		t.Helper()
		writeInventory(t, e.inv, count, "small")
		data, err := os.ReadFile(e.inv)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(e.inv, bytes.ReplaceAll(bytes.Replace(data, []byte("\nname: lab\n"), []byte("\nname: lk\n"), 1), []byte("name: lab-"), []byte("name: lk-")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	inventory(1)
	e.fleet("up", "--yes")
	backend := "file://" + filepath.Join(e.state, "backend")
	l, err := lease.Open(context.Background(), backend, "lk")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	holderIs := func(cmd string) bool {
		st, err := l.Read(context.Background())
		return err == nil && !st.Free(time.Now()) && st.Holder.Command == cmd
	}
	waitFor := func(what string, out *bytes.Buffer, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Minute); !ok(); time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				e.fatalf("timed out waiting for %s:\n%s", what, out.String())
			}
		}
	}
	// The flags of the commands that reach hosts over SSH (converge,
	// rollout): no lab-making flags.
	hostArgs := func(args ...string) []string {
		return append(args, "--inventory", e.inv, "--state-dir", e.state, "--pulumi", e.cli, "--lab-dir", e.labDir, "--relay-binary", e.relayBin)
	}

	// 1. converge holds the lock (stopped with SIGSTOP while it does, so
	// the overlap is certain); rollout refuses naming it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var convOut bytes.Buffer
	conv := e.cmd(ctx, hostArgs("converge")...)
	conv.Stdout, conv.Stderr = &convOut, &convOut
	if err := conv.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor("fleet converge to hold the lock", &convOut, func() bool { return holderIs("fleet converge") })
	syscall.Kill(-conv.Process.Pid, syscall.SIGSTOP)
	start := time.Now()
	out, code := systest.Combined(t, e.cmd(ctx, hostArgs("rollout", "--canary-bake", "0s")...))
	t.Logf("fleet rollout: exit %d\n%s", code, out)
	if code == 0 || !strings.Contains(lastLine(out), `is locked by "fleet converge"`) || strings.Count(strings.TrimSpace(lastLine(out)), "\n") > 0 {
		e.fatalf("fleet rollout during a converge: exit %d: %q; want a refusal naming fleet converge", code, lastLine(out))
	}
	if d := time.Since(start); d > time.Minute {
		e.fatalf("the refusal took %s", d)
	}
	var rollOut bytes.Buffer
	roll := e.cmd(ctx, hostArgs("rollout", "--canary-bake", "0s", "--wait", "5m")...)
	roll.Stdout, roll.Stderr = &rollOut, &rollOut
	if err := roll.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	syscall.Kill(-conv.Process.Pid, syscall.SIGCONT)
	if err := conv.Wait(); err != nil {
		e.fatalf("fleet converge: %v\n%s", err, convOut.String())
	}
	if err := roll.Wait(); err != nil {
		e.fatalf("fleet rollout --wait: %v\n%s", err, rollOut.String())
	}
	if !strings.Contains(rollOut.String(), `waiting for fleet lk's lease, held by "fleet converge"`) {
		e.fatalf("fleet rollout --wait did not say it waited for the converge:\n%s", rollOut.String())
	}

	// 2. A fleet up growing the fleet to 2 boxes, killed with SIGKILL
	// once its new box is being made, with every process under it (its
	// Pulumi CLI and the provider; killing the group alone once left the
	// Pulumi CLI's pid alive when fleet unlock looked): as a machine that
	// went down.
	inventory(2)
	up := e.cmd(ctx, e.withFlags("up", "--yes")...)
	var upOut bytes.Buffer
	up.Stdout, up.Stderr = &upOut, &upOut
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor("fleet up to start a second box", &upOut, func() bool {
		locks, _ := l.PulumiLocks(context.Background())
		return len(locks) > 0 && len(e.boxes(e.owned)) >= 2
	})
	under := descendants(up.Process.Pid)
	syscall.Kill(-up.Process.Pid, syscall.SIGKILL)
	for _, pid := range under {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	up.Wait()

	out, code = e.run(nil, "up", "--yes")
	if code == 0 || !strings.Contains(lastLine(out), `is locked by "fleet up"`) || !strings.Contains(lastLine(out), "fleet unlock") {
		e.fatalf("fleet up after a killed one: exit %d: %q; want a refusal naming it and fleet unlock", code, lastLine(out))
	}
	unlock := exec.Command(e.fleetBin, "unlock", "--inventory", e.inv, "--state-dir", e.state)
	uout, ucode := systest.Combined(t, unlock)
	t.Logf("fleet unlock: exit %d\n%s", ucode, uout)
	if ucode != 0 || !strings.Contains(uout, "cleared fleet lk's lease") || !strings.Contains(uout, "removed Pulumi lock on stack") {
		e.fatalf("fleet unlock: exit %d: %s", ucode, uout)
	}
	e.fleet("up", "--yes")
	if bs := e.boxes(e.owned); len(bs) != 2 {
		names := []string{}
		for _, b := range bs {
			names = append(names, b.Name)
		}
		e.fatalf("%d boxes after the up that followed the unlock, want 2: %v", len(bs), names)
	}
	e.fleet("destroy", "--yes")
}
