package program

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// mocks records what the program registers and answers like the provider:
// boxes get an address, a host key, cores and RAM; hosts get ports.
type mocks struct {
	mu        sync.Mutex
	resources []pulumi.MockResourceArgs
}

func (m *mocks) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	m.mu.Lock()
	m.resources = append(m.resources, args)
	n := len(m.resources)
	m.mu.Unlock()
	out := args.Inputs.Copy()
	switch args.TypeToken {
	case provider.BoxType:
		addr := fmt.Sprintf("10.0.0.%d", n)
		out["addresses"] = resource.NewArrayProperty([]resource.PropertyValue{resource.NewStringProperty(addr)})
		out["sshAddress"] = resource.NewStringProperty(addr + ":22")
		out["hostPublicKey"] = resource.NewStringProperty("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl")
		out["cores"] = resource.NewNumberProperty(2)
		out["ram"] = resource.NewNumberProperty(2 << 30)
	case provider.HostType:
		base := 4443.0
		if v, ok := args.Inputs["basePort"]; ok && v.IsNumber() {
			base = v.NumberValue()
		}
		out["ports"] = resource.NewArrayProperty([]resource.PropertyValue{resource.NewNumberProperty(base), resource.NewNumberProperty(base + 1)})
		// The provider reports the SPKI of the TLS key it installed.
		if k, ok := args.Inputs["tlsKey"]; ok {
			if k.IsSecret() {
				k = k.SecretValue().Element
			}
			spki, err := provision.TLSKeySPKI([]byte(k.StringValue()))
			if err != nil {
				return "", nil, err
			}
			out["spki"] = resource.NewStringProperty(spki)
		}
	}
	return args.Name + "_id", out, nil
}

func (m *mocks) Call(pulumi.MockCallArgs) (resource.PropertyMap, error) {
	return resource.PropertyMap{}, nil
}

func (m *mocks) ofType(t string) []pulumi.MockResourceArgs {
	m.mu.Lock()
	defer m.mu.Unlock()
	var rs []pulumi.MockResourceArgs
	for _, r := range m.resources {
		if r.TypeToken == t {
			rs = append(rs, r)
		}
	}
	return rs
}

func loadFleet(t *testing.T, path string) (*inventories.Fleet, *inventories.Catalogue) {
	t.Helper()
	cat, err := inventories.LoadCatalogue(inventories.Embedded(inventories.ProvidersFile))
	if err != nil {
		t.Fatal(err)
	}
	f, err := inventories.LoadFleet(path, cat)
	if err != nil {
		t.Fatal(err)
	}
	return f, cat
}

func run(t *testing.T, f *inventories.Fleet, cat *inventories.Catalogue) (*mocks, []map[string]any) {
	t.Helper()
	m := &mocks{}
	var hosts []map[string]any
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		d, err := Deploy(ctx, f, cat, Options{RelayBinary: "/opt/relay", Release: strings.Repeat("ab", 32), AuthKeys: testAuthKeys, TLSSeed: testTLSSeed})
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i, b := range d.Boxes {
			wg.Add(1)
			pulumi.All(b.Name, b.SSHAddress, d.Hosts[i].Ports).ApplyT(func(v []any) error {
				mu.Lock()
				hosts = append(hosts, map[string]any{"name": v[0], "ssh": v[1], "ports": v[2]})
				mu.Unlock()
				wg.Done()
				return nil
			})
		}
		go func() { wg.Wait() }()
		return nil
	}, pulumi.WithMocks("relayfleet", "test", m))
	if err != nil {
		t.Fatal(err)
	}
	return m, hosts
}

