package program

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// regionsFleet is a lab fleet of two regions, eu (the publishers') and
// us, each with two origins and one edge box.
func regionsFleet(t *testing.T) (*inventories.Fleet, *inventories.Catalogue) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	data := `version: 1
name: f
steady:
  - {name: eu-edge, provider: lab, shape: small, count: 1}
  - {name: us-edge, provider: lab, shape: small, count: 1}
regions:
  - name: us
    prefixes: [10.2.0.0/16]
    origins: {provider: lab, shape: small, count: 2}
    steady: [us-edge]
  - name: eu
    publish: true
    prefixes: [10.1.0.0/16]
    origins: {provider: lab, shape: small, count: 2}
    steady: [eu-edge]
`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return loadFleet(t, path)
}

// pins are the #spki= suffixes of the boxes called names, as the
// provider derives their keys.
func pins(t *testing.T, names ...string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		_, spki, err := provision.BoxTLSKey(testTLSSeed, n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, "#spki="+spki)
	}
	return out
}

// TestDeployRegions: the publishers' region's origins pull from nobody;
// another region's origins pull from the publishers' (one URL per origin
// box, pinned); each region's edges pull from their own region's
// origins; the stack output names each host's region.
func TestDeployRegions(t *testing.T) {
	f, cat := regionsFleet(t)
	m, _ := run(t, f, cat)
	var origins []string
	for _, b := range m.ofType(provider.BoxType) {
		if b.Inputs["tier"].StringValue() == provider.TierOrigin {
			origins = append(origins, b.Inputs["name"].StringValue())
		}
	}
	slices.Sort(origins)
	if !slices.Equal(origins, []string{"origin-1", "origin-2", "origin-us-1", "origin-us-2"}) {
		t.Fatalf("origin boxes %v; want eu's origin-1, -2 (the publishers') and us's origin-us-1, -2", origins)
	}
	euPins, usPins := pins(t, "origin-1", "origin-2"), pins(t, "origin-us-1", "origin-us-2")
	want := map[string][]string{"origin-1": nil, "origin-2": nil, "origin-us-1": euPins, "origin-us-2": euPins,
		"eu-edge-1": euPins, "us-edge-1": usPins}
	hosts := m.ofType(provider.HostType)
	if len(hosts) != len(want) {
		t.Fatalf("%d hosts, want %d", len(hosts), len(want))
	}
	for _, h := range hosts {
		w, ok := want[h.Name]
		if !ok {
			t.Fatalf("unexpected host %s", h.Name)
		}
		up := h.Inputs["upstream"].ArrayValue()
		if len(up) != len(w) {
			t.Fatalf("host %s: upstream %v, want %d URLs ending %v", h.Name, up, len(w), w)
		}
		// Every origin, the us origins included (us's edges pull from
		// them), takes link tokens; no edge does.
		if origin := strings.HasPrefix(h.Name, "origin-"); takesLinks(h) != origin {
			t.Errorf("host %s: acceptLinkTokens %v, want %v", h.Name, h.Inputs["acceptLinkTokens"], origin)
		}
		for i, u := range up {
			if !strings.HasSuffix(u.StringValue(), w[i]) {
				t.Errorf("host %s: upstream[%d] %q, want ...%s", h.Name, i, u.StringValue(), w[i])
			}
		}
	}
	for group, region := range map[string]string{"origin": "eu", "origin-us": "us", "eu-edge": "eu", "us-edge": "us"} {
		if got := f.RegionOfGroup(group); got != region {
			t.Errorf("group %s in region %q, want %s", group, got, region)
		}
	}
}

// TestRelaysRegions: the router's relays file carries each edge relay's
// region and the fleet's regions with their prefixes; OriginURLs (what
// publishers and bursts use) are the publishers' region's origins only.
func TestRelaysRegions(t *testing.T) {
	f, _ := regionsFleet(t)
	spki := strings.Repeat("ab", 32)
	hosts := []HostEntry{
		{Name: "origin-1", Group: "origin", Address: "10.0.0.1", Ports: []int{4443}, SPKI: spki, Tier: provider.TierOrigin, Region: "eu"},
		{Name: "origin-us-1", Group: "origin-us", Address: "10.0.0.3", Ports: []int{4443}, SPKI: spki, Tier: provider.TierOrigin, Region: "us"},
		{Name: "us-edge-1", Group: "us-edge", Address: "10.0.0.2", Ports: []int{4443}, SPKI: spki, Region: "us"},
		{Name: "eu-edge-1", Group: "eu-edge", Address: "10.0.0.4", Ports: []int{4443}, SPKI: spki, Region: "eu"},
	}
	file := ComposeRelaysFile([]StackHosts{{Stack: "f", Hosts: hosts, Regions: RouterRegions(f)}})
	if len(file.Relays) != 2 || file.Relays[0].Region != "us" || file.Relays[1].Region != "eu" {
		t.Fatalf("relays %+v, want us-edge-1 (us) and eu-edge-1 (eu)", file.Relays)
	}
	if len(file.Regions) != 2 || file.Regions[0].Name != "us" || !slices.Equal(file.Regions[0].Prefixes, []string{"10.2.0.0/16"}) {
		t.Fatalf("regions %+v, want us and eu with their prefixes", file.Regions)
	}
	if got := OriginURLs(hosts); !slices.Equal(got, []string{"http://10.0.0.1:4443/#spki=" + spki}) {
		t.Fatalf("OriginURLs %v, want the publishers' region's origin only", got)
	}
	if got := OriginURLsOf(hosts, "origin-us"); !slices.Equal(got, []string{"http://10.0.0.3:4443/#spki=" + spki}) {
		t.Fatalf("OriginURLsOf origin-us %v", got)
	}
}
