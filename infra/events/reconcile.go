package events

import (
	"context"
	"errors"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"io"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/lease"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/capacity"
)

// Stacks runs an event's Pulumi stack. program.Stack does, through the
// Pulumi CLI; tests may fake it.
type Stacks interface {
	// Up brings the stack to b and returns its hosts, converged.
	Up(ctx context.Context, stack string, b program.Burst) ([]program.HostEntry, error)
	// Destroy destroys every box of the stack and removes the stack.
	Destroy(ctx context.Context, stack string, b program.Burst) error
	// Repair clears what a killed Pulumi run left: its lock and pending
	// operations.
	Repair(ctx context.Context, stack string, b program.Burst) error
}

// Prober asks an event's relays over SSH.
type Prober interface {
	// Listeners sums the listeners of every relay process on the hosts.
	Listeners(ctx context.Context, hosts []program.HostEntry) (int64, error)
	// Drain marks every relay process on the hosts draining: it refuses
	// new sessions and serves the ones it has.
	Drain(ctx context.Context, hosts []program.HostEntry) error
	// Room sums what the relay processes on the hosts still admit: each
	// one's headroom as its /stats reports it (0 while draining).
	Room(ctx context.Context, hosts []program.HostEntry) (int64, error)
	// Shed tells at most n listeners on the hosts to move (the
	// going-away close, at the shed rate), leaving the relays as they
	// are; it returns how many it told.
	Shed(ctx context.Context, hosts []program.HostEntry, n int64) (int64, error)
}

// Reconciler moves every event toward what the clock says should exist.
type Reconciler struct {
	Events      *inventories.Events
	Fleet       *inventories.Fleet
	Catalogue   *inventories.Catalogue
	Calibration *inventories.Calibration
	// Store keeps the records and the lease: the Pulumi backend
	// (PulumiStore), so that a reconcile killed on one machine is resumed
	// on another, or from an empty state dir.
	Store Store
	// StateDir caches the records and holds the router's relay list,
	// written from the records and the steady fleet's stack.
	StateDir string
	// SteadyHosts, when set, reads the steady fleet's hosts from its
	// stack's outputs; ok is false when the stack does not exist. The
	// relays file gets them when the state dir has none (a new machine).
	SteadyHosts func(ctx context.Context) (hosts []program.HostEntry, ok bool, err error)
	// Release is the relay build the burst hosts run; a new one is rolled
	// onto boxes that are up by the next reconcile.
	Release string
	Stacks  Stacks
	Probe   Prober
	// Backends opens a backend for the sweep by label.
	Backends func(name string) (backend.Backend, error)
	// Log receives one line per action, with the event's name.
	Log *slog.Logger
	// FileErr, when set, is why the events file (or its fleet file) did
	// not parse; Events is nil. Reconcile then works from the records
	// alone (teardownFromRecord) and returns FileErr with its errors.
	FileErr error
	// WallClock is the clock the heartbeat is written on (time.Now when
	// nil); the reconcile's own now may be a simulated one.
	WallClock func() time.Time
	// Retention is how long the record of an event that is gone (or was
	// missed) and no longer in the events file is kept after its last
	// action (DefaultRetention when 0); then a reconcile forgets it.
	Retention time.Duration
}

// DefaultRetention keeps a finished event's record, its cost report with
// it, for 90 days after the event left the file.
const DefaultRetention = 90 * 24 * time.Hour

// StackName is an event's stack: FLEET-event-NAME.
func StackName(fleet, event string) string { return fleet + "-event-" + event }

// Result is what one reconcile did to one event.
type Result struct {
	Event string
	Phase Phase
	Err   error
}

func (r *Reconciler) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return r.Log
}

// Reconcile takes the lock and moves every event, and every recorded event
// no longer in the file, one pass toward what now asks for. One event's
// failure does not stop the others; the error joins them all.
//
// With no Events (FileErr: the events file did not parse) it says so
// loudly and tears down, from their records, the events that ended or
// were brought down by hand; the others are left as they are.
func (r *Reconciler) Reconcile(ctx context.Context, now time.Time) ([]Result, error) {
	if r.FileErr != nil {
		r.log().Error("the events file does not parse: ended events are torn down from their records, nothing is brought up, running events are left as they are; fix the file",
			"action", "events-file-invalid", "err", r.FileErr)
	}
	ctx, known, unlock, err := r.lockAndLoad(ctx)
	if err != nil {
		return nil, errors.Join(r.FileErr, err)
	}
	defer unlock()
	recs := make([]*Record, 0, len(known))
	for _, rec := range known {
		recs = append(recs, rec)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Event < recs[j].Event })
	var results []Result
	var errs []error
	if r.FileErr != nil {
		errs = append(errs, r.FileErr)
	}
	var inFile []inventories.Event
	if r.Events != nil {
		inFile = r.Events.Events
	}
	for i := range inFile {
		ev := &inFile[i]
		rec := known[ev.Name]
		delete(known, ev.Name)
		res := r.one(ctx, now, ev, rec)
		results = append(results, res)
		if res.Err != nil {
			errs = append(errs, fmt.Errorf("event %s: %w", ev.Name, res.Err))
		}
	}
	// The fleet's surge, beside the events (its record is not an event
	// that left the file, unless the fleet no longer has a surge).
	if r.Events != nil && r.Fleet != nil && r.Fleet.Surge != nil {
		rec := known[inventories.SurgeEvent]
		delete(known, inventories.SurgeEvent)
		res := r.surge(ctx, now, rec)
		results = append(results, res)
		if res.Err != nil {
			errs = append(errs, fmt.Errorf("surge: %w", res.Err))
		}
	}
	for _, rec := range recs {
		if _, gone := known[rec.Event]; !gone {
			continue
		}
		if r.Events == nil {
			res := r.teardownFromRecord(ctx, now, rec)
			results = append(results, res)
			if res.Err != nil {
				errs = append(errs, fmt.Errorf("event %s: %w", rec.Event, res.Err))
			}
			continue
		}
		if r.expired(rec, now) {
			if err := r.forget(ctx, rec, now); err != nil {
				errs = append(errs, fmt.Errorf("event %s: %w", rec.Event, err))
			}
			continue
		}
		res := r.one(ctx, now, nil, rec)
		results = append(results, res)
		if res.Err != nil {
			errs = append(errs, fmt.Errorf("event %s: %w", rec.Event, res.Err))
		}
	}
	err = errors.Join(errs...)
	r.beat(ctx, err == nil)
	return results, stopped(ctx, err)
}

