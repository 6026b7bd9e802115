#!/bin/sh
# Keeps relayfleet's copy of Pulumi's Go language host
# (third_party/pulumi-language-go: pulumi/pulumi's sdk/go/pulumi-language-go
# and the repository's LICENSE, at the tag third_party/pulumi-language-go/UPSTREAM
# names) honest. The module proxy does not serve that module, so the copy is
# checked against a recorded list of its files' SHA-256 sums, and that list
# against the release itself wherever a clone of pulumi/pulumi is at hand.
#
# Usage: scripts/pulumi-language-go.sh [--check | --verify GITDIR | --write GITDIR TAG]
#   --check          (the default; offline) fail, one line per file, where the
#                    copy is not the files SHA256SUMS lists with those sums, or
#                    where tools/pulumi/go.mod does not require the tag UPSTREAM names
#   --verify GITDIR  also rebuild the list from the release (GITDIR: a pulumi/pulumi
#                    git directory, bare or not) and fail where it differs
#   --write GITDIR TAG  replace the copy and its list with the release at TAG
#                    (refresh: then `cd tools/pulumi && go mod edit -require=...@TAG`,
#                    see third_party/pulumi-language-go/README.md)
#
# Left out of the release: testdata/, language_test.go and main_test.go (the
# conformance suite and its ~4,300 files of data; the binary needs none).
set -eu
EXCLUDE_RE='^(testdata/|language_test\.go$|main_test\.go$)'
OURS='README.md SHA256SUMS UPSTREAM' # relayfleet's files in the copy
SUB=sdk/go/pulumi-language-go
MOD=github.com/pulumi/pulumi/sdk/go/pulumi-language-go/v3
cd "$(dirname "$0")/.."
dir=third_party/pulumi-language-go
mode=${1:---check}
me=pulumi-language-go.sh

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# release GITDIR TAG OUT: the release's files as the copy carries them, in OUT
release() {
	git --git-dir="$1" rev-parse -q --verify "$2^{commit}" >/dev/null ||
		{ echo "$me: no tag $2 in $1 (fetch a newer pulumi/pulumi)" >&2; exit 1; }
	mkdir -p "$tmp/x" "$3"
	mkdir -p "$tmp/x/$SUB"
	git --git-dir="$1" archive --format=tar -o "$tmp/rel.tar" "$2:$SUB" ||
		{ echo "$me: git archive $2:$SUB failed in $1" >&2; exit 1; }
	tar -x -C "$tmp/x/$SUB" -f "$tmp/rel.tar"
	git --git-dir="$1" show "$2:LICENSE" >"$tmp/x/LICENSE" ||
		{ echo "$me: no LICENSE at $2 in $1" >&2; exit 1; }
	(cd "$tmp/x/$SUB" && find . -type f | sed 's|^\./||') | LC_ALL=C sort | grep -Ev "$EXCLUDE_RE" |
		while read -r f; do
			mkdir -p "$3/$(dirname "$f")"
			cp "$tmp/x/$SUB/$f" "$3/$f"
		done
	[ -f "$3/LICENSE" ] && { echo "$me: $SUB has a LICENSE of its own at $2; decide which the copy carries" >&2; exit 1; }
	cp "$tmp/x/LICENSE" "$3/LICENSE"
	for o in $OURS; do
		[ ! -e "$3/$o" ] || { echo "$me: the release has $SUB/$o, a name the copy uses for its own file" >&2; exit 1; }
	done
	rm -rf "$tmp/x"
}

# sums DIR: the SHA-256 list of DIR's files but relayfleet's own, sorted by path
sums() {
	(cd "$1" && find . -type f | sed 's|^\./||' | LC_ALL=C sort | while read -r f; do
		case " $OURS " in *" $f "*) continue ;; esac
		sha256sum "$f"
	done)
}

upstream() { sed -n "s/^$1 //p" "$dir/UPSTREAM"; }

