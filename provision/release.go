package provision

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"regexp"
	"strings"
)

// Releases manages content-addressed relay releases on a box:
//
//	ROOT/releases/SHA256/relay   one directory per build, never modified
//	ROOT/current  -> releases/SHA256   what the relay@ units run
//	ROOT/previous -> releases/SHA256   what Rollback returns to
//
// A release is uploaded only when missing, checked against its hash,
// fsynced, and appears by an atomic rename, so a cut connection never
// leaves a half-written release. Switching is an atomic symlink rename.
type Releases struct {
	// Root is the release tree, /opt/relayfleet on a box.
	Root string
	// Keep is how many of the newest releases stay (default 3); current
	// and previous always stay.
	Keep int
}

// DefaultRoot is where releases live on a box.
const DefaultRoot = "/opt/relayfleet"

var shaRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Digest is the release name of a binary: its SHA-256 in hex.
func Digest(binary []byte) string {
	sum := sha256.Sum256(binary)
	return hex.EncodeToString(sum[:])
}

func (r Releases) root() (string, error) {
	root := r.Root
	if root == "" {
		root = DefaultRoot
	}
	if !strings.HasPrefix(root, "/") || strings.ContainsAny(root, "'\"\\$`\n ") {
		return "", fmt.Errorf("release root %q: want an absolute path without quotes or spaces", root)
	}
	return root, nil
}

// Install uploads the binary as a release unless the box has it already.
// It reports whether it uploaded.
func (r Releases) Install(ctx context.Context, run Runner, binary []byte) (sha string, uploaded bool, err error) {
	sha = Digest(binary)
	uploaded, err = r.InstallFrom(ctx, run, sha, func(context.Context, string) ([]byte, error) { return binary, nil })
	return sha, uploaded, err
}

// InstallFrom makes the release sha present on the box: a box that keeps
// it already needs no bytes, and fetch is not called; otherwise fetch's
// bytes are uploaded, checked against sha on the box. It reports whether
// it uploaded.
func (r Releases) InstallFrom(ctx context.Context, run Runner, sha string, fetch func(ctx context.Context, sha string) ([]byte, error)) (uploaded bool, err error) {
	root, err := r.root()
	if err != nil {
		return false, err
	}
	// The lock makes every .upload.* directory found while holding it a
	// leftover of a cut connection: it is removed.
	script := fmt.Sprintf(`set -eu
root='%[1]s'; sha='%[2]s'
mkdir -p "$root/releases"
exec 9>"$root/releases/.lock"
flock 9
d="$root/releases/$sha"
if [ -x "$d/relay" ]; then echo present; exit 0; fi
rm -rf "$root"/releases/.upload.*
tmp=$(mktemp -d "$root/releases/.upload.XXXXXX")
trap 'rm -rf "$tmp"' EXIT HUP INT TERM
cat >"$tmp/relay"
got=$(sha256sum "$tmp/relay" | cut -d' ' -f1)
if [ "$got" != "$sha" ]; then echo "upload is corrupt: sha256 $got, want $sha" >&2; exit 1; fi
chmod 0755 "$tmp/relay" "$tmp" # mktemp makes 0700: the relay's DynamicUser must reach it
sync "$tmp/relay" "$tmp"
mv -T "$tmp" "$d"
trap - EXIT HUP INT TERM
sync "$root/releases"
echo uploaded
`, root, sha)
	// Only send the bytes when the box lacks them: ask first.
	if has, err := r.Has(ctx, run, sha); err != nil || has {
		return false, err
	}
	if fetch == nil {
		return false, fmt.Errorf("release %s: the box lacks it and there is nothing to fetch it from", text.ShortSHA(sha))
	}
	binary, err := fetch(ctx, sha)
	if err != nil {
		return false, fmt.Errorf("release %s: fetch: %w", text.ShortSHA(sha), err)
	}
	out, err := run.Run(ctx, script, bytes.NewReader(binary))
	if err != nil {
		return false, fmt.Errorf("release %s: upload: %w", text.ShortSHA(sha), err)
	}
	return strings.TrimSpace(string(out)) == "uploaded", nil
}