// stopped is a failed run's error in one line, when the fleet's store
// is the cause: the lease lost (its renewals failed while the store did
// not answer, or another holder took it over after it expired) or the
// store not answering. What failed after that (a Pulumi run cut off,
// records not saved) follows from it and is in each event's outcome;
// the records kept in the store say where the next run resumes.
func stopped(held context.Context, err error) error {
	if err == nil {
		return nil
	}
	if cause := context.Cause(held); errors.Is(cause, ErrLeaseLost) {
		return fmt.Errorf("stopped, the next run resumes from the records: %w", cause)
	}
	if se := findErr(err, func(e error) bool {
		_, ok := e.(*lease.StoreError)
		return ok && errors.Is(e, lease.ErrUnreachable)
	}); se != nil {
		return fmt.Errorf("the fleet's store does not answer: %w; stopped, the next run resumes from the records", se)
	}
	return err
}

// findErr is the first error in err's tree (depth first, as errors.As
// walks it) that match accepts, or nil.
func findErr(err error, match func(error) bool) error {
	if err == nil {
		return nil
	}
	if match(err) {
		return err
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if f := findErr(e, match); f != nil {
				return f
			}
		}
	case interface{ Unwrap() error }:
		return findErr(u.Unwrap(), match)
	}
	return nil
}

// teardownFromRecord reconciles an event from its record alone, when the
// events file does not parse: one that ended (its recorded end has
// passed) or that fleet burst down brought down is drained and destroyed
// as usual, on its recorded end and drain time; any other is left as it
// is, with no new up and no drain.
func (r *Reconciler) teardownFromRecord(ctx context.Context, now time.Time, rec *Record) Result {
	var ev *inventories.Event
	if !rec.End.IsZero() {
		ev = &inventories.Event{Name: rec.Event, Start: inventories.Time{Time: rec.Start}, End: inventories.Time{Time: rec.End},
			DrainTime: rec.DrainTime, MaxOverrun: rec.MaxOverrun, Burst: rec.Pool}
	}
	if rec.Manual != ManualDown && (ev == nil || now.Before(ev.End.Time)) {
		return Result{Event: rec.Event, Phase: rec.Phase}
	}
	return r.one(ctx, now, ev, rec)
}

// expired reports whether the record of an event no longer in the file
// has outlived the retention: gone or missed, its last action older.
func (r *Reconciler) expired(rec *Record, now time.Time) bool {
	if rec.Phase != Gone && rec.Phase != Missed {
		return false
	}
	keep := r.Retention
	if keep <= 0 {
		keep = DefaultRetention
	}
	last := rec.lastAction()
	return !last.IsZero() && now.Sub(last) > keep
}

// lastAction is when the record last changed: its last log entry, or its
// destroy.
func (rec *Record) lastAction() time.Time {
	last := rec.DestroyedAt
	if n := len(rec.Log); n > 0 && rec.Log[n-1].At.After(last) {
		last = rec.Log[n-1].At
	}
	return last
}

// forget removes an expired record from the store and the state dir's
// cache, and says so.
func (r *Reconciler) forget(ctx context.Context, rec *Record, now time.Time) error {
	if err := r.Store.Remove(ctx, rec.Event); err != nil {
		return err
	}
	r.log().Info(fmt.Sprintf("record forgotten: the event left the events file and has been %s since %s, longer than the retention", rec.Phase, rec.lastAction().Format(time.RFC3339)),
		"event", rec.Event, "action", "forget", "phase", string(rec.Phase))
	return uncache(r.StateDir, rec.Event)
}

// Manual sets an event's manual override (ManualUp or ManualDown, "" to
// follow the clock again) and reconciles that event at once. drain, when
// not negative, replaces the event's drain time for a manual down.
func (r *Reconciler) Manual(ctx context.Context, now time.Time, event, mode string, drain time.Duration) (Result, error) {
	ctx, known, unlock, err := r.lockAndLoad(ctx)
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	ev, inFile := r.Events.Event(event)
	rec, ok := known[event]
	if !inFile && !ok {
		return Result{}, fmt.Errorf("event %q: not in the events file and never reconciled", event)
	}
	if !inFile && mode == ManualUp {
		return Result{}, fmt.Errorf("event %q: not in the events file; only down is possible", event)
	}
	if inFile && mode == ManualUp && !now.Before(ev.End.Time) {
		return Result{}, fmt.Errorf("event %q ended at %s; burst up is for events that have not ended", event, ev.End.Format(time.RFC3339))
	}
	if !ok {
		rec = r.newRecord(ev)
	}
	rec.Manual = mode
	if mode == ManualDown && drain >= 0 && (rec.Phase == Up || rec.Phase == Creating) {
		// Set below by drain(); remember the override for it.
		rec.DrainDeadline = now.Add(drain)
	}
	if mode == ManualDown && rec.Phase == Draining && rec.Overrun != nil && !rec.Overrun.Forced {
		// The overrun ends now: drain() sets the deadline from drain,
		// else the event's drain time.
		rec.DrainDeadline = time.Time{}
		if drain >= 0 {
			rec.DrainDeadline = now.Add(drain)
		}
	}
	r.note(rec, now, "manual", "fleet burst "+mode)
	if err := r.save(ctx, rec); err != nil {
		return Result{}, err
	}
	if !inFile {
		ev = nil
	}
	res := r.one(ctx, now, ev, rec)
	return res, res.Err
}

