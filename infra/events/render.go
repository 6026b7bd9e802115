package events

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/capacity"
)

// WriteOutcomes writes the outcome of a reconcile at now as a table: each
// event's phase, boxes, and next step or error.
func WriteOutcomes(w io.Writer, now time.Time, outcomes []Outcome) error {
	fmt.Fprintf(w, "\nreconciled at %s:\n", now.UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tPHASE\tBOXES\tNEXT")
	for _, o := range outcomes {
		next := o.Next
		if o.Error != "" {
			next = "FAILED: " + o.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", o.Event, o.Phase, o.Boxes, next)
	}
	return tw.Flush()
}

// WriteJSON writes v as an indented JSON document: the outcomes, records
// or report that fleet events prints with --json.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteRecords writes the records read from dir as a table: each event's
// phase, manual mode, boxes, last listener count, orphans, next step
// (statusNext) and last action.
func WriteRecords(w io.Writer, recs []*Record, dir string) error {
	if len(recs) == 0 {
		_, err := fmt.Fprintf(w, "no events reconciled yet in %s\n", dir)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT\tPHASE\tMANUAL\tWANTED\tMADE\tCONVERGED\tROUTED\tLISTENERS\tORPHANS\tNEXT\tLAST ACTION")
	for _, rec := range recs {
		listeners := "-"
		if n := len(rec.Samples); n > 0 {
			listeners = fmt.Sprint(rec.Samples[n-1].Listeners)
		}
		last := ""
		if n := len(rec.Log); n > 0 {
			l := rec.Log[n-1]
			last = l.At.Format(time.RFC3339) + " " + l.Action + ": " + l.Detail
		}
		manual := rec.Manual
		if manual == "" {
			manual = "-"
		}
		wanted := "-"
		if rec.Plan != nil && rec.Phase != Gone && rec.Phase != Missed && rec.Phase != Scheduled {
			wanted = fmt.Sprint(rec.Wanted())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%s\t%s\n", rec.Event, rec.Phase, manual, wanted, rec.made(), rec.converged(), rec.Routed(), listeners, len(rec.Orphans), statusNext(rec), last)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeCandidates(w, recs)
}

// writeCandidates writes, for each event whose burst lists candidates
// and has a plan, what each candidate is asked for, carries and costs.
func writeCandidates(w io.Writer, recs []*Record) error {
	for _, rec := range recs {
		if !rec.multi() || rec.Plan == nil {
			continue
		}
		fmt.Fprintf(w, "\n%s by candidate (plan for %s listeners over the steady fleet's):\n", rec.Event, capacity.Count(rec.Plan.Boxes*rec.Plan.PerBox))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "CANDIDATE\tBOXES\tMADE\tCARRIES\tPRICE/BOX (%s)\tREFUSED\n", rec.Plan.Currency)
		for _, c := range rec.Candidates {
			refused := "-"
			if c.Refused != "" {
				refused = c.RefusedAt.Format(time.RFC3339) + " " + c.Refused
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%.2f\t%s\n", c.Ref, c.asked(), len(c.Made), capacity.Count(c.listens()), c.Price, refused)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// made is how many of the event's boxes exist: those the last up left in
// its stack, and at least those routed (a record from before the count).
func (rec *Record) made() int {
	if rec.Phase == Gone || rec.Phase == Missed || rec.Phase == Scheduled {
		return 0
	}
	return max(rec.Created, len(rec.Hosts))
}

// converged is how many of the event's boxes converged (at least those
// routed).
func (rec *Record) converged() int {
	if rec.Phase == Gone || rec.Phase == Missed || rec.Phase == Scheduled {
		return 0
	}
	return max(rec.Converged, len(rec.Hosts))
}

// Routed is how many of the event's boxes the router's list gives new
// listeners to: those in the list, less those draining.
func (rec *Record) Routed() int {
	if rec.Route == nil || rec.Route.Draining {
		return 0
	}
	n := 0
	for _, h := range rec.Route.Hosts {
		if !slices.Contains(rec.Route.DrainingHosts, h.Name) {
			n++
		}
	}
	return n
}

// WriteText writes the report as a table of actual against planned
// box-hours, cost, peak listeners and egress.
func (rep *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "event %s: %d x %s, up %s, gone %s, %d orphans\n\n", rep.Event, rep.Boxes, rep.Shape, rep.UpAt, rep.DestroyedAt, rep.Orphans)
	fmt.Fprintln(tw, "\tACTUAL\tPLAN\tOVER PLAN")
	fmt.Fprintf(tw, "box-hours\t%.2f\t%.2f\t%+.2f\n", rep.BoxHours, rep.PlannedBoxHours, rep.OverBoxHours)
	fmt.Fprintf(tw, "billed hours\t%.0f\t\t\n", rep.BilledHours)
	fmt.Fprintf(tw, "cost (%s)\t%.2f\t%.2f\t%+.2f\n", rep.Currency, rep.Cost, rep.PlannedCost, rep.OverCost)
	fmt.Fprintf(tw, "peak listeners\t%d\t%d\t\n", rep.PeakListeners, rep.PlannedPeak)
	fmt.Fprintf(tw, "egress\t%s\t%s\t%s\n", inventories.Bytes(rep.EgressBytes), inventories.Bytes(rep.PlannedEgressBytes), signedBytes(rep.OverEgressBytes))
	fmt.Fprintf(tw, "egress overage (%s)\t\t%.2f\t\n", rep.Currency, rep.PlannedOverage)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.Candidates) > 0 {
		fmt.Fprintf(w, "\nby candidate:\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "CANDIDATE\tBOXES\tCARRIES\tPEAK LISTENERS\tCOST (%s)\tREFUSED\n", rep.Currency)
		for _, c := range rep.Candidates {
			refused := "-"
			if c.Refused != "" {
				refused = "refused: " + c.Refused
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.2f\t%s\n", c.Ref, c.Boxes, c.Capacity, c.PeakListeners, c.Cost, refused)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintf(w, "\nlistener-hours %.2f, sampled once per reconcile; egress = listener-hours x %s per listener-hour (calibration)\n",
		rep.ListenerHours, inventories.Bytes(rep.EgressPerListenerHour)); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "cloud API requests %d (its Pulumi runs and the sweep, retries included)%s\n", rep.Requests.Total, requestCounts(rep.Requests))
	return err
}

func signedBytes(b int64) string {
	if b < 0 {
		return "-" + inventories.Bytes(-b).String()
	}
	return "+" + inventories.Bytes(b).String()
}

// requestCounts is ": by status 200 x 12, 429 x 1" for the requests'
// statuses, "" for none.
func requestCounts(r backend.Requests) string {
	if len(r.Statuses) == 0 {
		return ""
	}
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(r.Statuses)) {
		parts = append(parts, fmt.Sprintf("%s x %d", s, r.Statuses[s]))
	}
	return ": by status " + strings.Join(parts, ", ")
}
