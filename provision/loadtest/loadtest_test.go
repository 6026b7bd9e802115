package loadtest

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/relay/loadgen"
)

// syntheticSteps lie on exact lines: 0.05 cores plus 1/1024 core per
// listener, 20 MB plus 50 kB per listener, 10 kbit/s per listener.
func syntheticSteps() []Step {
	var steps []Step
	for _, n := range []int{128, 256, 512, 768} {
		steps = append(steps, Step{
			Target: n, Listeners: n, CPUCores: 0.05 + float64(n)/1024,
			RSSBytes: 20_000_000 + 50_000*int64(n), BitrateBps: 10_000, Seconds: 20, Samples: 10,
		})
	}
	return steps
}

func TestLoadtestFit(t *testing.T) {
	steps := syntheticSteps()
	// A failed step is left out of the fit.
	steps = append(steps, Step{Target: 1024, Error: "load generator: boom"})
	f, err := FitSteps(steps)
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
	noisy := []Step{
		{Listeners: 100, CPUCores: 0.10, RSSBytes: 1000, BitrateBps: 1},
		{Listeners: 200, CPUCores: 0.25, RSSBytes: 2000, BitrateBps: 1},
		{Listeners: 300, CPUCores: 0.30, RSSBytes: 3000, BitrateBps: 1},
	}
	f, err = FitSteps(noisy)
	if err != nil {
		t.Fatal(err)
	}
	// slope = sum(dx dy) / sum(dx²) = (−100·−0.116… + …) = 0.001; 1/0.001 = 1000
	if math.Abs(f.CPUPerListener-0.001) > 1e-12 || f.ListenersPerCore < 999 || f.ListenersPerCore > 1000 {
		t.Errorf("noisy fit: slope %g, %g listeners per core; want 0.001 and 1000 (floored)", f.CPUPerListener, f.ListenersPerCore)
	}
}

// steps3 is three steps with these listeners, CPU and memory, each
// receiving at bps.
func steps3(listeners [3]int, cpu [3]float64, rss [3]int64, bps float64) []Step {
	steps := make([]Step, 3)
	for i := range steps {
		steps[i] = Step{Listeners: listeners[i], CPUCores: cpu[i], RSSBytes: rss[i], BitrateBps: bps}
	}
	return steps
}

