package main

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/version"
)

// run runs the fleet command line in-process with an empty stdin.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return execute(ctx, args, &cli.IOStreams{In: strings.NewReader(""), Out: stdout, ErrOut: stderr})
}

// fleetIn is fleet with stdin in.
func fleetIn(t *testing.T, in io.Reader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = execute(context.Background(), args, &cli.IOStreams{In: in, Out: &out, ErrOut: &errb})
	return out.String(), errb.String(), code
}

// outStreams are streams with stdout out, an empty stdin and stderr
// discarded.
func outStreams(out io.Writer) *cli.IOStreams {
	return &cli.IOStreams{In: strings.NewReader(""), Out: out, ErrOut: io.Discard}
}

// leaves are every command with its subcommand words: each has one flag
// set.
var leaves = [][]string{
	{"plan"}, {"converge"}, {"rollout"}, {"rollback"}, {"releases"}, {"status"}, {"providers"}, {"up"}, {"preview"},
	{"secret", "set", "hcloud-token"}, {"token"}, {"token", "revoke"}, {"auth", "rotate"}, {"auth", "show"}, {"auth", "export"},
	{"destroy"}, {"events", "reconcile"}, {"events", "status"}, {"events", "report"}, {"events", "install"}, {"events", "exporter"},
	{"burst", "up"}, {"burst", "down"}, {"burst", "resize"}, {"loadtest"}, {"monitor"},
	{"lab", "up"}, {"lab", "down"}, {"lab", "status"}, {"lab", "ssh", "box1"}, {"lab", "cloud", "hcloud"}, {"hosts"},
	{"unlock"}, {"relays"}, {"backup"}, {"restore"},
}

// leafFlags is the flag set of a leaf: the cobra command's own flags.
func leafFlags(t *testing.T, leaf []string) *pflag.FlagSet {
	t.Helper()
	root := rootCommand(outStreams(io.Discard))
	c, _, err := root.Find(leaf)
	if err != nil || c == root {
		t.Fatalf("no command %s", strings.Join(leaf, " "))
	}
	return c.LocalFlags()
}

// TestEveryNumericFlagHasARange: every count, rate and duration flag of
// every command is bounded (cli.Ranged beside its declaration), so that no
// value makes a command spin or wait for ever.
func TestEveryNumericFlagHasARange(t *testing.T) {
	numeric := 0
	for _, leaf := range leaves {
		fs := leafFlags(t, leaf)
		fs.VisitAll(func(f *pflag.Flag) {
			if cli.Numeric(f) {
				numeric++
			}
		})
		if u := cli.UnrangedFlags(fs); len(u) > 0 {
			t.Errorf("fleet %s: no range (cli.Ranged) for %s", strings.Join(leaf, " "), strings.Join(u, ", "))
		}
	}
	if numeric < 20 {
		t.Errorf("%d numeric flags in the tree: the walk missed commands", numeric)
	}
}

// TestEveryLeafIsTested: leaves names every command of the tree that
// runs, so the tests above cover a command added later.
func TestEveryLeafIsTested(t *testing.T) {
	root := rootCommand(outStreams(io.Discard))
	cli.Walk(root, func(c *cobra.Command) {
		if c == root || c.HasSubCommands() || c.RunE == nil || c.Name() == "version" {
			return
		}
		path := strings.Fields(strings.TrimPrefix(c.CommandPath(), "fleet "))
		if !slices.ContainsFunc(leaves, func(l []string) bool { return slices.Equal(l[:min(len(l), len(path))], path) }) {
			t.Errorf("fleet %s is not in leaves", strings.Join(path, " "))
		}
	})
}

