package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/relay/loadgen"
)

// TestReadLoadMatchesTheLoadGenerator: the demo reads the figures relay
// loadgen --json writes (the same JSON names), after its log lines.
func TestReadLoadMatchesTheLoadGenerator(t *testing.T) {
	rep := loadgen.Report{
		Listeners: 240, Connected: 239, Failed: 1, GapMs: loadgen.GapStats{P50: 130, P99: 1800, Max: 2400}, SilentAtEnd: 2,
		FramesReceived: 99000, FramesLost: 1000, FramesExpected: 100000, LossRatio: 0.01, Reconnects: 40,
		ReconnectsByReason: map[string]int64{"going-away": 38, "silent": 2}, ListenersLost: 1,
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "listeners.log")
	if err := os.WriteFile(path, append([]byte("time=... level=WARN msg=\"listeners started\"\n"), js...), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := readLoad(&bg{name: "listeners", log: path})
	if err != nil {
		t.Fatal(err)
	}
	if r.GapMs.P50 != 130 || r.GapMs.P99 != 1800 || r.GapMs.Max != 2400 || r.SilentAtEnd != 2 || r.FramesLost != 1000 ||
		r.FramesExpected != 100000 || r.LossRatio != 0.01 || r.ReconnectsByReason["going-away"] != 38 || r.ListenersLost != 1 {
		t.Fatalf("read %+v from %s", r, js)
	}
	row := r.row("steady listeners")
	for _, want := range []string{"| 2400 ms | 1800 ms | 2 | 1000 of 100000 | 1.000% | 40 (going-away 38, silent 2) |"} {
		if !strings.Contains(row, want) {
			t.Errorf("row %q lacks %q", row, want)
		}
	}
	if n, m := strings.Count(row, "|"), strings.Count(strings.SplitN(loadTableHeader, "\n", 2)[0], "|"); n != m {
		t.Errorf("row has %d cells' bars, the header %d", n, m)
	}
}

// TestCheckSteady: the demo fails when a steady listener is silent at the
// end, lost, or had a gap past the bound.
func TestCheckSteady(t *testing.T) {
	ok := loadReport{loadgen.Report{Listeners: 240, Connected: 240}}
	ok.GapMs.Max, ok.GapMs.P99 = 450, 300
	if err := ok.checkSteady(); err != nil {
		t.Fatalf("a clean rollout failed: %v", err)
	}
	silent := ok
	silent.SilentAtEnd = 1
	long := ok
	long.GapMs.Max = maxSteadyGapMs + 1
	lost := ok
	lost.ListenersLost = 3
	for name, r := range map[string]loadReport{"silent at the end": silent, "long gap": long, "lost": lost} {
		if err := r.checkSteady(); err == nil {
			t.Errorf("%s: %+v passed", name, r)
		}
	}
}
