package inventories

import (
	"fmt"
	"slices"
	"strings"
)

// Catalogue is providers.yaml: what each provider sells, at what price, and
// what its terms say about egress. It is dated data: every shape carries the
// source it was read from and the date, and prices that could not be
// confirmed are marked unsure.
type Catalogue struct {
	Version int `yaml:"version"`
	// Currency is the currency plans are reported in.
	Currency string `yaml:"currency"`
	// Rates converts other currencies into Currency.
	Rates     []Rate     `yaml:"rates"`
	Providers []Provider `yaml:"providers"`
}

// Rate says how much of the catalogue's currency one unit of Currency buys.
type Rate struct {
	Currency string  `yaml:"currency"`
	Value    float64 `yaml:"value"`
	Source   string  `yaml:"source"`
	Date     string  `yaml:"date"`
}

// Provider kinds.
const (
	KindCloud     = "cloud"     // hourly boxes through an API
	KindDedicated = "dedicated" // monthly servers bought outside any API
	KindLab       = "lab"       // local lab boxes (systemd-nspawn)
	KindCDN       = "cdn"       // a CDN tier: cannot run the relay
)

// Provider is one seller of boxes (or, for a CDN, of delivery).
type Provider struct {
	Name  string `yaml:"name"`
	Title string `yaml:"title"`
	Kind  string `yaml:"kind"`
	// API names the live price source: hcloud, digitalocean or empty.
	API string `yaml:"api"`
	// Unusable, when set, says why the provider cannot carry relay audio;
	// the planner never picks it.
	Unusable string `yaml:"unusable"`
	// Terms is where the provider's traffic terms are published.
	Terms string `yaml:"terms"`
	// Regions maps a region name to the locations (datacenters) in it.
	Regions map[string][]string `yaml:"regions"`
	Shapes  []Shape             `yaml:"shapes"`
}

// Shape is one box size in one region, with its price and egress terms.
type Shape struct {
	Name   string `yaml:"name"`
	Region string `yaml:"region"`
	// Cores is what nproc reports on the box (vCPUs or hardware threads).
	Cores int `yaml:"cores"`
	// SharedCPU marks vCPUs shared with other tenants: the calibration's
	// listeners per core was measured on dedicated cores, so the planner
	// warns before it trusts such a box.
	SharedCPU bool    `yaml:"shared_cpu"`
	RAM       Bytes   `yaml:"ram"`
	Uplink    BitRate `yaml:"uplink"`
	// Hourly is zero for shapes rented by the month only.
	Hourly   float64 `yaml:"hourly"`
	Monthly  float64 `yaml:"monthly"`
	Setup    float64 `yaml:"setup"`
	Currency string  `yaml:"currency"`
	Egress   Egress  `yaml:"egress"`
	Source   string  `yaml:"source"`
	Date     string  `yaml:"date"`
	// Unsure marks a row whose price or terms could not be confirmed;
	// Note says which and why.
	Unsure bool   `yaml:"unsure"`
	Note   string `yaml:"note"`
}

// How included egress accrues.
const (
	AccrueMonth      = "month"       // a fixed allowance per box per month
	AccruePooledHour = "pooled-hour" // allowance/672 per box-hour, pooled across the account
	AccrueDay        = "day"         // a fixed allowance per box per day
	AccrueUnmetered  = "unmetered"   // no quota (fair use)
)

// What happens past the included egress.
const (
	PastBilled    = "billed"    // billed per Per at Price
	PastThrottled = "throttled" // slowed to Throttle until the period ends
	PastBarred    = "barred"    // the terms forbid the traffic
	PastNone      = "none"      // nothing: unmetered
)

// PooledHoursPerMonth is the month that pooled hourly allowances are
// counted against (DigitalOcean: 672 hours = 28 days).
const PooledHoursPerMonth = 672

// Egress is a shape's included traffic and what happens past it.
type Egress struct {
	Included Bytes  `yaml:"included"`
	Accrues  string `yaml:"accrues"`
	Past     string `yaml:"past"`
	// Price per Per (TB, GB or GiB) when Past is billed.
	Price float64 `yaml:"price"`
	Per   string  `yaml:"per"`
	// Throttle is the speed left when Past is throttled.
	Throttle BitRate `yaml:"throttle"`
	// FairUse quotes the provider's fair-use clause, if any.
	FairUse string `yaml:"fair_use"`
}

