//go:build lab

// The provider against real lab boxes (root, systemd-nspawn): a Box and a
// Host through create, read, drift, update and delete, in process. The
// lab is the provider's own (state directory, bridge rfpul0, subnet
// 10.231.81.0/24) and shares the default lab's image cache.
package provider

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi/sdk/v3/go/property"

	"github.com/relayfleet/relayfleet/infra/lab"
	"github.com/relayfleet/relayfleet/provision"
	"github.com/relayfleet/relayfleet/sysctl"
)

// testLabConfig is the provider configuration of the lab tests.
func testLabConfig() Config {
	images := os.Getenv("RELAYFLEET_LAB_IMAGES")
	if images == "" {
		images = "/var/lib/relayfleet/lab/images"
	}
	return Config{LabDir: "/var/lib/relayfleet/lab-provider-test", LabImages: images, LabBridge: "rfpul0", LabSubnet: "10.231.81.0/24"}
}

func configMap(c Config) property.Map {
	return property.NewMap(map[string]property.Value{
		"labDir": property.New(c.LabDir), "labImages": property.New(c.LabImages),
		"labBridge": property.New(c.LabBridge), "labSubnet": property.New(c.LabSubnet),
	})
}

func buildRelay(t *testing.T) (string, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "relay")
	cmd := exec.Command("go", "build", "-o", out, "github.com/relayfleet/relayfleet/cmd/relay")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return out, provision.Digest(data)
}

// openTestLab opens the lab of cfg (the tests need root); box is deleted
// and the lab cleaned up when the test ends.
func openTestLab(t *testing.T, cfg Config, box string) *lab.Lab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("lab tests need root")
	}
	l, err := openLab(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Delete(context.Background(), box)
		l.Cleanup(context.Background())
	})
	return l
}

