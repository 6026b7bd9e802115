package capacity

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/cli"
)

const regionsInventory = `version: 1
name: rg
steady:
  - {name: eu-steady, provider: hcloud, shape: ccx33, location: fsn1, count: 2}
  - {name: us-steady, provider: hcloud, shape: ccx33, location: ash, count: 1}
burst:
  - {name: events-hel, provider: hcloud, shape: ccx43, location: hel1, max: 10}
regions:
  - name: eu
    origins: {provider: hcloud, shape: ccx33, location: fsn1, count: 2}
    steady: [eu-steady]
    listeners: 6000
  - name: us
    origins: {provider: hcloud, shape: ccx33, location: ash, count: 2}
    steady: [us-steady]
    listeners: 80000
`

// TestPlanRegions: fleet plan sizes each region from its own audience
// (regions[].listeners, or --region-listeners over it) on that region's
// steady boxes, then the burst pools.
func TestPlanRegions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(regionsInventory), 0o644); err != nil {
		t.Fatal(err)
	}
	def := shipped(t)
	base := func() PlanOptions {
		return PlanOptions{Listeners: -1, Inventory: path, Calibrations: Calibrations{
			Beside:    func(string) (*NamedCalibration, error) { return def, nil },
			Calibrate: func([]Candidate, []string, map[string]*NamedCalibration) error { return nil },
		}}
	}
	var out strings.Builder
	if err := WritePlan(&out, base()); err != nil {
		t.Fatal(err)
	}
	eu, us, ok := strings.Cut(out.String(), "REGION us: 80000 listeners")
	if !ok || !strings.HasPrefix(eu, "REGION eu: 6000 listeners\nPlan for 6,000 listeners") || !strings.Contains(us, "Plan for 80,000 listeners") {
		t.Fatalf("want one plan per region from regions[].listeners:\n%s", out.String())
	}
	if strings.Contains(eu, "us-steady") || !strings.Contains(eu, "eu-steady") || strings.Contains(us, "eu-steady") || !strings.Contains(us, "us-steady") {
		t.Fatalf("each region's plan must use its own steady boxes:\n%s", out.String())
	}
	if !strings.Contains(us, "events-hel") {
		t.Errorf("us (80,000 listeners on one steady box) takes burst boxes:\n%s", us)
	}

	// --region-listeners overrides; JSON has one plan per region.
	o := base()
	if err := o.RegionListeners.Set("eu=100,us=200"); err != nil {
		t.Fatal(err)
	}
	o.JSON = true
	out.Reset()
	if err := WritePlan(&out, o); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Regions []struct {
			Region    string
			Listeners int
			Plan      struct{ Listeners int }
		}
	}
	if err := json.Unmarshal([]byte(out.String()), &doc); err != nil || len(doc.Regions) != 2 ||
		doc.Regions[0].Region != "eu" || doc.Regions[0].Plan.Listeners != 100 || doc.Regions[1].Plan.Listeners != 200 {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}

	for _, tc := range []struct {
		name   string
		change func(*PlanOptions)
		want   string
	}{
		{"unknown region", func(o *PlanOptions) { _ = o.RegionListeners.Set("asia=5") }, "flag --region-listeners: asia is not a region of " + path},
		{"listeners too", func(o *PlanOptions) { o.Listeners = 5 }, "flag --listeners: the fleet's regions have their own audiences"},
		{"no regions", func(o *PlanOptions) { o.Inventory = ""; _ = o.RegionListeners.Set("eu=5") }, "flag --region-listeners: the plan needs --inventory"},
	} {
		o := base()
		tc.change(&o)
		out.Reset()
		err := WritePlan(&out, o)
		var ue *cli.UsageError
		if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), tc.want) || out.Len() != 0 {
			t.Errorf("%s: %v (wrote %q), want a usage error %q", tc.name, err, out.String(), tc.want)
		}
	}
	var f RegionListenersFlag
	for v, want := range map[string]string{"eu": "want REGION=LISTENERS", "eu=-1": "want listeners from 0", "eu=1,eu=2": "region eu given twice"} {
		f = RegionListenersFlag{}
		if err := f.Set(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Set(%q) = %v, want %q", v, err, want)
		}
	}
}
