package program

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
)

// deployNames runs Deploy (or DeployBurst when b is set) on the mocks and
// returns the box and firewall names by Pulumi resource name.
func deployNames(t *testing.T, f *inventories.Fleet, cat *inventories.Catalogue, b *Burst, existing map[string]string) (map[string]string, error) {
	t.Helper()
	m := &mocks{}
	o := Options{RelayBinary: "/opt/relay", Release: strings.Repeat("ab", 32), AuthKeys: testAuthKeys, TLSSeed: testTLSSeed, Existing: existing}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		var err error
		if b != nil {
			_, err = DeployBurst(ctx, f, cat, *b, o)
		} else {
			_, err = Deploy(ctx, f, cat, o)
		}
		return err
	}, pulumi.WithMocks("relayfleet", "test", m))
	names := map[string]string{}
	for _, typ := range []string{provider.BoxType, provider.FirewallType} {
		for _, r := range m.ofType(typ) {
			names[r.Name] = r.Inputs["name"].StringValue()
		}
	}
	return names, err
}

// TestSteadyAndEventNamesNeverCollide: a steady group and an event of the
// same name get boxes and firewalls of different names, which carry their
// tier.
func TestSteadyAndEventNamesNeverCollide(t *testing.T) {
	f, cat := loadFleet(t, "testdata/mixed.yaml")
	steady, err := deployNames(t, f, cat, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := inventories.Pool{Name: "fsn", Box: inventories.Box{Provider: "hcloud", Shape: "ccx33", Location: "fsn1", BasePort: 5000}}
	event, err := deployNames(t, f, cat, &Burst{Event: "fsn", Pool: pool, Boxes: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for res, want := range map[string]string{"fsn-1": "mixed-s-fsn-1", "fsn-firewall": "mixed-s-fsn", "root-1": "mixed-s-root-1", "lab-steady-1": "lab-stead-1"} {
		if steady[res] != want {
			t.Errorf("steady %s named %q, want %q", res, steady[res], want)
		}
	}
	for res, want := range map[string]string{"fsn-1": "mixed-e-fsn-1", "fsn-2": "mixed-e-fsn-2", "fsn-firewall": "mixed-e-fsn"} {
		if event[res] != want {
			t.Errorf("event %s named %q, want %q", res, event[res], want)
		}
	}
	for _, s := range steady {
		for _, e := range event {
			if s == e {
				t.Errorf("a steady box or firewall and an event's are both named %s", s)
			}
		}
	}
}

// TestLegacyNamesKept: a box or firewall the state has under the name it
// was given before names carried their tier keeps it (a rename replaces
// nothing); the others get the new names, and a name the state has that
// is not the old form is not kept either.
func TestLegacyNamesKept(t *testing.T) {
	f, cat := loadFleet(t, "testdata/mixed.yaml")
	f.Steady[2].Count = 2
	names, err := deployNames(t, f, cat, nil, map[string]string{
		"fsn-1": "mixed-fsn-1", "fsn-firewall": "mixed-fsn", "root-1": "mixed-root-1",
		"fsn-2": "somebody-else", "lab-steady-1": "lab-stead-1",
	})
	if err != nil {
		t.Fatal(err)
	}
	for res, want := range map[string]string{
		"fsn-1": "mixed-fsn-1", "fsn-firewall": "mixed-fsn", "root-1": "mixed-root-1",
		"fsn-2": "mixed-s-fsn-2", "lab-steady-1": "lab-stead-1", "lab-steady-2": "lab-stead-2",
	} {
		if names[res] != want {
			t.Errorf("%s named %q, want %q", res, names[res], want)
		}
	}
	pool := inventories.Pool{Name: "final", Box: inventories.Box{Provider: "hcloud", Shape: "ccx33", Location: "fsn1"}}
	names, err = deployNames(t, f, cat, &Burst{Event: "final", Pool: pool, Boxes: 2}, map[string]string{"final-1": "mixed-final-1", "final-firewall": "mixed-final"})
	if err != nil {
		t.Fatal(err)
	}
	for res, want := range map[string]string{"final-1": "mixed-final-1", "final-2": "mixed-e-final-2", "final-firewall": "mixed-final"} {
		if names[res] != want {
			t.Errorf("event %s named %q, want %q", res, names[res], want)
		}
	}
}

// TestNameCollisionsRefused: names that would come out the same are
// refused before anything is registered: an event whose lab box name is a
// steady lab box's, an event kept on an old name that a steady box has,
// two steady groups cut to one lab name, and a name too long for a cloud.
func TestNameCollisionsRefused(t *testing.T) {
	f, cat := loadFleet(t, "testdata/mixed.yaml")
	labPool := inventories.Pool{Name: "cup", Box: inventories.Box{Provider: "lab", Shape: "small"}}
	clash := strings.TrimSuffix(BurstBoxName(f.Name, "cup", provider.BackendLab, 1), "-1")
	f.Steady = append(f.Steady, inventories.Group{Name: clash, Box: inventories.Box{Provider: "lab", Shape: "small"}, Count: 1})
	_, err := deployNames(t, f, cat, &Burst{Event: "cup", Pool: labPool, Boxes: 1}, nil)
	if err == nil || !strings.Contains(err.Error(), "event cup: box 1 is named "+clash+"-1 like a box of steady group "+clash) {
		t.Errorf("event named like a steady lab box: %v", err)
	}

	f, _ = loadFleet(t, "testdata/mixed.yaml")
	hel := inventories.Pool{Name: "fsn", Box: inventories.Box{Provider: "hcloud", Shape: "ccx33", Location: "fsn1"}}
	_, err = deployNames(t, f, cat, &Burst{Event: "fsn", Pool: hel, Boxes: 1}, map[string]string{"fsn-1": "mixed-fsn-1"})
	if err == nil || !strings.Contains(err.Error(), "like a box of steady group fsn") {
		t.Errorf("event box on the steady box's old name: %v", err)
	}

	f, _ = loadFleet(t, "testdata/mixed.yaml")
	f.Steady = append(f.Steady, inventories.Group{Name: "lab-steady-2", Box: inventories.Box{Provider: "lab", Shape: "small"}, Count: 1})
	_, err = deployNames(t, f, cat, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "steady group lab-steady-2: box 1 is named lab-stead-1 like a box of steady group lab-steady") {
		t.Errorf("two steady groups cut to one lab name: %v", err)
	}

	f, _ = loadFleet(t, "testdata/mixed.yaml")
	f.Steady[2].Name = strings.Repeat("g", 60)
	_, err = deployNames(t, f, cat, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "the clouds take at most 63") {
		t.Errorf("a 70-character name: %v", err)
	}
}

func TestExistingNames(t *testing.T) {
	dep := json.RawMessage(`{"manifest":{},"resources":[
	 {"urn":"urn:pulumi:lab::relayfleet-infra::pulumi:providers:relayfleet::default","type":"pulumi:providers:relayfleet","inputs":{"name":"x"}},
	 {"urn":"urn:pulumi:lab::relayfleet-infra::relayfleet:index:Box::fsn-1","type":"relayfleet:index:Box","inputs":{"name":"lab-fsn-1","tier":"steady"}},
	 {"urn":"urn:pulumi:lab::relayfleet-infra::relayfleet:index:Firewall::fsn-firewall","type":"relayfleet:index:Firewall","inputs":{"name":"lab-fsn"}},
	 {"urn":"urn:pulumi:lab::relayfleet-infra::relayfleet:index:Host::fsn-1","type":"relayfleet:index:Host","inputs":{"box":"lab-fsn-1"}}]}`)
	got, err := ExistingNames(dep)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["fsn-1"] != "lab-fsn-1" || got["fsn-firewall"] != "lab-fsn" {
		t.Errorf("ExistingNames = %v", got)
	}
	if got, err := ExistingNames(nil); err != nil || len(got) != 0 {
		t.Errorf("no deployment: %v, %v", got, err)
	}
}

// TestHostsFromDeployment: an event stack's up that failed part way holds
// some Boxes, and Hosts over some of them; the converged ones are read
// back as the hosts output would list them, a Box without its Host (made,
// not converged) only counted, by its group (a later candidate's too), and
// resources pending deletion left out.
func TestHostsFromDeployment(t *testing.T) {
	dep := json.RawMessage(`{"manifest":{},"resources":[
	 {"urn":"urn:pulumi:e::relayfleet-infra::pulumi:providers:relayfleet::default","type":"pulumi:providers:relayfleet","outputs":{}},
	 {"urn":"urn:pulumi:e::relayfleet-infra::relayfleet:index:Box::gig-1","type":"relayfleet:index:Box","outputs":{"name":"f-e-gig-1","backend":"hcloud","addresses":["192.0.2.1","2001:db8::1"],"sshAddress":"192.0.2.1:22","hostPublicKey":"ssh-ed25519 AAAA1","labels":{"group":"gig"},"hostPrivateKey":{"4dabf18193072939515e22adb298388d":"1b47061264138c4ac30d75fd1eb44270","ciphertext":"x"}}},
	 {"urn":"urn:pulumi:e::relayfleet-infra::relayfleet:index:Host::gig-1","type":"relayfleet:index:Host","outputs":{"box":"f-e-gig-1","ports":[4443,4444],"spki":"5792fef91a251f347abb7709c756d410935db733be21c63778d25fa612de1aa9"}},
	 {"urn":"urn:pulumi:e::relayfleet-infra::relayfleet:index:Box::gig-2","type":"relayfleet:index:Box","outputs":{"name":"f-e-gig-2","backend":"hcloud","addresses":["192.0.2.2"],"sshAddress":"192.0.2.2:22","hostPublicKey":"ssh-ed25519 AAAA2","labels":{"group":"gig"}}},
	 {"urn":"urn:pulumi:e::relayfleet-infra::relayfleet:index:Box::gig_c1-1","type":"relayfleet:index:Box","outputs":{"name":"f-e-gig-1-c1","backend":"digitalocean","addresses":[],"labels":{"group":"gig_c1"}}},
	 {"urn":"urn:pulumi:e::relayfleet-infra::relayfleet:index:Box::gig-3","type":"relayfleet:index:Box","delete":true,"outputs":{"name":"f-e-gig-3","addresses":["192.0.2.3"]}},
	 {"urn":"urn:pulumi:e::relayfleet-infra::relayfleet:index:Host::gig-3","type":"relayfleet:index:Host","delete":true,"outputs":{"ports":[4443]}}]}`)
	hosts, made, err := HostsFromDeployment(dep)
	if err != nil {
		t.Fatal(err)
	}
	want := []HostEntry{{Name: "f-e-gig-1", Group: "gig", Backend: "hcloud", Address: "192.0.2.1", SSHAddress: "192.0.2.1:22", HostKey: "ssh-ed25519 AAAA1", User: "root", Ports: []int{4443, 4444}, SPKI: "5792fef91a251f347abb7709c756d410935db733be21c63778d25fa612de1aa9"}}
	if !reflect.DeepEqual(hosts, want) || !reflect.DeepEqual(made, map[string][]int{"gig": {1, 2}, "gig_c1": {1}}) {
		t.Errorf("HostsFromDeployment = %+v, %v made; want %+v, gig 1 and 2, gig_c1 1", hosts, made, want)
	}
	if _, _, err := HostsFromDeployment(json.RawMessage(`{"resources":[{"urn":"a::b","type":"relayfleet:index:Host","outputs":{"ports":"x"}}]}`)); err == nil || !strings.Contains(err.Error(), "host b") {
		t.Errorf("a host with bad outputs: %v", err)
	}
	if h, n, err := HostsFromDeployment(nil); err != nil || h != nil || len(n) != 0 {
		t.Errorf("no deployment: %v, %v, %v", h, n, err)
	}
}

// TestLastLines: a failed run's message keeps the resources' own errors
// when Pulumi printed them, else its last lines.
func TestLastLines(t *testing.T) {
	out := "failed to run update: exit status 255\ncode: 255\nstdout: Updating (e):\n  +  relayfleet:index:Box gig-1 creating (0s)\n" +
		"  +  relayfleet:index:Box gig-1 creating (0s) error: box gig-1: hcloud create server f-e-gig-1: 412 resource_unavailable: error during placement\n" +
		"Diagnostics:\n  relayfleet:index:Box (gig-1):\n    error: box gig-1: hcloud create server f-e-gig-1: 412 resource_unavailable: error during placement\n" +
		"  pulumi:pulumi:Stack (e):\n    error: update failed\nOutputs:\n  + event: \"gig\"\nResources:\n    3 unchanged\n    2 errored\n\nDuration: 2s\n\nstderr: \n"
	if got, want := lastLines(out), "box gig-1: hcloud create server f-e-gig-1: 412 resource_unavailable: error during placement"; got != want {
		t.Errorf("lastLines = %q, want %q", got, want)
	}
	if got := lastLines("a\nb\n\nc\nd\ne\nf\ng\n"); got != "b; c; d; e; f; g" {
		t.Errorf("lastLines without errors = %q", got)
	}
	// A run cut off while its S3 store did not answer: the SDK's warnings
	// and the progress dots are left out.
	cut := "failed to destroy: exit status 255\nstdout: Destroying (e):\n -  relayfleet:index:Host show-1 deleting (0s)\n@ destroying.......\n" +
		"^C received; cancelling.\nstderr: SDK 2026/12/07 22:24:00 WARN Response has no supported checksum. Not validating response payload.\n" +
		"SDK 2026/12/07 22:24:01 WARN Response has no supported checksum. Not validating response payload.\n"
	if got := lastLines(cut); strings.Contains(got, "SDK") || strings.Contains(got, "@ destroying") || !strings.Contains(got, "^C received") {
		t.Errorf("lastLines of a cut-off run = %q", got)
	}
}
