package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

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
		{in: "lab-3", err: `flag --target: no box "lab-3" among the steady stack's hosts (fleet hosts lists them; boxes: lab-1, lab-2, 203.0.113.5, 203.0.113.6:2222, 2001:db8::1)`},
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

// loadtestCLI runs fleet loadtest args.
func loadtestCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return fleet(t, append([]string{"loadtest"}, args...)...)
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
