#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Host executables (<devq/kernel.h>'s host ABI; repository keys cpu-host,
# cuda-host and their -symbol keys) against a real devqd, with the test
# library tests/host_exes.c: refusals at load (ABI version, no run
# function, a missing symbol, cpu with cpu-host), ops on two streams with
# one init per stream and never on the loop thread, a reload while an op of
# the old version is in flight (CPU: it finishes with the old code, the
# next op runs the new; the old slots are finied once, after it), and at
# stop a fini for every init.  On the CPU backend by default (make check:
# test_host); with DEVQ_TEST_BACKEND=cuda under the driver simulator (make
# check-cuda-sim), where the library enqueues cuMemsetD32Async on the op's
# stream, and gemm_f32 reports cuBLAS unavailable.
# Prints a Check-style summary line.
B=${DEVQ_BUILD:-build}
CC=${CC:-cc}
backend=${DEVQ_TEST_BACKEND:-cpu}
if [ "$backend" = cuda ] && [ -z "$DEVQ_CUDASIM_DIR" ]; then
	echo "test_host: the CUDA backend needs the simulator (make check-cuda-sim), skipped"
	echo "100%: Checks: 0, Failures: 0, Errors: 0"
	exit 0
fi
tmp=$(mktemp -d)
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
check() { if eval "$2"; then ok; else bad "$1"; fi; }
dpid=
cleanup() {
	[ -n "$dpid" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null
	[ -n "${DEVQ_KEEP_TMP:-}" ] && echo "kept $tmp" || rm -rf "$tmp"
}
trap cleanup EXIT
put() { cp "$1" "$2.new" && chmod 0644 "$2.new" && mv -f "$2.new" "$2"; }
wait_log() {
	i=0
	while [ "$(grep -c -- "$1" "$3")" -lt "$2" ] && [ $i -lt 500 ]; do
		sleep 0.02; i=$((i + 1))
	done
	[ "$(grep -c -- "$1" "$3")" -ge "$2" ]
}
u32s() { od -An -tu4 -v "$1" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//'; }
lib() { "$CC" -std=c11 -O2 -Ikernels -shared -fPIC -DTAG=$2 -o "$1" tests/host_exes.c; }

repo=$tmp/repo
mkdir -m 0755 "$repo"
lib "$tmp/h1.so" 1 && lib "$tmp/h2.so" 2 || { echo "cannot build tests/host_exes.c"; exit 1; }
put "$tmp/h1.so" "$repo/h.so"
put "$tmp/h1.so" "$repo/s.so"
sig='signature = n:u64, value:u32, dst:out u32[n]'
printf '%s\ncpu-host = h.so\ncpu-host-symbol = fill_cpu\ncuda-host = h.so\ncuda-host-symbol = fill_cuda\n' \
	"$sig" > "$repo/fill.exec"
printf 'signature = ns:u64, n:u64, value:u32, dst:out u32[n]\ncpu-host = s.so\ncpu-host-symbol = slow_cpu\n' \
	> "$repo/slow.exec"
printf '%s\ncpu-host = h.so\ncpu-host-symbol = bad_abi\n' "$sig" > "$repo/badabi.exec"
printf '%s\ncpu-host = h.so\ncpu-host-symbol = no_run\n' "$sig" > "$repo/norun.exec"
printf '%s\ncpu-host = h.so\ncpu-host-symbol = nosuch\n' "$sig" > "$repo/nosym.exec"
printf '%s\ncpu = h.so\ncpu-host = h.so\n' "$sig" > "$repo/both.exec"
chmod 0644 "$repo"/*

# ---- refused at load, one clear line each ------------------------------
"$B/devqd" --check-executables "$repo" >"$tmp/check.out" 2>"$tmp/check.err"; rc=$?
check "check-executables exits 1 (got $rc)" '[ $rc = 1 ]'
check "an ABI version that differs: $(cat "$tmp/check.err")" \
	"grep -q \"badabi.exec: cpu-host h.so: 'bad_abi' has host ABI version 99; this devqd runs versions 1 and 2\" \"\$tmp/check.err\""
check "no run function" "grep -q \"norun.exec: cpu-host h.so: 'no_run' has no run function\" \"\$tmp/check.err\""
check "a missing symbol" "grep -q \"nosym.exec: cpu-host h.so: no symbol 'nosuch' in it\" \"\$tmp/check.err\""
check "cpu and cpu-host" 'grep -q "both.exec: cpu and cpu-host: give one of them, not both" "$tmp/check.err"'
check "four refused, fill and slow served" \
	'[ "$(grep -c "error: executables:" "$tmp/check.err")" = 4 ] && grep -q "4 refused, 2 good" "$tmp/check.err"'
rm -f "$repo/badabi.exec" "$repo/norun.exec" "$repo/nosym.exec" "$repo/both.exec"

# ---- a daemon serving them ----------------------------------------------
hostlog=$tmp/hostlog
: > "$hostlog"
if [ "$backend" = cuda ]; then
	export LD_LIBRARY_PATH="$DEVQ_CUDASIM_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	export DEVQ_CUDASIM_REPORT="$tmp/violations"
fi
DEVQ_TEST_HOSTLOG=$hostlog "$B/devqd" --backend "$backend" --socket "$tmp/s" --executables "$repo" \
	--streams 2 -v >"$tmp/devqd.log" 2>&1 &
dpid=$!
i=0
while [ ! -S "$tmp/s" ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
export DEVQ_SOCKET="$tmp/s"
[ "$backend" = cuda ] && unset LD_LIBRARY_PATH

# Two queues of one client, each op on its own stream: one init each.
# (devctl prints a small output buffer after each op.)
"$B/devctl" submit fill n=4 value=10 dst=size:16 --queue 0 \
	:: fill n=4 value=20 dst=size:16 --queue 1 >"$tmp/sub.out" 2>&1; rc=$?
check "fill on two queues (rc $rc): $(cat "$tmp/sub.out")" '[ $rc = 0 ]'
check "queue 0's result is value + tag 1" 'grep -q "dst = 11 11 11 11" "$tmp/sub.out"'
check "queue 1's result" 'grep -q "dst = 21 21 21 21" "$tmp/sub.out"'
"$B/devctl" submit fill n=4 value=30 dst=size:16 --repeat 5 >/dev/null 2>&1
# Sporadic short ops, each alone on an idle device: the loop runs such an
# op itself when it is learned to be short, but never a host executable's
# (its init and the cores it waits for would stall the loop).
j=0
while [ $j -lt 30 ]; do
	"$B/devctl" submit fill n=4 value=30 dst=size:16 >/dev/null 2>&1
	j=$((j + 1))
done
check "no host op run on the loop thread: $(grep -c run-on-loop "$hostlog")" \
	'! grep -q "^run-on-loop" "$hostlog"'
inits=$(grep -c "^init 1 " "$hostlog")
check "one init per stream used, no more ($inits: $(tr '\n' ';' < "$hostlog"))" '[ "$inits" -ge 1 ] && [ "$inits" -le 2 ]'

if [ "$backend" = cpu ]; then
	# ---- reload while an op of the old code is in flight ---------------
	"$B/devctl" submit slow ns=800000000 n=4 value=100 dst=size:16 --out dst="$tmp/slow_old" \
		>"$tmp/slow.out" 2>&1 &
	spid=$!
	sleep 0.3
	put "$tmp/h2.so" "$repo/s.so"
	put "$tmp/h2.so" "$repo/h.so"
	kill -HUP "$dpid"
	wait_log "executables: reloaded" 1 "$tmp/devqd.log"
	# The reload has been applied, the op still runs (0.8 s): the old
	# fill's slots may be gone already, the old slow's must not.
	check "old slow not finied while its op runs: $(tr '\n' ';' < "$hostlog")" \
		'kill -0 "$spid" && ! grep -q "^fini 1 slow" "$hostlog"'
	wait "$spid"; rc=$?
	check "the op in flight completes (rc $rc): $(cat "$tmp/slow.out")" '[ $rc = 0 ]'
	check "with the old code: $(u32s "$tmp/slow_old")" '[ "$(u32s "$tmp/slow_old")" = "101 101 101 101" ]'
	"$B/devctl" submit slow ns=0 n=4 value=100 dst=size:16 --out dst="$tmp/slow_new" >/dev/null 2>&1
	check "the next op runs the new code: $(u32s "$tmp/slow_new")" '[ "$(u32s "$tmp/slow_new")" = "102 102 102 102" ]'
	wait_log "^fini 1 " "$(grep -c "^init 1 " "$hostlog")" "$hostlog"
	check "every old slot finied once: $(tr '\n' ';' < "$hostlog")" \
		'[ "$(grep -c "^fini 1 " "$hostlog")" = "$(grep -c "^init 1 " "$hostlog")" ]'
else
	# ---- reloads under load: every op completes, no rule broken --------
	( j=0; while [ $j -lt 40 ]; do
		"$B/devctl" submit fill n=64 value=1 dst=size:256 >/dev/null 2>&1 || echo bad >> "$tmp/loadfail"
		j=$((j + 1)); done ) &
	lpid=$!
	for t in 2 1 2; do
		put "$tmp/h$t.so" "$repo/h.so"
		kill -HUP "$dpid"
		sleep 0.2
	done
	wait "$lpid"
	check "40 ops through 3 reloads all completed" '[ ! -f "$tmp/loadfail" ]'
	"$B/devctl" submit fill n=4 value=10 dst=size:16 --out dst="$tmp/onew" >/dev/null 2>&1
	check "after the reloads, the newest code (tag 2): $(u32s "$tmp/onew")" '[ "$(u32s "$tmp/onew")" = "12 12 12 12" ]'
	"$B/devctl" submit gemm_f32 m=1 n=1 k=1 alpha=1 beta=0 a=size:4 b=size:4 c=size:4 \
		>"$tmp/gemm.out" 2>&1; rc=$?
	check "gemm_f32 on the simulator: refused naming cuBLAS: $(cat "$tmp/gemm.out")" \
		'[ $rc != 0 ] && grep -q "gemm_f32: init: cuBLAS unavailable: .*cuGetExportTable" "$tmp/gemm.out"'
fi

kill "$dpid"; wait "$dpid"; rc=$?; dpid=
check "devqd stops cleanly (rc $rc): $(tail -n 3 "$tmp/devqd.log")" '[ $rc = 0 ]'
ninit=$(grep -c "^init" "$hostlog"); nfini=$(grep -c "^fini " "$hostlog")
check "a fini for every init ($ninit, $nfini): $(tr '\n' ';' < "$hostlog")" '[ "$ninit" = "$nfini" ] && [ "$ninit" -ge 2 ]'
check "init and fini never on the loop thread" '! grep -q "main=1" "$hostlog"'
check "fini with the stream init had" '! grep -q "fini-wrong-stream" "$hostlog"'
if [ "$backend" = cuda ]; then
	check "no simulator rule broken: $(cat "$tmp/violations" 2>/dev/null | head -3)" '[ ! -s "$tmp/violations" ]'
fi

# ---- a host executable that crashes takes devqd down, and says whose
# code it was (systemd's Restart=on-failure starts a fresh one) ----------
if [ "$backend" = cpu ]; then
	printf '%s\ncpu-host = h.so\ncpu-host-symbol = crash_cpu\n' \
		'signature = n:u64, value:u32, dst:out u32[n]' > "$repo/crash.exec"
	chmod 0644 "$repo/crash.exec"
	"$B/devqd" --backend cpu --socket "$tmp/s2" --executables "$repo" >"$tmp/crash.log" 2>&1 &
	dpid=$!
	i=0
	while [ ! -S "$tmp/s2" ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
	DEVQ_SOCKET="$tmp/s2" "$B/devctl" submit crash n=12345 value=0 dst=size:49380 >/dev/null 2>&1
	wait "$dpid"; rc=$?; dpid=
	# (Under ASan or TSan the sanitizer reports the SEGV and exits 1 or 66.)
	check "a crashing host executable ends devqd by its signal (rc $rc)" \
		'[ $rc -gt 128 ] || { [ -n "${DEVQ_SANITIZER:-}" ] && [ $rc != 0 ] && grep -q "Sanitizer: SEGV" "$tmp/crash.log"; }'
	check "the log names it: $(tail -n 2 "$tmp/crash.log")" \
		'grep -q "devqd: fatal signal 11 in host executable crash: devqd stops" "$tmp/crash.log"'
fi

total=$((pass + fail))
echo "$(( total ? pass * 100 / total : 100 ))%: Checks: $total, Failures: $fail, Errors: 0"
[ $fail = 0 ]
