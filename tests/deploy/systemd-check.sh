#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# make check-systemd: the Debian packages under a real systemd as PID 1.
#   tests/deploy/systemd-check.sh CACHE_ROOT DEB_DIR WORK_DIR HOST_EXES_SO
# CACHE_ROOT is a debootstrapped Debian 12 (make check-systemd builds it
# once); each run copies it to WORK_DIR/root, boots that copy with
# systemd-nspawn -b --keep-unit, installs DEB_DIR's packages inside and runs
# tests/deploy/systemd-checks-inside.sh there through nsenter (named checks,
# a final "N passed, N failed" line).  Skips (exit 0, saying why) where
# nspawn cannot run: not root, no systemd-nspawn, or a container that does
# not boot.
set -uo pipefail
cache=${1:?usage: $0 CACHE_ROOT DEB_DIR WORK_DIR}
debs=${2:?usage: $0 CACHE_ROOT DEB_DIR WORK_DIR}
work=${3:?usage: $0 CACHE_ROOT DEB_DIR WORK_DIR HOST_EXES_SO}
# tests/host_exes.c built as a shared object: a host executable that
# crashes (the check host_crash_restart).
hostexes=${4:?usage: $0 CACHE_ROOT DEB_DIR WORK_DIR HOST_EXES_SO}
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "check-systemd: SKIPPED: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root (systemd-nspawn)"
command -v systemd-nspawn >/dev/null || skip "systemd-nspawn not installed (apt-get install systemd-container)"
command -v nsenter >/dev/null || skip "nsenter not installed (util-linux)"
[ -x "$cache/lib/systemd/systemd" ] || { echo "check-systemd: $cache is not a Debian root with systemd"; exit 1; }

t0=$(date +%s)
rm -rf "$work"
mkdir -p "$work"
root=$work/root
cp -a --reflink=auto "$cache" "$root"
mkdir -p "$root/opt/devq-check"
cp "$debs"/devqd_*.deb "$debs"/devctl_*.deb "$debs"/libdevq0_*.deb "$debs"/python3-devq_*.deb \
	"$root/opt/devq-check/"
cp "$here/systemd-checks-inside.sh" "$root/opt/devq-check/checks.sh"
cp "$hostexes" "$root/opt/devq-check/host_exes.so"
# README.md's one-minute path for an admin, as written (the check
# readme_admin runs what follows its build and install lines).
awk '$0 == "<!-- one-minute: admin -->" { want = 1; next }
     want && !inside && /^```/ { inside = 1; next }
     inside && /^```/ { exit }
     inside { print }' "$here/../../README.md" >"$root/opt/devq-check/readme-admin.sh"
[ -s "$root/opt/devq-check/readme-admin.sh" ] ||
	{ echo "check-systemd: README.md has no block after <!-- one-minute: admin -->"; exit 1; }
chmod 0755 "$root/opt/devq-check/checks.sh"

# No machined here (--register=no) and no transient scope of our own
# (--keep-unit: without it nspawn fails with "Failed to open system bus").
systemd-nspawn -q -b --keep-unit --register=no --console=passive -D "$root" \
	>"$work/console.log" 2>&1 &
nspawn=$!
leader=
shutdown() {
	if kill -0 "$nspawn" 2>/dev/null; then
		kill -TERM "$nspawn" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$nspawn" 2>/dev/null
	fi
	wait "$nspawn" 2>/dev/null
}
trap shutdown EXIT

# The container's PID 1: the descendant of nspawn whose pid in its own
# namespace is 1.
descendants() {
	local p
	for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do echo "$p"; descendants "$p"; done
}
for _ in $(seq 300); do
	kill -0 "$nspawn" 2>/dev/null || break
	for p in $(descendants "$nspawn"); do
		if awk '/^NSpid:/ { exit !($NF == 1 && NF > 2) }' "/proc/$p/status" 2>/dev/null; then
			leader=$p
			break 2
		fi
	done
	sleep 0.1
done
if [ -z "$leader" ]; then
	tail -n 20 "$work/console.log"
	skip "the container did not boot (systemd-nspawn -b --keep-unit; its console above)"
fi
ct() { nsenter -t "$leader" -m -u -i -n -p -r -w -- /usr/bin/env -i \
	PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb "$@"; }
# PID 1 is found before its bus socket exists, and before it made
# /run/systemd/system (until then systemctl says "offline": not booted
# with systemd): ask again until it answers.
for _ in $(seq 300); do
	state=$(ct timeout 120 systemctl is-system-running --wait 2>&1)
	case $state in *"Failed to connect to bus"* | offline) sleep 0.1 ;; *) break ;; esac
done
case $state in
running|degraded) ;;
*) echo "check-systemd: the container's systemd says '$state'"; tail -n 30 "$work/console.log"; exit 1 ;;
esac
echo "check-systemd: container booted ($state) in $(($(date +%s) - t0)) s"
ct /opt/devq-check/checks.sh
rc=$?
shutdown
trap - EXIT
# The copy is kept for a look when a check failed.
if [ "$rc" = 0 ]; then rm -rf "$root"; else echo "check-systemd: the container's root is kept in $root"; fi
echo "check-systemd: $(($(date +%s) - t0)) s in all"
exit $rc
