package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/monitoring"
)

// MonitorDirEnv names the monitor directory fleet up, destroy, events
// reconcile and burst keep current when --monitor-dir is not given.
const MonitorDirEnv = "RELAYFLEET_MONITOR_DIR"

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// monitorOpts are fleet monitor's flags.
type monitorOpts struct {
	out, inventory, eventsFile, stateDir, stack, backend string
	routers                                              []string
	scrape, eval                                         time.Duration
}

func monitorCommand(ios *cli.IOStreams) *cobra.Command {
	var o monitorOpts
	cmd := &cobra.Command{
		Use:   "monitor",
		Short: "Prometheus targets (every relay process of every stack), rules and alerts, and the Grafana dashboard: --out DIR",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runMonitor(cmd.Context(), &o, ios)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.out, "out", "", "directory for the Prometheus target files, rules, prometheus.yml and the Grafana files (required)")
	fs.StringVar(&o.inventory, "inventory", "", "fleet file: only its stacks (its own and its events'); default every stack in the state dir")
	fs.StringVar(&o.eventsFile, "events", "", "events file: its fleet's stacks, with each event's end in the labels and rules")
	fs.StringVar(&o.stateDir, "state-dir", "", "state directory with the stacks' hosts (default $"+program.StateDirEnv+", else ~/.local/state/relayfleet)")
	fs.StringVar(&o.stack, "stack", "", "with --inventory: the fleet's steady stack (default: the fleet's name)")
	fs.StringVar(&o.backend, "backend", "", "with --inventory: Pulumi backend URL (default $"+program.BackendEnv+", else file:// under the state dir)")
	fs.Var(cli.GoValue((*stringList)(&o.routers)), "router", "a router's HOST:PORT to scrape (repeatable)")
	fs.DurationVar(&o.scrape, "scrape-interval", 0, "scrape interval in prometheus.yml (default 15s)")
	cli.Ranged(fs, "scrape-interval", cli.Durations(time.Second, time.Hour))
	fs.DurationVar(&o.eval, "evaluation-interval", 0, "rule evaluation interval in prometheus.yml (default 15s)")
	cli.Ranged(fs, "evaluation-interval", cli.Durations(time.Second, time.Hour))
	return cmd
}

func runMonitor(ctx context.Context, mo *monitorOpts, ios *cli.IOStreams) error {
	stdout := ios.Out
	if mo.out == "" {
		return usagef("flag --out: required")
	}
	if mo.inventory != "" && mo.eventsFile != "" {
		return usagef("flag --events: give --inventory or --events, not both (the events file names its fleet)")
	}
	// Their ranges are checked already.
	if mo.scrape%time.Millisecond != 0 {
		return usagef("flag --scrape-interval: want a positive whole number of milliseconds, got %s", mo.scrape)
	}
	if mo.eval%time.Millisecond != 0 {
		return usagef("flag --evaluation-interval: want a positive whole number of milliseconds, got %s", mo.eval)
	}
	if _, err := monitoring.RouterTargets(mo.routers); err != nil {
		return usagef("flag --router: %v", err)
	}
	o := monitoring.Options{Routers: mo.routers, ScrapeInterval: mo.scrape, EvaluationInterval: mo.eval}
	var err error
	if o.StateDir, err = stateDirOr(mo.stateDir); err != nil {
		return err
	}
	switch {
	case mo.inventory != "":
		f, err := loadFleet(mo.inventory)
		if err != nil {
			return err
		}
		o.Fleet = f.Name
		// Its hosts are its stacks' (steady and events), any backend.
		kf := keyFlags{stack: mo.stack, stateDir: o.StateDir, backend: mo.backend}
		st, err := kf.stackFor(f)
		if err != nil {
			return err
		}
		set, err := readHosts(ctx, st, ios.ErrOut)
		if err != nil {
			return err
		}
		o.Hosts = set.Entries()
	case mo.eventsFile != "":
		cat, err := inventories.LoadCatalogue(inventories.Beside(mo.eventsFile, inventories.ProvidersFile))
		if err != nil {
			return err
		}
		evs, f, err := inventories.LoadEvents(mo.eventsFile, cat)
		if err != nil {
			return err
		}
		o.Fleet, o.Events = f.Name, evs
	}
	if _, err := os.Stat(filepath.Join(o.StateDir, program.HostsDir)); err != nil && o.Hosts == nil {
		return usagef("flag --state-dir: %s has no stacks yet (%v); run fleet up first", o.StateDir, err)
	}
	res, err := monitoring.Write(mo.out, o)
	if err != nil {
		return err
	}
	return res.WriteSummary(stdout)
}

// monitorDir is --monitor-dir, else $RELAYFLEET_MONITOR_DIR; "" means none.
func monitorDir(flagValue *string) string {
	if flagValue != nil && *flagValue != "" {
		return *flagValue
	}
	return os.Getenv(MonitorDirEnv)
}

// refreshMonitor rewrites the monitor directory's targets after the stacks
// changed, when one is configured (monitoring.RefreshAndSay).
func refreshMonitor(stdout io.Writer, dir, stateDir string, evs *inventories.Events) {
	monitoring.RefreshAndSay(stdout, dir, monitoring.Options{StateDir: stateDir, Events: evs})
}
