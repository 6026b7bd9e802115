package inventories

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// checkLoadError fails t unless err is one line that starts with one of
// files, as the loaders promise.
func checkLoadError(t *testing.T, err error, files ...string) {
	t.Helper()
	msg := err.Error()
	if strings.ContainsAny(msg, "\n\r") {
		t.Fatalf("error is more than one line: %q", msg)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %q is a %T, not an *inventories.Error", msg, err)
	}
	for _, f := range files {
		if e.File == f && strings.HasPrefix(msg, f+":") {
			return
		}
	}
	t.Fatalf("error %q does not start with the file (%s)", msg, strings.Join(files, " or "))
}

func shippedSeed(f *testing.F, name string) []byte {
	b, err := Shipped.ReadFile(name)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

func writeFuzzFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// FuzzLoadFleet loads arbitrary fleet files. An error is one line naming
// the file; a fleet that loads, written back as YAML, loads again to the
// same fleet.
func FuzzLoadFleet(f *testing.F) {
	f.Add([]byte(goodFleet))
	f.Add(shippedSeed(f, LabFile))
	f.Add(shippedSeed(f, "example.yaml"))
	f.Add([]byte("version: 1\nsteady: [{name: a, provider: lab, shape: small, count: 1}, {name: a}]\n"))
	f.Add([]byte("version: 1\nadmin: {ranges: [0.0.0.0/0]}\n"))
	f.Add([]byte("version: 2\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("version: 1\nname: &n x\norigin: [*n, 'http://o:1/']\n"))
	f.Add([]byte(""))
	f.Add([]byte("\t"))
	cat, err := LoadCatalogue(Embedded(ProvidersFile))
	if err != nil {
		f.Fatal(err)
	}
	dir := f.TempDir()
	path, again := filepath.Join(dir, "fleet.yaml"), filepath.Join(dir, "again.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		defer watchdog(data)()
		writeFuzzFile(t, path, data)
		fl, err := LoadFleet(path, cat)
		if err != nil {
			checkLoadError(t, err, path)
			return
		}
		out, err := yaml.Marshal(fl)
		if err != nil {
			t.Fatalf("marshal accepted fleet: %v", err)
		}
		writeFuzzFile(t, again, out)
		fl2, err := LoadFleet(again, cat)
		if err != nil {
			t.Fatalf("accepted fleet written back does not load: %v\n%s", err, out)
		}
		out2, err := yaml.Marshal(fl2)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("accepted fleet changed on a round trip:\n%s\nthen\n%s", out, out2)
		}
	})
}

// eventsOut is an events file as YAML writes it back: times in RFC 3339
// and durations as Go prints them.
type eventsOut struct {
	Version int        `yaml:"version"`
	Fleet   string     `yaml:"fleet"`
	Events  []eventOut `yaml:"events"`
}

type eventOut struct {
	Name          string `yaml:"name"`
	Start         string `yaml:"start"`
	End           string `yaml:"end"`
	PeakListeners int    `yaml:"peak_listeners"`
	Broadcast     string `yaml:"broadcast"`
	Burst         Pool   `yaml:"burst"`
	LeadTime      string `yaml:"lead_time"`
	DrainTime     string `yaml:"drain_time"`
	MaxOverrun    string `yaml:"max_overrun"`
}

func marshalEvents(t *testing.T, e *Events) []byte {
	t.Helper()
	o := eventsOut{Version: e.Version, Fleet: e.Fleet}
	for _, ev := range e.Events {
		o.Events = append(o.Events, eventOut{
			Name: ev.Name, Start: ev.Start.Format(time.RFC3339Nano), End: ev.End.Format(time.RFC3339Nano),
			PeakListeners: ev.PeakListeners, Broadcast: ev.Broadcast, Burst: ev.Burst,
			LeadTime: ev.LeadTime.D().String(), DrainTime: ev.DrainTime.D().String(), MaxOverrun: ev.Overrun().String(),
		})
	}
	b, err := yaml.Marshal(o)
	if err != nil {
		t.Fatalf("marshal accepted events: %v", err)
	}
	return b
}

// FuzzLoadEvents loads arbitrary events files beside a good fleet file.
// An error is one line naming the events file or the fleet file it names;
// events that load, written back as YAML, load again to the same events.
func FuzzLoadEvents(f *testing.F) {
	f.Add([]byte(goodEvents))
	f.Add([]byte(strings.Replace(string(shippedSeed(f, "lab-events.yaml")), "fleet: lab.yaml", "fleet: fleet.yaml", 1)))
	f.Add([]byte(strings.Replace(goodEvents, "2026-12-05T22:00:00Z", "2026-12-05T18:00:00+01:00", 1)))
	f.Add([]byte(strings.Replace(goodEvents, "max: 3", "max: 3\n    lead_time: 1h30m0.5s\n    drain_time: -1s", 1)))
	f.Add([]byte(strings.Replace(goodEvents, "max: 3", "max: 3\n    max_overrun: 0s", 1)))
	f.Add([]byte("version: 1\nfleet: missing.yaml\n"))
	f.Add([]byte("version: 1\nfleet: events.yaml\n"))
	f.Add([]byte("version: 1\nfleet: fleet.yaml\nevents: [{name: A}]\n"))
	cat, err := LoadCatalogue(Embedded(ProvidersFile))
	if err != nil {
		f.Fatal(err)
	}
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fleet.yaml"), []byte(goodFleet), 0o644); err != nil {
		f.Fatal(err)
	}
	path, again := filepath.Join(dir, "events.yaml"), filepath.Join(dir, "again.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fleet file is read from where the events file says; keep
		// the fuzzer in this directory (not /dev/zero or a FIFO).
		var peek struct {
			Fleet any `yaml:"fleet"`
		}
		if yaml.Unmarshal(data, &peek) == nil {
			if s, ok := peek.Fleet.(string); ok && !filepath.IsLocal(s) {
				return
			}
		}
		defer watchdog(data)()
		writeFuzzFile(t, path, data)
		e, fl, err := LoadEvents(path, cat)
		if err != nil {
			files := []string{path}
			// The fleet field as the loader reads it: a string, also where
			// YAML alone would make it a number ("fleet: 00").
			var asString struct {
				Fleet string `yaml:"fleet"`
			}
			if yaml.Unmarshal(data, &asString) == nil && asString.Fleet != "" {
				files = append(files, filepath.Join(dir, asString.Fleet))
			}
			checkLoadError(t, err, files...)
			return
		}
		if fl == nil {
			t.Fatal("events loaded without their fleet")
		}
		out := marshalEvents(t, e)
		writeFuzzFile(t, again, out)
		e2, _, err := LoadEvents(again, cat)
		if err != nil {
			t.Fatalf("accepted events written back do not load: %v\n%s", err, out)
		}
		if out2 := marshalEvents(t, e2); !bytes.Equal(out, out2) {
			t.Fatalf("accepted events changed on a round trip:\n%s\nthen\n%s", out, out2)
		}
	})
}

// watchdog crashes the test when the call it guards runs past a generous
// bound, so that the fuzzer records the input (it has no timeout of its
// own). It returns the function that stops it.
func watchdog(data []byte) func() {
	tm := time.AfterFunc(fuzzDeadline, func() {
		panic(fmt.Sprintf("input still being loaded after %v: %q", fuzzDeadline, data))
	})
	return func() { tm.Stop() }
}

// fuzzDeadline bounds one input; a load takes milliseconds.
const fuzzDeadline = 10 * time.Second
