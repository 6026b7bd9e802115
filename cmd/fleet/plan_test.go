package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/internal/testutil"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision/loadtest"
)

// fleet runs the fleet command line in-process.
func fleet(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// fleetJSON runs fleet with args, which must succeed, and decodes the
// JSON it prints into v.
func fleetJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, errOut, code := fleet(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatal(err)
	}
}

// usageCase is a fleet command line, args, that is a usage error: want
// is all it writes.
type usageCase struct {
	name string
	args []string
	want string
}

// usageErrors runs each case as a subtest: it must exit 2, print nothing
// and write its want to stderr.
func usageErrors(t *testing.T, cases []usageCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := fleet(t, tc.args...)
			if code != 2 || out != "" || errOut != tc.want {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2, nothing, %q", code, out, errOut, tc.want)
			}
		})
	}
}

// golden compares got with testdata/name (testutil.Golden: -update or
// UPDATE_GOLDEN=1 rewrites it).
func golden(t *testing.T, name, got string) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name), []byte(got))
}

var fixture = []string{"--providers", "testdata/providers.yaml", "--calibration", "testdata/calibration.yaml"}

func TestPlanGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"story-1-process", []string{"--listeners", "100000", "--box", "cores=12,ram=64GiB,processes=1,uplink=1Gbit"}},
		{"story-2-processes", []string{"--listeners", "100000", "--box", "cores=12,ram=64GiB,processes=2,uplink=1Gbit"}},
		{"shape-event", []string{"--listeners", "100000", "--shape", "cloud/c12", "--event-hours", "3"}},
		{"shape-us-month", []string{"--listeners", "100000", "--shape", "cloud/c12@us"}},
		{"cheapest-mix", []string{"--listeners", "100000", "--event-hours", "6"}},
		{"inventory-event", []string{"--listeners", "60000", "--inventory", "testdata/fleet.yaml", "--event-hours", "4"}},
		{"daily-cap", []string{"--listeners", "20000", "--shape", "budget/daily", "--event-hours", "8"}},
	} {
		for _, format := range []string{"txt", "json"} {
			t.Run(tc.name+"."+format, func(t *testing.T) {
				args := append([]string{"plan"}, fixture...)
				args = append(args, tc.args...)
				if format == "json" {
					args = append(args, "--json")
				}
				out, errOut, code := fleet(t, args...)
				if code != 0 || errOut != "" {
					t.Fatalf("exit %d, stderr %q", code, errOut)
				}
				golden(t, "plan-"+tc.name+"."+format, out)
			})
		}
	}
}

// TestPlanStory checks the story's claims through the JSON document, not
// only through golden files, with the story's calibration as
// docs/planning.md reproduces it.
func TestPlanStory(t *testing.T) {
	type doc struct {
		Boxes  int `json:"boxes"`
		PerBox struct {
			Capacity  int    `json:"capacity"`
			LimitedBy string `json:"limited_by"`
			Terms     struct {
				CPU, Socket, Memory, Bandwidth int
			} `json:"terms"`
		} `json:"per_box"`
	}
	plan := func(box string) doc {
		var d doc
		fleetJSON(t, &d, "plan", "--listeners", "100000", "--box", box, "--calibration", "story", "--json")
		return d
	}
	one := plan("cores=12,ram=64GiB,processes=1")
	two := plan("cores=12,ram=64GiB,processes=2")
	if one.PerBox.LimitedBy != "socket" || two.PerBox.LimitedBy != "cpu" {
		t.Errorf("limited by %s with one process, %s with two; want socket, then cpu", one.PerBox.LimitedBy, two.PerBox.LimitedBy)
	}
	if two.PerBox.Capacity <= one.PerBox.Capacity {
		t.Errorf("two processes carry %d, one %d", two.PerBox.Capacity, one.PerBox.Capacity)
	}
	if two.Boxes < 9 || two.Boxes > 13 {
		t.Errorf("100,000 listeners need %d boxes of the story's size; the story says 9-13", two.Boxes)
	}
	auto := plan("cores=12,ram=64GiB")
	if auto.PerBox.LimitedBy != "cpu" || auto.Boxes != two.Boxes {
		t.Errorf("processes=auto: %+v", auto)
	}
}

// TestPlanDefaultCalibration: with no --calibration and no inventory, the
// plan uses the calibration measured on the bundled relay, names it, and
// sizes the box by its coefficients; --calibration story and a loadtest
// JSON for one shape change what they should.
func TestPlanDefaultCalibration(t *testing.T) {
	type group struct {
		Name        string `json:"name"`
		Role        string `json:"role"`
		Shape       string `json:"shape"`
		Calibration string `json:"calibration"`
		Boxes       int    `json:"boxes"`
		PerBox      struct {
			Capacity int `json:"capacity"`
			Terms    struct {
				CPU    int `json:"cpu"`
				Memory int `json:"memory"`
			} `json:"terms"`
		} `json:"per_box"`
	}
	type doc struct {
		Groups      []group `json:"groups"`
		Calibration struct {
			Name   string `json:"name"`
			File   string `json:"file"`
			Source string `json:"Source"`
		} `json:"calibration"`
		Calibrations map[string]struct {
			Name             string  `json:"name"`
			Source           string  `json:"Source"`
			ListenersPerCore float64 `json:"ListenersPerCore"`
		} `json:"calibrations"`
	}
	plan := func(args ...string) doc {
		t.Helper()
		var d doc
		fleetJSON(t, &d, append(append([]string{"plan"}, args...), "--json")...)
		return d
	}
	path, _ := inventories.NamedCalibration(inventories.CalibrationRelayfleet)
	measured, err := inventories.LoadCalibration(path)
	if err != nil {
		t.Fatal(err)
	}
	d := plan("--listeners", "100000", "--box", "cores=12,ram=64GiB")
	if d.Calibration.Name != "relayfleet" || d.Calibration.Source != inventories.SourceBench || d.Calibration.File != path {
		t.Errorf("calibration %+v, want relayfleet from %s", d.Calibration, path)
	}
	if len(d.Groups) != 1 {
		t.Fatalf("groups %+v", d.Groups)
	}
	g := d.Groups[0]
	if g.Calibration != "relayfleet" || g.Role != "custom" || g.PerBox.Terms.CPU != int(12*measured.ListenersPerCore) {
		t.Errorf("group %+v; want role custom, calibration relayfleet, CPU term 12 x %g", g, measured.ListenersPerCore)
	}
	story := plan("--listeners", "100000", "--box", "cores=12,ram=64GiB", "--calibration", "story")
	if sg := story.Groups[0]; sg.Calibration != "story" || sg.PerBox.Terms.CPU != 12*900 || story.Calibration.Source != inventories.SourceStory {
		t.Errorf("story plan: %+v", story)
	}

	// A loadtest measured on one shape sizes that shape's boxes only.
	dir := t.TempDir()
	lt := filepath.Join(dir, "loadtest.json")
	doc1 := loadtest.Doc{Target: "lab-burst-1", MeasuredOn: "lab-burst-1 on a lab box", Date: "2026-12-01", Generator: "the load generator shares the cores",
		Steps: []loadtest.Step{{Listeners: 100}, {Listeners: 200}, {Listeners: 300}},
		Fit:   &loadtest.Fit{Steps: 3, CPUPerListener: 1.0 / 3000, ListenersPerCore: 3000, RAMPerListener: 100 << 10, PayloadBitrate: 40_000, WireBitrate: 50_000}}
	data, _ := json.Marshal(doc1)
	os.WriteFile(lt, data, 0o644)
	inv := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(inv, []byte("version: 1\nsteady:\n  - {name: s, provider: cloud, shape: c2, location: fsn1, count: 1}\nburst:\n  - {name: b, provider: cloud, shape: c12, location: fsn1}\n"), 0o644)
	mixed := plan("--providers", "testdata/providers.yaml", "--inventory", inv, "--listeners", "50000", "--calibration", "cloud/c12@eu="+lt)
	for _, g := range mixed.Groups {
		want, cpu := "relayfleet", 2*int(measured.ListenersPerCore)
		if g.Shape == "cloud/c12@eu" {
			want, cpu = lt, 12*3000
		}
		if g.Calibration != want || g.PerBox.Terms.CPU != cpu {
			t.Errorf("group %s (%s): calibration %s, CPU term %d; want %s, %d", g.Name, g.Shape, g.Calibration, g.PerBox.Terms.CPU, want, cpu)
		}
	}
	if c := mixed.Calibrations["cloud/c12@eu"]; c.Name != lt || c.Source != inventories.SourceLoadtest || c.ListenersPerCore != 3000 {
		t.Errorf("calibrations %+v", mixed.Calibrations)
	}
	out, errOut, code := fleet(t, "plan", "--providers", "testdata/providers.yaml", "--inventory", inv, "--listeners", "50000", "--calibration", "cloud/c12@eu="+lt)
	if code != 0 || !strings.Contains(out, "calibration for cloud/c12@eu: "+lt+", measured by fleet loadtest, 2026-12-01, on lab-burst-1 on a lab box: 3000 listeners/core") {
		t.Errorf("exit %d %s; table:\n%s", code, errOut, out)
	}
}

// TestPlanPlurals: one box is "1 box", one listener "1 listener".
func TestPlanPlurals(t *testing.T) {
	out, errOut, code := fleet(t, "plan", "--listeners", "1", "--box", "cores=1,ram=1GiB")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Plan for 1 listener,", "total: 1 box,", "per hour at 1 listener\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "1 boxes") || strings.Contains(out, "1 listeners") {
		t.Errorf("plural for one:\n%s", out)
	}
}

// TestPlanAnswersFast: the largest plans answer or refuse within a second
// (generous bound: a plan takes milliseconds; 10^14 used to spin for
// hours). Not a speed test: the failure it is about is unbounded time.
func TestPlanAnswersFast(t *testing.T) {
	for _, args := range [][]string{
		{"--listeners", "99999999999999"},
		{"--listeners", "100000000"},
		{"--listeners", "100000000", "--box", "cores=1,ram=1GiB"},
		{"--listeners", "100000000", "--box", "cores=1,ram=1MiB"},
	} {
		start := time.Now()
		_, errOut, code := fleet(t, append([]string{"plan"}, args...)...)
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%v: %v (exit %d, %s)", args, d, code, errOut)
		}
	}
}

func TestPlanBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(bad, []byte("version: 1\nsteady:\n  - name: a\n    provider: cloud\n    shape: c12\n    location: fsn1\n    count: -2\n"), 0o644)
	huge := filepath.Join(dir, "huge.yaml")
	os.WriteFile(huge, []byte("version: 1\nsteady:\n  - name: a\n    provider: cloud\n    shape: c12\n    location: fsn1\n    count: 99999999999999\n"), 0o644)
	badCal := filepath.Join(dir, "cal.yaml")
	os.WriteFile(badCal, []byte("version: 1\nlisteners_per_core: 1e300\nsource: story\nlisteners_per_socket: 1\nram_per_listener: 1MB\nbitrate_per_listener: 40kbit\nuplink_headroom: 0.5\n"), 0o644)
	noFit := filepath.Join(dir, "loadtest.json")
	os.WriteFile(noFit, []byte(`{"target": "x", "steps": [], "fit": null}`), 0o644)
	unknown := filepath.Join(dir, "unknown.yaml")
	os.WriteFile(unknown, []byte("version: 1\nstedy: []\n"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing listeners", []string{"plan"}, "fleet plan: flag --listeners: required\n"},
		{"negative listeners", []string{"plan", "--listeners", "-5"}, "fleet plan: flag --listeners: -5 is out of range: want 0 to 100000000\n"},
		{"listeners not a number", []string{"plan", "--listeners", "many"}, `fleet plan: flag --listeners: invalid value "many": invalid syntax` + "\n"},
		{"unknown flag", []string{"plan", "--listeners", "5", "--cores", "3"}, "fleet plan: flag --cores: unknown flag\n"},
		{"malformed box", []string{"plan", "--listeners", "5", "--box", "cores=12,ram=lots"}, `fleet plan: flag --box: invalid value "cores=12,ram=lots": ram: want a size such as 64GiB, at most 64 TiB, got "lots"` + "\n"},
		{"box unknown key", []string{"plan", "--listeners", "5", "--box", "cores=12,ram=1GiB,disks=2"}, `fleet plan: flag --box: invalid value "cores=12,ram=1GiB,disks=2": unknown key "disks" (want cores, ram, processes, uplink)` + "\n"},
		{"box without ram", []string{"plan", "--listeners", "5", "--box", "cores=12"}, `fleet plan: flag --box: invalid value "cores=12": cores and ram are required, as in cores=12,ram=64GiB` + "\n"},
		{"unknown shape", []string{"plan", "--listeners", "5", "--shape", "cloud/c99"}, `fleet plan: flag --shape: shape "cloud/c99": provider cloud has no shape "c99" (known: c12, c2)` + "\n"},
		{"unusable shape", []string{"plan", "--listeners", "5", "--shape", "freecdn/free"}, "fleet plan: flag --shape: freecdn cannot carry relay audio: cannot run a QUIC relay\n"},
		{"shape and box", []string{"plan", "--listeners", "5", "--shape", "cloud/c12", "--box", "cores=1,ram=1GiB"}, "fleet plan: flags --shape and --box: give one, not both\n"},
		{"negative hours", []string{"plan", "--listeners", "5", "--event-hours", "-1"}, "fleet plan: flag --event-hours: -1 is out of range: want 0 to 8760\n"},
		{"NaN hours", []string{"plan", "--listeners", "5", "--event-hours", "NaN"}, "fleet plan: flag --event-hours: NaN is out of range: want 0 to 8760\n"},
		{"hours past a year", []string{"plan", "--listeners", "5", "--event-hours", "1e9"}, "fleet plan: flag --event-hours: 1e+09 is out of range: want 0 to 8760\n"},
		{"listeners past the range", []string{"plan", "--listeners", "99999999999999"}, "fleet plan: flag --listeners: 99999999999999 is out of range: want 0 to 100000000\n"},
		{"listeners past int64", []string{"plan", "--listeners", "99999999999999999999999"}, `fleet plan: flag --listeners: invalid value "99999999999999999999999": value out of range` + "\n"},
		{"box too many cores", []string{"plan", "--listeners", "5", "--box", "cores=99999999999,ram=1GiB"}, `fleet plan: flag --box: invalid value "cores=99999999999,ram=1GiB": cores: want an integer from 1 to 1024, got "99999999999"` + "\n"},
		{"box zero cores", []string{"plan", "--listeners", "5", "--box", "cores=0,ram=1GiB"}, `fleet plan: flag --box: invalid value "cores=0,ram=1GiB": cores: want an integer from 1 to 1024, got "0"` + "\n"},
		{"box too much ram", []string{"plan", "--listeners", "5", "--box", "cores=1,ram=1PiB"}, `fleet plan: flag --box: invalid value "cores=1,ram=1PiB": ram: want a size such as 64GiB, at most 64 TiB, got "1PiB"` + "\n"},
		{"box too many processes", []string{"plan", "--listeners", "5", "--box", "cores=1,ram=1GiB,processes=5000"}, `fleet plan: flag --box: invalid value "cores=1,ram=1GiB,processes=5000": processes "5000": want auto or an integer from 1 to 1024` + "\n"},
		{"box uplink too fast", []string{"plan", "--listeners", "5", "--box", "cores=1,ram=1GiB,uplink=5Tbit"}, `fleet plan: flag --box: invalid value "cores=1,ram=1GiB,uplink=5Tbit": uplink: want a rate such as 1Gbit, at most 1 Tbit/s, got "5Tbit"` + "\n"},
		{"unknown calibration", []string{"plan", "--listeners", "5", "--calibration", "nope"}, `fleet plan: flag --calibration: "nope" is neither relayfleet, story nor a file` + "\n"},
		{"calibration for a shape twice", []string{"plan", "--listeners", "5", "--calibration", "custom=story", "--calibration", "custom=relayfleet"}, `fleet plan: flag --calibration: invalid value "custom=relayfleet": shape custom given twice` + "\n"},
		{"calibration for a shape not planned", []string{"plan", "--listeners", "5", "--shape", "cloud/c12", "--calibration", "cloud/c2=story"}, "fleet plan: flag --calibration: no box of this plan has shape cloud/c2 (its shapes: cloud/c12@eu)\n"},
		{"missing file", []string{"plan", "--listeners", "5", "--inventory", filepath.Join(dir, "nope.yaml")}, "fleet plan: " + filepath.Join(dir, "nope.yaml") + ": no such file\n"},
		{"negative count", []string{"plan", "--listeners", "5", "--inventory", bad}, "fleet plan: " + bad + ":7: steady[0].count: must not be negative, got -2\n"},
		{"huge count", []string{"plan", "--listeners", "5", "--inventory", huge}, "fleet plan: " + huge + ":7: steady[0].count: want at most 100000 boxes, got 99999999999999\n"},
		{"bad calibration file", []string{"plan", "--listeners", "5", "--calibration", badCal}, "fleet plan: " + badCal + ":2: listeners_per_core: want a number of listeners above 0 and at most 1000000, got 1e+300\n"},
		{"loadtest JSON without a fit", []string{"plan", "--listeners", "5", "--calibration", noFit}, "fleet plan: " + noFit + ": no fit (too few measured steps); it cannot calibrate a plan\n"},
		{"unknown key", []string{"plan", "--listeners", "5", "--inventory", unknown}, "fleet plan: " + unknown + `:2: stedy: unknown key "stedy" at the top (known: version, name, admin, origin, origins, access, steady, burst, surge, state, regions)` + "\n"},
		{"stray argument", []string{"plan", "--listeners", "5", "extra"}, `fleet plan: unexpected argument "extra"` + "\n"},
		{"unknown command", []string{"plna"}, `fleet: unknown command "plna" (try fleet help)` + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if len(args) > 1 {
				args = append(append([]string{args[0]}, fixture...), args[1:]...)
			}
			out, errOut, code := fleet(t, args...)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			if errOut != tc.want {
				t.Errorf("stderr\n got %q\nwant %q", errOut, tc.want)
			}
			if strings.Count(errOut, "\n") != 1 {
				t.Errorf("stderr is not one line: %q", errOut)
			}
		})
	}
}

func TestPlanShortfallIsFailure(t *testing.T) {
	args := append(append([]string{"plan"}, fixture...), "--listeners", "1000000", "--inventory", "testdata/fleet.yaml", "--shape", "cloud/c12")
	// With --shape the pool max does not apply: this one succeeds.
	if _, errOut, code := fleet(t, args...); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	dir := t.TempDir()
	inv := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(inv, []byte("version: 1\nburst:\n  - {name: b, provider: cloud, shape: c12, location: fsn1, max: 2}\n"), 0o644)
	args = append(append([]string{"plan"}, fixture...), "--listeners", "100000", "--inventory", inv)
	_, errOut, code := fleet(t, args...)
	if code != 1 || !strings.Contains(errOut, "not enough capacity") {
		t.Errorf("exit %d, stderr %q; want 1 and a shortfall", code, errOut)
	}
}
