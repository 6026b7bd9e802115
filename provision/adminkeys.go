package provision

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
)

// AuthorizedKeysFile is the login user's authorized_keys on a box.
const AuthorizedKeysFile = "~/.ssh/authorized_keys"

// RenderAuthorizedKeys checks keys (each one authorized_keys line) and
// joins them one a line, dropping blanks and duplicates.
func RenderAuthorizedKeys(keys []string) (string, error) {
	var b strings.Builder
	seen := map[string]bool{}
	for i, k := range keys {
		k = strings.TrimSpace(k)
		if k == "" || seen[k] {
			continue
		}
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k)); err != nil || strings.ContainsAny(k, "\r\n") {
			return "", fmt.Errorf("authorized key %d: not one authorized_keys line", i+1)
		}
		seen[k] = true
		b.WriteString(k)
		b.WriteByte('\n')
	}
	if b.Len() == 0 {
		return "", errors.New("no authorized keys: nobody could log in")
	}
	return b.String(), nil
}

// writeAuthorizedKeys replaces the login user's authorized_keys with
// content atomically: a new file beside it, mode 0600, renamed over it,
// so that sshd reads either the old list or the new one, never a part.
func writeAuthorizedKeys(ctx context.Context, run Runner, content string) error {
	cmd := `set -e; umask 077; mkdir -p ~/.ssh; chmod 700 ~/.ssh; ` +
		`t=$(mktemp ~/.ssh/.authorized_keys.XXXXXX); cat > "$t"; chmod 600 "$t"; mv -f "$t" ` + AuthorizedKeysFile
	if _, err := run.Run(ctx, cmd, strings.NewReader(content)); err != nil {
		return fmt.Errorf("write %s: %w", AuthorizedKeysFile, err)
	}
	return nil
}

// ReplaceAuthorizedKeys puts keys in the login user's authorized_keys on
// the box, in place of what was there: the admin keys of a rotation, the
// box is not replaced. verify, when set, is called once the new file is in
// place, to log in afresh; if it fails, the old file is put back and the
// error returned, so a rotation never locks relayfleet out of a box.
func ReplaceAuthorizedKeys(ctx context.Context, run Runner, keys []string, verify func(context.Context) error) error {
	content, err := RenderAuthorizedKeys(keys)
	if err != nil {
		return err
	}
	old, err := run.Run(ctx, `cat `+AuthorizedKeysFile+` 2>/dev/null || true`, nil)
	if err != nil {
		return fmt.Errorf("read %s: %w", AuthorizedKeysFile, err)
	}
	if string(old) == content {
		return nil
	}
	if err := writeAuthorizedKeys(ctx, run, content); err != nil {
		return err
	}
	if verify == nil {
		return nil
	}
	if verr := verify(ctx); verr != nil {
		if err := writeAuthorizedKeys(context.WithoutCancel(ctx), run, string(old)); err != nil {
			return fmt.Errorf("a fresh login with the new keys failed (%v), and putting the old keys back failed too: %w", verr, err)
		}
		return fmt.Errorf("a fresh login with the new keys failed, the old keys are back: %w", verr)
	}
	return nil
}
