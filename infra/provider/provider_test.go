package provider

import (
	"encoding/json"
	"github.com/relayfleet/relayfleet/provision"
	"os"
	"strings"
	"testing"

	"github.com/blang/semver"
	p "github.com/pulumi/pulumi-go-provider"
	"github.com/pulumi/pulumi-go-provider/integration"
	presource "github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/property"
)

const testKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"

func newServer(t *testing.T) integration.Server {
	t.Helper()
	prov, err := New()
	if err != nil {
		t.Fatal(err)
	}
	s, err := integration.NewServer(t.Context(), Name, semver.MustParse(Version), integration.WithProvider(prov))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func urn(typ, name string) presource.URN {
	return presource.NewURN("test", "relayfleet", "", tokens.Type(typ), name)
}

func boxInputs(kv map[string]string) property.Map {
	vs := map[string]property.Value{}
	for k, v := range kv {
		vs[k] = property.New(v)
	}
	return property.NewMap(vs)
}

// schemaProperty is what the tests read of a property in the provider's
// schema.
type schemaProperty struct {
	Secret           bool `json:"secret"`
	ReplaceOnChanges bool `json:"replaceOnChanges"`
}

// schemaResource is what the tests read of a resource in the schema.
type schemaResource struct {
	Properties      map[string]schemaProperty `json:"properties"`
	InputProperties map[string]schemaProperty `json:"inputProperties"`
}

// schemaResources is the resources of the schema s serves, by type.
func schemaResources(t *testing.T, s integration.Server) map[string]schemaResource {
	t.Helper()
	resp, err := s.GetSchema(p.GetSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Resources map[string]schemaResource `json:"resources"`
	}
	if err := json.Unmarshal([]byte(resp.Schema), &spec); err != nil {
		t.Fatal(err)
	}
	return spec.Resources
}

func TestSchemaMarksPrivateKeySecret(t *testing.T) {
	resources := schemaResources(t, newServer(t))
	box, ok := resources[BoxType]
	if !ok {
		t.Fatalf("schema has no %s; resources: %v", BoxType, resources)
	}
	if !box.Properties["hostPrivateKey"].Secret {
		t.Errorf("hostPrivateKey is not marked secret")
	}
	if box.Properties["hostPublicKey"].Secret {
		t.Errorf("hostPublicKey is marked secret")
	}
	if _, ok := resources[HostType]; !ok {
		t.Errorf("schema has no %s", HostType)
	}
}

func TestBoxCheck(t *testing.T) {
	s := newServer(t)
	tests := []struct {
		name   string
		inputs map[string]string
		fail   string // the property that fails, "" for none
	}{
		{"lab ok", map[string]string{"backend": "lab", "name": "box1", "fleet": "lab", "tier": "steady", "shape": "small"}, ""},
		{"unknown backend", map[string]string{"backend": "aws", "name": "box1", "fleet": "lab", "tier": "steady"}, "backend"},
		{"bad tier", map[string]string{"backend": "lab", "name": "box1", "fleet": "lab", "tier": "weekly"}, "tier"},
		{"lab name too long", map[string]string{"backend": "lab", "name": "a-very-long-box-name", "fleet": "lab", "tier": "steady"}, "name"},
		{"lab shape", map[string]string{"backend": "lab", "name": "box1", "fleet": "lab", "tier": "steady", "shape": "huge"}, "shape"},
		{"static without key", map[string]string{"backend": "static", "name": "s1", "fleet": "f", "tier": "steady", "address": "192.0.2.1"}, "hostKey"},
		{"static ok", map[string]string{"backend": "static", "name": "s1", "fleet": "f", "tier": "steady", "address": "192.0.2.1", "hostKey": testKey}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := s.Check(p.CheckRequest{Urn: urn(BoxType, "b"), Inputs: boxInputs(tt.inputs)})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range resp.Failures {
				got = append(got, f.Property)
			}
			if tt.fail == "" && len(got) > 0 {
				t.Fatalf("failures %v, want none: %+v", got, resp.Failures)
			}
			if tt.fail != "" && (len(got) == 0 || got[0] != tt.fail) {
				t.Fatalf("failures %v, want %s first", got, tt.fail)
			}
		})
	}
}

