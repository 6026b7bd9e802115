package inventories

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// regionsFleet is a two-region lab fleet file; edit changes it before
// it is written.
const regionsFleet = `version: 1
name: rg
steady:
  - {name: eu-steady, provider: lab, shape: small, count: 1}
  - {name: us-steady, provider: lab, shape: small, count: 1}
regions:
  - name: eu
    prefixes: [10.1.0.0/16]
    origins: {provider: lab, shape: small, count: 2}
    steady: [eu-steady]
    listeners: 600
  - name: us
    publish: true
    prefixes: [10.2.0.0/16, "2001:db8::/32"]
    origins: {provider: lab, shape: small, count: 2}
    steady: [us-steady]
`

func loadRegions(t *testing.T, data string) (*Fleet, string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := LoadFleet(path, shippedCatalogue(t))
	return f, path, err
}

// TestRegions: a fleet file with regions loads; the publishers' region
// is the one marked publish (else the first), its origin group keeps the
// name origin and is the fleet's Origins; the others' are origin-NAME.
func TestRegions(t *testing.T) {
	f, _, err := loadRegions(t, regionsFleet)
	if err != nil {
		t.Fatal(err)
	}
	if rr := f.RootRegion(); rr == nil || rr.Name != "us" || f.Origins != rr.Origins {
		t.Fatalf("root region %+v, fleet origins %p; want us and its origin group", rr, f.Origins)
	}
	for group, want := range map[string]string{"eu-steady": "eu", "us-steady": "us", "origin": "us", "origin-eu": "eu", "event1": ""} {
		if got := f.RegionOfGroup(group); got != want {
			t.Errorf("RegionOfGroup(%s) = %q, want %q", group, got, want)
		}
	}
	// Without publish: the first region is the root.
	f, _, err = loadRegions(t, strings.Replace(regionsFleet, "    publish: true\n", "", 1))
	if err != nil || f.RootRegion().Name != "eu" || f.OriginGroupOf("eu") != OriginGroup || f.OriginGroupOf("us") != "origin-us" {
		t.Fatalf("without publish: %v, root %+v", err, f.RootRegion())
	}
}

// TestRegionsRefused: each mistake is one error naming the file, line
// and field.
func TestRegionsRefused(t *testing.T) {
	for _, tc := range []struct {
		name, old, new, field, msg string
	}{
		{"top-level origins", "regions:\n", "origins: {provider: lab, shape: small, count: 2}\nregions:\n", "origins", "each region names its origins"},
		{"bad name", "name: eu\n", "name: EU\n", "regions[0].name", "lowercase"},
		{"twice", "name: us\n", "name: eu\n", "regions[1].name", "listed twice"},
		{"two publish", "  - name: eu\n", "  - name: eu\n    publish: true\n", "regions[1].publish", "publishers' region already"},
		{"bad prefix", "[10.1.0.0/16]", "[10.1.0.0/33]", "regions[0].prefixes[0]", "want a CIDR"},
		{"prefix twice", "[10.2.0.0/16,", "[10.1.0.0/16,", "regions[1].prefixes[0]", "region eu's already"},
		{"no origins", "    origins: {provider: lab, shape: small, count: 2}\n    steady: [eu-steady]", "    steady: [eu-steady]", "regions[0].origins", "missing"},
		{"one origin", "count: 2}\n    steady: [eu-steady]", "count: 1}\n    steady: [eu-steady]", "regions[0].origins.count", "at least 2"},
		{"unknown group", "steady: [eu-steady]", "steady: [eu-stedy]", "regions[0].steady[0]", `no steady group is named "eu-stedy"`},
		{"group twice", "steady: [us-steady]", "steady: [eu-steady]", "regions[1].steady[0]", "in region eu already"},
		{"group in none", "steady: [us-steady]", "steady: []", "steady[1].name", "in no region"},
		{"group named like an origin group", "name: us-steady, provider", "name: origin-eu, provider", "steady[1].name", "region eu's origin group"},
		{"negative listeners", "listeners: 600", "listeners: -1", "regions[0].listeners", "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := strings.Replace(regionsFleet, tc.old, tc.new, 1)
			if data == regionsFleet {
				t.Fatalf("%q not in the fleet file", tc.old)
			}
			if tc.name == "group named like an origin group" {
				data = strings.Replace(data, "steady: [us-steady]", "steady: [origin-eu]", 1)
			}
			_, path, err := loadRegions(t, data)
			var ie *Error
			if !errors.As(err, &ie) || ie.File != path || ie.Line == 0 || ie.Field != tc.field || !strings.Contains(ie.Msg, tc.msg) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v; want one line %s:LINE: %s: ...%s...", err, path, tc.field, tc.msg)
			}
		})
	}
}

// TestSingleRegionUnchanged: the shipped fleet files load as before,
// with no regions.
func TestSingleRegionUnchanged(t *testing.T) {
	for _, name := range []string{"lab.yaml", "example.yaml"} {
		f, err := LoadFleet(name, shippedCatalogue(t))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if f.RootRegion() != nil || f.RegionOfGroup(f.Steady[0].Name) != "" || f.OriginGroupOf("") != OriginGroup {
			t.Fatalf("%s: regions where there are none", name)
		}
	}
}
