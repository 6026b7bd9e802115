//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"gocloud.dev/blob"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/lease"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/bucketurl"
	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
)

// Its own lab (bridge rfst0, subnet 10.231.113.0/24).
const (
	stLabDir = "/var/lib/relayfleet/lab-state"
	stBridge = "rfst0"
	stSubnet = "10.231.113.0/24"
)

// TestE2EEventResumedOnAnotherMachine: the reconciler's state is in the
// Pulumi backend, here a real object store (SeaweedFS on loopback, named
// by the fleet file's state.backend), so an event's reconcile killed
// mid-up on one machine (state dir a, the passphrase in the environment)
// is finished from another (state dir b, empty, the passphrase in a
// file) pointed at the same bucket: b is refused while a's reconcile
// holds the lease, then takes it over once a is dead, repairs the
// cut-off up and brings the box up with the fleet's relay key (not a
// new one) and a relays file listing the steady box too. Then, its state
// dir deleted, b tears the event down after its end; the store is killed
// (SIGKILL) while Pulumi deletes the event's box: that run fails in one
// line naming the store; the store restarted on its data, the records,
// the stacks and the dead run's lease are all there, the next reconcile
// waits for that lease to expire, repairs the cut-off teardown and
// finishes it, and the sweep finds nothing: zero boxes left.
func TestE2EEventResumedOnAnotherMachine(t *testing.T) {
	e := newE2ELab(t, stLabDir, stBridge, stSubnet, nil)
	cli, work, fleetBin, relayBin := e.cli, e.work, e.fleetBin, e.relayBin
	s3 := testutil.StartSeaweedFS(t)
	s3.MakeBucket(t, "relayfleet")
	s3.SetEnv(t) // the store's identity, as AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
	t.Setenv(program.BackendEnv, "")
	t.Setenv(program.PassphraseFileEnv, "")
	be := s3.Backend("relayfleet", "lab")
	const pass = "the fleet's passphrase, the same on every machine"
	t.Setenv(program.PassphraseEnv, pass)
	passFile := filepath.Join(work, "passphrase")
	testutil.WriteFile(t, passFile, []byte(pass+"\n"), 0o600)
	stateA, stateB := filepath.Join(work, "a"), filepath.Join(work, "b")
	inv := filepath.Join(work, "lab.yaml")
	evPath := filepath.Join(work, "events.yaml")
	writeInventory(t, inv, 1, "small")
	// The fleet file names the bucket every machine uses.
	f, err := os.OpenFile(inv, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "state:\n  backend: %q\n", be)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(evPath, []byte(evFile(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	list := e.boxes
	eventBoxes := func() []lab.Box { return list(map[string]string{"fleet": "lab", "event": "show"}) }
	labFlags := append([]string{"--pulumi", cli}, e.labFlags()...)
	// a has the passphrase in its environment, b in a file.
	fleetCmd := func(state string, args ...string) *exec.Cmd {
		args = append(args, "--state-dir", state)
		cmd := exec.Command(fleetBin, args...)
		cmd.Env = append(os.Environ(), program.PassphraseEnv+"="+pass)
		if state == stateB {
			cmd.Env = append(os.Environ(), program.PassphraseEnv+"=", program.PassphraseFileEnv+"="+passFile)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd
	}
	run := func(state string, args ...string) (string, error) {
		t.Helper()
		cmd := fleetCmd(state, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		t.Logf("[%s] fleet %s: %.1fs\n%s", filepath.Base(state), strings.Join(args[:min(len(args), 5)], " "), time.Since(start).Seconds(), out.String())
		return out.String(), err
	}
	must := func(state string, args ...string) string {
		t.Helper()
		out, err := run(state, args...)
		if err != nil {
			t.Fatalf("fleet %s: %v: %s", args[0], err, lastLine(out))
		}
		return out
	}
	reconcileArgs := func(at time.Time) []string {
		return append([]string{"events", "reconcile", "--events", evPath, "--now", at.UTC().Format(time.RFC3339),
			"--lease-ttl", "30s", "--relay-binary", relayBin}, labFlags...)
	}
	start := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	end := start.Add(time.Hour)

	// Machine a: the steady fleet, and a reconcile killed once Pulumi
	// starts creating the event's box.
	must(stateA, append([]string{"up", "--inventory", inv, "--relay-binary", relayBin}, labFlags...)...)
	steady := list(map[string]string{"fleet": "lab", "tier": "steady"})
	if len(steady) != 1 {
		t.Fatalf("%d steady boxes, want 1", len(steady))
	}
	steadyURL := fmt.Sprintf("http://%s:4443/", steady[0].Address)
	p, lines := testutil.StartLines(t, "a-killed-reconcile", fleetCmd(stateA, reconcileArgs(start.Add(-9*time.Minute))...))
	killed := false
	var out string
	for line := range lines {
		t.Logf("[a] killed run: %s", line)
		if !killed && strings.Contains(line, "show-1 creating") {
			// Machine b, an empty state dir on the same backend, while
			// a's reconcile still holds the lease (stopped, not dead):
			// refused.
			syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGSTOP)
			out, err = run(stateB, reconcileArgs(start.Add(-8*time.Minute))...)
			if err == nil || !strings.Contains(out, `is locked by "fleet events reconcile"`) {
				syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
				t.Fatalf("b reconciled while a's lease was held (err %v)", err)
			}
			syscall.Kill(-p.Cmd.Process.Pid, syscall.SIGKILL)
			killed = true
		}
	}
	p.Wait()
	if !killed {
		t.Fatal("the reconcile on a never started creating the event's box")
	}
	keysA := fleetAuthKeyFile(t, stateA, be, cli, inv)

	// a is dead: b takes the lease over once it expired (--lease-ttl 30s;
	// never by machine id: a cloned machine would pass for this one).
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err = run(stateB, reconcileArgs(start.Add(-8*time.Minute))...)
		if err == nil {
			break
		}
		if !strings.Contains(out, "is locked by") || time.Now().After(deadline) {
			t.Fatalf("b's reconcile: %v: %s", err, lastLine(out))
		}
		time.Sleep(5 * time.Second)
	}
	if !strings.Contains(out, "action=repair") {
		t.Errorf("b did not repair the cut-off up:\n%s", out)
	}
	rec := storedRecord(t, stateB, be, cli)
	if rec.Phase != events.Up || len(rec.Hosts) != 1 || len(eventBoxes()) != 1 {
		t.Fatalf("after b's reconcile: phase %s, %d hosts, %d event boxes", rec.Phase, len(rec.Hosts), len(eventBoxes()))
	}
	burstURL := fmt.Sprintf("http://%s:4443/", eventBoxes()[0].Address)
	if got := relaysFile(t, stateB); strings.Join(got, " ") != steadyURL+" "+burstURL {
		t.Fatalf("b's relays file lists %v, want the steady box %s and the burst box %s", got, steadyURL, burstURL)
	}
	// The burst box got the fleet's relay key, read back from the
	// backend, not a key made up for an empty state dir.
	if keysB := fleetAuthKeyFile(t, stateB, be, cli, inv); keysB != keysA {
		t.Fatal("b's fleet stack has other relay auth keys than a's: a new key was made on b")
	}

	// b's state dir is lost; after the end, b tears the event down from
	// the backend alone. The store dies (SIGKILL) once Pulumi starts
	// deleting the event's box: the run fails, in one line naming the
	// store.
	if err := os.RemoveAll(stateB); err != nil {
		t.Fatal(err)
	}
	teardown := fleetCmd(stateB, reconcileArgs(end.Add(time.Minute))...)
	var stderr bytes.Buffer
	teardown.Stderr = &stderr
	p, lines = testutil.StartLines(t, "b-store-killed", teardown)
	storeKilled := false
	timeout := time.After(10 * time.Minute)
read:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break read
			}
			t.Logf("[b] store killed: %s", line)
			if !storeKilled && strings.Contains(line, "show-1 deleting") {
				s3.Proc.Kill()
				storeKilled = true
			}
		case <-timeout:
			p.Kill()
			t.Fatalf("the teardown on b still ran 10 minutes after it started (store killed: %v): %s", storeKilled, stderr.String())
		}
	}
	werr := p.Wait()
	errLine := strings.TrimSpace(stderr.String())
	t.Logf("[b] the run whose store was killed: %v: %s", werr, errLine)
	switch {
	case !storeKilled:
		t.Fatalf("the teardown on b never started deleting the event's box: %v: %s", werr, errLine)
	case werr == nil:
		t.Fatal("the teardown on b succeeded with its store killed")
	case strings.Count(errLine, "\n") != 0 || !strings.HasPrefix(errLine, "fleet events reconcile: "):
		t.Fatalf("the failed run's stderr is not one line of fleet's:\n%s", errLine)
	case !strings.Contains(errLine, "s3://relayfleet/lab") || !strings.Contains(errLine, "unreachable ("):
		t.Fatalf("the failed run's error does not say the store s3://relayfleet/lab is unreachable: %s", errLine)
	case len(errLine) > 400 || strings.Contains(errLine, "goroutine ") || strings.Contains(errLine, s3.SecretKey):
		t.Fatalf("the failed run's error is long (%d bytes), a stack or holds the store's secret: %s", len(errLine), errLine)
	}

	// The store restarted on its data: nothing was lost. The record says
	// the teardown was under way, the event's and the fleet's stacks are
	// there, and so is the dead run's lease, which it could not release.
	s3.Restart(t)
	rec = storedRecord(t, stateB, be, cli)
	if rec.Phase != events.Destroying || !rec.StackMade {
		t.Fatalf("the record after the store's restart: phase %s, stack made %v, want %s with its stack", rec.Phase, rec.StackMade, events.Destroying)
	}
	stacks := storedStacks(t, be)
	if !slices.Contains(stacks, "lab") || !slices.Contains(stacks, events.StackName("lab", "show")) {
		t.Fatalf("the backend's stacks after the store's restart: %v, want lab and %s", stacks, events.StackName("lab", "show"))
	}
	held := storedLease(t, be)
	if held.Released || held.Holder.Command != "fleet events reconcile" {
		t.Fatalf("the fleet's lease after the store's restart: %+v, want the dead run's, not released", held)
	}
	// The next run (the timer's, a minute later) waits for that lease to
	// expire (--lease-ttl 30s), takes it over, repairs the cut-off
	// teardown and finishes it.
	out = must(stateB, append(reconcileArgs(end.Add(2*time.Minute)), "--wait", "2m")...)
	if !strings.Contains(out, "action=repair") {
		t.Errorf("the run after the store's restart did not repair the cut-off teardown:\n%s", out)
	}
	if l := storedLease(t, be); l.Token <= held.Token || !l.Released {
		t.Errorf("the lease after the next run: %+v, want a later take, released", l)
	}
	testutil.WaitFor(t, time.Second, "the event's boxes gone", func() bool { return len(eventBoxes()) == 0 })
	rec = storedRecord(t, stateB, be, cli)
	if rec.Phase != events.Gone || rec.Remaining != 0 || rec.Report == nil {
		t.Fatalf("after the teardown on b: phase %s, %d remaining, report %v", rec.Phase, rec.Remaining, rec.Report)
	}
	if slices.Contains(storedStacks(t, be), events.StackName("lab", "show")) {
		t.Errorf("the event's stack is still in the backend after its teardown")
	}
	if got := relaysFile(t, stateB); strings.Join(got, " ") != steadyURL {
		t.Fatalf("b's relays file after the teardown: %v, want the steady box only", got)
	}
	// a, whose cache still says creating, reads the truth from the backend.
	st := must(stateA, "events", "status", "--inventory", inv, "--pulumi", cli)
	if !strings.Contains(st, "show") || !strings.Contains(st, string(events.Gone)) {
		t.Fatalf("events status on a:\n%s", st)
	}
	must(stateA, "events", "report", "--event", "show", "--inventory", inv, "--pulumi", cli)
	must(stateA, append([]string{"destroy", "--inventory", inv}, labFlags...)...)
	if bs := list(map[string]string{"fleet": "lab"}); len(bs) != 0 {
		t.Fatalf("boxes left: %v", bs)
	}
}

