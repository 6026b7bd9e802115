#!/bin/sh
# Ctrl-C in the middle of make demo leaves nothing behind: start the demo,
# interrupt it once its listeners are ramping (boxes, bridge, router,
# ffmpeg and load generator all up), and check what is left.
set -eu
bin=${1:-bin}
pulumi=${2:-}
log=$(mktemp)
"$bin/demo" --bin "$bin" ${pulumi:+--pulumi "$pulumi"} >"$log" 2>&1 &
pid=$!
# Steps 1-3 take about 2 minutes on an idle 2-core machine; a busy one
# (CI beside other jobs) has taken more than 150 s: wait up to 10 minutes.
deadline=$(($(date +%s) + 600))
until grep -q '^==> \[4/8\]' "$log"; do
	if [ "$(date +%s)" -gt $deadline ] || ! kill -0 $pid 2>/dev/null; then
		echo "demo-interrupt: the demo never reached step 4:" >&2
		tail -20 "$log" >&2
		kill -INT $pid 2>/dev/null && wait $pid || true # it cleans up after itself
		exit 1
	fi
	sleep 0.5
done
sleep 3
echo "demo-interrupt: Ctrl-C during step 4"
kill -INT $pid
rc=0
wait $pid || rc=$?
tail -3 "$log"
fail=""
[ $rc -eq 130 ] || fail="$fail exit $rc (want 130);"
grep -q "nothing left behind" "$log" || fail="$fail no 'nothing left behind';"
[ -e /sys/class/net/rfdemo0 ] && fail="$fail bridge rfdemo0 left;"
[ -n "$(ls /var/lib/relayfleet/lab-demo/boxes 2>/dev/null)" ] && fail="$fail lab boxes left;"
grep -q " /var/lib/relayfleet/lab-demo/" /proc/self/mountinfo && fail="$fail mounts left;"
pgrep -f "10.231.87.1:4443|relay loadgen --router|frame_duration 120" >/dev/null && fail="$fail processes left;"
rm -f "$log"
if [ -n "$fail" ]; then
	echo "demo-interrupt: FAILED:$fail" >&2
	exit 1
fi
echo "demo-interrupt: ok, nothing left behind"
