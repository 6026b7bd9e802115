package hcloud

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/backend/backendtest"
)

func TestFirewall(t *testing.T) {
	b, f := newTestBackend(t)
	fleet := map[string]string{"fleet": "demo"}

	id := backendtest.EnsureFirewall(t, b, &f.API, "relayfleet-demo", fleet, backendtest.Ports, backendtest.Admin, "POST /firewalls")
	fw := f.firewalls[mustID(t, id)]
	type rule struct {
		Direction, Protocol, Port string
		SourceIPs                 []string `json:"source_ips"`
	}
	rulesOf := func() []rule { return backendtest.Recode[[]rule](fw["rules"]) }
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
	if id2 := backendtest.EnsureFirewall(t, b, &f.API, "relayfleet-demo", fleet, backendtest.Ports, backendtest.Admin); id2 != id {
		t.Fatalf("second Ensure = %s, want %s", id2, id)
	}

	// Another admin range: the rules are set again, and only they.
	admin2 := append(slices.Clone(backendtest.Admin), netip.MustParsePrefix("2001:db8:7::/48"))
	backendtest.EnsureFirewall(t, b, &f.API, "relayfleet-demo", fleet, backendtest.Ports, admin2, "POST /firewalls/"+id+"/actions/set_rules")
	if got := rulesOf()[2].SourceIPs; !reflect.DeepEqual(got, []string{"198.51.100.0/24", "2001:db8:7::/48"}) {
		t.Errorf("ssh sources %v", got)
	}

	// Other labels of the same fleet, tier and event: the firewall's
	// labels change, the old selector goes, the new one comes.
	fleet2 := map[string]string{"fleet": "demo", "group": "fsn"}
	backendtest.EnsureFirewall(t, b, &f.API, "relayfleet-demo", fleet2, backendtest.Ports, admin2,
		"PUT /firewalls/"+id, "POST /firewalls/"+id+"/actions/remove_from_resources", "POST /firewalls/"+id+"/actions/apply_to_resources")
	applied, _ = json.Marshal(fw["applied_to"])
	if string(applied) != `[{"applied_to_resources":[],"label_selector":{"selector":"fleet=demo,group=fsn"},"type":"label_selector"}]` {
		t.Errorf("applied_to %s", applied)
	}

	backendtest.DeleteFirewall(t, b, id, func() bool { return len(f.firewalls) != 0 })
}

func TestFirewallRefusesOpenSSH(t *testing.T) {
	b, f := newTestBackend(t)
	backendtest.FirewallRefusals(t, b, &f.API, []backendtest.FirewallRefusal{
		{Name: "ssh from anywhere", Labels: map[string]string{"fleet": "demo"}, Admin: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, Want: "hcloud firewall fw: admin range 0.0.0.0/0: opens SSH to everyone"},
		{Name: "no admin", Labels: map[string]string{"fleet": "demo"}, Admin: nil, Want: "hcloud firewall fw: no admin ranges: SSH would be closed to everyone"},
		{Name: "no labels", Labels: nil, Admin: backendtest.Admin, Want: "hcloud firewall fw: no labels: a firewall for every server is not what a fleet wants"},
	})
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
	steady := map[string]string{"fleet": "demo", "tier": "steady", "event": "none", "group": "fsn"}
	backendtest.EnsureFirewall(t, b, &f.API, "demo-fsn", steady, backendtest.Ports, backendtest.Admin, "POST /firewalls")
	n := len(f.Writes())
	event := map[string]string{"fleet": "demo", "tier": "burst", "event": "fsn", "group": "fsn"}
	_, err := b.EnsureFirewall(backendtest.Ctx(t), "demo-fsn", event, backendtest.Ports, backendtest.Admin)
	if err == nil || !strings.Contains(err.Error(), "firewall demo-fsn") || !strings.Contains(err.Error(), `label tier "steady", not "burst"`) || strings.Contains(err.Error(), "\n") {
		t.Errorf("Ensure over the steady firewall: %v; want one line naming it and its tier", err)
	}
	if w := f.Writes()[n:]; len(w) != 0 {
		t.Errorf("the refused Ensure wrote %v", w)
	}
}
