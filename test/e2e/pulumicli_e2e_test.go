//go:build e2e

// The end-to-end test of `pulumi up` in infra/pulumi on the stack fleet up
// manages: the Pulumi CLI and its Go language host (make pulumi builds both
// into ~/.cache/relayfleet), the project's own program built by the
// language host, the same backend, passphrase and stack as fleet's. Its own
// state directory and lab (bridge rfplg0, subnet 10.231.151.0/24).
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
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

	p := newPulumiProject(e, "file://"+filepath.Join(e.state, "backend"), filepath.Join(e.state, "passphrase"), "lab")
	must, cfg := p.must, p.cfg

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
	e.previewSame("lab")
}

// previewSame runs fleet preview and fails the test unless it plans only
// "same" on stack.
func (e *e2eLab) previewSame(stack string) {
	e.t.Helper()
	out := e.fleet("preview")
	sum := summary(out, "preview: stack "+stack+": ")
	if sum == "" {
		e.fatalf("fleet preview after pulumi up: no summary line:\n%s", slogLines(out))
	}
	for _, part := range strings.Split(sum, ", ") {
		if !strings.HasSuffix(part, " same") {
			e.fatalf("fleet preview after pulumi up: summary %q, want only \"same\"", sum)
		}
	}
}

// pulumiProject is the Pulumi CLI as an operator runs it (README, "pulumi
// up on the fleet's stack"): in infra/pulumi, the fleet's backend and
// passphrase file in the environment (the store's credentials too, from
// the test's), the provider plugin (fleet) and the CLI with its language
// host on PATH, the stack's configuration (fleet's lab settings and
// secrets) taken from its last update into a file outside the source tree.
type pulumiProject struct {
	e     *e2eLab
	dir   string // infra/pulumi
	cfg   string // the stack's configuration file (--config-file)
	stack string
	env   []string
}

// newPulumiProject makes the CLI's environment for stack on backend and
// configures it from the stack's last update, with e.inv as the fleet
// file and e's relay build; pulumi stack ls must list the stack.
func newPulumiProject(e *e2eLab, backend, passFile, stack string) *pulumiProject {
	t := e.t
	t.Helper()
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
	p := &pulumiProject{e: e, dir: proj, cfg: filepath.Join(e.work, "Pulumi."+stack+".yaml"), stack: stack}
	p.env = []string{
		program.BackendEnv + "=" + backend,
		program.PassphraseFileEnv + "=" + passFile,
		"PULUMI_HOME=" + filepath.Join(e.work, "pulumi-home"),
		"PULUMI_SKIP_UPDATE_CHECK=true",
		"PATH=" + plugins + string(os.PathListSeparator) + filepath.Dir(e.cli) + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "PATH" && k != program.PassphraseEnv && !strings.HasPrefix(k, "PULUMI_") {
			p.env = append(p.env, kv)
		}
	}
	p.must("config", "refresh", "--config-file", p.cfg)
	p.must("config", "set", "inventory", e.inv, "--config-file", p.cfg)
	p.must("config", "set", "relayBinary", e.relayBin, "--config-file", p.cfg)
	if out := p.must("stack", "ls"); !strings.Contains(out, stack) {
		e.fatalf("pulumi stack ls does not list the fleet's stack %s:\n%s", stack, out)
	}
	return p
}

// run runs the Pulumi CLI with args on the stack, for at most 15 minutes.
func (p *pulumiProject) run(args ...string) (string, int) {
	t := p.e.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	args = append(args, "--stack", p.stack, "--non-interactive")
	cmd := exec.CommandContext(ctx, p.e.cli, args...)
	cmd.Dir, cmd.Env = p.dir, p.env
	start := time.Now()
	out, code := systest.Combined(t, cmd)
	t.Logf("pulumi %s: exit %d after %.1fs\n%s", strings.Join(args, " "), code, time.Since(start).Seconds(), out)
	return out, code
}

// must is run; an exit other than 0 fails the test.
func (p *pulumiProject) must(args ...string) string {
	p.e.t.Helper()
	out, code := p.run(args...)
	if code != 0 {
		p.e.fatalf("pulumi %s: exit %d: %s", args[0], code, lastLine(out))
	}
	return out
}

// resources counts the stack's resources of type typ (pulumi stack
// export: its standard output, without what the CLI logs).
func (p *pulumiProject) resources(typ string) int {
	t := p.e.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.e.cli, "stack", "export", "--stack", p.stack, "--non-interactive")
	cmd.Dir, cmd.Env = p.dir, p.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var doc struct {
		Deployment struct {
			Resources []struct {
				Type string `json:"type"`
			} `json:"resources"`
		} `json:"deployment"`
	}
	if err != nil {
		p.e.fatalf("pulumi stack export: %v: %s", err, lastLine(stderr.String()))
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		p.e.fatalf("pulumi stack export: %v", err)
	}
	n := 0
	for _, r := range doc.Deployment.Resources {
		if r.Type == typ {
			n++
		}
	}
	t.Logf("pulumi stack export: %d resources, %d of type %s", len(doc.Deployment.Resources), n, typ)
	return n
}
