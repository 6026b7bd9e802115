package main

import (
	"github.com/relayfleet/relayfleet/internal/text"
)
import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/capacity"
	"github.com/relayfleet/relayfleet/provision/loadtest"
)

// boxFlag is --box cores=12,ram=64GiB,processes=2,uplink=1Gbit.
type boxFlag struct {
	set bool
	box capacity.Box
}

func (b *boxFlag) String() string { return "" }

func (b *boxFlag) Set(s string) error {
	box, err := capacity.ParseBox(s)
	if err != nil {
		return err
	}
	b.box, b.set = box, true
	return nil
}

// planOpts are fleet plan's flags.
type planOpts struct {
	listeners                   int
	shape, inventory, providers string
	box                         boxFlag
	eventHours                  float64
	cals                        calibrationFlag
	asJSON                      bool
}

func planCommand(ios *cli.IOStreams) *cobra.Command {
	var o planOpts
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "plan capacity for a listener target: boxes, cost, egress",
		Args:  cli.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runPlan(&o, ios.Out)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.listeners, "listeners", -1, "target concurrent listeners (required)")
	cli.Ranged(fs, "listeners", cli.Ints(0, inventories.MaxListeners))
	fs.StringVar(&o.shape, "shape", "", "plan boxes of one catalogue shape, PROVIDER/SHAPE[@REGION]")
	fs.Var(cli.GoValue(&o.box), "box", "plan boxes of a given size: cores=N,ram=SIZE[,processes=N|auto][,uplink=RATE]")
	fs.Float64Var(&o.eventHours, "event-hours", 0, "length of the event in hours; 0 plans a month of steady load")
	cli.Ranged(fs, "event-hours", cli.Floats(0, inventories.MaxEventHours))
	fs.StringVar(&o.inventory, "inventory", "", "fleet file: its steady boxes carry load first, its burst pools the rest")
	fs.StringVar(&o.providers, "providers", "", "provider catalogue (default: providers.yaml beside the inventory, else the shipped one)")
	fs.Var(cli.GoValue(&o.cals), "calibration", "capacity coefficients: "+strings.Join(inventories.CalibrationNames(), " or ")+
		" (shipped), a calibration.yaml, or fleet loadtest's loadtest.json; SHAPE=... for the boxes of one shape (PROVIDER/SHAPE[@REGION], or custom for --box); repeatable (default: calibration.yaml beside the inventory, else "+inventories.DefaultCalibration+")")
	fs.BoolVar(&o.asJSON, "json", false, "print the plan as JSON")
	return cmd
}

func runPlan(o *planOpts, stdout io.Writer) error {
	// The ranges of --listeners and --event-hours are checked already.
	switch {
	case o.listeners == -1:
		return usagef("flag --listeners: required")
	case o.shape != "" && o.box.set:
		return usagef("flags --shape and --box: give one, not both")
	}
	if o.providers == "" {
		o.providers = inventories.Beside(o.inventory, inventories.ProvidersFile)
	}
	cat, err := inventories.LoadCatalogue(o.providers)
	if err != nil {
		return err
	}
	def, err := o.cals.resolve(o.inventory)
	if err != nil {
		return err
	}
	ch := capacity.Choice{Shape: o.shape}
	if o.box.set {
		ch.Box = &o.box.box
	}
	if o.inventory != "" {
		if ch.Fleet, err = inventories.LoadFleet(o.inventory, cat); err != nil {
			return err
		}
	}
	cands, err := capacity.Candidates(cat, ch)
	var shapeErr *capacity.ShapeError
	if errors.As(err, &shapeErr) {
		return usagef("flag --shape: %v", err)
	} else if err != nil {
		return err
	}
	if err := loadtest.Calibrate(cands, o.cals.shapes, o.cals.perShape); err != nil {
		return usagef("flag --calibration: %v", err)
	}
	plan, err := capacity.Make(capacity.Request{
		Listeners:       o.listeners,
		EventHours:      o.eventHours,
		Catalogue:       cat,
		Calibration:     def.Cal,
		CalibrationName: def.Name,
	}, cands)
	if err != nil {
		return err
	}
	if o.asJSON {
		return writePlanJSON(stdout, plan, def, o.cals.perShape, o.providers)
	}
	return writePlanTable(stdout, plan, def, o.cals.perShape)
}

