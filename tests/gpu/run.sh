#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tests/gpu/run.sh: proves devqd on a real NVIDIA GPU in a few minutes.
#
# How it is run
#   On the build machine (the CUDA toolkit and devq's build dependencies):
#       make gpu-bundle
#   which leaves build/gpu-bundle: devqd, devctl, the check programs, this
#   script, the fatbin, and every shared library they need (libuv,
#   protobuf-c, libsystemd and its dependencies; the C library and its
#   loader too, used only when the GPU host's C library is older).  Copy
#   that folder to the GPU machine (the device tool: carry build/gpu-bundle)
#   and run
#       sh build/gpu-bundle/run.sh            (or: sh tests/gpu/run.sh DIR)
#   A GPU machine that has the build dependencies can instead run
#       make && sh tests/gpu/run.sh build
#   Nothing is installed; devqd runs on a private socket under a temporary
#   directory, restarted by this script when it exits 69 (device lost), as
#   systemd's Restart=on-failure would.
#
# What it checks (one PASS/FAIL line each, then a summary)
#   1. the fatbin holds sm_80 and sm_90 SASS and PTX (cuobjdump, if present)
#   2. kernel_check: every kernel against the CPU implementation, random
#      data, several sizes/offsets/grids
#   3. gpu_check order: cross-queue dependencies on real streams (explicit
#      waits and buffer hazards), results checked; unrelated work overlaps
#   4. gpu_check seed: 5 ms spin -> device ~5 ms, submit in µs, the buffer
#      released only after the device end
#   4b. gpu_check place: a null op of a second session, bound by queue
#      count to the stream where a 300 ms op runs, starts within 1 ms on an
#      idle stream (work-conserving placement)
#   5. a short benchmark: null-op round trip through devqd against a
#      cuLaunchKernel + cuEventSynchronize loop (native_bench, run before
#      devqd starts so EXCLUSIVE_PROCESS compute mode allows it), ratio; and
#      replayable batches of 64 (one CUDA graph launch) against a native
#      loop of 64 cuLaunchKernel calls, µs per kernel: graphs must win
#   6. gpu_check devbuf, roimport, prio, cancel, deadlock, onegraph: device
#      buffers with FILL and COPY (an overlapping one too), a read-only
#      import, a high-priority queue, cancellation when a client leaves,
#      the replayable batch with a failed wait, a replayable batch of 64
#      as one graph launch
#   7. leak check: the device's free memory (cuMemGetInfo, from
#      kernel_check --meminfo) and devqd's pinned pages before and after
#      the device-buffer checks
#   8. gpu_check fault: the fault kernel -> device_lost to every session,
#      devqd exits 69, a fresh one serves, the client reconnects and its
#      shared buffer is intact
#   9. cancellation on stop: 16 long spins queued, SIGTERM: devqd exits 0
#      within its grace
# Which C library: the bundle carries the build machine's C library, its
# loader and its companions (libm, libdl, libpthread, librt, which the
# host's libcuda.so.1 still links on older distributions), used only when
# kernel_check --probe, which really loads the driver, fails with the
# host's.  Only devq's programs see the bundle's library path; host tools
# (nvidia-smi, awk) run as they are.
# Exit status: 0 when every check passed.
set -u

B=${1:-$(dirname "$0")}
case $B in
build|build-*) BIN=$B; TOOLS=$B/tests/gpu; FATBIN=$B/kernels/devq_kernels.fatbin ;;
*) BIN=$B/bin; TOOLS=$B/bin; FATBIN=$B/devq_kernels.fatbin ;;
esac
[ -x "$BIN/devqd" ] || { echo "run.sh: no devqd in $BIN (run 'make gpu-bundle' first)"; exit 2; }

# The bundled libraries, then the host's (libcuda.so.1 comes from the
# host), for devq's programs only.
RUN="env LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The probe loads libcuda.so.1 and calls cuInit: a C library too old for
# our programs, or a driver that cannot load beside it, shows here.
if $RUN "$TOOLS/kernel_check" --probe >/tmp/devq-probe.$$ 2>&1; then
	cat /tmp/devq-probe.$$
elif [ -x "$B/lib/glibc/ld-linux-x86-64.so.2" ]; then
	cat /tmp/devq-probe.$$
	# The host's C library is older than the build machine's: use ours,
	# with its companions, so the driver links against one C library.
	RUN="$B/lib/glibc/ld-linux-x86-64.so.2 --library-path $B/lib:$B/lib/glibc:/usr/lib/x86_64-linux-gnu:/usr/lib64:/lib64"
	echo "run.sh: using the bundled C library"
	$RUN "$TOOLS/kernel_check" --probe
else
	cat /tmp/devq-probe.$$
