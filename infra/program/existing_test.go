package program

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/internal/testutil"
)

// TestStackKeepsOldNamesFromItsState: a stack whose state (written by the
// Pulumi CLI, as an older relayfleet left it) has a box and a firewall
// under the names they had before names carried their tier gives them
// those names again, through the real CLI's export; the box the state
// does not have gets the new name.
func TestStackKeepsOldNamesFromItsState(t *testing.T) {
	if _, err := FindPulumi(""); err != nil {
		testutil.Skipf(t, "%v (make pulumi)", err)
	}
	t.Setenv(PassphraseEnv, "")
	f, cat := loadFleet(t, "testdata/mixed.yaml")
	f.Steady[2].Count = 2
	s := &Stack{Fleet: f, Catalogue: cat, StateDir: t.TempDir(), Plugin: "/bin/true",
		Program: Options{RelayBinary: "/opt/relay", Release: strings.Repeat("ab", 32), AuthKeys: testAuthKeys, TLSSeed: testTLSSeed}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := s.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	urn := func(typ, name string) string {
		return fmt.Sprintf("urn:pulumi:%s::%s::%s::%s", s.Name, Project, typ, name)
	}
	prov := urn("pulumi:providers:relayfleet", "default")
	const provID = "0b7e7a7e-0000-4000-8000-000000000001"
	res := func(typ, name, id string, inputs map[string]any) map[string]any {
		return map[string]any{"urn": urn(typ, name), "custom": true, "id": id, "type": typ,
			"inputs": inputs, "outputs": inputs, "provider": prov + "::" + provID}
	}
	dep, err := json.Marshal(map[string]any{
		"manifest": map[string]any{"time": "2026-01-01T00:00:00Z", "version": PulumiVersion,
			"magic": fmt.Sprintf("%x", sha256.Sum256([]byte(PulumiVersion)))},
		"resources": []any{
			map[string]any{"urn": prov, "custom": true, "id": provID, "type": "pulumi:providers:relayfleet", "inputs": map[string]any{}},
			res(provider.FirewallType, "fsn-firewall", "7", map[string]any{"backend": "hcloud", "name": "mixed-fsn"}),
			res(provider.BoxType, "fsn-1", "hcloud/42", map[string]any{"backend": "hcloud", "name": "mixed-fsn-1", "tier": "steady"}),
			res(provider.BoxType, "root-1", "static/203.0.113.10:22", map[string]any{"backend": "static", "name": "mixed-root-1"}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Import(ctx, apitype.UntypedDeployment{Version: 3, Deployment: dep}); err != nil {
		t.Fatal(err)
	}
	if err := s.readExisting(ctx, st); err != nil {
		t.Fatal(err)
	}
	m := &mocks{}
	if err := pulumi.RunErr(s.runFunc(), pulumi.WithMocks(Project, s.Name, m)); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, typ := range []string{provider.BoxType, provider.FirewallType} {
		for _, r := range m.ofType(typ) {
			got[r.Name] = r.Inputs["name"].StringValue()
		}
	}
	for res, want := range map[string]string{
		"fsn-1": "mixed-fsn-1", "fsn-firewall": "mixed-fsn", "root-1": "mixed-root-1", "fsn-2": "mixed-s-fsn-2",
	} {
		if got[res] != want {
			t.Errorf("%s named %q, want %q (state: %v)", res, got[res], want, s.existing)
		}
	}
}
