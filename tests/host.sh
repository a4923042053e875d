#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Host executables (<devq/kernel.h>'s host ABI; repository keys cpu-host,
# cuda-host and their -symbol keys) against a real devqd, with the test
# library tests/host_exes.c: refusals at load (ABI version, no run
# function, a missing symbol, cpu with cpu-host, units without run_units),
# ops on two streams with one init per stream and never on the loop thread
# (ABI-1 structures, read no further than version 1's members), a reload
# while an op of the old version is in flight (CPU: it finishes with the
# old code, the next op runs the new; the old slots are finied once, after
# it), and at stop a fini for every init.  CPU backend, sliced ops (ABI 2
# units): every unit run once, a gemm's bits the same alone and under
# load, SIGTERM stopping a running gemm at its slice, max-op-ms stopping an
# op by its own device time (deadline_exceeded) while a gemm slowed by
# others still completes.  On the CPU backend by default (make check:
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
printf '%s\ncpu-host = h.so\ncpu-host-symbol = half_units\n' "$sig" > "$repo/half.exec"
printf 'signature = n:u64, spin_us:u64, hang:u64, dst:out u32[n]\ncpu-host = h.so\ncpu-host-symbol = tick_cpu\n' \
	> "$repo/tick.exec"
chmod 0644 "$repo"/*

# ---- refused at load, one clear line each ------------------------------
"$B/devqd" --check-executables "$repo" >"$tmp/check.out" 2>"$tmp/check.err"; rc=$?
check "check-executables exits 1 (got $rc)" '[ $rc = 1 ]'
check "an ABI version that differs: $(cat "$tmp/check.err")" \
	"grep -q \"badabi.exec: cpu-host h.so: 'bad_abi' has host ABI version 99; this devqd runs versions 1 and 2\" \"\$tmp/check.err\""
check "no run function" "grep -q \"norun.exec: cpu-host h.so: 'no_run' has no run function\" \"\$tmp/check.err\""
check "a missing symbol" "grep -q \"nosym.exec: cpu-host h.so: no symbol 'nosuch' in it\" \"\$tmp/check.err\""
check "cpu and cpu-host" 'grep -q "both.exec: cpu and cpu-host: give one of them, not both" "$tmp/check.err"'
check "ABI 2 with units but no run_units" \
	"grep -q \"half.exec: cpu-host h.so: 'half_units' has units but not run_units (both or neither)\" \"\$tmp/check.err\""
check "five refused, fill, slow and tick served" \
	'[ "$(grep -c "error: executables:" "$tmp/check.err")" = 5 ] && grep -q "5 refused, 3 good" "$tmp/check.err"'
rm -f "$repo/badabi.exec" "$repo/norun.exec" "$repo/nosym.exec" "$repo/both.exec" "$repo/half.exec"

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

if [ "$backend" = cpu ]; then
	# ---- sliced host ops (<devq/kernel.h> ABI 2 units) -----------------
	"$B/devctl" submit tick n=40 spin_us=200 hang=0 --out dst="$tmp/tick" >"$tmp/tick.out" 2>&1; rc=$?
	check "tick runs every unit once, in slices (rc $rc): $(cat "$tmp/tick.out")" \
		'[ $rc = 0 ] && [ "$(u32s "$tmp/tick")" = "$(seq -s " " 1 40)" ]'
	# Its cost comes from its ABI-2 structure (tick.exec declares none).
	"$B/devctl" list >"$tmp/list.out" 2>&1
	check "tick's cost from its structure: $(grep -A3 '^tick' "$tmp/list.out")" \
		'grep -A3 "^tick" "$tmp/list.out" | grep -q "cost: n\*spin_us"'
	# The same gemm alone and beside three others gives the same bits: its
	# tiles follow m, n, k only (before, its parts followed the free
	# cores, and a C wider than tall came out different under load).
	python3 -c 'import random, struct, sys
r = random.Random(7); n = int(sys.argv[1])
sys.stdout.buffer.write(struct.pack("<%df" % n, *(r.gauss(0, 1) for _ in range(n))))' 250000 >"$tmp/ga"
	python3 -c 'import random, struct, sys
r = random.Random(8); n = int(sys.argv[1])
sys.stdout.buffer.write(struct.pack("<%df" % n, *(r.gauss(0, 1) for _ in range(n))))' 777000 >"$tmp/gb"
	g="m=250 n=777 k=1000 alpha=1 beta=0 a=@$tmp/ga b=@$tmp/gb c=size:777000"
	"$B/devctl" submit gemm_f32 $g --out c="$tmp/c_alone" >/dev/null 2>&1
	big=$((1200 * 1200 * 4)); lp=
	for j in 1 2 3; do
		"$B/devctl" submit gemm_f32 m=1200 n=1200 k=1200 alpha=1 beta=0 a=size:$big \
			b=size:$big c=size:$big --queue $j >/dev/null 2>&1 &
		lp="$lp $!"
	done
	sleep 0.2
	"$B/devctl" submit gemm_f32 $g --out c="$tmp/c_load" >/dev/null 2>&1
	wait $lp
	check "a gemm gives the same bits alone and under load" \
		'[ -s "$tmp/c_alone" ] && cmp -s "$tmp/c_alone" "$tmp/c_load"'
	# SIGTERM with a long gemm running (seconds on a few cores): it stops at
	# the end of its slice, cancelled, C partly written (256 tiles of
	# 256x256); devqd exits 0.
	big=$((4096 * 4096 * 4))
	"$B/devctl" submit gemm_f32 m=4096 n=4096 k=4096 alpha=1 beta=0 a=size:$big b=size:$big \
		c=size:$big >"$tmp/term.out" 2>&1 &
	gp=$!
	sleep 0.5
	t0=$(date +%s%N)
	kill "$dpid"; wait "$dpid"; rc=$?; dpid=
	took=$(( ($(date +%s%N) - t0) / 1000000 ))
	wait "$gp"
	check "SIGTERM stops a running gemm at its slice: $(cat "$tmp/term.out")" \
		'grep -q "gemm_f32 queue 0 point 1: cancelled: gemm_f32: cancelled after [0-9]* of 256 units; its outputs are partly written" "$tmp/term.out"'
	# A liveness bound, not a speed target: the gemm alone takes seconds.
	check "devqd stopped $took ms after SIGTERM with a 4096^3 gemm running" '[ "$took" -lt 3000 ]'
	echo "test_host: devqd stopped $took ms after SIGTERM with a 4096^3 gemm running"
else
	kill "$dpid"; wait "$dpid"; rc=$?; dpid=
fi
check "devqd stops cleanly (rc $rc): $(tail -n 3 "$tmp/devqd.log")" '[ $rc = 0 ]'
ninit=$(grep -c "^init" "$hostlog"); nfini=$(grep -c "^fini " "$hostlog")
check "a fini for every init ($ninit, $nfini): $(tr '\n' ';' < "$hostlog")" '[ "$ninit" = "$nfini" ] && [ "$ninit" -ge 2 ]'
check "init and fini never on the loop thread" '! grep -q "main=1" "$hostlog"'
check "fini with the stream init had" '! grep -q "fini-wrong-stream" "$hostlog"'
if [ "$backend" = cuda ]; then
	check "no simulator rule broken: $(cat "$tmp/violations" 2>/dev/null | head -3)" '[ ! -s "$tmp/violations" ]'
fi

# ---- max-op-ms bounds a sliced op's own device time -------------------
if [ "$backend" = cpu ]; then
	"$B/devqd" --backend cpu --socket "$tmp/s3" --executables "$repo" --max-op-ms 1000 \
		>"$tmp/bound.log" 2>&1 &
	dpid=$!
	i=0
	while [ ! -S "$tmp/s3" ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
	# 3 s of work on one core: stopped once it has held the cores for
	# 1000 ms, deadline_exceeded naming max-op-ms, its output partly
	# written (the first units done, the last never run).
	DEVQ_SOCKET="$tmp/s3" "$B/devctl" submit tick n=3000 spin_us=1000 hang=0 \
		--out dst="$tmp/tickd" >"$tmp/tickd.out" 2>&1; rc=$?
	check "past max-op-ms: deadline_exceeded (rc $rc): $(cat "$tmp/tickd.out")" \
		'[ $rc = 1 ] && grep -q "deadline_exceeded: tick: [0-9]* ms of device time, past max-op-ms (1000 ms): stopped; outputs partly written" "$tmp/tickd.out"'
	# A gemm of about 0.2 s alone, slowed by three others that each run
	# into the bound: charged the cores it held, not its wall time, so it
	# completes.
	big=$((2048 * 2048 * 4)); lp=
	for j in 1 2 3; do
		DEVQ_SOCKET="$tmp/s3" "$B/devctl" submit gemm_f32 m=2048 n=2048 k=2048 alpha=1 beta=0 \
			a=size:$big b=size:$big c=size:$big >"$tmp/load$j.out" 2>&1 &
		lp="$lp $!"
	done
	sleep 0.2
	small=$((1024 * 1024 * 4))
	DEVQ_SOCKET="$tmp/s3" "$B/devctl" submit gemm_f32 m=1024 n=1024 k=1024 alpha=1 beta=0 \
		a=size:$small b=size:$small c=size:$small >"$tmp/slowed.out" 2>&1; rc=$?
	wait $lp
	check "a gemm slowed by three others completes (rc $rc): $(cat "$tmp/slowed.out")" '[ $rc = 0 ]'
	kill "$dpid"; wait "$dpid"; rc=$?; dpid=
	check "that devqd stops cleanly (rc $rc)" '[ $rc = 0 ]'
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
