#!/usr/bin/env bash
# fuzz: run every Go fuzz target of the module for FUZZTIME each (10s by
# default), one at a time, then print each target with its outcome. Exits
# non-zero when any target fails; a failing input found is written under
# the package's testdata/fuzz/FuzzNAME/, where it stays a seed that plain
# go test runs.
#
# Targets are found with go list, so a new FuzzXxx in any package's
# default-build test files is run without being listed here; so are the
# FuzzRelayfleet targets of the patched quic-go copy (third_party/quic-go,
# a module of its own: patch 0008, docs/quic-go-patch.md), not upstream's
# own fuzz targets there. Each package's
# test binary is built once, instrumented for fuzzing, and run once per
# target (what go test -fuzz does, less the rebuild per target).
# FUZZ='regexp' keeps only the targets whose "IMPORTPATH FuzzName" matches.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
fuzztime=${FUZZTIME:-10s}
# New coverage-increasing inputs are minimized for at most this long, so a
# short run spends its time fuzzing.
minimize=${FUZZMINIMIZETIME:-2s}
only=${FUZZ:-.}
cache=$($GO env GOCACHE)/fuzz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# "IMPORTPATH DIR FuzzName MODULEDIR" for every fuzz target of the module
# in MODULEDIR whose name matches the pattern.
list_targets() {
	$GO -C "$1" list -f '{{.ImportPath}} {{.Dir}}{{range .TestGoFiles}} {{$.Dir}}/{{.}}{{end}}{{range .XTestGoFiles}} {{$.Dir}}/{{.}}{{end}}' ./... |
		while read -r pkg dir files; do
			[ -n "$files" ] || continue
			# shellcheck disable=SC2086
			grep -ho '^func Fuzz[A-Za-z0-9_]*(f \*testing\.F)' $files | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/' | sort -u |
				grep -E -- "$2" | while read -r name; do
					# FUZZ matches "IMPORTPATH FuzzName" (so a trailing $ anchors the name)
					if echo "$pkg $name" | grep -qE -- "$only"; then echo "$pkg $dir $name $1"; fi
				done
		done
}
targets=$({ list_targets . '.'; list_targets third_party/quic-go '^FuzzRelayfleet'; })
if [ -z "$targets" ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi

n=$(echo "$targets" | wc -l)
echo "fuzz: $n targets, $fuzztime each"
results=()
failed=0
start=$(date +%s)
built=""
while read -r pkg dir name mod; do
	t0=$(date +%s)
	bin=$work/$(echo "$pkg" | tr / _).test
	if [ "$built" != "$pkg" ]; then
		built=$pkg
		if ! $GO -C "$mod" test -c -fuzz . -o "$bin" "$pkg" >"$work/build.log" 2>&1; then
			cat "$work/build.log"
			rm -f "$bin"
		fi
	fi
	log=$work/$name.log
	run() {
		[ -x "$bin" ] && (cd "$dir" && "$bin" -test.run '^$' -test.fuzz "^${name}\$" -test.fuzztime "$fuzztime" \
			-test.fuzzminimizetime "$minimize" -test.fuzzcachedir "$cache/$pkg") >"$log" 2>&1
	}
	if run; then
		status=ok
	elif grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log" && cp "$log" "$log.first" && run; then
		# Go's fuzzing engine sometimes reports its own fuzztime deadline
		# ("context deadline exceeded") with no failing input: not a
		# finding. The target ran again, whole, and passed; say so.
		status=ok
		echo "--- retried $pkg $name: the engine's deadline error, no failing input:"
		grep -v '^fuzz: elapsed' "$log.first"
	else
		status=FAIL
		failed=$((failed + 1))
		echo "--- FAIL $pkg $name"
		[ -f "$log" ] && grep -v '^fuzz: elapsed' "$log"
	fi
	execs=$(grep -o 'execs: [0-9]*' "$log" 2>/dev/null | tail -1 | cut -d' ' -f2)
	results+=("$(printf '%-4s %-48s %-22s %4ss %9s execs' "$status" "$pkg" "$name" "$(($(date +%s) - t0))" "${execs:-0}")")
done <<<"$targets"

echo
for r in "${results[@]}"; do echo "$r"; done
echo "fuzz: $n targets, $failed failed, $(($(date +%s) - start))s"
[ "$failed" -eq 0 ]
