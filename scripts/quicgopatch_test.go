package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestQuicGoCopyIsThePatch: third_party/quic-go is exactly the quic-go
// release go.mod requires plus the patch series third_party/quic-go-patches
// applied in order (scripts/quic-go-apply.sh --check: a changed byte, a file
// added or removed fails), so the copy is never a silent fork; and
// docs/quic-go-patch.md has a section for every patch of the series.
func TestQuicGoCopyIsThePatch(t *testing.T) {
	out, err := exec.Command("./quic-go-apply.sh", "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("third_party/quic-go is not the release plus third_party/quic-go-patches (regenerate a patch from the copy, or the copy with scripts/quic-go-apply.sh --write): %v\n%s", err, out)
	}
	patches, err := filepath.Glob("../third_party/quic-go-patches/[0-9][0-9][0-9][0-9]-*.patch")
	if err != nil || len(patches) == 0 {
		t.Fatalf("no patches in third_party/quic-go-patches (%v)", err)
	}
	doc, err := os.ReadFile("../docs/quic-go-patch.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range patches {
		if !strings.Contains(string(doc), "### "+filepath.Base(p)) {
			t.Errorf("docs/quic-go-patch.md: no section \"### %s\"", filepath.Base(p))
		}
	}
}
