package digitalocean

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/backend"
)

func TestFirewall(t *testing.T) {
	b, f := newTestBackend(t)
	c := ctx(t)
	admin := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	fleet := map[string]string{"fleet": "demo"}
	ports := [2]uint16{4443, 4446}

	id, err := b.EnsureFirewall(c, "relayfleet-demo", fleet, ports, admin)
	if err != nil {
		t.Fatal(err)
	}
	// The tag is made first: a firewall cannot name a tag that does not exist.
	if w := f.writes(); !reflect.DeepEqual(w, []string{"POST /v2/tags", "POST /v2/firewalls"}) {
		t.Errorf("first Ensure wrote %v", w)
	}
	fw := f.firewalls[id]
	type rule struct {
		Protocol string
		Ports    string
		Sources  struct{ Addresses []string }
	}
	inbound := func() []rule {
		var rs []rule
		b, _ := json.Marshal(fw["inbound_rules"])
		json.Unmarshal(b, &rs)
		return rs
	}
	want := []rule{
		{"udp", "4443-4446", struct{ Addresses []string }{[]string{"0.0.0.0/0", "::/0"}}},
		{"tcp", "4443-4446", struct{ Addresses []string }{[]string{"0.0.0.0/0", "::/0"}}},
		{"tcp", "22", struct{ Addresses []string }{[]string{"198.51.100.0/24"}}},
	}
	if got := inbound(); !reflect.DeepEqual(got, want) {
		t.Errorf("inbound\n got %+v\nwant %+v", got, want)
	}
	out, _ := json.Marshal(fw["outbound_rules"])
	for _, p := range []string{`"protocol":"tcp"`, `"protocol":"udp"`, `"protocol":"icmp"`} {
		if !strings.Contains(string(out), p) {
			t.Errorf("outbound %s lacks %s", out, p)
		}
	}
	if !reflect.DeepEqual(fw["tags"], []string{"fleet:demo"}) {
		t.Errorf("tags %v", fw["tags"])
	}

	// Again, the same (the API spells all ports "0"): nothing is written.
	n := len(f.writes())
	id2, err := b.EnsureFirewall(c, "relayfleet-demo", fleet, ports, admin)
	if err != nil || id2 != id {
		t.Fatalf("second Ensure = %s, %v; want %s", id2, err, id)
	}
	if w := f.writes()[n:]; len(w) != 0 {
		t.Errorf("second Ensure wrote %v", w)
	}

	// Other relay ports: one update.
	n = len(f.writes())
	if _, err := b.EnsureFirewall(c, "relayfleet-demo", fleet, [2]uint16{5000, 5001}, admin); err != nil {
		t.Fatal(err)
	}
	if w := f.writes()[n:]; !reflect.DeepEqual(w, []string{"PUT /v2/firewalls/" + id}) {
		t.Errorf("port change wrote %v", w)
	}
	if got := inbound()[0].Ports; got != "5000-5001" {
		t.Errorf("relay ports now %s", got)
	}

	if err := b.DeleteFirewall(c, id); err != nil {
		t.Fatal(err)
	}
	if len(f.firewalls) != 0 {
		t.Error("firewall not deleted")
	}
	if err := b.DeleteFirewall(c, id); err != nil {
		t.Errorf("second DeleteFirewall: %v", err)
	}
}

func TestFirewallRefused(t *testing.T) {
	b, f := newTestBackend(t)
	admin := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		admin  []netip.Prefix
		want   string
	}{
		{"ssh from anywhere", map[string]string{"fleet": "demo"}, []netip.Prefix{netip.MustParsePrefix("::/0")}, "digitalocean firewall fw: admin range ::/0: opens SSH to everyone"},
		{"two labels", map[string]string{"fleet": "demo", "tier": "burst"}, admin, "digitalocean firewall fw: labels map[fleet:demo tier:burst]: want exactly one (a firewall applies to droplets with any of its tags)"},
		{"no labels", nil, admin, "digitalocean firewall fw: labels map[]: want exactly one (a firewall applies to droplets with any of its tags)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.EnsureFirewall(ctx(t), "fw", tc.labels, [2]uint16{4443, 4443}, tc.admin)
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if l := f.requests(""); len(l) != 0 {
		t.Errorf("requests sent for a refused firewall: %v", l)
	}
}

// TestFirewallRefusesAnotherTagsFirewall: a firewall of the name applied to
// other droplets' tag is refused, and left as it was.
func TestFirewallRefusesAnotherTagsFirewall(t *testing.T) {
	b, f := newTestBackend(t)
	c := ctx(t)
	admin := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	ports := [2]uint16{4443, 4446}
	if _, err := b.EnsureFirewall(c, "demo-fsn", map[string]string{"group": "fsn"}, ports, admin); err != nil {
		t.Fatal(err)
	}
	n := len(f.writes())
	_, err := b.EnsureFirewall(c, "demo-fsn", map[string]string{"event": "fsn"}, ports, admin)
	if err == nil || !strings.Contains(err.Error(), "firewall demo-fsn") || !strings.Contains(err.Error(), "group:fsn, not event:fsn") {
		t.Errorf("Ensure over another tag's firewall: %v", err)
	}
	for _, w := range f.writes()[n:] {
		if strings.Contains(w, "firewalls") {
			t.Errorf("the refused Ensure wrote %v", w)
		}
	}
}

// TestFirewallRulesHavePorts: DigitalOcean's published description
// (firewall_rule_base) requires ports on every rule, ICMP's included;
// godo leaves an empty one out of the request.
func TestFirewallRulesHavePorts(t *testing.T) {
	rules, err := backend.FirewallRules([2]uint16{4443, 4446}, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range inbound(rules) {
		if r.PortRange == "" {
			t.Errorf("inbound %s rule without ports", r.Protocol)
		}
	}
	for _, r := range outbound() {
		if r.PortRange == "" {
			t.Errorf("outbound %s rule without ports", r.Protocol)
		}
	}
}
