#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# make dist: the source tarball OUT/devq-VERSION.tar.gz of the commit at
# HEAD (what git tracks, VERSION included, so it builds outside git).
# Reproducible: git archive gives every entry the commit's time and a fixed
# owner, the umask is fixed here rather than taken from git config, and
# gzip -n stores no name or time — the same commit gives the same bytes.
# Uncommitted changes are not in it (a warning says so).
#   tools/dist.sh [OUT]   (default: build)
set -eu
out=${1:-build}
git rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
	{ echo "make dist: needs a git checkout (it archives HEAD)" >&2; exit 1; }
cd "$(git rev-parse --show-toplevel)"
v=$(git show HEAD:VERSION)
[ "$v" = "$(cat VERSION)" ] ||
	{ echo "make dist: VERSION says $(cat VERSION) but HEAD's says $v: commit it first" >&2; exit 1; }
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
	echo "make dist: warning: uncommitted changes are left out (the tarball is HEAD, $(git rev-parse --short HEAD))" >&2
fi
mkdir -p "$out"
tar="$out/devq-$v.tar.gz"
git -c tar.umask=0022 archive --format=tar --prefix="devq-$v/" HEAD | gzip -n -9 >"$tar.tmp"
mv "$tar.tmp" "$tar"
echo "$tar"
