package capacity

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/inventories"
)

const GiB = 1 << 30

func story() *inventories.Calibration {
	return &inventories.Calibration{
		Source:             inventories.SourceStory,
		ListenersPerCore:   900,
		ListenersPerSocket: 6500,
		RAMPerListener:     1_300_000,
		BitratePerListener: 40_000,
		UplinkHeadroom:     0.7,
	}
}

func TestPerBox(t *testing.T) {
	for _, tc := range []struct {
		name string
		box  Box
		want BoxCapacity
	}{
		// The story: a 12-core box with one process hits the socket wall.
		{"12 cores 1 process", Box{12, 64 * GiB, 1, 1e9}, BoxCapacity{6500, TermSocket, Terms{10800, 6500, 26430, 17500}}},
		// Two processes lift it to the CPU term.
		{"12 cores 2 processes", Box{12, 64 * GiB, 2, 1e9}, BoxCapacity{10800, TermCPU, Terms{10800, 13000, 26430, 17500}}},
		// RAM-starved: 8 GiB / 1.3 MB / 2.
		{"memory bound", Box{8, 8 * GiB, 8, 1e9}, BoxCapacity{3303, TermMemory, Terms{7200, 52000, 3303, 17500}}},
		// A 100 Mbit uplink carries 1,750 listeners at 40 kbit/s with 70% headroom.
		{"bandwidth bound", Box{4, 16 * GiB, 4, 1e8}, BoxCapacity{1750, TermBandwidth, Terms{3600, 26000, 6607, 1750}}},
		// Ties go to the earlier term.
		{"tie", Box{1, 64 * GiB, 1, 1e9}, BoxCapacity{900, TermCPU, Terms{900, 6500, 26430, 17500}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PerBox(tc.box, story()); got != tc.want {
				t.Errorf("PerBox = %+v\nwant      %+v", got, tc.want)
			}
		})
	}
}

func TestEgressPerListenerHour(t *testing.T) {
	// 40 kbit/s = 5,000 B/s = 18 MB per hour.
	if got := EgressPerListenerHour(story()); got != 18_000_000 {
		t.Errorf("got %d", got)
	}
}

// shape builds a catalogue row.
func shape(name string, cores int, ram inventories.Bytes, hourly, monthly float64, e inventories.Egress) inventories.Shape {
	return inventories.Shape{Name: name, Cores: cores, RAM: ram, Uplink: 1e9, Hourly: hourly, Monthly: monthly, Currency: "EUR", Egress: e, Source: "test", Date: "2026-11-29"}
}

var (
	billedMonth = inventories.Egress{Included: 20e12, Accrues: inventories.AccrueMonth, Past: inventories.PastBilled, Price: 1, Per: "TB"}
	unmetered   = inventories.Egress{Accrues: inventories.AccrueUnmetered, Past: inventories.PastNone}
)

func testCatalogue() *inventories.Catalogue {
	return &inventories.Catalogue{
		Currency: "EUR",
		Rates:    []inventories.Rate{{Currency: "USD", Value: 0.5, Source: "t", Date: "t"}},
		Providers: []inventories.Provider{
			{Name: "cloud", Kind: inventories.KindCloud, Shapes: []inventories.Shape{
				shape("small", 2, 8*GiB, 0.02, 12, billedMonth),   // 1,800 listeners
				shape("big", 12, 64*GiB, 0.10, 60, billedMonth),   // 10,800 listeners
				shape("dear", 12, 64*GiB, 0.50, 300, billedMonth), // same capacity, dearer
			}},
			{Name: "pooled", Kind: inventories.KindCloud, Shapes: []inventories.Shape{
				{Name: "p4", Cores: 4, RAM: 8 * GiB, Uplink: 1e9, Hourly: 0.10, Monthly: 60, Currency: "USD", Source: "t", Date: "t",
					Egress: inventories.Egress{Included: 5e12, Accrues: inventories.AccruePooledHour, Past: inventories.PastBilled, Price: 0.01, Per: "GiB"}},
			}},
			{Name: "budget", Kind: inventories.KindDedicated, Shapes: []inventories.Shape{
				shape("daily", 12, 64*GiB, 0, 40, inventories.Egress{Included: 1e12, Accrues: inventories.AccrueDay, Past: inventories.PastThrottled, Throttle: 1e8}),
			}},
			{Name: "root", Kind: inventories.KindDedicated, Shapes: []inventories.Shape{
				{Name: "ax", Cores: 16, RAM: 64 * GiB, Uplink: 1e9, Monthly: 50, Setup: 40, Currency: "EUR", Egress: unmetered, Source: "t", Date: "t"},
			}},
		},
	}
}

