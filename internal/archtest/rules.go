package archtest

import (
	"fmt"
	"slices"
	"strings"
)

// Package is what the rules need to know about one package.
type Package struct {
	ImportPath string
	Imports    []string // direct imports
	Deps       []string // every transitive dependency
	// TestImports and XTestImports are the imports of its _test.go files.
	TestImports, XTestImports []string
}

// TestUtil is the tests' helper package: only _test.go files import it.
// It is a leaf of internal/ (it imports nothing else of the module), so
// relay's tests may use it too.
const TestUtil = Module + "/internal/testutil"

// TestHelpers are the packages only _test.go files import: TestUtil;
// programtest, which makes Pulumi stacks for tests; and systest, what the
// system tests (test/e2e, test/lab) share.
var TestHelpers = []string{TestUtil, Module + "/infra/program/programtest", Module + "/test/systest"}

// relayForbidden are the forbidden dependencies of the relay binary: it
// must stay small and free of the operator tooling.
var relayForbidden = []string{
	"github.com/pulumi/",
	"golang.org/x/crypto/ssh",
}

// RelayShared are the relay packages the fleet side may import too: the
// relay's wire types, the one way to measure a relay process, the
// load generator, and the client (the rollout's heartbeat probe). Like all of relay/ they import nothing else of the
// module, so importing them pulls no operator tooling into the relay.
var RelayShared = []string{
	Module + "/relay/wire",
	Module + "/relay/procstat",
	Module + "/relay/loadgen",
	Module + "/relay/client",
}

// layer orders the module's top-level folders: a package may import only
// packages of a lower layer (or its own folder). relay is apart: it imports
// nothing else of the module. test (the system tests, test/e2e and
// test/lab, and their helpers, test/systest) sits on top: it may import
// anything but cmd (nothing imports cmd), and runs the commands as
// binaries.
var layer = map[string]int{
	"inventories": 0,
	"sysctl":      0,
	"units":       0,
	"provision":   1,
	"infra":       2,
	"monitoring":  3,
	"cmd":         4,
	"test":        5,
}

func top(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, Module+"/")
	if !ok {
		return "", false
	}
	first, _, _ := strings.Cut(rest, "/")
	return first, true
}

// leaves are the packages of internal/ among pkgs that import nothing else
// of the module: relay and cmd/relay may import those (the command-line
// plumbing, the version stamp, the tests' helpers) and no others.
func leaves(pkgs []Package) map[string]bool {
	out := map[string]bool{}
	for _, p := range pkgs {
		if to, ok := top(p.ImportPath); !ok || to != "internal" {
			continue
		}
		leaf := true
		for _, imp := range slices.Concat(p.Imports, p.TestImports) {
			if _, ok := top(imp); ok && imp != TestUtil {
				leaf = false
			}
		}
		out[p.ImportPath] = leaf
	}
	return out
}

// Check returns one line per broken rule.
func Check(pkgs []Package) []string {
	var bad []string
	leaf := leaves(pkgs)
	for _, p := range pkgs {
		from, ok := top(p.ImportPath)
		if !ok {
			continue
		}
		if p.ImportPath == Module+"/cmd/relay" || from == "relay" {
			for _, d := range p.Deps {
				for _, f := range relayForbidden {
					if strings.HasPrefix(d, f) {
						bad = append(bad, fmt.Sprintf("%s depends on %s: the relay must not depend on pulumi or x/crypto/ssh", p.ImportPath, d))
					}
				}
			}
		}
		for _, h := range TestHelpers {
			// Test helpers may use each other: only tests import any of them.
			if !slices.Contains(TestHelpers, p.ImportPath) && slices.Contains(p.Imports, h) {
				bad = append(bad, fmt.Sprintf("%s imports %s: only tests import it", p.ImportPath, h))
			}
		}
		if from == "relay" {
			for _, imp := range slices.Concat(p.TestImports, p.XTestImports) {
				if to, ok := top(imp); ok && to != "relay" && !leaf[imp] {
					bad = append(bad, fmt.Sprintf("%s's tests import %s: relay imports nothing else of this module but internal leaves, in tests too", p.ImportPath, imp))
				}
			}
		}
		for _, imp := range p.Imports {
			to, ok := top(imp)
			if !ok {
				continue
			}
			switch {
			case to == "cmd":
				bad = append(bad, fmt.Sprintf("%s imports %s: nothing imports cmd", p.ImportPath, imp))
			case from == "relay" && to != "relay" && !leaf[imp]:
				bad = append(bad, fmt.Sprintf("%s imports %s: relay imports nothing else of this module but internal leaves (packages that import nothing of it)", p.ImportPath, imp))
			case p.ImportPath == Module+"/cmd/relay" && to != "relay" && !leaf[imp]:
				bad = append(bad, fmt.Sprintf("%s imports %s: cmd/relay imports only relay and internal leaves", p.ImportPath, imp))
			case to == "relay" && from != "relay" && from != "cmd" && !slices.Contains(RelayShared, imp):
				bad = append(bad, fmt.Sprintf("%s imports %s: only cmd may import relay", p.ImportPath, imp))
			case from != to && from != "internal" && to != "internal" && to != "relay":
				lf, okf := layer[from]
				lt, okt := layer[to]
				if okf && okt && lt >= lf {
					bad = append(bad, fmt.Sprintf("%s imports %s: dependencies point one way, cmd -> monitoring -> infra -> provision -> {units, sysctl, inventories}", p.ImportPath, imp))
				}
			}
		}
	}
	return bad
}
