package digitalocean

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/digitalocean/godo"

	"github.com/relayfleet/relayfleet/infra/backend"
)

// allPorts is every port of a protocol, as DigitalOcean's firewall rules
// take it.
const allPorts = "1-65535"

// EnsureFirewall creates the firewall called name, or brings the existing
// one to the inbound rules backend.FirewallRules(relayPorts, adminRanges)
// with all outbound traffic allowed (a DigitalOcean firewall without
// outbound rules drops it all), applied to the droplets whose labels are
// exactly labels, and returns its id. Nothing is changed when all is as
// wanted. A firewall of the name applied to other tags is another one,
// and refused.
//
// A DigitalOcean firewall applies to the droplets that carry ANY of its
// tags, so one tag per label would widen it to every droplet of the
// fleet, of the tier, and so on. It is applied to one tag instead, the
// labels' SetTag, which Create and SetLabels put on exactly the droplets
// of those labels.
func (b *Backend) EnsureFirewall(ctx context.Context, name string, labels map[string]string, relayPorts [2]uint16, adminRanges []netip.Prefix) (string, error) {
	fail := func(err error) (string, error) { return "", fmt.Errorf("digitalocean firewall %s: %w", name, err) }
	if name == "" {
		return fail(fmt.Errorf("no name"))
	}
	if len(labels) == 0 {
		return fail(fmt.Errorf("no labels: a firewall for every droplet is not what a fleet wants"))
	}
	if err := checkTags(labels); err != nil {
		return fail(err)
	}
	rules, err := backend.FirewallRules(relayPorts, adminRanges)
	if err != nil {
		return fail(err)
	}
	tag := SetTag(labels)
	want := &godo.FirewallRequest{
		Name:          name,
		InboundRules:  inbound(rules),
		OutboundRules: outbound(),
		DropletIDs:    []int{},
		Tags:          []string{tag},
	}
	// A firewall can only be applied to a tag that exists.
	if err := b.ensureTag(ctx, tag); err != nil {
		return fail(err)
	}

	fw, err := b.firewallByName(ctx, name)
	if err != nil {
		return fail(err)
	}
	// A firewall of the name that applies to other droplets' tags is
	// another one (another tier's or event's): taking it would leave
	// those droplets open.
	if fw != nil && len(fw.Tags) > 0 && !slices.Contains(fw.Tags, tag) {
		return fail(fmt.Errorf("the name is taken by firewall %s (id %s) of tags %s, not %s: refusing to adopt it", name, fw.ID, strings.Join(fw.Tags, ","), tag))
	}
	if fw == nil {
		fw, _, err := b.c.Firewalls.Create(ctx, want)
		if err != nil {
			return fail(apiError(err))
		}
		return fw.ID, nil
	}
	if firewallKey(fw.InboundRules, fw.OutboundRules, fw.Tags, fw.DropletIDs) != firewallKey(want.InboundRules, want.OutboundRules, want.Tags, want.DropletIDs) {
		if _, _, err := b.c.Firewalls.Update(ctx, fw.ID, want); err != nil {
			return fail(apiError(err))
		}
	}
	return fw.ID, nil
}

// DeleteFirewall deletes the firewall; a missing one is not an error.
func (b *Backend) DeleteFirewall(ctx context.Context, id string) error {
	if id == "" {
		return fmt.Errorf("digitalocean delete firewall: no id")
	}
	_, err := b.c.Firewalls.Delete(ctx, id)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("digitalocean delete firewall %s: %w", id, apiError(err))
	}
	return nil
}

func (b *Backend) firewallByName(ctx context.Context, name string) (*godo.Firewall, error) {
	lo := &godo.ListOptions{Page: 1, PerPage: 200}
	for {
		fws, resp, err := b.c.Firewalls.List(ctx, lo)
		if err != nil {
			return nil, fmt.Errorf("list firewalls: %w", apiError(err))
		}
		for _, fw := range fws {
			if fw.Name == name {
				return &fw, nil
			}
		}
		if resp == nil || resp.Links == nil || resp.Links.IsLastPage() || len(fws) == 0 {
			return nil, nil
		}
		page, err := resp.Links.CurrentPage()
		if err != nil || page+1 <= lo.Page {
			return nil, fmt.Errorf("list firewalls: pagination does not advance past page %d", lo.Page)
		}
		lo.Page = page + 1
	}
}

func inbound(rules []backend.Rule) []godo.InboundRule {
	out := make([]godo.InboundRule, 0, len(rules))
	for _, r := range rules {
		src := make([]string, 0, len(r.Sources))
		for _, p := range r.Sources {
			src = append(src, p.String())
		}
		out = append(out, godo.InboundRule{Protocol: r.Protocol, PortRange: r.Ports(), Sources: &godo.Sources{Addresses: src}})
	}
	return out
}

func outbound() []godo.OutboundRule {
	dst := func() *godo.Destinations {
		return &godo.Destinations{Addresses: []string{backend.Anywhere[0].String(), backend.Anywhere[1].String()}}
	}
	return []godo.OutboundRule{
		{Protocol: "tcp", PortRange: allPorts, Destinations: dst()},
		{Protocol: "udp", PortRange: allPorts, Destinations: dst()},
		// DigitalOcean's description requires ports on every rule, ICMP's
		// too, and reads ICMP's back as "0".
		{Protocol: "icmp", PortRange: "0", Destinations: dst()},
	}
}

// ports is a port range in one spelling: the API answers "0" for all
// ports (and always for ICMP) whatever was sent.
func ports(p string) string {
	switch p {
	case "", "0", "all", allPorts:
		return "all"
	}
	return p
}

// firewallKey is a firewall's rules and targets in a canonical form.
func firewallKey(in []godo.InboundRule, out []godo.OutboundRule, tags []string, droplets []int) string {
	var keys []string
	for _, r := range in {
		keys = append(keys, ruleKey("in", r.Protocol, r.PortRange, r.Sources, r.Action))
	}
	for _, r := range out {
		keys = append(keys, ruleKey("out", r.Protocol, r.PortRange, (*godo.Sources)(r.Destinations), r.Action))
	}
	slices.Sort(keys)
	ids := slices.Sorted(slices.Values(droplets))
	return fmt.Sprintf("%s|tags=%s|droplets=%v", strings.Join(keys, ";"), sortedList(tags), ids)
}

// ruleKey is a rule in a canonical form. peers are its sources (dir "in")
// or destinations ("out"); a rule whose peers are more than addresses is
// none of the fleet's, and its key says so.
func ruleKey(dir, protocol, portRange string, peers *godo.Sources, action godo.FirewallRuleAction) string {
	var a []string
	if peers != nil {
		a = peers.Addresses
		if len(peers.Tags)+len(peers.DropletIDs)+len(peers.LoadBalancerUIDs)+len(peers.KubernetesIDs) > 0 {
			a = append(slices.Clone(a), "other-peers")
		}
	}
	return fmt.Sprintf("%s %s %s %s %s", dir, protocol, ports(portRange), sortedList(a), actionOf(action))
}

// sortedList is a, sorted, joined by commas.
func sortedList(a []string) string {
	a = slices.Clone(a)
	slices.Sort(a)
	return strings.Join(a, ",")
}

func actionOf(a godo.FirewallRuleAction) godo.FirewallRuleAction {
	if a == "" {
		return godo.FirewallRuleActionAllow
	}
	return a
}
