package program

import (
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"

	"github.com/relayfleet/relayfleet/infra/provider"
)

// The cloud tokens reach the provider as secret inputs of an explicit
// provider that every resource uses, not as the provider's own namespace
// of configuration, which the Pulumi engine puts in the plugin's
// environment.
func TestCloudTokensAreSecretInputsOfTheExplicitProvider(t *testing.T) {
	t.Setenv("PULUMI_CONFIG", `{"`+SecretNamespace+`:hcloudToken":"hc-token","relayfleet:labDir":"/srv/lab","relayfleet:digitaloceanToken":"do-old-place"}`)
	t.Setenv("PULUMI_CONFIG_SECRET_KEYS", `["`+SecretNamespace+`:hcloudToken","relayfleet:digitaloceanToken"]`)
	f, cat := loadFleet(t, "../../inventories/example.yaml")
	m, _ := run(t, f, cat)
	provs := m.ofType("pulumi:providers:" + provider.Name)
	if len(provs) != 1 {
		t.Fatalf("%d explicit relayfleet providers, want 1", len(provs))
	}
	in := provs[0].Inputs
	for _, k := range []string{"hcloudToken", "digitaloceanToken"} {
		v, ok := in[resource.PropertyKey(k)]
		if !ok {
			t.Fatalf("provider input %s missing (inputs %v)", k, in.StableKeys())
		}
		if !v.IsSecret() {
			t.Errorf("provider input %s is not secret", k)
		}
	}
	if v := in["labDir"]; !v.IsString() || v.StringValue() != "/srv/lab" {
		t.Errorf("labDir = %v, want /srv/lab as a plain input", v)
	}
	n := 0
	for _, r := range m.resources {
		if strings.HasPrefix(r.TypeToken, "pulumi:providers:") {
			continue
		}
		n++
		if !strings.Contains(r.Provider, "pulumi:providers:"+provider.Name+"::"+provider.Name) {
			t.Errorf("%s %s uses provider %q, not the explicit one", r.TypeToken, r.Name, r.Provider)
		}
	}
	if n == 0 {
		t.Fatal("no resources registered")
	}
}
