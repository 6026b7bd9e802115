package program

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
)

func TestDeployBurstLabelsEveryBoxWithItsEvent(t *testing.T) {
	f, cat := loadFleet(t, "testdata/mixed.yaml")
	f.Origin = []string{"http://10.0.0.1:4443/"}
	m := &mocks{}
	pool := inventories.Pool{Name: "final", Box: inventories.Box{Provider: "hcloud", Shape: "ccx43", Location: "hel1", BasePort: 4443}}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := DeployBurst(ctx, f, cat, Burst{Event: "final", Pool: pool, Boxes: 3}, Options{RelayBinary: "/opt/relay", Release: "r", AuthKeys: testAuthKeys, TLSSeed: testTLSSeed})
		return err
	}, pulumi.WithMocks("relayfleet", "final", m))
	if err != nil {
		t.Fatal(err)
	}
	boxes := m.ofType(provider.BoxType)
	if len(boxes) != 3 {
		t.Fatalf("%d boxes, want 3", len(boxes))
	}
	for _, b := range boxes {
		in := b.Inputs
		if in["fleet"].StringValue() != f.Name || in["tier"].StringValue() != provider.TierBurst || in["event"].StringValue() != "final" {
			t.Errorf("box %s: fleet %v tier %v event %v", b.Name, in["fleet"], in["tier"], in["event"])
		}
	}
	fws := m.ofType(provider.FirewallType)
	if len(fws) != 1 {
		t.Fatalf("%d firewalls, want the event's own", len(fws))
	}
	if l := fws[0].Inputs["labels"].ObjectValue(); l["event"].StringValue() != "final" || l["tier"].StringValue() != provider.TierBurst {
		t.Errorf("firewall labels %v: want the event's boxes only", l)
	}
	if len(m.ofType(provider.HostType)) != 3 {
		t.Errorf("want a host per box")
	}
	for _, h := range m.ofType(provider.HostType) {
		if up := h.Inputs["upstream"].ArrayValue(); len(up) != 1 || up[0].StringValue() != f.Origin[0] {
			t.Errorf("host %s: upstream %v, want the fleet's origin", h.Name, up)
		}
	}
}