// Has reports whether the box keeps release sha.
func (r Releases) Has(ctx context.Context, run Runner, sha string) (bool, error) {
	root, err := r.root()
	if err != nil {
		return false, err
	}
	if !shaRE.MatchString(sha) {
		return false, fmt.Errorf("release %q: not a sha256", sha)
	}
	out, err := run.Run(ctx, fmt.Sprintf(`test -x '%s/releases/%s/relay' && echo present || echo missing`, root, sha), nil)
	if err != nil {
		return false, fmt.Errorf("release %s: %w", text.ShortSHA(sha), err)
	}
	return strings.TrimSpace(string(out)) == "present", nil
}

// Activate points current at the release, keeping the old one as
// previous. It returns the release that was current ("" if none).
func (r Releases) Activate(ctx context.Context, run Runner, sha string) (was string, err error) {
	root, err := r.root()
	if err != nil {
		return "", err
	}
	if !shaRE.MatchString(sha) {
		return "", fmt.Errorf("release %q: not a sha256", sha)
	}
	out, err := run.Run(ctx, fmt.Sprintf(`set -eu
cd '%[1]s'
[ -x "releases/%[2]s/relay" ] || { echo "release %[2]s is not installed" >&2; exit 1; }
cur=$(readlink current 2>/dev/null || true)
if [ "$cur" != "releases/%[2]s" ]; then
	ln -sfn "releases/%[2]s" .current.tmp && mv -T .current.tmp current
	if [ -n "$cur" ]; then ln -sfn "$cur" .previous.tmp && mv -T .previous.tmp previous; fi
	sync .
fi
echo "${cur#releases/}"
`, root, sha), nil)
	if err != nil {
		return "", fmt.Errorf("activate %s: %w", text.ShortSHA(sha), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Current returns the active and previous releases ("" when none).
func (r Releases) Current(ctx context.Context, run Runner) (current, previous string, err error) {
	root, err := r.root()
	if err != nil {
		return "", "", err
	}
	out, err := run.Run(ctx, fmt.Sprintf(`cd '%s' 2>/dev/null || exit 0; echo "$(readlink current || true)"; echo "$(readlink previous || true)"`, root), nil)
	if err != nil {
		return "", "", fmt.Errorf("current release: %w", err)
	}
	lines := strings.Split(string(out)+"\n\n", "\n")
	return strings.TrimPrefix(lines[0], "releases/"), strings.TrimPrefix(lines[1], "releases/"), nil
}

// Rollback makes previous current again (and current previous).
func (r Releases) Rollback(ctx context.Context, run Runner) (to string, err error) {
	_, prev, err := r.Current(ctx, run)
	if err != nil {
		return "", err
	}
	if prev == "" {
		return "", fmt.Errorf("rollback: no previous release")
	}
	if _, err := r.Activate(ctx, run, prev); err != nil {
		return "", fmt.Errorf("rollback: %w", err)
	}
	return prev, nil
}

// Prune keeps the newest Keep releases, and current and previous however
// old; it removes the rest and returns what it removed.
func (r Releases) Prune(ctx context.Context, run Runner) ([]string, error) {
	root, err := r.root()
	if err != nil {
		return nil, err
	}
	keep := r.Keep
	if keep <= 0 {
		keep = 3
	}
	out, err := run.Run(ctx, fmt.Sprintf(`set -eu
cd '%[1]s/releases' 2>/dev/null || exit 0
exec 9>.lock
flock 9
cur=$(readlink ../current 2>/dev/null || true); prev=$(readlink ../previous 2>/dev/null || true)
n=0
for d in $(ls -1t); do
	case "$d" in *[!0-9a-f]*) continue ;; esac
	[ ${#d} -eq 64 ] || continue
	n=$((n+1))
	[ $n -gt %[2]d ] || continue
	if [ "releases/$d" = "$cur" ] || [ "releases/$d" = "$prev" ]; then continue; fi
	rm -rf "$d"
	echo "$d"
done
`, root, keep), nil)
	if err != nil {
		return nil, fmt.Errorf("prune releases: %w", err)
	}
	return strings.Fields(string(out)), nil
}
