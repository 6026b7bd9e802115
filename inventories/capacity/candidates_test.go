package capacity

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/inventories"
)

func TestParseBox(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Box
		err  string
	}{
		// The uplink is 1 Gbit/s and one process per core unless given.
		{in: "cores=12,ram=64GiB", want: Box{12, 64 * GiB, 12, 1e9}},
		{in: "cores=12, ram=64GiB, processes=2, uplink=100Mbit", want: Box{12, 64 * GiB, 2, 1e8}},
		{in: "cores=4,ram=8GiB,processes=auto", want: Box{4, 8 * GiB, 4, 1e9}},
		{in: "cores=12", err: "cores and ram are required"},
		{in: "cores", err: `want KEY=VALUE pairs such as cores=12,ram=64GiB,processes=2,uplink=1Gbit, got "cores"`},
		{in: "cores=1,cores=2,ram=1GiB", err: "cores given twice"},
		{in: "cores=0,ram=1GiB", err: `cores: want an integer from 1 to`},
		{in: "cores=1,ram=lots", err: `ram: want a size such as 64GiB`},
		{in: "cores=1,ram=1GiB,uplink=fast", err: `uplink: want a rate such as 1Gbit`},
		{in: "cores=1,ram=1GiB,disk=1TB", err: `unknown key "disk" (want cores, ram, processes, uplink)`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseBox(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %+v %v, want %+v", got, err, tc.want)
			}
		})
	}
}

// candidateCatalogue has a cloud with two shapes, a lab, a CDN and an
// unusable provider.
func candidateCatalogue() *inventories.Catalogue {
	e := inventories.Egress{Accrues: inventories.AccrueUnmetered}
	return &inventories.Catalogue{Currency: "EUR", Providers: []inventories.Provider{
		{Name: "cloud", Kind: inventories.KindCloud, Shapes: []inventories.Shape{shape("c2", 2, 4*GiB, 0.01, 5, e), shape("c4", 4, 8*GiB, 0.02, 10, e)}},
		{Name: "lab", Kind: inventories.KindLab, Shapes: []inventories.Shape{shape("small", 1, GiB, 0, 0, e)}},
		{Name: "cdn", Kind: inventories.KindCDN, Shapes: []inventories.Shape{shape("edge", 1, GiB, 0, 0, e)}},
		{Name: "gone", Kind: inventories.KindCloud, Unusable: "no UDP", Shapes: []inventories.Shape{shape("g1", 1, GiB, 0.01, 5, e)}},
	}}
}

func TestCandidates(t *testing.T) {
	cat := candidateCatalogue()
	fleet := &inventories.Fleet{
		Steady: []inventories.Group{{Name: "base", Box: inventories.Box{Provider: "cloud", Shape: "c4"}, Count: 3}},
		Burst:  []inventories.Pool{{Name: "extra", Box: inventories.Box{Provider: "cloud", Shape: "c2"}, Max: 5}},
	}
	custom := Box{Cores: 8, RAM: 16 * GiB, Processes: 8, Uplink: 1e9}
	// names lists candidates as NAME:ROLE:COUNT:MAX.
	names := func(cs []Candidate) []string {
		var out []string
		for _, c := range cs {
			out = append(out, strings.Join([]string{c.Name, string(c.Role), Count(c.Count), Count(c.Max)}, ":"))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		ch   Choice
		want []string
	}{
		// Every usable shape, lab and CDN left out.
		{"catalogue", Choice{}, []string{"cloud/c2:burst:0:0", "cloud/c4:burst:0:0"}},
		{"one shape", Choice{Shape: "cloud/c4"}, []string{"cloud/c4:burst:0:0"}},
		{"custom box", Choice{Box: &custom}, []string{"custom:custom:0:0"}},
		// The fleet's steady boxes first, then its burst pools...
		{"fleet", Choice{Fleet: fleet}, []string{"base:steady:3:0", "extra:burst:0:5"}},
		// ...or, instead of the pools, the box or shape given.
		{"fleet and shape", Choice{Fleet: fleet, Shape: "cloud/c2"}, []string{"base:steady:3:0", "cloud/c2:burst:0:0"}},
		{"fleet and box", Choice{Fleet: fleet, Box: &custom}, []string{"base:steady:3:0", "custom:custom:0:0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Candidates(cat, tc.ch)
			if err != nil || !slices.Equal(names(got), tc.want) {
				t.Errorf("got %v %v, want %v", names(got), err, tc.want)
			}
		})
	}
	for ref, want := range map[string]string{
		"cloud/c9": `provider cloud has no shape "c9"`,
		"nope":     "want PROVIDER/SHAPE",
		"gone/g1":  "gone cannot carry relay audio: no UDP",
	} {
		_, err := Candidates(cat, Choice{Shape: ref})
		var se *ShapeError
		if !errors.As(err, &se) || !strings.Contains(err.Error(), want) {
			t.Errorf("shape %s: err %v, want a ShapeError with %q", ref, err, want)
		}
	}
}