// TestBadFlags: bad flags and values of every command are one line on
// stderr naming the flag, with exit status 2, before anything runs.
func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"plan", "--listeners", "99999999999999"}, 2, "fleet plan: flag --listeners: 99999999999999 is out of range: want 0 to 100000000"},
		{[]string{"plan", "--listeners", "-5"}, 2, "fleet plan: flag --listeners: -5 is out of range: want 0 to 100000000"},
		{[]string{"plan", "--listeners", "lots"}, 2, `fleet plan: flag --listeners: invalid value "lots": invalid syntax`},
		{[]string{"plan", "--listeners", "99999999999999999999"}, 2, `fleet plan: flag --listeners: invalid value "99999999999999999999": value out of range`},
		{[]string{"plan", "-listeners", "5"}, 2, "fleet plan: flag -listeners: unknown flag (flags are spelled --name)"},
		{[]string{"plan", "--listeners"}, 2, "fleet plan: flag --listeners: needs a value"},
		{[]string{"plan", "--event-hours", "9000"}, 2, "fleet plan: flag --event-hours: 9000 is out of range: want 0 to 8760"},
		{[]string{"plan", "--event-hours", "NaN"}, 2, "fleet plan: flag --event-hours: NaN is out of range: want 0 to 8760"},
		{[]string{"plan", "--listeners", "5", "extra"}, 2, `fleet plan: unexpected argument "extra"`},
		{[]string{"converge", "--parallel", "0"}, 2, "fleet converge: flag --parallel: 0 is out of range: want 1 to 1024"},
		{[]string{"converge", "--wait", "-1s"}, 2, "fleet converge: flag --wait: -1s is out of range: want 0s to 24h"},
		{[]string{"up", "--wait", "forever"}, 2, `fleet up: flag --wait: invalid value "forever": want a duration such as 500ms, 30s, 5m or 1h`},
		{[]string{"unlock"}, 2, "fleet unlock: flag --inventory: required"},
		{[]string{"rollout", "--boxes", "0"}, 2, "fleet rollout: flag --boxes: 0 is out of range: want 1 to 1000"},
		{[]string{"rollout", "--shed-rate", "1000000"}, 2, "fleet rollout: flag --shed-rate: 1000000 is out of range: want 1 to 100000"},
		{[]string{"rollout", "--router-poll", "0s"}, 2, "fleet rollout: flag --router-poll: 0s is out of range: want 100ms to 1m"},
		{[]string{"rollout", "--listener-wait", "2h"}, 2, "fleet rollout: flag --listener-wait: 2h0m0s is out of range: want 1s to 1h"},
		{[]string{"rollback", "--to", "abc"}, 2, "fleet rollback: flag --to: want at least 6 hex digits of a release's digest (fleet releases lists them), got \"abc\""},
		{[]string{"rollout", "--shed-wait", "soon"}, 2, `fleet rollout: flag --shed-wait: invalid value "soon": want a duration such as 500ms, 30s, 5m or 1h`},
		{[]string{"rollout", "--rebalance-rate", "0"}, 2, "fleet rollout: flag --rebalance-rate: 0 is out of range: want 1 to 100000"},
		{[]string{"rollout", "--rebalance-wait", "0s"}, 2, "fleet rollout: flag --rebalance-wait: 0s is out of range: want 1s to 1h"},
		{[]string{"status", "--json=maybe"}, 2, `fleet status: flag --json: invalid value "maybe": invalid syntax`},
		{[]string{"providers", "--providers"}, 2, "fleet providers: flag --providers: needs a value"},
		{[]string{"up", "--refresh=perhaps"}, 2, `fleet up: flag --refresh: invalid value "perhaps": invalid syntax`},
		{[]string{"preview", "--bogus"}, 2, "fleet preview: flag --bogus: unknown flag"},
		{[]string{"destroy", "--stack"}, 2, "fleet destroy: flag --stack: needs a value"},
		{[]string{"secret", "set", "hcloud-token", "--bogus"}, 2, "fleet secret set: flag --bogus: unknown flag"},
		{[]string{"token", "--ttl", "0s"}, 2, "fleet token: flag --ttl: 0s is out of range: want 1s to 24h"},
		{[]string{"token", "--ttl", "25h"}, 2, "fleet token: flag --ttl: 25h0m0s is out of range: want 1s to 24h"},
		{[]string{"auth", "rotate", "--overlap", "800h"}, 2, "fleet auth rotate: flag --overlap: 800h0m0s is out of range: want 0s to 720h"},
		{[]string{"auth", "rotate", "--parallel", "5000"}, 2, "fleet auth rotate: flag --parallel: 5000 is out of range: want 1 to 1024"},
		{[]string{"auth", "show", "--bogus"}, 2, "fleet auth show: flag --bogus: unknown flag"},
		{[]string{"auth", "export", "--out"}, 2, "fleet auth export: flag --out: needs a value"},
		{[]string{"events", "reconcile", "--now"}, 2, "fleet events reconcile: flag --now: needs a value"},
		{[]string{"events", "status", "--bogus"}, 2, "fleet events status: flag --bogus: unknown flag"},
		{[]string{"events", "report", "--json=2"}, 2, `fleet events report: flag --json: invalid value "2": invalid syntax`},
		{[]string{"events", "install", "--interval", "1s"}, 2, "fleet events install: flag --interval: 1s is out of range: want 10s to 24h"},
		{[]string{"burst", "down", "--drain-time", "25h"}, 2, "fleet burst down: flag --drain-time: 25h0m0s is out of range: want 0s to 24h"},
		{[]string{"burst", "up", "--drain-time", "-1s"}, 2, "fleet burst up: flag --drain-time: -1s is out of range: want 0s to 24h"},
		{[]string{"loadtest", "--step-duration", "1s"}, 2, "fleet loadtest: flag --step-duration: 1s is out of range: want 2s to 1h"},
		{[]string{"loadtest", "--ramp", "0"}, 2, "fleet loadtest: flag --ramp: 0 is out of range: want 0.1 to 100000"},
		{[]string{"monitor", "--scrape-interval", "0s"}, 2, "fleet monitor: flag --scrape-interval: 0s is out of range: want 1s to 1h"},
		{[]string{"monitor", "--evaluation-interval", "2h"}, 2, "fleet monitor: flag --evaluation-interval: 2h0m0s is out of range: want 1s to 1h"},
		{[]string{"lab", "up", "3", "--bogus"}, 2, "fleet lab up: flag --bogus: unknown flag"},
		{[]string{"lab", "up", "100000"}, 2, `fleet lab up: want the number of boxes (1-200), got "100000"`},
		{[]string{"lab", "status", "--json=x"}, 2, `fleet lab status: flag --json: invalid value "x": invalid syntax`},
		{[]string{"lab", "down", "--dir"}, 2, "fleet lab down: flag --dir: needs a value"},
		{[]string{"lab", "up", "1", "--subnet", "nope"}, 2, `fleet lab up: flag --subnet: "nope": want an IPv4 prefix such as 10.231.77.0/24`},
		{[]string{"lab", "ssh", "box1", "--bogus"}, 2, "fleet lab ssh: flag --bogus: unknown flag"},
		{[]string{"lab", "cloud", "hcloud", "--ram-scale", "0"}, 2, "fleet lab cloud: flag --ram-scale: 0 is out of range: want 0.01 to 1"},
		{[]string{"relays", "--watch", "2h"}, 2, "fleet relays: flag --watch: 2h0m0s is out of range: want 0s to 1h"},
		{[]string{"relays", "--inventory", "f.yaml", "--watch", "10ms", "--out", "r.json"}, 2, "fleet relays: flag --watch: want 0 (once) or at least 1s, got 10ms"},
		{[]string{"relays", "--inventory", "f.yaml", "--watch", "10s"}, 2, "fleet relays: flag --watch: needs --out (the file the router reads)"},
		{[]string{"relays"}, 2, "fleet relays: flag --inventory: required"},
		{[]string{"backup", "--inventory", "f.yaml"}, 2, "fleet backup: flag --out: required"},
		{[]string{"backup", "--out", "b.tgz"}, 2, "fleet backup: flag --inventory: required"},
		{[]string{"restore", "--inventory", "f.yaml"}, 2, "fleet restore: flag --in: required"},
		{[]string{"restore", "--in", "b.tgz", "--wait", "25h"}, 2, "fleet restore: flag --wait: 25h0m0s is out of range: want 0s to 24h"},
		{[]string{"--bogus"}, 2, "fleet: flag --bogus: unknown flag"},
		{[]string{"nope"}, 2, `fleet: unknown command "nope" (try fleet help)`},
		{[]string{"version", "extra"}, 2, `fleet version: unknown command "extra" for "fleet version"`},
		{[]string{"completion", "tcsh"}, 2, `fleet completion: unknown shell "tcsh" (want bash, zsh, fish or powershell)`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, code := fleet(t, tc.args...)
			if code != tc.code || errOut != tc.want+"\n" || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q\nwant exit %d, stderr %q", code, out, errOut, tc.code, tc.want)
			}
		})
	}
}

