#!/bin/sh
# Before and after, alternating: runs relay/bench's defaults variant for
# each relay binary in turn, one run each, ROUNDS times, and prints one
# line per run (listeners per core, the relay's CPU, packets sent, RSS per
# listener, frames lost). The machine's speed drifts by more than many
# changes measure (docs/benchmarks.md, session 7): pairs taken minute by
# minute are the comparison that counts.
# Usage: scripts/bench-ab.sh BEFORE AFTER [ROUNDS (4)] [LISTENERS (2000)]
set -eu
[ $# -ge 2 ] || { echo "usage: $0 BEFORE AFTER [ROUNDS] [LISTENERS]" >&2; exit 2; }
before=$1 after=$2 rounds=${3:-4} n=${4:-2000}
for b in "$before" "$after"; do
	[ -x "$b" ] || { echo "bench-ab.sh: $b is not an executable relay binary" >&2; exit 2; }
done
cd "$(dirname "$0")/.."
echo "| round | relay | listeners | listeners per core | relay CPU (% of a core) | packets sent | RSS per listener (KiB) | frames lost |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|"
r=1
while [ "$r" -le "$rounds" ]; do
	for b in "$before" "$after"; do
		line=$(go run ./relay/bench --relay "$b" --steps "$n" --runs 1 --only defaults --profile-at 0 2>/dev/null |
			grep -E "^\| $n \| 1 \| $n " | head -n 1)
		[ -n "$line" ] || { echo "bench-ab.sh: no result for $b" >&2; exit 1; }
		echo "$line" | awk -F'|' -v r="$r" -v b="$b" -v n="$n" '{gsub(/ /,""); printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r, b, n, $6, $5, $7, $11, $16}'
	done
	r=$((r + 1))
done
