package provider

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/relayfleet/relayfleet/infra/backend"
	"github.com/relayfleet/relayfleet/infra/lab"
)

func TestOpenBackendErrors(t *testing.T) {
	t.Setenv(HcloudTokenEnv, "")
	t.Setenv(DOTokenEnv, "")
	for _, tc := range []struct{ name, want string }{
		{"nope", `backend "nope": want lab, hcloud or digitalocean`},
		{"", `backend "": want lab, hcloud or digitalocean`},
		{BackendStatic, "backend static: static servers are not created or listed by relayfleet"},
		{BackendHcloud, "backend hcloud: no token: fleet secret set hcloud-token, or set HCLOUD_TOKEN"},
		{BackendDigitalOcean, "backend digitalocean: no token: fleet secret set digitalocean-token, or set DIGITALOCEAN_TOKEN"},
	} {
		b, err := OpenBackend(tc.name, Config{})
		if err == nil || err.Error() != tc.want {
			t.Errorf("OpenBackend(%q) error %v, want %q", tc.name, err, tc.want)
		}
		if b != nil {
			t.Errorf("OpenBackend(%q) = %#v with an error, want nil", tc.name, b)
		}
	}
	if _, err := OpenBackend(BackendLab, Config{LabDir: t.TempDir(), LabSubnet: "bad"}); err == nil || !strings.Contains(err.Error(), "labSubnet") {
		t.Errorf("OpenBackend(lab) with a bad subnet: %v", err)
	}
}

// TestTokenFromConfig: a token kept as a stack secret reaches the
// provider as configuration and wins over an empty environment.
func TestTokenFromConfig(t *testing.T) {
	t.Setenv(HcloudTokenEnv, "")
	t.Setenv(DOTokenEnv, "")
	for _, c := range []Config{{HcloudToken: "secret-token"}, {DigitalOceanToken: "secret-token"}} {
		name := BackendHcloud
		if c.DigitalOceanToken != "" {
			name = BackendDigitalOcean
		}
		if b, err := OpenBackend(name, c); err != nil || b == nil {
			t.Errorf("OpenBackend(%s) with the token in config: %v", name, err)
		}
	}
}

func TestOpenBackendClouds(t *testing.T) {
	t.Setenv(HcloudTokenEnv, "test-token")
	t.Setenv(DOTokenEnv, "test-token")
	for _, name := range []string{BackendHcloud, BackendDigitalOcean} {
		if b, err := OpenBackend(name, Config{}); err != nil || b == nil {
			t.Errorf("OpenBackend(%q) = %v, %v", name, b, err)
		}
	}
}

// TestOpenBackendLab needs no root: an empty lab lists nothing and has
// nothing to delete.
func TestOpenBackendLab(t *testing.T) {
	b, err := OpenBackend(BackendLab, Config{LabDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	boxes, err := b.List(t.Context(), map[string]string{"fleet": "demo", "tier": "burst"})
	if err != nil || len(boxes) != 0 {
		t.Errorf("List = %v, %v; want none", boxes, err)
	}
	if _, err := b.List(t.Context(), map[string]string{"fleet": "bad value"}); err == nil {
		t.Error("List with an invalid label: no error")
	}
	if _, err := b.Get(t.Context(), "relay-1"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Get of a missing box: %v, want backend.ErrNotFound", err)
	}
	if err := b.Delete(t.Context(), "relay-1"); err != nil {
		t.Errorf("Delete of a missing box: %v", err)
	}
	spec := backend.Spec{Name: "relay-1", Shape: "huge", Labels: map[string]string{"fleet": "demo"}}
	if _, err := b.Create(t.Context(), spec); err == nil || !strings.Contains(err.Error(), `lab shape "huge"`) {
		t.Errorf("Create of shape huge: %v", err)
	}
	spec.Shape, spec.Labels = "small", map[string]string{"tier": "burst"}
	if _, err := b.Create(t.Context(), spec); err == nil || !strings.Contains(err.Error(), `no "fleet" label`) {
		t.Errorf("Create without a fleet: %v", err)
	}
}

func TestLabBox(t *testing.T) {
	labels := map[string]string{"fleet": "demo", "tier": "burst", "event": "finals"}
	addr := netip.MustParseAddr("10.231.77.11")
	for _, tc := range []struct {
		in   lab.Box
		want backend.Box
	}{
		{
			lab.Box{Name: "relay-1", Address: addr, Cores: 1, RAM: 1 << 30, Labels: labels, State: lab.StateRunning},
			backend.Box{ID: "relay-1", Name: "relay-1", IPv4: addr, Labels: labels, Status: backend.StatusRunning, Shape: "small"},
		},
		{
			lab.Box{Name: "relay-2", Address: addr, Cores: 2, RAM: 2 << 30, State: lab.StateStopped},
			backend.Box{ID: "relay-2", Name: "relay-2", IPv4: addr, Status: backend.StatusOff, Shape: "medium"},
		},
		{
			lab.Box{Name: "relay-3", Address: addr, Cores: 4, RAM: 512 << 20, State: lab.StateRunning},
			backend.Box{ID: "relay-3", Name: "relay-3", IPv4: addr, Status: backend.StatusRunning, Shape: "4cpu-512mb"},
		},
	} {
		if got := labBox(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("labBox(%s)\n got %+v\nwant %+v", tc.in.Name, got, tc.want)
		}
	}
}