func TestEveryBoxIsLabelled(t *testing.T) {
	f, cat := loadFleet(t, "testdata/mixed.yaml")
	m, hosts := run(t, f, cat)
	boxes := m.ofType(provider.BoxType)
	if len(boxes) != 4 {
		t.Fatalf("%d boxes, want 4 (2 lab, 1 static, 1 hcloud)", len(boxes))
	}
	for _, b := range boxes {
		in := b.Inputs
		if in["fleet"].StringValue() != "mixed" || in["tier"].StringValue() != provider.TierSteady || in["event"].StringValue() == "" {
			t.Errorf("box %s: fleet %v tier %v event %v, want every box labelled", b.Name, in["fleet"], in["tier"], in["event"])
		}
		if in["authorizedKeys"].ArrayValue()[0].StringValue() != f.Admin.SSHKeys[0] {
			t.Errorf("box %s: the admin's key is not authorized", b.Name)
		}
		if in["backend"].StringValue() == provider.BackendLab {
			if err := lab.ValidName(in["name"].StringValue()); err != nil {
				t.Errorf("box %s: %v", b.Name, err)
			}
		}
	}
	if len(hosts) != 4 {
		t.Fatalf("%d host entries, want 4", len(hosts))
	}
	if hs := m.ofType(provider.HostType); len(hs) != 4 {
		t.Fatalf("%d hosts, want one per box", len(hs))
	}
	for _, h := range m.ofType(provider.HostType) {
		if h.Inputs["release"].StringValue() != strings.Repeat("ab", 32) || h.Inputs["sshAddress"].StringValue() == "" {
			t.Errorf("host %s: inputs %v", h.Name, h.Inputs)
		}
	}
}

func TestStaticBoxAdoptsTheServer(t *testing.T) {
	f, cat := loadFleet(t, "testdata/mixed.yaml")
	m, _ := run(t, f, cat)
	for _, b := range m.ofType(provider.BoxType) {
		if b.Inputs["backend"].StringValue() != provider.BackendStatic {
			continue
		}
		if b.Inputs["address"].StringValue() != "203.0.113.10" || !strings.HasPrefix(b.Inputs["hostKey"].StringValue(), "ssh-ed25519 ") {
			t.Fatalf("static box inputs %v, want its address and host key", b.Inputs)
		}
		return
	}
	t.Fatal("no static box")
}

func rulesOf(t *testing.T, fw pulumi.MockResourceArgs) []Rule {
	t.Helper()
	var rs []Rule
	for _, v := range fw.Inputs["rules"].ArrayValue() {
		o := v.ObjectValue()
		var srcs []string
		for _, s := range o["sources"].ArrayValue() {
			srcs = append(srcs, s.StringValue())
		}
		rs = append(rs, Rule{Protocol: o["protocol"].StringValue(), Ports: o["ports"].StringValue(), Sources: srcs})
	}
	return rs
}

func TestFirewallOnlyRelayPortsAndAdminSSH(t *testing.T) {
	f, cat := loadFleet(t, "testdata/mixed.yaml")
	m, _ := run(t, f, cat)
	fws := m.ofType(provider.FirewallType)
	if len(fws) != 1 {
		t.Fatalf("%d firewalls, want 1 (the hcloud group; lab and static have none)", len(fws))
	}
	rs := rulesOf(t, fws[0])
	want := map[string]bool{"udp 5000-5007": false, "tcp 5000-5007": false, "tcp 22": false} // ccx33: 8 cores
	for _, r := range rs {
		key := r.Protocol + " " + r.Ports
		if _, ok := want[key]; !ok {
			t.Errorf("unexpected rule %v", r)
			continue
		}
		want[key] = true
		if r.Ports == "22" {
			if !slices.Equal(r.Sources, f.Admin.Ranges) {
				t.Errorf("ssh from %v, want only the admin ranges %v", r.Sources, f.Admin.Ranges)
			}
			for _, s := range r.Sources {
				if strings.HasSuffix(s, "/0") {
					t.Errorf("ssh open to %s", s)
				}
			}
		}
	}
	for k, seen := range want {
		if !seen {
			t.Errorf("no rule %s", k)
		}
	}
}

func TestNoAdminRangesKeepsSSHClosed(t *testing.T) {
	f, cat := loadFleet(t, "testdata/mixed.yaml")
	f.Admin.Ranges = []string{"0.0.0.0/0"} // what validation refuses; the rules must not trust it
	rs, err := FirewallRules(f, cat, f.Steady[2].Box)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.Ports == "22" {
			t.Fatalf("ssh rule %v with no usable admin range", r)
		}
	}
}

func TestBoxName(t *testing.T) {
	tests := []struct {
		group, backend string
		n              int
		want           string
	}{
		{"lab-steady", "lab", 1, "lab-stead-1"},
		{"lab-steady", "lab", 12, "lab-stea-12"},
		{"a-", "lab", 1, "a-1"},
		{"fsn", "hcloud", 2, "f-s-fsn-2"},
		{"root", "static", 1, "f-s-root-1"},
		{"9x", "lab", 1, "b-1"},
	}
	for _, tt := range tests {
		if got := BoxName("f", tt.group, tt.backend, tt.n); got != tt.want {
			t.Errorf("BoxName(%s, %s, %d) = %q, want %q", tt.group, tt.backend, tt.n, got, tt.want)
		}
	}
}