func (r *Reconciler) newRecord(ev *inventories.Event) *Record {
	return &Record{
		Event:   ev.Name,
		Stack:   StackName(r.Fleet.Name, ev.Name),
		Backend: ev.Burst.Provider,
		Pool:    ev.Burst,
		Phase:   Scheduled,
	}
}

// want is what should exist for an event now.
type want int

const (
	wantNothing want = iota // nothing new; what exists is left as it is
	wantUp
	wantGone
)

// desired is what should exist for the event now. A running event whose
// start the file moved later is given here with its old window
// (Record.MovedLater, holdsOldWindow): it runs to its old end and drains
// as at any end. Boxes that exist outside any window the record knows
// (a record from before it kept the times, boxes brought up by hand
// before the lead time) are brought down like an ended event's when the
// file moves the start later (movedLater), unless fleet burst up keeps
// them up; an end moved later keeps a running event up until the new
// end.
func desired(ev *inventories.Event, rec *Record, now time.Time) want {
	switch {
	case rec != nil && rec.Manual == ManualDown:
		return wantGone
	case ev == nil, !now.Before(ev.End.Time):
		return wantGone
	case rec != nil && rec.Manual == ManualUp, !now.Before(ev.UpAt()):
		return wantUp
	case movedLater(ev, rec, now):
		return wantGone
	}
	return wantNothing
}

// movedLater reports whether the event's boxes exist although its
// bring-up (start less lead time, as the file now says) is still to
// come: the file moved it later, and it is not held up by hand.
func movedLater(ev *inventories.Event, rec *Record, now time.Time) bool {
	return ev != nil && rec != nil && rec.StackMade && rec.Manual != ManualUp && now.Before(ev.UpAt())
}

// one reconciles one event; ev is nil for a recorded event no longer in
// the file.
func (r *Reconciler) one(ctx context.Context, now time.Time, ev *inventories.Event, rec *Record) (res Result) {
	if rec == nil {
		rec = r.newRecord(ev)
	}
	held := rec.MovedLater
	if ev != nil && r.Events != nil {
		r.followFile(now, ev, rec)
	}
	// A move noted (or its end) is kept whatever the action saves (a
	// sample that failed saves nothing), so it is noted once.
	changed := held != rec.MovedLater
	file := ev
	if ev != nil && rec.MovedLater != nil {
		ev = oldWindow(ev, rec)
	}
	ctx, err := r.withRequestLog(ctx, rec.Event)
	if err != nil {
		return Result{Event: rec.Event, Phase: rec.Phase, Err: err}
	}
	defer func() {
		// The API requests this pass sent, counted once it is done.
		if added, aerr := r.addRequests(rec); added || aerr != nil {
			res.Err = errors.Join(res.Err, aerr, r.save(ctx, rec))
		}
	}()
	switch desired(ev, rec, now) {
	case wantUp:
		err = r.up(ctx, now, ev, rec)
	case wantGone:
		if rec.Phase == Up && movedLater(ev, rec, now) && rec.Manual != ManualDown {
			// Drained for the event's drain time from now, not until
			// its new end (drain keeps a deadline set before it).
			rec.DrainDeadline = now.Add(ev.DrainTime.D())
			r.note(rec, now, "moved-later", fmt.Sprintf("the events file moved the event to start at %s: its boxes are drained and destroyed now, and come back at %s (start less lead time %s)",
				ev.Start.UTC().Format(time.RFC3339), ev.UpAt().UTC().Format(time.RFC3339), ev.LeadTime.D()))
		}
		err = r.down(ctx, now, ev, rec)
	default:
		if rec.Phase == Up {
			err = r.sample(ctx, now, rec)
		} else if rec.Phase == "" {
			rec.Phase = Scheduled
		}
		if rec.Phase == Scheduled && len(rec.Log) == 0 {
			r.note(rec, now, "scheduled", fmt.Sprintf("boxes come up at %s (start %s less lead time %s)",
				ev.UpAt().UTC().Format(time.RFC3339), ev.Start.UTC().Format(time.RFC3339), ev.LeadTime.D()))
			err = errors.Join(err, r.save(ctx, rec))
		}
	}
	if file != nil && r.Events != nil && rec.MovedLater != nil && !rec.StackMade {
		// The old window's boxes went in this run: the new window now.
		r.followWindow(now, file, rec)
		changed = true
	}
	if changed {
		err = errors.Join(err, r.save(ctx, rec))
	}
	return Result{Event: rec.Event, Phase: rec.Phase, Err: err}
}

// followFile takes the event's burst pool from the file, which is the
// truth while the event is in it, with one exception: boxes that exist
// (its stack was made and not yet destroyed) keep their provider, shape
// and location until the event is down; a move in the file is noted once
// and applies to its next bring-up. The record's backend, which the
// proof of teardown lists, is always the one its boxes are on. The
// event's times are the file's, but for a running event whose start the
// file moved later (followWindow).
func (r *Reconciler) followFile(now time.Time, ev *inventories.Event, rec *Record) {
	rec.DrainTime, rec.MaxOverrun = ev.DrainTime, ev.MaxOverrun
	r.followWindow(now, ev, rec)
	p := rec.Pool
	moved := p.Provider != "" && choiceRefs(&p) != choiceRefs(&ev.Burst)
	if rec.StackMade && moved {
		want := choiceRefs(&ev.Burst)
		if rec.PoolHeld != want {
			rec.PoolHeld = want
			r.note(rec, now, "hold", fmt.Sprintf("the events file moves the event to %s; its boxes stay on %s until it is down (a move under listeners would replace every box)",
				want, choiceRefs(&p)))
		}
		// Its size and the rest follow the file.
		keep := p
		rec.Pool = ev.Burst
		rec.Pool.Provider, rec.Pool.Shape, rec.Pool.Location, rec.Pool.Candidates = keep.Provider, keep.Shape, keep.Location, keep.Candidates
		return
	}
	rec.Pool, rec.PoolHeld = ev.Burst, ""
	if !rec.StackMade {
		rec.Backend = ev.Burst.Provider
	}
}

