package relay_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps holds the dependency line: the relay packages import nothing
// else of this module, and the relay binary never pulls in pulumi or
// golang.org/x/crypto/ssh.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}",
		"github.com/relayfleet/relayfleet/relay/...", "github.com/relayfleet/relayfleet/cmd/relay").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const module = "github.com/relayfleet/relayfleet/"
	for _, p := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(p, module+"relay"), p == module+"cmd/relay":
		case strings.HasPrefix(p, module):
			t.Errorf("relay depends on %s", p)
		case strings.Contains(p, "pulumi"), strings.HasPrefix(p, "golang.org/x/crypto/ssh"):
			t.Errorf("relay depends on %s", p)
		}
	}
}
