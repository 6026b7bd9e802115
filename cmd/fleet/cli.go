package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/relayfleet/relayfleet/inventories"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // bad input: a flag, a file, a field
)

// usageError is bad input from the user: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// command is one fleet subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout io.Writer) error
}

func commands() []command {
	return []command{
		{"plan", "plan capacity for a listener target: boxes, cost, egress", runPlan},
		{"converge", "converge the steady boxes: sysctl, relay units per core, the relay release", runConverge},
		{"rollout", "roll a new relay build through the steady boxes, one process at a time, rolling back on failure", runRollout},
		{"hosts", "the fleet's hosts as its stacks list them (steady and events, any backend): stack, group, tier, address, host key, processes", runHosts},
		{"status", "per relay process: listeners, headroom, memory against its ceiling, restarts; per box: release and sysctl drift", runStatus},
		{"providers", "show the provider catalogue (and live prices with HCLOUD_TOKEN / DIGITALOCEAN_TOKEN)", runProviders},
		{"up", "bring the fleet to the inventory through Pulumi (boxes, converged hosts) and write the router's relays file", runUp},
		{"preview", "show what fleet up would change, drift included", runPreview},
		{"secret", "keep a cloud token encrypted in the fleet's stack: set hcloud-token | digitalocean-token (value on stdin)", runSecret},
		{"token", "mint a relay token signed with the fleet's key: --publish PREFIX | --subscribe PREFIX [--ttl D]", runToken},
		{"auth", "the fleet's relay auth key: rotate [--overlap 24h] | show (key ids) | export --out FILE (for origins)", runAuth},
		{"destroy", "destroy the stack's boxes (static servers are left as they are)", runDestroy},
		{"events", "burst capacity for scheduled events: reconcile (every minute) | status | report | install", runEvents},
		{"burst", "bring an event's burst boxes up or down now, or size it again: up | down | resize --event NAME", runBurst},
		{"loadtest", "measure a box or a relay process: the load curve (listeners against CPU, RSS, drops), calibration.yaml for plan, loadtest.svg", runLoadtest},
		{"monitor", "Prometheus targets (every relay process of every stack), rules and alerts, and the Grafana dashboard: --out DIR", runMonitor},
		{"lab", "boxes on this machine for the demo and tests: up N | down | status | ssh BOX (root)", runLab},
	}
}

// run executes one fleet command and maps its error to an exit code. Every
// failure is one line on stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout)
		if err == nil {
			return exitOK
		}
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "fleet %s: %s\n", c.name, oneLine(err))
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		var ue *usageError
		var ie *inventories.Error
		if errors.As(err, &ue) || errors.As(err, &ie) {
			return exitUsage
		}
		return exitFailure
	}
	fmt.Fprintf(stderr, "fleet: unknown command %q (try fleet help)\n", args[0])
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: fleet COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "fleet COMMAND -h shows a command's flags.")
}

func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// flags is a command's flag set. Errors become one-line usageErrors naming
// the flag instead of usage text; -h prints the flags to stdout.
type flags struct {
	*flag.FlagSet
	stdout io.Writer
}

func newFlags(name string, stdout io.Writer) flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // the flag package calls it on every error
	return flags{fs, stdout}
}

// parse parses args; it returns flag.ErrHelp after printing -h text.
func (fs flags) parse(args []string) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(fs.stdout, "usage: fleet %s [flags]\n", fs.Name())
		fs.SetOutput(fs.stdout)
		fs.PrintDefaults()
		return err
	}
	if err != nil {
		return usagef("%s", flagErrText(err))
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// flagErrText rewrites the flag package's messages ("invalid value "x" for
// flag -n: parse error") into "flag --n: invalid value "x"".
func flagErrText(err error) string {
	s := err.Error()
	if rest, ok := strings.CutPrefix(s, "invalid value "); ok {
		if val, tail, ok := strings.Cut(rest, " for flag -"); ok {
			name, why, _ := strings.Cut(tail, ": ")
			return fmt.Sprintf("flag --%s: invalid value %s: %s", name, val, why)
		}
	}
	if rest, ok := strings.CutPrefix(s, "flag provided but not defined: -"); ok {
		return fmt.Sprintf("flag --%s: unknown flag", strings.TrimLeft(rest, "-"))
	}
	if rest, ok := strings.CutPrefix(s, "flag needs an argument: -"); ok {
		return fmt.Sprintf("flag --%s: needs a value", strings.TrimLeft(rest, "-"))
	}
	return s
}
