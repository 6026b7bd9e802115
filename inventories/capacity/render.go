package capacity

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/relayfleet/relayfleet/internal/text"
	"github.com/relayfleet/relayfleet/inventories"
)

// NamedCalibration is a calibration a capacity plan uses, and how the plan
// names it: Name is a shipped calibration's name or the file given, File
// the file it was read from.
type NamedCalibration struct {
	Name, File string
	Cal        *inventories.Calibration
}

// Describe is the plan's line about a calibration: its name, file, where
// it comes from and its coefficients.
func (c *NamedCalibration) Describe() string {
	s := c.Name
	if c.File != c.Name {
		s += " (" + c.File + ")"
	}
	return s + ", " + c.Cal.Describe() + ": " + c.Cal.String()
}

// Report is a plan with the calibrations and catalogue it was made from,
// as fleet plan prints it.
type Report struct {
	Plan *Plan
	// Calibration is the one for every box; PerShape those given for the
	// boxes of one shape, by shape.
	Calibration *NamedCalibration
	PerShape    map[string]*NamedCalibration
	// Catalogue is the provider catalogue's file.
	Catalogue string
}

// reportJSON is the --json document; its fields are described in docs/planning.md.
type reportJSON struct {
	*Plan
	Calibration calibrationJSON `json:"calibration"`
	// Calibrations are the ones given for one shape, by shape.
	Calibrations map[string]calibrationJSON `json:"calibrations,omitempty"`
	Catalogue    string                     `json:"providers"`
}

type calibrationJSON struct {
	Name string `json:"name"`
	File string `json:"file"`
	*inventories.Calibration
}

// calibrationJSONOf is a calibration as the JSON document shows it.
func calibrationJSONOf(nc *NamedCalibration) calibrationJSON {
	return calibrationJSON{Name: nc.Name, File: nc.File, Calibration: nc.Cal}
}

// WriteJSON writes the report as an indented JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r.doc())
}

// doc is the report's JSON document.
func (r *Report) doc() reportJSON {
	doc := reportJSON{Plan: r.Plan, Calibration: calibrationJSONOf(r.Calibration), Catalogue: r.Catalogue}
	for ref, nc := range r.PerShape {
		if doc.Calibrations == nil {
			doc.Calibrations = map[string]calibrationJSON{}
		}
		doc.Calibrations[ref] = calibrationJSONOf(nc)
	}
	return doc
}

// WriteText writes the report as text: a header, a table of the groups,
// the totals, cost and egress, a table of egress terms, and warnings.
func (r *Report) WriteText(w io.Writer) error {
	p := r.Plan
	window := "a month of steady load"
	if p.EventHours > 0 {
		window = fmt.Sprintf("an event of %s h", num(p.EventHours))
	}
	fmt.Fprintf(w, "Plan for %s, %s\n", text.Plural(p.Listeners, "listener", "listeners"), window)
	fmt.Fprintf(w, "calibration: %s\n", r.Calibration.Describe())
	for _, ref := range slices.Sorted(maps.Keys(r.PerShape)) {
		fmt.Fprintf(w, "calibration for %s: %s\n", ref, r.PerShape[ref].Describe())
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tROLE\tSHAPE\tCALIBRATION\tBOXES\tLISTENERS\tCORES\tRAM\tPROCS\tPER BOX\tLIMITED BY\tCPU\tSOCKET\tMEMORY\tBANDWIDTH")
	for _, g := range p.Groups {
		b := g.PerBox
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n",
			g.Name, g.Role, g.Shape, g.Calibration, g.Boxes, Count(g.Listeners), b.Cores, inventories.Bytes(b.RAMBytes).IEC(), b.Processes,
			Count(b.Capacity), b.LimitedBy, Count(b.Terms.CPU), Count(b.Terms.Socket), Count(b.Terms.Memory), Count(b.Terms.Bandwidth))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	spare := 0.0
	if p.Capacity > 0 {
		spare = 100 * float64(p.Capacity-p.Listeners) / float64(p.Capacity)
	}
	fmt.Fprintf(w, "\ntotal: %s, capacity %s (%.1f%% spare)\n", text.Plural(p.Boxes, "box", "boxes"), Count(p.Capacity), spare)
	if c := p.Cost; c != nil {
		fmt.Fprintf(w, "cost (%s): %s per hour, %s per month", c.Currency, money(c.PerHour), money(c.PerMonth))
		if c.Overage > 0 {
			fmt.Fprintf(w, ", plus %s egress overage over %s h", money(c.Overage), num(windowHours(p)))
		}
		if p.EventHours > 0 {
			fmt.Fprintf(w, "; %s per event (burst boxes and overage)", money(c.PerEvent))
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "cost: unknown for a --box plan (no price); use --shape for prices and egress terms")
	}
	fmt.Fprintf(w, "egress: %s per listener-hour, %s per hour at %s\n",
		inventories.Bytes(p.EgressPerListenerHour), inventories.Bytes(p.EgressPerHourAtListeners), text.Plural(p.Listeners, "listener", "listeners"))

	var egress []Group
	for _, g := range p.Groups {
		if g.Egress != nil {
			egress = append(egress, g)
		}
	}
	if len(egress) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "EGRESS\tPROVIDER\tPER BOX-HOUR\tINCLUDED\tACCRUES\tPAST IT\tEXHAUSTED AFTER\tOVERAGE (%s h)\tOVERAGE COST\n", num(windowHours(p)))
		for _, g := range egress {
			e := g.Egress
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Name, e.Provider, inventories.Bytes(e.PerBoxHourBytes),
				included(e), e.Accrues, e.Past, exhausted(e), inventories.Bytes(e.OverageBytes), money(e.OverageCost))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(p.Warnings) > 0 {
		fmt.Fprintln(w, "\nwarnings:")
		for _, s := range p.Warnings {
			fmt.Fprintf(w, "  %s\n", s)
		}
	}
	return nil
}

func windowHours(p *Plan) float64 {
	if p.EventHours > 0 {
		return p.EventHours
	}
	return HoursPerMonth
}

func included(e *EgressPlan) string {
	if e.Accrues == inventories.AccrueUnmetered {
		return "unmetered"
	}
	return inventories.Bytes(e.IncludedBytes).String()
}

func exhausted(e *EgressPlan) string {
	switch {
	case e.ExhaustedAfterHours == nil:
		return "never"
	case *e.ExhaustedAfterHours == 0:
		return "at once (spends faster than it accrues)"
	case e.Accrues == inventories.AccrueDay:
		return fmt.Sprintf("%.1f h into each day", *e.ExhaustedAfterHours)
	}
	return fmt.Sprintf("%.1f h", *e.ExhaustedAfterHours)
}

// money is an amount with comma separators and two decimals: 1,234.50.
func money(v float64) string {
	whole := int(v)
	cents := int(math.Round((v - float64(whole)) * 100))
	if cents == 100 {
		whole, cents = whole+1, 0
	}
	return fmt.Sprintf("%s.%02d", Count(whole), cents)
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