// TestHelp: -h of every command prints its flags, spelled --flag, to
// stdout and exits 0; fleet help CMD prints the same; fleet alone prints
// the commands and exits 2.
func TestHelp(t *testing.T) {
	for _, leaf := range leaves {
		args := append(slices.Clip(leaf), "-h")
		out, errOut, code := fleet(t, args...)
		if code != exitOK || errOut != "" || !strings.Contains(out, "usage: fleet "+leaf[0]) || !strings.Contains(out, "\n      --") {
			t.Errorf("fleet %s: exit %d, stderr %q, stdout:\n%s", strings.Join(args, " "), code, errOut, out)
		}
	}
	plan, _, _ := fleet(t, "plan", "-h")
	if !strings.Contains(plan, "--listeners int") {
		t.Errorf("fleet plan -h:\n%s", plan)
	}
	if out, _, code := fleet(t, "help", "plan"); code != exitOK || out != plan {
		t.Errorf("fleet help plan: exit %d\n%s\nwant fleet plan -h's:\n%s", code, out, plan)
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		out, errOut, code := fleet(t, args...)
		if code != exitOK || errOut != "" || !strings.Contains(out, "usage: fleet COMMAND") || !strings.Contains(out, "completion") {
			t.Errorf("fleet %s: exit %d, stderr %q, stdout:\n%s", args[0], code, errOut, out)
		}
	}
	if out, _, code := fleet(t); code != exitUsage || !strings.Contains(out, "usage: fleet COMMAND") {
		t.Errorf("fleet: exit %d\n%s", code, out)
	}
}

