package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// UPDATE_GOLDEN=1 go test ./... rewrites the golden files in testdata/.
var update = os.Getenv("UPDATE_GOLDEN") != ""

// fleet runs the fleet command line in-process.
func fleet(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (UPDATE_GOLDEN=1 go test ./cmd/fleet creates it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (UPDATE_GOLDEN=1 go test ./cmd/fleet rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
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
// only through golden files.
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
		out, errOut, code := fleet(t, "plan", "--listeners", "100000", "--box", box, "--json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var d doc
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatal(err)
		}
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

func TestPlanBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "fleet.yaml")
	os.WriteFile(bad, []byte("version: 1\nsteady:\n  - name: a\n    provider: cloud\n    shape: c12\n    location: fsn1\n    count: -2\n"), 0o644)
	unknown := filepath.Join(dir, "unknown.yaml")
	os.WriteFile(unknown, []byte("version: 1\nstedy: []\n"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing listeners", []string{"plan"}, "fleet plan: flag --listeners: required\n"},
		{"negative listeners", []string{"plan", "--listeners", "-5"}, "fleet plan: flag --listeners: must not be negative, got -5\n"},
		{"listeners not a number", []string{"plan", "--listeners", "many"}, `fleet plan: flag --listeners: invalid value "many": parse error` + "\n"},
		{"unknown flag", []string{"plan", "--listeners", "5", "--cores", "3"}, "fleet plan: flag --cores: unknown flag\n"},
		{"malformed box", []string{"plan", "--listeners", "5", "--box", "cores=12,ram=lots"}, `fleet plan: flag --box: invalid value "cores=12,ram=lots": ram: want a size such as 64GiB, got "lots"` + "\n"},
		{"box unknown key", []string{"plan", "--listeners", "5", "--box", "cores=12,ram=1GiB,disks=2"}, `fleet plan: flag --box: invalid value "cores=12,ram=1GiB,disks=2": unknown key "disks" (want cores, ram, processes, uplink)` + "\n"},
		{"box without ram", []string{"plan", "--listeners", "5", "--box", "cores=12"}, `fleet plan: flag --box: invalid value "cores=12": cores and ram are required, as in cores=12,ram=64GiB` + "\n"},
		{"unknown shape", []string{"plan", "--listeners", "5", "--shape", "cloud/c99"}, `fleet plan: flag --shape: shape "cloud/c99": provider cloud has no shape "c99" (known: c12, c2)` + "\n"},
		{"unusable shape", []string{"plan", "--listeners", "5", "--shape", "freecdn/free"}, "fleet plan: flag --shape: freecdn cannot carry relay audio: cannot run a QUIC relay\n"},
		{"shape and box", []string{"plan", "--listeners", "5", "--shape", "cloud/c12", "--box", "cores=1,ram=1GiB"}, "fleet plan: flags --shape and --box: give one, not both\n"},
		{"negative hours", []string{"plan", "--listeners", "5", "--event-hours", "-1"}, "fleet plan: flag --event-hours: want a positive number of hours, got -1\n"},
		{"missing file", []string{"plan", "--listeners", "5", "--inventory", filepath.Join(dir, "nope.yaml")}, "fleet plan: " + filepath.Join(dir, "nope.yaml") + ": no such file\n"},
		{"negative count", []string{"plan", "--listeners", "5", "--inventory", bad}, "fleet plan: " + bad + ":7: steady[0].count: must not be negative, got -2\n"},
		{"unknown key", []string{"plan", "--listeners", "5", "--inventory", unknown}, "fleet plan: " + unknown + `:2: stedy: unknown key "stedy" at the top (known: version, name, admin, origin, access, steady, burst)` + "\n"},
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
