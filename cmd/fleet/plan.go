package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/capacity"
)

// boxFlag is --box cores=12,ram=64GiB,processes=2,uplink=1Gbit.
type boxFlag struct {
	set bool
	box capacity.Box
}

func (b *boxFlag) String() string { return "" }

func (b *boxFlag) Set(s string) error {
	box := capacity.Box{Uplink: 1_000_000_000}
	procs := inventories.Processes(0)
	seen := map[string]bool{}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || v == "" {
			return fmt.Errorf("want KEY=VALUE pairs such as cores=12,ram=64GiB,processes=2,uplink=1Gbit, got %q", kv)
		}
		if seen[k] {
			return fmt.Errorf("%s given twice", k)
		}
		seen[k] = true
		var err error
		switch k {
		case "cores":
			box.Cores, err = strconv.Atoi(v)
			if err != nil || box.Cores <= 0 {
				return fmt.Errorf("cores: want a positive integer, got %q", v)
			}
		case "ram":
			box.RAM, err = inventories.ParseBytes(v)
			if err != nil || box.RAM <= 0 {
				return fmt.Errorf("ram: want a size such as 64GiB, got %q", v)
			}
		case "processes":
			procs, err = inventories.ParseProcesses(v)
			if err != nil {
				return err
			}
		case "uplink":
			box.Uplink, err = inventories.ParseBitRate(v)
			if err != nil || box.Uplink <= 0 {
				return fmt.Errorf("uplink: want a rate such as 1Gbit, got %q", v)
			}
		default:
			return fmt.Errorf("unknown key %q (want cores, ram, processes, uplink)", k)
		}
	}
	if !seen["cores"] || !seen["ram"] {
		return fmt.Errorf("cores and ram are required, as in cores=12,ram=64GiB")
	}
	box.Processes = procs.For(box.Cores)
	b.box, b.set = box, true
	return nil
}

func runPlan(_ context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("plan", stdout)
	listeners := fs.Int("listeners", -1, "target concurrent listeners (required)")
	shape := fs.String("shape", "", "plan boxes of one catalogue shape, PROVIDER/SHAPE[@REGION]")
	var box boxFlag
	fs.Var(&box, "box", "plan boxes of a given size: cores=N,ram=SIZE[,processes=N|auto][,uplink=RATE]")
	eventHours := fs.Float64("event-hours", 0, "length of the event in hours; 0 plans a month of steady load")
	inventory := fs.String("inventory", "", "fleet file: its steady boxes carry load first, its burst pools the rest")
	providers := fs.String("providers", "", "provider catalogue (default: providers.yaml beside the inventory, else the shipped one)")
	calibration := fs.String("calibration", "", "capacity coefficients (default: calibration.yaml beside the inventory, else the shipped one)")
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	if err := fs.parse(args); err != nil {
		return err
	}
	switch {
	case *listeners == -1:
		return usagef("flag --listeners: required")
	case *listeners < 0:
		return usagef("flag --listeners: must not be negative, got %d", *listeners)
	case *eventHours < 0 || math.IsNaN(*eventHours) || math.IsInf(*eventHours, 0):
		return usagef("flag --event-hours: want a positive number of hours, got %v", *eventHours)
	case *shape != "" && box.set:
		return usagef("flags --shape and --box: give one, not both")
	}
	if *providers == "" {
		*providers = inventories.Beside(*inventory, inventories.ProvidersFile)
	}
	if *calibration == "" {
		*calibration = inventories.Beside(*inventory, inventories.CalibrationFile)
	}
	cat, err := inventories.LoadCatalogue(*providers)
	if err != nil {
		return err
	}
	cal, err := inventories.LoadCalibration(*calibration)
	if err != nil {
		return err
	}
	var cands []capacity.Candidate
	var fleet *inventories.Fleet
	if *inventory != "" {
		if fleet, err = inventories.LoadFleet(*inventory, cat); err != nil {
			return err
		}
		for _, g := range fleet.Steady {
			c, err := capacity.BoxCandidate(cat, capacity.Steady, g.Name, &g.Box)
			if err != nil {
				return err
			}
			c.Count = g.BoxCount()
			cands = append(cands, c)
		}
	}
	switch {
	case box.set:
		cands = append(cands, capacity.Candidate{Role: capacity.Burst, Name: "custom", Box: box.box})
	case *shape != "":
		p, s, err := cat.Lookup(*shape)
		if err != nil {
			return usagef("flag --shape: %v", err)
		}
		if p.Unusable != "" {
			return usagef("flag --shape: %s cannot carry relay audio: %s", p.Name, p.Unusable)
		}
		cands = append(cands, capacity.ShapeCandidate(p, s, s.Ref(p), 0, capacity.Burst))
	case fleet != nil:
		for _, pool := range fleet.Burst {
			c, err := capacity.BoxCandidate(cat, capacity.Burst, pool.Name, &pool.Box)
			if err != nil {
				return err
			}
			c.Max = pool.Max
			cands = append(cands, c)
		}
	default:
		for i := range cat.Providers {
			p := &cat.Providers[i]
			if p.Unusable != "" || p.Kind == inventories.KindLab || p.Kind == inventories.KindCDN {
				continue
			}
			for j := range p.Shapes {
				s := &p.Shapes[j]
				cands = append(cands, capacity.ShapeCandidate(p, s, s.Ref(p), 0, capacity.Burst))
			}
		}
	}
	plan, err := capacity.Make(capacity.Request{
		Listeners:   *listeners,
		EventHours:  *eventHours,
		Catalogue:   cat,
		Calibration: cal,
	}, cands)
	if err != nil {
		return err
	}
	if *asJSON {
		return writePlanJSON(stdout, plan, cal, *calibration, *providers)
	}
	return writePlanTable(stdout, plan, cal, *calibration)
}