func TestShippedLabInventory(t *testing.T) {
	dir := t.TempDir()
	data, err := inventories.Shipped.ReadFile(inventories.LabFile)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "lab.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, cat := loadFleet(t, path)
	m, _ := run(t, f, cat)
	if n := len(m.ofType(provider.BoxType)); n != 2 {
		t.Fatalf("lab.yaml: %d boxes, want 2", n)
	}
	if n := len(m.ofType(provider.FirewallType)); n != 0 {
		t.Fatalf("lab.yaml: %d firewalls, want none", n)
	}
}

// testAuthKeys is a relay key file (provision.BoxKeyFile) of fixed keys.
const testAuthKeys = "format:ed25519\ned25519-public:0EqyMnQrtKs6E2i9RhXk5tAiSrcaAWuvhSCjMsl3hzc=\ned25519-link-public:IEBA42TBDyvsnB/lAKHNTCR8idZQoB7X6CyrqGeHfCE=\ned25519-link-private:EhISEhISEhISEhISEhISEhISEhISEhISEhISEhISEhI=\n"

// TestHostsGetTheAuthKeyAsASecret: every Host gets the fleet's key file as
// a secret input (so Pulumi keeps it encrypted in the state and never
// shows it in a diff) and the fleet's public prefixes; without a key the
// program refuses to run.
func TestHostsGetTheAuthKeyAsASecret(t *testing.T) {
	f, cat := loadFleet(t, "testdata/mixed.yaml")
	f.Access.PublicListen = []string{"live/", "radio/"}
	// Unset, the cap is the relay's default, and no address is uncapped.
	m, _ := run(t, f, cat)
	for _, h := range m.ofType(provider.HostType) {
		if n := h.Inputs["maxSessionsPerAddress"]; !n.IsNumber() || n.NumberValue() != 64 {
			t.Errorf("host %s: maxSessionsPerAddress %v, want the default 64", h.Name, n)
		}
		if u, ok := h.Inputs["uncappedAddresses"]; ok && u.IsString() && u.StringValue() != "" {
			t.Errorf("host %s: uncappedAddresses %v, want none", h.Name, u)
		}
	}
	f.Access.MaxSessionsPerAddress = new(int)
	*f.Access.MaxSessionsPerAddress = 32
	f.Access.LoadGenerators = []string{"203.0.113.9", "198.51.100.7/24"}
	m, _ = run(t, f, cat)
	hosts := m.ofType(provider.HostType)
	if len(hosts) != 4 {
		t.Fatalf("%d hosts, want 4", len(hosts))
	}
	for _, h := range hosts {
		v, ok := h.Inputs["authKeys"]
		if !ok || !v.IsSecret() || v.SecretValue().Element.StringValue() != testAuthKeys {
			t.Errorf("host %s: authKeys %v, want the key file as a secret", h.Name, v)
		}
		if pl := h.Inputs["publicListen"]; !pl.IsArray() || len(pl.ArrayValue()) != 2 || pl.ArrayValue()[0].StringValue() != "live/" {
			t.Errorf("host %s: publicListen %v", h.Name, pl)
		}
		if n := h.Inputs["maxSessionsPerAddress"]; !n.IsNumber() || n.NumberValue() != 32 {
			t.Errorf("host %s: maxSessionsPerAddress %v, want the fleet file's 32", h.Name, n)
		}
		if u := h.Inputs["uncappedAddresses"]; !u.IsString() || u.StringValue() != "203.0.113.9/32,198.51.100.0/24" {
			t.Errorf("host %s: uncappedAddresses %v, want the fleet file's load generators", h.Name, u)
		}
		for k, v := range h.Inputs {
			if k != "authKeys" && strings.Contains(v.String(), "cHJvZ3JhbS10ZXN0") {
				t.Errorf("host %s: the key shows in %s", h.Name, k)
			}
		}
	}
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		_, err := Deploy(ctx, f, cat, Options{RelayBinary: "/opt/relay", Release: strings.Repeat("ab", 32)})
		return err
	}, pulumi.WithMocks("relayfleet", "test", &mocks{}))
	if err == nil || !strings.Contains(err.Error(), "no relay auth key") {
		t.Errorf("deploy without a key: %v", err)
	}
}
