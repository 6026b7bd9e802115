package scripts_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestQuicGoCopyIsThePatch: third_party/quic-go differs from the quic-go
// release go.mod names by exactly the diff docs/quic-go-patch.md quotes
// (scripts/quic-go-patch.sh prints it): a change to the copy that the
// document does not show fails, so the copy is never a silent fork.
func TestQuicGoCopyIsThePatch(t *testing.T) {
	out, err := exec.Command("./quic-go-patch.sh").Output()
	if err != nil {
		t.Fatalf("quic-go-patch.sh: %v\n%s", err, stderrOf(err))
	}
	doc, err := os.ReadFile("../docs/quic-go-patch.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## The diff\n\n```diff\n")
	quoted, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/quic-go-patch.md: no ```diff block under \"## The diff\"")
	}
	if string(out) != quoted {
		t.Errorf("third_party/quic-go differs from the release by another diff than docs/quic-go-patch.md quotes: update the document from scripts/quic-go-patch.sh (%d lines now, %d quoted)",
			strings.Count(string(out), "\n"), strings.Count(quoted, "\n"))
	}
	for _, f := range []string{"relayfleet_patch_test.go", "relayfleet_stream_patch_test.go", "relayfleet_pto_patch_test.go", "relayfleet_hold_patch_test.go", "relayfleet_ackfreq_patch_test.go", "internal/ackhandler/relayfleet_patch_test.go"} {
		if !strings.Contains(quoted, "# new test file (not printed): "+f+"\n") {
			t.Errorf("the patch's test file %s is missing", f)
		}
	}
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
