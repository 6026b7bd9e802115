package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/atomicfile"
	"github.com/relayfleet/relayfleet/inventories"
)

// Phase is where an event's burst capacity stands.
type Phase string

// Phases, in the order an event goes through them. Creating and
// Destroying are written before the Pulumi run they name, so a record
// found in one of them tells the next reconcile that a run was cut off.
const (
	Scheduled  Phase = "scheduled"  // nothing exists yet
	Creating   Phase = "creating"   // a Pulumi up is (or was) running
	Up         Phase = "up"         // boxes converged and routed
	Draining   Phase = "draining"   // no new listeners; waiting for the rest to leave
	Destroying Phase = "destroying" // a Pulumi destroy is (or was) running
	Gone       Phase = "gone"       // stack destroyed and removed, sweep found nothing left
	Missed     Phase = "missed"     // the event ended before its boxes were ever brought up
)

// Manual overrides, set by fleet burst up and down.
const (
	ManualUp   = "up"   // keep the boxes up until the event ends, whatever the lead time
	ManualDown = "down" // bring them down now and keep them down
)

// Record is what the reconciler knows about one event, kept in the
// Store (the Pulumi backend) and cached as STATE/cache/events/NAME.json.
type Record struct {
	Event   string `json:"event"`
	Stack   string `json:"stack"`
	Backend string `json:"backend"`
	Phase   Phase  `json:"phase"`
	Manual  string `json:"manual,omitempty"`
	// Pool is the event's burst shape as last read from the events file,
	// so that an event removed from the file can still be torn down; while
	// its boxes exist they keep their provider, shape and location.
	Pool inventories.Pool `json:"pool"`
	// Start, End and DrainTime are the event's, as last read from the
	// events file: a reconcile whose events file does not parse tears
	// down from them the events that ended (teardownFromRecords), and the
	// events exporter has them for an event no longer in the file.
	Start     time.Time            `json:"start,omitzero"`
	End       time.Time            `json:"end,omitzero"`
	DrainTime inventories.Duration `json:"drain_time,omitempty"`
	// MovedLater, while set, is the event's new window: the events file
	// moved its start later while it ran, so Start and End keep the old
	// window, its boxes keep their listeners until the old end, drain as
	// at any end, and come up again at the new window's UpAt. The record
	// takes the new window once the old window's boxes are gone.
	MovedLater *Window `json:"moved_later,omitempty"`
	// MaxOverrun is the event's max_overrun as last read (nil: the
	// default), so that a teardown from the records sheds as the file said.
	MaxOverrun *inventories.Duration `json:"max_overrun,omitempty"`
	// PoolHeld is where the events file moved the event while its boxes
	// existed (noted once; "" when the file and the boxes agree).
	PoolHeld string `json:"pool_held,omitempty"`
	// StackMade is true once a Pulumi up of the event's stack started and
	// until its destroy finished.
	StackMade bool `json:"stack_made"`
	// Plan is the sizing the boxes were brought up with. While the event
	// runs it never drops by itself: a smaller sizing from the files
	// (a new calibration or peak) is noted in Suggested and waits for
	// fleet burst resize.
	Plan *Sizing `json:"plan,omitempty"`
	// Suggested is the box count the files size the event at when it is
	// less than what the event keeps; nil when they agree.
	Suggested *int `json:"suggested,omitempty"`
	// Shrink is a resize down in progress.
	Shrink *Shrink `json:"shrink,omitempty"`
	// Overrun is the shed into the steady fleet's room after the end.
	Overrun *Overrun            `json:"overrun,omitempty"`
	Release string              `json:"release,omitempty"`
	Hosts   []program.HostEntry `json:"hosts,omitempty"`
	// Surge is the fleet's surge's state, on the surge's record only.
	Surge *SurgeState `json:"surge,omitempty"`
	// Candidates, when the event's burst lists more than one, are how its
	// boxes are planned over them and what each made (nil otherwise).
	Candidates []CandidateState `json:"candidates,omitempty"`
	// Created and Converged are the boxes the event's stack held made and
	// converged after the last up (an up that failed part way routes the
	// converged ones; Hosts are those routed).
	Created   int `json:"created"`
	Converged int `json:"converged"`
	// Route is what the event put in the router's relay list: its hosts
	// there and which of them are draining. The state dir's relays file is
	// written from it (and the steady fleet's stack), so a reconcile on
	// another machine writes the same list.
	Route *program.StackHosts `json:"route,omitempty"`
	// Times, on the reconciler's clock (a simulated one in tests).
	CreatingSince time.Time `json:"creating_since,omitzero"`
	UpSince       time.Time `json:"up_since,omitzero"`
	DrainingSince time.Time `json:"draining_since,omitzero"`
	DrainDeadline time.Time `json:"drain_deadline,omitzero"`
	DestroyedAt   time.Time `json:"destroyed_at,omitzero"`
	// BoxSeconds adds up each box's life, from the up that made it to the
	// destroy that ended it.
	BoxSeconds float64 `json:"box_seconds"`
	// Boxes have existed since BoxesSince (not yet in BoxSeconds).
	Boxes      int       `json:"boxes"`
	BoxesSince time.Time `json:"boxes_since,omitzero"`
	// Samples are the event's listener counts, one per reconcile while
	// its boxes were up.
	Samples []Sample `json:"samples,omitempty"`
	// Orphans are boxes the sweep found after the stack was destroyed.
	Orphans []string `json:"orphans,omitempty"`
	// Remaining is the count of the event's boxes the last sweep left.
	Remaining int `json:"remaining"`
	// Requests counts the cloud API requests the event's runs sent: its
	// Pulumi runs' provider plugins and the reconciler's own sweep, each
	// retry included (backend.RequestLogEnv), since the up that began
	// this life of the event.
	Requests backend.Requests `json:"requests,omitzero"`
	Report   *Report          `json:"report,omitempty"`
	Log      []Entry          `json:"log"`
}