// TestDeployBurstSpillsOntoLaterCandidates: an event's boxes on later
// candidates are their own set: their provider, shape and location, names
// ending cK, group label EVENT_cK, and a firewall of their own on their
// cloud; a spill onto a candidate the burst does not list is refused.
func TestDeployBurstSpillsOntoLaterCandidates(t *testing.T) {
	f, cat := loadFleet(t, "testdata/mixed.yaml")
	pool := inventories.Pool{Name: "final", Box: inventories.Box{Provider: "hcloud", Shape: "ccx33", Location: "fsn1", BasePort: 4443},
		Candidates: []inventories.Candidate{
			{Provider: "hcloud", Shape: "ccx33", Location: "fsn1"},
			{Provider: "hcloud", Shape: "ccx33", Location: "nbg1"},
			{Provider: "digitalocean", Shape: "c-8", Location: "fra1"},
		}}
	run := func(b Burst) (*mocks, error) {
		m := &mocks{}
		err := pulumi.RunErr(func(ctx *pulumi.Context) error {
			_, err := DeployBurst(ctx, f, cat, b, Options{RelayBinary: "/opt/relay", Release: "r", AuthKeys: testAuthKeys, TLSSeed: testTLSSeed})
			return err
		}, pulumi.WithMocks("relayfleet", "final", m))
		return m, err
	}
	m, err := run(Burst{Event: "final", Pool: pool, Boxes: 1, Spill: []Spill{{Candidate: 2, Boxes: 2}, {Candidate: 1, Boxes: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	type box struct{ backend, name, location, group string }
	var got []box
	for _, b := range m.ofType(provider.BoxType) {
		in := b.Inputs
		got = append(got, box{in["backend"].StringValue(), in["name"].StringValue(), in["location"].StringValue(), in["labels"].ObjectValue()["group"].StringValue()})
		if in["event"].StringValue() != "final" || in["tier"].StringValue() != provider.TierBurst {
			t.Errorf("box %s: tier %v event %v", b.Name, in["tier"], in["event"])
		}
	}
	// The mocks register resources as their goroutines get there.
	slices.SortFunc(got, func(a, b box) int { return strings.Compare(a.name, b.name) })
	want := []box{
		{"hcloud", "mixed-e-final-1", "fsn1", "final"},
		{"digitalocean", "mixed-e-final-1-c2", "fra1", "final_c2"},
		{"digitalocean", "mixed-e-final-2-c2", "fra1", "final_c2"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("boxes %v, want %v", got, want)
	}
	var fws []string
	for _, fw := range m.ofType(provider.FirewallType) {
		fws = append(fws, fw.Inputs["backend"].StringValue()+" "+fw.Inputs["name"].StringValue())
	}
	slices.Sort(fws)
	if want := []string{"digitalocean mixed-e-final.c2", "hcloud mixed-e-final"}; !reflect.DeepEqual(fws, want) {
		t.Errorf("firewalls %v, want %v", fws, want)
	}
	if _, err := run(Burst{Event: "final", Pool: pool, Boxes: 1, Spill: []Spill{{Candidate: 3, Boxes: 1}}}); err == nil || !strings.Contains(err.Error(), "spill onto candidate 3, but its burst lists 3") {
		t.Errorf("a spill onto a candidate not listed: %v", err)
	}
}

func TestSpillNames(t *testing.T) {
	if got := SpillBoxName("demo", "final", provider.BackendHcloud, 1, 2); got != "demo-e-final-2-c1" {
		t.Errorf("cloud name %q", got)
	}
	seen := map[string]bool{BurstBoxName("lab", "cup-final-2026", provider.BackendLab, 1): true}
	for k := 1; k <= inventories.MaxCandidates; k++ {
		for n := 1; n <= 12; n++ {
			name := SpillBoxName("lab", "cup-final-2026", provider.BackendLab, k, n)
			if err := lab.ValidName(name); err != nil {
				t.Errorf("%q: %v", name, err)
			}
			if seen[name] {
				t.Errorf("lab name %q twice", name)
			}
			seen[name] = true
		}
	}
	if err := backend.ValidLabels(map[string]string{"group": SpillGroup("cup-final-2026-at-the-stadium-in-berlin", inventories.MaxCandidates)}); err != nil {
		t.Errorf("spill group label: %v", err)
	}
}

func TestBurstBoxNames(t *testing.T) {
	if got := BurstBoxName("demo", "final", provider.BackendHcloud, 2); got != "demo-e-final-2" {
		t.Errorf("cloud name %q", got)
	}
	a := BurstBoxName("lab", "cup-final-2026", provider.BackendLab, 1)
	b := BurstBoxName("lab", "cup-final-2027", provider.BackendLab, 1)
	for _, n := range []string{a, b} {
		if err := lab.ValidName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	if a == b {
		t.Errorf("two events share the lab box name %q", a)
	}
	if s := BoxName("lab", "cup-final", provider.BackendLab, 1); s == a {
		t.Errorf("burst and steady names collide: %q", s)
	}
}

func TestRelaysComposeStacksAndDraining(t *testing.T) {
	dir := t.TempDir()
	steady := []HostEntry{{Name: "s1", Address: "10.0.0.1", Ports: []int{4443, 4444}}}
	event := []HostEntry{{Name: "e1", Address: "10.0.0.9", Ports: []int{4443}}}
	if _, err := SetStackHosts(dir, "lab", steady); err != nil {
		t.Fatal(err)
	}
	if _, err := SetStackHosts(dir, "lab-event-final", event); err != nil {
		t.Fatal(err)
	}
	if rs := readRelays(t, dir); len(rs) != 3 || rs[0].Draining || rs[2].Draining {
		t.Fatalf("relays %+v: want 2 steady and 1 event relay, none draining", rs)
	}
	if _, err := SetDraining(dir, "lab-event-final", true); err != nil {
		t.Fatal(err)
	}
	rs := readRelays(t, dir)
	var draining []string
	for _, r := range rs {
		if r.Draining {
			draining = append(draining, r.URL)
		}
	}
	if len(rs) != 3 || len(draining) != 1 || draining[0] != "http://10.0.0.9:4443/" {
		t.Fatalf("relays %+v: want only the event's relay draining", rs)
	}
	// The steady fleet's next up keeps the event's relays draining.
	if _, err := SetStackHosts(dir, "lab", steady); err != nil {
		t.Fatal(err)
	}
	if rs := readRelays(t, dir); len(rs) != 3 || !rs[2].Draining {
		t.Fatalf("relays %+v after a steady up", rs)
	}
	if _, err := SetStackHosts(dir, "lab-event-final", nil); err != nil {
		t.Fatal(err)
	}
	if rs := readRelays(t, dir); len(rs) != 2 {
		t.Fatalf("relays %+v: want the event's gone", rs)
	}
	if sh, _ := ReadStackHosts(dir, "lab-event-final"); len(sh.Hosts) != 0 || sh.Draining {
		t.Errorf("destroyed stack still recorded: %+v", sh)
	}
}

// TestRelaysDrainingHosts: single hosts of a stack can be marked draining
// (the boxes a resize down removes), the others stay routable.
func TestRelaysDrainingHosts(t *testing.T) {
	dir := t.TempDir()
	event := []HostEntry{
		{Name: "e-1", Address: "10.0.0.9", Ports: []int{4443, 4444}},
		{Name: "e-2", Address: "10.0.0.10", Ports: []int{4443}},
	}
	if _, err := SetStackHosts(dir, "lab-event-final", event); err != nil {
		t.Fatal(err)
	}
	if _, err := SetHostsDraining(dir, "lab-event-final", []string{"e-2"}); err != nil {
		t.Fatal(err)
	}
	if rs := readRelays(t, dir); len(rs) != 3 || rs[0].Draining || rs[1].Draining || !rs[2].Draining || rs[2].URL != "http://10.0.0.10:4443/" {
		t.Fatalf("relays %+v: want only e-2's relay draining", rs)
	}
}

// readRelays reads the relays of dir's relays file.
func readRelays(t *testing.T, dir string) []Relay {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, RelaysFile))
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Relays []Relay }
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return f.Relays
}