func TestVersion(t *testing.T) {
	want := "fleet " + version.String() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if out, errOut, code := fleet(t, args...); code != exitOK || out != want || errOut != "" {
			t.Errorf("fleet %s: exit %d, stdout %q, stderr %q; want %q", args[0], code, out, errOut, want)
		}
	}
}

// TestCompletion: cobra's scripts, and the completions they ask fleet
// for: a command's flags from its own flag set, its subcommands.
func TestCompletion(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_fleet", "zsh": "#compdef fleet", "fish": "complete -c fleet"} {
		if out, errOut, code := fleet(t, "completion", shell); code != exitOK || errOut != "" || !strings.Contains(out, want) {
			t.Errorf("fleet completion %s: exit %d, stderr %q, no %q in:\n%.300s", shell, code, errOut, want, out)
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
		not  string
	}{
		{[]string{"__complete", "pl"}, []string{"plan\t"}, "lab"},
		{[]string{"__complete", "plan", "--li"}, []string{"--listeners\ttarget concurrent listeners"}, "--json"},
		{[]string{"__complete", "lab", ""}, []string{"up", "down", "status", "ssh"}, "--dir"},
		{[]string{"__complete", "lab", "up", "--"}, []string{"--dir\t", "--shape\t"}, "--listeners"},
		{[]string{"__complete", "rollout", "--rebalance"}, []string{"--rebalance\t", "--rebalance-rate\t", "--rebalance-wait\t"}, "--boxes"},
		{[]string{"__complete", "auth", ""}, []string{"rotate\t", "show\t", "export\t"}, "--inventory"},
		{[]string{"__complete", "secret", "set", ""}, []string{"hcloud-token", "digitalocean-token"}, "--inventory"},
		{[]string{"__complete", "auth", "rotate", "--ov"}, []string{"--overlap\t"}, "--out"},
	} {
		out, errOut, code := fleet(t, tc.args...)
		if code != exitOK || !strings.HasPrefix(errOut, "Completion ended with directive") {
			t.Errorf("fleet %q: exit %d, stderr %q", tc.args, code, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("fleet %q: no %q in:\n%s", tc.args, w, out)
			}
		}
		if strings.Contains(out, tc.not) {
			t.Errorf("fleet %q: %q in:\n%s", tc.args, tc.not, out)
		}
	}
}
