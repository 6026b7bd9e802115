package provision

import (
	"fmt"
	"io"
	"text/tabwriter"

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
