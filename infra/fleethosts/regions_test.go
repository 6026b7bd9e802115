package fleethosts

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/inventories"
)

// TestUpstreamOfRegions: converge gives each host the upstream the stack
// gives it: the publishers' origins none (Targets clears it), another
// region's origins and burst boxes the publishers' origins, a region's
// steady boxes their region's origins.
func TestUpstreamOfRegions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	data := `version: 1
name: f
steady:
  - {name: eu-edge, provider: lab, shape: small, count: 1}
  - {name: us-edge, provider: lab, shape: small, count: 1}
regions:
  - {name: eu, origins: {provider: lab, shape: small, count: 2}, steady: [eu-edge]}
  - {name: us, origins: {provider: lab, shape: small, count: 2}, steady: [us-edge]}
`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _, err := inventories.LoadFleetFile(path)
	if err != nil {
		t.Fatal(err)
	}
	spki := strings.Repeat("ab", 32)
	origin := func(name, group, addr string) Host {
		return Host{Name: name, Group: group, Tier: TierOrigin, Address: addr, Ports: []int{4443}, SPKI: spki}
	}
	hosts := []Host{
		origin("origin-1", "origin", "10.0.0.1"), origin("origin-2", "origin", "10.0.0.2"),
		origin("origin-us-1", "origin-us", "10.0.1.1"), origin("origin-us-2", "origin-us", "10.0.1.2"),
		{Name: "eu-edge-1", Group: "eu-edge", Tier: TierSteady},
		{Name: "us-edge-1", Group: "us-edge", Tier: TierSteady},
		{Name: "final-1", Group: "final", Tier: TierBurst},
	}
	root := OriginURLs(hosts)
	us := OriginURLsOf(hosts, "origin-us")
	if len(root) != 2 || len(us) != 2 || !strings.Contains(root[0], "10.0.0.1") || !strings.Contains(us[0], "10.0.1.1") {
		t.Fatalf("root %v, us %v", root, us)
	}
	for i, want := range [][]string{root, root, root, root, root, us, root} {
		if got := upstreamOf(f, hosts, hosts[i], root); !slices.Equal(got, want) {
			t.Errorf("%s: upstream %v, want %v", hosts[i].Name, got, want)
		}
	}
}
