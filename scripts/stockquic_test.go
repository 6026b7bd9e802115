package scripts_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// stockReplace is the line of go.mod that go.stock.mod leaves out.
const stockReplace = "replace github.com/quic-go/quic-go => ./third_party/quic-go\n"

// TestStockQuicModFile: go.stock.mod is go.mod without the replace of
// quic-go by the patched copy, and go.stock.sum holds every line of go.sum
// (plus the quic-go release's own), so the two cannot drift apart.
func TestStockQuicModFile(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	stock, err := os.ReadFile("../go.stock.mod")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mod), stockReplace) {
		t.Fatalf("go.mod: no line %q", strings.TrimSpace(stockReplace))
	}
	if want := strings.Replace(string(mod), stockReplace, "", 1); string(stock) != want {
		t.Errorf("go.stock.mod is not go.mod without %q: rewrite it (grep -vx '%s' go.mod >go.stock.mod)", strings.TrimSpace(stockReplace), strings.TrimSpace(stockReplace))
	}
	sum, err := os.ReadFile("../go.sum")
	if err != nil {
		t.Fatal(err)
	}
	stockSum, err := os.ReadFile("../go.stock.sum")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(stockSum), "\n") {
		have[l] = true
	}
	for _, l := range strings.Split(string(sum), "\n") {
		if !have[l] {
			t.Errorf("go.stock.sum lacks go.sum's line %q", l)
		}
	}
}

// TestStockQuicBuild: the whole module builds against the quic-go release
// (make build-stockquic: go.stock.mod, tag stockquic), so code that uses
// the patched quic-go stays behind the tag (relay/quicpatch.go and its
// twins). The first run builds everything again (a minute); later ones
// hit the build cache.
func TestStockQuicBuild(t *testing.T) {
	cmd := exec.Command("go", "build", "-modfile=go.stock.mod", "-tags", "stockquic", "./...")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -modfile=go.stock.mod -tags stockquic ./...: %v\n%s", err, out)
	}
}
