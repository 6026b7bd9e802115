package capacity

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/inventories"
)

func TestMoney(t *testing.T) {
	for v, want := range map[float64]string{0: "0.00", 1.5: "1.50", 1234.567: "1,234.57", 9.999: "10.00"} {
		if got := money(v); got != want {
			t.Errorf("money(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestExhausted(t *testing.T) {
	h0, h3 := 0.0, 3.25
	for _, tc := range []struct {
		e    EgressPlan
		want string
	}{
		{EgressPlan{}, "never"},
		{EgressPlan{ExhaustedAfterHours: &h0}, "at once (spends faster than it accrues)"},
		{EgressPlan{ExhaustedAfterHours: &h3, Accrues: inventories.AccrueDay}, "3.2 h into each day"},
		{EgressPlan{ExhaustedAfterHours: &h3}, "3.2 h"},
	} {
		if got := exhausted(&tc.e); got != tc.want {
			t.Errorf("exhausted(%+v) = %q, want %q", tc.e, got, tc.want)
		}
	}
}

func TestReportWrite(t *testing.T) {
	cal := &NamedCalibration{Name: "c", File: "c.yaml", Cal: &inventories.Calibration{}}
	r := &Report{
		Plan:        &Plan{Listeners: 1, Boxes: 2, Capacity: 4, Warnings: []string{"w1"}},
		Calibration: cal,
		PerShape:    map[string]*NamedCalibration{"lab/small": cal},
		Catalogue:   "providers.yaml",
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Plan for 1 listener, a month of steady load\n", "calibration for lab/small: c (c.yaml)",
		"total: 2 boxes, capacity 4 (75.0% spare)\n", "cost: unknown", "\nwarnings:\n  w1\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Calibration  struct{ Name, File string }
		Calibrations map[string]struct{ Name string }
		Providers    string
	}
	if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Calibration.File != "c.yaml" || doc.Calibrations["lab/small"].Name != "c" || doc.Providers != "providers.yaml" {
		t.Errorf("json = %s", b.String())
	}
}
