#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# One version, from the VERSION file: checks that everything written by
# hand agrees with it (what the build derives from it — DEVQ_VERSION in the
# binaries, devq.pc, the man pages' headers — tests/test_release.c checks
# on the built files).  Run from the top of the tree; make check runs it.
#
#  - VERSION holds one MAJOR.MINOR.PATCH line;
#  - CHANGELOG.md (Keep a Changelog) opens with "## [Unreleased]", then its
#    releases "## [X.Y.Z] - YYYY-MM-DD", newest first; the newest is VERSION;
#  - packaging/debian/changelog has an entry for exactly those releases, in
#    the same order, the newest on top, and each release's first Debian
#    revision is dated the day CHANGELOG.md gives;
#  - a release tag on HEAD (git only) is vVERSION;
#  - the man pages say "devq @VERSION@" and devq.pc.in "@VERSION@" (the
#    build fills them in), and no source defines DEVQ_VERSION itself.
set -eu
cd "${1:-.}"
fails=0
fail() {
	echo "check-version: $*" >&2
	fails=$((fails + 1))
}

v=$(cat VERSION)
[ "$(wc -l <VERSION)" -eq 1 ] && echo "$v" | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+$' ||
	fail "VERSION must be one MAJOR.MINOR.PATCH line, not '$v'"

# CHANGELOG.md: "## [Unreleased]" first, then "VERSION DATE" per release.
first=$(grep -m1 '^## ' CHANGELOG.md || true)
[ "$first" = "## [Unreleased]" ] || fail "CHANGELOG.md: the first section must be '## [Unreleased]', not '$first'"
bad=$(grep '^## ' CHANGELOG.md | grep -v '^## \[Unreleased\]$' |
	grep -Ev '^## \[[0-9]+\.[0-9]+\.[0-9]+\] - [0-9]{4}-[0-9]{2}-[0-9]{2}$' || true)
[ -z "$bad" ] || fail "CHANGELOG.md: release headings must read '## [X.Y.Z] - YYYY-MM-DD': $bad"
md=$(sed -nE 's/^## \[([0-9]+\.[0-9]+\.[0-9]+)\] - ([0-9-]+)$/\1 \2/p' CHANGELOG.md)
[ -n "$md" ] || fail "CHANGELOG.md: no release"
newest=$(echo "$md" | head -n1 | cut -d' ' -f1)
[ "$newest" = "$v" ] || fail "CHANGELOG.md: newest release $newest, VERSION $v"
[ "$(echo "$md" | cut -d' ' -f1 | sort -t. -k1,1nr -k2,2nr -k3,3nr -u)" = "$(echo "$md" | cut -d' ' -f1)" ] ||
	fail "CHANGELOG.md: releases are not newest first, or one is listed twice"

# packaging/debian/changelog: "devq (X.Y.Z-N) ..." and " -- NAME  Day, DD Mon YYYY ...".
deb=$(awk '
	/^devq \(/ { v = $2; gsub(/[()]/, "", v); up = v; sub(/-[^-]*$/, "", up) }
	/^ -- / { split($0, a, ">  "); split(a[2], d, " ");
		  m = index("JanFebMarAprMayJunJulAugSepOctNovDec", d[3]); m = (m + 2) / 3;
		  printf "%s %04d-%02d-%02d\n", up, d[4], m, d[2] }' packaging/debian/changelog)
[ -n "$deb" ] || fail "packaging/debian/changelog: no entry"
debtop=$(echo "$deb" | head -n1 | cut -d' ' -f1)
[ "$debtop" = "$v" ] || fail "packaging/debian/changelog: newest entry $debtop, VERSION $v"
# Each upstream release once, with the date of its first (oldest) revision.
debrel=$(echo "$deb" | awk '{ if (!($1 in d)) o[n++] = $1; d[$1] = $2 }
	END { for (i = 0; i < n; i++) print o[i], d[o[i]] }')
[ "$debrel" = "$md" ] || fail "packaging/debian/changelog and CHANGELOG.md list different releases or dates:
  CHANGELOG.md:               $(echo "$md" | tr '\n' ' ')
  packaging/debian/changelog: $(echo "$debrel" | tr '\n' ' ')"

if git rev-parse --is-inside-work-tree >/dev/null 2>&1 &&
	[ "$(git rev-parse --show-toplevel)" = "$(pwd -P)" ]; then
	for t in $(git tag --points-at HEAD 'v[0-9]*'); do
		[ "$t" = "v$v" ] || fail "HEAD is tagged $t but VERSION is $v"
	done
fi

for m in man/*.[1-9]; do
	grep -q '^\.TH .*"devq @VERSION@"' "$m" || fail "$m: the .TH line must say \"devq @VERSION@\" (the build fills it in)"
done
grep -q '^Version: @VERSION@$' packaging/devq.pc.in || fail "packaging/devq.pc.in: Version must be @VERSION@"
defs=$(grep -rln --include='*.[ch]' --include='*.cu' '^[[:space:]]*#[[:space:]]*define[[:space:]]\+DEVQ_VERSION\b' \
	--exclude-dir='build*' --exclude-dir=.git . || true)
[ -z "$defs" ] || fail "DEVQ_VERSION comes from VERSION through the Makefile, but is defined in: $defs"

[ "$fails" = 0 ] || exit 1
echo "check-version: $v in VERSION, CHANGELOG.md and packaging/debian/changelog"