// planJSON is the --json document; its fields are described in the README.
type planJSON struct {
	*capacity.Plan
	Calibration calibrationJSON `json:"calibration"`
	Catalogue   string          `json:"providers"`
}

type calibrationJSON struct {
	File string `json:"file"`
	*inventories.Calibration
}

func writePlanJSON(w io.Writer, p *capacity.Plan, cal *inventories.Calibration, calFile, catFile string) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(planJSON{Plan: p, Calibration: calibrationJSON{File: calFile, Calibration: cal}, Catalogue: catFile})
}

func writePlanTable(w io.Writer, p *capacity.Plan, cal *inventories.Calibration, calFile string) error {
	window := "a month of steady load"
	if p.EventHours > 0 {
		window = fmt.Sprintf("an event of %s h", num(p.EventHours))
	}
	fmt.Fprintf(w, "Plan for %s listeners, %s\n", capacity.Count(p.Listeners), window)
	fmt.Fprintf(w, "calibration: %s (%s): %s\n\n", cal.Source, calFile, cal)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tROLE\tSHAPE\tBOXES\tLISTENERS\tCORES\tRAM\tPROCS\tPER BOX\tLIMITED BY\tCPU\tSOCKET\tMEMORY\tBANDWIDTH")
	for _, g := range p.Groups {
		b := g.PerBox
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n",
			g.Name, g.Role, g.Shape, g.Boxes, capacity.Count(g.Listeners), b.Cores, inventories.Bytes(b.RAMBytes).IEC(), b.Processes,
			capacity.Count(b.Capacity), b.LimitedBy, capacity.Count(b.Terms.CPU), capacity.Count(b.Terms.Socket), capacity.Count(b.Terms.Memory), capacity.Count(b.Terms.Bandwidth))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	spare := 0.0
	if p.Capacity > 0 {
		spare = 100 * float64(p.Capacity-p.Listeners) / float64(p.Capacity)
	}
	fmt.Fprintf(w, "\ntotal: %d boxes, capacity %s (%.1f%% spare)\n", p.Boxes, capacity.Count(p.Capacity), spare)
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
	fmt.Fprintf(w, "egress: %s per listener-hour, %s per hour at %s listeners\n",
		inventories.Bytes(p.EgressPerListenerHour), inventories.Bytes(p.EgressPerHourAtListeners), capacity.Count(p.Listeners))

	var egress []capacity.Group
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

func windowHours(p *capacity.Plan) float64 {
	if p.EventHours > 0 {
		return p.EventHours
	}
	return capacity.HoursPerMonth
}

func included(e *capacity.EgressPlan) string {
	if e.Accrues == inventories.AccrueUnmetered {
		return "unmetered"
	}
	return inventories.Bytes(e.IncludedBytes).String()
}

func exhausted(e *capacity.EgressPlan) string {
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

func money(v float64) string {
	whole := int(v)
	cents := int(math.Round((v - float64(whole)) * 100))
	if cents == 100 {
		whole, cents = whole+1, 0
	}
	return fmt.Sprintf("%s.%02d", capacity.Count(whole), cents)
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
