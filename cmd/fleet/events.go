package main

import (
	"time"

	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
)

// eventsCommand is fleet events reconcile | status | report | install.
func eventsCommand(ios *cli.IOStreams) *cobra.Command {
	return cli.Group("events", "burst capacity for scheduled events: reconcile (every minute) | status | report | install | exporter",
		eventsReconcileCommand(ios), eventsStatusCommand(ios), eventsReportCommand(ios), eventsInstallCommand(ios), eventsExporterCommand(ios))
}

// burstCommand is fleet burst up | down | resize.
func burstCommand(ios *cli.IOStreams) *cobra.Command {
	return cli.Group("burst", "bring an event's burst boxes up or down now, or size it again: up | down | resize --event NAME",
		burstModeCommand(ios, events.ManualUp, "bring the event's boxes up now and keep them until it ends"),
		burstModeCommand(ios, events.ManualDown, "drain the event's boxes and remove them now"),
		burstModeCommand(ios, events.Resize, "size a running event from the files again: a smaller size drains the boxes that go and removes each once empty"))
}

// eventsFlags are the flags of fleet events reconcile and fleet burst.
type eventsFlags struct {
	o events.RunOptions
	pulumiFlags
}

// add declares the flags on fs.
func (e *eventsFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&e.o.EventsFile, "events", "", "events file (required)")
	fs.StringVar(&e.o.Now, "now", "", "the time to reconcile for, RFC 3339 (default: the clock); for rehearsals and tests")
	fs.DurationVar(&e.o.LeaseTTL, "lease-ttl", events.DefaultLeaseTTL, "how long the fleet's lock in the Pulumi backend outlives a holder that stopped renewing it (30s to 1h)")
	cli.Ranged(fs, "lease-ttl", leaseRange)
	fs.DurationVar(&e.o.Wait, "wait", 0, "wait up to this long for another fleet command that holds the fleet's lock (default: refuse at once, naming it)")
	cli.Ranged(fs, "wait", waitRange)
	fs.DurationVar(&e.o.Retention, "keep-records", events.DefaultRetention, "how long the record (and cost report) of an event that is gone and no longer in the events file is kept after its last action (1h to 10 years)")
	cli.Ranged(fs, "keep-records", cli.Durations(time.Hour, 10*365*24*time.Hour))
	e.pulumiFlags.register(fs, true)
}

// options binds the flags into events.RunOptions: the stacks as the
// Pulumi flags give them, the monitor directory refreshed after a change.
func (e *eventsFlags) options() events.RunOptions {
	o := e.o
	o.RelayBinary = e.set.RelayBinary
	o.Stack = e.pulumiFlags.eventsStack
	o.Refresh = func(w io.Writer, stateDir string, evs *inventories.Events) {
		refreshMonitor(w, e.monitorDir, stateDir, evs)
	}
	return o
}

// eventsStack checks the Pulumi flags, then makes the stacks' template
// and says how boxes are reached (events.RunOptions.Stack).
func (p *pulumiFlags) eventsStack(progress io.Writer) (*program.Stack, provider.Config, error) {
	if err := p.set.Check(); err != nil {
		return nil, provider.Config{}, err
	}
	st, err := p.set.Template(nil, nil, progress)
	if err != nil {
		return nil, provider.Config{}, err
	}
	return st, st.ProviderConfig(), nil
}

// eventsReconcileCommand is fleet events reconcile.
func eventsReconcileCommand(ios *cli.IOStreams) *cobra.Command {
	var e eventsFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "bring each event's burst boxes up before it and back to zero after it (idempotent; run it every minute)",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := e.options()
			o.Command = cmd.CommandPath()
			return events.RunReconcile(cmd.Context(), ios.Out, o, asJSON)
		},
	}
	fs := cmd.Flags()
	e.add(fs)
	fs.BoolVar(&asJSON, "json", false, "print each event's phase, boxes, next step and this run's actions as JSON, instead of the log and the table")
	return cmd
}

// burstModeCommand is fleet burst up, down or resize (mode).
func burstModeCommand(ios *cli.IOStreams, mode, short string) *cobra.Command {
	var e eventsFlags
	b := events.Burst{Mode: mode}
	cmd := &cobra.Command{
		Use:   mode,
		Short: short,
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := e.options()
			o.Command = cmd.CommandPath()
			return events.RunBurst(cmd.Context(), ios.Out, o, b)
		},
	}
	fs := cmd.Flags()
	e.add(fs)
	fs.StringVar(&b.Event, "event", "", "the event (required)")
	fs.DurationVar(&b.Drain, "drain-time", -1, "down: how long listeners get to leave (default: the event's drain time)")
	cli.Ranged(fs, "drain-time", drainRange)
	return cmd
}

// addStoreFlags declares where the reconciler's records are, into o: the
// Pulumi backend (--backend, else the state dir's), read with the Pulumi
// CLI.
func addStoreFlags(fs *pflag.FlagSet, o *events.StoreOptions) {
	fs.StringVar(&o.StateDir, "state-dir", "", "state directory (default $RELAYFLEET_STATE_DIR, else ~/.local/state/relayfleet)")
	fs.StringVar(&o.BackendURL, "backend", "", "Pulumi backend URL holding the records (default $"+program.BackendEnv+", else file:// under the state dir)")
	fs.StringVar(&o.Pulumi, "pulumi", "", "the Pulumi CLI (default $"+program.PulumiEnv+", else the make pulumi build, else pulumi on $PATH)")
	fs.StringVar(&o.Fleet, "fleet", "", "only this fleet's events (default: every fleet in the backend)")
	fs.StringVar(&o.Inventory, "inventory", "", "the fleet file: its state.backend is the backend, its name the fleet (--fleet)")
}

// eventsStatusCommand is fleet events status.
func eventsStatusCommand(ios *cli.IOStreams) *cobra.Command {
	var o events.StoreOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "each event's phase, boxes, listeners and last action",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return events.WriteStatus(cmd.Context(), ios.Out, o, asJSON)
		},
	}
	fs := cmd.Flags()
	addStoreFlags(fs, &o)
	fs.BoolVar(&asJSON, "json", false, "print the records as JSON")
	return cmd
}

// eventsReportCommand is fleet events report.
func eventsReportCommand(ios *cli.IOStreams) *cobra.Command {
	var o events.StoreOptions
	var event string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "report",
		Short: "an event's cost: box-hours, egress, API requests, against the plan",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return events.WriteReport(cmd.Context(), ios.Out, o, event, asJSON)
		},
	}
	fs := cmd.Flags()
	addStoreFlags(fs, &o)
	fs.StringVar(&event, "event", "", "the event (required)")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}
