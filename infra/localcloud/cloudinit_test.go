package localcloud

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/relayfleet/relayfleet/infra/backend"
)

func backendFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "backend", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseCloudInitBackend parses what our backends send (the golden
// document and a fresh backend.CloudInit rendering) and finds every part
// the box needs.
func TestParseCloudInitBackend(t *testing.T) {
	golden := backendFile(t, "cloud-init.golden.yaml")
	hostKey := backendFile(t, "hostkey_ed25519")
	admin := strings.TrimSpace(string(backendFile(t, "admin_ed25519.pub")))
	rendered, err := backend.CloudInit(backend.Spec{Name: "x", HostKey: hostKey, AuthorizedKeys: []string{admin}})
	if err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string][]byte{"golden": golden, "rendered": rendered} {
		c, err := ParseCloudInit(doc)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !c.SSHDeleteKeys || len(c.SSHGenKeyTypes) != 0 || c.DisableRoot {
			t.Errorf("%s: deletekeys %v genkeytypes %v disable_root %v", name, c.SSHDeleteKeys, c.SSHGenKeyTypes, c.DisableRoot)
		}
		if c.SSHPasswordAuth == nil || *c.SSHPasswordAuth {
			t.Errorf("%s: ssh_pwauth %v, want false", name, c.SSHPasswordAuth)
		}
		if len(c.AuthorizedKeys) != 1 || !strings.HasPrefix(c.AuthorizedKeys[0], "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGnd7BMg") {
			t.Errorf("%s: authorized keys %q", name, c.AuthorizedKeys)
		}
		pub, err := c.HostPublicKey()
		if err != nil || pub == nil {
			t.Fatalf("%s: host key %v %v", name, pub, err)
		}
		signer, err := ssh.ParsePrivateKey([]byte(c.SSHKeys["ed25519_private"]))
		if err != nil {
			t.Fatalf("%s: private host key: %v", name, err)
		}
		if string(signer.PublicKey().Marshal()) != string(pub.Marshal()) {
			t.Errorf("%s: the public host key is not the private key's", name)
		}
		if len(c.WriteFiles) != 1 || c.WriteFiles[0].Path != "/etc/ssh/sshd_config.d/10-relayfleet.conf" ||
			c.WriteFiles[0].Permissions != 0o644 || c.WriteFiles[0].Owner != "root:root" ||
			!strings.Contains(string(c.WriteFiles[0].Content), "PasswordAuthentication no\n") {
			t.Errorf("%s: write_files %+v", name, c.WriteFiles)
		}
		if len(c.Ignored) != 0 {
			t.Errorf("%s: ignored %q", name, c.Ignored)
		}
	}
}

func TestParseCloudInitDefaults(t *testing.T) {
	for _, doc := range []string{"", "#cloud-config\n", "#cloud-config\n# nothing\n"} {
		c, err := ParseCloudInit([]byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		// cloud-init's defaults: delete the image's keys, generate all
		// three types, root refuses logins.
		if !c.SSHDeleteKeys || !slices.Equal(c.SSHGenKeyTypes, HostKeyTypes) || !c.DisableRoot || c.SSHPasswordAuth != nil {
			t.Errorf("%q: %+v", doc, c)
		}
	}
}

func TestParseCloudInitSubset(t *testing.T) {
	admin := strings.TrimSpace(string(backendFile(t, "admin_ed25519.pub")))
	doc := `#cloud-config
hostname: relay-7
fqdn: relay-7.example.net
ssh_deletekeys: no
ssh_genkeytypes: [ed25519]
disable_root: off
ssh_pwauth: yes
ssh_keys:
  ed25519_public: ` + admin + `
  dsa_private: ignored, as cloud-init skips unknown types
ssh_authorized_keys: ` + admin + `
users:
  - default
  - name: root
    ssh_authorized_keys: [` + admin + `]
  - name: alice
runcmd: [reboot]
packages: [curl]
write_files:
  - path: /etc/a
    content: aGVsbG8K
    encoding: b64
    permissions: 0600
  - path: /etc/b
    content: x
    permissions: "0755"
    owner: nobody:nogroup
    append: true
`
	c, err := ParseCloudInit([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if c.Hostname != "relay-7" || c.FQDN != "relay-7.example.net" || c.SSHDeleteKeys || c.DisableRoot {
		t.Errorf("%+v", c)
	}
	if c.SSHPasswordAuth == nil || !*c.SSHPasswordAuth {
		t.Errorf("ssh_pwauth yes (YAML 1.1) read as %v", c.SSHPasswordAuth)
	}
	if !slices.Equal(c.SSHGenKeyTypes, []string{"ed25519"}) {
		t.Errorf("genkeytypes %q", c.SSHGenKeyTypes)
	}
	if _, ok := c.SSHKeys["dsa_private"]; ok || len(c.SSHKeys) != 1 {
		t.Errorf("ssh_keys %q", c.SSHKeys)
	}
	if !slices.Equal(c.AuthorizedKeys, []string{admin}) {
		t.Errorf("authorized keys %q (a key given twice is written once)", c.AuthorizedKeys)
	}
	if got := strings.Join(c.Ignored, " "); got != "runcmd packages users[alice]" {
		t.Errorf("ignored %q", got)
	}
	if len(c.WriteFiles) != 2 {
		t.Fatalf("write_files %+v", c.WriteFiles)
	}
	a, b := c.WriteFiles[0], c.WriteFiles[1]
	if string(a.Content) != "hello\n" || a.Permissions != 0o600 || a.Owner != "root:root" {
		t.Errorf("b64 file %+v", a)
	}
	if string(b.Content) != "x" || b.Permissions != 0o755 || b.Owner != "nobody:nogroup" || !b.Append {
		t.Errorf("text file %+v", b)
	}
}

func TestParseCloudInitErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"#!/bin/sh\necho hi\n", "want a #cloud-config document"},
		{"ssh_pwauth: false\n", "want a #cloud-config document"},
		{"#cloud-config\nssh_keys: [\n", "not YAML"},
		{"#cloud-config\n- a\n- b\n", "not a mapping"},
		{"#cloud-config\nssh_keys: [a, b]\n", "cloud-config ssh_keys"},
		{"#cloud-config\nssh_deletekeys: maybe\n", "cloud-config ssh_deletekeys"},
		{"#cloud-config\nssh_genkeytypes: [dsa]\n", `unknown key type "dsa"`},
		{"#cloud-config\nssh_keys: {ed25519_private: nope}\n", "ssh_keys.ed25519_private"},
		{"#cloud-config\nssh_authorized_keys: [not-a-key]\n", "authorized key 1"},
		{"#cloud-config\nwrite_files: [{path: rel/x, content: a}]\n", "want an absolute path"},
		{"#cloud-config\nwrite_files: [{path: /x, content: a, permissions: '0999'}]\n", "permissions"},
		{"#cloud-config\nwrite_files: [{path: /x, content: '!!', encoding: b64}]\n", "/x"},
		{"#cloud-config\nusers: root\n", "cloud-config users"},
	} {
		_, err := ParseCloudInit([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: error %v, want one line with %q", tc.doc, err, tc.want)
		}
	}
}
