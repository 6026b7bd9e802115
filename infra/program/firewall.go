package program

import (
	"fmt"

	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
)

// Rule is one inbound firewall rule, the provider's: traffic of Protocol
// to Ports (a port or FIRST-LAST) from Sources (CIDRs) is let in; all else
// is dropped.
type Rule = provider.FirewallRule

// Anywhere is every address, IPv4 and IPv6: listeners come from anywhere.
var Anywhere = []string{"0.0.0.0/0", "::/0"}

// FirewallRules are a cloud group's inbound rules: the relay ports, UDP
// (QUIC, WebTransport) and TCP (WebSocket, stats), from anywhere, and SSH
// from the inventory's admin ranges only. Without admin ranges SSH stays
// closed: relayfleet never opens it to the whole internet.
func FirewallRules(f *inventories.Fleet, cat *inventories.Catalogue, b inventories.Box) ([]Rule, error) {
	_, shape, err := b.ShapeRef(cat)
	if err != nil {
		return nil, err
	}
	n := b.Processes.For(shape.Cores)
	if n <= 0 {
		return nil, fmt.Errorf("shape %s: no relay processes", b.Shape)
	}
	base := b.BasePort
	if base == 0 {
		base = inventories.DefaultBasePort
	}
	ports := fmt.Sprint(base)
	if n > 1 {
		ports = fmt.Sprintf("%d-%d", base, base+n-1)
	}
	rules := []Rule{
		{Protocol: "udp", Ports: ports, Sources: Anywhere, What: "relay (QUIC, WebTransport)"},
		{Protocol: "tcp", Ports: ports, Sources: Anywhere, What: "relay (WebSocket, stats)"},
	}
	var admin []string
	for _, r := range f.Admin.Ranges {
		if isAnywhere(r) {
			continue // refused by the inventory already; never let it through here
		}
		admin = append(admin, r)
	}
	if len(admin) > 0 {
		rules = append(rules, Rule{Protocol: "tcp", Ports: "22", Sources: admin, What: "ssh from the admin ranges"})
	}
	return rules, nil
}

func isAnywhere(cidr string) bool {
	for _, a := range Anywhere {
		if cidr == a {
			return true
		}
	}
	return len(cidr) > 2 && cidr[len(cidr)-2:] == "/0"
}
