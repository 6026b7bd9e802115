package localcloud

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"errors"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
	"gopkg.in/yaml.v3"
)

// CloudInit is the part of a #cloud-config document the local cloud
// applies inside a box: what infra/backend.CloudInit sends (host keys,
// root's authorized keys, sshd settings through write_files) and the
// hostname. Defaults are cloud-init's own.
type CloudInit struct {
	// Hostname and FQDN set the box's hostname; empty leaves it to the
	// server's name (cloud-init's metadata local-hostname).
	Hostname, FQDN string
	// SSHDeleteKeys removes the host keys the image has before SSHKeys
	// are written (cloud-init's default: true).
	SSHDeleteKeys bool
	// SSHGenKeyTypes are the host key types generated when SSHKeys has no
	// private key of the type (cloud-init's default: rsa, ecdsa, ed25519;
	// an empty list generates none).
	SSHGenKeyTypes []string
	// SSHKeys are the host keys given: TYPE_private, TYPE_public and
	// TYPE_certificate entries, TYPE one of rsa, ecdsa, ed25519. Other
	// entries are skipped, as cloud-init skips them.
	SSHKeys map[string]string
	// DisableRoot (cloud-init's default: true) keeps root's keys but makes
	// each refuse logins with a message, as cloud-init does.
	DisableRoot bool
	// AuthorizedKeys are root's keys: ssh_authorized_keys and the keys of
	// the users entry named root, in that order, without duplicates.
	AuthorizedKeys []string
	// SSHPasswordAuth is ssh_pwauth when given (nil: the image's default).
	SSHPasswordAuth *bool
	// WriteFiles are the write_files entries, contents decoded.
	WriteFiles []WriteFile
	// Ignored are the top-level keys present that this subset does not
	// apply (runcmd, packages, ...): cloud-init would run them; the local
	// cloud only reports them.
	Ignored []string
}

// WriteFile is one write_files entry.
type WriteFile struct {
	Path        string
	Content     []byte
	Permissions fs.FileMode // default 0644
	Owner       string      // default root:root
	Append      bool
	Defer       bool // written after users and packages: applied last here
}

// HostKeyTypes are the host key types cloud-init's ssh module knows, in the
// order it writes them.
var HostKeyTypes = []string{"rsa", "ecdsa", "ed25519"}

// HostPublicKey is the ed25519 public host key the document installs (from
// ed25519_public, else derived from ed25519_private), or "" without one.
func (c CloudInit) HostPublicKey() (ssh.PublicKey, error) {
	if pub := strings.TrimSpace(c.SSHKeys["ed25519_public"]); pub != "" {
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(pub))
		if err != nil {
			return nil, fmt.Errorf("cloud-config ssh_keys.ed25519_public: %v", err)
		}
		return k, nil
	}
	if priv := c.SSHKeys["ed25519_private"]; priv != "" {
		s, err := ssh.ParsePrivateKey([]byte(priv))
		if err != nil {
			return nil, fmt.Errorf("cloud-config ssh_keys.ed25519_private: %v", err)
		}
		return s.PublicKey(), nil
	}
	return nil, nil
}

// known are the cloud-config keys ParseCloudInit applies.
var known = []string{
	"hostname", "fqdn", "preserve_hostname", "ssh_deletekeys", "ssh_genkeytypes", "ssh_keys",
	"disable_root", "ssh_authorized_keys", "users", "ssh_pwauth", "write_files",
}

