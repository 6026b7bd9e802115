package main

import (
	"context"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/monitoring"
)

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func monitorCommand(ios *cli.IOStreams) *cobra.Command {
	var o monitoring.CommandOptions
	var stack, backend string
	o.FleetHosts = func(ctx context.Context, f *inventories.Fleet, stateDir string) (map[string][]program.HostEntry, error) {
		st, err := (&keyFlags{stack: stack, stateDir: stateDir, backend: backend}).stackFor(f)
		if err != nil {
			return nil, err
		}
		set, err := readHosts(ctx, st, ios.ErrOut)
		if err != nil {
			return nil, err
		}
		return set.Entries(), nil
	}
	cmd := &cobra.Command{
		Use:   "monitor",
		Short: "Prometheus targets (every relay process of every stack), rules and alerts, and the Grafana dashboard: --out DIR",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return monitoring.WriteDir(cmd.Context(), ios.Out, o)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Out, "out", "", "directory for the Prometheus target files, rules, prometheus.yml and the Grafana files (required)")
	fs.StringVar(&o.Inventory, "inventory", "", "fleet file: only its stacks (its own and its events'); default every stack in the state dir")
	fs.StringVar(&o.EventsFile, "events", "", "events file: its fleet's stacks, with each event's end in the labels and rules")
	fs.StringVar(&o.StateDir, "state-dir", "", "state directory with the stacks' hosts (default $"+program.StateDirEnv+", else ~/.local/state/relayfleet)")
	fs.StringVar(&stack, "stack", "", "with --inventory: the fleet's steady stack (default: the fleet's name)")
	fs.StringVar(&backend, "backend", "", "with --inventory: Pulumi backend URL (default $"+program.BackendEnv+", else file:// under the state dir)")
	fs.Var(cli.GoValue((*stringList)(&o.Routers)), "router", "a router's HOST:PORT to scrape (repeatable)")
	fs.StringVar(&o.Prober, "prober", "", "a relay prober's HOST:PORT (relay prober --listen): Prometheus has it hear the fleet heartbeat through every relay process, and RelaySilent fires for one that passes too little on")
	fs.StringVar(&o.EventsExporter, "events-exporter", "", "fleet events exporter's HOST:PORT (fleet events install prints it; default 127.0.0.1:9479 there): the reconciler's heartbeat and every burst box, for ReconcilerStale, BurstBoxPastEventEnd and EventUnderCapacity")
	fs.DurationVar(&o.ScrapeInterval, "scrape-interval", 0, "scrape interval in prometheus.yml (default 15s)")
	cli.Ranged(fs, "scrape-interval", cli.Durations(time.Second, time.Hour))
	fs.DurationVar(&o.EvaluationInterval, "evaluation-interval", 0, "rule evaluation interval in prometheus.yml (default 15s)")
	cli.Ranged(fs, "evaluation-interval", cli.Durations(time.Second, time.Hour))
	return cmd
}

// refreshMonitor rewrites, after the stacks changed, the targets of the
// monitor directory --monitor-dir names (flagValue, else monitoring.DirEnv:
// monitoring.DirFrom); with none, it does nothing (monitoring.RefreshAndSay).
func refreshMonitor(stdout io.Writer, flagValue, stateDir string, evs *inventories.Events) {
	monitoring.RefreshAndSay(stdout, monitoring.DirFrom(flagValue), monitoring.Options{StateDir: stateDir, Events: evs})
}
