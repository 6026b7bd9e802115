package events

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/relayfleet/relayfleet/infra/program"
	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
)

// Outcome is one event after a reconcile, as its record in the state dir
// shows it: its phase and boxes, its next step, the error that stopped it
// (on one line), and the actions this run took (the entries of its log
// stamped with this run's time). fleet events reconcile --json prints
// them.
type Outcome struct {
	Event   string  `json:"event"`
	Phase   Phase   `json:"phase"`
	Boxes   int     `json:"boxes"`
	Next    string  `json:"next,omitempty"`
	Error   string  `json:"error,omitempty"`
	Actions []Entry `json:"actions"`
}

// Outcomes are the outcomes of results, a reconcile at now.
func (r *Reconciler) Outcomes(now time.Time, results []Result) []Outcome {
	out := []Outcome{}
	for _, res := range results {
		o := Outcome{Event: res.Event, Phase: res.Phase, Actions: []Entry{}}
		rec, _, _ := ReadRecord(r.StateDir, res.Event)
		if rec != nil {
			o.Boxes = len(rec.Hosts)
			for _, l := range rec.Log {
				if l.At.Equal(now.UTC()) {
					o.Actions = append(o.Actions, l)
				}
			}
		}
		if ev, ok := r.Events.Event(res.Event); ok {
			o.Next = NextStep(ev, rec, now)
		}
		if res.Err != nil {
			o.Error = strings.ReplaceAll(res.Err.Error(), "\n", "; ")
		}
		out = append(out, o)
	}
	return out
}

// StoreOptions say where the records are: the Pulumi backend
// (BackendURL, else $RELAYFLEET_BACKEND, else the state dir's), read with
// the Pulumi CLI.
type StoreOptions struct {
	StateDir   string // "" = program.DefaultStateDir
	BackendURL string
	Pulumi     string // the Pulumi CLI ("" = program.FindPulumi's default)
	Fleet      string // only this fleet's events ("" = every fleet's)
	// Inventory, when set, is the fleet file: its state.backend is the
	// backend (as for every command given it), its name the fleet.
	Inventory string
}

// ReadRecords reads the records from the Pulumi backend; where is the
// backend's URL.
func ReadRecords(ctx context.Context, o StoreOptions) (recs []*Record, where string, err error) {
	dir := o.StateDir
	if dir == "" {
		if dir, err = program.DefaultStateDir(); err != nil {
			return nil, "", err
		}
	}
	st := &program.Stack{StateDir: dir, BackendURL: o.BackendURL, Pulumi: o.Pulumi}
	if o.Inventory != "" {
		f, _, err := inventories.LoadFleetFile(o.Inventory)
		if err != nil {
			return nil, "", err
		}
		if o.Fleet != "" && o.Fleet != f.Name {
			return nil, "", cli.Usagef("flag --fleet: %q, but the fleet file %s is fleet %q", o.Fleet, o.Inventory, f.Name)
		}
		st.Fleet, o.Fleet = f, f.Name
	}
	ws, err := st.ProjectWorkspace(ctx, StoreProject)
	if err != nil {
		return nil, "", err
	}
	if where, err = st.Configured(); err != nil {
		return nil, "", err
	}
	if where == "" {
		where = "file://" + filepath.Join(dir, "backend")
	}
	where = program.RedactURL(where)
	recs, err = StoredRecords(ctx, ws, o.Fleet)
	return recs, where, err
}
