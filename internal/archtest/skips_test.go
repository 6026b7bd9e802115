package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// skipMethods are testing.TB's ways to skip a test.
var skipMethods = map[string]bool{"Skip": true, "Skipf": true, "SkipNow": true}

// rawSkips returns one line per direct skip call (t.Skip, t.Skipf,
// t.SkipNow, on any receiver) in the Go file src: a skip that CI=true
// does not turn into a failure. Calls of testutil's functions (Skipf,
// HelperProcess, Short) are the allowed ways to skip, as is anything
// inside internal/testutil, which the caller leaves out.
func rawSkips(fset *token.FileSet, name string, src []byte) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	helpers := map[string]bool{} // the names testutil is imported under
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == TestUtil {
			n := "testutil"
			if imp.Name != nil {
				n = imp.Name.Name
			}
			helpers[n] = true
		}
	}
	var bad []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !skipMethods[sel.Sel.Name] {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && helpers[id.Name] {
			return true
		}
		bad = append(bad, fmt.Sprintf("%s: direct %s call: use testutil.Skipf (a failure under CI=true), testutil.Short or testutil.HelperProcess", fset.Position(call.Pos()), sel.Sel.Name))
		return true
	})
	return bad, nil
}

func TestRawSkipsCatchesDirectCalls(t *testing.T) {
	const head = "package x\n\nimport (\n\t\"testing\"\n\n\ttu \"" + TestUtil + "\"\n)\n\n"
	for _, tc := range []struct {
		body string
		want int
	}{
		{"func TestA(t *testing.T) { t.Skip(\"no\") }", 1},
		{"func TestA(t *testing.T) { t.Skipf(\"no %d\", 1) }", 1},
		{"func TestA(t *testing.T) { t.SkipNow() }", 1},
		{"func BenchmarkA(b *testing.B) { b.Skip() }", 1},
		{"func helper(tb testing.TB) { tb.Skipf(\"x\") }", 1},
		{"func TestA(t *testing.T) { t.Run(\"s\", func(t *testing.T) { t.Skip() }) }", 1},
		{"func TestA(t *testing.T) { tu.Skipf(t, \"no %s\", \"tool\") }", 0},
		{"func TestA(t *testing.T) { tu.Short(t, \"make test-long\"); _ = tu.HelperProcess(t, \"E\", \"TestB\") }", 0},
		{"func TestA(t *testing.T) { t.Skipped() }", 0},
	} {
		bad, err := rawSkips(token.NewFileSet(), "x_test.go", []byte(head+tc.body+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		if len(bad) != tc.want {
			t.Errorf("%s: %q, want %d lines", tc.body, bad, tc.want)
		}
	}
	// testutil under its own name is allowed; another package's Skipf is not.
	src := "package x\n\nimport (\n\t\"testing\"\n\n\t\"" + TestUtil + "\"\n\tother \"example.com/other\"\n)\n\nfunc TestA(t *testing.T) { testutil.Skipf(t, \"x\"); other.Skipf(t, \"x\") }\n"
	if bad, err := rawSkips(token.NewFileSet(), "x_test.go", []byte(src)); err != nil || len(bad) != 1 || !strings.Contains(bad[0], "x_test.go:10:") {
		t.Errorf("testutil.Skipf and other.Skipf: %q, %v; want other's call alone", bad, err)
	}
}

// TestNoRawSkips: no _test.go file of the module outside third_party and
// internal/testutil calls t.Skip, t.Skipf or t.SkipNow itself. Under
// CI=true a test that cannot run must fail (testutil.Skipf), so a skip
// must go through testutil; build tags are no exception (the parser reads
// lab and e2e files too).
func TestNoRawSkips(t *testing.T) {
	dir := root(t)
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			name := d.Name()
			if path != dir && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") ||
				rel == "third_party" || rel == filepath.Join("internal", "testutil") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		bad, err := rawSkips(fset, rel, src)
		if err != nil {
			return err
		}
		for _, line := range bad {
			t.Error(line)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("read %d _test.go files under %s: the walk missed the module", files, dir)
	}
}
