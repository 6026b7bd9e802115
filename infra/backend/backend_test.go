package backend

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"

	"github.com/relayfleet/relayfleet/internal/testutil"
)

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testSpec(t *testing.T) Spec {
	return Spec{
		Name: "relay-steady-1", Shape: "cx22", Location: "fsn1",
		Labels:         map[string]string{"fleet": "demo", "tier": "steady"},
		HostKey:        readFile(t, "hostkey_ed25519"),
		AuthorizedKeys: []string{strings.TrimSpace(string(readFile(t, "admin_ed25519.pub")))},
	}
}

func TestCloudInitGolden(t *testing.T) {
	got, err := CloudInit(testSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, filepath.Join("testdata", "cloud-init.golden.yaml"), got)
}

// TestCloudInitContent checks what the golden file should hold, so that a
// careless UPDATE_GOLDEN cannot bless a wrong document.
func TestCloudInitContent(t *testing.T) {
	spec := testSpec(t)
	out, err := CloudInit(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(out, []byte("#cloud-config\n")) {
		t.Fatalf("no #cloud-config header:\n%s", out)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	keys := doc["ssh_keys"].(map[string]any)
	signer, err := ssh.ParsePrivateKey([]byte(keys["ed25519_private"].(string)))
	if err != nil {
		t.Fatalf("ed25519_private does not parse back: %v", err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(keys["ed25519_public"].(string)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pub.Marshal(), signer.PublicKey().Marshal()) {
		t.Error("ed25519_public is not the private key's public half")
	}
	for k, want := range map[string]any{"ssh_deletekeys": true, "ssh_pwauth": false, "disable_root": false} {
		if doc[k] != want {
			t.Errorf("%s = %v, want %v", k, doc[k], want)
		}
	}
	if g := doc["ssh_genkeytypes"].([]any); len(g) != 0 {
		t.Errorf("ssh_genkeytypes = %v, want none", g)
	}
	ak := doc["ssh_authorized_keys"].([]any)
	if len(ak) != 1 || ak[0] != spec.AuthorizedKeys[0] {
		t.Errorf("ssh_authorized_keys = %v", ak)
	}
	if !strings.Contains(string(out), "PasswordAuthentication no") {
		t.Error("no sshd drop-in turning passwords off")
	}
}

func TestCloudInitConvertsPKCS8(t *testing.T) {
	// The same key in PKCS#8 form: CloudInit hands sshd the OpenSSH form.
	signer, err := ssh.ParsePrivateKey(readFile(t, "hostkey_ed25519"))
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec(t)
	spec.HostKey = readFile(t, "hostkey_ed25519.pkcs8")
	out, err := CloudInit(spec)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Keys map[string]string `yaml:"ssh_keys"`
	}
	if err := yaml.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.Keys["ed25519_private"], "-----BEGIN OPENSSH PRIVATE KEY-----") {
		t.Errorf("private key not in OpenSSH form:\n%s", doc.Keys["ed25519_private"])
	}
	want := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	if doc.Keys["ed25519_public"] != want {
		t.Errorf("public = %q, want %q", doc.Keys["ed25519_public"], want)
	}
}

func TestCloudInitErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"no host key", func(s *Spec) { s.HostKey = nil }, "host key: missing"},
		{"rsa host key", func(s *Spec) { s.HostKey = readFile(t, "rsa_key") }, "want ed25519"},
		{"garbage host key", func(s *Spec) { s.HostKey = []byte("not a key") }, "not an unencrypted PEM private key"},
		{"no authorized keys", func(s *Spec) { s.AuthorizedKeys = nil }, "no authorized keys"},
		{"bad authorized key", func(s *Spec) { s.AuthorizedKeys = []string{"ssh-ed25519 nope"} }, "authorized key 1"},
		{"two lines in one key", func(s *Spec) { s.AuthorizedKeys[0] += "\n" + s.AuthorizedKeys[0] }, "authorized key 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec(t)
			tc.edit(&s)
			_, err := CloudInit(s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Errorf("error quotes the key: %v", err)
			}
		})
	}
}

func TestSpecNeverPrintsHostKey(t *testing.T) {
	s := testSpec(t)
	var log bytes.Buffer
	slog.New(slog.NewTextHandler(&log, nil)).Info("create", "spec", s)
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s", s, s, s, s), log.String()} {
		if strings.Contains(out, "PRIVATE") || strings.Contains(out, string(s.HostKey[40:80])) {
			t.Errorf("host key printed: %s", out)
		}
		if !strings.Contains(out, "relay-steady-1") {
			t.Errorf("name not printed: %s", out)
		}
	}
}

