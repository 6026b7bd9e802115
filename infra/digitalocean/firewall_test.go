package digitalocean

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/backend/backendtest"
)

func TestFirewall(t *testing.T) {
	b, f := newTestBackend(t)
	fleet := map[string]string{"fleet": "demo"}

	// The tag is made first: a firewall cannot name a tag that does not exist.
	id := backendtest.EnsureFirewall(t, b, &f.API, "relayfleet-demo", fleet, backendtest.Ports, backendtest.Admin, "POST /v2/tags", "POST /v2/firewalls")
	fw := f.firewalls[id]
	type rule struct {
		Protocol string
		Ports    string
		Sources  struct{ Addresses []string }
	}
	inbound := func() []rule { return backendtest.Recode[[]rule](fw["inbound_rules"]) }
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
	if !reflect.DeepEqual(fw["tags"], []string{"relayfleet:fleet:demo"}) {
		t.Errorf("tags %v", fw["tags"])
	}

	// Again, the same (the API spells all ports "0"): nothing is written.
	if id2 := backendtest.EnsureFirewall(t, b, &f.API, "relayfleet-demo", fleet, backendtest.Ports, backendtest.Admin); id2 != id {
		t.Fatalf("second Ensure = %s, want %s", id2, id)
	}

	// Other relay ports: one update.
	backendtest.EnsureFirewall(t, b, &f.API, "relayfleet-demo", fleet, [2]uint16{5000, 5001}, backendtest.Admin, "PUT /v2/firewalls/"+id)
	if got := inbound()[0].Ports; got != "5000-5001" {
		t.Errorf("relay ports now %s", got)
	}

	backendtest.DeleteFirewall(t, b, id, func() bool { return len(f.firewalls) != 0 })
}

func TestFirewallRefused(t *testing.T) {
	b, f := newTestBackend(t)
	admin := backendtest.Admin
	long := map[string]string{"fleet": strings.Repeat("f", 63), "tier": strings.Repeat("t", 63), "event": strings.Repeat("e", 63), "group": strings.Repeat("g", 63)}
	backendtest.FirewallRefusals(t, b, &f.API, []backendtest.FirewallRefusal{
		{Name: "ssh from anywhere", Labels: map[string]string{"fleet": "demo"}, Admin: []netip.Prefix{netip.MustParsePrefix("::/0")}, Want: "digitalocean firewall fw: admin range ::/0: opens SSH to everyone"},
		{Name: "no labels", Labels: nil, Admin: admin, Want: "digitalocean firewall fw: no labels: a firewall for every droplet is not what a fleet wants"},
		{Name: "set tag too long", Labels: long, Admin: admin,
			Want: fmt.Sprintf("digitalocean firewall fw: labels %v: their set tag is 289 characters, DigitalOcean takes at most 255", long)},
	})
}

// TestFirewallRefusesAnotherTagsFirewall: a firewall of the name applied to
// other droplets' tag is refused, and left as it was.
func TestFirewallRefusesAnotherTagsFirewall(t *testing.T) {
	b, f := newTestBackend(t)
	if _, err := b.EnsureFirewall(backendtest.Ctx(t), "demo-fsn", map[string]string{"group": "fsn"}, backendtest.Ports, backendtest.Admin); err != nil {
		t.Fatal(err)
	}
	n := len(f.Writes())
	_, err := b.EnsureFirewall(backendtest.Ctx(t), "demo-fsn", map[string]string{"event": "fsn"}, backendtest.Ports, backendtest.Admin)
	if err == nil || !strings.Contains(err.Error(), "firewall demo-fsn") || !strings.Contains(err.Error(), "relayfleet:group:fsn, not relayfleet:event:fsn") {
		t.Errorf("Ensure over another tag's firewall: %v", err)
	}
	for _, w := range f.Writes()[n:] {
		if strings.Contains(w, "firewalls") {
			t.Errorf("the refused Ensure wrote %v", w)
		}
	}
}

// TestFirewallRulesHavePorts: DigitalOcean's published description
// (firewall_rule_base) requires ports on every rule, ICMP's included;
// godo leaves an empty one out of the request. Every rule the fleet
// needs must be in the request, each with its ports: an empty or short
// list fails as surely as a rule without ports.
func TestFirewallRulesHavePorts(t *testing.T) {
	rules, err := backend.FirewallRules(backendtest.Ports, backendtest.Admin)
	if err != nil {
		t.Fatal(err)
	}
	var in, out []string
	for _, r := range inbound(rules) {
		if r.PortRange == "" {
			t.Errorf("inbound %s rule without ports", r.Protocol)
		}
		in = append(in, r.Protocol+" "+r.PortRange)
	}
	for _, r := range outbound() {
		if r.PortRange == "" {
			t.Errorf("outbound %s rule without ports", r.Protocol)
		}
		out = append(out, r.Protocol+" "+r.PortRange)
	}
	slices.Sort(in)
	slices.Sort(out)
	// The relay range over both protocols and SSH inbound; everything out.
	if want := []string{"tcp 22", "tcp 4443-4446", "udp 4443-4446"}; !slices.Equal(in, want) {
		t.Errorf("inbound rules %q, want %q", in, want)
	}
	if want := []string{"icmp 0", "tcp " + allPorts, "udp " + allPorts}; !slices.Equal(out, want) {
		t.Errorf("outbound rules %q, want %q", out, want)
	}
}

