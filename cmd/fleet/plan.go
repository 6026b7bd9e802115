package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

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
	r := &capacity.Report{Plan: plan, Calibration: def, PerShape: o.cals.perShape, Catalogue: o.providers}
	if o.asJSON {
		return r.WriteJSON(stdout)
	}
	return r.WriteText(stdout)
}

// namedCalibration is a calibration and how a plan names it.
type namedCalibration = loadtest.PlanCalibration

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