// ParseCloudInit parses user data as cloud-init would: a YAML document
// after a "#cloud-config" first line. Empty user data is no configuration.
// Keys outside the subset are listed in Ignored; a document that is not
// YAML, not a mapping, or has a known key of the wrong type is an error
// that names the key.
func ParseCloudInit(userData []byte) (CloudInit, error) {
	c := CloudInit{SSHDeleteKeys: true, SSHGenKeyTypes: slices.Clone(HostKeyTypes), DisableRoot: true}
	if len(bytes.TrimSpace(userData)) == 0 {
		return c, nil
	}
	first, _, _ := bytes.Cut(userData, []byte("\n"))
	if strings.TrimRight(string(first), " \t\r") != "#cloud-config" {
		return c, fmt.Errorf("user data: want a #cloud-config document, the first line is %.40q (scripts, MIME and include files are not supported)", first)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(userData, &doc); err != nil {
		return c, fmt.Errorf("user data: #cloud-config is not YAML: %v", err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null" {
		return c, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return c, errors.New("user data: #cloud-config is not a mapping of keys")
	}
	var users []*yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i].Value, root.Content[i+1]
		if !slices.Contains(known, key) {
			c.Ignored = append(c.Ignored, key)
			continue
		}
		var err error
		switch key {
		case "hostname":
			err = val.Decode(&c.Hostname)
		case "fqdn":
			err = val.Decode(&c.FQDN)
		case "preserve_hostname":
			var keep bool
			if err = val.Decode(&keep); err == nil && keep {
				c.Ignored = append(c.Ignored, key)
			}
		case "ssh_deletekeys":
			err = val.Decode(&c.SSHDeleteKeys)
		case "ssh_genkeytypes":
			c.SSHGenKeyTypes = []string{}
			if !isNull(val) {
				err = val.Decode(&c.SSHGenKeyTypes)
			}
		case "ssh_keys":
			err = val.Decode(&c.SSHKeys)
		case "disable_root":
			err = val.Decode(&c.DisableRoot)
		case "ssh_authorized_keys":
			var keys []string
			if err = decodeList(val, &keys); err == nil {
				c.AuthorizedKeys = addKeys(c.AuthorizedKeys, keys)
			}
		case "users":
			if val.Kind != yaml.SequenceNode {
				err = errors.New("want a list")
			} else {
				users = val.Content
			}
		case "ssh_pwauth":
			var b bool
			if err = val.Decode(&b); err == nil {
				c.SSHPasswordAuth = &b
			}
		case "write_files":
			c.WriteFiles, err = writeFiles(val)
		}
		if err != nil {
			return c, fmt.Errorf("user data: cloud-config %s: %v", key, text.Squash(err.Error()))
		}
	}
	for i, u := range users {
		if u.Kind == yaml.ScalarNode { // "default": the image's default user
			continue
		}
		var user struct {
			Name string    `yaml:"name"`
			Keys yaml.Node `yaml:"ssh_authorized_keys"`
		}
		if err := u.Decode(&user); err != nil {
			return c, fmt.Errorf("user data: cloud-config users[%d]: %v", i, text.Squash(err.Error()))
		}
		if user.Name != "root" {
			c.Ignored = append(c.Ignored, "users["+user.Name+"]")
			continue
		}
		var keys []string
		if err := decodeList(&user.Keys, &keys); err != nil {
			return c, fmt.Errorf("user data: cloud-config users[%d].ssh_authorized_keys: %v", i, text.Squash(err.Error()))
		}
		c.AuthorizedKeys = addKeys(c.AuthorizedKeys, keys)
	}
	for k, v := range c.SSHKeys {
		typ, kind, _ := strings.Cut(k, "_")
		if !slices.Contains(HostKeyTypes, typ) || !slices.Contains([]string{"private", "public", "certificate"}, kind) {
			delete(c.SSHKeys, k) // "Skipping unknown ssh key type"
			continue
		}
		if kind == "private" {
			if _, err := ssh.ParseRawPrivateKey([]byte(v)); err != nil {
				return c, fmt.Errorf("user data: cloud-config ssh_keys.%s: not an unencrypted private key: %v", k, err)
			}
		}
	}
	if _, err := c.HostPublicKey(); err != nil {
		return c, fmt.Errorf("user data: %w", err)
	}
	for _, t := range c.SSHGenKeyTypes {
		if !slices.Contains(HostKeyTypes, t) {
			return c, fmt.Errorf("user data: cloud-config ssh_genkeytypes: unknown key type %q (want rsa, ecdsa or ed25519)", t)
		}
	}
	for i, k := range c.AuthorizedKeys {
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k)); err != nil || strings.ContainsAny(k, "\r\n") {
			return c, fmt.Errorf("user data: cloud-config authorized key %d: not one authorized_keys line", i+1)
		}
	}
	return c, nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// decodeList decodes a list of strings, or one string (cloud-init takes
