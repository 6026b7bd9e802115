package archtest

import (
	"bytes"
	"encoding/json"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const m = Module + "/"

func TestCheckCatchesViolations(t *testing.T) {
	for _, tc := range []struct {
		name string
		pkg  Package
		want string
	}{
		{"relay pulls pulumi", Package{ImportPath: m + "cmd/relay", Imports: []string{m + "relay"}, Deps: []string{"github.com/pulumi/pulumi/sdk/v3/go/pulumi"}}, "must not depend on pulumi"},
		{"relay pulls ssh", Package{ImportPath: m + "relay/moq", Deps: []string{"golang.org/x/crypto/ssh"}}, "must not depend on pulumi or x/crypto/ssh"},
		{"relay imports inventories", Package{ImportPath: m + "relay", Imports: []string{m + "inventories"}}, "relay imports nothing else"},
		{"imports cmd", Package{ImportPath: m + "infra", Imports: []string{m + "cmd/fleet"}}, "nothing imports cmd"},
		{"upward import", Package{ImportPath: m + "units", Imports: []string{m + "provision"}}, "dependencies point one way"},
		{"sideways import", Package{ImportPath: m + "sysctl", Imports: []string{m + "units"}}, "dependencies point one way"},
		{"provision imports relay", Package{ImportPath: m + "provision", Imports: []string{m + "relay"}}, "only cmd may import relay"},
		{"provision imports relay/router", Package{ImportPath: m + "provision", Imports: []string{m + "relay/router"}}, "only cmd may import relay"},
		{"relay's tests import inventories", Package{ImportPath: m + "relay/client", XTestImports: []string{m + "inventories"}}, "in tests too"},
		{"relay imports an internal package that is no leaf", Package{ImportPath: m + "relay"}, "but internal leaves"},
		{"code imports testutil", Package{ImportPath: m + "relay/client", Imports: []string{TestUtil}}, "only tests import it"},
		{"code imports programtest", Package{ImportPath: m + "infra/fleethosts", Imports: []string{m + "infra/program/programtest"}}, "only tests import it"},
		{"code imports systest", Package{ImportPath: m + "test/e2e", Imports: []string{m + "test/systest"}}, "only tests import it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkgs := []Package{tc.pkg}
			if tc.name == "relay imports an internal package that is no leaf" {
				pkgs = []Package{
					{ImportPath: m + "relay", Imports: []string{m + "internal/cli", m + "internal/x"}},
					{ImportPath: m + "internal/cli", Imports: []string{"github.com/spf13/pflag"}},
					{ImportPath: m + "internal/x", Imports: []string{m + "inventories"}},
				}
			}
			bad := Check(pkgs)
			if len(bad) == 0 || !strings.Contains(bad[0], tc.want) {
				t.Errorf("Check = %q, want a line containing %q", bad, tc.want)
			}
		})
	}
	ok := []Package{
		{ImportPath: m + "cmd/fleet", Imports: []string{m + "infra", m + "inventories", m + "inventories/capacity"}},
		{ImportPath: m + "provision", Imports: []string{m + "units", m + "sysctl", m + "inventories"}},
		{ImportPath: m + "inventories/capacity", Imports: []string{m + "inventories"}},
		{ImportPath: m + "relay/moq", Imports: []string{m + "relay/wire"}, Deps: []string{"github.com/quic-go/quic-go"}},
		{ImportPath: m + "cmd/relay", Imports: []string{m + "relay"}},
		{ImportPath: m + "provision", Imports: []string{m + "relay/wire", m + "relay/procstat"}},
		{ImportPath: m + "provision/loadtest", Imports: []string{m + "relay/loadgen", m + "provision", m + "inventories"}},
		{ImportPath: m + "provision", TestImports: []string{TestUtil}},
		{ImportPath: m + "infra/fleethosts", TestImports: []string{m + "infra/program/programtest"}},
		{ImportPath: m + "test/lab", TestImports: []string{m + "test/systest", TestUtil}},
		{ImportPath: m + "test/systest", Imports: []string{m + "infra/program"}},
		{ImportPath: m + "relay/client", TestImports: []string{TestUtil, m + "relay/moqlite"}},
		{ImportPath: m + "cmd/relay", Imports: []string{m + "relay", m + "internal/cli"}},
		{ImportPath: m + "internal/cli", Imports: []string{"github.com/spf13/pflag"}},
		{ImportPath: TestUtil, Imports: []string{"go.uber.org/goleak"}},
	}
	if bad := Check(ok); len(bad) > 0 {
		t.Errorf("allowed imports flagged: %q", bad)
	}
}

// goList lists the module's packages with their imports and deps.
func goList(t *testing.T) []Package {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Imports,Deps,TestImports,XTestImports,Dir,Error", m[:len(m)-1]+"/...")
	cmd.Dir = root(t)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v: %s", err, errb.String())
	}
	var pkgs []Package
	dec := json.NewDecoder(&out)
	for {
		var p Package
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestModuleFollowsRules(t *testing.T) {
	pkgs := goList(t)
	if len(pkgs) < 3 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	for _, line := range Check(pkgs) {
		t.Error(line)
	}
	// The rule is only worth something if the relay binary exists to hold it.
	if !slices.ContainsFunc(pkgs, func(p Package) bool { return p.ImportPath == m+"cmd/relay" }) {
		t.Log("cmd/relay does not exist yet; only the other rules were checked")
	}
}

func TestEveryPackageHasAComment(t *testing.T) {
	cmd := exec.Command("go", "list", "-e", "-f", "{{.Dir}}", m[:len(m)-1]+"/...")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dir := range strings.Fields(string(out)) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		documented, name := false, ""
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, parser.ParseComments|parser.PackageClauseOnly)
			if err != nil {
				t.Fatal(err)
			}
			name = f.Name.Name
			if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
				documented = true
			}
		}
		if name != "" && !documented {
			rel, _ := filepath.Rel(root(t), dir)
			t.Errorf("package %s in %s has no package comment", name, rel)
		}
	}
}
