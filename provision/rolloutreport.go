package provision

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/internal/text"
)

// DefaultRebalanceTolerance is how far above the fleet's mean a process
// may stay after a rollout's rebalancing: 20%.
const DefaultRebalanceTolerance = 0.2

// Summary is fleet rollout's line for the box once it is done: skipped,
// failed, already on the release, resumed or moved.
func (o BoxRollout) Summary() string {
	switch {
	case o.Skipped:
		return fmt.Sprintf("%s: skipped, the rollout stopped after a failure", o.Host)
	case o.Err != nil:
		return fmt.Sprintf("%s: FAILED: %s", o.Host, text.OneLine(o.Err))
	case o.Result.From == o.Result.To:
		return fmt.Sprintf("%s: already on %s, every process runs it", o.Host, text.ShortSHA(o.Result.To))
	case o.Result.Resumed:
		return fmt.Sprintf("%s: resumed %s -> %s (current pointed at it already): %s still on another release restarted one at a time", o.Host, text.ShortSHA(o.Result.From), text.ShortSHA(o.Result.To), text.Plural(len(o.Result.Restarted), "process", "processes"))
	}
	return fmt.Sprintf("%s: %s -> %s, %s restarted one at a time", o.Host, text.ShortSHA(o.Result.From), text.ShortSHA(o.Result.To), text.Plural(len(o.Result.Restarted), "process", "processes"))
}

// WriteBalance writes each process's sessions before and after a
// rebalancing, with the fleet's mean (PlanRebalance at tolerance).
func WriteBalance(w io.Writer, before, after []ProcLoad, tolerance float64) {
	mean := func(ps []ProcLoad) float64 {
		m, _ := PlanRebalance(ps, tolerance)
		return m
	}
	got := map[string]int64{}
	for _, p := range after {
		got[p.Box+" "+p.Unit] = p.Sessions
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "box\tprocess\tsessions before\tafter")
	for _, p := range before {
		a, ok := got[p.Box+" "+p.Unit]
		after := "?"
		if ok {
			after = fmt.Sprint(a)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", p.Box, p.Unit, p.Sessions, after)
	}
	fmt.Fprintf(tw, "mean\t\t%.1f\t%.1f\n", mean(before), mean(after))
	tw.Flush()
}

// RunRollout is fleet rollout over targets: f.Run, with each progress
// line and each box's Summary written to w as they come, the seconds since
// the start first, then the balance table when it rebalanced and a line
// when the fleet stayed off its mean. When a box failed (and the fleet
// rolled back) its error is a cli.ExitError with ExitHostsFailed whose
// message, the last line, names what failed (the check and its figure
// when a check failed) and where the processes went back to. f's Log and
// Done are replaced.
func RunRollout(ctx context.Context, w io.Writer, targets []Target, f FleetRollout) error {
	out := &lockedWriter{w: w}
	start := time.Now()
	f.Log = func(format string, args ...any) {
		fmt.Fprintf(out, "%6.1fs "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	f.Done = func(b BoxRollout) { f.Log("%s", b.Summary()) }
	rep, err := f.Run(ctx, targets)
	if errors.Is(err, ErrBoxesFailed) {
		return &cli.ExitError{Code: ExitHostsFailed, Msg: rep.failure(len(targets))}
	}
	if rep != nil && rep.Rebalanced {
		WriteBalance(out, rep.Before, rep.After, f.RebalanceTolerance)
	}
	if err != nil {
		return err
	}
	if rep.Rebalanced && !rep.Balanced {
		f.Log("the fleet is still more than %.0f%% off its mean after %v", f.RebalanceTolerance*100, f.RebalanceWait)
	}
	return nil
}

// failure is the last line of a rollout that failed: what failed first
// (the check and its figure when a check failed), where every process
// went back to, and the boxes counted: "rollout failed: heartbeat gate
// failed on 10.0.0.2 relay@4443.service: 0 groups in 3s, want 20; every
// process rolled back to abcdef012345 (1 of 2 boxes failed, 1 rolled back
// after it, 0 not started)".
func (rep *FleetRolloutReport) failure(boxes int) string {
	var cause, check string
	froms := map[string]bool{}
	var left []string
	for _, o := range rep.Boxes {
		var ce *CheckError
		switch {
		case o.Err == nil:
		case errors.As(o.Err, &ce):
			check = cmp.Or(check, ce.Error())
		default:
			cause = cmp.Or(cause, o.Host+": "+text.OneLine(o.Err))
		}
		if o.Result == nil || !o.Result.RolledBack {
			continue
		}
		if o.Result.RollbackErr != nil {
			left = append(left, fmt.Sprintf("%s: %s", o.Host, text.OneLine(o.Result.RollbackErr)))
			continue
		}
		froms[o.Result.From] = true
	}
	back := "every process rolled back"
	switch {
	case len(left) > 0:
		back = "rollback failed on " + strings.Join(left, "; ")
	case len(froms) == 1:
		for from := range froms {
			back += " to " + text.ShortSHA(from)
		}
	case len(froms) > 1:
		back += " to the release it ran before"
	}
	return fmt.Sprintf("rollout failed: %s; %s (%d of %s failed, %d rolled back after it, %d not started)", cmp.Or(check, cause), back, rep.Failed, text.Plural(boxes, "box", "boxes"), len(rep.RolledBack), rep.Skipped)
}

// lockedWriter serialises the lines of boxes rolled at once.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