// both for key lists).
func decodeList(n *yaml.Node, out *[]string) error {
	if n.Kind == 0 || isNull(n) {
		return nil
	}
	if n.Kind == yaml.ScalarNode {
		var s string
		if err := n.Decode(&s); err != nil {
			return err
		}
		*out = []string{s}
		return nil
	}
	return n.Decode(out)
}

func addKeys(have, add []string) []string {
	for _, k := range add {
		k = strings.TrimSpace(k)
		if k != "" && !slices.Contains(have, k) {
			have = append(have, k)
		}
	}
	return have
}

func writeFiles(n *yaml.Node) ([]WriteFile, error) {
	var raw []struct {
		Path        string    `yaml:"path"`
		Content     string    `yaml:"content"`
		Encoding    string    `yaml:"encoding"`
		Permissions yaml.Node `yaml:"permissions"`
		Owner       string    `yaml:"owner"`
		Append      bool      `yaml:"append"`
		Defer       bool      `yaml:"defer"`
	}
	if err := n.Decode(&raw); err != nil {
		return nil, err
	}
	out := make([]WriteFile, 0, len(raw))
	for i, r := range raw {
		if r.Path == "" || !path.IsAbs(r.Path) {
			return nil, fmt.Errorf("[%d].path: want an absolute path, got %q", i, r.Path)
		}
		content, err := decodeContent(r.Content, r.Encoding)
		if err != nil {
			return nil, fmt.Errorf("[%d] %s: %v", i, r.Path, err)
		}
		mode, err := perms(&r.Permissions)
		if err != nil {
			return nil, fmt.Errorf("[%d] %s: permissions: %v", i, r.Path, err)
		}
		owner := r.Owner
		if owner == "" {
			owner = "root:root"
		}
		if strings.ContainsAny(owner, " '\"\\$`;\n") {
			return nil, fmt.Errorf("[%d] %s: owner %q: want USER[:GROUP]", i, r.Path, owner)
		}
		out = append(out, WriteFile{Path: path.Clean(r.Path), Content: content, Permissions: mode, Owner: owner, Append: r.Append, Defer: r.Defer})
	}
	return out, nil
}

// decodeContent decodes write_files content as cloud-init does for its
// encodings (text, base64, gzip and both).
func decodeContent(s, enc string) ([]byte, error) {
	switch strings.ToLower(enc) {
	case "", "text/plain":
		return []byte(s), nil
	case "b64", "base64":
		return base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), ""))
	case "gz", "gzip", "gz+b64", "gz+base64", "gzip+b64", "gzip+base64":
		data := []byte(s)
		if strings.Contains(enc, "b") {
			var err error
			if data, err = base64.StdEncoding.DecodeString(strings.Join(strings.Fields(s), "")); err != nil {
				return nil, err
			}
		}
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(io.LimitReader(zr, 1<<20))
	}
	return nil, fmt.Errorf("encoding %q: want b64, gzip, gz+b64 or none", enc)
}

// perms reads write_files permissions: an octal string ("0644") or a YAML
// integer (0644 unquoted is octal in YAML 1.1, as cloud-init reads it).
func perms(n *yaml.Node) (fs.FileMode, error) {
	if n.Kind == 0 || isNull(n) {
		return 0o644, nil
	}
	if n.Tag == "!!int" {
		v, err := strconv.ParseInt(n.Value, 0, 32)
		if err != nil || v < 0 || v > 0o7777 {
			return 0, fmt.Errorf("%q: want an octal mode", n.Value)
		}
		return fs.FileMode(v), nil
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(n.Value, "0o"), 8, 32)
	if err != nil || v > 0o7777 {
		return 0, fmt.Errorf("%q: want an octal mode such as \"0644\"", n.Value)
	}
	return fs.FileMode(v), nil
}