// PerBytes is the size of the unit Price is quoted per.
func (e Egress) PerBytes() Bytes {
	switch e.Per {
	case "TB":
		return 1e12
	case "GB":
		return 1e9
	case "GiB":
		return 1 << 30
	case "TiB":
		return 1 << 40
	}
	return 0
}

// Ref names a shape: PROVIDER/SHAPE, with @REGION when the provider has
// more than one region.
func (s *Shape) Ref(p *Provider) string {
	if s.Region == "" || len(p.Regions) <= 1 {
		return p.Name + "/" + s.Name
	}
	return p.Name + "/" + s.Name + "@" + s.Region
}

// Provider returns the provider with the given name.
func (c *Catalogue) Provider(name string) (*Provider, bool) {
	for i := range c.Providers {
		if c.Providers[i].Name == name {
			return &c.Providers[i], true
		}
	}
	return nil, false
}

// Shape finds a shape by name and region; an empty region means the
// provider's first row of that name.
func (p *Provider) Shape(name, region string) (*Shape, bool) {
	for i := range p.Shapes {
		s := &p.Shapes[i]
		if s.Name == name && (region == "" || s.Region == region) {
			return s, true
		}
	}
	return nil, false
}

// RegionOf returns the region a location belongs to.
func (p *Provider) RegionOf(location string) (string, bool) {
	for r, locs := range p.Regions {
		if slices.Contains(locs, location) {
			return r, true
		}
	}
	return "", false
}

// Lookup resolves a PROVIDER/SHAPE[@REGION] reference.
func (c *Catalogue) Lookup(ref string) (*Provider, *Shape, error) {
	pname, rest, ok := strings.Cut(ref, "/")
	if !ok || pname == "" || rest == "" {
		return nil, nil, fmt.Errorf("shape %q: want PROVIDER/SHAPE, for example hcloud/ccx33", ref)
	}
	sname, region, _ := strings.Cut(rest, "@")
	p, ok := c.Provider(pname)
	if !ok {
		return nil, nil, fmt.Errorf("shape %q: unknown provider %q (known: %s)", ref, pname, strings.Join(c.providerNames(), ", "))
	}
	s, ok := p.Shape(sname, region)
	if !ok {
		return nil, nil, fmt.Errorf("shape %q: provider %s has no shape %q%s (known: %s)", ref, pname, sname, inRegion(region), strings.Join(p.shapeNames(), ", "))
	}
	return p, s, nil
}

func inRegion(region string) string {
	if region == "" {
		return ""
	}
	return " in region " + region
}

func (c *Catalogue) providerNames() []string {
	var names []string
	for _, p := range c.Providers {
		names = append(names, p.Name)
	}
	return names
}

func (p *Provider) shapeNames() []string {
	var names []string
	for _, s := range p.Shapes {
		if !slices.Contains(names, s.Name) {
			names = append(names, s.Name)
		}
	}
	return names
}

// ToCurrency converts an amount in currency cur into the catalogue's
// currency.
func (c *Catalogue) ToCurrency(amount float64, cur string) float64 {
	if cur == "" || cur == c.Currency {
		return amount
	}
	for _, r := range c.Rates {
		if r.Currency == cur {
			return amount * r.Value
		}
	}
	return amount // validate guarantees a rate exists
}

// validate checks the catalogue's values; errors carry the field path.
func (c *Catalogue) validate() error {
	if c.Currency == "" {
		return fieldErr("currency", "missing; want the currency plans are reported in, such as EUR")
	}
	rates := map[string]bool{c.Currency: true}
	for i, r := range c.Rates {
		p := fmt.Sprintf("rates[%d]", i)
		if r.Currency == "" {
			return fieldErr(p+".currency", "missing")
		}
		if !(r.Value > 0 && r.Value <= MaxPrice) {
			return fieldErr(p+".value", "want a rate above 0 and at most %d, got %v", MaxPrice, r.Value)
		}
		if r.Source == "" || r.Date == "" {
			return fieldErr(p, "every rate needs a source and a date")
		}
		rates[r.Currency] = true
	}
	names := map[string]bool{}
	for i := range c.Providers {
		pr := &c.Providers[i]
		p := fmt.Sprintf("providers[%d]", i)
		if pr.Name == "" || strings.ContainsAny(pr.Name, "/@ ") {
			return fieldErr(p+".name", "want a name without '/', '@' or spaces, got %q", pr.Name)
		}
		if names[pr.Name] {
			return fieldErr(p+".name", "provider %q is listed twice", pr.Name)
		}
		names[pr.Name] = true
		switch pr.Kind {
		case KindCloud, KindDedicated, KindLab:
		case KindCDN:
			if pr.Unusable == "" {
				return fieldErr(p+".unusable", "a cdn cannot run the relay; say why it is unusable")
			}
		default:
			return fieldErr(p+".kind", "want cloud, dedicated, lab or cdn, got %q", pr.Kind)
		}
		switch pr.API {
		case "", "hcloud", "digitalocean":
		default:
			return fieldErr(p+".api", "want hcloud, digitalocean or nothing, got %q", pr.API)
		}
		seen := map[string]bool{}
		for j := range pr.Shapes {
			if err := pr.Shapes[j].validate(pr, fmt.Sprintf("%s.shapes[%d]", p, j), rates); err != nil {
				return err
			}
			key := pr.Shapes[j].Name + "@" + pr.Shapes[j].Region
			if seen[key] {
				return fieldErr(fmt.Sprintf("%s.shapes[%d]", p, j), "shape %s is listed twice", key)
			}
			seen[key] = true
		}
	}
	return nil
}

