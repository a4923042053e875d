#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Instructions per null op on the daemon's side, with valgrind's callgrind:
# stable where wall-clock numbers are not.  Runs devqd under callgrind twice
# per batch size, with N1 and N2 null ops, and divides the difference of the
# totals (every thread: loop and CPU workers) by N2 - N1, so start-up and
# shutdown cancel out.
#
# usage: bench/callgrind.sh BUILD OUTDIR [--quick]
set -eu
BUILD=${1:?build dir}
OUT=${2:?output dir}
N1=2000 N2=12000
[ "${3:-}" = "--quick" ] && { N1=1000; N2=5000; }
command -v valgrind >/dev/null || { echo "callgrind: valgrind not found (apt-get install valgrind)"; exit 1; }
mkdir -p "$OUT"
DIR=$(mktemp -d /tmp/devq-cg-XXXXXX)
trap 'rm -rf "$DIR"' EXIT

run() { # batch n -> prints total Ir
	sock=$DIR/s.sock
	# shellcheck disable=SC2086
	valgrind --tool=callgrind --callgrind-out-file="$DIR/cg.$1.$2" \
		"$BUILD/devqd" --socket "$sock" --backend cpu ${DEVQD_ARGS:-} 2>"$DIR/vg.$1.$2.log" &
	pid=$!
	i=0
	while [ ! -S "$sock" ]; do
		i=$((i + 1)); [ $i -gt 600 ] && { echo "callgrind: devqd did not start" >&2; kill $pid; exit 1; }
		sleep 0.05
	done
	"$BUILD/bench/devq_bench" --socket "$sock" load "$2" "$1" >/dev/null
	kill -TERM $pid
	wait $pid || true
	rm -f "$sock"
	awk '/^totals:/ { print $2 }' "$DIR/cg.$1.$2"
}

printf '## callgrind: daemon instructions per null op (N1=%s, N2=%s)\n' $N1 $N2
printf '%10s %16s %16s %14s\n' batch "Ir(N1)" "Ir(N2)" "Ir/op"
json="{\n  \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\",\n  \"n1\": $N1,\n  \"n2\": $N2,\n  \"devqd_args\": \"${DEVQD_ARGS:-}\",\n  \"rows\": ["
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
