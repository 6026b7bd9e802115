package provision

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/relayfleet/relayfleet/internal/text"
)

// RolloutPlan is what a fleet rollout would do (FleetRollout.Plan), read
// from the boxes without changing anything on them.
type RolloutPlan struct {
	// To is the release the rollout moves to.
	To string
	// Bake is set when the fleet's canary is baked (FleetRollout.Bake).
	Bake bool
	// Boxes are the boxes in the order the rollout takes them.
	Boxes []BoxPlan
}

// BoxPlan is one box's part in a RolloutPlan.
type BoxPlan struct {
	Host string
	// Current is the release current points at ("" when none).
	Current string
	// Has is set when the box keeps To already: no bytes go to it.
	Has bool
	// DropIns are the instances with a release drop-in a cut-off rollout
	// left; the rollout removes them first.
	DropIns []string
	// Procs are the box's processes: those the rollout restarts, in its
	// order, then those it leaves (already on To).
	Procs []ProcPlan
	// Err is why the box could not be read; the rest is then partial.
	Err error
}

// ProcPlan is one relay process in a BoxPlan.
type ProcPlan struct {
	Instance string
	// From is what the process runs now (Releases.Running: a release, an
	// executable's path, or "" when none runs); To is what it runs after,
	// "" when the rollout leaves it (it runs To already).
	From, To string
	// Canary is set on the box's first restart when current points at
	// another release: it runs To through a runtime drop-in, and current
	// moves only once it passed.
	Canary bool
	// FleetCanary is set on the rollout's first restart: baked (when the
	// plan's Bake is set) before anything else moves.
	FleetCanary bool
}

// Plan reads what a rollout over targets would do: each box's current
// release, whether it keeps the new one, its processes and what each
// runs, which restarts first. It changes nothing on the boxes. A box that
// cannot be read has its Err set; Plan's own error is the rollout's
// settings'.
func (f *FleetRollout) Plan(ctx context.Context, targets []Target) (*RolloutPlan, error) {
	to, _, err := f.release()
	if err != nil {
		return nil, err
	}
	plan := &RolloutPlan{To: to, Bake: f.Bake != nil}
	fleetCanary := true
	for _, t := range targets {
		b := f.planBox(ctx, t, to)
		if b.Err == nil && len(b.Procs) > 0 && b.Procs[0].To != "" && fleetCanary {
			b.Procs[0].FleetCanary, fleetCanary = true, false
		}
		plan.Boxes = append(plan.Boxes, b)
	}
	return plan, nil
}

// planBox reads one box for Plan.
func (f *FleetRollout) planBox(ctx context.Context, t Target, to string) BoxPlan {
	b := BoxPlan{Host: t.Host.String()}
	rel := f.Releases
	var err error
	if b.Current, _, err = rel.Current(ctx, t.Run); err != nil {
		b.Err = err
		return b
	}
	if b.Has, err = rel.Has(ctx, t.Run, to); err != nil {
		b.Err = err
		return b
	}
	if b.DropIns, err = ReleaseDropIns(ctx, t.Run); err != nil {
		b.Err = err
		return b
	}
	insts, err := ActiveInstances(ctx, t.Run)
	if err != nil {
		b.Err = err
		return b
	}
	runs, err := rel.Running(ctx, t.Run, insts)
	if err != nil {
		b.Err = err
		return b
	}
	todo, already, canary := rolloutOrder(insts, runs, b.Current, to)
	for i, inst := range todo {
		b.Procs = append(b.Procs, ProcPlan{Instance: inst, From: runs[inst], To: to, Canary: i == 0 && canary})
	}
	for _, inst := range already {
		b.Procs = append(b.Procs, ProcPlan{Instance: inst, From: runs[inst]})
	}
	return b
}

// WritePlan writes a rollout plan for `fleet rollout --dry-run`: per box
// its current release and whether the new one must be uploaded, then per
// process from -> to, which is the canary, what is already on the release.
func WritePlan(w io.Writer, plan *RolloutPlan) {
	fmt.Fprintf(w, "rollout to %s, one process at a time; nothing was changed\n", text.ShortSHA(plan.To))
	for _, b := range plan.Boxes {
		upload := "to upload"
		if b.Has {
			upload = "kept on the box, no upload"
		}
		line := fmt.Sprintf("%s: current %s; %s %s", b.Host, text.ShortSHA(b.Current), text.ShortSHA(plan.To), upload)
		if len(b.DropIns) > 0 {
			line += "; release drop-ins a cut-off rollout left (removed first): " + strings.Join(b.DropIns, ", ")
		}
		fmt.Fprintln(w, line)
		if b.Err != nil {
			fmt.Fprintf(w, "  cannot read the box: %s\n", text.OneLine(b.Err))
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, p := range b.Procs {
			if p.To == "" {
				fmt.Fprintf(tw, "  %s\t%s\talready on it\n", p.Instance, runsLabel(p.From))
				continue
			}
			var notes []string
			if p.Canary {
				notes = append(notes, "canary: runs it through a drop-in, current moves once it passed")
			}
			if p.FleetCanary {
				note := "the fleet's first"
				if plan.Bake {
					note += ", baked before anything else moves"
				}
				notes = append(notes, note)
			}
			fmt.Fprintf(tw, "  %s\t%s\t-> %s", p.Instance, runsLabel(p.From), text.ShortSHA(p.To))
			if len(notes) > 0 {
				fmt.Fprintf(tw, "\t%s", strings.Join(notes, "; "))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
	}
}

// runsLabel is what a process runs (Releases.Running) for a table.
func runsLabel(runs string) string {
	switch {
	case runs == "":
		return "(not running)"
	case shaRE.MatchString(runs):
		return text.ShortSHA(runs)
	}
	return runs
}
