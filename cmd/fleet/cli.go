package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/version"
)

// Exit codes (cli.Execute maps errors to them).
const (
	exitOK      = cli.ExitOK
	exitFailure = cli.ExitFailure
	exitUsage   = cli.ExitUsage
)

// usageError is bad input from the user: exit code 2.
type usageError = cli.UsageError

// usagef makes a usageError.
var usagef = cli.Usagef

// command is one fleet subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, ios *cli.IOStreams) error
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
		{"loadtest", "measure a box or a relay process: the load curve (listeners against CPU, RSS, drops), calibration.yaml for plan, loadtest.svg", runLoadtest},
		{"monitor", "Prometheus targets (every relay process of every stack), rules and alerts, and the Grafana dashboard: --out DIR", runMonitor},
		{"lab", "boxes on this machine for the demo and tests: up N | down | status | ssh BOX (root)", runLab},
	}
}

// cobraCommands are the commands built as cobra commands: each declares
// its own flags and subcommands, and cobra parses them.
func cobraCommands(ios *cli.IOStreams) []*cobra.Command {
	return []*cobra.Command{
		eventsCommand(ios), burstCommand(ios),
	}
}

// subcommands are the words that may follow a command, for completion.
var subcommands = map[string][]string{
	"secret": {"set"},
	"auth":   {"rotate", "show", "export"},
	"lab":    {"up", "down", "status", "ssh"},
}

// execute runs one fleet command line and returns its exit status
// (cli.Execute: one line on stderr for every failure).
func execute(ctx context.Context, args []string, ios *cli.IOStreams) int {
	return cli.Execute(ctx, rootCommand(ios), args, ios)
}

// rootCommand is the command tree: the commands of commands(), version,
// and cobra's help and completion.
func rootCommand(ios *cli.IOStreams) *cobra.Command {
	root := cli.NewRoot("fleet", "relayfleet's operator tool", version.String(), ios)
	root.AddCommand(cobraCommands(ios)...)
	for _, c := range commands() {
		root.AddCommand(&cobra.Command{
			Use:                c.name,
			Short:              c.summary,
			DisableFlagParsing: true, // the command's own flags (newFlags) parse them
			RunE: func(cmd *cobra.Command, args []string) error {
				return c.run(cmd.Context(), args, ios)
			},
			ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				return complete(cmd.Context(), c, args, toComplete)
			},
		})
	}
	return root
}

// complete completes a command's flags (from the flag set its run function
// builds; nothing runs) and its subcommands.
func complete(ctx context.Context, c command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if !strings.HasPrefix(toComplete, "-") {
		if len(args) == 0 && subcommands[c.name] != nil {
			var out []cobra.Completion
			for _, s := range subcommands[c.name] {
				if strings.HasPrefix(s, toComplete) {
					out = append(out, s)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		}
		return nil, cobra.ShellCompDirectiveDefault
	}
	fs := flagsOf(ctx, c, args)
	if fs == nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	fs.VisitAll(func(f *pflag.Flag) {
		if strings.HasPrefix("--"+f.Name, toComplete) {
			out = append(out, cobra.CompletionWithDesc("--"+f.Name, f.Usage))
		}
	})
	return out, cobra.ShellCompDirectiveNoFileComp
}

// flagCapture, as the stdout a command's flags print help to, makes
// flags.parse hand over the flag set and return errCaptured instead of
// parsing, so the command stops before doing anything.
type flagCapture struct {
	io.Writer
	fs *pflag.FlagSet
}

var errCaptured = errors.New("flags captured")

// flagsOf is the flag set of command c with the leading words args (a
// subcommand), or nil when it has none there.
func flagsOf(ctx context.Context, c command, args []string) *pflag.FlagSet {
	capture := &flagCapture{Writer: io.Discard}
	_ = c.run(ctx, append(slices.Clip(args), "-h"), &cli.IOStreams{In: strings.NewReader(""), Out: capture, ErrOut: io.Discard})
	return capture.fs
}

// flags is a command's flag set, on pflag: every flag is --name. Errors
// become one-line usageErrors naming the flag instead of usage text; -h
// prints the flags to stdout; numeric flags are checked against their
// ranges (flagRanges).
type flags struct {
	*pflag.FlagSet
	stdout io.Writer
}

func newFlags(name string, stdout io.Writer) flags {
	return flags{cli.NewFlagSet(name), stdout}
}

// Var defines a flag of a flag.Value type.
func (fs flags) Var(v flag.Value, name, usage string) {
	fs.FlagSet.Var(cli.GoValue(v), name, usage)
}

// parse parses args; it returns flag.ErrHelp after printing -h text.
func (fs flags) parse(args []string) error {
	if c, ok := fs.stdout.(*flagCapture); ok {
		c.fs = fs.FlagSet
		return errCaptured
	}
	err := fs.Parse(args)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintf(fs.stdout, "usage: fleet %s [flags]\n\nflags:\n%s", fs.Name(), fs.FlagUsages())
		return flag.ErrHelp
	}
	if err != nil {
		return cli.FlagError(err)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return cli.CheckRanges(fs.FlagSet, flagRanges[fs.Name()])
}

var oneLine = cli.OneLine
