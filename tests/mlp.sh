#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# examples/mlp/ in `make check` (test_mlp): 4 client processes at once on a
# devqd of this build (CPU backend), small sizes; each must report its
# output correct against NumPy.  Prints a Check-style summary line.
B=${DEVQ_BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
case "${DEVQ_SANITIZER:-}" in
1|tsan) echo "test_mlp: skipped under sanitizers (a Python client; the daemon's paths are the C tests')"
	echo "100%: Checks: 0, Failures: 0, Errors: 0"; exit 0 ;;
esac
tmp=$(mktemp -d)
dpid=
cleanup() { [ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
"$B/devqd" --backend cpu --socket "$tmp/s" >"$tmp/devqd.log" 2>&1 &
dpid=$!
i=0
while [ ! -S "$tmp/s" ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
build=$(cd "$B" && pwd)
PYTHONPATH="$build/python" DEVQ_LIBRARY="$build/libdevq.so.0" \
	"$PYTHON" examples/mlp/mlp.py --socket "$tmp/s" --procs 4 --small --iters 3 >"$tmp/out" 2>&1; rc=$?
cat "$tmp/out"
fail=0
[ $rc = 0 ] || { echo "FAIL: mlp.py exited $rc"; fail=$((fail + 1)); }
[ "$(grep -c ': correct' "$tmp/out")" = 4 ] || { echo "FAIL: not 4 correct outputs"; fail=$((fail + 1)); }
grep -q '^total: ' "$tmp/out" || { echo "FAIL: no total line"; fail=$((fail + 1)); }
echo "$(( (3 - fail) * 100 / 3 ))%: Checks: 3, Failures: $fail, Errors: 0"
[ $fail = 0 ]