// planJSON is the --json document; its fields are described in docs/planning.md.
type planJSON struct {
	*capacity.Plan
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

func writePlanJSON(w io.Writer, p *capacity.Plan, def *namedCalibration, perShape map[string]*namedCalibration, catFile string) error {
	doc := planJSON{Plan: p, Calibration: calibrationJSONOf(def), Catalogue: catFile}
	for ref, nc := range perShape {
		if doc.Calibrations == nil {
			doc.Calibrations = map[string]calibrationJSON{}
		}
		doc.Calibrations[ref] = calibrationJSONOf(nc)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

func writePlanTable(w io.Writer, p *capacity.Plan, def *namedCalibration, perShape map[string]*namedCalibration) error {
	window := "a month of steady load"
	if p.EventHours > 0 {
		window = fmt.Sprintf("an event of %s h", num(p.EventHours))
	}
	fmt.Fprintf(w, "Plan for %s, %s\n", text.Plural(p.Listeners, "listener", "listeners"), window)
	fmt.Fprintf(w, "calibration: %s\n", def.Describe())
	for _, ref := range slices.Sorted(maps.Keys(perShape)) {
		fmt.Fprintf(w, "calibration for %s: %s\n", ref, perShape[ref].Describe())
	}
	fmt.Fprintln(w)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tROLE\tSHAPE\tCALIBRATION\tBOXES\tLISTENERS\tCORES\tRAM\tPROCS\tPER BOX\tLIMITED BY\tCPU\tSOCKET\tMEMORY\tBANDWIDTH")
	for _, g := range p.Groups {
		b := g.PerBox
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n",
			g.Name, g.Role, g.Shape, g.Calibration, g.Boxes, capacity.Count(g.Listeners), b.Cores, inventories.Bytes(b.RAMBytes).IEC(), b.Processes,
			capacity.Count(b.Capacity), b.LimitedBy, capacity.Count(b.Terms.CPU), capacity.Count(b.Terms.Socket), capacity.Count(b.Terms.Memory), capacity.Count(b.Terms.Bandwidth))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	spare := 0.0
	if p.Capacity > 0 {
		spare = 100 * float64(p.Capacity-p.Listeners) / float64(p.Capacity)
	}
	fmt.Fprintf(w, "\ntotal: %s, capacity %s (%.1f%% spare)\n", text.Plural(p.Boxes, "box", "boxes"), capacity.Count(p.Capacity), spare)
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

// namedCalibration is a calibration and how a plan names it.
type namedCalibration = loadtest.PlanCalibration

// calibrationJSONOf is a calibration as --json shows it.
func calibrationJSONOf(nc *namedCalibration) calibrationJSON {
	return calibrationJSON{Name: nc.Name, File: nc.File, Calibration: nc.Cal}
}

// calibrationFlag is --calibration, repeatable: NAME|FILE for every box
// (the last one given), SHAPE=NAME|FILE for the boxes of one shape.
type calibrationFlag struct {
	def      string
	shapes   []string // in the order given
	values   map[string]string
	perShape map[string]*namedCalibration // filled by resolve
}

func (f *calibrationFlag) String() string { return "" }

func (f *calibrationFlag) Set(s string) error {
	if s == "" {
		return fmt.Errorf("want %s, a file, or SHAPE=NAME", strings.Join(inventories.CalibrationNames(), ", "))
	}
	ref, v, ok := strings.Cut(s, "=")
	if !ok {
		f.def = s // the last one given wins, as with other flags
		return nil
	}
	if ref == "" || v == "" {
		return fmt.Errorf("want SHAPE=NAME|FILE, such as lab/small=loadtest.json")
	}
	if f.values == nil {
		f.values = map[string]string{}
	}
	if _, dup := f.values[ref]; dup {
		return fmt.Errorf("shape %s given twice", ref)
	}
	f.values[ref] = v
	f.shapes = append(f.shapes, ref)
	return nil
}

// resolve loads the calibrations: the default one (named, a file, or the
// one beside the inventory) and those per shape.
func (f *calibrationFlag) resolve(inventory string) (*namedCalibration, error) {
	var def *namedCalibration
	var err error
	if f.def == "" {
		def, err = loadtest.CalibrationBeside(inventory)
	} else {
		def, err = loadNamedCalibration(f.def, nil)
	}
	if err != nil {
		return nil, err
	}
	f.perShape = map[string]*namedCalibration{}
	for _, ref := range f.shapes {
		nc, err := loadNamedCalibration(f.values[ref], def)
		if err != nil {
			return nil, err
		}
		f.perShape[ref] = nc
	}
	return def, nil
}

// loadNamedCalibration loads a --calibration value (loadtest.ResolveCalibration).
func loadNamedCalibration(v string, base *namedCalibration) (*namedCalibration, error) {
	nc, err := loadtest.ResolveCalibration(v, base)
	var unknown *loadtest.UnknownCalibrationError
	if errors.As(err, &unknown) {
		return nil, usagef("flag --calibration: %v", err)
	}
	return nc, err
}
