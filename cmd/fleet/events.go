package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/relayfleet/relayfleet/infra/events"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
)

// eventsCommand is fleet events reconcile | status | report | install.
func eventsCommand(ios *cli.IOStreams) *cobra.Command {
	return cli.Group("events", "burst capacity for scheduled events: reconcile (every minute) | status | report | install",
		eventsReconcileCommand(ios), eventsStatusCommand(ios), eventsReportCommand(ios), eventsInstallCommand(ios))
}

// burstCommand is fleet burst up | down | resize.
func burstCommand(ios *cli.IOStreams) *cobra.Command {
	return cli.Group("burst", "bring an event's burst boxes up or down now, or size it again: up | down | resize --event NAME",
		burstModeCommand(ios, events.ManualUp, "bring the event's boxes up now and keep them until it ends"),
		burstModeCommand(ios, events.ManualDown, "drain the event's boxes and remove them now"),
		burstModeCommand(ios, "resize", "size a running event from the files again: a smaller size drains the boxes that go and removes each once empty"))
}

// eventsFlags are the flags of fleet events reconcile and fleet burst.
type eventsFlags struct {
	events, now string
	// leaseTTL is the reconcile lease's life without a renewal.
	leaseTTL time.Duration
	pulumiFlags
}

// add declares the flags on fs.
func (e *eventsFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&e.events, "events", "", "events file (required)")
	fs.StringVar(&e.now, "now", "", "the time to reconcile for, RFC 3339 (default: the clock); for rehearsals and tests")
	fs.DurationVar(&e.leaseTTL, "lease-ttl", events.DefaultLeaseTTL, "how long the reconcile lease in the Pulumi backend outlives a holder that stopped renewing it (30s to 1h)")
	cli.Ranged(fs, "lease-ttl", leaseRange)
	e.pulumiFlags.register(fs, true)
}

// open builds the reconciler from the parsed flags (events.Open), and
// the time to reconcile for. Its log and Pulumi's progress go to stdout,
// or nowhere when quiet (--json: stdout holds only the JSON). validate,
// when not nil, checks the command's own flags before anything is looked
// up (the Pulumi CLI, the files).
func (e *eventsFlags) open(ctx context.Context, stdout io.Writer, quiet bool, validate func() error) (*events.Reconciler, time.Time, error) {
	if e.events == "" {
		return nil, time.Time{}, usagef("flag --events: required")
	}
	now := time.Now()
	if e.now != "" {
		t, err := time.Parse(time.RFC3339, e.now)
		if err != nil {
			return nil, time.Time{}, usagef("flag --now: want an RFC 3339 time such as 2026-12-05T19:00:00Z, got %q", e.now)
		}
		now = t
	}
	if validate != nil {
		if err := validate(); err != nil {
			return nil, time.Time{}, err
		}
	}
	if err := e.check(); err != nil {
		return nil, time.Time{}, err
	}
	out := stdout
	if quiet {
		out = io.Discard
	}
	st, err := e.template(nil, nil, out)
	if err != nil {
		return nil, time.Time{}, err
	}
	r, err := events.Open(ctx, events.Options{
		EventsFile: e.events, Stack: *st, Lab: e.labConfig(st), LeaseTTL: e.leaseTTL,
		Log: slog.New(slog.NewTextHandler(out, nil)),
	})
	return r, now, err
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
			return runEventsReconcile(cmd.Context(), &e, asJSON, ios.Out)
		},
	}
	fs := cmd.Flags()
	e.add(fs)
	fs.BoolVar(&asJSON, "json", false, "print each event's phase, boxes, next step and this run's actions as JSON, instead of the log and the table")
	return cmd
}

func runEventsReconcile(ctx context.Context, e *eventsFlags, asJSON bool, stdout io.Writer) error {
	r, now, err := e.open(ctx, stdout, asJSON, nil)
	if err != nil {
		return err
	}
	defer r.Close()
	results, err := r.Reconcile(ctx, now)
	if errors.Is(err, events.ErrLocked) {
		return err
	}
	if asJSON {
		if jerr := events.WriteJSON(stdout, r.Outcomes(now, results)); jerr != nil {
			return errors.Join(err, jerr)
		}
		refreshMonitor(io.Discard, monitorDir(e.monitorDir), r.StateDir, r.Events)
		return err
	}
	events.WriteOutcomes(stdout, now, r.Outcomes(now, results))
	refreshMonitor(stdout, monitorDir(e.monitorDir), r.StateDir, r.Events)
	return err
}

// burstModeCommand is fleet burst up, down or resize (mode).
func burstModeCommand(ios *cli.IOStreams, mode, short string) *cobra.Command {
	var e eventsFlags
	var event string
	var drain time.Duration
	cmd := &cobra.Command{
		Use:   mode,
		Short: short,
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBurst(cmd.Context(), &e, mode, event, drain, ios.Out)
		},
	}
	fs := cmd.Flags()
	e.add(fs)
	fs.StringVar(&event, "event", "", "the event (required)")
	fs.DurationVar(&drain, "drain-time", -1, "down: how long listeners get to leave (default: the event's drain time)")
	cli.Ranged(fs, "drain-time", drainRange)
	return cmd
}

