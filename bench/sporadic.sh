#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Sporadic clients and a daemon confined to one CPU (issue 28): BUILD's
# devqd confined (taskset -c 1, the client on CPU 0) and unconfined, null
# ops after gaps of 0, 1 ms and 10 ms, the first 300 ops of a connection,
# interleaved with the pinned futex, socket and spin floors, five runs;
# the daemon's voluntary context switches per op and its CPU over 10 s of
# idling.  A benchmark, not a test (timing decides): the figures go to
# bench/RESULTS.md.  About 2.5 minutes.
#
# usage: bench/sporadic.sh [BUILD [OUT [RUNS]]]    (defaults: build, BUILD/bench, 5)
#   BUILD needs build/bench/sporadic (make BUILD=... bench-build).
set -eu
B=${1:-build}
OUT=${2:-$B/bench}
RUNS=${3:-5}
[ -x "$B/bench/sporadic" ] || { echo "sporadic.sh: $B/bench/sporadic missing (make BUILD=$B bench-build)" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "sporadic.sh: needs two CPUs (0 and 1)" >&2; exit 2; }
mkdir -p "$OUT"
echo "sporadic.sh: $(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
DEVQ_BUILD=$B DEVQ_BENCH_OUT=$OUT "$B/bench/sporadic" --runs "$RUNS" --daemon-cpu 1 --client-cpu 0 --tag confined
DEVQ_BUILD=$B DEVQ_BENCH_OUT=$OUT "$B/bench/sporadic" --runs "$RUNS" --tag unconfined
echo "JSON: $OUT/sporadic-confined.json $OUT/sporadic-unconfined.json"
