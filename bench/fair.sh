#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Fairness between tenants (bench/fair_bench.c): the scenarios of
# bench/RESULTS.md (sessions, weights, many, and the shapes of 4, 8 and 16
# queues at weights 1:3), ROUNDS times each, against BUILD's devqd
# (default build).  As root: one tenant runs as uid 65534.
#
# usage: bench/fair.sh [BUILD] [ROUNDS] [OUT]
set -eu
B=${1:-build} R=${2:-3} OUT=${3:-$B/bench}
mkdir -p "$OUT"
make -s BUILD="$B" "$B/bench/fair_bench" >/dev/null
for i in $(seq "$R"); do
	echo "== round $i ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))"
	DEVQ_BUILD="$B" DEVQ_BENCH_OUT="$OUT" "$B/bench/fair_bench" sessions weights many shape4 shape8 shape16
done
