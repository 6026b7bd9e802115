#!/bin/sh
# What make demo needs beyond Go: systemd-nspawn and debootstrap for the
# lab boxes, ffmpeg for the Opus stream. Installed with apt-get when
# missing (root, Debian or Ubuntu).
set -eu
missing=""
command -v systemd-nspawn >/dev/null 2>&1 || missing="$missing systemd-container"
command -v debootstrap >/dev/null 2>&1 || missing="$missing debootstrap"
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
command -v ffmpeg >/dev/null 2>&1 || missing="$missing ffmpeg"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	echo "make demo needs:$missing (install them, then run it again as root)" >&2
	exit 1
fi
echo "installing:$missing"
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing >/dev/null
