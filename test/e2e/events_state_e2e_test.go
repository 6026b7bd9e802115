//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/program"
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
// Pulumi backend, so an event's reconcile killed mid-up on one machine
// (state dir a) is finished from another (state dir b, empty), pointed at
// the same backend URL and passphrase: b is refused while a's reconcile
// holds the lease, then takes it over once a is dead, repairs the cut-off up and
// brings the box up with the fleet's relay key (not a new one) and a
// relays file listing the steady box too; then, its state dir deleted,
// b tears the event down after its end and the sweep finds nothing.
func TestE2EEventResumedOnAnotherMachine(t *testing.T) {
	e := newE2ELab(t, stLabDir, stBridge, stSubnet, nil)
	cli, work, fleetBin, relayBin := e.cli, e.work, e.fleetBin, e.relayBin
	be := "file://" + filepath.Join(work, "backend")
	if err := os.MkdirAll(filepath.Join(work, "backend"), 0o700); err != nil {
		t.Fatal(err)
	}
	const pass = "the fleet's passphrase, the same on every machine"
	t.Setenv(program.PassphraseEnv, pass)
	stateA, stateB := filepath.Join(work, "a"), filepath.Join(work, "b")
	inv := filepath.Join(work, "lab.yaml")
	evPath := filepath.Join(work, "events.yaml")
	writeInventory(t, inv, 1, "small")
	if err := os.WriteFile(evPath, []byte(evFile(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	list := e.boxes
	eventBoxes := func() []lab.Box { return list(map[string]string{"fleet": "lab", "event": "show"}) }
	labFlags := append([]string{"--backend", be, "--pulumi", cli}, e.labFlags()...)
	fleetCmd := func(state string, args ...string) *exec.Cmd {
		args = append(args, "--state-dir", state)
		cmd := exec.Command(fleetBin, args...)
		cmd.Env = append(os.Environ(), program.PassphraseEnv+"="+pass)
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
	var err error
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
	// the backend alone.
	if err := os.RemoveAll(stateB); err != nil {
		t.Fatal(err)
	}
	must(stateB, reconcileArgs(end.Add(time.Minute))...)
	testutil.WaitFor(t, time.Second, "the event's boxes gone", func() bool { return len(eventBoxes()) == 0 })
	rec = storedRecord(t, stateB, be, cli)
	if rec.Phase != events.Gone || rec.Remaining != 0 || rec.Report == nil {
		t.Fatalf("after the teardown on b: phase %s, %d remaining, report %v", rec.Phase, rec.Remaining, rec.Report)
	}
	if got := relaysFile(t, stateB); strings.Join(got, " ") != steadyURL {
		t.Fatalf("b's relays file after the teardown: %v, want the steady box only", got)
	}
	// a, whose cache still says creating, reads the truth from the backend.
	st := must(stateA, "events", "status", "--backend", be, "--pulumi", cli)
	if !strings.Contains(st, "show") || !strings.Contains(st, string(events.Gone)) {
		t.Fatalf("events status on a:\n%s", st)
	}
	must(stateA, "events", "report", "--event", "show", "--backend", be, "--pulumi", cli)
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
