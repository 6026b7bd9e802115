package hcloud

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/relayfleet/relayfleet/infra/backend"
)

// EnsureFirewall creates the firewall called name, or brings the existing
// one to the rules backend.FirewallRules(relayPorts, adminRanges), applied
// to the servers that carry labels (one label selector; other resources it
// was applied to are removed), with labels as its own labels; an existing
// firewall whose fleet, tier or event label differs from labels' is
// another one and refused (backend.CheckAdopt). It returns the
// firewall's id. Nothing is changed when all is as wanted. Outbound traffic
// stays open: a Hetzner firewall without outbound rules allows all of it.
func (b *Backend) EnsureFirewall(ctx context.Context, name string, labels map[string]string, relayPorts [2]uint16, adminRanges []netip.Prefix) (string, error) {
	fail := func(err error) (string, error) { return "", fmt.Errorf("hcloud firewall %s: %w", name, err) }
	if name == "" {
		return fail(fmt.Errorf("no name"))
	}
	if len(labels) == 0 {
		return fail(fmt.Errorf("no labels: a firewall for every server is not what a fleet wants"))
	}
	if err := backend.ValidLabels(labels); err != nil {
		return fail(err)
	}
	rules, err := backend.FirewallRules(relayPorts, adminRanges)
	if err != nil {
		return fail(err)
	}
	want := fwRules(rules)
	sel := backend.Selector(labels)
	applyTo := []hcloud.FirewallResource{{
		Type:          hcloud.FirewallResourceTypeLabelSelector,
		LabelSelector: &hcloud.FirewallResourceLabelSelector{Selector: sel},
	}}

	fw, _, err := b.c.Firewall.GetByName(ctx, name)
	if err != nil {
		return fail(apiError(err))
	}
	if fw == nil {
		res, _, err := b.c.Firewall.Create(ctx, hcloud.FirewallCreateOpts{Name: name, Labels: labels, Rules: want, ApplyTo: applyTo})
		if err != nil {
			return fail(apiError(err))
		}
		if err := b.c.Action.WaitFor(ctx, res.Actions...); err != nil {
			return fail(apiError(err))
		}
		return fmt.Sprint(res.Firewall.ID), nil
	}
	id := fmt.Sprint(fw.ID)
	// Another tier's or event's firewall of the name is not this one:
	// taking it would point it at other servers, and its delete would
	// leave those open.
	if err := backend.CheckAdopt("firewall", name, id, fw.Labels, labels); err != nil {
		return fail(err)
	}
	if !maps.Equal(fw.Labels, labels) {
		if _, _, err := b.c.Firewall.Update(ctx, fw, hcloud.FirewallUpdateOpts{Labels: labels}); err != nil {
			return fail(apiError(err))
		}
	}
	if !slices.Equal(ruleKeys(fw.Rules), ruleKeys(want)) {
		actions, _, err := b.c.Firewall.SetRules(ctx, fw, hcloud.FirewallSetRulesOpts{Rules: want})
		if err != nil {
			return fail(apiError(err))
		}
		if err := b.c.Action.WaitFor(ctx, actions...); err != nil {
			return fail(apiError(err))
		}
	}
	applied, stale := false, []hcloud.FirewallResource{}
	for _, r := range fw.AppliedTo {
		if r.Type == hcloud.FirewallResourceTypeLabelSelector && r.LabelSelector != nil && r.LabelSelector.Selector == sel {
			applied = true
			continue
		}
		stale = append(stale, hcloud.FirewallResource{Type: r.Type, Server: r.Server, LabelSelector: r.LabelSelector})
	}
	if len(stale) > 0 {
		actions, _, err := b.c.Firewall.RemoveResources(ctx, fw, stale)
		if err != nil {
			return fail(apiError(err))
		}
		if err := b.c.Action.WaitFor(ctx, actions...); err != nil {
			return fail(apiError(err))
		}
	}
	if !applied {
		actions, _, err := b.c.Firewall.ApplyResources(ctx, fw, applyTo)
		if err != nil {
			return fail(apiError(err))
		}
		if err := b.c.Action.WaitFor(ctx, actions...); err != nil {
			return fail(apiError(err))
		}
	}
	return id, nil
}

// DeleteFirewall removes the firewall from what it is applied to, then
// deletes it; a missing firewall is not an error.
func (b *Backend) DeleteFirewall(ctx context.Context, id string) error {
	n, err := parseID(id)
	if err != nil {
		return fmt.Errorf("hcloud delete firewall: %w", err)
	}
	fail := func(err error) error { return fmt.Errorf("hcloud delete firewall %d: %w", n, err) }
	fw, _, err := b.c.Firewall.GetByID(ctx, n)
	if err != nil {
		return fail(apiError(err))
	}
	if fw == nil {
		return nil
	}
	if len(fw.AppliedTo) > 0 {
		res := make([]hcloud.FirewallResource, 0, len(fw.AppliedTo))
		for _, r := range fw.AppliedTo {
			res = append(res, hcloud.FirewallResource{Type: r.Type, Server: r.Server, LabelSelector: r.LabelSelector})
		}
		actions, _, err := b.c.Firewall.RemoveResources(ctx, fw, res)
		if err != nil && !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
			return fail(apiError(err))
		}
		if err := b.c.Action.WaitFor(ctx, actions...); err != nil {
			return fail(apiError(err))
		}
	}
	if _, err := b.c.Firewall.Delete(ctx, fw); err != nil && !hcloud.IsError(err, hcloud.ErrorCodeNotFound) {
		return fail(apiError(err))
	}
	return nil
}

// fwRules are rules as hcloud firewall rules, inbound.
func fwRules(rules []backend.Rule) []hcloud.FirewallRule {
	out := make([]hcloud.FirewallRule, 0, len(rules))
	for _, r := range rules {
		src := make([]net.IPNet, 0, len(r.Sources))
		for _, p := range r.Sources {
			src = append(src, net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())})
		}
		desc := fmt.Sprintf("relayfleet: %s %s", r.Protocol, r.Ports())
		if r.Lo == backend.SSHPort && r.Hi == backend.SSHPort {
			desc = "relayfleet: ssh from admin ranges"
		}
		out = append(out, hcloud.FirewallRule{
			Direction:   hcloud.FirewallRuleDirectionIn,
			Protocol:    hcloud.FirewallRuleProtocol(r.Protocol),
			Port:        hcloud.Ptr(r.Ports()),
			SourceIPs:   src,
			Description: hcloud.Ptr(desc),
		})
	}
	return out
}

// ruleKeys are rules in a canonical, comparable form (descriptions aside).
func ruleKeys(rules []hcloud.FirewallRule) []string {
	keys := make([]string, 0, len(rules))
	for _, r := range rules {
		nets := func(ns []net.IPNet) string {
			s := make([]string, 0, len(ns))
			for _, n := range ns {
				s = append(s, n.String())
			}
			slices.Sort(s)
			return strings.Join(s, ",")
		}
		keys = append(keys, fmt.Sprintf("%s %s %s src=%s dst=%s", r.Direction, r.Protocol, cmp.Or(deref(r.Port), "-"), nets(r.SourceIPs), nets(r.DestinationIPs)))
	}
	slices.Sort(keys)
	return keys
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
