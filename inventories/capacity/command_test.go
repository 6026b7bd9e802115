package capacity

import (
	"errors"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
)

func TestBoxFlag(t *testing.T) {
	var b BoxFlag
	if err := b.Set("cores=12,ram=lots"); err == nil || b.Box != nil {
		t.Errorf("bad box: %v, %+v", err, b.Box)
	}
	if err := b.Set("cores=12,ram=64GiB,processes=2"); err != nil || b.Box == nil || b.Box.Cores != 12 || b.Box.Processes != 2 {
		t.Errorf("Set: %v, %+v", err, b.Box)
	}
}

func TestCalibrationFlag(t *testing.T) {
	var f CalibrationFlag
	for _, v := range []string{"story", "relayfleet", "cloud/c12=a.json", "custom=story"} {
		if err := f.Set(v); err != nil {
			t.Fatalf("Set(%q): %v", v, err)
		}
	}
	if f.Default != "relayfleet" || strings.Join(f.Shapes, " ") != "cloud/c12 custom" || f.Values["cloud/c12"] != "a.json" {
		t.Errorf("after Set: %+v; want the last default and the shapes in order", f)
	}
	for v, want := range map[string]string{
		"":             "want relayfleet, story, a file, or SHAPE=NAME",
		"=story":       "want SHAPE=NAME|FILE",
		"custom=":      "want SHAPE=NAME|FILE",
		"custom=story": "shape custom given twice",
	} {
		if err := f.Set(v); err == nil || err.Error() != want && !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Set(%q) = %v, want %q", v, err, want)
		}
	}
}

// shipped is the shipped default calibration, as a plan names it.
func shipped(t *testing.T) *NamedCalibration {
	t.Helper()
	path, _ := inventories.NamedCalibration(inventories.DefaultCalibration)
	cal, err := inventories.LoadCalibration(path)
	if err != nil {
		t.Fatal(err)
	}
	return &NamedCalibration{Name: inventories.DefaultCalibration, File: path, Cal: cal}
}

func TestWritePlan(t *testing.T) {
	def := shipped(t)
	fileErr := &inventories.Error{File: "cal.yaml", Msg: "broken"}
	base := func() PlanOptions {
		return PlanOptions{Listeners: 1000, Calibrations: Calibrations{
			Beside: func(string) (*NamedCalibration, error) { return def, nil },
			Resolve: func(v string, _ *NamedCalibration) (*NamedCalibration, error) {
				switch v {
				case "broken":
					return nil, fileErr
				case "nope":
					return nil, errors.New(`"nope" is neither relayfleet, story nor a file`)
				}
				return &NamedCalibration{Name: v, File: v, Cal: def.Cal}, nil
			},
			Calibrate: func([]Candidate, []string, map[string]*NamedCalibration) error { return nil },
		}}
	}
	usage := func(msg string) error { return cli.Usagef("%s", msg) }
	for _, tc := range []struct {
		name   string
		change func(*PlanOptions)
		want   error
	}{
		{"no listeners", func(o *PlanOptions) { o.Listeners = -1 }, usage("flag --listeners: required")},
		{"shape and box", func(o *PlanOptions) { o.Shape = "cloud/c12"; o.Box.Box = &Box{Cores: 1} }, usage("flags --shape and --box: give one, not both")},
		{"unknown shape", func(o *PlanOptions) { o.Shape = "hcloud/nope" }, usage("flag --shape: ")},
		{"unknown calibration", func(o *PlanOptions) { o.Calibration.Default = "nope" }, usage(`flag --calibration: "nope" is neither`)},
		{"broken calibration file", func(o *PlanOptions) { o.Calibration.Default = "broken" }, fileErr},
		{"broken shape calibration", func(o *PlanOptions) { o.Calibration.Set("custom=broken") }, fileErr},
		{"calibration for no box", func(o *PlanOptions) {
			o.Calibrations.Calibrate = func([]Candidate, []string, map[string]*NamedCalibration) error { return errors.New("no box") }
		}, usage("flag --calibration: no box")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			tc.change(&o)
			var out strings.Builder
			err := WritePlan(&out, o)
			var ue *cli.UsageError
			if wantUE := (*cli.UsageError)(nil); errors.As(tc.want, &wantUE) {
				if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), wantUE.Error()) {
					t.Errorf("error %v, want a usage error starting %q", err, wantUE)
				}
			} else if err != tc.want {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("wrote %q", out.String())
			}
		})
	}

	// A plan: the default calibration names it; a shape's own is used
	// for that shape.
	o := base()
	o.Box.Set("cores=2,ram=4GiB")
	o.Calibration.Set("custom=mine.json")
	var perShape map[string]*NamedCalibration
	o.Calibrations.Calibrate = func(_ []Candidate, shapes []string, ps map[string]*NamedCalibration) error {
		perShape = ps
		return nil
	}
	var out strings.Builder
	if err := WritePlan(&out, o); err != nil {
		t.Fatal(err)
	}
	if perShape["custom"] == nil || perShape["custom"].Name != "mine.json" {
		t.Errorf("per shape %+v", perShape)
	}
	if !strings.Contains(out.String(), "Plan for 1,000 listeners") || !strings.Contains(out.String(), "calibration: "+inventories.DefaultCalibration) {
		t.Errorf("text:\n%s", out.String())
	}
	o.JSON = true
	out.Reset()
	if err := WritePlan(&out, o); err != nil || !strings.HasPrefix(out.String(), "{") {
		t.Errorf("--json: %v\n%s", err, out.String())
	}
}