// runBurst brings event's boxes up or down now (mode), or sizes it again;
// drain < 0 is the event's drain time.
func runBurst(ctx context.Context, e *eventsFlags, mode, event string, drain time.Duration, stdout io.Writer) error {
	validate := func() error {
		switch {
		case event == "":
			return usagef("flag --event: required")
		case mode == "resize" && drain >= 0:
			return usagef("flag --drain-time: resize drains for the event's drain time")
		case mode == events.ManualUp && drain >= 0:
			return usagef("flag --drain-time: only burst down drains")
		}
		return nil
	}
	r, now, err := e.open(ctx, stdout, false, validate)
	if err != nil {
		return err
	}
	defer r.Close()
	var res events.Result
	if mode == "resize" {
		res, err = r.Resize(ctx, now, event)
	} else {
		if mode == events.ManualDown && drain < 0 {
			if ev, ok := r.Events.Event(event); ok {
				drain = ev.DrainTime.D()
			}
		}
		res, err = r.Manual(ctx, now, event, mode, drain)
	}
	if err != nil {
		return err
	}
	events.WriteOutcomes(stdout, now, r.Outcomes(now, []events.Result{res}))
	refreshMonitor(stdout, monitorDir(e.monitorDir), r.StateDir, r.Events)
	return nil
}

// storeFlags say where the reconciler's records are: the Pulumi backend
// (--backend, else the state dir's), read with the Pulumi CLI.
type storeFlags struct {
	stateDir, backend, pulumi, fleet *string
}

func newStoreFlags(fs *pflag.FlagSet) *storeFlags {
	return &storeFlags{
		stateDir: fs.String("state-dir", "", "state directory (default $RELAYFLEET_STATE_DIR, else ~/.local/state/relayfleet)"),
		backend:  fs.String("backend", "", "Pulumi backend URL holding the records (default $"+program.BackendEnv+", else file:// under the state dir)"),
		pulumi:   fs.String("pulumi", "", "the Pulumi CLI (default $"+program.PulumiEnv+", else the make pulumi build, else pulumi on $PATH)"),
		fleet:    fs.String("fleet", "", "only this fleet's events (default: every fleet in the backend)"),
	}
}

// records reads the records from the Pulumi backend (events.ReadRecords).
func (f *storeFlags) records(ctx context.Context) ([]*events.Record, string, error) {
	if *f.backend != "" && !strings.Contains(*f.backend, "://") {
		return nil, "", usagef("flag --backend: want a URL such as file:///var/lib/relayfleet/state or s3://bucket, got %q", *f.backend)
	}
	return events.ReadRecords(ctx, events.StoreOptions{StateDir: *f.stateDir, BackendURL: *f.backend, Pulumi: *f.pulumi, Fleet: *f.fleet})
}

// eventsStatusCommand is fleet events status.
func eventsStatusCommand(ios *cli.IOStreams) *cobra.Command {
	var sf *storeFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "each event's phase, boxes, listeners and last action",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEventsStatus(cmd.Context(), sf, asJSON, ios.Out)
		},
	}
	fs := cmd.Flags()
	sf = newStoreFlags(fs)
	fs.BoolVar(&asJSON, "json", false, "print the records as JSON")
	return cmd
}

func runEventsStatus(ctx context.Context, sf *storeFlags, asJSON bool, stdout io.Writer) error {
	recs, dir, err := sf.records(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return events.WriteJSON(stdout, recs)
	}
	return events.WriteRecords(stdout, recs, dir)
}

// eventsReportCommand is fleet events report.
func eventsReportCommand(ios *cli.IOStreams) *cobra.Command {
	var sf *storeFlags
	var event string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "report",
		Short: "an event's cost: box-hours, egress, against the plan",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runEventsReport(cmd.Context(), sf, event, asJSON, ios.Out)
		},
	}
	fs := cmd.Flags()
	sf = newStoreFlags(fs)
	fs.StringVar(&event, "event", "", "the event (required)")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func runEventsReport(ctx context.Context, sf *storeFlags, event string, asJSON bool, stdout io.Writer) error {
	if event == "" {
		return usagef("flag --event: required")
	}
	recs, dir, err := sf.records(ctx)
	if err != nil {
		return err
	}
	var rec *events.Record
	for _, r := range recs {
		if r.Event == event {
			if rec != nil {
				return usagef("flag --event: %q is an event of several fleets in %s: give --fleet", event, dir)
			}
			rec = r
		}
	}
	if rec == nil {
		return usagef("flag --event: no record of %q in %s", event, dir)
	}
	if rec.Report == nil {
		return fmt.Errorf("event %s is %s: its report is written once its boxes are gone", event, rec.Phase)
	}
	if asJSON {
		return events.WriteJSON(stdout, rec.Report)
	}
	return rec.Report.WriteText(stdout)
}

func stateDirOr(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	return program.DefaultStateDir()
}
