#!/bin/sh
# Rebuilds relayfleet's copy of quic-go (third_party/quic-go) from the
# release go.mod requires (v0.64.1, from the module cache) and the patch
# series third_party/quic-go-patches/*.patch, applied in order
# (docs/quic-go-patch.md describes each).
#
# Usage: scripts/quic-go-apply.sh [--check | --write | --pristine DIR | --upto N DIR]
#   --check        (the default) fail, one line per file, where the copy is
#                  not the release plus the series
#   --write        replace third_party/quic-go with the release plus the series
#   --pristine DIR write the release as the copy carries it (no patch) to DIR
#   --upto N DIR   write the release plus patches 0001..N to DIR
#
# The copy carries the whole release, tests included, but for its CI and
# fuzzing setup and artwork (EXCLUDE below).
set -eu
EXCLUDE='.clusterfuzzlite .githooks .github assets metrics'
cd "$(dirname "$0")/.."
root=$(pwd)
mode=${1:---check}
v=$(go list -m -f '{{.Version}}' github.com/quic-go/quic-go)
rel=$(go mod download -json "github.com/quic-go/quic-go@$v" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$rel" ] || { echo "quic-go-apply.sh: github.com/quic-go/quic-go@$v not in the module cache" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
tree=$tmp/quic-go
cp -R "$rel" "$tree"
chmod -R u+w "$tree"
for e in $EXCLUDE; do rm -rf "${tree:?}/$e"; done

upto=9999
case $mode in
--pristine) upto=0 ;;
--upto) upto=$2 ;;
esac
n=0
for p in "$root"/third_party/quic-go-patches/[0-9][0-9][0-9][0-9]-*.patch; do
	n=$((n + 1))
	[ "$n" -le "$upto" ] || break
	patch -p1 -F0 -s -t --no-backup-if-mismatch -d "$tree" <"$p" >"$tmp/patch.out" 2>&1 ||
		{ echo "quic-go-apply.sh: $(basename "$p") does not apply: $(tr '\n' ' ' <"$tmp/patch.out")" >&2; exit 1; }
done

case $mode in
--check)
	# the copy's files: what git tracks or would add (test outputs that
	# third_party/quic-go/.gitignore ignores, such as keylog.txt, are not)
	if git rev-parse --git-dir >/dev/null 2>&1; then
		git ls-files -co --exclude-standard -- third_party/quic-go | sed 's|^third_party/quic-go/||'
	else
		(cd third_party/quic-go && find . -type f | sed 's|^\./||')
	fi | LC_ALL=C sort -u >"$tmp/copy.list"
	(cd "$tree" && find . -type f | sed 's|^\./||' | LC_ALL=C sort) >"$tmp/series.list"
	bad=0
	LC_ALL=C comm -23 "$tmp/series.list" "$tmp/copy.list" | while read -r f; do
		if [ ! -f "third_party/quic-go/$f" ]; then
			echo "third_party/quic-go/$f: in the release plus the patch series, missing from the copy"
		elif ! cmp -s "$tree/$f" "third_party/quic-go/$f"; then # a file git ignores
			echo "third_party/quic-go/$f: differs from the release plus the patch series"
		fi
	done >"$tmp/report"
	LC_ALL=C comm -13 "$tmp/series.list" "$tmp/copy.list" | while read -r f; do
		[ -f "third_party/quic-go/$f" ] || continue # deleted in the work tree, listed by the index
		echo "third_party/quic-go/$f: in the copy, not in the release plus the patch series"
	done >>"$tmp/report"
	LC_ALL=C comm -12 "$tmp/series.list" "$tmp/copy.list" | while read -r f; do
		if [ ! -f "third_party/quic-go/$f" ]; then
			echo "third_party/quic-go/$f: in the release plus the patch series, missing from the copy"
		elif ! cmp -s "$tree/$f" "third_party/quic-go/$f"; then
			echo "third_party/quic-go/$f: differs from the release plus the patch series"
		fi
	done >>"$tmp/report"
	if [ -s "$tmp/report" ]; then
		cat "$tmp/report" >&2
		exit 1
	fi
	;;
--write)
	rm -rf third_party/quic-go
	cp -R "$tree" third_party/quic-go
	;;
--pristine | --upto)
	dst=${2:?}
	[ "$mode" = --upto ] && dst=${3:?}
	rm -rf "$dst"
	cp -R "$tree" "$dst"
	;;
*)
	echo "quic-go-apply.sh: unknown mode $mode (--check, --write, --pristine DIR, --upto N DIR)" >&2
	exit 2
	;;
esac