// Window is an event's times as the events file says them: its start,
// its end, and when its boxes come up (its start less its lead time).
type Window struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	UpAt  time.Time `json:"up_at"`
}

func (w Window) equal(o Window) bool {
	return w.Start.Equal(o.Start) && w.End.Equal(o.End) && w.UpAt.Equal(o.UpAt)
}

// Shrink is a resize down of a running event: the boxes that go (those
// numbered above To) are marked draining in the router's list and on
// their relays, their listeners told to move, and each is removed from
// the stack once it holds none, the router's list written first.
type Shrink struct {
	To int `json:"to"`
	// Plan is the sizing the event has once the resize is done.
	Plan  *Sizing   `json:"plan,omitempty"`
	Going []string  `json:"going"`
	Since time.Time `json:"since"`
	// Drained is set once the going boxes were marked draining and their
	// listeners told to move; Deadline is when the drain time is over
	// (boxes that still hold listeners then stay, and are reported).
	Drained  bool      `json:"drained"`
	Deadline time.Time `json:"deadline,omitzero"`
	Warned   bool      `json:"warned,omitempty"`
}

// Sample is one listener count.
type Sample struct {
	At        time.Time `json:"at"`
	Listeners int64     `json:"listeners"`
	// Candidates are the listeners on each candidate's boxes, when the
	// event's burst lists more than one.
	Candidates []int64 `json:"candidates,omitempty"`
}

// Entry is one action in an event's log.
type Entry struct {
	At     time.Time `json:"at"`
	Action string    `json:"action"`
	Detail string    `json:"detail,omitempty"`
}

// recordsDir holds the state dir's cache of the records: the Store is
// their truth, and every reconcile rewrites the cache from it.
// legacyDir is where records lived before they moved to the Pulumi
// backend; a reconcile moves them into the Store (migrate).
var recordsDir = filepath.Join("cache", "events")

