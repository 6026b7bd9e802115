package loadtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/capacity"
)

// PlanCalibration is a calibration a capacity plan uses, and how the plan
// names it (capacity.NamedCalibration).
type PlanCalibration = capacity.NamedCalibration

// UnknownCalibrationError is ResolveCalibration's error for a value that
// is neither a shipped calibration's name nor a file.
type UnknownCalibrationError struct{ Value string }

func (e *UnknownCalibrationError) Error() string {
	return fmt.Sprintf("%q is neither %s nor a file", e.Value, strings.Join(inventories.CalibrationNames(), ", "))
}

// CalibrationBeside is the calibration a plan uses by default: the
// calibration.yaml beside the inventory, else the shipped default (named
// as such).
func CalibrationBeside(inventory string) (*PlanCalibration, error) {
	path := inventories.Beside(inventory, inventories.CalibrationFile)
	cal, err := inventories.LoadCalibration(path)
	if err != nil {
		return nil, err
	}
	c := &PlanCalibration{Name: inventories.CalibrationName(path), File: path, Cal: cal}
	if named, ok := inventories.NamedCalibration(c.Name); ok {
		c.File = named // the shipped calibration.yaml is the default named one
	}
	return c, nil
}

// ResolveCalibration loads a calibration a plan is given: a shipped name,
// a calibration.yaml, or fleet loadtest's loadtest.json, whose unmeasured
// coefficients come from base (nil: the shipped default calibration).
func ResolveCalibration(v string, base *PlanCalibration) (*PlanCalibration, error) {
	if path, ok := inventories.NamedCalibration(v); ok {
		cal, err := inventories.LoadCalibration(path)
		if err != nil {
			return nil, err
		}
		return &PlanCalibration{Name: v, File: path, Cal: cal}, nil
	}
	if _, err := os.Stat(v); err != nil {
		return nil, &UnknownCalibrationError{Value: v}
	}
	if filepath.Ext(v) != ".json" {
		cal, err := inventories.LoadCalibration(v)
		if err != nil {
			return nil, err
		}
		return &PlanCalibration{Name: v, File: v, Cal: cal}, nil
	}
	if base == nil {
		path, _ := inventories.NamedCalibration(inventories.DefaultCalibration)
		cal, err := inventories.LoadCalibration(path)
		if err != nil {
			return nil, err
		}
		base = &PlanCalibration{Name: inventories.DefaultCalibration, File: path, Cal: cal}
	}
	cal, err := ReadCalibration(v, base.Cal, base.File)
	if err != nil {
		return nil, err
	}
	return &PlanCalibration{Name: v, File: v, Cal: cal}, nil
}

// ReadCalibration turns a loadtest.json into the calibration fleet
// loadtest writes beside it: the fit's coefficients, and from base (read
// from basePath) what a load test does not measure. A file that is not a
// load test's document, or has no fit, is an *inventories.Error.
func ReadCalibration(path string, base *inventories.Calibration, basePath string) (*inventories.Calibration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &inventories.Error{File: path, Msg: err.Error()}
	}
	var doc Doc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, &inventories.Error{File: path, Msg: "not a fleet loadtest JSON document: " + err.Error()}
	}
	if doc.Fit == nil {
		return nil, &inventories.Error{File: path, Msg: "no fit (too few measured steps); it cannot calibrate a plan"}
	}
	date := doc.Date
	if date == "" {
		date = "unknown"
	}
	text := CalibrationYAML(*doc.Fit, base, basePath, doc.MeasuredOn, date, doc.Generator, doc.Steps)
	return inventories.ParseCalibration(path, text)
}

// Calibrate gives the candidates of a plan the calibrations given for
// one shape: perShape by shape (Candidate.Ref), shapes in the order they
// were given. A shape that no candidate has is an error naming the
// plan's shapes.
func Calibrate(cands []capacity.Candidate, shapes []string, perShape map[string]*PlanCalibration) error {
	used := map[string]bool{}
	var refs []string
	for i := range cands {
		c := &cands[i]
		if !slices.Contains(refs, c.Ref()) {
			refs = append(refs, c.Ref())
		}
		if nc := perShape[c.Ref()]; nc != nil {
			c.Calibration, c.CalibrationName = nc.Cal, nc.Name
			used[c.Ref()] = true
		}
	}
	for _, ref := range shapes {
		if !used[ref] {
			return fmt.Errorf("no box of this plan has shape %s (its shapes: %s)", ref, strings.Join(refs, ", "))
		}
	}
	return nil
}