func TestValidLabels(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		ok     bool
	}{
		{map[string]string{"fleet": "demo", "tier": "burst", "event": "2026-12-31_nye"}, true},
		{map[string]string{"fleet": ""}, false},
		{map[string]string{"fleet": "a.b"}, false}, // DigitalOcean tags have no '.'
		{map[string]string{"fle:et": "a"}, false},
		{map[string]string{"fleet": "-a"}, false},
		{map[string]string{"fleet": "a_"}, false},
		{map[string]string{"fleet": strings.Repeat("a", 64)}, false},
		{map[string]string{"fleet": strings.Repeat("a", 63)}, true},
	} {
		t.Run(fmt.Sprint(tc.labels), func(t *testing.T) {
			if err := ValidLabels(tc.labels); (err == nil) != tc.ok {
				t.Errorf("ValidLabels = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

func TestCheckSpec(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"ok", func(*Spec) {}, ""},
		{"upper-case name", func(s *Spec) { s.Name = "Relay1" }, "want a hostname"},
		{"no shape", func(s *Spec) { s.Shape = "" }, "no shape"},
		{"no location", func(s *Spec) { s.Location = "" }, "no location"},
		{"no fleet", func(s *Spec) { delete(s.Labels, "fleet") }, `no "fleet" label`},
		{"bad label", func(s *Spec) { s.Labels["tier"] = "a b" }, "label tier value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec(t)
			tc.edit(&s)
			err := CheckSpec(s)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("CheckSpec = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestMatchLabelsAndSelector(t *testing.T) {
	have := map[string]string{"fleet": "demo", "tier": "burst", "event": "e1"}
	for _, tc := range []struct {
		want  map[string]string
		match bool
	}{
		{nil, true},
		{map[string]string{"fleet": "demo"}, true},
		{map[string]string{"fleet": "demo", "tier": "burst"}, true},
		{map[string]string{"fleet": "demo", "tier": "steady"}, false},
		{map[string]string{"group": ""}, false},
	} {
		if got := MatchLabels(have, tc.want); got != tc.match {
			t.Errorf("MatchLabels(%v) = %v, want %v", tc.want, got, tc.match)
		}
	}
	if got := Selector(have); got != "event=e1,fleet=demo,tier=burst" {
		t.Errorf("Selector = %q", got)
	}
}

func TestFirewallRules(t *testing.T) {
	admin := []netip.Prefix{netip.MustParsePrefix("2001:db8::1/48"), netip.MustParsePrefix("203.0.113.7/24"), netip.MustParsePrefix("203.0.113.0/24")}
	rules, err := FirewallRules([2]uint16{4443, 4450}, admin)
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(rules)
	want := "[{udp 4443 4450 [0.0.0.0/0 ::/0]} {tcp 4443 4450 [0.0.0.0/0 ::/0]} {tcp 22 22 [203.0.113.0/24 2001:db8::/48]}]"
	if got != want {
		t.Errorf("rules\n got %s\nwant %s", got, want)
	}
	if p := rules[2].Ports(); p != "22" {
		t.Errorf("ssh ports %q", p)
	}
	if p := rules[0].Ports(); p != "4443-4450" {
		t.Errorf("relay ports %q", p)
	}
	for _, tc := range []struct {
		name  string
		ports [2]uint16
		admin []netip.Prefix
		want  string
	}{
		{"reversed ports", [2]uint16{10, 5}, admin, "want 1 <= lo <= hi"},
		{"port zero", [2]uint16{0, 5}, admin, "want 1 <= lo <= hi"},
		{"ssh inside relay range", [2]uint16{1, 1000}, admin, "include SSH port"},
		{"no admin", [2]uint16{4443, 4443}, nil, "no admin ranges"},
		{"ssh from everywhere v4", [2]uint16{4443, 4443}, []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, "opens SSH to everyone"},
		{"ssh from everywhere v6", [2]uint16{4443, 4443}, []netip.Prefix{netip.MustParsePrefix("::/0")}, "opens SSH to everyone"},
		{"invalid prefix", [2]uint16{4443, 4443}, []netip.Prefix{{}}, "not a valid prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FirewallRules(tc.ports, tc.admin)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
