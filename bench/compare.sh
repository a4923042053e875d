#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Two builds side by side: rtt, tput and fit (medians of ROUNDS interleaved
# rounds each), alternating A and B, the whole sequence twice, so that a
# minute of machine noise hits both.  Tables go to OUT/{a,b}{1,2}.txt, JSON
# to OUT/{a,b}{1,2}/.  The way bench/RESULTS.md run 10 was made.
#
# usage: bench/compare.sh BUILD_A BUILD_B OUT [ROUNDS]
#   (each BUILD made with `make BUILD=... bench-build`, e.g. one of them in
#    a `git worktree` of the other tree)
set -eu
A=${1:?build dir A} B=${2:?build dir B} OUT=${3:?output dir} R=${4:-10}
for d in "$A" "$B"; do
	[ -x "$d/bench/devq_bench" ] || { echo "compare: $d/bench/devq_bench missing (make BUILD=$d bench-build)" >&2; exit 2; }
done
mkdir -p "$OUT"
for i in 1 2; do
	for tag in a b; do
		if [ $tag = a ]; then D=$A; else D=$B; fi
		mkdir -p "$OUT/$tag$i"
		echo "$(date -u +%H:%M:%S) $tag$i ($D), load $(cut -d' ' -f1 /proc/loadavg)"
		DEVQ_BENCH_OUT="$OUT/$tag$i" DEVQ_BUILD="$D" "$D/bench/devq_bench" --rounds "$R" \
			rtt tput fit > "$OUT/$tag$i.txt" 2>&1
		grep -E 'wait on point|batch 64|coalesced|L_launch' "$OUT/$tag$i.txt" | sed 's/^/    /'
	done
done
