package program

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/relayfleet/relayfleet/infra/provider"
	"github.com/relayfleet/relayfleet/inventories"
	"github.com/relayfleet/relayfleet/provision"
)

// TestProjectProgramIsFleetUpsProgram: infra/pulumi's program, given the
// stack configuration fleet up leaves (the secrets relayAuthKeys and
// relayTLSSeed) and the fleet file and relay build, registers exactly the
// resources, with the same inputs, that fleet up's inline program does
// with the keys it derives (FleetAuthKeys: relays get public keys and the
// link key, never the signing key): pulumi preview after fleet up, and
// fleet preview after pulumi up, plan no change.
func TestProjectProgramIsFleetUpsProgram(t *testing.T) {
	now := time.Now()
	keys, _, _, err := provision.RotateAuthKeys("", now, 0)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := provision.NewTLSSeed()
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{RelayAuthKeysKey: provision.FormatAuthKeys(keys), RelayTLSSeedKey: seed}
	dir := t.TempDir()
	relay := filepath.Join(dir, "relay")
	if err := os.WriteFile(relay, []byte("a relay build"), 0o755); err != nil {
		t.Fatal(err)
	}
	inv, err := filepath.Abs("testdata/mixed.yaml")
	if err != nil {
		t.Fatal(err)
	}

	// fleet up's program: Options as loadWithKeys makes them.
	ks := &memKeys{secrets: map[string]string{RelayAuthKeysKey: secrets[RelayAuthKeysKey], RelayTLSSeedKey: seed}}
	boxFile, _, err := FleetAuthKeys(context.Background(), ks, now, false)
	if err != nil {
		t.Fatal(err)
	}
	f, cat, err := inventories.LoadFleetFile(inv)
	if err != nil {
		t.Fatal(err)
	}
	fleetUp := &mocks{}
	if err := pulumi.RunErr(Program(f, cat, Options{RelayBinary: relay, Release: provision.Digest([]byte("a relay build")), AuthKeys: boxFile, TLSSeed: seed}),
		pulumi.WithMocks(Project, f.Name, fleetUp)); err != nil {
		t.Fatal(err)
	}

	// infra/pulumi's program, from the stack's configuration.
	cfg := map[string]string{Project + ":" + InventoryKey: inv, Project + ":" + RelayBinaryKey: relay}
	for k, v := range secrets {
		cfg[SecretNamespace+":"+k] = v
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PULUMI_CONFIG", string(data))
	pulumiUp := &mocks{}
	if err := pulumi.RunErr(ProjectProgram, pulumi.WithMocks(Project, f.Name, pulumiUp)); err != nil {
		t.Fatal(err)
	}

	want, got := registered(fleetUp), registered(pulumiUp)
	if len(want) == 0 || len(want) != len(got) {
		t.Fatalf("infra/pulumi's program registered %d resources, fleet up's %d", len(got), len(want))
	}
	for i := range want {
		if want[i].name != got[i].name {
			t.Fatalf("resource %d: infra/pulumi's program registered %s, fleet up's %s", i, got[i].name, want[i].name)
		}
		w, g := want[i].args.Inputs, got[i].args.Inputs
		for k := range w {
			if k == "sshAddress" {
				continue // the mocks number boxes in the order they come
			}
			if !w[k].DeepEquals(g[k]) {
				t.Errorf("resource %s: input %s from infra/pulumi's program differs from fleet up's", want[i].name, k)
			}
		}
		if len(w) != len(g) {
			t.Errorf("resource %s: %d inputs from infra/pulumi's program, %d from fleet up's", want[i].name, len(g), len(w))
		}
	}
	for _, h := range pulumiUp.ofType(provider.HostType) {
		if v := h.Inputs["authKeys"]; !v.IsSecret() || strings.Contains(v.SecretValue().Element.StringValue(), "ed25519-private:") {
			t.Errorf("host %s: authKeys is not the relays' key file as a secret: %v", h.Name, v)
		}
	}
}

// TestProjectProgramWithoutFleetUp: a stack fleet up never ran has no
// keys; the program says so instead of making any.
func TestProjectProgramWithoutFleetUp(t *testing.T) {
	dir := t.TempDir()
	relay := filepath.Join(dir, "relay")
	if err := os.WriteFile(relay, []byte("a relay build"), 0o755); err != nil {
		t.Fatal(err)
	}
	inv, err := filepath.Abs("testdata/mixed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(map[string]string{Project + ":" + InventoryKey: inv, Project + ":" + RelayBinaryKey: relay})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PULUMI_CONFIG", string(data))
	m := &mocks{}
	err = pulumi.RunErr(ProjectProgram, pulumi.WithMocks(Project, "lab", m))
	if err == nil || !strings.Contains(err.Error(), RelayAuthKeysKey) || !strings.Contains(err.Error(), "fleet up") {
		t.Fatalf("program on a stack without keys: %v, want an error naming %s and fleet up", err, RelayAuthKeysKey)
	}
	if len(m.ofType(provider.BoxType)) != 0 {
		t.Errorf("boxes registered without keys")
	}
}

type namedResource struct {
	name string
	args pulumi.MockResourceArgs
}

// registered is what m recorded, sorted by type and name.
func registered(m *mocks) []namedResource {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []namedResource
	for _, r := range m.resources {
		out = append(out, namedResource{name: r.TypeToken + "::" + r.Name, args: r})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}
