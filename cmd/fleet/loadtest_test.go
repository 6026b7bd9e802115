package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

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
	// The checks run before any relay is started: an ELF header is enough.
	if err := os.WriteFile(relay, []byte("\x7fELF\x02\x01\x01not run"), 0o755); err != nil {
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
