package loadtest

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/inventories/capacity"
)

// TestResolveCalibration: a shipped name, a calibration.yaml and a
// loadtest.json each load as what a plan uses, named as the plan shows
// them; a loadtest.json takes what it does not measure from its base.
func TestResolveCalibration(t *testing.T) {
	storyPath, _ := inventories.NamedCalibration(inventories.CalibrationStory)
	story, err := ResolveCalibration("story", nil)
	if err != nil {
		t.Fatal(err)
	}
	if story.Name != "story" || story.File != storyPath || story.Cal.Source != inventories.SourceStory || story.Cal.ListenersPerCore != 900 {
		t.Errorf("story: %+v %+v", story, story.Cal)
	}
	if d := story.Describe(); !strings.HasPrefix(d, "story ("+storyPath+"), ") || !strings.HasSuffix(d, story.Cal.String()) {
		t.Errorf("Describe = %q", d)
	}

	dir := t.TempDir()
	yaml := filepath.Join(dir, "calibration.yaml")
	os.WriteFile(yaml, []byte("version: 1\nlisteners_per_core: 1234\nsource: story\nlisteners_per_socket: 5000\nram_per_listener: 1MB\nbitrate_per_listener: 40kbit\nuplink_headroom: 0.5\n"), 0o644)
	own, err := ResolveCalibration(yaml, nil)
	if err != nil || own.Name != yaml || own.File != yaml || own.Cal.ListenersPerCore != 1234 {
		t.Fatalf("calibration.yaml: %+v, %v", own, err)
	}
	if d := own.Describe(); !strings.HasPrefix(d, yaml+", ") {
		t.Errorf("Describe = %q; want the file named once", d)
	}

	lt := filepath.Join(dir, "loadtest.json")
	data, _ := json.Marshal(Doc{Target: "lab-burst-1", MeasuredOn: "lab-burst-1 on a lab box", Date: "2026-12-01", Generator: "the load generator shares the cores",
		Steps: []Step{{Listeners: 100}, {Listeners: 200}, {Listeners: 300}},
		Fit:   &Fit{Steps: 3, CPUPerListener: 1.0 / 3000, ListenersPerCore: 3000, RAMPerListener: 100 << 10, PayloadBitrate: 40_000, WireBitrate: 50_000}})
	os.WriteFile(lt, data, 0o644)
	for _, base := range []*PlanCalibration{nil, own} {
		got, err := ResolveCalibration(lt, base)
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != lt || got.Cal.Source != inventories.SourceLoadtest || got.Cal.ListenersPerCore != 3000 || !strings.Contains(got.Describe(), "2026-12-01") {
			t.Errorf("loadtest.json: %+v %+v", got, got.Cal)
		}
		// A load test does not measure the socket's drain ceiling: it is
		// the base's.
		want := 5000.0
		if base == nil {
			def, _ := ResolveCalibration(inventories.DefaultCalibration, nil)
			want = def.Cal.ListenersPerSocket
		}
		if got.Cal.ListenersPerSocket != want {
			t.Errorf("base %v: listeners per socket %g, want %g", base, got.Cal.ListenersPerSocket, want)
		}
	}
}

// TestResolveCalibrationBadInput: what is neither a name nor a file, and
// files that cannot calibrate a plan, say which and why.
func TestResolveCalibrationBadInput(t *testing.T) {
	_, err := ResolveCalibration("nope", nil)
	var unknown *UnknownCalibrationError
	if !errors.As(err, &unknown) || err.Error() != `"nope" is neither relayfleet, story nor a file` {
		t.Errorf("unknown name: %v", err)
	}
	dir := t.TempDir()
	for name, tc := range map[string]struct{ body, want string }{
		"nofit.json": {`{"target": "x", "steps": [], "fit": null}`, "no fit (too few measured steps); it cannot calibrate a plan"},
		"notjs.json": {`steps: 3`, "not a fleet loadtest JSON document: "},
		"bad.yaml":   {"version: 1\nlisteners_per_core: 1e300\nsource: story\nlisteners_per_socket: 1\nram_per_listener: 1MB\nbitrate_per_listener: 40kbit\nuplink_headroom: 0.5\n", ":2: listeners_per_core: want a number of listeners above 0"},
		"empty.yaml": {"", ""},
	} {
		path := filepath.Join(dir, name)
		os.WriteFile(path, []byte(tc.body), 0o644)
		_, err := ResolveCalibration(path, nil)
		var ie *inventories.Error
		if !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an inventories.Error naming the file with %q", name, err, tc.want)
		}
	}
}

// TestCalibrationBeside: a plan without --calibration uses the
// calibration.yaml beside its inventory, else the shipped default, named
// as such.
func TestCalibrationBeside(t *testing.T) {
	def, err := CalibrationBeside("")
	want, _ := inventories.NamedCalibration(inventories.DefaultCalibration)
	if err != nil || def.Name != inventories.DefaultCalibration || def.File != want {
		t.Fatalf("no inventory: %+v, %v; want %s from %s", def, err, inventories.DefaultCalibration, want)
	}
	dir := t.TempDir()
	inv := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(inv, []byte("version: 1\n"), 0o644)
	if def, err := CalibrationBeside(inv); err != nil || def.Name != inventories.DefaultCalibration {
		t.Fatalf("inventory without a calibration beside it: %+v, %v", def, err)
	}
	cal := filepath.Join(dir, inventories.CalibrationFile)
	os.WriteFile(cal, []byte("version: 1\nlisteners_per_core: 777\nsource: story\nlisteners_per_socket: 5000\nram_per_listener: 1MB\nbitrate_per_listener: 40kbit\nuplink_headroom: 0.5\n"), 0o644)
	got, err := CalibrationBeside(inv)
	if err != nil || got.File != cal || got.Cal.ListenersPerCore != 777 {
		t.Fatalf("inventory with a calibration beside it: %+v, %v", got, err)
	}
}

// TestCalibrate: the candidates of the shapes given get their
// calibrations, the others keep the plan's; a shape no candidate has is
// an error naming the plan's shapes.
func TestCalibrate(t *testing.T) {
	lab := &inventories.Provider{Name: "lab"}
	small, medium := &inventories.Shape{Name: "small"}, &inventories.Shape{Name: "medium"}
	cands := []capacity.Candidate{
		{Name: "a", Provider: lab, Shape: small},
		{Name: "b", Provider: lab, Shape: medium},
		{Name: "c", Provider: lab, Shape: small},
	}
	mine := &PlanCalibration{Name: "mine", Cal: &inventories.Calibration{ListenersPerCore: 7}}
	if err := Calibrate(cands, []string{"lab/small"}, map[string]*PlanCalibration{"lab/small": mine}); err != nil {
		t.Fatal(err)
	}
	for _, c := range cands {
		want := ""
		if c.Shape == small {
			want = "mine"
		}
		if c.CalibrationName != want || (want != "") != (c.Calibration == mine.Cal) {
			t.Errorf("%s: calibration %q %v, want %q", c.Name, c.CalibrationName, c.Calibration, want)
		}
	}
	err := Calibrate(cands, []string{"lab/big"}, map[string]*PlanCalibration{"lab/big": mine})
	if err == nil || err.Error() != "no box of this plan has shape lab/big (its shapes: lab/small, lab/medium)" {
		t.Errorf("err %v", err)
	}
}
