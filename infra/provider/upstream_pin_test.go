package provider

import (
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/provision"
)

// TestHostCarriesTheOriginPin: the origin's key pin, part of the fleet
// file's origin URL, reaches relay@.service's ExecStart through the Host's
// upstream input, and changing it changes the desired state (the host is
// converged again).
func TestHostCarriesTheOriginPin(t *testing.T) {
	pinned := "http://10.0.0.1:4443/#spki=" + strings.Repeat("ab", 32)
	a := hostArgs()
	a.Upstream = []string{pinned}
	plan, err := provision.Desired(a.layout(nil), a.Release)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := string(plan.Content["/etc/systemd/system/relay@.service"])
	if !strings.Contains(tmpl, " --upstream "+pinned+" ") && !strings.Contains(tmpl, " --upstream "+pinned+"\n") {
		t.Fatalf("relay@.service has no pinned upstream:\n%s", tmpl)
	}
	h1, err := DesiredHash(a)
	if err != nil {
		t.Fatal(err)
	}
	a.Upstream = []string{"http://10.0.0.1:4443/#spki=" + strings.Repeat("cd", 32)}
	h2, err := DesiredHash(a)
	if err != nil {
		t.Fatal(err)
	}
	if h1 == h2 {
		t.Fatal("a new origin pin leaves the desired state unchanged")
	}
}
