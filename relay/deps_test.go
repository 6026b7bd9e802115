package relay_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps holds the dependency line: the relay packages import nothing
// else of this module but the leaves of internal/ (packages that import
// nothing of it: the command-line shell, the version stamp), and the
// relay binary never pulls in pulumi or golang.org/x/crypto/ssh.
// internal/archtest holds the same rule for the whole module.
func TestDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}",
		"github.com/relayfleet/relayfleet/relay/...", "github.com/relayfleet/relayfleet/cmd/relay").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const module = "github.com/relayfleet/relayfleet/"
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		p, imports := fields[0], fields[1:]
		switch {
		case strings.HasPrefix(p, module+"relay"), p == module+"cmd/relay":
		case strings.HasPrefix(p, module+"internal/"):
			for _, imp := range imports {
				if strings.HasPrefix(imp, module) {
					t.Errorf("relay depends on %s, which imports %s: only internal leaves may be imported", p, imp)
				}
			}
		case strings.HasPrefix(p, module):
			t.Errorf("relay depends on %s", p)
		case strings.Contains(p, "pulumi"), strings.HasPrefix(p, "golang.org/x/crypto/ssh"):
			t.Errorf("relay depends on %s", p)
		}
	}
}