const legacyDir = "events"

func recordPath(stateDir, event string) string {
	return filepath.Join(stateDir, recordsDir, event+".json")
}

// ReadRecord returns an event's record as this state dir last cached it
// (or, before a reconcile moved it into the backend, as an older
// relayfleet kept it); ok is false when there is none.
func ReadRecord(stateDir, event string) (rec *Record, ok bool, err error) {
	rec, ok, err = readRecordFile(recordPath(stateDir, event))
	if ok || err != nil {
		return rec, ok, err
	}
	return readRecordFile(filepath.Join(stateDir, legacyDir, event+".json"))
}

func readRecordFile(path string) (rec *Record, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("event record: %w", err)
	}
	rec = &Record{}
	if err := json.Unmarshal(data, rec); err != nil {
		return nil, false, fmt.Errorf("event record %s: %w", path, err)
	}
	return rec, true, nil
}

// Records returns every event record the state dir caches, by name,
// with those an older relayfleet kept there that no reconcile has moved
// into the backend yet.
func Records(stateDir string) ([]*Record, error) {
	recs, err := readRecordDir(filepath.Join(stateDir, recordsDir))
	if err != nil {
		return nil, err
	}
	legacy, err := readRecordDir(filepath.Join(stateDir, legacyDir))
	if err != nil || len(legacy) == 0 {
		return recs, err
	}
	have := map[string]bool{}
	for _, r := range recs {
		have[r.Event] = true
	}
	for _, r := range legacy {
		if !have[r.Event] {
			recs = append(recs, r)
		}
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Event < recs[j].Event })
	return recs, nil
}

func readRecordDir(dir string) ([]*Record, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("event records: %w", err)
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && !e.IsDir() {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var recs []*Record
	for _, n := range names {
		r, ok, err := readRecordFile(filepath.Join(dir, n+".json"))
		if err != nil {
			return nil, err
		}
		if ok {
			recs = append(recs, r)
		}
	}
	return recs, nil
}

// requestsDir holds each event's request log while a reconcile runs it
// (backend.RequestLogEnv): what a run that was cut off left there is
// counted by the next.
var requestsDir = filepath.Join("cache", "requests")

// requestLog is the event's request log.
func (r *Reconciler) requestLog(event string) string {
	return filepath.Join(r.StateDir, requestsDir, event+".log")
}

// withRequestLog is ctx naming the event's request log, which the
// backends' transports, in this process and in the Pulumi runs' provider
// plugins, append every API request to.
func (r *Reconciler) withRequestLog(ctx context.Context, event string) (context.Context, error) {
	if err := os.MkdirAll(filepath.Join(r.StateDir, requestsDir), 0o700); err != nil {
		return ctx, fmt.Errorf("request log: %w", err)
	}
	return backend.WithRequestLog(ctx, r.requestLog(event)), nil
}

// addRequests adds the requests in the event's request log to its record
// and empties the log; it reports whether there were any.
func (r *Reconciler) addRequests(rec *Record) (bool, error) {
	path := r.requestLog(rec.Event)
	got, err := backend.ReadRequestLog(path)
	if err != nil || got.Total == 0 {
		return false, err
	}
	rec.Requests.Add(got)
	if err := os.Remove(path); err != nil {
		return true, fmt.Errorf("request log: %w", err)
	}
	return true, nil
}

// uncache removes the record from the state dir's cache.
func uncache(stateDir, event string) error {
	err := os.Remove(filepath.Join(stateDir, recordsDir, event+".json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("event record cache: %w", err)
	}
	return nil
}

// cache writes the record into the state dir's cache, through a
// temporary file and a rename.
func (r *Record) cache(stateDir string) error {
	dir := filepath.Join(stateDir, recordsDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("event record cache: %w", err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(recordPath(stateDir, r.Event), append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("event record cache: %w", err)
	}
	return nil
}
