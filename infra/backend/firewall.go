package backend

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Protocols of firewall rules.
const (
	TCP = "tcp"
	UDP = "udp"
)

// SSHPort is the port admins reach the boxes on.
const SSHPort = 22

// Anywhere is every IPv4 and IPv6 source: the relay's listeners.
var Anywhere = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// Rule is one inbound firewall rule: the ports Lo-Hi of Protocol are open
// to Sources. Everything not opened by a rule is closed.
type Rule struct {
	Protocol string
	Lo, Hi   uint16
	Sources  []netip.Prefix
}

// Ports is the rule's ports as the clouds write them: "22" or "4443-4450".
func (r Rule) Ports() string {
	if r.Lo == r.Hi {
		return fmt.Sprint(r.Lo)
	}
	return fmt.Sprintf("%d-%d", r.Lo, r.Hi)
}

// FirewallRules are a fleet's inbound rules: the relay port range
// relayPorts ([lo, hi], inclusive) over UDP and TCP from anywhere, and SSH
// from the admin ranges only. It refuses an SSH rule open to everyone
// (a /0 admin range, or SSH inside the relay range) and a fleet no admin
// can reach.
func FirewallRules(relayPorts [2]uint16, adminRanges []netip.Prefix) ([]Rule, error) {
	lo, hi := relayPorts[0], relayPorts[1]
	if lo == 0 || hi < lo {
		return nil, fmt.Errorf("relay ports %d-%d: want 1 <= lo <= hi", lo, hi)
	}
	if lo <= SSHPort && SSHPort <= hi {
		return nil, fmt.Errorf("relay ports %d-%d include SSH port %d, which would open SSH to everyone", lo, hi, SSHPort)
	}
	if len(adminRanges) == 0 {
		return nil, errors.New("no admin ranges: SSH would be closed to everyone")
	}
	admin := make([]netip.Prefix, 0, len(adminRanges))
	for _, p := range adminRanges {
		if !p.IsValid() {
			return nil, fmt.Errorf("admin range %v: not a valid prefix", p)
		}
		if p.Bits() == 0 {
			return nil, fmt.Errorf("admin range %v: opens SSH to everyone", p)
		}
		admin = append(admin, p.Masked())
	}
	SortPrefixes(admin)
	admin = slices.Compact(admin)
	return []Rule{
		{Protocol: UDP, Lo: lo, Hi: hi, Sources: Anywhere},
		{Protocol: TCP, Lo: lo, Hi: hi, Sources: Anywhere},
		{Protocol: TCP, Lo: SSHPort, Hi: SSHPort, Sources: admin},
	}, nil
}

// SortPrefixes sorts prefixes IPv4 first, then by address and length.
func SortPrefixes(ps []netip.Prefix) {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
	})
}
