//go:build e2e

// The end-to-end test of `pulumi up` in infra/pulumi on the stack fleet up
// manages: the Pulumi CLI and its Go language host (make pulumi builds both
// into ~/.cache/relayfleet), the project's own program built by the
// language host, the same backend, passphrase and stack as fleet's. Its own
// state directory and lab (bridge rfplg0, subnet 10.231.151.0/24).
package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/test/systest"
)

const (
	plgLabDir = "/var/lib/relayfleet/lab-plg"
	plgBridge = "rfplg0"
	plgSubnet = "10.231.151.0/24"
)

// TestE2EPulumiCLI: after fleet up of two lab boxes, `pulumi preview
// --expect-no-changes` in infra/pulumi on the fleet's stack passes; `pulumi
// up` after the fleet file asks for three boxes makes the third; fleet
// preview then plans no change.
func TestE2EPulumiCLI(t *testing.T) {
	t.Parallel() // its own lab and fleet: see e2eLab
	e := newE2ELab(t, plgLabDir, plgBridge, plgSubnet, map[string]string{"fleet": "lab"})
	inv := filepath.Join(e.work, "lab.yaml")
	e.inv = inv
	writeInventory(t, inv, 2, "small")
	e.fleet("up")
	if bs := e.boxes(e.owned); len(bs) != 2 {
		t.Fatalf("%d lab boxes after fleet up, want 2", len(bs))
	}

	// The Pulumi CLI as an operator runs it (README, "pulumi up on the
	// fleet's stack"): in infra/pulumi, the state dir's backend and
	// passphrase file in the environment, the provider plugin (fleet) and
	// the CLI with its language host on PATH, the stack's configuration
	// (fleet's lab settings and secrets) taken from its last update.
	proj, err := filepath.Abs("../../infra/pulumi")
	if err != nil {
		t.Fatal(err)
	}
	plugins := filepath.Join(e.work, "plugins")
	if err := os.MkdirAll(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.fleetBin, filepath.Join(plugins, provider.PluginName)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(e.cli), "pulumi-language-go")); err != nil {
		t.Fatalf("no Go language host beside the Pulumi CLI (make pulumi builds it): %v", err)
	}
	cfg := filepath.Join(e.work, "Pulumi.lab.yaml") // not in the source tree
	env := []string{
		program.BackendEnv + "=file://" + filepath.Join(e.state, "backend"),
		program.PassphraseFileEnv + "=" + filepath.Join(e.state, "passphrase"),
		"PULUMI_HOME=" + filepath.Join(e.work, "pulumi-home"),
		"PULUMI_SKIP_UPDATE_CHECK=true",
		"PATH=" + plugins + string(os.PathListSeparator) + filepath.Dir(e.cli) + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "PATH" && k != program.PassphraseEnv && !strings.HasPrefix(k, "PULUMI_") {
			env = append(env, kv)
		}
	}
	pulumi := func(args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		args = append(args, "--stack", "lab", "--non-interactive")
		cmd := exec.CommandContext(ctx, e.cli, args...)
		cmd.Dir, cmd.Env = proj, env
		start := time.Now()
		out, code := systest.Combined(t, cmd)
		t.Logf("pulumi %s: exit %d after %.1fs\n%s", strings.Join(args, " "), code, time.Since(start).Seconds(), out)
		return out, code
	}
	must := func(args ...string) string {
		t.Helper()
		out, code := pulumi(args...)
		if code != 0 {
			e.fatalf("pulumi %s: exit %d: %s", args[0], code, lastLine(out))
		}
		return out
	}
	must("config", "refresh", "--config-file", cfg)
	must("config", "set", "inventory", inv, "--config-file", cfg)
	must("config", "set", "relayBinary", e.relayBin, "--config-file", cfg)
	if out := must("stack", "ls"); !strings.Contains(out, "lab") {
		t.Fatalf("pulumi stack ls does not list the fleet's stack lab:\n%s", out)
	}

	// 1. The program plans what fleet up made: no change.
	must("preview", "--expect-no-changes", "--config-file", cfg)

	// 2. pulumi up makes the third box the fleet file now asks for.
	writeInventory(t, inv, 3, "small")
	must("up", "--yes", "--skip-preview", "--config-file", cfg)
	if bs := e.boxes(e.owned); len(bs) != 3 {
		t.Fatalf("%d lab boxes after pulumi up, want 3", len(bs))
	}
	must("refresh", "--yes", "--skip-preview", "--expect-no-changes", "--config-file", cfg)

	// 3. fleet plans no change after pulumi up.
	out := e.fleet("preview")
	sum := summary(out, "preview: stack lab: ")
	for _, part := range strings.Split(sum, ", ") {
		if !strings.HasSuffix(part, " same") {
			t.Fatalf("fleet preview after pulumi up: summary %q, want only \"same\"", sum)
		}
	}
	if sum == "" {
		t.Fatalf("fleet preview after pulumi up: no summary line:\n%s", slogLines(out))
	}
}
