#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# make distcheck: proves the `make dist` tarball.
#  1. make dist twice: the two tarballs are the same bytes (reproducible);
#  2. unpacked in an empty directory outside git, `make check` passes there
#     (tests/test_release checks the versions and licence lines there too);
#  3. with dpkg-buildpackage and dh present, `make deb` there builds packages
#     whose version is the tarball's VERSION (DISTCHECK_DEB=0 skips it).
# The unpacked tree is removed afterwards unless DISTCHECK_KEEP=1.
#   tools/distcheck.sh [BUILD]   (default: build; run from the top of a git checkout)
set -eu
build=${1:-build}
jobs=${DISTCHECK_JOBS:-2}
say() { echo "distcheck: $*"; }

tar=$(sh tools/dist.sh "$build")
a=$(sha256sum "$tar" | cut -d' ' -f1)
rm -f "$tar"
sleep 1 # a second run, at another time, must not differ
tar=$(sh tools/dist.sh "$build")
b=$(sha256sum "$tar" | cut -d' ' -f1)
[ "$a" = "$b" ] || { say "FAIL: two runs of make dist differ ($a, $b)"; exit 1; }
say "$tar is reproducible (sha256 $a)"

# Not a git checkout: a directory of its own under /tmp, no GIT_* pointing back.
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE
tmp=$(mktemp -d /tmp/devq-distcheck-XXXXXX)
[ "${DISTCHECK_KEEP:-0}" = 1 ] || trap 'rm -rf "$tmp"' EXIT
tar -xzf "$tar" -C "$tmp"
v=$(basename "$tar" .tar.gz | sed 's/^devq-//')
src="$tmp/devq-$v"
[ -f "$src/VERSION" ] && [ "$(cat "$src/VERSION")" = "$v" ] || { say "FAIL: no VERSION $v in the tarball"; exit 1; }
[ ! -e "$src/.git" ] || { say "FAIL: the tarball holds .git"; exit 1; }
if (cd "$src" && git rev-parse --git-dir >/dev/null 2>&1); then
	say "FAIL: $src is inside a git repository; the check needs it outside"; exit 1
fi
# The metrics test's promtool, when this tree has one (make promtool).
if [ -z "${DEVQ_PROMTOOL:-}" ] && [ -x "$build/promtool/usr/bin/promtool" ]; then
	DEVQ_PROMTOOL=$(cd "$build/promtool/usr/bin" && pwd)/promtool
	export DEVQ_PROMTOOL
fi
# The sub-make is not this make's child: drop its flags (BUILD=, -j jobserver).
unset MAKEFLAGS MAKELEVEL MFLAGS
say "make check in $src"
start=$(date +%s)
(cd "$src" && make -j"$jobs" check)
say "make check passed in the unpacked tarball ($(($(date +%s) - start)) s)"

if [ "${DISTCHECK_DEB:-1}" = 1 ] && command -v dpkg-buildpackage >/dev/null && command -v dh >/dev/null; then
	start=$(date +%s)
	(cd "$src" && make deb)
	for d in "$src"/build/deb/*.deb; do
		dv=$(dpkg-deb -f "$d" Version)
		case "$dv" in
		"$v"-*) ;;
		*) say "FAIL: $(basename "$d"): version $dv, tarball $v"; exit 1 ;;
		esac
	done
	say "make deb in the unpacked tarball: packages of version $v- ($(($(date +%s) - start)) s)"
else
	say "make deb skipped (DISTCHECK_DEB=0, or no dpkg-buildpackage/dh)"
fi
say "ok: devq-$v.tar.gz"
