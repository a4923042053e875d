#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Instructions per null op on the daemon's side, with valgrind's callgrind:
# stable where wall-clock numbers are not.  Runs devqd under callgrind twice
# per batch size, with N1 and N2 null ops, and divides the difference of the
# totals (every thread: loop and CPU workers) by N2 - N1, so start-up and
# shutdown cancel out.  That holds only once N1 is past the warm-up: the
# client keeps up to 4096 ops in flight (devq_bench's WINDOW), and the
# daemon's recycled job records and rings grow to that over the first
# ~4096 ops, so N1 is 8000.  (Up to bench/RESULTS.md run 15, N1 was 2000,
# inside the warm-up: ~90 instructions per op of growth were counted as
# per-op cost; run 16 gives both.)
#
# DEVQ_CG_OP=checksum measures a kernel op with two buffer arguments
# instead of the null op.
#
# The completion record ring is sized to the client's window
# (DEVQD_CRING_ENTRIES=8192, which devqd has honoured since before
# d7a7c26): devq_bench reads records 2048 at a time, so with the default
# 1024 entries whether records spill to the socket (devq_cmpl_enc, ~670
# instructions an op) depends on timing under callgrind, and batch 64
# moved by a third from one run to the next.  DEVQ_CG_RING=1024 measures
# the default ring, spill and all.
#
# usage: bench/callgrind.sh BUILD OUTDIR [--quick]
set -eu
BUILD=${1:?build dir}
OUT=${2:?output dir}
N1=${DEVQ_CG_N1:-8000} N2=${DEVQ_CG_N2:-28000}
[ "${3:-}" = "--quick" ] && { N1=${DEVQ_CG_N1:-8000}; N2=${DEVQ_CG_N2:-16000}; }
command -v valgrind >/dev/null || { echo "callgrind: valgrind not found (apt-get install valgrind)"; exit 1; }
[ -x "$BUILD/bench/devq_bench" ] || { echo "callgrind: $BUILD/bench/devq_bench missing (make BUILD=$BUILD bench-build)" >&2; exit 2; }
mkdir -p "$OUT"
DIR=$(mktemp -d /tmp/devq-cg-XXXXXX)
trap 'rm -rf "$DIR"' EXIT

run() { # batch n -> prints total Ir
	sock=$DIR/s.sock
	# shellcheck disable=SC2086
	DEVQD_CRING_ENTRIES=${DEVQ_CG_RING:-8192} valgrind --tool=callgrind --callgrind-out-file="$DIR/cg.$1.$2" \
		"$BUILD/devqd" --socket "$sock" --backend cpu ${DEVQD_ARGS:-} 2>"$DIR/vg.$1.$2.log" &
	pid=$!
	i=0
	while [ ! -S "$sock" ]; do
		i=$((i + 1)); [ $i -gt 600 ] && { echo "callgrind: devqd did not start" >&2; kill $pid; exit 1; }
		sleep 0.05
	done
	# A failed client must not leave devqd running: it holds the pipe of
	# the command substitution this runs in, which would then never end.
	# shellcheck disable=SC2086
	"$BUILD/bench/devq_bench" --socket "$sock" load "$2" "$1" ${DEVQ_CG_OP:+1 $DEVQ_CG_OP} >/dev/null ||
		{ echo "callgrind: devq_bench load failed" >&2; kill -TERM $pid; wait $pid; exit 1; }
	kill -TERM $pid
	wait $pid || true
	rm -f "$sock"
	awk '/^totals:/ { print $2 }' "$DIR/cg.$1.$2"
}

printf '## callgrind: daemon instructions per %s op (N1=%s, N2=%s, record ring %s)\n' "${DEVQ_CG_OP:-null}" $N1 $N2 "${DEVQ_CG_RING:-8192}"
printf '%10s %16s %16s %14s\n' batch "Ir(N1)" "Ir(N2)" "Ir/op"
json="{\n  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\",\n  \"n1\": $N1,\n  \"n2\": $N2,\n  \"devqd_args\": \"${DEVQD_ARGS:-}\",\n  \"op\": \"${DEVQ_CG_OP:-null}\",\n  \"cring_entries\": ${DEVQ_CG_RING:-8192},\n  \"rows\": ["
sepc=""
for b in 1 64; do
	i1=$(run $b $N1)
	i2=$(run $b $N2)
	per=$(( (i2 - i1) / (N2 - N1) ))
	printf '%10s %16s %16s %14s\n' "$b" "$i1" "$i2" "$per"
	json="$json$sepc\n    {\"batch\": $b, \"ir_n1\": $i1, \"ir_n2\": $i2, \"ir_per_op\": $per}"
	sepc=","
done
printf "$json\n  ]\n}\n" > "$OUT/callgrind.json"
callgrind_annotate "$DIR/cg.64.$N2" 2>/dev/null | sed -n '1,60p' > "$OUT/callgrind_top.txt" || true
echo "(top functions of the batch-64 run: $OUT/callgrind_top.txt)"
