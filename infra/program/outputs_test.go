package program

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
)

// TestReadOutputsWithoutUp puts stacks into a file backend with the real
// Pulumi CLI (stack import: no program runs) and reads their outputs back:
// the named stack first, then the others the filter keeps, by name.
func TestReadOutputsWithoutUp(t *testing.T) {
	testutil.Short(t, "make test-long (runs the Pulumi CLI)")
	if _, err := FindPulumi(""); err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(PassphraseEnv, "")
	t.Setenv(BackendEnv, "")
	ctx := t.Context()
	dir := t.TempDir()
	fleet := &inventories.Fleet{Name: "demo"}

	// A state dir that was never used has no stacks, and stays unused.
	empty := filepath.Join(dir, "empty")
	s := &Stack{Fleet: fleet, StateDir: empty}
	if _, err := s.ReadOutputs(ctx, nil); !errors.Is(err, ErrNoStack) {
		t.Fatalf("empty state dir: %v, want ErrNoStack", err)
	}
	if _, err := os.Stat(empty); err == nil {
		t.Fatalf("reading made the state dir %s", empty)
	}

	state := filepath.Join(dir, "state")
	put := func(name string, outputs map[string]any) {
		t.Helper()
		st := &Stack{Fleet: fleet, Name: name, StateDir: state}
		as, err := st.open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		dep, _ := json.Marshal(map[string]any{
			"manifest": map[string]any{"time": "2026-12-01T00:00:00Z", "magic": "", "version": ""},
			"resources": []any{map[string]any{
				"urn":     fmt.Sprintf("urn:pulumi:%s::%s::pulumi:pulumi:Stack::%s-%s", name, Project, Project, name),
				"custom":  false,
				"type":    "pulumi:pulumi:Stack",
				"outputs": outputs,
			}},
		})
		if err := as.Workspace().ImportStack(ctx, name, apitype.UntypedDeployment{Version: 3, Deployment: dep}); err != nil {
			t.Fatal(err)
		}
	}
	host := map[string]any{"name": "steady-1", "group": "steady", "backend": "lab", "address": "10.0.0.2",
		"sshAddress": "10.0.0.2:22", "hostKey": "ssh-ed25519 AAAA", "user": "root", "ports": []int{4443}}
	put("demo", map[string]any{"fleet": "demo", "hosts": []any{host}})
	put("demo-event-b", map[string]any{"fleet": "demo", "event": "b", "hosts": []any{}})
	put("demo-event-a", map[string]any{"fleet": "demo", "event": "a", "hosts": []any{}})
	put("other", map[string]any{"fleet": "other"})

	s = &Stack{Fleet: fleet, StateDir: state}
	got, err := s.ReadOutputs(ctx, func(name string) bool { return len(name) > 11 && name[:11] == "demo-event-" })
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, so := range got {
		names = append(names, so.Stack)
	}
	if fmt.Sprint(names) != "[demo demo-event-a demo-event-b]" {
		t.Fatalf("stacks read %v, want [demo demo-event-a demo-event-b]", names)
	}
	hosts, ok := got[0].Outputs["hosts"].([]any)
	if !ok || len(hosts) != 1 || hosts[0].(map[string]any)["sshAddress"] != "10.0.0.2:22" {
		t.Fatalf("demo outputs %v", got[0].Outputs)
	}
	if got[2].Outputs["event"] != "b" {
		t.Fatalf("demo-event-b outputs %v", got[2].Outputs)
	}

	s = &Stack{Fleet: fleet, Name: "nope", StateDir: state}
	if _, err := s.ReadOutputs(ctx, nil); !errors.Is(err, ErrNoStack) {
		t.Fatalf("a stack that does not exist: %v, want ErrNoStack", err)
	}
}
