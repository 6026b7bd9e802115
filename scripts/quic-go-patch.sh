#!/bin/sh
# Prints the relayfleet patch: every file of third_party/quic-go that is not
# the release's (go.mod's quic-go version), as a unified diff against it
# (the combined effect of the series third_party/quic-go-patches; scripts/quic-go-apply.sh --check holds the copy to it).
# Usage: scripts/quic-go-patch.sh [--list]   (--list: the files only;
# without it, the diff, our own new test files named but not printed)
set -eu
cd "$(dirname "$0")/.."
v=$(go list -m -f '{{.Version}}' github.com/quic-go/quic-go)
rel=$(go mod download -json "github.com/quic-go/quic-go@$v" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$rel" ] || { echo "quic-go-patch.sh: github.com/quic-go/quic-go@$v not downloaded" >&2; exit 1; }
cd third_party/quic-go
for f in $(find . -type f | sed 's|^\./||' | LC_ALL=C sort); do
	if [ "${1:-}" = --list ]; then
		cmp -s "$rel/$f" "$f" 2>/dev/null || echo "$f"
	elif [ ! -f "$rel/$f" ] && [ "${f%_test.go}" != "$f" ]; then
		echo "# new test file (not printed): $f"
	elif [ -f "$rel/$f" ]; then
		diff -u --label "a/$f" --label "b/$f" "$rel/$f" "$f" || true
	else
		diff -u --label /dev/null --label "b/$f" /dev/null "$f" || true
	fi
done