func TestBoxCloudNeedsToken(t *testing.T) {
	t.Setenv(HcloudTokenEnv, "")
	s := newServer(t)
	in := boxInputs(map[string]string{"backend": "hcloud", "name": "h1", "fleet": "f", "tier": "burst", "event": "final", "shape": "cpx11"})
	_, err := s.Create(p.CreateRequest{Urn: urn(BoxType, "h1"), Properties: in})
	if err == nil || !strings.Contains(err.Error(), "set HCLOUD_TOKEN") {
		t.Fatalf("create on hcloud without a token: %v, want one naming HCLOUD_TOKEN", err)
	}
	if _, err := backendFor(t.Context(), "aws"); err == nil {
		t.Fatal("backend aws: want an error")
	}
}

func TestBoxPreviewCreatesNothing(t *testing.T) {
	s := newServer(t)
	dir := t.TempDir()
	if err := s.Configure(p.ConfigureRequest{Args: property.NewMap(map[string]property.Value{"labDir": property.New(dir)})}); err != nil {
		t.Fatal(err)
	}
	in := boxInputs(map[string]string{"backend": "lab", "name": "pv1", "fleet": "lab", "tier": "steady"})
	resp, err := s.Create(p.CreateRequest{Urn: urn(BoxType, "pv1"), Properties: in, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := resp.Properties.GetOk("name"); !ok || v.AsString() != "pv1" {
		t.Errorf("preview name = %v", v)
	}
	if v, ok := resp.Properties.GetOk("sshAddress"); ok && !v.IsComputed() {
		t.Errorf("preview knows sshAddress %v before the box exists", v)
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Errorf("preview touched the lab: %v", ents)
	}
}

func TestAllLabels(t *testing.T) {
	a := BoxArgs{Fleet: "prod", Tier: TierBurst, Event: "final", Labels: map[string]string{"team": "audio", "fleet": "spoofed"}}
	got := a.AllLabels()
	want := map[string]string{"team": "audio", "fleet": "prod", "tier": "burst", "event": "final"}
	if len(got) != len(want) {
		t.Fatalf("labels %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
	if a.Labels["fleet"] != "spoofed" {
		t.Error("AllLabels changed its input map")
	}
}

func TestBoxDiff(t *testing.T) {
	base := BoxArgs{Backend: "lab", Name: "b1", Fleet: "lab", Tier: "steady", Shape: "small", Labels: map[string]string{"a": "1"}}
	tests := []struct {
		name    string
		edit    func(*BoxArgs)
		replace string
	}{
		{"nothing", func(*BoxArgs) {}, ""},
		{"shape", func(a *BoxArgs) { a.Shape = "medium" }, "shape"},
		{"image", func(a *BoxArgs) { a.Image = "debian-13" }, "image"},
		{"host key whitespace only", func(a *BoxArgs) { a.HostKey = " " }, ""},
		{"location", func(a *BoxArgs) { a.Location = "fsn1" }, "location"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := base
			n.Labels = map[string]string{"a": "1"}
			tt.edit(&n)
			d, err := boxDiff(base, n)
			if err != nil {
				t.Fatal(err)
			}
			if tt.replace == "" {
				if d.HasChanges {
					t.Fatalf("changes %v, want none", d.DetailedDiff)
				}
				return
			}
			if !d.HasChanges || d.DeleteBeforeReplace || d.DetailedDiff[tt.replace].Kind != p.UpdateReplace || len(d.DetailedDiff) != 1 {
				t.Fatalf("diff %+v, want %s to replace, the new box made before the old one goes", d, tt.replace)
			}
		})
	}
}

func hostArgs() HostArgs {
	return HostArgs{Box: "b1", Backend: "lab", SSHAddress: "10.0.0.11:22", HostKey: testKey, Cores: 2, RAM: 2 << 30,
		BasePort: 4443, Release: strings.Repeat("ab", 32), RelayBinary: "/bin/relay", AuthKeys: testAuthKeys}
}

// testAuthKeys is a relay key file (provision.BoxKeyFile) of fixed keys.
const testAuthKeys = "format:ed25519\ned25519-public:oJql9HpnWYAv+VX43C0qFKXJnSO+l/hkEn/5ODRVpPA=\ned25519-link-public:dPhc2jTRwnxGIUhHMekVecPZxs/A2UsoGqEekWIFiqk=\ned25519-link-private:IyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyM=\n"

func TestDesiredHash(t *testing.T) {
	a := hostArgs()
	h1, err := DesiredHash(a)
	if err != nil {
		t.Fatal(err)
	}
	if h2, _ := DesiredHash(a); h2 != h1 {
		t.Fatal("hash is not stable")
	}
	same := a
	same.RelayBinary = "/elsewhere/relay"
	if h, _ := DesiredHash(same); h != h1 {
		t.Error("the binary's path changed the hash; only its content (release) should")
	}
	for name, edit := range map[string]func(*HostArgs){
		"release":   func(a *HostArgs) { a.Release = strings.Repeat("cd", 32) },
		"cores":     func(a *HostArgs) { a.Cores = 4 },
		"ram":       func(a *HostArgs) { a.RAM = 4 << 30 },
		"processes": func(a *HostArgs) { a.Processes = 1 },
		"base port": func(a *HostArgs) { a.BasePort = 5000 },
		"address":   func(a *HostArgs) { a.SSHAddress = "10.0.0.12:22" },
		"auth keys": func(a *HostArgs) { a.AuthKeys = "bmV3LWtleS1uZXcta2V5LW5ldy1rZXk\n" + a.AuthKeys },
		"public":    func(a *HostArgs) { a.PublicListen = []string{"live/"} },
		// An origin's relays get the link key's public half.
		"link tokens": func(a *HostArgs) { a.AcceptLinkTokens = true },
		"tls key":     func(a *HostArgs) { a.TLSKey = testTLSKey(t, "b2") },
	} {
		b := a
		edit(&b)
		if h, _ := DesiredHash(b); h == h1 {
			t.Errorf("%s: hash unchanged", name)
		}
	}
}

func TestHostDiff(t *testing.T) {
	a := hostArgs()
	hash, _ := DesiredHash(a)
	old := HostState{HostArgs: a, DesiredHash: hash}

	if d, err := hostDiff(old, a); err != nil || d.HasChanges {
		t.Fatalf("unchanged inputs: %+v %v, want no changes", d, err)
	}
	// The same build at another path (another machine's cache of the
	// fleet's release) is no change: fleet up plans no Host update.
	moved := a
	moved.RelayBinary = "/var/lib/elsewhere/releases/" + a.Release + "/relay"
	if d, err := hostDiff(old, moved); err != nil || d.HasChanges {
		t.Fatalf("the same build at another path: %+v %v, want no changes", d, err)
	}
	b := a
	b.Release = strings.Repeat("cd", 32)
	d, err := hostDiff(old, b)
	if err != nil || !d.HasChanges || d.DetailedDiff["release"].Kind != p.Update {
		t.Fatalf("new release: %+v %v, want an update", d, err)
	}
	for k, v := range d.DetailedDiff {
		if v.Kind != p.Update {
			t.Errorf("%s: %s, a host is updated (converged), never replaced", k, v.Kind)
		}
	}
	if len(d.DetailedDiff) != 2 { // release and the hash
		t.Errorf("new release: diff names %v, want release and desiredHash", d.DetailedDiff)
	}
	// Every input the hash covers is named when it changes, read from
	// HostArgs' tags; the build's path alone is not a change of the box.
	c := a
	c.Upstream, c.HostKey = []string{"https://origin.example:4443"}, "\n"+a.HostKey+"\n"
	if d, _ := hostDiff(old, c); d.DetailedDiff["upstream"].Kind != p.Update || len(d.DetailedDiff) != 2 {
		t.Errorf("new upstream (host key re-spaced): diff names %v, want upstream and desiredHash", d.DetailedDiff)
	}
	drifted := old
	drifted.Drift = []string{"update /etc/sysctl.d/60-relayfleet.conf"}
	if d, _ := hostDiff(drifted, a); !d.HasChanges || d.DetailedDiff["drift"].Kind != p.Update {
		t.Fatalf("drift: %+v, want an update that repairs it", d)
	}
}

func TestPortsOf(t *testing.T) {
	got := portsOf([]string{"relay@4444.service", "relay@4443.service", "other.service"})
	if len(got) != 2 || got[0] != 4443 || got[1] != 4444 {
		t.Fatalf("ports %v", got)
	}
}

func TestHostValidate(t *testing.T) {
	a := hostArgs()
	if err := a.validate(); err != nil {
		t.Fatal(err)
	}
	a.Release = "v1"
	if err := a.validate(); err == nil || !strings.Contains(err.Error(), "release") {
		t.Fatalf("bad release: %v", err)
	}
	// Relays without the fleet's key would take any publisher.
	a = hostArgs()
	a.AuthKeys = ""
	if err := a.validate(); err == nil || !strings.Contains(err.Error(), "authKeys: missing") {
		t.Fatalf("no auth keys: %v", err)
	}
	a.AuthKeys = "too-short-key\n"
	if err := a.validate(); err == nil || !strings.Contains(err.Error(), "authKeys: relay key file line 1") || strings.Contains(err.Error(), "too-short") {
		t.Fatalf("short auth key: %v (it must not show the key)", err)
	}
	// A private signing key never goes to a box.
	a.AuthKeys = testAuthKeys + "ed25519-private:ERERERERERERERERERERERERERERERERERERERERERE=\n"
	if err := a.validate(); err == nil || !strings.Contains(err.Error(), "never goes to a relay") || strings.Contains(err.Error(), "EREREREREREREREREREREREREREREREREREREREREREE") {
		t.Fatalf("private key in authKeys: %v (it must not show the key)", err)
	}
}

// TestHostAuthKeysStaySecret: the schema marks authKeys secret, and the
// provider's outputs keep it secret while ports and the hash stay plain.
func TestHostAuthKeysStaySecret(t *testing.T) {
	s := newServer(t)
	if !schemaResources(t, s)[HostType].InputProperties["authKeys"].Secret {
		t.Errorf("the Host input authKeys is not marked secret")
	}
	a := hostArgs()
	// The engine hands the program's secret input in as a secret.
	in := argsProps(a).Set("authKeys", property.New(a.AuthKeys).WithSecret(true))
	cr, err := s.Create(p.CreateRequest{Urn: urn(HostType, "b1"), Properties: in, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	v, ok := cr.Properties.GetOk("authKeys")
	if !ok || !v.Secret() {
		t.Fatalf("authKeys output %v, want it secret", v)
	}
	if b := cr.Properties.Get("box"); b.Secret() {
		t.Errorf("box output is secret: only the key should be")
	}
}

func TestIsPlugin(t *testing.T) {
	if !IsPlugin("/some/dir/pulumi-resource-relayfleet") || IsPlugin("/usr/bin/fleet") {
		t.Fatal("IsPlugin")
	}
}

func TestHostDiffWhileTheBoxIsUnknown(t *testing.T) {
	a := hostArgs()
	hash, _ := DesiredHash(a)
	old := HostState{HostArgs: a, DesiredHash: hash}
	in := a
	in.SSHAddress, in.HostKey, in.Cores, in.RAM = "", "", 0, 0 // a replaced box's outputs in a preview
	d, err := hostDiff(old, in)
	if err != nil || !d.HasChanges {
		t.Fatalf("diff %+v %v, want an update and no error", d, err)
	}
}

// testTLSKey is box's relay TLS key under a fixed test seed.
func testTLSKey(t *testing.T, box string) string {
	t.Helper()
	key, _, err := provision.BoxTLSKey(strings.Repeat("s", 43), box)
	if err != nil {
		t.Fatal(err)
	}
	return string(key)
}

// TestHostTLSKey: the Host's TLS key is a secret input and output, its
// SPKI a plain output (the pin the relays file carries), and a key that
// is not one is refused without showing it.
func TestHostTLSKey(t *testing.T) {
	s := newServer(t)
	if !schemaResources(t, s)[HostType].InputProperties["tlsKey"].Secret {
		t.Errorf("the Host input tlsKey is not marked secret")
	}
	a := hostArgs()
	a.TLSKey = testTLSKey(t, "b1")
	_, want, _ := provision.BoxTLSKey(strings.Repeat("s", 43), "b1")
	in := argsProps(a).Set("authKeys", property.New(a.AuthKeys).WithSecret(true)).Set("tlsKey", property.New(a.TLSKey).WithSecret(true))
	cr, err := s.Create(p.CreateRequest{Urn: urn(HostType, "b1"), Properties: in, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := cr.Properties.GetOk("tlsKey"); !ok || !v.Secret() {
		t.Fatalf("tlsKey output %v, want it secret", v)
	}
	if v := cr.Properties.Get("spki"); v.Secret() {
		t.Fatalf("spki output %v is secret; it is the public pin", v)
	}
	// converge reports the key's SPKI as the spki output.
	if got, err := a.spki(); err != nil || got != want {
		t.Fatalf("spki = %s, %v; want %s", got, err, want)
	}
	a.TLSKey = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n"
	if err := a.validate(); err == nil || !strings.Contains(err.Error(), "tlsKey") || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Fatalf("a bad TLS key: %v (it must not show the key)", err)
	}
}