func (s *Shape) validate(pr *Provider, p string, rates map[string]bool) error {
	switch {
	case s.Name == "" || strings.ContainsAny(s.Name, "/@ "):
		return fieldErr(p+".name", "want a name without '/', '@' or spaces, got %q", s.Name)
	case s.Source == "":
		return fieldErr(p+".source", "missing; every row names where its numbers come from")
	case s.Date == "":
		return fieldErr(p+".date", "missing; every row says when its numbers were read")
	case !(s.Hourly >= 0 && s.Hourly <= MaxPrice):
		return fieldErr(p+".hourly", "want a price from 0 to %d, got %v", MaxPrice, s.Hourly)
	case !(s.Monthly >= 0 && s.Monthly <= MaxPrice):
		return fieldErr(p+".monthly", "want a price from 0 to %d, got %v", MaxPrice, s.Monthly)
	case !(s.Setup >= 0 && s.Setup <= MaxPrice):
		return fieldErr(p+".setup", "want a price from 0 to %d, got %v", MaxPrice, s.Setup)
	case !rates[s.Currency] && s.Currency != "":
		return fieldErr(p+".currency", "no rate for %q in rates", s.Currency)
	}
	if len(pr.Regions) > 0 {
		if _, ok := pr.Regions[s.Region]; !ok {
			return fieldErr(p+".region", "want one of the provider's regions, got %q", s.Region)
		}
	}
	if pr.Kind != KindCDN {
		switch {
		case s.Cores <= 0 || s.Cores > MaxCores:
			return fieldErr(p+".cores", "want 1 to %d cores, got %d", MaxCores, s.Cores)
		case s.RAM <= 0 || s.RAM > MaxRAM:
			return fieldErr(p+".ram", "want a size above 0 and at most %s, got %s", MaxRAM.IEC(), s.RAM.IEC())
		case s.Uplink <= 0 || s.Uplink > MaxUplink:
			return fieldErr(p+".uplink", "want a rate above 0 and at most %s, got %s", MaxUplink, s.Uplink)
		}
	}
	e := s.Egress
	switch e.Accrues {
	case AccrueMonth, AccruePooledHour, AccrueDay:
		if e.Included <= 0 && e.Past != PastBilled {
			return fieldErr(p+".egress.included", "must be positive when egress accrues per %s", e.Accrues)
		}
	case AccrueUnmetered:
	default:
		return fieldErr(p+".egress.accrues", "want month, pooled-hour, day or unmetered, got %q", e.Accrues)
	}
	switch e.Past {
	case PastBilled:
		if !(e.Price > 0 && e.Price <= MaxPrice) {
			return fieldErr(p+".egress.price", "must be positive and at most %d when egress past the allowance is billed, got %v", MaxPrice, e.Price)
		}
		if e.PerBytes() == 0 {
			return fieldErr(p+".egress.per", "want TB, TiB, GB or GiB, got %q", e.Per)
		}
	case PastThrottled:
		if e.Throttle <= 0 || e.Throttle > MaxUplink {
			return fieldErr(p+".egress.throttle", "must say the speed left when throttled, above 0 and at most %s", MaxUplink)
		}
	case PastBarred:
	case PastNone:
		if e.Accrues != AccrueUnmetered {
			return fieldErr(p+".egress.past", "none is only for unmetered egress")
		}
	default:
		return fieldErr(p+".egress.past", "want billed, throttled, barred or none, got %q", e.Past)
	}
	return nil
}
