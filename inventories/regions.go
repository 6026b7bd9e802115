package inventories

import (
	"fmt"
	"net/netip"
)

// Regions. A fleet file may split the fleet into regions:
//
//	regions:
//	  - name: eu
//	    publish: true               # the publishers' region (default: the first)
//	    prefixes: [10.1.0.0/16]     # listener addresses the router sends here
//	    origins: {provider: hcloud, shape: cx22, location: fsn1, count: 2}
//	    steady: [eu-steady]         # names of steady groups in this region
//	    listeners: 60000            # this region's audience, for fleet plan
//	  - name: us
//	    prefixes: [10.2.0.0/16]
//	    origins: {provider: hcloud, shape: cx22, location: ash, count: 2}
//	    steady: [us-steady]
//
// Publishers publish to the publishers' region's origins (the root). Every
// other region's origins pull from the root's origins, one link per origin
// box (their upstreams); each region's edges pull from their own region's
// origins. Burst boxes (events, surge) pull from the root's origins. The
// router prefers a listener's region (its region= hint, else its address
// in a region's prefixes).
//
// With regions, the top-level origin: and origins: are left out, every
// steady group belongs to exactly one region, and, once loaded,
// Fleet.Origins is the root region's origin group (its boxes keep the
// group name OriginGroup); another region's origin group is called
// RegionOriginGroup(name).

// Region is one region of the fleet file.
type Region struct {
	Name string `yaml:"name"`
	// Publish marks the publishers' region (at most one; default the
	// first).
	Publish bool `yaml:"publish"`
	// Prefixes are the listener address prefixes (CIDRs) the router
	// sends to this region's relays.
	Prefixes []string `yaml:"prefixes"`
	// Origins is the region's origin group.
	Origins *Origins `yaml:"origins"`
	// Steady names the steady groups (steady[].name) in the region.
	Steady []string `yaml:"steady"`
	// Listeners, optional, is the region's audience: fleet plan sizes
	// each region from its own (fleet plan --region-listeners overrides).
	Listeners int `yaml:"listeners"`
}

// maxRegionName bounds a region name: it is part of box and group names,
// a router metrics label and a query parameter.
const maxRegionName = 16

// RegionOriginGroup is the group name of the origin boxes of a region
// that is not the publishers' (whose origin group is OriginGroup).
func RegionOriginGroup(region string) string { return OriginGroup + "-" + region }

// RootRegion is the publishers' region (nil without regions).
func (f *Fleet) RootRegion() *Region {
	for i := range f.Regions {
		if f.Regions[i].Publish {
			return &f.Regions[i]
		}
	}
	if len(f.Regions) > 0 {
		return &f.Regions[0]
	}
	return nil
}

// OriginGroupOf is region's origin group name: OriginGroup for the
// publishers' region (and for a fleet without regions), else
// RegionOriginGroup.
func (f *Fleet) OriginGroupOf(region string) string {
	if rr := f.RootRegion(); rr == nil || rr.Name == region {
		return OriginGroup
	}
	return RegionOriginGroup(region)
}

// RegionOfGroup is the region of a steady group or origin group ("" for
// a fleet without regions, or a group no region holds: burst boxes).
func (f *Fleet) RegionOfGroup(group string) string {
	for _, rg := range f.Regions {
		if group == f.OriginGroupOf(rg.Name) {
			return rg.Name
		}
		for _, g := range rg.Steady {
			if g == group {
				return rg.Name
			}
		}
	}
	return ""
}

// RegionOrigins is the origin group of region name (nil when none).
func (f *Fleet) RegionOrigins(name string) *Origins {
	for _, rg := range f.Regions {
		if rg.Name == name {
			return rg.Origins
		}
	}
	return nil
}

// checkRegionName accepts lowercase letters, digits and '-' (not first
// or last), 1 to maxRegionName characters.
func checkRegionName(name string) error {
	if name == "" {
		return fmt.Errorf("missing")
	}
	if len(name) > maxRegionName {
		return fmt.Errorf("%q: want at most %d characters", name, maxRegionName)
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(name)-1
		if !ok {
			return fmt.Errorf("%q: want lowercase letters, digits and '-' inside", name)
		}
	}
	return nil
}

// validateRegions checks regions: and, when valid, points Fleet.Origins
// at the root region's origin group.
func (f *Fleet) validateRegions(cat *Catalogue) error {
	if len(f.Regions) == 0 {
		return nil
	}
	names := map[string]bool{}
	prefixOwner := map[netip.Prefix]string{}
	groupRegion := map[string]string{}
	publish := -1
	for i := range f.Regions {
		rg := &f.Regions[i]
		p := fmt.Sprintf("regions[%d]", i)
		if err := checkRegionName(rg.Name); err != nil {
			return fieldErr(p+".name", "%v", err)
		}
		if names[rg.Name] {
			return fieldErr(p+".name", "region %q is listed twice", rg.Name)
		}
		names[rg.Name] = true
		if rg.Publish {
			if publish >= 0 {
				return fieldErr(p+".publish", "regions[%d] (%s) is the publishers' region already; mark one", publish, f.Regions[publish].Name)
			}
			publish = i
		}
		for j, s := range rg.Prefixes {
			pf, err := netip.ParsePrefix(s)
			if err != nil {
				return fieldErr(fmt.Sprintf("%s.prefixes[%d]", p, j), "want a CIDR such as 10.1.0.0/16, got %q", s)
			}
			pf = pf.Masked()
			if o, ok := prefixOwner[pf]; ok {
				return fieldErr(fmt.Sprintf("%s.prefixes[%d]", p, j), "%s is region %s's already", pf, o)
			}
			prefixOwner[pf] = rg.Name
		}
		if rg.Origins == nil {
			return fieldErr(p+".origins", "missing; each region has its origin group (provider, shape, location, count: %d or more)", MinOrigins)
		}
		if err := rg.Origins.validate(cat, p+".origins"); err != nil {
			return err
		}
		for j, g := range rg.Steady {
			if groupOf(f, g) == nil {
				return fieldErr(fmt.Sprintf("%s.steady[%d]", p, j), "no steady group is named %q", g)
			}
			if o, ok := groupRegion[g]; ok {
				return fieldErr(fmt.Sprintf("%s.steady[%d]", p, j), "steady group %s is in region %s already", g, o)
			}
			groupRegion[g] = rg.Name
		}
		if rg.Listeners < 0 {
			return fieldErr(p+".listeners", "must not be negative, got %d", rg.Listeners)
		}
	}
	for i, g := range f.Steady {
		if _, ok := groupRegion[g.Name]; !ok {
			return fieldErr(fmt.Sprintf("steady[%d].name", i), "steady group %s is in no region: list it in one region's steady:", g.Name)
		}
	}
	f.Origins = f.RootRegion().Origins
	return nil
}

// groupOf is the steady group called name, or nil.
func groupOf(f *Fleet, name string) *Group {
	for i := range f.Steady {
		if f.Steady[i].Name == name {
			return &f.Steady[i]
		}
	}
	return nil
}
