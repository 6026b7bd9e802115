package provision

import (
	"github.com/relayfleet/relayfleet/internal/text"

	"context"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// ResetSecretBytes is the size of the stateless reset secret converge
// makes on each box.
const ResetSecretBytes = 32

// States of the reset secret on a box (HostState.ResetSecret).
const (
	SecretPrivate = "private"     // present, long enough, root's alone
	SecretOpen    = "not-private" // present and long enough, but others may read it
	SecretAbsent  = "absent"      // missing or too short
)

// ProbeResetSecret says what state the reset secret at p is in on the
// box, from its size and modes alone: the secret itself is never read.
func ProbeResetSecret(ctx context.Context, run Runner, p string) (string, error) {
	out, err := run.Run(ctx, fmt.Sprintf(`p=%s; if [ -f "$p" ] && [ ! -L "$p" ]; then stat -c '%%s %%a %%U %%G' "$p" "$(dirname "$p")"; fi`, text.ShellQuote(p)), nil)
	if err != nil {
		return "", fmt.Errorf("probe %s: %w", p, err)
	}
	f := strings.Fields(string(out))
	if len(f) != 8 {
		return SecretAbsent, nil
	}
	if n, err := strconv.Atoi(f[0]); err != nil || n < ResetSecretBytes {
		return SecretAbsent, nil
	}
	if strings.Join(f[1:4], " ") != "600 root root" || strings.Join(f[5:], " ") != "700 root root" {
		return SecretOpen, nil
	}
	return SecretPrivate, nil
}

// EnsureResetSecret makes the box's stateless reset secret at p if it
// has none: ResetSecretBytes from the box's /dev/urandom, written to a
// temporary file (0600 root) that is then renamed over p, in a 0700 root
// directory. A secret already there (at least ResetSecretBytes long) is
// kept, only its owner and modes tightened: the relays' reset keys stay
// the same across converges and restarts. The secret is made on the box
// and never read back, so it is in no command line, output or log here.
// It reports whether it made a new one.
func EnsureResetSecret(ctx context.Context, run Runner, p string) (bool, error) {
	if !strings.HasPrefix(p, "/") {
		return false, fmt.Errorf("reset secret %s: not an absolute path", p)
	}
	script := fmt.Sprintf(`set -eu
p=%[1]s
d=%[2]s
install -d -m 0700 -o root -g root "$d"
chown root:root "$d"
chmod 0700 "$d"
if [ -f "$p" ] && [ ! -L "$p" ] && [ "$(stat -c %%s "$p")" -ge %[3]d ]; then
	chown root:root "$p"
	chmod 0600 "$p"
	echo kept
	exit 0
fi
tmp=$(mktemp "$p.relayfleet.XXXXXX")
trap 'rm -f "$tmp"' EXIT HUP INT TERM
chown root:root "$tmp"
chmod 0600 "$tmp"
head -c %[3]d /dev/urandom >"$tmp"
if [ "$(stat -c %%s "$tmp")" -ne %[3]d ]; then echo "short read from /dev/urandom" >&2; exit 1; fi
sync "$tmp"
mv -f "$tmp" "$p"
trap - EXIT HUP INT TERM
sync "$d"
echo created
`, text.ShellQuote(p), text.ShellQuote(path.Dir(p)), ResetSecretBytes)
	out, err := run.Run(ctx, script, nil)
	if err != nil {
		return false, fmt.Errorf("reset secret %s: %w", p, err)
	}
	return strings.TrimSpace(string(out)) == "created", nil
}
