#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Two builds side by side: rtt, tput and fit (medians of ROUNDS interleaved
# rounds each), then wc (work conservation), alternating A and B, the whole
# sequence twice, so that a minute of machine noise hits both.  Tables go to
# OUT/{a,b}{1,2}.txt, JSON to OUT/{a,b}{1,2}/.  The way bench/RESULTS.md
# runs 10 and 12 were made.
#
# usage: bench/compare.sh A B OUT [ROUNDS]
#   A and B: build directories (each made with `make BUILD=... bench-build`),
#   or git revisions of this repository, which are exported (git archive)
#   into OUT/src-{a,b} and built there first.
#
# wc runs with one client program for both daemons: the newer devq_bench
# of the two that knows it (a tree from before the benchmark existed has
# none), so only the daemon differs.
set -eu
A=${1:?build dir or revision A} B=${2:?build dir or revision B} OUT=${3:?output dir} R=${4:-10}
mkdir -p "$OUT"
build_rev() { # $1 revision, $2 tag: prints the build directory
	src="$OUT/src-$2"
	rm -rf "$src"
	mkdir -p "$src"
	git archive "$1" | tar -x -C "$src"
	echo "$(date -u +%H:%M:%S) building $1 in $src" >&2
	make -C "$src" -j2 bench-build > "$src.log" 2>&1 || {
		echo "compare: building $1 failed, see $src.log" >&2
		exit 2
	}
	echo "$src/build"
}
[ -d "$A" ] || A=$(build_rev "$A" a)
[ -d "$B" ] || B=$(build_rev "$B" b)
for d in "$A" "$B"; do
	[ -x "$d/bench/devq_bench" ] || { echo "compare: $d/bench/devq_bench missing (make BUILD=$d bench-build)" >&2; exit 2; }
done
WC=""
for d in "$B" "$A"; do
	if "$d/bench/devq_bench" 2>&1 | grep -q '|wc|'; then
		WC="$d/bench/devq_bench"
		break
	fi
done
[ -n "$WC" ] || echo "compare: neither build has the wc benchmark; skipping it" >&2
for i in 1 2; do
	for tag in a b; do
		if [ $tag = a ]; then D=$A; else D=$B; fi
		mkdir -p "$OUT/$tag$i"
		echo "$(date -u +%H:%M:%S) $tag$i ($D), load $(cut -d' ' -f1 /proc/loadavg)"
		DEVQ_BENCH_OUT="$OUT/$tag$i" DEVQ_BUILD="$D" "$D/bench/devq_bench" --rounds "$R" \
			rtt tput fit > "$OUT/$tag$i.txt" 2>&1
		if [ -n "$WC" ]; then
			DEVQ_BENCH_OUT="$OUT/$tag$i" DEVQ_BUILD="$D" "$WC" wc >> "$OUT/$tag$i.txt" 2>&1
		fi
		grep -E 'wait on point|batch 64|coalesced|L_launch|short ops' "$OUT/$tag$i.txt" | sed 's/^/    /'
	done
done
