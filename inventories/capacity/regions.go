package capacity

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/relayfleet/relayfleet/internal/cli"
	"github.com/relayfleet/relayfleet/inventories"
)

// Regions. For a fleet file with regions:, fleet plan sizes each region
// from its own audience: --region-listeners NAME=N,... when given (every
// region it names must be the fleet's; regions it leaves out plan for
// 0), else each region's listeners: in the fleet file. A region's plan
// uses its own steady groups first, then the fleet's burst pools (or the
// --shape, --box or catalogue shapes, as for a whole fleet); its origin
// boxes are not listener capacity and are not planned. --listeners and
// per-region audiences exclude each other.

// RegionListenersFlag is the flag.Value of --region-listeners
// eu=60000,us=40000.
type RegionListenersFlag struct {
	// Names are the regions in the order given; Values their audiences.
	Names  []string
	Values map[string]int
}

func (f *RegionListenersFlag) String() string { return "" }

// Set parses NAME=N[,NAME=N...]; it may be given more than once.
func (f *RegionListenersFlag) Set(s string) error {
	for kv := range strings.SplitSeq(s, ",") {
		name, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || name == "" {
			return fmt.Errorf("want REGION=LISTENERS pairs such as eu=60000,us=40000, got %q", kv)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > inventories.MaxListeners {
			return fmt.Errorf("%s: want listeners from 0 to %d, got %q", name, inventories.MaxListeners, v)
		}
		if f.Values == nil {
			f.Values = map[string]int{}
		}
		if _, dup := f.Values[name]; dup {
			return fmt.Errorf("region %s given twice", name)
		}
		f.Values[name] = n
		f.Names = append(f.Names, name)
	}
	return nil
}

// regionAudiences are the fleet's regions' audiences, in the fleet file's
// order, or nil when the plan is not per region (no regions, or neither
// --region-listeners nor any regions[].listeners).
func (o *PlanOptions) regionAudiences(f *inventories.Fleet) ([]regionAudience, error) {
	given := len(o.RegionListeners.Names) > 0
	if given && (f == nil || len(f.Regions) == 0) {
		return nil, cli.Usagef("flag --region-listeners: the plan needs --inventory naming a fleet file with regions:")
	}
	if f == nil || len(f.Regions) == 0 {
		return nil, nil
	}
	known := map[string]bool{}
	some := given
	for _, rg := range f.Regions {
		known[rg.Name] = true
		some = some || rg.Listeners > 0
	}
	for _, name := range o.RegionListeners.Names {
		if !known[name] {
			return nil, cli.Usagef("flag --region-listeners: %s is not a region of %s", name, o.Inventory)
		}
	}
	if !some {
		return nil, nil
	}
	if o.Listeners != -1 {
		return nil, cli.Usagef("flag --listeners: the fleet's regions have their own audiences (regions[].listeners or --region-listeners): leave --listeners out")
	}
	var out []regionAudience
	for _, rg := range f.Regions {
		n := rg.Listeners
		if given {
			n = o.RegionListeners.Values[rg.Name]
		}
		out = append(out, regionAudience{name: rg.Name, listeners: n, steady: rg.Steady})
	}
	return out, nil
}

type regionAudience struct {
	name      string
	listeners int
	steady    []string
}

// regionFleet is f with only the steady groups of region ra.
func regionFleet(f *inventories.Fleet, ra regionAudience) *inventories.Fleet {
	sub := *f
	sub.Steady = nil
	for _, g := range f.Steady {
		for _, n := range ra.steady {
			if g.Name == n {
				sub.Steady = append(sub.Steady, g)
			}
		}
	}
	return &sub
}

// RegionReport is one region's plan.
type RegionReport struct {
	Region    string
	Listeners int
	*Report
}

// writeRegionsText writes each region's plan under a header line.
func writeRegionsText(w io.Writer, rs []RegionReport) error {
	for i, r := range rs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "REGION %s: %d listeners\n", r.Region, r.Listeners)
		if err := r.WriteText(w); err != nil {
			return err
		}
	}
	return nil
}

// writeRegionsJSON writes {"regions": [{"region", "listeners", "plan"}]},
// each plan the document fleet plan --json writes for a whole fleet.
func writeRegionsJSON(w io.Writer, rs []RegionReport) error {
	type regionJSON struct {
		Region    string     `json:"region"`
		Listeners int        `json:"listeners"`
		Plan      reportJSON `json:"plan"`
	}
	doc := struct {
		Regions []regionJSON `json:"regions"`
	}{}
	for _, r := range rs {
		doc.Regions = append(doc.Regions, regionJSON{Region: r.Region, Listeners: r.Listeners, Plan: r.doc()})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
