package pricing

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/relayfleet/relayfleet/inventories"
)

// Difference is one field where the live API and providers.yaml disagree.
type Difference struct {
	// Ref names the row: PROVIDER/SHAPE[@REGION], then the API location in
	// parentheses when there is one, as in "hcloud/ccx33@eu (fsn1)".
	Ref string
	// Field is hourly, monthly, included, overage, cores or ram; or
	// FieldMissing or FieldNotSold for a whole row.
	Field   string
	Shipped string // the value in providers.yaml ("" for FieldMissing)
	Live    string // the value the API reports ("" for FieldNotSold)
}

// Fields of a Difference that concern a whole row.
const (
	// FieldMissing marks a shape the API sells that providers.yaml lacks.
	FieldMissing = "missing from providers.yaml"
	// FieldNotSold marks a providers.yaml row the API no longer lists.
	FieldNotSold = "not sold any more"
)

// Prices and sizes closer than this are the same: 0.5% of the larger, or
// 0.001 (a tenth of a cent) for small prices.
const (
	relTolerance = 0.005
	absTolerance = 0.001
)

// Compare matches live rows to the catalogue by provider, shape name and
// region (an hcloud location becomes its region through
// Provider.RegionOf; a provider with a single region, such as
// digitalocean, matches any location) and returns every difference in
// hourly and monthly price, included traffic, overage price, cores and
// RAM. It also reports shapes the API sells that the catalogue lacks
// (FieldMissing) and catalogue rows of a provider present in live that no
// live row matched (FieldNotSold). Providers absent from live (no token
// given) are not checked. The result is sorted by Ref, then Field.
func Compare(cat *inventories.Catalogue, live []Live) []Difference {
	var diffs []Difference
	type rowKey struct{ provider, shape, region string }
	matched := map[rowKey]bool{}
	seenProviders := map[string]bool{}
	for _, l := range live {
		seenProviders[l.Provider] = true
		p, ok := cat.Provider(l.Provider)
		if !ok {
			diffs = append(diffs, Difference{Ref: liveRef(nil, l, ""), Field: FieldMissing, Live: summary(l) + "; provider " + l.Provider + " is not in providers.yaml"})
			continue
		}
		region, ok := regionOf(p, l.Location)
		if !ok {
			diffs = append(diffs, Difference{Ref: liveRef(p, l, ""), Field: FieldMissing, Live: summary(l) + "; location " + l.Location + " is in no region of " + p.Name})
			continue
		}
		s, ok := p.Shape(l.Shape, region)
		if !ok {
			diffs = append(diffs, Difference{Ref: liveRef(p, l, region), Field: FieldMissing, Live: summary(l)})
			continue
		}
		matched[rowKey{p.Name, s.Name, s.Region}] = true
		diffs = append(diffs, compareRow(cat, p, s, l)...)
	}
	for i := range cat.Providers {
		p := &cat.Providers[i]
		if !seenProviders[p.Name] {
			continue
		}
		for j := range p.Shapes {
			s := &p.Shapes[j]
			if !matched[rowKey{p.Name, s.Name, s.Region}] {
				diffs = append(diffs, Difference{Ref: s.Ref(p), Field: FieldNotSold, Shipped: money(s.Monthly, shapeCurrency(cat, s)) + " a month"})
			}
		}
	}
	slices.SortStableFunc(diffs, func(a, b Difference) int {
		return cmp.Or(cmp.Compare(a.Ref, b.Ref), cmp.Compare(a.Field, b.Field), cmp.Compare(a.Live, b.Live))
	})
	return diffs
}

// regionOf maps an API location to the provider's region. A provider with
// one region (or none) has the same prices everywhere.
func regionOf(p *inventories.Provider, location string) (string, bool) {
	switch {
	case len(p.Regions) == 0:
		return "", true
	case len(p.Regions) == 1:
		for r := range p.Regions {
			return r, true
		}
	case location == "":
		return "", true // the provider's first row of that name
	}
	return p.RegionOf(location)
}

// liveRef names a live row the way Shape.Ref names a catalogue row, plus
// the location.
func liveRef(p *inventories.Provider, l Live, region string) string {
	ref := l.Provider + "/" + l.Shape
	if p != nil && region != "" && len(p.Regions) > 1 {
		ref += "@" + region
	}
	if l.Location != "" {
		ref += " (" + l.Location + ")"
	}
	return ref
}

