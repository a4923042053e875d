#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Isolation beside heavy work (bench/iso.py): this build's devqd and the
# one of a base revision (default 1a7a6b9, the tree before devq bounded
# host ops), side by side in each run.  The base is built once from a git
# worktree under $BUILD/iso-base (its own build folder); runs go to
# $BENCH_OUT/iso-N.json.  Needs root (the gemm tenant runs as nobody).
#   bench/iso.sh [RUNS] [BASE_REV] [-- iso.py options]
set -eu
runs=${1:-5}
rev=${2:-1a7a6b9}
[ $# -gt 2 ] && shift 2 || shift $#
[ "${1:-}" = -- ] && shift
B=${BUILD:-build}
out=${BENCH_OUT:-$B/bench}
PYTHON=${PYTHON:-/usr/bin/python3}
base=$B/iso-base
if [ ! -x "$base/build/devqd" ] || [ "$(git -C "$base" rev-parse HEAD 2>/dev/null)" != "$(git rev-parse "$rev")" ]; then
	rm -rf "$base"
	git worktree prune
	git worktree add -q --detach "$base" "$rev"
	make -C "$base" -j2 --no-print-directory build/devqd >"$B/iso-base.log" 2>&1 ||
		{ tail -n 20 "$B/iso-base.log"; exit 1; }
fi
mkdir -p "$out"
i=1
while [ "$i" -le "$runs" ]; do
	echo "== iso run $i of $runs (this tree $(git rev-parse --short HEAD), base $rev)"
	PYTHONPATH=$B/python DEVQ_LIBRARY=$B/libdevq.so.0 "$PYTHON" bench/iso.py \
		--devqd "$B/devqd" --base-devqd "$base/build/devqd" --json "$out/iso-$i.json" "$@"
	i=$((i + 1))
done
