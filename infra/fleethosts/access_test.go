package fleethosts

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/program/programtest"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

// TestStackAccess: lab boxes are reached with the admin key of the lab
// the stack was brought up with (its labDir configuration, read with the
// real Pulumi CLI) unless one is given; a fleet without lab boxes does
// not read the stack at all.
func TestStackAccess(t *testing.T) {
	if _, err := program.FindPulumi(""); err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(program.PassphraseEnv, "")
	st := &program.Stack{Fleet: demoFleet(), Name: "demo", StateDir: filepath.Join(t.TempDir(), "state")}
	programtest.ImportStack(t, st, "unused\n", map[string]any{"fleet": "demo"})
	programtest.SetConfig(t, st, "labDir", "/var/lib/relayfleet/lab-of-the-stack")
	ctx := context.Background()
	labHosts := []Host{{Name: "demo-s-steady-1", Backend: provider.BackendLab}, {Name: "x", Backend: provider.BackendStatic}}
	a, err := StackAccess(ctx, st, labHosts, Access{SSHKey: "/k"})
	if err != nil || a.LabDir != "/var/lib/relayfleet/lab-of-the-stack" || a.SSHKey != "/k" {
		t.Errorf("lab hosts: %+v, %v; want the stack's lab dir", a, err)
	}
	if a, err := StackAccess(ctx, st, labHosts, Access{LabDir: "/given"}); err != nil || a.LabDir != "/given" {
		t.Errorf("--lab-dir given: %+v, %v; want it kept", a, err)
	}
	// No lab box: the stack is not read (this one does not exist).
	none := &program.Stack{Fleet: demoFleet(), Name: "nope", StateDir: filepath.Join(t.TempDir(), "state")}
	if a, err := StackAccess(ctx, none, []Host{{Name: "x", Backend: provider.BackendHcloud}}, Access{}); err != nil || a.LabDir != "" {
		t.Errorf("no lab box: %+v, %v", a, err)
	}
	if _, err := StackAccess(ctx, none, labHosts, Access{}); err == nil {
		t.Error("a lab box and a stack that does not exist: no error")
	}
}