func TestLoadtestFitRefuses(t *testing.T) {
	good := syntheticSteps()
	failed := func(s Step) Step { s.Error = "no listener connected"; return s }
	for _, tc := range []struct {
		name  string
		steps []Step
		want  string
	}{
		{"no steps", nil, "only 0 of 0 steps succeeded; a calibration needs at least 3"},
		{"two steps", good[:2], "only 2 of 2 steps succeeded"},
		{"two of four succeeded", []Step{good[0], failed(good[1]), good[2], failed(good[3])}, "only 2 of 4 steps succeeded"},
		{"no listeners", []Step{good[0], good[1], {Target: 900}}, "only 2 of 3 steps succeeded"},
		{"same listeners", []Step{good[0], good[0], good[0]}, "degenerate fit: every step measured the same listener count"},
		{"cpu falls", steps3([3]int{100, 200, 300}, [3]float64{0.3, 0.2, 0.1}, [3]int64{1, 2, 3}, 1), "degenerate fit: CPU does not rise with listeners"},
		{"cpu flat", steps3([3]int{100, 200, 300}, [3]float64{0.2, 0.2, 0.2}, [3]int64{1, 2, 3}, 1), "degenerate fit: CPU does not rise with listeners (slope 0 cores per listener)"},
		{"memory falls", steps3([3]int{100, 200, 300}, [3]float64{0.1, 0.2, 0.3}, [3]int64{3, 2, 1}, 1), "degenerate fit: memory does not rise with listeners"},
		{"more than a core per listener", steps3([3]int{1, 2, 3}, [3]float64{1, 3, 5}, [3]int64{1, 2, 3}, 1), "less than one listener per core"},
		{"nothing received", steps3([3]int{100, 200, 300}, [3]float64{0.1, 0.2, 0.3}, [3]int64{1, 2, 3}, 0), "the listeners received nothing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FitSteps(tc.steps)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

func TestLoadtestCalibrationRoundTrip(t *testing.T) {
	f, err := FitSteps(syntheticSteps())
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
	text := CalibrationYAML(f, cur, inventories.Embedded(inventories.CalibrationFile), measured, "2026-11-29",
		"the load generator runs on this machine (vm, 2 cores) and shares its CPU with the lab boxes: #not a key: 1", syntheticSteps())
	if err := WriteCalibration(path, text); err != nil {
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
	if err := WriteCalibration(path, CalibrationYAML(bad, cur, path, measured, "2026-11-29", "x", nil)); err == nil || !strings.Contains(err.Error(), "bitrate_per_listener") {
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

// labSample is the sampler's output from a lab box (hybrid cgroups: the
// unified hierarchy has cpu.stat, v1 memory has the memory).
const labSample = `1795995295732665628
== 4443
cgroup /system.slice/system-relay.slice/relay@4443.service
cpu_usec 1234567
memory 29376512
sd_cpu_nsec [not set]
sd_memory 29376512
procstat stat 812 (relay) S 1 812 812 0 -1 4194560 3000 0 0 0 100 20 0 0 20 0 9 0 4000 1300000000 7000 18446744073709551615
procstat net/snmp Ip: Forwarding DefaultTTL
procstat net/snmp Ip: 1 64
procstat net/snmp Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
procstat net/snmp Udp: 25622 0 0 37610 17 0 0 0 0
stats {  "sessions": 51,  "publishers": 1,  "subscribers": 50,  "headroom": 6449}
== 4444
cgroup /system.slice/system-relay.slice/relay@4444.service
sd_cpu_nsec 5000000000
sd_memory 1000
procstat stat 812 (relay) S 1 812 812 0 -1 4194560 3000 0 0 0 280 20 0 0 20 0 9 0 4000 1300000000 7000 18446744073709551615
procstat net/snmp Ip: Forwarding DefaultTTL
procstat net/snmp Ip: 1 64
procstat net/snmp Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
procstat net/snmp Udp: 25622 0 0 37610 18 0 0 0 0
stats 
== 4445
cgroup /system.slice/system-relay.slice/relay@4445.service
sd_cpu_nsec [not set]
sd_memory [not set]
procstat stat 812 (relay) S 1 812 812 0 -1 4194560 3000 0 0 0 230 20 0 0 20 0 9 0 4000 1300000000 7000 18446744073709551615
stats {"subscribers": 0}
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
	// systemd's accounting, then the main process's own CPU time (relay/procstat), when the cgroup files are not there.
	if p := s.Procs[4444]; p.CPUUsec != 5_000_000 || p.CPUFrom != "systemd CPUUsageNSec" || p.Memory != 1000 || p.StatsOK {
		t.Errorf("4444: %+v", p)
	}
	if p := s.Procs[4445]; p.CPUUsec != 2_500_000 || p.CPUFrom != "the main process's CPU time" || !p.StatsOK || p.Subscribers != 0 {
		t.Errorf("4445: %+v", p)
	}
	if _, err := parseSample("ssh: no\n"); err == nil {
		t.Error("a sample without the box clock parsed")
	}
	// The script the box runs names every port.
	script := SampleScript([]int{4443, 4444})
	for _, s := range []string{"relay@4443.service", "relay@4444.service", "/dev/tcp/127.0.0.1/4444", "procstat net/snmp", "/proc/$pid/stat", "usage_usec", "memory.current", "memory.usage_in_bytes"} {
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
	st := Step{Target: 100, Listeners: 100}
	if err := measureWindow(&st, samples, []int{4443, 4444}); err != nil {
		t.Fatal(err)
	}
	// 800 ms of CPU over 4 s: 0.2 cores; memory the mean of 2×(200, 300, 400).
	if math.Abs(st.CPUCores-0.2) > 1e-9 || st.RSSBytes != 600 || st.RcvbufErrors != 4 || st.Seconds != 4 || st.Samples != 3 || st.CPUFrom != "cgroup cpu.stat" {
		t.Errorf("step %+v", st)
	}
	st = Step{Target: 100, Listeners: 100}
	err := measureWindow(&st, samples[:2], []int{4443, 4444})
	if err == nil || !strings.Contains(err.Error(), "in 1 samples, 2 needed (most seen 100)") {
		t.Errorf("one steady sample: %v", err)
	}
}

func TestLoadtestDraw(t *testing.T) {
	steps := append(syntheticSteps(), Step{Target: 2000, Error: "failed"})
	f, err := FitSteps(steps)
	if err != nil {
		t.Fatal(err)
	}
	for _, fit := range []*Fit{&f, nil} {
		svg, err := Draw("lab-1", steps, fit)
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
	var st Step
	bitrate := addReports(&st, []loadgen.Report{
		{Connected: 100, FramesLost: 0, FramesExpected: 5000, GapMs: loadgen.GapStats{P50: 120, P99: 240, Max: 300}, BitrateBpsMean: 40000},
		{Connected: 50, FramesLost: 500, FramesExpected: 5000, GapMs: loadgen.GapStats{P50: 130, P99: 9000, Max: 20000}, SilentAtEnd: 3, BitrateBpsMean: 30000},
	})
	if st.Listeners != 150 || st.FramesLost != 500 || st.FramesExpected != 10000 || st.LossRatio != 0.05 ||
		st.GapMsMax != 20000 || st.GapMsP99 != 9000 || st.SilentAtEnd != 3 || bitrate != 100*40000+50*30000 {
		t.Fatalf("step %+v, bitrate %v", st, bitrate)
	}
}

// TestLoadtestReadsCertificateHashOverSSH: the sampler, which runs on the
// box over SSH, reads each process's certificate hash from its /stats, so
// the load generator pins it rather than fetching it over plain HTTP.
func TestLoadtestReadsCertificateHashOverSSH(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	s, err := parseSample("1795995295732665628\n== 4443\nstats {\"subscribers\": 3, \"certificate_sha256\": \"" + hash + "\"}\n== 4444\nstats \n")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Procs[4443].CertHash; got != hash {
		t.Errorf("4443: certificate hash %q, want %q", got, hash)
	}
	if got := s.Procs[4444].CertHash; got != "" {
		t.Errorf("4444 (no stats): certificate hash %q", got)
	}
}