fi
rm -f /tmp/devq-probe.$$

T=$(mktemp -d /tmp/devq-gpu-XXXXXX)
SOCK=$T/devqd.sock
PASS=0
FAIL=0
SUP=
cleanup() {
	[ -n "$SUP" ] && kill "$SUP" 2>/dev/null
	[ -f "$T/devqd.pid" ] && kill "$(cat "$T/devqd.pid")" 2>/dev/null
	sleep 0.2
}
trap cleanup EXIT INT TERM

tally() { # reads check output on stdin, echoes it, counts PASS/FAIL lines
	while IFS= read -r line; do
		echo "$line"
		case $line in
		PASS*) echo x >>"$T/pass" ;;
		FAIL*) echo x >>"$T/fail" ;;
		esac
	done
}
count() { [ -f "$1" ] && wc -l <"$1" || echo 0; }
step() { # NAME TIMEOUT CMD...: runs one check program, a crash or timeout is a FAIL
	name=$1; limit=$2; shift 2
	echo "== $name"
	timeout "$limit" "$@" >"$T/out" 2>&1
	rc=$?
	tally <"$T/out"
	if [ $rc -ne 0 ] && ! grep -q '^FAIL' "$T/out"; then
		echo "FAIL $name: exit status $rc" | tally
	fi
	return 0
}

echo "devq GPU checks, $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n)"
command -v nvidia-smi >/dev/null && nvidia-smi -L

# 1. what the fatbin holds, read by the toolkit's own tool where there is one
echo "== fatbin"
if command -v cuobjdump >/dev/null && [ -f "$FATBIN" ]; then
	cuobjdump --list-elf --list-ptx "$FATBIN" >"$T/objdump" 2>&1
	cat "$T/objdump"
	for a in sm_80 sm_90; do
		if grep -q "$a" "$T/objdump"; then echo "PASS fatbin $a SASS" | tally
		else echo "FAIL fatbin $a SASS: not listed" | tally; fi
	done
	if grep -qi 'ptx' "$T/objdump"; then echo "PASS fatbin PTX" | tally
	else echo "FAIL fatbin PTX: not listed" | tally; fi
else
	echo "(no cuobjdump here; tests/test_fatbin reads the fatbin's headers in make check)"
fi

# 2. every kernel against the CPU reference
step kernel_check 120 $RUN "$TOOLS/kernel_check"
# The native baseline before devqd starts: in EXCLUSIVE_PROCESS compute
# mode a second process cannot have a context beside devqd's.
timeout 120 $RUN "$TOOLS/native_bench" 2000 >"$T/b2" 2>&1
# Device free memory: cuMemGetInfo from a process of its own, or, where the
# compute mode allows devqd's context only, nvidia-smi's count.
meminfo() {
	m=$($RUN "$TOOLS/kernel_check" --meminfo 2>/dev/null | awk '/^MEMINFO/ { print $3 }')
	if [ -z "$m" ] && command -v nvidia-smi >/dev/null; then
		m=$(nvidia-smi -i 0 --query-gpu=memory.free --format=csv,noheader,nounits 2>/dev/null |
			awk '{ print $1 * 1048576 }')
	fi
	echo "$m"
}

# devqd under a supervisor that restarts it on status 69, like systemd.
supervise() {
	n=0
	while :; do
		n=$((n + 1))
		$RUN "$BIN/devqd" --backend cuda --socket "$SOCK" --test-fault-injection -v \
			>>"$T/devqd.log" 2>&1 &
		echo $! >"$T/devqd.pid"
		wait $!
		st=$?
		echo "$(date +%s.%N) devqd run $n exited with status $st" >>"$T/sup.log"
		[ "$st" = 69 ] || break
	done
}
supervise &
SUP=$!
i=0
while [ ! -S "$SOCK" ] && [ $i -lt 300 ] && kill -0 "$SUP" 2>/dev/null; do
	sleep 0.1
	i=$((i + 1))
done
if [ ! -S "$SOCK" ]; then
	echo "FAIL devqd start: devqd --backend cuda is not serving" | tally
	cat "$T/devqd.log"
