package provision

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"golang.org/x/crypto/ssh"
)

// DefaultHostKeyFile is the SSH host key relayfleet's boxes serve: their
// only one, as the sshd drop-in cloud-init writes names it.
const DefaultHostKeyFile = "/etc/ssh/ssh_host_ed25519_key"

// defaultSSHDReload checks sshd's configuration, then has the running sshd
// load its host keys again (SIGHUP: sessions open now stay), or starts it:
// ssh.service on Debian and Ubuntu, sshd.service elsewhere.
const defaultSSHDReload = `sshd -t && if systemctl cat ssh.service >/dev/null 2>&1; then systemctl reload-or-restart ssh.service; else systemctl reload-or-restart sshd.service; fi`

// HostKeyRotation replaces a box's SSH host key with one made on the box,
// whose private half never leaves it. A cloud box's first key came in its
// user data, which the cloud's metadata service serves to any process on
// the box for the box's life, and sits in the stack: rotated after the
// first pinned login, that copy opens nothing.
type HostKeyRotation struct {
	// File is the host private key sshd serves; "" is DefaultHostKeyFile.
	File string
	// Reload is the shell command that makes sshd serve the new key to
	// new connections; "" checks sshd's configuration and reloads
	// ssh.service (or sshd.service).
	Reload string
}

// hostKeyComment is what the new key's comment may hold.
var hostKeyComment = regexp.MustCompile(`^[A-Za-z0-9@._-]{1,128}$`)

// script is the shell script that rotates the key: a new ed25519 key
// (ssh-keygen, private to root) beside File, the public half renamed into
// place, then the private half, sshd reloaded, and the new public key
// printed.
func (r HostKeyRotation) script(comment string) (string, error) {
	file, reload := r.File, r.Reload
	if file == "" {
		file = DefaultHostKeyFile
	}
	if reload == "" {
		reload = defaultSSHDReload
	}
	if !strings.HasPrefix(file, "/") || strings.ContainsAny(file, "'\n") {
		return "", fmt.Errorf("host key file %q: want an absolute path without quotes or newlines", file)
	}
	if !hostKeyComment.MatchString(comment) {
		return "", fmt.Errorf("host key comment %q: want letters, digits and @ . _ -", comment)
	}
	return fmt.Sprintf(`set -e
umask 077
k='%s'
rm -f "$k.relayfleet-new" "$k.relayfleet-new.pub"
ssh-keygen -q -t ed25519 -N '' -C '%s' -f "$k.relayfleet-new"
chmod 644 "$k.relayfleet-new.pub"
mv -f "$k.relayfleet-new.pub" "$k.pub"
mv -f "$k.relayfleet-new" "$k"
%s
cat "$k.pub"
`, file, comment, reload), nil
}

// Rotate makes the new host key on the box run reaches, has sshd serve
// it, and returns its public half as the box printed it. run must be a
// session whose host key was checked (pinned): what it prints is the key
// every later connection is pinned to. The caller checks that a new
// connection pinned to it alone gets in before it records the key.
func (r HostKeyRotation) Rotate(ctx context.Context, run Runner, comment string) (ssh.PublicKey, error) {
	script, err := r.script(comment)
	if err != nil {
		return nil, err
	}
	out, err := run.Run(ctx, "sh -s", strings.NewReader(script))
	if err != nil {
		return nil, fmt.Errorf("rotate host key: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(lines[len(lines)-1]))
	if err != nil {
		return nil, fmt.Errorf("rotate host key: the new public key: %v", err)
	}
	if key.Type() != ssh.KeyAlgoED25519 {
		return nil, fmt.Errorf("rotate host key: the new key is %s, want %s", key.Type(), ssh.KeyAlgoED25519)
	}
	return key, nil
}
