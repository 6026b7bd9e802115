#!/bin/sh
# deps.sh WHAT...: installs, with apt-get, the Debian packages that the
# named make targets need beyond Go, when they are missing. As root it
# installs them (works with or without sudo: it never calls sudo); as
# another user it prints one line naming the packages and the command, and
# fails. The one place that knows what each target needs:
#   test    make test: sshd (the provision tests talk to a real OpenSSH on
#           loopback), promtool (the alert rules), ffmpeg with libopus (the
#           Ogg/Opus test), systemd-analyze (the event units)
#   demo    make demo: systemd-nspawn and debootstrap (lab boxes), ip,
#           ffmpeg (the Opus stream)
#   lab     make lab-test, make e2e: systemd-nspawn, debootstrap, ip, nft
#           (make lab-origins blackholes an origin box's relay port)
#   listen  make test-listen: chromium, ffmpeg
#   monitor make lab-monitor, make lab-evmon: the prometheus server
#   node    make interop, make web: node and npm (CI only: on a developer's
#           machine install Node 20 from nodesource, not Debian's nodejs)
#   qemu    make lab-qemu: qemu-system-x86_64
set -eu
missing=""
need() { # need COMMAND PACKAGE: PACKAGE when COMMAND is not found
	if [ "${1#/}" != "$1" ]; then
		[ -x "$1" ] && return 0
	else
		command -v "$1" >/dev/null 2>&1 && return 0
	fi
	case " $missing " in *" $2 "*) ;; *) missing="${missing:+$missing }$2" ;; esac
}
[ $# -gt 0 ] || { echo "usage: scripts/deps.sh test|demo|lab|listen|monitor|node|qemu..." >&2; exit 2; }
for what in "$@"; do
	case "$what" in
	test)
		need /usr/sbin/sshd openssh-server
		need promtool prometheus
		need ffmpeg ffmpeg
		need systemd-analyze systemd
		;;
	demo)
		need systemd-nspawn systemd-container
		need debootstrap debootstrap
		need ip iproute2
		need ffmpeg ffmpeg
		;;
	lab)
		need systemd-nspawn systemd-container
		need debootstrap debootstrap
		need ip iproute2
		need nft nftables
		;;
	listen)
		need chromium chromium
		need ffmpeg ffmpeg
		;;
	monitor) need prometheus prometheus ;;
	node)
		need node nodejs
		need npm npm
		;;
	qemu) need qemu-system-x86_64 qemu-system-x86 ;;
	*)
		echo "scripts/deps.sh: unknown set $what (want test, demo, lab, listen, monitor, node or qemu)" >&2
		exit 2
		;;
	esac
done
[ -z "$missing" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
	echo "make $* needs the Debian packages $missing, and this machine has no apt-get: install their equivalents first" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "make $* needs the Debian packages $missing: run it as root, or first: sudo apt-get install -y --no-install-recommends $missing" >&2
	exit 1
fi
echo "apt-get install $missing"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
