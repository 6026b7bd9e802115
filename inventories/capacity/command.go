package capacity

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
)

// BoxFlag is the flag.Value of --box cores=12,ram=64GiB,processes=2,uplink=1Gbit
// (ParseBox). Box is nil until the flag is given.
type BoxFlag struct{ Box *Box }

func (b *BoxFlag) String() string { return "" }

// Set parses s (ParseBox).
func (b *BoxFlag) Set(s string) error {
	box, err := ParseBox(s)
	if err != nil {
		return err
	}
	b.Box = &box
	return nil
}

// CalibrationFlag is the flag.Value of --calibration, repeatable:
// NAME|FILE for every box (the last one given), SHAPE=NAME|FILE for the
// boxes of one shape.
type CalibrationFlag struct {
	// Default is the NAME|FILE for every box; "" is the calibration.yaml
	// beside the inventory.
	Default string
	// Shapes are the shapes given a calibration of their own, in the
	// order given; Values their NAME|FILE by shape.
	Shapes []string
	Values map[string]string
}

func (f *CalibrationFlag) String() string { return "" }

// Set adds one --calibration value.
func (f *CalibrationFlag) Set(s string) error {
	if s == "" {
		return fmt.Errorf("want %s, a file, or SHAPE=NAME", strings.Join(inventories.CalibrationNames(), ", "))
	}
	ref, v, ok := strings.Cut(s, "=")
	if !ok {
		f.Default = s // the last one given wins, as with other flags
		return nil
	}
	if ref == "" || v == "" {
		return fmt.Errorf("want SHAPE=NAME|FILE, such as lab/small=loadtest.json")
	}
	if f.Values == nil {
		f.Values = map[string]string{}
	}
	if _, dup := f.Values[ref]; dup {
		return fmt.Errorf("shape %s given twice", ref)
	}
	f.Values[ref] = v
	f.Shapes = append(f.Shapes, ref)
	return nil
}

// Calibrations read and apply the calibrations a plan is given. Package
// provision/loadtest has them (CalibrationBeside, ResolveCalibration,
// Calibrate): it reads fleet loadtest's loadtest.json.
type Calibrations struct {
	// Beside is the calibration of a plan given none: the one beside the
	// inventory, else the shipped default.
	Beside func(inventory string) (*NamedCalibration, error)
	// Resolve loads a NAME|FILE; a loadtest.json takes what it does not
	// measure from base (nil: the shipped default).
	Resolve func(v string, base *NamedCalibration) (*NamedCalibration, error)
	// Calibrate gives the candidates of the shapes named the
	// calibrations given for them.
	Calibrate func(cands []Candidate, shapes []string, perShape map[string]*NamedCalibration) error
}

// PlanOptions are fleet plan's inputs, as its flags give them.
type PlanOptions struct {
	// Listeners is the target (-1: not given; required unless the
	// inventory's regions have audiences, regions.go).
	Listeners int
	// RegionListeners are the regions' audiences (--region-listeners).
	RegionListeners RegionListenersFlag
	// Shape plans boxes of one catalogue shape; Box boxes of a given size.
	Shape string
	Box   BoxFlag
	// EventHours is the event's length; 0 plans a month of steady load.
	EventHours float64
	// Inventory is the fleet file ("": none); Providers the catalogue
	// ("": the one beside the inventory, else the shipped one).
	Inventory, Providers string
	Calibration          CalibrationFlag
	Calibrations         Calibrations
	// JSON writes the report as JSON instead of text.
	JSON bool
}

