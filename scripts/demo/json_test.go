package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

// TestDemoReadsReconcileJSON: the demo reads what the real fleet events
// reconcile --json prints: the event's phase (it waits for "gone") and
// the actions the run took (it shows them).
func TestDemoReadsReconcileJSON(t *testing.T) {
	// The reconciler keeps its records in the Pulumi backend: the real CLI.
	pulumiCLI, err := program.FindPulumi("")
	if err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.PassphraseEnv, "")
	dir := t.TempDir()
	fleet := filepath.Join(dir, "fleet")
	if out, err := exec.Command("go", "build", "-o", fleet, "../../cmd/fleet").CombinedOutput(); err != nil {
		t.Fatalf("build fleet: %v\n%s", err, out)
	}
	out, err := exec.Command(fleet, "events", "reconcile", "--events", "../../inventories/lab-events.yaml", "--json",
		"--now", "2026-11-30T00:00:00Z", "--state-dir", filepath.Join(dir, "state"), "--relay-binary", fleet, "--pulumi", pulumiCLI).Output()
	if err != nil {
		t.Fatalf("fleet events reconcile --json: %v\n%s", err, out)
	}
	var outs []eventOutcome
	if err := json.Unmarshal(out, &outs); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if phaseOf(outs, "lab-show") != "scheduled" || phaseOf(outs, "demo-show") != "" {
		t.Fatalf("phases: %+v", outs)
	}
	if len(outs[0].Actions) != 1 || outs[0].Actions[0].Action != "scheduled" || outs[0].Actions[0].Detail == "" {
		t.Fatalf("actions: %+v", outs[0].Actions)
	}
}
