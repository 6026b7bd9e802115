package hcloud

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/backend/backendtest"
)

func TestFirewall(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	admin := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	fleet := map[string]string{"fleet": "demo"}
	ports := [2]uint16{4443, 4446}

	id, err := b.EnsureFirewall(c, "relayfleet-demo", fleet, ports, admin)
	if err != nil {
		t.Fatal(err)
	}
	if w := f.Writes(); !reflect.DeepEqual(w, []string{"POST /firewalls"}) {
		t.Errorf("first Ensure wrote %v", w)
	}
	fw := f.firewalls[mustID(t, id)]
	type rule struct {
		Direction, Protocol, Port string
		SourceIPs                 []string `json:"source_ips"`
	}
	rulesOf := func() []rule {
		var rs []rule
		b, _ := json.Marshal(fw["rules"])
		json.Unmarshal(b, &rs)
		return rs
	}
	wantRules := []rule{
		{"in", "udp", "4443-4446", []string{"0.0.0.0/0", "::/0"}},
		{"in", "tcp", "4443-4446", []string{"0.0.0.0/0", "::/0"}},
		{"in", "tcp", "22", []string{"198.51.100.0/24"}},
	}
	if got := rulesOf(); !reflect.DeepEqual(got, wantRules) {
		t.Errorf("rules\n got %+v\nwant %+v", got, wantRules)
	}
	applied, _ := json.Marshal(fw["applied_to"])
	if !strings.Contains(string(applied), `"label_selector":{"selector":"fleet=demo"}`) {
		t.Errorf("applied_to %s", applied)
	}

	// Again, the same: nothing is written.
	n := len(f.Writes())
	id2, err := b.EnsureFirewall(c, "relayfleet-demo", fleet, ports, admin)
	if err != nil || id2 != id {
		t.Fatalf("second Ensure = %s, %v; want %s", id2, err, id)
	}
	if w := f.Writes()[n:]; len(w) != 0 {
		t.Errorf("second Ensure wrote %v", w)
	}

	// Another admin range: the rules are set again, and only they.
	admin2 := append(admin, netip.MustParsePrefix("2001:db8:7::/48"))
	n = len(f.Writes())
	if _, err := b.EnsureFirewall(c, "relayfleet-demo", fleet, ports, admin2); err != nil {
		t.Fatal(err)
	}
	if w := f.Writes()[n:]; !reflect.DeepEqual(w, []string{"POST /firewalls/" + id + "/actions/set_rules"}) {
		t.Errorf("rule change wrote %v", w)
	}
	if got := rulesOf()[2].SourceIPs; !reflect.DeepEqual(got, []string{"198.51.100.0/24", "2001:db8:7::/48"}) {
		t.Errorf("ssh sources %v", got)
	}

	// Other labels of the same fleet, tier and event: the firewall's
	// labels change, the old selector goes, the new one comes.
	fleet2 := map[string]string{"fleet": "demo", "group": "fsn"}
	n = len(f.Writes())
	if _, err := b.EnsureFirewall(c, "relayfleet-demo", fleet2, ports, admin2); err != nil {
		t.Fatal(err)
	}
	want := []string{"PUT /firewalls/" + id, "POST /firewalls/" + id + "/actions/remove_from_resources", "POST /firewalls/" + id + "/actions/apply_to_resources"}
	if w := f.Writes()[n:]; !reflect.DeepEqual(w, want) {
		t.Errorf("label change wrote %v, want %v", w, want)
	}
	applied, _ = json.Marshal(fw["applied_to"])
	if string(applied) != `[{"applied_to_resources":[],"label_selector":{"selector":"fleet=demo,group=fsn"},"type":"label_selector"}]` {
		t.Errorf("applied_to %s", applied)
	}

	if err := b.DeleteFirewall(c, id); err != nil {
		t.Fatal(err)
	}
	if len(f.firewalls) != 0 {
		t.Errorf("firewall not deleted")
	}
	if err := b.DeleteFirewall(c, id); err != nil {
		t.Errorf("second DeleteFirewall: %v", err)
	}
}

func TestFirewallRefusesOpenSSH(t *testing.T) {
	b, f := newTestBackend(t)
	for _, tc := range []struct {
		name   string
		labels map[string]string
		admin  []netip.Prefix
		want   string
	}{
		{"ssh from anywhere", map[string]string{"fleet": "demo"}, []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, "hcloud firewall fw: admin range 0.0.0.0/0: opens SSH to everyone"},
		{"no admin", map[string]string{"fleet": "demo"}, nil, "hcloud firewall fw: no admin ranges: SSH would be closed to everyone"},
		{"no labels", nil, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, "hcloud firewall fw: no labels: a firewall for every server is not what a fleet wants"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.EnsureFirewall(backendtest.Ctx(t), "fw", tc.labels, [2]uint16{4443, 4443}, tc.admin)
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if l := f.Requests(""); len(l) != 0 {
		t.Errorf("requests sent for a refused firewall: %v", l)
	}
}

func mustID(t *testing.T, id string) int64 {
	n, err := parseID(id)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFirewallRefusesAnotherTiersFirewall: an event's firewall named like
// the steady one is refused, in one line naming it and the label, and the
// steady firewall is left as it was.
func TestFirewallRefusesAnotherTiersFirewall(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	admin := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	ports := [2]uint16{4443, 4446}
	steady := map[string]string{"fleet": "demo", "tier": "steady", "event": "none", "group": "fsn"}
	if _, err := b.EnsureFirewall(c, "demo-fsn", steady, ports, admin); err != nil {
		t.Fatal(err)
	}
	n := len(f.Writes())
	event := map[string]string{"fleet": "demo", "tier": "burst", "event": "fsn", "group": "fsn"}
	_, err := b.EnsureFirewall(c, "demo-fsn", event, ports, admin)
	if err == nil || !strings.Contains(err.Error(), "firewall demo-fsn") || !strings.Contains(err.Error(), `label tier "steady", not "burst"`) || strings.Contains(err.Error(), "\n") {
		t.Errorf("Ensure over the steady firewall: %v; want one line naming it and its tier", err)
	}
	if w := f.Writes()[n:]; len(w) != 0 {
		t.Errorf("the refused Ensure wrote %v", w)
	}
}