// storedRecord reads the event's record from the backend, as fleet
// events status --json does.
func storedRecord(t *testing.T, state, be, cli string) *events.Record {
	t.Helper()
	st := &program.Stack{StateDir: state, BackendURL: be, Pulumi: cli}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ws, err := st.ProjectWorkspace(ctx, events.StoreProject)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := events.StoredRecords(ctx, ws, "lab")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Event == "show" {
			return r
		}
	}
	t.Fatal("no record of show in the backend")
	return nil
}

// storedStacks lists the stacks of the fleet's project (program.Project)
// in the backend: their checkpoints in the bucket.
func storedStacks(t *testing.T, be string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := bucketurl.Open(ctx, be)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	dir := ".pulumi/stacks/" + program.Project + "/"
	it := b.List(&blob.ListOptions{Prefix: dir})
	var names []string
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		if name, ok := strings.CutSuffix(strings.TrimPrefix(obj.Key, dir), ".json"); ok && !strings.Contains(name, "/") {
			names = append(names, name)
		}
	}
}

// storedLease is the fleet's lease as the backend holds it.
func storedLease(t *testing.T, be string) lease.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := lease.Open(ctx, be, "lab")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	st, err := l.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// fleetAuthKeyFile is the relay auth key file kept in the fleet's stack, as the
// state dir's workspace reads it.
func fleetAuthKeyFile(t *testing.T, state, be, cli, inv string) string {
	t.Helper()
	cat, err := inventories.LoadCatalogue(inventories.Beside(inv, inventories.ProvidersFile))
	if err != nil {
		t.Fatal(err)
	}
	f, err := inventories.LoadFleet(inv, cat)
	if err != nil {
		t.Fatal(err)
	}
	st := &program.Stack{Fleet: f, Catalogue: cat, StateDir: state, BackendURL: be, Pulumi: cli}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	secrets, err := st.ReadSecrets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if secrets[program.RelayAuthKeysKey] == "" {
		t.Fatalf("state dir %s: the fleet's stack has no relay auth keys", state)
	}
	return secrets[program.RelayAuthKeysKey]
}

// relaysFile is the relay URLs of the state dir's relays file.
func relaysFile(t *testing.T, state string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(state, program.RelaysFile))
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Relays []program.Relay }
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, r := range f.Relays {
		urls = append(urls, r.URL)
	}
	return urls
}
