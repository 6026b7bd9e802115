package provision

import (
	"bytes"
	"context"
	"fmt"
	"github.com/relayfleet/relayfleet/internal/text"
	"strings"
)

// FileHash returns the SHA-256 of a file on the box, "" when it is absent.
func FileHash(ctx context.Context, run Runner, path string) (string, error) {
	out, err := run.Run(ctx, fmt.Sprintf(`if [ -f %[1]s ]; then sha256sum %[1]s | cut -d' ' -f1; fi`, text.ShellQuote(path)), nil)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// WriteFile puts data at path on the box, atomically: it is written to a
// temporary file beside path, checked, fsynced and renamed over path, so
// path holds either the old or the new content, never a part. It does
// nothing when path already holds data, and reports whether it wrote.
func WriteFile(ctx context.Context, run Runner, path string, data []byte, mode uint32) (bool, error) {
	if !strings.HasPrefix(path, "/") {
		return false, fmt.Errorf("write %s: not an absolute path", path)
	}
	want := Digest(data)
	have, err := FileHash(ctx, run, path)
	if err != nil {
		return false, err
	}
	if have == want {
		return false, nil
	}
	script := fmt.Sprintf(`set -eu
p=%[1]s
mkdir -p "$(dirname "$p")"
tmp=$(mktemp "$p.relayfleet.XXXXXX")
trap 'rm -f "$tmp"' EXIT HUP INT TERM
cat >"$tmp"
got=$(sha256sum "$tmp" | cut -d' ' -f1)
if [ "$got" != %[2]s ]; then echo "upload is corrupt: sha256 $got" >&2; exit 1; fi
chmod %#[3]o "$tmp"
sync "$tmp"
mv -f "$tmp" "$p"
trap - EXIT HUP INT TERM
sync "$(dirname "$p")"
`, text.ShellQuote(path), want, mode)
	if _, err := run.Run(ctx, script, bytes.NewReader(data)); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	return true, nil
}
