package program

import (
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
)

// Names of boxes and firewalls at their backends.
//
// On clouds and static servers a name carries its tier: FLEET-s-GROUP-N
// for a steady group's box, FLEET-e-EVENT-N for an event's, and the
// firewalls FLEET-s-GROUP and FLEET-e-EVENT; a steady box and an event's
// can never share a name, whatever the group and event are called. Lab
// names have 11 characters: GROUP-N cut short for steady boxes, and for an
// event's the event's first letters, two hex digits of its name's hash and
// -N; Deploy and DeployBurst refuse names that come out the same.
//
// Fleets made before kept FLEET-GROUP-N and FLEET-EVENT-N (and firewalls
// FLEET-GROUP, FLEET-EVENT): Options.Existing keeps those for the boxes
// the state has under them, so that the rename replaces nothing. The
// backends adopt a box by name only when its fleet, tier and event labels
// match (backend.CheckAdopt), which keeps the old names safe too.

// Tier marks in cloud names.
const (
	steadyMark = "s"
	eventMark  = "e"
)

// maxHostname is the longest name the clouds take (a DNS label).
const maxHostname = 63

// BoxName is a steady box's name at its backend: FLEET-s-GROUP-N on clouds
// and static servers, and within the lab's 11 characters, GROUP-N cut
// short.
func BoxName(fleet, group, backend string, n int) string {
	if backend != provider.BackendLab {
		return fmt.Sprintf("%s-%s-%s-%d", fleet, steadyMark, group, n)
	}
	suffix := fmt.Sprintf("-%d", n)
	base := strings.ToLower(group)
	if max := 11 - len(suffix); len(base) > max {
		base = base[:max]
	}
	base = strings.TrimRight(base, "-")
	name := base + suffix
	if lab.ValidName(name) != nil {
		name = "b" + suffix // a group name the lab cannot carry
	}
	return name
}

// BurstBoxName is an event's box name at its backend: FLEET-e-EVENT-N on
// clouds; within the lab's 11 characters, the event's first letters and
// two hex digits of its name's hash, so that two events' boxes never share
// a name.
func BurstBoxName(fleet, event, backend string, n int) string {
	if backend != provider.BackendLab {
		return fmt.Sprintf("%s-%s-%s-%d", fleet, eventMark, event, n)
	}
	sum := sha256.Sum256([]byte(fleet + "/" + event))
	suffix := fmt.Sprintf("%02x-%d", sum[0], n)
	base := strings.ToLower(event)
	if max := 11 - len(suffix); len(base) > max {
		base = base[:max]
	}
	name := base + suffix
	if lab.ValidName(name) != nil {
		name = "e" + suffix
	}
	return name
}

// SpillBoxName is an event's box n on its candidate k (k >= 1: not the
// first, whose boxes are BurstBoxName's): FLEET-e-EVENT-N-cK on clouds,
// which no event's first-candidate box (ending in -N) and no other
// candidate's box can be called; within the lab's 11 characters as
// BurstBoxName, with cK after the number.
func SpillBoxName(fleet, event, backend string, k, n int) string {
	if backend != provider.BackendLab {
		return fmt.Sprintf("%s-%s-%s-%d-c%d", fleet, eventMark, event, n, k)
	}
	sum := sha256.Sum256([]byte(fleet + "/" + event))
	suffix := fmt.Sprintf("%02x-%dc%d", sum[0], n, k)
	base := strings.ToLower(event)
	if max := 11 - len(suffix); len(base) > max {
		base = base[:max]
	}
	name := base + suffix
	if lab.ValidName(name) != nil {
		name = "e" + suffix
	}
	return name
}

// SpillGroup is the group label (and the resources' logical names' stem)
// of an event's boxes on its candidate k >= 1: EVENT_cK, which no event
// (lowercase letters, digits and '-') is called; the first candidate's
// group is the event's name.
func SpillGroup(event string, k int) string { return fmt.Sprintf("%s_c%d", event, k) }

// SpillFirewallName is the cloud firewall of an event's boxes on its
// candidate k >= 1: FLEET-e-EVENT.cK, which no event's firewall (no dot)
// and no other candidate's is called.
func SpillFirewallName(fleet, event string, k int) string {
	return fmt.Sprintf("%s.c%d", FirewallName(fleet, provider.TierBurst, event), k)
}

// FirewallName is a steady group's (tier steady, name the group) or an
// event's (tier burst, name the event) cloud firewall: FLEET-s-GROUP or
// FLEET-e-EVENT.
func FirewallName(fleet, tier, name string) string {
	mark := steadyMark
	if tier == provider.TierBurst {
		mark = eventMark
	}
	return fmt.Sprintf("%s-%s-%s", fleet, mark, name)
}