func compareRow(cat *inventories.Catalogue, p *inventories.Provider, s *inventories.Shape, l Live) []Difference {
	ref := liveRef(p, l, s.Region)
	var out []Difference
	add := func(field, shipped, live string) {
		out = append(out, Difference{Ref: ref, Field: field, Shipped: shipped, Live: live})
	}
	scur := shapeCurrency(cat, s)
	lcur := l.Currency
	if lcur == "" {
		lcur = scur
	}
	// Prices compare in the shape's currency when the API quotes the same
	// one, else both in the catalogue's currency.
	samePrice := func(shipped, live float64) bool {
		if scur != lcur {
			shipped, live = cat.ToCurrency(shipped, scur), cat.ToCurrency(live, lcur)
		}
		return near(shipped, live)
	}
	if !samePrice(s.Hourly, l.Hourly) {
		add("hourly", money(s.Hourly, scur), money(l.Hourly, lcur))
	}
	if !samePrice(s.Monthly, l.Monthly) {
		add("monthly", money(s.Monthly, scur), money(l.Monthly, lcur))
	}
	if !near(float64(s.Egress.Included), float64(l.Included)) {
		add("included", included(s), size(l.Included)+" a month")
	}
	if d, ok := compareOverage(cat, s, scur, l, lcur); !ok {
		add("overage", d[0], d[1])
	}
	if s.Cores != l.Cores {
		add("cores", strconv.Itoa(s.Cores), strconv.Itoa(l.Cores))
	}
	if !near(float64(s.RAM), float64(l.RAM)) {
		add("ram", size(s.RAM), size(l.RAM))
	}
	return out
}

// compareOverage compares the price per byte past the allowance; it
// returns the two values as text and whether they agree.
func compareOverage(cat *inventories.Catalogue, s *inventories.Shape, scur string, l Live, lcur string) ([2]string, bool) {
	e := s.Egress
	shipped := "none (" + e.Past + ")"
	var shippedPerByte float64
	if e.Past == inventories.PastBilled && e.PerBytes() > 0 {
		shipped = money(e.Price, scur) + "/" + e.Per
		shippedPerByte = cat.ToCurrency(e.Price, scur) / float64(e.PerBytes())
	}
	live := "none"
	var livePerByte float64
	if ub := unitBytes(l.OverageUnit); l.OveragePer > 0 && ub > 0 {
		live = money(l.OveragePer, lcur) + "/" + l.OverageUnit
		livePerByte = cat.ToCurrency(l.OveragePer, lcur) / float64(ub)
	}
	// Compare per TB so that the absolute tolerance means something.
	return [2]string{shipped, live}, near(shippedPerByte*1e12, livePerByte*1e12)
}

// unitBytes is the size of the unit an overage price is quoted per, as
// inventories.Egress.PerBytes reads it.
func unitBytes(unit string) inventories.Bytes {
	return inventories.Egress{Per: unit}.PerBytes()
}

func shapeCurrency(cat *inventories.Catalogue, s *inventories.Shape) string {
	if s.Currency != "" {
		return s.Currency
	}
	return cat.Currency
}

// near reports whether a and b agree within the tolerances.
func near(a, b float64) bool {
	d := math.Abs(a - b)
	return d <= absTolerance || d <= relTolerance*math.Max(math.Abs(a), math.Abs(b))
}

func money(v float64, cur string) string {
	return strconv.FormatFloat(v, 'f', -1, 64) + " " + cur
}

// size writes whole TiB and GiB as such (the units providers quote
// memory and traffic in), anything else in decimal units.
func size(b inventories.Bytes) string {
	switch {
	case b > 0 && b%(1<<40) == 0:
		return strconv.FormatInt(int64(b>>40), 10) + " TiB"
	case b > 0 && b%(1<<30) == 0:
		return strconv.FormatInt(int64(b>>30), 10) + " GiB"
	}
	return b.String()
}

func included(s *inventories.Shape) string {
	e := s.Egress
	switch e.Accrues {
	case inventories.AccrueUnmetered:
		return "unmetered"
	case inventories.AccrueDay:
		return size(e.Included) + " a day"
	}
	return size(e.Included) + " a month"
}

func summary(l Live) string {
	return fmt.Sprintf("%d cores, %s RAM, %s an hour, %s a month, %s included a month", l.Cores, size(l.RAM), money(l.Hourly, l.Currency), money(l.Monthly, l.Currency), size(l.Included))
}