// followWindow takes the event's start and end from the file, except for
// a running event whose start the file moved later (holdsOldWindow): the
// record keeps its old window, the new one waits in MovedLater (noted
// once per change, action=moved-later), and the record takes it once
// the old window's boxes are gone (or the new bring-up comes while they
// still run, or the file moves the start back, or fleet burst up).
func (r *Reconciler) followWindow(now time.Time, ev *inventories.Event, rec *Record) {
	if holdsOldWindow(now, ev, rec) {
		w := Window{Start: ev.Start.Time, End: ev.End.Time, UpAt: ev.UpAt()}
		if rec.MovedLater == nil || !rec.MovedLater.equal(w) {
			rec.MovedLater = &w
			then := fmt.Sprintf("its boxes keep their listeners until its old end %s, then drain as at any end (shed into the steady fleet's room, max_overrun %s), and come up again for the new window at %s (start less lead time %s)",
				rfc(rec.End), maxOverrun(ev), rfc(w.UpAt), ev.LeadTime.D())
			switch {
			case !now.Before(rec.End):
				then = fmt.Sprintf("its old end %s has passed, so its boxes drain now as at any end (shed into the steady fleet's room, max_overrun %s), and come up again for the new window at %s (start less lead time %s)",
					rfc(rec.End), maxOverrun(ev), rfc(w.UpAt), ev.LeadTime.D())
			case w.UpAt.Before(rec.End):
				then = fmt.Sprintf("its boxes keep their listeners and run on into the new window, whose bring-up (%s) comes before the old end %s", rfc(w.UpAt), rfc(rec.End))
			}
			r.note(rec, now, "moved-later", fmt.Sprintf("the events file moved the event from %s..%s to %s..%s while it runs: %s",
				rfc(rec.Start), rfc(rec.End), rfc(w.Start), rfc(w.End), then))
		}
		return
	}
	if rec.MovedLater != nil {
		rec.MovedLater = nil
		why := "the old window's boxes are gone"
		switch {
		case rec.StackMade && rec.Manual == ManualUp:
			why = "fleet burst up keeps its boxes up"
		case rec.StackMade && !ev.Start.After(rec.Start):
			why = "the events file no longer moves its start later"
		case rec.StackMade:
			why = "its new bring-up came while its boxes still run"
		}
		r.note(rec, now, "rescheduled", fmt.Sprintf("%s: the event now has its window from the events file, %s..%s (boxes up at %s)",
			why, rfc(ev.Start.Time), rfc(ev.End.Time), rfc(ev.UpAt())))
	}
	rec.Start, rec.End = ev.Start.Time, ev.End.Time
}

// holdsOldWindow reports whether the record keeps the event's old window
// although the file moved its start later: its boxes exist and it runs
// (its recorded start less lead time has come; or its old window's
// boxes are draining or being destroyed), the file's new bring-up is still to come, and fleet burst
// up does not hold it up. An event not started simply moves.
func holdsOldWindow(now time.Time, ev *inventories.Event, rec *Record) bool {
	if !rec.StackMade || rec.Manual == ManualUp || rec.Start.IsZero() || rec.End.IsZero() || !ev.Start.After(rec.Start) {
		return false
	}
	switch rec.Phase {
	case Up, Creating:
		// Past its old end (a timer that was down) it still drains as
		// an ended event does.
		return !now.Before(rec.Start.Add(-ev.LeadTime.D())) && now.Before(ev.UpAt())
	case Draining, Destroying:
		return rec.MovedLater != nil
	}
	return false
}

