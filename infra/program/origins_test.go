package program

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// originsFleet is a lab fleet with an origin group of two and one steady
// group of two edges.
func originsFleet(t *testing.T) (*inventories.Fleet, *inventories.Catalogue) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fleet.yaml")
	data := "version: 1\nname: f\norigins:\n  provider: lab\n  shape: small\n  count: 2\n" +
		"steady:\n  - name: edge\n    provider: lab\n    shape: small\n    count: 2\n    processes: 2\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return loadFleet(t, path)
}

// TestDeployOrigins: a fleet with origins: gets its origin boxes (tier
// origin, one relay process, no upstream) in the steady stack, and every
// edge host pulls from each origin through a URL pinned to the key the
// fleet derived for that origin box, from the origin Hosts' outputs.
func TestDeployOrigins(t *testing.T) {
	f, cat := originsFleet(t)
	m, _ := run(t, f, cat)
	boxes := m.ofType(provider.BoxType)
	var origins []string
	for _, b := range boxes {
		name := b.Inputs["name"].StringValue()
		if b.Inputs["tier"].StringValue() == provider.TierOrigin {
			origins = append(origins, name)
		}
	}
	if len(boxes) != 4 || !slices.Equal(origins, []string{"origin-1", "origin-2"}) {
		t.Fatalf("boxes %d, origin boxes %v; want 4 boxes, origins origin-1 and origin-2", len(boxes), origins)
	}
	// Each origin's pin, derived here from the seed as the provider
	// does: the edges' URLs must carry these, in the origins' order.
	var want []string
	for _, o := range origins {
		_, spki, err := provision.BoxTLSKey(testTLSSeed, o)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, "#spki="+spki)
	}
	hosts := m.ofType(provider.HostType)
	if len(hosts) != 4 {
		t.Fatalf("%d hosts, want 4", len(hosts))
	}
	for _, h := range hosts {
		up := h.Inputs["upstream"].ArrayValue()
		if strings.HasPrefix(h.Name, inventories.OriginGroup+"-") {
			if len(up) != 0 || h.Inputs["processes"].NumberValue() != 1 || !takesLinks(h) {
				t.Errorf("origin host %s: upstream %v, processes %v, acceptLinkTokens %v; want none, 1 and true", h.Name, up, h.Inputs["processes"], h.Inputs["acceptLinkTokens"])
			}
			continue
		}
		if takesLinks(h) {
			t.Errorf("edge host %s takes link tokens", h.Name)
		}
		if len(up) != 2 {
			t.Fatalf("edge host %s: upstream %v, want both origins", h.Name, up)
		}
		for i, u := range up {
			s := u.StringValue()
			if !strings.HasPrefix(s, "http://10.0.0.") || !strings.Contains(s, ":4443/") || !strings.HasSuffix(s, want[i]) {
				t.Errorf("edge host %s: upstream[%d] %q, want http://ORIGIN:4443/%s", h.Name, i, s, want[i])
			}
		}
		if up[0].StringValue() == up[1].StringValue() {
			t.Errorf("edge host %s: both upstreams %q", h.Name, up[0].StringValue())
		}
	}
}

// TestDeployBurstOrigins: an event's edges pull from the origins the
// steady stack's output names; without them the event is refused rather
// than brought up with edges that have nothing to pull from.
func TestDeployBurstOrigins(t *testing.T) {
	f, cat := originsFleet(t)
	pool := inventories.Pool{Name: "b", Box: f.Steady[0].Box}
	urls := []string{"http://10.0.0.1:4443/#spki=" + strings.Repeat("ab", 32), "http://10.0.0.2:4443/#spki=" + strings.Repeat("cd", 32)}
	for _, tc := range []struct {
		upstream []string
		err      string
	}{{urls, ""}, {nil, "fleet up first"}} {
		m := &mocks{}
		err := pulumi.RunErr(func(ctx *pulumi.Context) error {
			_, err := DeployBurst(ctx, f, cat, Burst{Event: "final", Pool: pool, Boxes: 1},
				Options{RelayBinary: "/opt/relay", Release: "r", AuthKeys: testAuthKeys, TLSSeed: testTLSSeed, Upstream: tc.upstream})
			return err
		}, pulumi.WithMocks("relayfleet", "test", m))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("DeployBurst with no origin URLs: %v, want ...%s...", err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range m.ofType(provider.HostType) {
			var got []string
			for _, u := range h.Inputs["upstream"].ArrayValue() {
				got = append(got, u.StringValue())
			}
			if !slices.Equal(got, urls) {
				t.Errorf("burst host %s: upstream %v, want %v", h.Name, got, urls)
			}
			if takesLinks(h) {
				t.Errorf("burst host %s takes link tokens", h.Name)
			}
		}
	}
}

// takesLinks is a Host's acceptLinkTokens input: whether its relays get
// the link key's public half and take link tokens (origins only).
func takesLinks(h pulumi.MockResourceArgs) bool {
	v, ok := h.Inputs["acceptLinkTokens"]
	return ok && v.IsBool() && v.BoolValue()
}

// TestRelaysLeaveOutOrigins: the router's relays file lists the edges'
// relays, never an origin's (listeners go to edges).
func TestRelaysLeaveOutOrigins(t *testing.T) {
	spki := strings.Repeat("ab", 32)
	hosts := []HostEntry{
		{Name: "origin-1", Address: "10.0.0.1", Ports: []int{4443}, SPKI: spki, Tier: provider.TierOrigin},
		{Name: "edge-1", Address: "10.0.0.2", Ports: []int{4443, 4444}, SPKI: spki},
	}
	rs := Relays(hosts)
	if len(rs) != 2 || strings.Contains(rs[0].URL, "10.0.0.1") || strings.Contains(rs[1].URL, "10.0.0.1") {
		t.Fatalf("relays %+v, want edge-1's two only", rs)
	}
	if got := OriginURLs(hosts); !slices.Equal(got, []string{"http://10.0.0.1:4443/#spki=" + spki}) {
		t.Fatalf("OriginURLs %v", got)
	}
}