// TestFirewallAppliesToOneSetOnly: the program's firewall of a steady
// group names four labels (fleet, tier, event, group). DigitalOcean applies
// a firewall to the droplets carrying any of its tags, so it is applied
// to the one set tag those droplets carry, and reaches neither the event
// of the same name, nor another group, nor another fleet.
func TestFirewallAppliesToOneSetOnly(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	steady := map[string]string{"fleet": "demo", "tier": "steady", "event": "none", "group": "fsn"}
	others := []map[string]string{
		{"fleet": "demo", "tier": "burst", "event": "fsn", "group": "fsn"},
		{"fleet": "demo", "tier": "steady", "event": "none", "group": "nbg"},
		{"fleet": "prod", "tier": "steady", "event": "none", "group": "fsn"},
	}
	var mine []string
	for i := range 2 {
		box, err := b.Create(c, testSpec(t, fmt.Sprintf("demo-s-fsn-%d", i+1), steady))
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, box.ID)
	}
	for i, l := range others {
		if _, err := b.Create(c, testSpec(t, fmt.Sprintf("other-%d", i), l)); err != nil {
			t.Fatal(err)
		}
	}
	id, err := b.EnsureFirewall(c, "demo-s-fsn", steady, backendtest.Ports, backendtest.Admin)
	if err != nil {
		t.Fatalf("a firewall of four labels: %v", err)
	}
	if got := appliesTo(f, id); !reflect.DeepEqual(got, mine) {
		t.Errorf("firewall applies to droplets %v, want the group's own %v", got, mine)
	}

	// The set tag is no label: the boxes' labels read back as they were.
	box, err := b.Get(c, mine[0])
	if err != nil || !reflect.DeepEqual(box.Labels, steady) {
		t.Errorf("labels %v (%v), want %v", box.Labels, err, steady)
	}

	// A droplet's labels change in place: the set tag follows them, and
	// the firewall lets go of it.
	moved := maps.Clone(steady)
	moved["group"] = "nbg"
	if err := b.SetLabels(c, mine[1], moved); err != nil {
		t.Fatal(err)
	}
	if got := appliesTo(f, id); !reflect.DeepEqual(got, mine[:1]) {
		t.Errorf("after relabelling %s the firewall applies to %v, want %v", mine[1], got, mine[:1])
	}
}

// TestCreateAdoptingTagsTheSet: a droplet adopted by name that lacks its
// set tag (made before there were set tags) gets it, so its group's
// firewall covers it.
func TestCreateAdoptingTagsTheSet(t *testing.T) {
	b, f := newTestBackend(t)
	c := backendtest.Ctx(t)
	labels := map[string]string{"fleet": "demo", "tier": "steady", "event": "none", "group": "fsn"}
	old := f.addDroplet("demo-s-fsn-1", "fleet:demo", "tier:steady", "event:none", "group:fsn")
	box, err := b.Create(c, testSpec(t, "demo-s-fsn-1", labels))
	if err != nil || box.ID != strconv.Itoa(old) {
		t.Fatalf("adopt: %+v, %v", box, err)
	}
	f.Mu.Lock()
	tags := f.droplets[old]["tags"].([]string)
	f.Mu.Unlock()
	if !slices.Contains(tags, SetTag(labels)) {
		t.Errorf("adopted droplet's tags %v lack %s", tags, SetTag(labels))
	}
	if p := f.Requests("POST /v2/droplets"); len(p) != 0 {
		t.Errorf("Create posted %v for an existing droplet", p)
	}
}

// appliesTo is the droplets (ids, sorted) the firewall applies to as
// DigitalOcean applies it: those it names, and those carrying any of its
// tags.
func appliesTo(f *fakeAPI, fwID string) []string {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	fw := f.firewalls[fwID]
	fwTags, _ := fw["tags"].([]string)
	var ids []int
	for id, d := range f.droplets {
		tags, _ := d["tags"].([]string)
		if slices.ContainsFunc(tags, func(t string) bool { return slices.Contains(fwTags, t) }) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var out []string
	for _, id := range ids {
		out = append(out, strconv.Itoa(id))
	}
	return out
}
