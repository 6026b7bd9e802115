package inventories

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const goodEvents = `version: 1
fleet: fleet.yaml
events:
  - name: final
    start: 2026-12-05T19:00:00Z
    end: 2026-12-05T22:00:00Z
    peak_listeners: 5000
    broadcast: live/final
    burst:
      provider: lab
      shape: small
      max: 3
`

func writeEvents(t *testing.T, events string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fleet.yaml"), []byte(goodFleet), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "events.yaml")
	if err := os.WriteFile(path, []byte(events), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadEvents(t *testing.T) {
	cat := shippedCatalogue(t)
	e, f, err := LoadEvents(writeEvents(t, goodEvents), cat)
	if err != nil {
		t.Fatal(err)
	}
	if f == nil || len(f.Steady) == 0 {
		t.Fatalf("fleet not loaded: %+v", f)
	}
	ev, ok := e.Event("final")
	if !ok {
		t.Fatal("no event final")
	}
	if ev.LeadTime.D() != DefaultLeadTime || ev.DrainTime.D() != DefaultDrainTime || ev.Overrun() != DefaultMaxOverrun {
		t.Errorf("defaults: lead %v drain %v max overrun %v", ev.LeadTime.D(), ev.DrainTime.D(), ev.Overrun())
	}
	// max_overrun: 0 is no overrun, not the default.
	e, _, err = LoadEvents(writeEvents(t, strings.Replace(goodEvents, "    burst:", "    max_overrun: 0s\n    burst:", 1)), cat)
	if err != nil {
		t.Fatal(err)
	}
	if ev, _ := e.Event("final"); ev.Overrun() != 0 {
		t.Errorf("max_overrun: 0s read as %v", ev.Overrun())
	}
	if ev.Burst.Name != "final" || ev.Burst.BasePort != DefaultBasePort || ev.Burst.Max != 3 {
		t.Errorf("burst = %+v", ev.Burst)
	}
	if want := time.Date(2026, 12, 5, 18, 30, 0, 0, time.UTC); !ev.UpAt().Equal(want) {
		t.Errorf("UpAt = %v, want %v", ev.UpAt(), want)
	}
	if want := time.Date(2026, 12, 5, 22, 15, 0, 0, time.UTC); !ev.GoneBy().Equal(want) {
		t.Errorf("GoneBy = %v, want %v", ev.GoneBy(), want)
	}
}

func TestShippedEventsLoad(t *testing.T) {
	cat := shippedCatalogue(t)
	for _, name := range []string{EventsFile, "lab-events.yaml"} {
		e, _, err := LoadEvents(Embedded(name), cat)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(e.Events) == 0 {
			t.Errorf("%s: no events", name)
		}
	}
}

// candidates is goodEvents with its burst given as candidates (list: the
// flow sequence's items).
func candidates(list string) string {
	return strings.Replace(goodEvents, "      provider: lab\n      shape: small\n", "      candidates: ["+list+"]\n", 1)
}

// TestLoadEventsCandidates: a burst's candidates make the first the
// pool's provider, shape and location; the others keep their own.
func TestLoadEventsCandidates(t *testing.T) {
	e, _, err := LoadEvents(writeEvents(t, candidates("{provider: lab, shape: medium, max: 2}, {provider: lab, shape: small}")), shippedCatalogue(t))
	if err != nil {
		t.Fatal(err)
	}
	b := e.Events[0].Burst
	if b.Provider != "lab" || b.Shape != "medium" || len(b.Choices()) != 2 || b.Choices()[1].Ref() != "lab/small" || b.Choices()[0].Max != 2 {
		t.Errorf("burst = %+v", b)
	}
	if box := b.CandidateBox(1); box.Shape != "small" || box.BasePort != DefaultBasePort {
		t.Errorf("candidate 1's box = %+v", box)
	}
}

func TestLoadEventsErrors(t *testing.T) {
	cat := shippedCatalogue(t)
	rep := func(old, new string) string { return strings.Replace(goodEvents, old, new, 1) }
	for _, tc := range []struct {
		name, yaml string
		line       int
		field      string
		msg        string
	}{
		{"bad name", rep("name: final", "name: Final_1"), 4, "events[0].name", "lowercase"},
		{"named surge", rep("name: final", "name: surge"), 4, "events[0].name", "the fleet's surge"},
		{"bad start", rep("start: 2026-12-05T19:00:00Z", "start: tomorrow"), 5, "events[0].start", "RFC 3339"},
		{"no zone", rep("start: 2026-12-05T19:00:00Z", "start: 2026-12-05T19:00:00"), 5, "events[0].start", "RFC 3339"},
		{"end before start", rep("end: 2026-12-05T22:00:00Z", "end: 2026-12-05T18:00:00Z"), 6, "events[0].end", "not after start"},
		{"no peak", rep("peak_listeners: 5000", "peak_listeners: 0"), 7, "events[0].peak_listeners", "positive"},
		{"no broadcast", rep("    broadcast: live/final\n", ""), 0, "events[0].broadcast", "missing"},
		{"bad lead", rep("    burst:", "    lead_time: soon\n    burst:"), 9, "events[0].lead_time", "duration"},
		{"bad max overrun", rep("    burst:", "    max_overrun: long\n    burst:"), 9, "events[0].max_overrun", "duration"},
		{"negative max overrun", rep("    burst:", "    max_overrun: -1h\n    burst:"), 0, "events[0].max_overrun", "must not be negative"},
		{"static burst", rep("provider: lab", "provider: static"), 10, "events[0].burst.provider", "static servers"},
		{"unknown shape", rep("shape: small", "shape: huge"), 11, "events[0].burst.shape", `no shape "huge"`},
		{"negative max", rep("max: 3", "max: -1"), 12, "events[0].burst.max", "negative"},
		{"unknown key", rep("    burst:", "    burts: 1\n    burst:"), 9, "events[0].burts", "unknown key"},
		{"candidate shape", candidates("{provider: lab, shape: small}, {provider: lab, shape: huge}"), 0, "events[0].burst.candidates[1].shape", `no shape "huge"`},
		{"candidate twice", candidates("{provider: lab, shape: small}, {provider: lab, shape: small}"), 0, "events[0].burst.candidates[1]", "lab/small is candidates[0] already"},
		{"candidate static", candidates("{provider: lab, shape: small}, {provider: static, shape: small}"), 0, "events[0].burst.candidates[1].provider", "static servers"},
		{"candidate max", candidates("{provider: lab, shape: small, max: -2}"), 0, "events[0].burst.candidates[0].max", "negative"},
		{"pool not the first", strings.Replace(candidates("{provider: lab, shape: medium}"), "      max: 3\n", "      shape: small\n", 1), 0, "events[0].burst.shape", `"small" is not candidates[0]'s "medium"`},
		{"too many", candidates(strings.Repeat("{provider: lab, shape: small}, ", MaxCandidates) + "{provider: lab, shape: medium}"), 0, "events[0].burst.candidates", "at most 8"},
		{"no fleet", rep("fleet: fleet.yaml\n", ""), 0, "fleet", "missing"},
		{"named like a steady group", rep("name: final", "name: a"), 4, "events[0].name", `event "a" is named like steady group "a" (steady[0] of fleet file fleet.yaml)`},
		{"duplicate", goodEvents + strings.Join(strings.SplitAfter(goodEvents, "\n")[3:], ""), 13, "events[1].name", "already the name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeEvents(t, tc.yaml)
			_, _, err := LoadEvents(path, cat)
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if ie.File != path || (tc.line != 0 && ie.Line != tc.line) || ie.Field != tc.field || !strings.Contains(ie.Msg, tc.msg) {
				t.Errorf("got %v\nwant line=%d field=%q msg containing %q", err, tc.line, tc.field, tc.msg)
			}
		})
	}
}

func TestLoadEventsBadFleet(t *testing.T) {
	path := writeEvents(t, strings.Replace(goodEvents, "fleet: fleet.yaml", "fleet: nope.yaml", 1))
	_, _, err := LoadEvents(path, shippedCatalogue(t))
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("err = %v, want one naming nope.yaml", err)
	}
}
