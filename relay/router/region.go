package router

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
)

// Regions. A relay in the relays file may name its "region"; the file's
// "regions" list gives each region's listener address prefixes:
//
//	{"relays": [{"url": "...", "stats": "...", "region": "eu"}, ...],
//	 "regions": [{"name": "eu", "prefixes": ["10.1.0.0/16"]},
//	             {"name": "us", "prefixes": ["10.2.0.0/16", "2001:db8::/32"]}]}
//
// A listener's region is its /route?region=NAME hint, else the region
// with the longest prefix holding the client's address (the TCP peer of
// the request: a router behind a proxy sees the proxy's), else none.
// Pick prefers the relays of that region; when none of them has room it
// answers a relay of another region and says so ("region_fallback": true
// in the answer, and the Relay-Region-Fallback header). A listener with no
// region is routed over every relay as before.

// maxRegionName bounds a region name; regionName checks its characters.
const maxRegionName = 32

// checkRegionName accepts lowercase letters, digits and '-', 1 to
// maxRegionName characters: the name is a metrics label and a unit
// argument, and the router takes it from anonymous callers.
func checkRegionName(name string) error {
	if name == "" || len(name) > maxRegionName {
		return fmt.Errorf("region %q: want 1 to %d characters", name, maxRegionName)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("region %q: want lowercase letters, digits and '-'", name)
		}
	}
	return nil
}

// regionPrefix is one prefix of one region.
type regionPrefix struct {
	prefix netip.Prefix
	region string
}

// parseRegions checks the relays file's regions and returns their
// prefixes, longest first.
func parseRegions(f *File) ([]regionPrefix, error) {
	var out []regionPrefix
	names := map[string]bool{}
	owner := map[netip.Prefix]string{}
	for i, rg := range f.Regions {
		if err := checkRegionName(rg.Name); err != nil {
			return nil, fmt.Errorf("relays file: regions %d: name: %w", i, err)
		}
		if names[rg.Name] {
			return nil, fmt.Errorf("relays file: regions %d: region %q listed twice", i, rg.Name)
		}
		names[rg.Name] = true
		for _, p := range rg.Prefixes {
			pf, err := netip.ParsePrefix(p)
			if err != nil {
				return nil, fmt.Errorf("relays file: regions %d (%s): prefixes: %q: want a CIDR such as 10.1.0.0/16", i, rg.Name, p)
			}
			pf = pf.Masked()
			if o, ok := owner[pf]; ok {
				return nil, fmt.Errorf("relays file: regions %d (%s): prefixes: %s is already region %q's", i, rg.Name, pf, o)
			}
			owner[pf] = rg.Name
			out = append(out, regionPrefix{prefix: pf, region: rg.Name})
		}
	}
	for i, r := range f.Relays {
		if r.Region == "" {
			continue
		}
		if err := checkRegionName(r.Region); err != nil {
			return nil, fmt.Errorf("relays file: relay %d: region: %w", i, err)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].prefix.Bits() > out[b].prefix.Bits() })
	return out, nil
}

// regionOf is the region whose prefix holds the address of remote (an
// http.Request's RemoteAddr, HOST:PORT), longest prefix first; "" when
// none does.
func regionOf(prefixes []regionPrefix, remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return ""
	}
	ip = ip.Unmap()
	for _, p := range prefixes {
		if p.prefix.Contains(ip) {
			return p.region
		}
	}
	return ""
}

// regionCounts counts /route answers per listener region (the label is
// one of the regions the relays file knows, or "unknown" for a hint it
// does not: anonymous callers must not grow the label set).
type regionCounts struct {
	mu sync.Mutex
	// by region, then result: "in_region" (a relay of the listener's
	// region), "fallback" (another region's), "unavailable" (503).
	n map[string]map[string]int64
}

func (c *regionCounts) add(region, result string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]map[string]int64{}
	}
	if c.n[region] == nil {
		c.n[region] = map[string]int64{}
	}
	c.n[region][result]++
}

func (c *regionCounts) snapshot() map[string]map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]map[string]int64, len(c.n))
	for rg, m := range c.n {
		out[rg] = make(map[string]int64, len(m))
		for k, v := range m {
			out[rg][k] = v
		}
	}
	return out
}