// WritePlan is fleet plan: it reads the catalogue, the inventory and the
// calibrations o names, plans, and writes the report to w. Errors in what
// the flags gave are cli usage errors naming the flag; a file's errors
// are the *inventories.Error it has. The ranges of Listeners and
// EventHours are the flags' to check.
func WritePlan(w io.Writer, o PlanOptions) error {
	if o.Shape != "" && o.Box.Box != nil {
		return cli.Usagef("flags --shape and --box: give one, not both")
	}
	if o.Listeners == -1 && len(o.RegionListeners.Names) == 0 && o.Inventory == "" {
		return cli.Usagef("flag --listeners: required")
	}
	if o.Providers == "" {
		o.Providers = inventories.Beside(o.Inventory, inventories.ProvidersFile)
	}
	cat, err := inventories.LoadCatalogue(o.Providers)
	if err != nil {
		return err
	}
	def, perShape, err := o.resolveCalibrations()
	if err != nil {
		return err
	}
	ch := Choice{Shape: o.Shape, Box: o.Box.Box}
	if o.Inventory != "" {
		if ch.Fleet, err = inventories.LoadFleet(o.Inventory, cat); err != nil {
			return err
		}
	}
	regions, err := o.regionAudiences(ch.Fleet)
	if err != nil {
		return err
	}
	if regions != nil {
		var rs []RegionReport
		for _, ra := range regions {
			rch := ch
			rch.Fleet = regionFleet(ch.Fleet, ra)
			r, err := o.plan(cat, rch, ra.listeners, def, perShape)
			if err != nil {
				return fmt.Errorf("region %s: %w", ra.name, err)
			}
			rs = append(rs, RegionReport{Region: ra.name, Listeners: ra.listeners, Report: r})
		}
		if o.JSON {
			return writeRegionsJSON(w, rs)
		}
		return writeRegionsText(w, rs)
	}
	if o.Listeners == -1 {
		return cli.Usagef("flag --listeners: required")
	}
	r, err := o.plan(cat, ch, o.Listeners, def, perShape)
	if err != nil {
		return err
	}
	if o.JSON {
		return r.WriteJSON(w)
	}
	return r.WriteText(w)
}

// plan plans listeners on the candidates ch allows.
func (o *PlanOptions) plan(cat *inventories.Catalogue, ch Choice, listeners int, def *NamedCalibration, perShape map[string]*NamedCalibration) (*Report, error) {
	cands, err := Candidates(cat, ch)
	var shapeErr *ShapeError
	if errors.As(err, &shapeErr) {
		return nil, cli.Usagef("flag --shape: %v", err)
	} else if err != nil {
		return nil, err
	}
	if err := o.Calibrations.Calibrate(cands, o.Calibration.Shapes, perShape); err != nil {
		return nil, cli.Usagef("flag --calibration: %v", err)
	}
	plan, err := Make(Request{
		Listeners:       listeners,
		EventHours:      o.EventHours,
		Catalogue:       cat,
		Calibration:     def.Cal,
		CalibrationName: def.Name,
	}, cands)
	if err != nil {
		return nil, err
	}
	return &Report{Plan: plan, Calibration: def, PerShape: perShape, Catalogue: o.Providers}, nil
}

// resolveCalibrations loads the calibrations: the default one (named, a
// file, or the one beside the inventory) and those per shape.
func (o *PlanOptions) resolveCalibrations() (*NamedCalibration, map[string]*NamedCalibration, error) {
	var def *NamedCalibration
	var err error
	if o.Calibration.Default == "" {
		def, err = o.Calibrations.Beside(o.Inventory)
	} else {
		def, err = o.resolve(o.Calibration.Default, nil)
	}
	if err != nil {
		return nil, nil, err
	}
	perShape := map[string]*NamedCalibration{}
	for _, ref := range o.Calibration.Shapes {
		nc, err := o.resolve(o.Calibration.Values[ref], def)
		if err != nil {
			return nil, nil, err
		}
		perShape[ref] = nc
	}
	return def, perShape, nil
}

// resolve loads a --calibration value: a file's error is its own
// (*inventories.Error), any other is the value's, naming the flag.
func (o *PlanOptions) resolve(v string, base *NamedCalibration) (*NamedCalibration, error) {
	nc, err := o.Calibrations.Resolve(v, base)
	var fileErr *inventories.Error
	if err != nil && !errors.As(err, &fileErr) {
		return nil, cli.Usagef("flag --calibration: %v", err)
	}
	return nc, err
}
