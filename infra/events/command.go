package events

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/units"
)

// Resize is fleet burst resize's mode, beside ManualUp and ManualDown.
const Resize = "resize"

// RunOptions are the inputs of fleet events reconcile and fleet burst,
// as their flags give them.
type RunOptions struct {
	// EventsFile is the events file (required).
	EventsFile string
	// Now is the time to reconcile for, RFC 3339 ("": the clock).
	Now string
	// LeaseTTL, Retention and RelayBinary are Options's.
	LeaseTTL    time.Duration
	Retention   time.Duration
	RelayBinary string
	// Wait and Command are Options's: how long to wait for another holder
	// of the fleet's lease, and this command's name in it.
	Wait    time.Duration
	Command string
	// Stack checks the Pulumi flags, then makes the stacks' template and
	// says how boxes are reached (Options's Stack and Lab); Pulumi's
	// progress goes to progress.
	Stack func(progress io.Writer) (*program.Stack, provider.Config, error)
	// Refresh, when not nil, rewrites the monitor directory's targets
	// after the stacks changed and says so on w (monitoring.RefreshAndSay).
	Refresh func(w io.Writer, stateDir string, evs *inventories.Events)
}

// Open builds the reconciler o describes (Open), and the time to
// reconcile for. Its log and Pulumi's progress go to stdout, or nowhere
// when quiet (--json: stdout holds only the JSON). validate, when not
// nil, checks the command's own flags before anything is looked up (the
// Pulumi CLI, the files). Errors in what the flags gave are cli usage
// errors naming the flag.
func (o *RunOptions) Open(ctx context.Context, stdout io.Writer, quiet bool, validate func() error) (*Reconciler, time.Time, error) {
	return o.open(ctx, stdout, quiet, validate, false)
}

// open is Open; fromRecords is Options.FromRecords.
func (o *RunOptions) open(ctx context.Context, stdout io.Writer, quiet bool, validate func() error, fromRecords bool) (*Reconciler, time.Time, error) {
	if o.EventsFile == "" {
		return nil, time.Time{}, cli.Usagef("flag --events: required")
	}
	now := time.Now()
	if o.Now != "" {
		t, err := time.Parse(time.RFC3339, o.Now)
		if err != nil {
			return nil, time.Time{}, cli.Usagef("flag --now: want an RFC 3339 time such as 2026-12-05T19:00:00Z, got %q", o.Now)
		}
		now = t
	}
	if validate != nil {
		if err := validate(); err != nil {
			return nil, time.Time{}, err
		}
	}
	out := stdout
	if quiet {
		out = io.Discard
	}
	st, cfg, err := o.Stack(out)
	if err != nil {
		return nil, time.Time{}, err
	}
	r, err := Open(ctx, Options{
		EventsFile: o.EventsFile, Stack: *st, Lab: cfg, LeaseTTL: o.LeaseTTL, Wait: o.Wait, Command: o.Command, Retention: o.Retention, RelayBinary: o.RelayBinary,
		Log: slog.New(slog.NewTextHandler(out, nil)), FromRecords: fromRecords,
	})
	if err == nil && r.FileErr != nil {
		r.FileErr = fmt.Errorf("events file %s does not parse (ended events were torn down from their records, nothing else was done): %w", o.EventsFile, r.FileErr)
	}
	return r, now, err
}

// refresh is o.Refresh, when there is one.
func (o *RunOptions) refresh(w io.Writer, r *Reconciler) {
	if o.Refresh != nil {
		o.Refresh(w, r.StateDir, r.Events)
	}
}

// RunReconcile is fleet events reconcile: it reconciles every event once
// and writes each event's outcome to stdout, as a table after the log,
// or with asJSON as JSON alone. ErrLocked is returned at once; other
// errors after the outcomes. An events file that does not parse still
// lets the events that ended be torn down from their records (the
// Reconciler's FileErr), and is the error returned at the end.
func RunReconcile(ctx context.Context, stdout io.Writer, o RunOptions, asJSON bool) error {
	r, now, err := o.open(ctx, stdout, asJSON, nil, true)
	if err != nil {
		return err
	}
	defer r.Close()
	results, err := r.Reconcile(ctx, now)
	if errors.Is(err, ErrLocked) {
		return err
	}
	if asJSON {
		if jerr := WriteJSON(stdout, r.Outcomes(now, results)); jerr != nil {
			return errors.Join(err, jerr)
		}
		o.refresh(io.Discard, r)
		return err
	}
	WriteOutcomes(stdout, now, r.Outcomes(now, results))
	o.refresh(stdout, r)
	return err
}

// Burst is what fleet burst does to one event.
type Burst struct {
	// Event is the event (required).
	Event string
	// Mode is ManualUp, ManualDown or Resize.
	Mode string
	// Drain is how long listeners get to leave on ManualDown; < 0 is the
	// event's drain time, and the only value the other modes take.
	Drain time.Duration
}