// LegacyBoxName is the name steady boxes were given before names carried
// their tier: FLEET-GROUP-N (lab names have not changed).
func LegacyBoxName(fleet, group, backend string, n int) string {
	if backend == provider.BackendLab {
		return BoxName(fleet, group, backend, n)
	}
	return fmt.Sprintf("%s-%s-%d", fleet, group, n)
}

// LegacyBurstBoxName is the name an event's boxes were given before names
// carried their tier: FLEET-EVENT-N (lab names have not changed).
func LegacyBurstBoxName(fleet, event, backend string, n int) string {
	if backend == provider.BackendLab {
		return BurstBoxName(fleet, event, backend, n)
	}
	return fmt.Sprintf("%s-%s-%d", fleet, event, n)
}

// LegacyFirewallName is the name firewalls were given before names carried
// their tier: FLEET-GROUP or FLEET-EVENT.
func LegacyFirewallName(fleet, name string) string { return fleet + "-" + name }

// boxResource and firewallResource are the Pulumi resource names of a
// set's box n and firewall.
func boxResource(group string, n int) string { return fmt.Sprintf("%s-%d", group, n) }
func firewallResource(group string) string   { return group + "-firewall" }

// keep is the name to give the resource res: legacy when the state has it
// under that name, else name.
func keep(o Options, res, name, legacy string) string {
	if legacy != name && o.Existing[res] == legacy {
		return legacy
	}
	return name
}

// checkName refuses a cloud or static name the clouds would not take.
func checkName(backend, name string) error {
	if backend == provider.BackendLab {
		return lab.ValidName(name)
	}
	if len(name) > maxHostname {
		return fmt.Errorf("name %q is %d characters; the clouds take at most %d: shorten the fleet's or the group's or event's name", name, len(name), maxHostname)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("name %q: character %q; a hostname has lowercase letters, digits and '-' only", name, c)
		}
	}
	if name[0] == '-' || name[len(name)-1] == '-' {
		return fmt.Errorf("name %q: a hostname does not start or end with '-'", name)
	}
	return nil
}

func steadyBackend(g *inventories.Group) string {
	if g.Provider == inventories.ProviderStatic {
		return provider.BackendStatic
	}
	return g.Provider
}

// steadySets are the fleet's steady groups as box sets, one per group in
// order, with their names; it refuses names the backends would not take
// and two boxes of one name.
func steadySets(f *inventories.Fleet, o Options) ([]boxSet, error) {
	var sets []boxSet
	owner := map[string]string{}
	for _, og := range originSets(f) {
		for i, n := range og.names {
			if err := checkName(og.backend, n); err != nil {
				return nil, fmt.Errorf("origins: box %d: %w", i+1, err)
			}
			owner[n] = "origin group " + og.group
		}
	}
	for _, g := range f.Steady {
		backend := steadyBackend(&g)
		names := make([]string, g.BoxCount())
		for i := range names {
			n := BoxName(f.Name, g.Name, backend, i+1)
			names[i] = keep(o, boxResource(g.Name, i+1), n, LegacyBoxName(f.Name, g.Name, backend, i+1))
			if err := checkName(backend, names[i]); err != nil {
				return nil, fmt.Errorf("steady group %s: box %d: %w", g.Name, i+1, err)
			}
			if prev, ok := owner[names[i]]; ok {
				return nil, fmt.Errorf("steady group %s: box %d is named %s like a box of %s: rename one group", g.Name, i+1, names[i], prev)
			}
			owner[names[i]] = "steady group " + g.Name
		}
		fw := FirewallName(f.Name, provider.TierSteady, g.Name)
		sets = append(sets, boxSet{
			group: g.Name, box: g.Box, backend: backend, names: names, statics: g.Hosts,
			tier: provider.TierSteady, event: provider.NoEvent,
			firewall: keep(o, firewallResource(g.Name), fw, LegacyFirewallName(f.Name, g.Name)),
			region:   f.RegionOfGroup(g.Name),
		})
	}
	return sets, nil
}

// originSet is the fleet's origin group as a box set (nil: the fleet has
// none): boxes named like a steady group's called OriginGroup (no steady
// group may take that name), in the steady stack, tier origin. With
// regions it is the publishers' region's.
func originSet(f *inventories.Fleet) *boxSet {
	if f.Origins == nil {
		return nil
	}
	s := originGroupSet(f, inventories.OriginGroup, f.Origins)
	return &s
}

