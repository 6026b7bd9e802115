// Package programtest makes Pulumi stacks for tests through the real
// Pulumi CLI, in a state directory's file backend, without running the
// program: a stack with given outputs (pulumi stack import) and plain
// configuration (pulumi config set). Only tests import it.
package programtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
)

// ImportStack makes stack st (in st.StateDir's file backend, with the
// CLI st.Pulumi names) with outputs as its outputs, and keeps authKeys in
// it as the fleet's relay auth key file. Nothing is created.
func ImportStack(t testing.TB, st *program.Stack, authKeys string, outputs map[string]any) {
	t.Helper()
	if err := st.SetSecret(context.Background(), program.RelayAuthKeysKey, authKeys); err != nil {
		t.Fatal(err)
	}
	dep, err := json.Marshal(map[string]any{"version": 3, "deployment": map[string]any{
		"manifest": map[string]any{"time": "2026-12-01T00:00:00Z", "magic": "", "version": ""},
		"resources": []any{map[string]any{
			"urn":  fmt.Sprintf("urn:pulumi:%s::%s::pulumi:pulumi:Stack::%s-%s", st.Name, program.Project, program.Project, st.Name),
			"type": "pulumi:pulumi:Stack", "custom": false, "outputs": outputs,
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "deployment.json")
	if err := os.WriteFile(file, dep, 0o600); err != nil {
		t.Fatal(err)
	}
	run(t, st, "stack", "import", "--stack", st.Name, "--file", file)
}

// SetConfig sets the stack's plain provider configuration key
// (relayfleet:KEY, as Stack.ReadConfig reads it).
func SetConfig(t testing.TB, st *program.Stack, key, value string) {
	t.Helper()
	run(t, st, "config", "set", "--stack", st.Name, provider.Name+":"+key, value)
}

// run runs the Pulumi CLI on the stack's state dir as Stack does.
func run(t testing.TB, st *program.Stack, args ...string) {
	t.Helper()
	cli, err := program.FindPulumi(st.Pulumi)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cli, args...)
	cmd.Dir = filepath.Join(st.StateDir, "work")
	cmd.Env = append(os.Environ(), "PULUMI_HOME="+filepath.Join(st.StateDir, "pulumi-home"), "PULUMI_SKIP_UPDATE_CHECK=true",
		program.BackendEnv+"=file://"+filepath.Join(st.StateDir, "backend"), program.PassphraseFileEnv+"="+filepath.Join(st.StateDir, "passphrase"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pulumi %v: %v: %s", args, err, out)
	}
}