// RunBurst is fleet burst up, down or resize: it brings the event's
// boxes up or down now, or sizes it again (Manual, Resize), and writes
// its outcome to stdout.
func RunBurst(ctx context.Context, stdout io.Writer, o RunOptions, b Burst) error {
	validate := func() error {
		switch {
		case b.Event == "":
			return cli.Usagef("flag --event: required")
		case b.Mode == Resize && b.Drain >= 0:
			return cli.Usagef("flag --drain-time: resize drains for the event's drain time")
		case b.Mode == ManualUp && b.Drain >= 0:
			return cli.Usagef("flag --drain-time: only burst down drains")
		}
		return nil
	}
	r, now, err := o.Open(ctx, stdout, false, validate)
	if err != nil {
		return err
	}
	defer r.Close()
	var res Result
	if b.Mode == Resize {
		res, err = r.Resize(ctx, now, b.Event)
	} else {
		drain := b.Drain
		if b.Mode == ManualDown && drain < 0 {
			if ev, ok := r.Events.Event(b.Event); ok {
				drain = ev.DrainTime.D()
			}
		}
		res, err = r.Manual(ctx, now, b.Event, b.Mode, drain)
	}
	if err != nil {
		return err
	}
	WriteOutcomes(stdout, now, r.Outcomes(now, []Result{res}))
	o.refresh(stdout, r)
	return nil
}

// records reads the records from the Pulumi backend (ReadRecords), once
// BackendURL is a URL.
func records(ctx context.Context, o StoreOptions) ([]*Record, string, error) {
	if o.BackendURL != "" && !strings.Contains(o.BackendURL, "://") {
		return nil, "", cli.Usagef("flag --backend: want a URL such as file:///var/lib/relayfleet/state or s3://bucket, got %q", o.BackendURL)
	}
	return ReadRecords(ctx, o)
}

// WriteStatus is fleet events status: every record, as a table or as
// JSON, on w.
func WriteStatus(ctx context.Context, w io.Writer, o StoreOptions, asJSON bool) error {
	recs, dir, err := records(ctx, o)
	if err != nil {
		return err
	}
	if asJSON {
		return WriteJSON(w, recs)
	}
	return WriteRecords(w, recs, dir)
}

// WriteReport is fleet events report: the event's cost report, as text
// or as JSON, on w. An event no record names, or that several fleets
// have (give StoreOptions.Fleet), is a usage error; one whose boxes are
// not gone yet has no report.
func WriteReport(ctx context.Context, w io.Writer, o StoreOptions, event string, asJSON bool) error {
	if event == "" {
		return cli.Usagef("flag --event: required")
	}
	recs, dir, err := records(ctx, o)
	if err != nil {
		return err
	}
	var rec *Record
	for _, r := range recs {
		if r.Event == event {
			if rec != nil {
				return cli.Usagef("flag --event: %q is an event of several fleets in %s: give --fleet", event, dir)
			}
			rec = r
		}
	}
	if rec == nil {
		return cli.Usagef("flag --event: no record of %q in %s", event, dir)
	}
	if rec.Report == nil {
		return fmt.Errorf("event %s is %s: its report is written once its boxes are gone", event, rec.Phase)
	}
	if asJSON {
		return WriteJSON(w, rec.Report)
	}
	return rec.Report.WriteText(w)
}

// timerFlags names fleet events install's flag behind each field of
// TimerOptions.
var timerFlags = map[string]string{
	"Fleet":           "--fleet-binary",
	"Events":          "--events",
	"StateDir":        "--state-dir",
	"Interval":        "--interval",
	"User":            "--user",
	"EnvironmentFile": "--environment-file",
	"UnitDir":         "--unit-dir",
	"ExporterListen":  "--exporter-listen",
}

// timerFieldName names what the user gave behind a TimerFieldError's
// field: the flag, the arguments after -- (ExtraArgs[i]), or a file
// install found by itself.
func timerFieldName(field string) string {
	switch {
	case timerFlags[field] != "":
		return "flag " + timerFlags[field]
	case field == "Relay":
		return "the relay build beside the fleet binary"
	case field == "Pulumi":
		return "the Pulumi CLI the service finds"
	}
	return "arguments after --"
}

// Install is fleet events install: it installs the reconciler's timer
// (InstallTimer) and says on w what it did. Errors in what the flags gave
// are cli usage errors naming the flag, or the arguments after --
// (ExtraArgs).
func Install(ctx context.Context, w io.Writer, o TimerOptions) error {
	if o.Events == "" {
		return cli.Usagef("flag --events: required")
	}
	written, err := InstallTimer(ctx, o)
	for _, path := range written {
		fmt.Fprintf(w, "wrote %s\n", path)
	}
	var fe *units.FieldError
	var te *TimerFieldError
	switch {
	case errors.As(err, &fe):
		name, ok := timerFlags[fe.Field]
		if !ok {
			name = "arguments after --" // ExtraArgs[i]
		} else {
			name = "flag " + name
		}
		return cli.Usagef("%s: %s: %s", name, fe.Value, fe.Reason)
	case errors.As(err, &te):
		return cli.Usagef("%s: %v", timerFieldName(te.Field), te.Err)
	case err != nil:
		return err
	}
	WriteInstalled(w, o)
	return nil
}