check() {
	[ -f "$dir/SHA256SUMS" ] && [ -f "$dir/UPSTREAM" ] ||
		{ echo "$me: $dir/SHA256SUMS or UPSTREAM missing" >&2; exit 1; }
	# the copy's files: what git tracks or would add, else what is there
	if git rev-parse --git-dir >/dev/null 2>&1; then
		git ls-files -co --exclude-standard -- "$dir" | sed "s|^$dir/||"
	else
		(cd "$dir" && find . -type f | sed 's|^\./||')
	fi | LC_ALL=C sort -u >"$tmp/copy.list"
	awk '{print $2}' "$dir/SHA256SUMS" | LC_ALL=C sort >"$tmp/sums.list"
	: >"$tmp/report"
	LC_ALL=C comm -13 "$tmp/sums.list" "$tmp/copy.list" | while read -r f; do
		case " $OURS " in *" $f "*) continue ;; esac
		[ -f "$dir/$f" ] || continue # deleted in the work tree, listed by the index
		echo "$dir/$f: in the copy, not in SHA256SUMS (not from the release)"
	done >>"$tmp/report"
	while read -r sum f; do
		if [ ! -f "$dir/$f" ]; then
			echo "$dir/$f: in SHA256SUMS, missing from the copy"
		elif [ "$(sha256sum <"$dir/$f" | cut -d' ' -f1)" != "$sum" ]; then
			echo "$dir/$f: differs from the release (SHA-256 is not the one SHA256SUMS records)"
		fi
	done <"$dir/SHA256SUMS" >>"$tmp/report"
	tag=$(upstream tag)
	req=$(sed -n "s|^[[:space:]]*$MOD \(v[^ ]*\).*|\1|p" tools/pulumi/go.mod | head -n1)
	[ "$req" = "$tag" ] ||
		echo "tools/pulumi/go.mod: requires $MOD ${req:-(not at all)}, the copy is $tag (third_party/pulumi-language-go/UPSTREAM)" >>"$tmp/report"
	grep -q "^replace $MOD => ../../$dir\$" tools/pulumi/go.mod ||
		echo "tools/pulumi/go.mod: no \"replace $MOD => ../../$dir\"" >>"$tmp/report"
	if [ -s "$tmp/report" ]; then
		cat "$tmp/report" >&2
		exit 1
	fi
}

case $mode in
--check)
	check
	;;
--verify)
	git=${2:?$me: --verify GITDIR}
	tag=$(upstream tag)
	release "$git" "$tag" "$tmp/rel"
	want=$(upstream commit)
	got=$(git --git-dir="$git" rev-parse "$tag^{commit}")
	[ "$got" = "$want" ] || { echo "$me: $tag is commit $got in $git, UPSTREAM records $want" >&2; exit 1; }
	sums "$tmp/rel" >"$tmp/rel.sums"
	if ! cmp -s "$tmp/rel.sums" "$dir/SHA256SUMS"; then
		echo "$dir/SHA256SUMS: not the release $tag's files (diff: recorded, release):" >&2
		diff "$dir/SHA256SUMS" "$tmp/rel.sums" | grep '^[<>]' >&2 || true
		exit 1
	fi
	check
	;;
--write)
	git=${2:?$me: --write GITDIR TAG}
	tag=${3:?$me: --write GITDIR TAG}
	release "$git" "$tag" "$tmp/rel"
	for o in $OURS; do [ ! -f "$dir/$o" ] || cp "$dir/$o" "$tmp/$o.keep"; done
	rm -rf "$dir"
	cp -R "$tmp/rel" "$dir"
	for o in README.md; do [ ! -f "$tmp/$o.keep" ] || cp "$tmp/$o.keep" "$dir/$o"; done
	sums "$dir" >"$tmp/SHA256SUMS"
	mv "$tmp/SHA256SUMS" "$dir/SHA256SUMS"
	printf 'repository https://github.com/pulumi/pulumi\ntag %s\ncommit %s\npath %s\n' \
		"$tag" "$(git --git-dir="$git" rev-parse "$tag^{commit}")" "$SUB" >"$dir/UPSTREAM"
	echo "$me: $dir is $tag; now: cd tools/pulumi && go mod edit -require=$MOD@$tag && go mod tidy, update $dir/README.md's tag" >&2
	;;
*)
	echo "$me: unknown mode $mode (--check, --verify GITDIR, --write GITDIR TAG)" >&2
	exit 2
	;;
esac
