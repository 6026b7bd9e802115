package archtest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// shortRE finds a test that skips itself under -short: testutil.Short as
// its first statement.
var shortRE = regexp.MustCompile(`func (Test\w+)\(t \*testing\.T\) \{\s*testutil\.Short\(t`)

// goTestRun is one `$(GO) test` line of the Makefile without -short: its
// -run pattern ("" runs every test) and its packages (./dir/).
type goTestRun struct {
	run  *regexp.Regexp
	pkgs []string
}

// makeRuns reads the `$(GO) test` lines of a Makefile that run the tests
// -short skips.
func makeRuns(makefile string) ([]goTestRun, error) {
	var runs []goTestRun
	for line := range strings.Lines(makefile) {
		if !strings.Contains(line, "$(GO) test") || strings.Contains(line, "-short") {
			continue
		}
		f := strings.Fields(line)
		r := goTestRun{run: regexp.MustCompile("")}
		for i, w := range f {
			switch {
			case w == "-run" && i+1 < len(f):
				re, err := regexp.Compile(strings.Trim(f[i+1], `'"`))
				if err != nil {
					return nil, err
				}
				r.run = re
			case strings.HasPrefix(w, "./"):
				r.pkgs = append(r.pkgs, strings.TrimSuffix(w, "/")+"/")
			}
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// unrun returns the short tests (dir: names) that no run covers.
func unrun(short map[string][]string, runs []goTestRun) []string {
	var bad []string
	for dir, names := range short {
		for _, name := range names {
			covered := false
			for _, r := range runs {
				for _, p := range r.pkgs {
					if (p == "./"+dir+"/" || p == "./.../") && r.run.MatchString(name) {
						covered = true
					}
				}
			}
			if !covered {
				bad = append(bad, dir+": "+name)
			}
		}
	}
	return bad
}

// TestShortTestsRunInMake: every test that skips under -short (make test)
// is run by a Makefile target that CI runs (make test-long, test-hostile,
// test-listen...), named by its -run pattern and its package: a test moved
// or renamed does not silently stop running.
func TestShortTestsRunInMake(t *testing.T) {
	top := root(t)
	short := map[string][]string{}
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "third_party" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".")) && p != top {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") || strings.Contains(p, "internal/archtest") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(top, filepath.Dir(p))
		for _, m := range shortRE.FindAllSubmatch(src, -1) {
			short[rel] = append(short[rel], string(m[1]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(short) < 5 {
		t.Fatalf("found only %v skipping under -short: is shortRE still right?", short)
	}
	mk, err := os.ReadFile(filepath.Join(top, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	runs, err := makeRuns(string(mk))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range unrun(short, runs) {
		t.Errorf("%s skips under -short and no Makefile `$(GO) test` line without -short runs it", line)
	}
}

func TestUnrunCatchesAMovedTest(t *testing.T) {
	runs, err := makeRuns("test-long:\n\t$(GO) test -race -short ./...\n\t$(GO) test -count=1 -run 'TestA|TestB' ./x/ ./y/\n\t$(GO) test -v ./z/\n")
	if err != nil {
		t.Fatal(err)
	}
	got := unrun(map[string][]string{"x": {"TestA"}, "y": {"TestC"}, "z": {"TestAnything"}, "w": {"TestB"}}, runs)
	want := map[string]bool{"y: TestC": true, "w: TestB": true}
	for _, g := range got {
		if !want[g] {
			t.Errorf("unrun lists %q", g)
		}
		delete(want, g)
	}
	for w := range want {
		t.Errorf("unrun misses %q", w)
	}
}