// oldWindow is ev with the old window its record keeps (MovedLater).
func oldWindow(ev *inventories.Event, rec *Record) *inventories.Event {
	old := *ev
	old.Start.Time, old.End.Time = rec.Start, rec.End
	return &old
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// choiceRefs is where a pool's boxes come from: its candidates, in order,
// as PROVIDER/SHAPE@LOCATION, joined by ", then ".
func choiceRefs(p *inventories.Pool) string {
	var refs []string
	for _, c := range p.Choices() {
		refs = append(refs, c.Ref())
	}
	return strings.Join(refs, ", then ")
}

// note logs an action with the event's name and keeps it in the record.
func (r *Reconciler) note(rec *Record, now time.Time, action, detail string) {
	rec.Log = append(rec.Log, Entry{At: now.UTC(), Action: action, Detail: detail})
	r.log().Info(detail, "event", rec.Event, "action", action, "phase", string(rec.Phase))
}

func (r *Reconciler) fail(ctx context.Context, rec *Record, now time.Time, action string, err error) error {
	r.note(rec, now, action+"-failed", err.Error())
	if serr := r.save(ctx, rec); serr != nil {
		return errors.Join(err, serr)
	}
	return err
}

// account adds the life of the boxes that exist to BoxSeconds and
// restarts the count with boxes from now.
func (rec *Record) account(now time.Time, boxes int) {
	if rec.Boxes > 0 && !rec.BoxesSince.IsZero() && now.After(rec.BoxesSince) {
		rec.BoxSeconds += float64(rec.Boxes) * now.Sub(rec.BoxesSince).Seconds()
	}
	rec.Boxes, rec.BoxesSince = boxes, now
}

func (r *Reconciler) up(ctx context.Context, now time.Time, ev *inventories.Event, rec *Record) error {
	if rec.Shrink != nil {
		return r.shrink(ctx, now, ev, rec)
	}
	size, err := Size(ev, r.Fleet, r.Catalogue, r.Calibration)
	if err != nil {
		return r.fail(ctx, rec, now, "size", err)
	}
	again := rec.Phase == Gone || rec.Phase == Missed // rescheduled, or burst up after a down
	held := false
	if len(rec.Pool.Choices()) < 2 {
		size, held = r.hold(now, rec, size)
	}
	if again {
		rec.Candidates = nil // refusals are forgotten with the boxes
	}
	if err := r.planCandidates(rec, size); err != nil {
		return r.fail(ctx, rec, now, "size", err)
	}
	wanted := size.Boxes
	if rec.multi() {
		wanted = rec.Wanted()
	}
	if rec.Phase == Up && rec.Plan != nil && rec.Plan.Boxes == size.Boxes && rec.Release == r.Release && len(rec.Hosts) >= wanted {
		if held {
			if err := r.save(ctx, rec); err != nil {
				return err
			}
		}
		return r.sample(ctx, now, rec)
	}
	resume := rec.Phase == Creating || rec.Phase == Destroying
	grow := rec.Phase == Up
	short := grow && len(rec.Hosts) < wanted && rec.Plan != nil && rec.Plan.Boxes == size.Boxes && rec.Release == r.Release
	rec.Phase, rec.Plan = Creating, size
	if rec.CreatingSince.IsZero() || again {
		rec.CreatingSince = now
		rec.Report, rec.Orphans, rec.DestroyedAt, rec.Samples, rec.BoxSeconds = nil, nil, time.Time{}, nil, 0
		rec.Requests = backend.Requests{}
	}
	detail := fmt.Sprintf("bringing up %s (%s listeners each) for a peak of %s over the steady fleet's %s",
		text.Plural(size.Boxes, size.Shape+" box", size.Shape+" boxes"), capacity.Count(size.PerBox), capacity.Count(size.Peak), capacity.Count(size.SteadyCapacity))
	switch {
	case short:
		detail = fmt.Sprintf("trying again for the %s missing: %d of %d routed", text.Plural(wanted-len(rec.Hosts), "box", "boxes"), len(rec.Hosts), wanted)
	case grow:
		detail = fmt.Sprintf("changing to %s (plan or relay release changed)", text.Plural(wanted, "box", "boxes"))
	}
	if rec.multi() {
		detail += "; candidates: " + rec.candidatePlan(0)
	}
	r.note(rec, now, "up", detail)
	if s := size.Short(); s != "" {
		r.note(rec, now, "warning", s)
	}
	// The boxes bill from the start of the run that makes them.
	if rec.Boxes == 0 {
		rec.account(now, wanted)
	}
	if err := r.save(ctx, rec); err != nil {
		return err
	}
	if resume {
		r.note(rec, now, "repair", "a previous run was cut off: clearing its stack lock and pending operations")
		if err := r.Stacks.Repair(ctx, rec.Stack, r.burst(rec, size.Boxes)); err != nil {
			return r.fail(ctx, rec, now, "repair", err)
		}
	}
	hosts, upErr, err := r.upStack(ctx, now, ev, rec, size)
	if err != nil {
		return err
	}
	if err := r.setHosts(ctx, rec, hosts); err != nil {
		return r.fail(ctx, rec, now, "route", err)
	}
	if err := r.setDraining(ctx, rec, false); err != nil {
		return r.fail(ctx, rec, now, "route", err)
	}
	rec.account(now, max(len(hosts), rec.Created))
	rec.Hosts, rec.Release, rec.Phase, rec.UpSince = hosts, r.Release, Up, now
	rec.DrainingSince, rec.DrainDeadline = time.Time{}, time.Time{}
	relays := 0
	for _, h := range hosts {
		relays += len(h.Ports)
	}
	var names []string
	for _, h := range hosts {
		names = append(names, h.Name+" "+h.Address)
	}
	when := "start in " + ev.Start.Sub(now).Round(time.Second).String()
	if !now.Before(ev.Start.Time) {
		when = "LATE: the event started " + now.Sub(ev.Start.Time).Round(time.Second).String() + " ago"
	}
	r.note(rec, now, "ready", fmt.Sprintf("%s converged, %s in the router's list (%s); %s",
		text.Plural(len(hosts), "box", "boxes"), text.Plural(relays, "relay process", "relay processes"), strings.Join(names, ", "), when))
	if upErr != nil {
		return r.failShort(ctx, ev, rec, now, upErr)
	}
	return r.save(ctx, rec)
}

// failShort records an up that left the event short of its plan: how
// many boxes are wanted, made, converged and routed, and the error; past
// the event's start it says SHORT, loudly. The next run tries again.
func (r *Reconciler) failShort(ctx context.Context, ev *inventories.Event, rec *Record, now time.Time, err error) error {
	wanted := rec.Wanted()
	detail := fmt.Sprintf("%d of %d boxes routed (%d made, %d converged); the rest are tried again on the next run: %v",
		len(rec.Hosts), wanted, rec.Created, rec.Converged, err)
	action := "up-partial"
	if ev != nil && !now.Before(ev.Start.Time) {
		action = "short"
		detail = fmt.Sprintf("SHORT at its start: %s", detail)
	}
	r.note(rec, now, action, detail)
	if serr := r.save(ctx, rec); serr != nil {
		return errors.Join(err, serr)
	}
	return fmt.Errorf("%d of %d boxes routed: %w", len(rec.Hosts), wanted, err)
}

// running reports whether the event's boxes may hold listeners: they are
// routed (or were, and a Pulumi run on them was cut off).
func running(rec *Record) bool {
	switch rec.Phase {
	case Up, Creating, Draining:
		return len(rec.Hosts) > 0
	}
	return false
}

// hold keeps a running event at the boxes it has when the files now size
// it smaller (a new calibration, a lower peak, a lower max): a re-size
// never removes boxes under their listeners. fleet burst resize does, by
// draining them first (Resize). It notes a new smaller figure once, and
// reports whether it noted one.
func (r *Reconciler) hold(now time.Time, rec *Record, size *Sizing) (*Sizing, bool) {
	have := len(rec.Hosts)
	if !running(rec) || size.Boxes >= have {
		rec.Suggested = nil
		return size, false
	}
	noted := false
	if rec.Suggested == nil || *rec.Suggested != size.Boxes {
		rec.Suggested = &size.Boxes
		r.note(rec, now, "hold", fmt.Sprintf("the files now size the event at %s; it keeps its %d while it runs (fleet burst resize --event %s drains the others and removes them once empty)",
			text.Plural(size.Boxes, "box", "boxes"), have, rec.Event))
		noted = true
	}
	kept := *size
	kept.Boxes = have
	return &kept, noted
}

// Resize sizes a running event from the files again, as a reconcile does
// not do by itself: a larger size grows it now; a smaller one starts a
// resize down, which drains the boxes that go (the highest-numbered),
// and removes each from the router's list and then from the stack once
// it holds no listener. Reconciles finish what this call cannot (boxes
// still holding listeners).
func (r *Reconciler) Resize(ctx context.Context, now time.Time, event string) (Result, error) {
	ev, inFile := r.Events.Event(event)
	if !inFile {
		return Result{}, fmt.Errorf("event %q: not in the events file", event)
	}
	ctx, known, unlock, err := r.lockAndLoad(ctx)
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	rec, ok := known[event]
	if !ok || rec.Phase != Up {
		phase := Scheduled
		if ok {
			phase = rec.Phase
		}
		return Result{}, fmt.Errorf("event %q is %s: fleet burst resize changes an event whose boxes are up (a reconcile sizes the others from the files)", event, phase)
	}
	r.followFile(now, ev, rec)
	if rec.Shrink == nil {
		size, err := Size(ev, r.Fleet, r.Catalogue, r.Calibration)
		if err != nil {
			return Result{}, err
		}
		have := len(rec.Hosts)
		rec.Suggested = nil
		if rec.multi() {
			for k := 1; k < len(rec.Candidates); k++ {
				if c := rec.Candidates[k]; len(c.Made) > 0 && size.Boxes < have {
					return Result{}, fmt.Errorf("event %q holds %s on candidate %s besides its first: fleet burst resize does not shrink an event spread over candidates (its boxes go at its end, or with fleet burst down)",
						event, text.Plural(len(c.Made), "box", "boxes"), c.Ref)
				}
			}
		}
		if size.Boxes >= have {
			r.note(rec, now, "resize", fmt.Sprintf("fleet burst resize: the files size the event at %s; it has %d", text.Plural(size.Boxes, "box", "boxes"), have))
		} else {
			var going []string
			for _, h := range rec.Hosts {
				n, err := boxIndex(h.Name)
				if err != nil {
					return Result{}, err
				}
				if n > size.Boxes {
					going = append(going, h.Name)
				}
			}
			rec.Shrink = &Shrink{To: size.Boxes, Plan: size, Going: going, Since: now}
			r.note(rec, now, "resize", fmt.Sprintf("fleet burst resize: from %s down to %d; %s drain first and go once empty",
				text.Plural(have, "box", "boxes"), size.Boxes, strings.Join(going, ", ")))
		}
		if err := r.save(ctx, rec); err != nil {
			return Result{}, err
		}
	}
	res := r.one(ctx, now, ev, rec)
	return res, res.Err
}

// boxIndex is the number a box's name ends in (NAME-N): the program
// numbers an event's boxes from 1, and fewer boxes remove the highest.
func boxIndex(name string) (int, error) {
	i := strings.LastIndexByte(name, '-')
	n, err := strconv.Atoi(name[i+1:])
	if i < 0 || err != nil || n <= 0 {
		return 0, fmt.Errorf("box %s: its name does not end in -N", name)
	}
	return n, nil
}

// shrink moves a resize down one step: the going boxes are marked draining
// (router's list, then their relays, whose listeners are told to move), and
// the boxes from the highest number down that hold no listener are taken
// out of the router's list and then removed from the stack. A box still
// holding listeners, and those numbered below it, wait for the next
// reconcile.
func (r *Reconciler) shrink(ctx context.Context, now time.Time, ev *inventories.Event, rec *Record) error {
	sh := rec.Shrink
	if rec.Phase == Creating {
		r.note(rec, now, "repair", "a previous run was cut off: clearing its stack lock and pending operations")
		if err := r.Stacks.Repair(ctx, rec.Stack, r.burst(rec, len(rec.Hosts))); err != nil {
			return r.fail(ctx, rec, now, "repair", err)
		}
		rec.Phase = Up
	}
	var going []program.HostEntry
	for _, h := range rec.Hosts {
		if slices.Contains(sh.Going, h.Name) {
			going = append(going, h)
		}
	}
	if !sh.Drained {
		if err := r.setHostsDraining(ctx, rec, sh.Going); err != nil {
			return r.fail(ctx, rec, now, "resize", err)
		}
		drain := inventories.DefaultDrainTime
		if ev != nil {
			drain = ev.DrainTime.D()
		}
		sh.Deadline = now.Add(drain)
		r.note(rec, now, "resize-drain", fmt.Sprintf("%s marked draining in the router's list; their listeners are told to move to the boxes that stay (drain time until %s)",
			text.Plural(len(going), "box", "boxes"), sh.Deadline.UTC().Format(time.RFC3339)))
		if err := r.save(ctx, rec); err != nil {
			return err
		}
		if err := r.Probe.Drain(ctx, going); err != nil {
			r.note(rec, now, "drain-warning", "relays not told to move their listeners: "+err.Error())
		}
		sh.Drained = true
		if err := r.save(ctx, rec); err != nil {
			return err
		}
	}
	keep := sh.To
	var busy []string
	for _, h := range going {
		n, err := r.Probe.Listeners(ctx, []program.HostEntry{h})
		if err == nil && n == 0 {
			continue
		}
		idx, ierr := boxIndex(h.Name)
		if ierr != nil {
			return r.fail(ctx, rec, now, "resize", ierr)
		}
		keep = max(keep, idx)
		if err != nil {
			busy = append(busy, fmt.Sprintf("%s (listeners unknown: %v)", h.Name, err))
		} else {
			busy = append(busy, fmt.Sprintf("%s (%d listeners)", h.Name, n))
		}
	}
	if keep >= len(rec.Hosts) {
		if !now.Before(sh.Deadline) && !sh.Warned {
			sh.Warned = true
			r.note(rec, now, "resize-warning", "drain time over: "+strings.Join(busy, ", ")+" still hold listeners; they stay until they empty or the event ends")
		}
		r.log().Info("resize down waiting for listeners to leave", "event", rec.Event, "boxes", strings.Join(busy, ", "))
		return r.save(ctx, rec)
	}
	var stay []program.HostEntry
	var gone []string
	for _, h := range rec.Hosts {
		if idx, err := boxIndex(h.Name); err == nil && idx <= keep {
			stay = append(stay, h)
		} else {
			gone = append(gone, h.Name)
		}
	}
	// The router stops listing them before they are deleted.
	if err := r.setHosts(ctx, rec, stay); err != nil {
		return r.fail(ctx, rec, now, "route", err)
	}
	r.note(rec, now, "resize-remove", fmt.Sprintf("no listener left on %s: out of the router's list, now removed from the stack", strings.Join(gone, ", ")))
	rec.Phase = Creating
	if err := r.save(ctx, rec); err != nil {
		return err
	}
	hosts, err := r.Stacks.Up(ctx, rec.Stack, r.burst(rec, keep))
	if err != nil {
		return r.fail(ctx, rec, now, "resize", err)
	}
	if err := r.setHosts(ctx, rec, hosts); err != nil {
		return r.fail(ctx, rec, now, "route", err)
	}
	rec.account(now, len(hosts))
	rec.Hosts, rec.Phase = hosts, Up
	if keep > sh.To {
		return r.save(ctx, rec)
	}
	if err := r.setHostsDraining(ctx, rec, nil); err != nil {
		return r.fail(ctx, rec, now, "route", err)
	}
	rec.Shrink, rec.Plan = nil, sh.Plan
	r.note(rec, now, "resized", fmt.Sprintf("the event now has %s", text.Plural(len(hosts), "box", "boxes")))
	return r.save(ctx, rec)
}

// sample records the event's listeners while its boxes are up.
func (r *Reconciler) sample(ctx context.Context, now time.Time, rec *Record) error {
	if len(rec.Hosts) == 0 {
		return nil
	}
	sample, err := r.count(ctx, rec)
	if err != nil {
		r.log().Warn("listener count failed", "event", rec.Event, "err", err)
		return nil
	}
	sample.At = now.UTC()
	rec.Samples = append(rec.Samples, sample)
	return r.save(ctx, rec)
}

func (r *Reconciler) down(ctx context.Context, now time.Time, ev *inventories.Event, rec *Record) error {
	switch rec.Phase {
	case "", Scheduled:
		if ev != nil && !now.Before(ev.End.Time) && rec.Manual != ManualDown {
			// No record of boxes is no proof there are none: a record
			// lost with a disk, or a save cut off, leaves boxes that bill
			// on. Ask the event's backends by label before calling it
			// missed.
			lost, at, err := r.lostBoxes(ctx, ev)
			if err != nil {
				return r.fail(ctx, rec, now, "sweep", err)
			}
			if len(lost) > 0 {
				r.note(rec, now, "lost-boxes", fmt.Sprintf("the event ended with no record of boxes, but %s: destroying its stack and sweeping them", strings.Join(lost, ", ")))
				// Its stack may hold them (destroy sweeps the record's
				// backend after); the other backends are swept here.
				labels := map[string]string{"fleet": r.Fleet.Name, "tier": provider.TierBurst, "event": rec.Event}
				for _, name := range at {
					if name == rec.Backend {
						continue
					}
					be, err := r.Backends(name)
					if err != nil {
						return r.fail(ctx, rec, now, "sweep", err)
					}
					found, err := backend.Sweep(ctx, be, labels)
					for _, b := range found {
						rec.Orphans = append(rec.Orphans, b.Name)
						r.note(rec, now, "orphan", fmt.Sprintf("box %s (id %s) of the event was at %s with no record: deleted", b.Name, b.ID, name))
					}
					if err != nil {
						return r.fail(ctx, rec, now, "sweep", err)
					}
				}
				rec.StackMade = true
				return r.destroy(ctx, now, rec)
			}
			rec.Phase = Missed
			r.note(rec, now, "missed", "the event ended before its boxes were brought up; nothing to remove")
			return r.save(ctx, rec)
		}
		if rec.Manual == ManualDown && len(rec.Log) > 0 && rec.Log[len(rec.Log)-1].Action == "manual" {
			r.note(rec, now, "held-down", "nothing is up; the event stays down until fleet burst up")
			return r.save(ctx, rec)
		}
		return nil
	case Gone, Missed:
		return nil
	case Up:
		if overruns(ev, rec) {
			return r.startOverrun(ctx, now, ev, rec)
		}
		return r.drain(ctx, now, ev, rec)
	case Draining:
		if rec.Overrun != nil && !rec.Overrun.Forced {
			if rec.Manual == ManualDown {
				rec.Overrun.Forced = true
				return r.drain(ctx, now, ev, rec)
			}
			return r.overrun(ctx, now, ev, rec)
		}
		return r.waitDrain(ctx, now, rec)
	case Creating:
		r.note(rec, now, "abandon-up", "the up was cut off and the event no longer wants boxes: destroying what it made")
	}
	return r.destroy(ctx, now, rec)
}

func (r *Reconciler) drain(ctx context.Context, now time.Time, ev *inventories.Event, rec *Record) error {
	deadline := rec.DrainDeadline // a manual down may have set it
	if deadline.IsZero() {
		switch {
		case ev != nil && rec.Manual != ManualDown:
			deadline = ev.GoneBy()
			if deadline.Before(now) {
				deadline = now // the reconciler ran late: the drain time is spent
			}
		case ev != nil:
			deadline = now.Add(ev.DrainTime.D())
		default:
			deadline = now.Add(inventories.DefaultDrainTime)
		}
	}
	rec.Phase, rec.DrainingSince, rec.DrainDeadline = Draining, now, deadline
	if err := r.setDraining(ctx, rec, true); err != nil {
		return r.fail(ctx, rec, now, "drain", err)
	}
	why := "the event ended"
	switch {
	case rec.Manual == ManualDown:
		why = "fleet burst down"
	case ev != nil && rec.MovedLater != nil:
		why = "the event's old window ended (the events file moved it later)"
	case ev == nil:
		why = "the event left the events file"
	}
	r.note(rec, now, "drain", fmt.Sprintf("%s: relays marked draining in the router's list; listeners have until %s",
		why, deadline.UTC().Format(time.RFC3339)))
	if err := r.save(ctx, rec); err != nil {
		return err
	}
	if err := r.Probe.Drain(ctx, rec.Hosts); err != nil {
		// The router sends no one there already; the relay's own refusal
		// is a second guard, not worth stopping the teardown for.
		r.note(rec, now, "drain-warning", "relays not told to refuse new sessions: "+err.Error())
	}
	return r.waitDrain(ctx, now, rec)
}

func (r *Reconciler) waitDrain(ctx context.Context, now time.Time, rec *Record) error {
	n, err := r.Probe.Listeners(ctx, rec.Hosts)
	if err == nil {
		rec.Samples = append(rec.Samples, Sample{At: now.UTC(), Listeners: n})
	}
	switch {
	case !now.Before(rec.DrainDeadline):
		left := "unknown"
		if err == nil {
			left = fmt.Sprint(n)
		}
		r.note(rec, now, "drained", "drain time over with "+left+" listeners left")
	case err == nil && n == 0:
		r.note(rec, now, "drained", "no listener left")
	default:
		left := "unknown (" + fmt.Sprint(err) + ")"
		if err == nil {
			left = fmt.Sprint(n)
		}
		r.log().Info("draining", "event", rec.Event, "listeners", left, "deadline", rec.DrainDeadline.UTC().Format(time.RFC3339))
		return r.save(ctx, rec)
	}
	return r.destroy(ctx, now, rec)
}

// lostBoxes lists, on each backend the event's pool may use, the boxes
// labelled with the fleet, the burst tier and the event: "N at BACKEND"
// for each backend that has some, and those backends.
func (r *Reconciler) lostBoxes(ctx context.Context, ev *inventories.Event) (lost, at []string, err error) {
	labels := map[string]string{"fleet": r.Fleet.Name, "tier": provider.TierBurst, "event": ev.Name}
	var seen []string
	for _, c := range ev.Burst.Choices() {
		if slices.Contains(seen, c.Provider) {
			continue
		}
		seen = append(seen, c.Provider)
		be, err := r.Backends(c.Provider)
		if err != nil {
			return nil, nil, err
		}
		boxes, err := be.List(ctx, labels)
		if err != nil {
			return nil, nil, fmt.Errorf("list %s boxes labelled %s: %w", c.Provider, backend.Selector(labels), err)
		}
		if len(boxes) > 0 {
			lost = append(lost, fmt.Sprintf("%s labelled %s at %s", text.Plural(len(boxes), "box", "boxes"), backend.Selector(labels), c.Provider))
			at = append(at, c.Provider)
		}
	}
	return lost, at, nil
}

func (r *Reconciler) destroy(ctx context.Context, now time.Time, rec *Record) error {
	resume := rec.Phase == Destroying || rec.Phase == Creating
	rec.Phase = Destroying
	r.note(rec, now, "destroy", fmt.Sprintf("destroying stack %s (%s)", rec.Stack, text.Plural(len(rec.Hosts), "box", "boxes")))
	if err := r.save(ctx, rec); err != nil {
		return err
	}
	if rec.StackMade {
		if resume {
			r.note(rec, now, "repair", "a previous teardown was cut off: clearing its stack lock and pending operations")
			if err := r.Stacks.Repair(ctx, rec.Stack, r.burst(rec, 0)); err != nil {
				return r.fail(ctx, rec, now, "repair", err)
			}
		}
		if err := r.Stacks.Destroy(ctx, rec.Stack, r.burst(rec, 0)); err != nil {
			return r.fail(ctx, rec, now, "destroy", err)
		}
	}
	rec.account(now, 0)
	if err := r.setHosts(ctx, rec, nil); err != nil {
		return r.fail(ctx, rec, now, "route", err)
	}
	rec.Hosts, rec.Shrink, rec.Suggested = nil, nil, nil
	// Prove it: ask each backend the event's boxes were on for boxes of
	// the event.
	labels := map[string]string{"fleet": r.Fleet.Name, "tier": provider.TierBurst, "event": rec.Event}
	backends := rec.SweepBackends()
	orphans := 0
	for _, name := range backends {
		be, err := r.Backends(name)
		if err != nil {
			return r.fail(ctx, rec, now, "sweep", err)
		}
		found, err := backend.Sweep(ctx, be, labels)
		for _, b := range found {
			rec.Orphans = append(rec.Orphans, b.Name)
			r.note(rec, now, "orphan", fmt.Sprintf("box %s (id %s) of the event was still at %s after the stack was destroyed: deleted", b.Name, b.ID, name))
		}
		orphans += len(found)
		if err != nil {
			rec.Remaining = len(found)
			return r.fail(ctx, rec, now, "sweep", err)
		}
	}
	rec.Remaining = 0
	rec.Phase, rec.DestroyedAt, rec.StackMade = Gone, now, false
	if _, err := r.addRequests(rec); err != nil {
		r.log().Warn("the event's API requests were not counted", "event", rec.Event, "err", err)
	}
	rec.Report = r.report(rec)
	verb := "lists"
	if len(backends) > 1 {
		verb = "list"
	}
	r.note(rec, now, "gone", fmt.Sprintf("stack removed; %s %s 0 boxes labelled %s (%d orphans deleted); %s",
		strings.Join(backends, " and "), verb, backend.Selector(labels), orphans, rec.Report.Summary()))
	return r.save(ctx, rec)
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }
