package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/relay/loadgen"
	"github.com/relayfleet/relayfleet/relay/testutil"
)

// syntheticSteps lie on exact lines: 0.05 cores plus 1/1024 core per
// listener, 20 MB plus 50 kB per listener, 10 kbit/s per listener.
func syntheticSteps() []loadtestStep {
	var steps []loadtestStep
	for _, n := range []int{128, 256, 512, 768} {
		steps = append(steps, loadtestStep{
			Target: n, Listeners: n, CPUCores: 0.05 + float64(n)/1024,
			RSSBytes: 20_000_000 + 50_000*int64(n), BitrateBps: 10_000, Seconds: 20, Samples: 10,
		})
	}
	return steps
}

func TestLoadtestFit(t *testing.T) {
	steps := syntheticSteps()
	// A failed step is left out of the fit.
	steps = append(steps, loadtestStep{Target: 1024, Error: "load generator: boom"})
	f, err := fitSteps(steps)
	if err != nil {
		t.Fatal(err)
	}
	if f.Steps != 4 || math.Abs(f.CPUPerListener-1.0/1024) > 1e-12 || math.Abs(f.CPUIntercept-0.05) > 1e-9 || f.CPUR2 < 0.999999 {
		t.Errorf("cpu fit %+v, want slope 1/1024, intercept 0.05", f)
	}
	if f.ListenersPerCore != 1024 {
		t.Errorf("listeners per core %g, want 1024", f.ListenersPerCore)
	}
	if math.Abs(f.RAMPerListener-50_000) > 1e-6 || math.Abs(f.RAMIntercept-20_000_000) > 1e-3 {
		t.Errorf("ram fit %g + %g, want 50000 per listener + 20 MB", f.RAMPerListener, f.RAMIntercept)
	}
	if f.PayloadBitrate != 10_000 || f.WireBitrate != 12_500 {
		t.Errorf("bitrate %g payload, %g wire; want 10000 and 12500", f.PayloadBitrate, f.WireBitrate)
	}

	// Noisy points: the least-squares slope, floored.
	noisy := []loadtestStep{
		{Listeners: 100, CPUCores: 0.10, RSSBytes: 1000, BitrateBps: 1},
		{Listeners: 200, CPUCores: 0.25, RSSBytes: 2000, BitrateBps: 1},
		{Listeners: 300, CPUCores: 0.30, RSSBytes: 3000, BitrateBps: 1},
	}
	f, err = fitSteps(noisy)
	if err != nil {
		t.Fatal(err)
	}
	// slope = sum(dx dy) / sum(dx²) = (−100·−0.116… + …) = 0.001; 1/0.001 = 1000
	if math.Abs(f.CPUPerListener-0.001) > 1e-12 || f.ListenersPerCore < 999 || f.ListenersPerCore > 1000 {
		t.Errorf("noisy fit: slope %g, %g listeners per core; want 0.001 and 1000 (floored)", f.CPUPerListener, f.ListenersPerCore)
	}
}

func TestLoadtestFitRefuses(t *testing.T) {
	good := syntheticSteps()
	failed := func(s loadtestStep) loadtestStep { s.Error = "no listener connected"; return s }
	for _, tc := range []struct {
		name  string
		steps []loadtestStep
		want  string
	}{
		{"no steps", nil, "only 0 of 0 steps succeeded; a calibration needs at least 3"},
		{"two steps", good[:2], "only 2 of 2 steps succeeded"},
		{"two of four succeeded", []loadtestStep{good[0], failed(good[1]), good[2], failed(good[3])}, "only 2 of 4 steps succeeded"},
		{"no listeners", []loadtestStep{good[0], good[1], {Target: 900}}, "only 2 of 3 steps succeeded"},
		{"same listeners", []loadtestStep{good[0], good[0], good[0]}, "degenerate fit: every step measured the same listener count"},
		{"cpu falls", []loadtestStep{
			{Listeners: 100, CPUCores: 0.3, RSSBytes: 1, BitrateBps: 1},
			{Listeners: 200, CPUCores: 0.2, RSSBytes: 2, BitrateBps: 1},
			{Listeners: 300, CPUCores: 0.1, RSSBytes: 3, BitrateBps: 1},
		}, "degenerate fit: CPU does not rise with listeners"},
		{"cpu flat", []loadtestStep{
			{Listeners: 100, CPUCores: 0.2, RSSBytes: 1, BitrateBps: 1},
			{Listeners: 200, CPUCores: 0.2, RSSBytes: 2, BitrateBps: 1},
			{Listeners: 300, CPUCores: 0.2, RSSBytes: 3, BitrateBps: 1},
		}, "degenerate fit: CPU does not rise with listeners (slope 0 cores per listener)"},
		{"memory falls", []loadtestStep{
			{Listeners: 100, CPUCores: 0.1, RSSBytes: 3, BitrateBps: 1},
			{Listeners: 200, CPUCores: 0.2, RSSBytes: 2, BitrateBps: 1},
			{Listeners: 300, CPUCores: 0.3, RSSBytes: 1, BitrateBps: 1},
		}, "degenerate fit: memory does not rise with listeners"},
		{"more than a core per listener", []loadtestStep{
			{Listeners: 1, CPUCores: 1, RSSBytes: 1, BitrateBps: 1},
			{Listeners: 2, CPUCores: 3, RSSBytes: 2, BitrateBps: 1},
			{Listeners: 3, CPUCores: 5, RSSBytes: 3, BitrateBps: 1},
		}, "less than one listener per core"},
		{"nothing received", []loadtestStep{
			{Listeners: 100, CPUCores: 0.1, RSSBytes: 1},
			{Listeners: 200, CPUCores: 0.2, RSSBytes: 2},
			{Listeners: 300, CPUCores: 0.3, RSSBytes: 3},
		}, "the listeners received nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fitSteps(tc.steps)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func TestLoadtestMatchTarget(t *testing.T) {
	names := []string{"lab-1", "lab-2", "203.0.113.5", "203.0.113.6:2222", "2001:db8::1"}
	for _, tc := range []struct {
		in   string
		idx  int
		want loadtestTarget
		err  string
	}{
		{in: "lab-1", idx: 0, want: loadtestTarget{Box: "lab-1"}},
		{in: "lab-2:4444", idx: 1, want: loadtestTarget{Box: "lab-2", Port: 4444}},
		{in: "203.0.113.5", idx: 2, want: loadtestTarget{Box: "203.0.113.5"}},
		{in: "203.0.113.5:4443", idx: 2, want: loadtestTarget{Box: "203.0.113.5", Port: 4443}},
		// A static address with its SSH port is a box; a relay port after it, a process.
		{in: "203.0.113.6:2222", idx: 3, want: loadtestTarget{Box: "203.0.113.6:2222"}},
		{in: "203.0.113.6:2222:4445", idx: 3, want: loadtestTarget{Box: "203.0.113.6:2222", Port: 4445}},
		{in: "2001:db8::1", idx: 4, want: loadtestTarget{Box: "2001:db8::1"}},
		{in: "2001:db8::1:4443", idx: 4, want: loadtestTarget{Box: "2001:db8::1", Port: 4443}},
		{in: "lab-1:http", err: `flag --target: "lab-1:http": want BOX or BOX:PORT with a port from 1 to 65535`},
		{in: "lab-1:0", err: "with a port from 1 to 65535"},
		{in: "lab-1:70000", err: "with a port from 1 to 65535"},
		{in: "lab-3", err: `flag --target: no box "lab-3" in the inventory's lab and static groups (boxes: lab-1, lab-2, 203.0.113.5, 203.0.113.6:2222, 2001:db8::1)`},
		{in: "lab-3:4443", err: `no box "lab-3:4443"`},
		{in: ":4443", err: `no box ":4443"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			idx, got, err := matchTarget(names, tc.in)
			if tc.err != "" {
				var ue *usageError
				if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err %v, want a usage error with %q", err, tc.err)
				}
				return
			}
			if err != nil || idx != tc.idx || got != tc.want {
				t.Errorf("got %d %+v %v, want %d %+v", idx, got, err, tc.idx, tc.want)
			}
		})
	}
}

func TestLoadtestParseSteps(t *testing.T) {
	got, err := parseSteps("400, 100,200")
	if err != nil || !slices.Equal(got, []int{100, 200, 400}) {
		t.Errorf("got %v %v", got, err)
	}
	for in, want := range map[string]string{
		"100,200":                "flag --steps: want at least 3 listener counts to fit a curve, got 2",
		"100,x,200":              `flag --steps: "x" is not a positive listener count`,
		"0,100,200":              `flag --steps: "0" is not a positive listener count`,
		"100,100,200":            "flag --steps: 100 is given twice",
		"100,,200,300":           `flag --steps: "" is not a positive listener count`,
		"-5,100,200,30":          `"-5" is not a positive listener count`,
		"100,200,99999999999999": "flag --steps: 99999999999999 is out of range: want listener counts from 1 to 1000000",
	} {
		if _, err := parseSteps(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", in, err, want)
		}
	}
	def, err := parseSteps(defaultSteps())
	if err != nil || len(def) != 4 || def[0] < 100 {
		t.Errorf("default steps %q: %v %v", defaultSteps(), def, err)
	}
}

// loadtestCLI runs fleet loadtest as fleet's run would: through the
// command table once it lists loadtest, and until then mapping the error
// to stderr and an exit code the way run does.
func loadtestCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	if slices.ContainsFunc(commands(), func(c command) bool { return c.name == "loadtest" }) {
		return fleet(t, append([]string{"loadtest"}, args...)...)
	}
	var out bytes.Buffer
	err := runLoadtest(context.Background(), args, outStreams(&out))
	var ue *usageError
	var ie *inventories.Error
	var ee *exitError
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return out.String(), "", exitOK
	case errors.As(err, &ee):
		code = ee.code
	case errors.As(err, &ue) || errors.As(err, &ie):
		code = exitUsage
	default:
		code = exitFailure
	}
	return out.String(), "fleet loadtest: " + oneLine(err) + "\n", code
}

func TestLoadtestFlagErrors(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(inv, []byte("version: 1\nname: x\nboxes: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	relay := filepath.Join(dir, "relay")
	if err := os.WriteFile(relay, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExec := filepath.Join(dir, "relay.txt")
	testutil.WriteFile(t, notExec, []byte("x"), 0o644)
	base := []string{"--inventory", inv, "--target", "lab-1", "--relay-binary", relay}
	with := func(extra ...string) []string { return append(slices.Clone(base), extra...) }
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no inventory", []string{"--target", "lab-1"}, "flag --inventory: required"},
		{"no target", []string{"--inventory", inv}, "flag --target: required (BOX or BOX:PORT)"},
		{"unknown flag", with("--listeners", "5"), "flag --listeners: unknown flag"},
		{"positional", with("extra"), `unexpected argument "extra"`},
		{"steps too few", with("--steps", "100,200"), "flag --steps: want at least 3 listener counts"},
		{"steps not numbers", with("--steps", "a,b,c"), `flag --steps: "a" is not a positive listener count`},
		{"step duration bad", with("--step-duration", "soon"), `flag --step-duration: invalid value "soon"`},
		{"step duration short", with("--step-duration", "1s"), "flag --step-duration: 1s is out of range: want 2s to 1h"},
		{"ramp zero", with("--ramp", "0"), "flag --ramp: 0 is out of range: want 0.1 to 100000"},
		{"ramp negative", with("--ramp", "-3"), "flag --ramp: -3 is out of range: want 0.1 to 100000"},
		{"ramp not a number", with("--ramp", "fast"), `flag --ramp: invalid value "fast"`},
		{"relay missing", []string{"--inventory", inv, "--target", "lab-1", "--relay-binary", filepath.Join(dir, "nope")}, "flag --relay-binary: "},
		{"relay not executable", []string{"--inventory", inv, "--target", "lab-1", "--relay-binary", notExec}, "flag --relay-binary: " + notExec + " is not an executable"},
		{"out missing", with("--out", filepath.Join(dir, "missing")), "flag --out: " + filepath.Join(dir, "missing") + " is not a directory"},
		{"out a file", with("--out", inv), "flag --out: " + inv + " is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := loadtestCLI(t, tc.args...)
			if code != exitUsage || !strings.HasPrefix(errOut, "fleet loadtest: ") || !strings.Contains(errOut, tc.want) || strings.Count(errOut, "\n") != 1 || out != "" {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit 2 and one line with %q", code, errOut, out, tc.want)
			}
		})
	}
	// An inventory that does not load is bad input too, named by file.
	_, errOut, code := loadtestCLI(t, base...)
	if code != exitUsage || !strings.Contains(errOut, inv) {
		t.Errorf("bad inventory: exit %d, %q", code, errOut)
	}
	out, errOut, code := loadtestCLI(t, "-h")
	if code != exitOK || errOut != "" || !strings.Contains(out, "usage: fleet loadtest") || !strings.Contains(out, "-step-duration") {
		t.Errorf("-h: exit %d, %q, %q", code, errOut, out)
	}
}

func TestLoadtestCalibrationRoundTrip(t *testing.T) {
	f, err := fitSteps(syntheticSteps())
	if err != nil {
		t.Fatal(err)
	}
	cur, err := inventories.LoadCalibration(inventories.Embedded(inventories.CalibrationFile))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, inventories.CalibrationFile)
	measured := `lab-1 on lab-1, 1 core AMD EPYC "Genoa" 9454: 48-Core, relay 1ef1156ec37d, 2026-11-29`
	text := calibrationYAML(f, cur, inventories.Embedded(inventories.CalibrationFile), measured, "2026-11-29",
		"the load generator runs on this machine (vm, 2 cores) and shares its CPU with the lab boxes: #not a key: 1", syntheticSteps())
	if err := writeCalibration(path, text); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	got, err := inventories.LoadCalibration(path)
	if err != nil {
		t.Fatal(err)
	}
	want := inventories.Calibration{
		Version: 1, Source: inventories.SourceLoadtest, MeasuredOn: measured, Date: "2026-11-29",
		ListenersPerCore: 1024, ListenersPerSocket: cur.ListenersPerSocket, RAMPerListener: 50_000,
		BitratePerListener: 12_500, UplinkHeadroom: cur.UplinkHeadroom,
	}
	if *got != want {
		t.Errorf("loaded\n%+v\nwant\n%+v\n%s", *got, want, text)
	}
	for _, s := range []string{"times\n# 1.25 for the QUIC, UDP and IP headers", "Not measured: one UDP socket's drain ceiling", "kept from the shipped relayfleet calibration (source: bench)"} {
		if !strings.Contains(string(text), s) {
			t.Errorf("calibration.yaml lacks %q:\n%s", s, text)
		}
	}
	// fleet plan finds it beside the inventory.
	if b := inventories.Beside(filepath.Join(dir, "fleet.yaml"), inventories.CalibrationFile); b != path {
		t.Errorf("Beside = %s, want %s", b, path)
	}

	// A calibration that would not load is not written, and the one there stays.
	bad := f
	bad.WireBitrate = 0.1 // rounds to 0 bit/s
	if err := writeCalibration(path, calibrationYAML(bad, cur, path, measured, "2026-11-29", "x", nil)); err == nil || !strings.Contains(err.Error(), "bitrate_per_listener") {
		t.Errorf("bad calibration: err %v", err)
	}
	if after, err := inventories.LoadCalibration(path); err != nil || *after != want {
		t.Errorf("the calibration there changed: %+v %v", after, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("files left in %s: %v", dir, names)
	}
}

// The sampler's output from a lab box (hybrid cgroups: the unified
// hierarchy has cpu.stat, v1 memory has the memory).
const labSample = `1795995295732665628
== 4443
cgroup /system.slice/system-relay.slice/relay@4443.service
cpu_usec 1234567
memory 29376512
sd_cpu_nsec [not set]
sd_memory 29376512
ticks 120 100
stats {  "sessions": 51,  "publishers": 1,  "subscribers": 50,  "headroom": 6449}
== 4444
cgroup /system.slice/system-relay.slice/relay@4444.service
sd_cpu_nsec 5000000000
sd_memory 1000
ticks 300 100
stats 
== 4445
cgroup /system.slice/system-relay.slice/relay@4445.service
sd_cpu_nsec [not set]
sd_memory [not set]
ticks 250 100
stats {"subscribers": 0}
== udp
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 25622 0 0 37610 17 0 0 0 0
`

func TestLoadtestParseSample(t *testing.T) {
	s, err := parseSample(labSample)
	if err != nil {
		t.Fatal(err)
	}
	if s.At.UnixNano() != 1795995295732665628 || s.RcvbufErrors != 17 || len(s.Procs) != 3 {
		t.Errorf("sample %+v", s)
	}
	p := s.Procs[4443]
	if p.CPUUsec != 1234567 || p.CPUFrom != "cgroup cpu.stat" || p.Memory != 29376512 || p.Subscribers != 50 || !p.StatsOK || p.Cgroup != "/system.slice/system-relay.slice/relay@4443.service" {
		t.Errorf("4443: %+v", p)
	}
	// systemd's accounting, then the main process's ticks, when the cgroup files are not there.
	if p := s.Procs[4444]; p.CPUUsec != 5_000_000 || p.CPUFrom != "systemd CPUUsageNSec" || p.Memory != 1000 || p.StatsOK {
		t.Errorf("4444: %+v", p)
	}
	if p := s.Procs[4445]; p.CPUUsec != 2_500_000 || p.CPUFrom != "the main process's ticks" || !p.StatsOK || p.Subscribers != 0 {
		t.Errorf("4445: %+v", p)
	}
	if _, err := parseSample("ssh: no\n"); err == nil {
		t.Error("a sample without the box clock parsed")
	}
	// The script the box runs names every port.
	script := sampleScript([]int{4443, 4444})
	for _, s := range []string{"relay@4443.service", "relay@4444.service", "/dev/tcp/127.0.0.1/4444", "/proc/net/snmp", "usage_usec", "memory.current", "memory.usage_in_bytes"} {
		if !strings.Contains(script, s) {
			t.Errorf("sample script lacks %q", s)
		}
	}
}

func TestLoadtestMeasureWindow(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	sample := func(sec float64, subs []int64, cpuUsec []int64, mem int64, rcvbuf int64) boxSample {
		s := boxSample{At: t0.Add(time.Duration(sec * float64(time.Second))), Procs: map[int]procSample{}, RcvbufErrors: rcvbuf}
		for i, port := range []int{4443, 4444} {
			s.Procs[port] = procSample{CPUUsec: cpuUsec[i], Memory: mem, Subscribers: subs[i], StatsOK: true, CPUFrom: "cgroup cpu.stat"}
		}
		return s
	}
	samples := []boxSample{
		sample(0, []int64{10, 10}, []int64{0, 0}, 100, 0),                  // ramping
		sample(2, []int64{50, 50}, []int64{100_000, 100_000}, 200, 5),      // all served
		sample(4, []int64{50, 49}, []int64{300_000, 300_000}, 300, 6),      // one short: within 1%
		sample(6, []int64{50, 50}, []int64{500_000, 500_000}, 400, 9),      // all served
		sample(8, []int64{20, 0}, []int64{9_000_000, 9_000_000}, 900, 100), // leaving
	}
	st := loadtestStep{Target: 100, Listeners: 100}
	if err := measureWindow(&st, samples, []int{4443, 4444}); err != nil {
		t.Fatal(err)
	}
	// 800 ms of CPU over 4 s: 0.2 cores; memory the mean of 2×(200, 300, 400).
	if math.Abs(st.CPUCores-0.2) > 1e-9 || st.RSSBytes != 600 || st.RcvbufErrors != 4 || st.Seconds != 4 || st.Samples != 3 || st.CPUFrom != "cgroup cpu.stat" {
		t.Errorf("step %+v", st)
	}
	st = loadtestStep{Target: 100, Listeners: 100}
	err := measureWindow(&st, samples[:2], []int{4443, 4444})
	if err == nil || !strings.Contains(err.Error(), "in 1 samples, 2 needed (most seen 100)") {
		t.Errorf("one steady sample: %v", err)
	}
}

func TestLoadtestDraw(t *testing.T) {
	steps := append(syntheticSteps(), loadtestStep{Target: 2000, Error: "failed"})
	f, err := fitSteps(steps)
	if err != nil {
		t.Fatal(err)
	}
	for _, fit := range []*loadtestFit{&f, nil} {
		svg, err := drawLoadtest("lab-1", steps, fit)
		if err != nil {
			t.Fatal(err)
		}
		dec := xml.NewDecoder(bytes.NewReader(svg))
		for {
			if _, err := dec.Token(); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Fatalf("svg does not parse: %v", err)
				}
				break
			}
		}
		for _, s := range []string{"% of a core", "MiB", "drops"} {
			if !strings.Contains(string(svg), s) {
				t.Errorf("svg lacks %q", s)
			}
		}
		if fit != nil && !strings.Contains(string(svg), "1024 listeners per core") {
			t.Error("svg lacks the fitted line")
		}
	}
}

// TestAddReports: a step adds up the processes' reports: loss over what
// was expected, the longest gap of any listener, the worst p99, the
// listeners silent at the end.
func TestAddReports(t *testing.T) {
	var st loadtestStep
	bitrate := addReports(&st, []loadgen.Report{
		{Connected: 100, FramesLost: 0, FramesExpected: 5000, GapMs: loadgen.GapStats{P50: 120, P99: 240, Max: 300}, BitrateBpsMean: 40000},
		{Connected: 50, FramesLost: 500, FramesExpected: 5000, GapMs: loadgen.GapStats{P50: 130, P99: 9000, Max: 20000}, SilentAtEnd: 3, BitrateBpsMean: 30000},
	})
	if st.Listeners != 150 || st.FramesLost != 500 || st.FramesExpected != 10000 || st.LossRatio != 0.05 ||
		st.GapMsMax != 20000 || st.GapMsP99 != 9000 || st.SilentAtEnd != 3 || bitrate != 100*40000+50*30000 {
		t.Fatalf("step %+v, bitrate %v", st, bitrate)
	}
}
