package backend

import (
	"bytes"
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"
)

// cloudConfig is the #cloud-config CloudInit writes, in this field order.
type cloudConfig struct {
	// SSHDeleteKeys removes the host keys baked into the image before the
	// given ones are written, and SSHGenKeyTypes (empty) stops cloud-init
	// generating others: the box then has exactly the one pinned host key.
	// cloud-init writes ssh_keys after the deletion, so the key is kept.
	SSHDeleteKeys  bool              `yaml:"ssh_deletekeys"`
	SSHGenKeyTypes []string          `yaml:"ssh_genkeytypes"`
	SSHKeys        map[string]string `yaml:"ssh_keys"`
	// DisableRoot false lets root log in with the authorized keys (true
	// would prefix them with a "login as the default user" command).
	DisableRoot       bool        `yaml:"disable_root"`
	SSHAuthorizedKeys []string    `yaml:"ssh_authorized_keys"`
	SSHPasswordAuth   bool        `yaml:"ssh_pwauth"`
	WriteFiles        []writeFile `yaml:"write_files"`
}

type writeFile struct {
	Path        string `yaml:"path"`
	Permissions string `yaml:"permissions"`
	Owner       string `yaml:"owner"`
	Content     string `yaml:"content"`
}

// sshdConfig keeps sshd on keys only, whatever the image's defaults.
const sshdConfig = `# Written by relayfleet through cloud-init.
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
HostKey /etc/ssh/ssh_host_ed25519_key
`

// CloudInit renders the #cloud-config user data of a cloud box: it
// installs spec.HostKey as the box's only SSH host key (ed25519, its
// public half derived from the private key), authorizes
// spec.AuthorizedKeys for root, and turns password logins off.
func CloudInit(spec Spec) ([]byte, error) {
	priv, pub, err := hostKey(spec.HostKey)
	if err != nil {
		return nil, fmt.Errorf("cloud-init: host key: %w", err)
	}
	if len(spec.AuthorizedKeys) == 0 {
		return nil, errors.New("cloud-init: no authorized keys: no admin could log in")
	}
	keys := make([]string, 0, len(spec.AuthorizedKeys))
	for i, k := range spec.AuthorizedKeys {
		k = strings.TrimSpace(k)
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k)); err != nil || strings.ContainsAny(k, "\r\n") {
			return nil, fmt.Errorf("cloud-init: authorized key %d: not one authorized_keys line", i+1)
		}
		keys = append(keys, k)
	}
	cfg := cloudConfig{
		SSHDeleteKeys:     true,
		SSHGenKeyTypes:    []string{},
		SSHKeys:           map[string]string{"ed25519_private": priv, "ed25519_public": pub},
		DisableRoot:       false,
		SSHAuthorizedKeys: keys,
		SSHPasswordAuth:   false,
		WriteFiles: []writeFile{{
			Path: "/etc/ssh/sshd_config.d/10-relayfleet.conf", Permissions: "0644", Owner: "root:root", Content: sshdConfig,
		}},
	}
	var b bytes.Buffer
	b.WriteString("#cloud-config\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(cfg); err != nil {
		return nil, fmt.Errorf("cloud-init: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("cloud-init: %w", err)
	}
	if b.Len() > MaxUserData {
		return nil, fmt.Errorf("cloud-init: %d bytes, more than the %d the clouds take", b.Len(), MaxUserData)
	}
	return b.Bytes(), nil
}

// MaxUserData is the most user data every cloud takes: hcloud's limit
// (DigitalOcean's is 64 KiB).
const MaxUserData = 32 << 10

// hostKey checks that pemKey is an unencrypted ed25519 private key and
// returns it in OpenSSH PEM form (as sshd reads it) and its public half in
// authorized_keys form. A key already in OpenSSH form is kept byte for byte.
func hostKey(pemKey []byte) (private, public string, err error) {
	if len(bytes.TrimSpace(pemKey)) == 0 {
		return "", "", errors.New("missing")
	}
	raw, err := ssh.ParseRawPrivateKey(pemKey)
	if err != nil {
		// The parser's message never quotes the key.
		return "", "", fmt.Errorf("not an unencrypted PEM private key: %w", err)
	}
	var key ed25519.PrivateKey
	switch k := raw.(type) {
	case ed25519.PrivateKey:
		key = k
	case *ed25519.PrivateKey:
		key = *k
	default:
		return "", "", fmt.Errorf("%T: want ed25519", raw)
	}
	sshPub, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		return "", "", err
	}
	public = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub)))
	block, _ := pem.Decode(pemKey)
	if block != nil && block.Type == "OPENSSH PRIVATE KEY" {
		return string(pem.EncodeToMemory(block)), public, nil
	}
	block, err = ssh.MarshalPrivateKey(key, "")
	if err != nil {
		return "", "", err
	}
	return string(pem.EncodeToMemory(block)), public, nil
}
