package provision

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/sysctl"
)

// HostStatus is one target's status (Status), or why it could not be
// read.
type HostStatus struct {
	Host string
	// Origin is the target's Origin: its relay URL when it is an origin.
	Origin string
	// Region is the target's Region.
	Region string
	BoxStatus
	Err error
}

// FleetStatus reads the status of every target at once (Status against
// profile prof and the default releases), in the targets' order. A host
// that cannot be read does not stop the others: its Err says why.
func FleetStatus(ctx context.Context, targets []Target, prof sysctl.Profile) []HostStatus {
	out := make([]HostStatus, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			st, err := Status(ctx, t.Run, prof, Releases{})
			out[i] = HostStatus{Host: t.Host.String(), Origin: t.Origin, Region: t.Region, BoxStatus: st, Err: err}
		})
	}
	wg.Wait()
	return out
}

// CurrentReleases reads every target's current release at once
// (Releases.Current), in the targets' order; errs[i], when not nil, says
// why target i's could not be read.
func CurrentReleases(ctx context.Context, targets []Target, rel Releases) (current []string, errs []error) {
	current, errs = make([]string, len(targets)), make([]error, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() { current[i], _, errs[i] = rel.Current(ctx, t.Run) })
	}
	wg.Wait()
	return current, errs
}

// Dropping is how many of the box's relay processes dropped datagrams at
// a full receive buffer since they started.
func (b BoxStatus) Dropping() int {
	n := 0
	for _, p := range b.Processes {
		if p.Drops > 0 {
			n++
		}
	}
	return n
}

// Behind is how many of the box's processes run another release than
// its current one (a rollout was cut off), and how many are draining:
// fleet converge, or the rollout run again, finishes the job.
func (b BoxStatus) Behind() (stale, draining int) {
	for _, p := range b.Processes {
		if p.Stale {
			stale++
		}
		if p.Draining {
			draining++
		}
	}
	return stale, draining
}

// Tally counts the outcomes of ConvergeFleet: hosts that failed, hosts
// that changed (or, checked, would change), and hosts that had nothing
// to change.
type Tally struct {
	Changed, Unchanged, Failed int
}

// TallyResults counts rs.
func TallyResults(rs []HostResult) Tally {
	var t Tally
	for _, r := range rs {
		switch {
		case r.Err != nil:
			t.Failed++
		case r.Report != nil && len(r.Report.Changes) > 0:
			t.Changed++
		default:
			t.Unchanged++
		}
	}
	return t
}

// ProbeHeartbeats listens to the fleet heartbeat through every active
// process of the statuses for window (ServiceProbe.Hear), at most 64 at
// once, and records what each heard. statuses are targets' (FleetStatus).
func ProbeHeartbeats(ctx context.Context, targets []Target, statuses []HostStatus, window time.Duration) {
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for i, t := range targets {
		if statuses[i].Err != nil {
			continue
		}
		for j := range statuses[i].Processes {
			p := &statuses[i].Processes[j]
			if p.Active != "active" {
				continue
			}
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				res, err := ServiceProbe{}.Hear(ctx, t, p.Unit, window)
				hb := &Heartbeat{Groups: res.Groups, Due: due(window)}
				if err != nil {
					hb.Error = text.OneLine(err)
				}
				p.Heartbeat = hb
			})
		}
	}
	wg.Wait()
}

// RunStatus is fleet status over targets: it reads each one's status
// (FleetStatus against the relay sysctl profile), with heartbeat > 0
// listens to the fleet heartbeat through every process for that long
// (ProbeHeartbeats), and writes the boxes on w, as indented JSON
// ({"boxes": [...]}) when asJSON, else as WriteStatusText. When a box
// could not be read its error is a cli.ExitError with ExitHostsFailed.
func RunStatus(ctx context.Context, w io.Writer, targets []Target, asJSON bool, heartbeat time.Duration) error {
	statuses := FleetStatus(ctx, targets, sysctl.Relay())
	if heartbeat > 0 {
		ProbeHeartbeats(ctx, targets, statuses, heartbeat)
	}
	boxes, failed := StatusReports(statuses)
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"boxes": boxes}); err != nil {
			return err
		}
	} else if err := WriteStatusText(w, boxes); err != nil {
		return err
	}
	if failed > 0 {
		return &cli.ExitError{Code: ExitHostsFailed, Msg: fmt.Sprintf("%d of %s could not be read", failed, text.Plural(len(boxes), "box", "boxes"))}
	}
	return nil
}