func cand(cat *inventories.Catalogue, role Role, ref string, count, max int) Candidate {
	p, s, err := cat.Lookup(ref)
	if err != nil {
		panic(err)
	}
	return Candidate{Role: role, Name: ref, Provider: p, Shape: s, Count: count, Max: max,
		Box: Box{Cores: s.Cores, RAM: s.RAM, Processes: s.Cores, Uplink: s.Uplink}}
}

func TestMakeOneShape(t *testing.T) {
	cat := testCatalogue()
	p, err := Make(Request{Listeners: 100_000, EventHours: 3, Catalogue: cat, Calibration: story()},
		[]Candidate{cand(cat, Burst, "cloud/big", 0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	// 100,000 / 10,800 -> 10 boxes: the story's 9-13.
	if p.Boxes != 10 || p.Capacity != 108_000 || p.PerBox.LimitedBy != TermCPU || p.PerBox.Capacity != 10_800 {
		t.Errorf("plan = %d boxes, capacity %d, per box %+v", p.Boxes, p.Capacity, p.PerBox)
	}
	c := p.Cost
	if !near(c.PerHour, 1.0) || !near(c.PerMonth, 600) || !near(c.PerEvent, 3.0) || c.Overage != 0 {
		t.Errorf("cost = %+v; want 1.00/h, 600/month, 3.00/event, no overage", c)
	}
	e := p.Groups[0].Egress
	// 10,000 listeners a box x 18 MB = 180 GB an hour: 20 TB lasts 111.1 h.
	if e.PerBoxHourBytes != 180e9 || e.ExhaustedAfterHours == nil || !near(*e.ExhaustedAfterHours, 20e12/180e9) {
		t.Errorf("egress = %+v", e)
	}
}

func TestMakeMonthOverage(t *testing.T) {
	cat := testCatalogue()
	p, err := Make(Request{Listeners: 10_000, Catalogue: cat, Calibration: story()}, []Candidate{cand(cat, Burst, "cloud/big", 0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	// 180 GB/h for 730 h = 131.4 TB; 20 TB included; 111.4 TB at 1/TB.
	e := p.Groups[0].Egress
	if e.OverageBytes != 111_400_000_000_000 || !near(e.OverageCost, 111.4) || !near(p.Cost.Overage, 111.4) {
		t.Errorf("overage = %d bytes, %.2f", e.OverageBytes, e.OverageCost)
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "used up after 111.1 h") {
		t.Errorf("warnings = %q", p.Warnings)
	}
}

func TestMakeCheapestMix(t *testing.T) {
	cat := testCatalogue()
	cands := []Candidate{
		cand(cat, Burst, "cloud/dear", 0, 0),
		cand(cat, Burst, "cloud/small", 0, 0),
		cand(cat, Burst, "cloud/big", 0, 0),
	}
	// 12,000 listeners, 2 h event: big (0.20 each, 10,800) + small (0.04,
	// 1,800) = 0.24 beats 2 big (0.40) and 7 small (0.28).
	p, err := Make(Request{Listeners: 12_000, EventHours: 2, Catalogue: cat, Calibration: story()}, cands)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, g := range p.Groups {
		got[g.Shape] = g.Boxes
	}
	if len(got) != 2 || got["cloud/big"] != 1 || got["cloud/small"] != 1 || !near(p.Cost.PerEvent, 0.24) {
		t.Errorf("mix = %v, cost %+v", got, p.Cost)
	}
	if p.Capacity < 12_000 {
		t.Errorf("capacity %d below target", p.Capacity)
	}
}

func TestMakeSteadyFirstThenBurstWithMax(t *testing.T) {
	cat := testCatalogue()
	cands := []Candidate{
		cand(cat, Steady, "root/ax", 2, 0),  // 2 x 14,400 = 28,800
		cand(cat, Burst, "cloud/big", 0, 3), // at most 3 x 10,800
		cand(cat, Burst, "cloud/small", 0, 0),
	}
	p, err := Make(Request{Listeners: 60_000, EventHours: 4, Catalogue: cat, Calibration: story()}, cands)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Group{}
	for _, g := range p.Groups {
		byName[g.Name] = g
	}
	if g := byName["root/ax"]; g.Boxes != 2 || g.Listeners != 28_800 {
		t.Errorf("steady group = %+v", g)
	}
	// 31,200 left: 3 big (32,400) is the cheapest and respects max.
	if g := byName["cloud/big"]; g.Boxes != 3 {
		t.Errorf("burst big = %+v (groups %+v)", g, p.Groups)
	}
	// Steady boxes add nothing to the event: 3 x 4 h x 0.10.
	if !near(p.Cost.PerEvent, 1.2) {
		t.Errorf("per event = %v", p.Cost.PerEvent)
	}

	_, err = Make(Request{Listeners: 100_000, Catalogue: cat, Calibration: story()}, cands[:2])
	if !errors.Is(err, ErrShortfall) {
		t.Errorf("err = %v, want a shortfall", err)
	}
}

func TestMonthlyOnlyEventCostsAMonth(t *testing.T) {
	cat := testCatalogue()
	p, err := Make(Request{Listeners: 1000, EventHours: 2, Catalogue: cat, Calibration: story()}, []Candidate{cand(cat, Burst, "root/ax", 0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if !near(p.Cost.PerEvent, 90) { // a month (50) and setup (40)
		t.Errorf("per event = %v", p.Cost.PerEvent)
	}
	if e := p.Groups[0].Egress; e.ExhaustedAfterHours != nil || e.OverageBytes != 0 {
		t.Errorf("unmetered egress = %+v", e)
	}
}

func TestPooledHourly(t *testing.T) {
	cat := testCatalogue()
	// p4 (memory-bound at 3,303): 3,300 listeners -> 59.4 GB/h; accrues 5 TB / 672 = 7.44 GB/h.
	p, err := Make(Request{Listeners: 3300, EventHours: 10, Catalogue: cat, Calibration: story()}, []Candidate{cand(cat, Burst, "pooled/p4", 0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	e := p.Groups[0].Egress
	if e.ExhaustedAfterHours == nil || *e.ExhaustedAfterHours != 0 {
		t.Fatalf("pooled allowance should be spent at once: %+v", e)
	}
	wantBytes := (59.4e9 - 5e12/672) * 10
	wantCost := wantBytes / GiB * 0.01 * 0.5 // USD -> EUR at 0.5
	if math.Abs(float64(e.OverageBytes)-wantBytes) > 1e3 || math.Abs(e.OverageCost-wantCost) > 1e-4 {
		t.Errorf("overage = %d (%v), want %v (%v)", e.OverageBytes, e.OverageCost, wantBytes, wantCost)
	}
	if math.Abs(p.Cost.PerEvent-(1.0*0.5+wantCost)) > 2e-4 {
		t.Errorf("per event = %v", p.Cost.PerEvent)
	}
}

func TestDailyCapThrottleWarns(t *testing.T) {
	cat := testCatalogue()
	// 10,800 listeners -> 194.4 GB/h; 1 TB lasts 5.1 h; at 100 Mbit a box carries 1,750.
	p, err := Make(Request{Listeners: 10_800, EventHours: 8, Catalogue: cat, Calibration: story()}, []Candidate{cand(cat, Burst, "budget/daily", 0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	e := p.Groups[0].Egress
	if e.ExhaustedAfterHours == nil || !near(*e.ExhaustedAfterHours, 1e12/194.4e9) || e.ThrottledListeners != 1750 || e.OverageCost != 0 {
		t.Errorf("egress = %+v", e)
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "throttled to 100 Mbit/s") || !strings.Contains(p.Warnings[0], "5.1 h") {
		t.Errorf("warnings = %q", p.Warnings)
	}
	// A short event stays under the cap: no warning.
	p, _ = Make(Request{Listeners: 10_800, EventHours: 4, Catalogue: cat, Calibration: story()}, []Candidate{cand(cat, Burst, "budget/daily", 0, 0)})
	if len(p.Warnings) != 0 {
		t.Errorf("4 h event warned: %q", p.Warnings)
	}
}

func TestThrottledShapeNotPreferred(t *testing.T) {
	cat := testCatalogue()
	// budget/daily is cheaper per box than cloud/dear but throttles within
	// an 8 h event: the planner must not pick it.
	p, err := Make(Request{Listeners: 10_000, EventHours: 8, Catalogue: cat, Calibration: story()},
		[]Candidate{cand(cat, Burst, "budget/daily", 0, 0), cand(cat, Burst, "cloud/dear", 0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Groups) != 1 || p.Groups[0].Shape != "cloud/dear" {
		t.Errorf("groups = %+v", p.Groups)
	}
}

func TestUnpricedBox(t *testing.T) {
	p, err := Make(Request{Listeners: 100_000, Catalogue: testCatalogue(), Calibration: story()},
		[]Candidate{{Role: Custom, Name: "custom", Box: Box{12, 64 * GiB, 1, 1e9}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Boxes != 16 || p.Cost != nil || p.PerBox.LimitedBy != TermSocket {
		t.Errorf("plan = %+v", p)
	}
}

func TestZeroListeners(t *testing.T) {
	cat := testCatalogue()
	p, err := Make(Request{Listeners: 0, Catalogue: cat, Calibration: story()}, []Candidate{cand(cat, Burst, "cloud/big", 0, 0)})
	if err != nil || p.Boxes != 0 {
		t.Errorf("plan = %+v, %v", p, err)
	}
}

// TestMakeBounded: the largest audience on the smallest boxes answers
// at once (it used to add one box a turn: 10^14 listeners spun for
// hours), past the ranges is refused, and a mix with a per-group
// calibration names it.
func TestMakeBounded(t *testing.T) {
	cat := testCatalogue()
	for _, tc := range []struct {
		name      string
		listeners int
		cands     []Candidate
		boxes     int
		err       string
	}{
		{"max on big boxes", inventories.MaxListeners, []Candidate{cand(cat, Burst, "cloud/big", 0, 0)}, 9260, ""},
		{"max on a mix", inventories.MaxListeners, []Candidate{cand(cat, Burst, "cloud/big", 0, 0), cand(cat, Burst, "cloud/small", 0, 0), cand(cat, Burst, "root/ax", 0, 0)}, 0, ""},
		{"max on custom 1-core boxes", inventories.MaxListeners, []Candidate{{Role: Custom, Name: "custom", Box: Box{1, 8 * GiB, 1, 1e9}}}, 0, "need 111,112 boxes, more than the 100,000"},
		{"above max", inventories.MaxListeners + 1, []Candidate{cand(cat, Burst, "cloud/big", 0, 0)}, 0, "listeners: want 0 to 100,000,000, got 100,000,001"},
		{"10^14", 99999999999999, []Candidate{cand(cat, Burst, "cloud/big", 0, 0)}, 0, "listeners: want 0 to 100,000,000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var p *Plan
			var err error
			go func() {
				defer close(done)
				p, err = Make(Request{Listeners: tc.listeners, EventHours: 3, Catalogue: cat, Calibration: story(), CalibrationName: "story"}, tc.cands)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second): // generous: the answer takes well under a second
				t.Fatal("Make did not answer within 30 s")
			}
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Capacity < tc.listeners || tc.boxes != 0 && p.Boxes != tc.boxes {
				t.Errorf("%d boxes carry %d, want %d boxes carrying %d", p.Boxes, p.Capacity, tc.boxes, tc.listeners)
			}
			for _, g := range p.Groups {
				if g.Calibration != "story" {
					t.Errorf("group %s: calibration %q, want story", g.Name, g.Calibration)
				}
			}
		})
	}
}

func TestGroupCalibration(t *testing.T) {
	cat := testCatalogue()
	measured := *story()
	measured.ListenersPerCore = 1800
	big := cand(cat, Burst, "cloud/big", 0, 0)
	big.Calibration, big.CalibrationName = &measured, "loadtest.json"
	p, err := Make(Request{Listeners: 30_000, EventHours: 3, Catalogue: cat, Calibration: story(), CalibrationName: "story"},
		[]Candidate{cand(cat, Steady, "cloud/small", 2, 0), big})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Groups) != 2 {
		t.Fatalf("groups = %+v", p.Groups)
	}
	// The steady group keeps the story's 900 per core; the measured shape
	// carries 12 x 1,800 but its 1 Gbit uplink stops it at 17,500.
	small, bigG := p.Groups[0], p.Groups[1]
	if small.Calibration != "story" || small.PerBox.Terms.CPU != 1800 {
		t.Errorf("steady group: %+v", small)
	}
	if bigG.Calibration != "loadtest.json" || bigG.PerBox.Terms.CPU != 21_600 || bigG.PerBox.Capacity != 17_500 || bigG.Boxes != 2 {
		t.Errorf("measured group: %+v", bigG)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6*math.Max(1, math.Abs(b)) }

func TestPlural(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "0 boxes"}, {1, "1 box"}, {2, "2 boxes"}, {10000, "10,000 boxes"}} {
		if got := Plural(tc.n, "box", "boxes"); got != tc.want {
			t.Errorf("Plural(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