else
	grep -m1 'backend cuda' "$T/devqd.log"
	# 3, 4: ordering and the seed example on real streams
	step order 120 $RUN "$TOOLS/gpu_check" "$SOCK" order
	step seed 60 $RUN "$TOOLS/gpu_check" "$SOCK" seed
	# 4b: work-conserving placement: another session's null op beside a
	# 300 ms op starts on an idle stream within 1 ms
	step place 60 $RUN "$TOOLS/gpu_check" "$SOCK" place
	# 5: round trip through devqd against the native loop, same run
	echo "== bench"
	timeout 120 $RUN "$TOOLS/gpu_check" "$SOCK" bench 2000 >"$T/b1" 2>&1
	cat "$T/b1" "$T/b2"
	d=$(awk '/^BENCH devqd_roundtrip_us/ { print $4 }' "$T/b1")
	nb=$(awk '/^BENCH native_roundtrip_us/ { print $4 }' "$T/b2")
	ns=$(awk '/^BENCH native_spin_roundtrip_us/ { print $4 }' "$T/b2")
	if [ -n "$d" ] && [ -n "$nb" ]; then
		echo "PASS bench: null op round trip devqd ${d} µs, native blocking-sync ${nb} µs" \
			"(ratio $(awk -v a="$d" -v b="$nb" 'BEGIN { printf "%.2f", a / b }')), native" \
			"spin ${ns:-?} µs" | tally
	else
		echo "FAIL bench: no result" | tally
	fi
	# 5b: replayable batches (CUDA graphs) against native launch loops
	timeout 120 $RUN "$TOOLS/gpu_check" "$SOCK" graph 200 >"$T/g1" 2>&1
	cat "$T/g1"
	gp=$(awk '/^BENCH devqd_batch64_us_per_kernel/ { print $4 }' "$T/g1")
	gr=$(awk '/^BENCH devqd_batch64_us_per_kernel/ { print $6 }' "$T/g1")
	gn=$(awk '/^BENCH native_batch64_us_per_kernel/ { print $3 }' "$T/b2")
	if [ -n "$gr" ] && [ -n "$gn" ] &&
	   awk -v a="$gr" -v b="$gn" 'BEGIN { exit !(a < b) }'; then
		res=PASS
	else
		res=FAIL
	fi
	echo "$res graph replay: ${gr:-?} µs per kernel in replayable batches of 64, plain" \
		"${gp:-?}, native cuLaunchKernel loop ${gn:-?} (ratio" \
		"$(awk -v a="${gr:-0}" -v b="${gn:-1}" 'BEGIN { printf "%.2f", a / b }'))" | tally
	# 6: device buffers, imports, priorities, cancellation, replayable runs;
	# 7: nothing leaks on the device or in pinned pages
	mem0=$(meminfo)
	pin0=$(awk '/^VmPin/ { print $2 }' "/proc/$(cat "$T/devqd.pid")/status" 2>/dev/null)
	for m in devbuf roimport prio cancel deadlock onegraph; do
		step "$m" 60 $RUN "$TOOLS/gpu_check" "$SOCK" "$m"
	done
	sleep 1
	mem1=$(meminfo)
	pin1=$(awk '/^VmPin/ { print $2 }' "/proc/$(cat "$T/devqd.pid")/status" 2>/dev/null)
	if [ -n "$mem0" ] && [ -n "$mem1" ] &&
	   awk -v a="$mem0" -v b="$mem1" 'BEGIN { exit !(b >= a - 64 * 1048576) }'; then
		res=PASS
	else
		res=FAIL
	fi
	echo "$res leak check: device free memory ${mem0:-?} B before, ${mem1:-?} B after;" \
		"devqd pinned ${pin0:-?} kB before, ${pin1:-?} kB after" | tally
	# 8: device loss and recovery
	step fault 60 $RUN "$TOOLS/gpu_check" "$SOCK" fault
	if grep -q 'exited with status 69' "$T/sup.log" 2>/dev/null; then
		echo "PASS device lost: devqd exited 69 and was restarted" | tally
	else
		echo "FAIL device lost: no exit with status 69 (see below)" | tally
		cat "$T/sup.log" 2>/dev/null
	fi
	grep -m3 'device lost' "$T/devqd.log"
	# 9: a stop with long ops queued: those not on the device are cancelled
	i=0
	while [ ! -S "$SOCK" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	step stopload 30 $RUN "$TOOLS/gpu_check" "$SOCK" stopload
	t0=$(date +%s.%N)
	kill -TERM "$(cat "$T/devqd.pid")" 2>/dev/null
	wait "$SUP"
	SUP=
	t1=$(date +%s.%N)
	if tail -n 1 "$T/sup.log" | grep -q 'exited with status 0$'; then
		echo "PASS cancel on stop: devqd exited 0 in $(awk -v a="$t0" -v b="$t1" \
			'BEGIN { printf "%.1f", b - a }') s with 16 spins of 300 ms queued" | tally
	else
		echo "FAIL cancel on stop: $(tail -n 1 "$T/sup.log")" | tally
	fi
fi

echo "== summary: $(count "$T/pass") passed, $(count "$T/fail") failed"
[ "$(count "$T/fail")" = 0 ] && [ "$(count "$T/pass")" -gt 0 ]