func TestLabBoxAndHostLifecycle(t *testing.T) {
	ctx := context.Background()
	cfg := testLabConfig()
	l := openTestLab(t, cfg, "pt1")
	s := newServer(t)
	if err := s.Configure(p.ConfigureRequest{Args: configMap(cfg)}); err != nil {
		t.Fatal(err)
	}
	relayPath, release := buildRelay(t)

	boxURN := urn(BoxType, "pt1")
	in := boxInputs(map[string]string{"backend": "lab", "name": "pt1", "fleet": "provider-test", "tier": "steady", "shape": "small"})
	chk, err := s.Check(p.CheckRequest{Urn: boxURN, Inputs: in})
	if err != nil || len(chk.Failures) > 0 {
		t.Fatalf("check: %v %v", err, chk.Failures)
	}
	created, err := s.Create(p.CreateRequest{Urn: boxURN, Properties: chk.Inputs})
	if err != nil {
		t.Fatalf("create box: %v", err)
	}
	box := created.Properties
	b, err := l.Get(ctx, "pt1")
	if err != nil {
		t.Fatal(err)
	}
	if got := box.Get("hostPublicKey").AsString(); got != b.HostKey {
		t.Errorf("hostPublicKey %q, the lab pinned %q", got, b.HostKey)
	}
	if got := box.Get("sshAddress").AsString(); got != b.SSHAddr() {
		t.Errorf("sshAddress %q, want %q", got, b.SSHAddr())
	}
	for k, want := range map[string]string{"fleet": "provider-test", "tier": "steady", "event": NoEvent} {
		if b.Labels[k] != want {
			t.Errorf("lab box label %s = %q, want %q", k, b.Labels[k], want)
		}
	}

	// Create again with the same inputs: the lab returns the same box.
	read, err := s.Read(p.ReadRequest{ID: created.ID, Urn: boxURN, Properties: box})
	if err != nil || read.ID != created.ID {
		t.Fatalf("read box: %v id %q", err, read.ID)
	}

	hostURN := urn(HostType, "pt1")
	sign, err := provision.NewAuthKey(false)
	if err != nil {
		t.Fatal(err)
	}
	link, err := provision.NewAuthKey(true)
	if err != nil {
		t.Fatal(err)
	}
	boxKeys := provision.BoxKeyFile([]provision.AuthKey{sign, link}, time.Now())
	hin := property.NewMap(map[string]property.Value{
		"box": property.New("pt1"), "backend": property.New("lab"),
		"sshAddress": box.Get("sshAddress"), "hostKey": box.Get("hostPublicKey"),
		"cores": box.Get("cores"), "ram": box.Get("ram"),
		"basePort": property.New(4443.0), "release": property.New(release), "relayBinary": property.New(relayPath),
		"authKeys": property.New(boxKeys).WithSecret(true),
	})
	hc, err := s.Check(p.CheckRequest{Urn: hostURN, Inputs: hin})
	if err != nil || len(hc.Failures) > 0 {
		t.Fatalf("check host: %v %v", err, hc.Failures)
	}
	host, err := s.Create(p.CreateRequest{Urn: hostURN, Properties: hc.Inputs})
	if err != nil {
		t.Fatalf("create host: %v", err)
	}
	if ports := host.Properties.Get("ports").AsArray(); ports.Len() != 1 || ports.Get(0).AsNumber() != 4443 {
		t.Errorf("ports %v, want [4443] on a 1-core box", ports)
	}

	// Converged: a refresh finds no drift and the diff is empty.
	rd, err := s.Read(p.ReadRequest{ID: host.ID, Urn: hostURN, Properties: host.Properties, Inputs: hc.Inputs})
	if err != nil {
		t.Fatalf("read host: %v", err)
	}
	if d := rd.Properties.Get("drift").AsArray(); d.Len() != 0 {
		t.Fatalf("drift right after converge: %v", d)
	}
	if d, err := s.Diff(p.DiffRequest{ID: host.ID, Urn: hostURN, State: rd.Properties, Inputs: hc.Inputs}); err != nil || d.HasChanges {
		t.Fatalf("diff of a converged host: %+v %v", d, err)
	}

	// A hand edit of the sysctl file shows as drift, and an update repairs it.
	if err := l.Run(ctx, "pt1", "echo '# edited by hand' >> "+sysctl.Relay().File, nil, nil, os.Stderr); err != nil {
		t.Fatal(err)
	}
	rd, err = s.Read(p.ReadRequest{ID: host.ID, Urn: hostURN, Properties: host.Properties, Inputs: hc.Inputs})
	if err != nil {
		t.Fatalf("read host: %v", err)
	}
	if d := rd.Properties.Get("drift").AsArray(); d.Len() == 0 {
		t.Fatal("a hand-edited sysctl file is not reported as drift")
	} else {
		t.Logf("drift: %v", d)
	}
	d, err := s.Diff(p.DiffRequest{ID: host.ID, Urn: hostURN, State: rd.Properties, Inputs: hc.Inputs})
	if err != nil || !d.HasChanges {
		t.Fatalf("diff of a drifted host: %+v %v, want changes", d, err)
	}
	up, err := s.Update(p.UpdateRequest{ID: host.ID, Urn: hostURN, State: rd.Properties, Inputs: hc.Inputs})
	if err != nil {
		t.Fatalf("update host: %v", err)
	}
	rd, err = s.Read(p.ReadRequest{ID: host.ID, Urn: hostURN, Properties: up.Properties, Inputs: hc.Inputs})
	if err != nil {
		t.Fatal(err)
	}
	if d := rd.Properties.Get("drift").AsArray(); d.Len() != 0 {
		t.Fatalf("drift after update: %v", d)
	}

	if err := s.Delete(p.DeleteRequest{ID: host.ID, Urn: hostURN, Properties: up.Properties}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(p.DeleteRequest{ID: created.ID, Urn: boxURN, Properties: box}); err != nil {
		t.Fatalf("delete box: %v", err)
	}
	if err := s.Delete(p.DeleteRequest{ID: created.ID, Urn: boxURN, Properties: box}); err != nil {
		t.Fatalf("delete box twice: %v", err)
	}
	gone, err := s.Read(p.ReadRequest{ID: created.ID, Urn: boxURN, Properties: box})
	if err != nil || gone.ID != "" {
		t.Fatalf("read of a deleted box: id %q %v, want it gone", gone.ID, err)
	}
}

// TestLabStaticBoxAdoptsAServer adopts a lab box as a static server: its
// cores and RAM are read over SSH with its pinned key, a wrong key is
// refused, and deleting the static Box leaves the server running.
func TestLabStaticBoxAdoptsAServer(t *testing.T) {
	ctx := context.Background()
	cfg := testLabConfig()
	l := openTestLab(t, cfg, "pt2")
	b, err := l.Create(ctx, lab.Spec{Name: "pt2", Shape: lab.Small, Labels: map[string]string{"fleet": "provider-test"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.SSHKeyFile = l.AdminKeyPath()
	t.Setenv("SSH_AUTH_SOCK", "")
	s := newServer(t)
	cm := configMap(cfg).Set("sshKeyFile", property.New(cfg.SSHKeyFile))
	if err := s.Configure(p.ConfigureRequest{Args: cm}); err != nil {
		t.Fatal(err)
	}
	in := boxInputs(map[string]string{"backend": "static", "name": "adopted", "fleet": "f", "tier": "steady",
		"address": b.Address.String(), "hostKey": b.HostKey})
	resp, err := s.Create(p.CreateRequest{Urn: urn(BoxType, "adopted"), Properties: in})
	if err != nil {
		t.Fatalf("adopt: %v", err)
	}
	if got := resp.Properties.Get("cores").AsNumber(); got != float64(lab.Small.Cores) {
		t.Errorf("cores %v, want %d read over SSH", got, lab.Small.Cores)
	}
	if got := resp.Properties.Get("ram").AsNumber(); got <= 0 || got > float64(lab.Small.RAM) {
		t.Errorf("ram %v, want at most the box's %d", got, lab.Small.RAM)
	}
	if err := s.Delete(p.DeleteRequest{ID: resp.ID, Urn: urn(BoxType, "adopted"), Properties: resp.Properties}); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Get(ctx, "pt2"); err != nil || got.State != lab.StateRunning {
		t.Fatalf("deleting a static box touched the server: %v %v", got.State, err)
	}

	// Another server's key is refused.
	wrong := boxInputs(map[string]string{"backend": "static", "name": "adopted", "fleet": "f", "tier": "steady",
		"address": b.Address.String(), "hostKey": testKey})
	_, err = s.Create(p.CreateRequest{Urn: urn(BoxType, "adopted"), Properties: wrong})
	if err == nil || !strings.Contains(err.Error(), "host key") {
		t.Fatalf("adopt with the wrong host key: %v, want a refusal", err)
	}
}