func originGroupSet(f *inventories.Fleet, group string, o *inventories.Origins) boxSet {
	backend := o.Provider
	names := make([]string, o.Count)
	for i := range names {
		names[i] = BoxName(f.Name, group, backend, i+1)
	}
	return boxSet{
		group: group, box: o.Box(), backend: backend, names: names,
		tier: provider.TierOrigin, event: provider.NoEvent,
		firewall: FirewallName(f.Name, provider.TierOrigin, group),
		region:   f.RegionOfGroup(group),
	}
}

// originSets are the fleet's origin groups as box sets: the publishers'
// (originSet) first, then, with regions, every other region's
// (inventories.RegionOriginGroup), in the fleet file's order.
func originSets(f *inventories.Fleet) []boxSet {
	og := originSet(f)
	if og == nil {
		return nil
	}
	sets := []boxSet{*og}
	for _, rg := range f.Regions {
		if group := f.OriginGroupOf(rg.Name); group != inventories.OriginGroup {
			sets = append(sets, originGroupSet(f, group, rg.Origins))
		}
	}
	return sets
}

// burstSets are an event's box sets: its first candidate's, then one for
// each later candidate it spills onto. It refuses a name that any steady
// box of the fleet has or had (steady names, new and legacy): two boxes of
// one name would be one box to the backends.
func burstSets(f *inventories.Fleet, b Burst, o Options) ([]boxSet, error) {
	steady := map[string]string{}
	for _, g := range f.Steady {
		backend := steadyBackend(&g)
		for i := range g.BoxCount() {
			steady[BoxName(f.Name, g.Name, backend, i+1)] = g.Name
			steady[LegacyBoxName(f.Name, g.Name, backend, i+1)] = g.Name
		}
		steady[FirewallName(f.Name, provider.TierSteady, g.Name)] = g.Name
		steady[LegacyFirewallName(f.Name, g.Name)] = g.Name
	}
	for _, og := range originSets(f) {
		for _, n := range og.names {
			steady[n] = og.group
		}
		steady[og.firewall] = og.group
	}
	check := func(backend, name, what string) error {
		if err := checkName(backend, name); err != nil {
			return fmt.Errorf("event %s: %s: %w", b.Event, what, err)
		}
		if g, ok := steady[name]; ok {
			return fmt.Errorf("event %s: %s is named %s like a box of steady group %s: rename the event", b.Event, what, name, g)
		}
		return nil
	}
	names := make([]string, b.Boxes)
	for i := range names {
		n := BurstBoxName(f.Name, b.Event, b.Pool.Provider, i+1)
		names[i] = keep(o, boxResource(b.Event, i+1), n, LegacyBurstBoxName(f.Name, b.Event, b.Pool.Provider, i+1))
		if err := check(b.Pool.Provider, names[i], fmt.Sprintf("box %d", i+1)); err != nil {
			return nil, err
		}
	}
	fw := keep(o, firewallResource(b.Event), FirewallName(f.Name, provider.TierBurst, b.Event), LegacyFirewallName(f.Name, b.Event))
	if g, ok := steady[fw]; ok {
		return nil, fmt.Errorf("event %s: its firewall is named %s like steady group %s's: rename the event", b.Event, fw, g)
	}
	sets := []boxSet{{
		group: b.Event, box: b.Pool.Box, backend: b.Pool.Provider, names: names,
		tier: provider.TierBurst, event: b.Event, firewall: fw,
	}}
	choices := b.Pool.Choices()
	for _, sp := range b.Spill {
		if sp.Candidate < 1 || sp.Candidate >= len(choices) {
			return nil, fmt.Errorf("event %s: spill onto candidate %d, but its burst lists %d", b.Event, sp.Candidate, len(choices))
		}
		if sp.Boxes <= 0 {
			continue
		}
		box := b.Pool.CandidateBox(sp.Candidate)
		if box.Provider == inventories.ProviderStatic {
			return nil, fmt.Errorf("event %s: static servers cannot burst", b.Event)
		}
		group := SpillGroup(b.Event, sp.Candidate)
		names := make([]string, sp.Boxes)
		for i := range names {
			names[i] = SpillBoxName(f.Name, b.Event, box.Provider, sp.Candidate, i+1)
			if err := check(box.Provider, names[i], fmt.Sprintf("box %d on candidate %s", i+1, choices[sp.Candidate].Ref())); err != nil {
				return nil, err
			}
		}
		sets = append(sets, boxSet{
			group: group, box: box, backend: box.Provider, names: names,
			tier: provider.TierBurst, event: b.Event, firewall: SpillFirewallName(f.Name, b.Event, sp.Candidate),
		})
	}
	return sets, nil
}
