#!/usr/bin/env bash
# bench-converge: converge N fresh lab boxes (N = 3, 10, 20 by default),
# then re-run on the converged boxes, and print seconds per step as a
# Markdown table. Root; uses bin/fleet and bin/relay (make build) and a lab
# of its own (state dir and bridge apart from the default lab).
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=${SIZES:-"3 10 20"}
export RELAYFLEET_LAB_DIR=${RELAYFLEET_LAB_DIR:-/var/lib/relayfleet/lab-bench}
work=$(mktemp -d)
trap './bin/fleet lab down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT INT TERM

secs() { local t0=$1; echo "$(date +%s.%N) - $t0" | bc; }

echo "| boxes | lab up (s) | converge fresh (s) | converge no-op (s) | --check (s) |"
echo "|---|---|---|---|---|"
for n in $sizes; do
	cat >"$work/fleet.yaml" <<YAML
version: 1
name: lab
steady:
  - {name: bench, provider: lab, shape: small, count: $n}
YAML
	t0=$(date +%s.%N); ./bin/fleet lab up "$n" >/dev/null 2>&1; up=$(secs "$t0")
	t0=$(date +%s.%N); ./bin/fleet converge --inventory "$work/fleet.yaml" --relay-binary bin/relay >"$work/fresh.txt"; fresh=$(secs "$t0")
	t0=$(date +%s.%N); ./bin/fleet converge --inventory "$work/fleet.yaml" --relay-binary bin/relay >"$work/noop.txt"; noop=$(secs "$t0")
	grep -q "summary: $n hosts: 0 changed, $n unchanged, 0 failed" "$work/noop.txt" || { echo "the re-run changed something:" >&2; cat "$work/noop.txt" >&2; exit 1; }
	t0=$(date +%s.%N); ./bin/fleet converge --inventory "$work/fleet.yaml" --relay-binary bin/relay --check >/dev/null; check=$(secs "$t0")
	printf '| %d | %.1f | %.1f | %.2f | %.2f |\n' "$n" "$up" "$fresh" "$noop" "$check"
	./bin/fleet lab down >/dev/null 2>&1
done
echo
echo "Machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(lscpu | sed -n 's/^Model name: *//p'), kernel $(uname -r); $(date -u +%F)."
