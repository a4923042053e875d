#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tests/gpu/run.sh: proves devqd on a real NVIDIA GPU in a few minutes, and
# always ends with its results.
#
# How it is run
#   On the build machine (the CUDA 13.0 toolkit and devq's build
#   dependencies):
#       make gpu-bundle
#   which leaves build/gpu-bundle: devqd, devctl, the check programs, this
#   script, the fatbin, and every shared library they need (libuv,
#   protobuf-c, libsystemd and its dependencies; the C library and its
#   loader too, used only when the GPU host's C library is too old).
#   build/ is ignored by git, so the folder travels to the GPU machine only
#   when the run carries it (the device tool: carry build/gpu-bundle); there
#       sh build/gpu-bundle/run.sh            (or: sh tests/gpu/run.sh DIR)
#   A GPU machine that has the build dependencies can instead run
#       make && sh tests/gpu/run.sh build
#   Nothing is installed; devqd runs on a private socket under a temporary
#   directory, restarted by this script when it exits 69 (device lost), as
#   systemd's Restart=on-failure would.
#
# What it leaves (at most 8 files: the device machine returns no more)
#   in $OUT when it is set, else in a folder named on the first line of
#   output, written as the run goes:
#     summary.txt     one line per check, "PASS|FAIL|SKIP|INFO NAME: figure"
#     steps.log       every step's output
#     devqd.log       devqd's log (every run of it)
#     supervisor.log  devqd's starts and exits
#   On any FAIL the tail of devqd.log is printed too.
#
# Time: one deadline for the whole run, DEVQ_GPU_DEADLINE seconds (default
# 420, at most 480, the device machine's 10 minutes per command less room);
# each step runs for the smaller of its own limit and what is left.  Steps
# run in the background and are waited for, so INT or TERM ends the run at
# once: the step is killed, devqd is stopped (continued first, should it be
# stopped, then killed if it does not exit), and summary.txt keeps what was
# done.  After a step times out, a quick `devctl status` decides whether
# devqd still answers; when it does not, the remaining daemon steps SKIP.
#
# What it checks
#   fatbin       sm_80 and sm_90 SASS and compute_90 PTX, each by its own
#                entry (cuobjdump, if present)
#   kernel_check every kernel against the CPU implementation
#   order, seed, place   gpu_check: cross-queue dependencies on real
#                streams, the 5 ms seed example, work-conserving placement
#   bench        INFO: devq/native null-op round trip ratio (target <= 2)
#   sporadic     INFO: a null op after idle gaps of 1 and 10 ms through
#                devqd against a native launch + synchronize after the same
#                gaps (p50 and p99; no target yet)
#   graph        INFO: replayable batches of 64 (one graph launch) against
#                a native loop of 64 cuLaunchKernel (target < 1)
#   cublas, gemm INFO: gemm_f32 4096^3 on device buffers through devqd
#                against cuBLAS in one process (median device time, ratio);
#                SKIP where the host has no libcublas.so.13 (search path:
#                $DEVQ_CUBLAS, the dynamic linker's, /usr/local/cuda/lib64,
#                /usr/local/cuda-13/lib64, /usr/lib/x86_64-linux-gnu)
#   iso          INFO: tenant L's gemm_f32 m=8, n=k=1024 every 10 ms, p50
#                and p99 of submit to completion, alone and while another
#                session keeps two 4096^3 gemm_f32 in flight (a cuBLAS
#                flood); SKIP with cublas (no bound yet: the figures first)
#   devbuf, roimport, prio, cancel, deadlock, onegraph   gpu_check (prio:
#                a high-priority queue with every SM busy; roimport SKIPs
#                where the device lacks read-only host registration)
#   leak         devqd's own counters (buffers, mapped bytes, ops in
#                flight) and the device's free memory before and after
#                those; FAIL when devqd is gone
#   fault        device loss: devqd exits 69, a fresh one serves, the
#                client reconnects with its shared buffer intact
#   stop         16 long spins queued, SIGTERM: devqd exits 0 within grace
#
# Which C library: the bundle carries the build machine's C library, its
# loader and its companions, used only when kernel_check --probe fails for
# a C library reason (a symbol version GLIBC_x missing) with the host's.
# Only devq's programs see the bundle's library path; host tools
# (nvidia-smi, awk) run as they are.
#
# For the tests of this script (make check-gpu-script, under the driver
# simulator): DEVQ_GPU_TEST_SIGNAL=SIG:STEP sends SIG to devqd once step
# STEP has ended (STOP freezes it, KILL ends it).
#
# Exit status: 0 when no check FAILed (and at least one PASSed); 1
# otherwise; 2 when the bundle is incomplete; 128+N after signal N.
set -u

T0=$(date +%s)
DEADLINE=${DEVQ_GPU_DEADLINE:-420}
[ "$DEADLINE" -gt 480 ] && DEADLINE=480
if [ -n "${OUT:-}" ]; then
	O=$OUT
	mkdir -p "$O" || exit 2
else
	O=$(mktemp -d /tmp/devq-gpu-out-XXXXXX) || exit 2
fi
echo "run.sh: results in $O (summary.txt, steps.log, devqd.log, supervisor.log)"
SUM=$O/summary.txt
LOG=$O/steps.log
DLOG=$O/devqd.log
SLOG=$O/supervisor.log
: >"$SUM"
: >"$LOG"
: >"$DLOG"
: >"$SLOG"
# Scratch (the socket, pids) stays out of $OUT.
T=$(mktemp -d /tmp/devq-gpu-XXXXXX) || exit 2
SOCK=$T/devqd.sock
SUP=
STEP_PID=
DEAD=   # set when devqd stopped answering: later daemon steps SKIP

res() { # STATUS NAME FIGURE...: one summary line, shown and kept
	st=$1 name=$2
	shift 2
	line="$st $name: $*"
	echo "$line"
	echo "$line" >>"$SUM"
	echo "$line" >>"$LOG"
}
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
say() { echo "$*"; echo "$*" >>"$LOG"; }

# devqd's pid, when the process is still the one this run started: its
# command line names this run's private socket.
devqd_pid() {
	[ -f "$T/devqd.pid" ] || return 1
	p=$(cat "$T/devqd.pid")
	[ -n "$p" ] && tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" | grep -q -- "--socket $SOCK" &&
		echo "$p"
}

stop_devqd() { # continue, TERM, wait up to $1 s, KILL
	p=$(devqd_pid) || return 0
	kill -CONT "$p" 2>/dev/null
	kill -TERM "$p" 2>/dev/null
	i=0
	while [ $i -lt $(($1 * 10)) ] && devqd_pid >/dev/null; do
		sleep 0.1
		i=$((i + 1))
	done
	p=$(devqd_pid) && kill -KILL "$p" 2>/dev/null
	return 0
}

cleanup() {
	# The step and the supervisor are this shell's children, not yet
	# waited for, so their pids cannot have been reused.
	[ -n "$STEP_PID" ] && kill -TERM "$STEP_PID" 2>/dev/null
	[ -n "$SUP" ] && kill -TERM "$SUP" 2>/dev/null
	stop_devqd 2
	rm -rf "$T"
}

finish() { # prints the summary and exits
	np=$(grep -c '^PASS' "$SUM")
	nf=$(grep -c '^FAIL' "$SUM")
	ns=$(grep -c '^SKIP' "$SUM")
	if [ "$nf" -gt 0 ] && [ -s "$DLOG" ]; then
		echo "== devqd.log, last 40 lines"
		tail -n 40 "$DLOG"
	fi
	echo "== summary ($O/summary.txt): $np passed, $nf failed, $ns skipped," \
		"$(($(date +%s) - T0)) s of $DEADLINE"
	cat "$SUM"
	cleanup
	trap - EXIT
	[ "$nf" = 0 ] && [ "$np" -gt 0 ] && exit 0
	exit 1
}

on_signal() {
	trap '' INT TERM
	res INFO run "stopped by SIG$1 after $(($(date +%s) - T0)) s${CUR:+, during step $CUR}"
	cleanup
	trap - EXIT
	[ "$1" = INT ] && exit 130
	exit 143
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap cleanup EXIT

B=${1:-$(dirname "$0")}
case $B in
build|build-*|*/build|*/build-*) BIN=$B; TOOLS=$B/tests/gpu; FATBIN=$B/kernels/devq_kernels.fatbin ;;
*) BIN=$B/bin; TOOLS=$B/bin; FATBIN=$B/devq_kernels.fatbin ;;
esac
if [ ! -x "$BIN/devqd" ] || [ ! -x "$TOOLS/gpu_check" ]; then
	res FAIL bundle "no devqd or gpu_check in $BIN: build the bundle on the build machine" \
		"(make gpu-bundle) and carry build/gpu-bundle with the run (build/ is ignored by" \
		"git, so it does not travel by itself)"
	cleanup
	trap - EXIT
	exit 2
fi

# The bundled libraries, then the host's (libcuda.so.1 comes from the
# host), for devq's programs only.
RUN="env LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# step NAME LIMIT KIND CMD...: runs one check program in the background,
# its output appended to steps.log as it comes; a crash or a timeout is a
# FAIL.  KIND "daemon" steps SKIP once devqd stopped answering.  Sets RC.
step() {
	name=$1 own=$2 kind=$3
	shift 3
	RC=
	if [ "$kind" = daemon ] && [ -n "$DEAD" ]; then
		res SKIP "$name" "devqd not answering since step $DEAD"
		return 1
	fi
	l=$(left)
	# Room after the limit: the kill grace (3 s), devctl status (6 s), the
	# cleanup (up to 3 s) and the summary.
	l=$((l - 20))
	[ "$l" -lt "$own" ] && own=$l
	if [ "$own" -le 0 ]; then
		res SKIP "$name" "no time left of the ${DEADLINE} s deadline"
		return 1
	fi
	say "== $name (limit $own s)"
	off=$(wc -c <"$LOG")
	CUR=$name
	timeout -k 3 "$own" "$@" >>"$LOG" 2>&1 &
	STEP_PID=$!
	wait "$STEP_PID"
	RC=$?
	STEP_PID=
	CUR=
	tail -c +$((off + 1)) "$LOG" >"$T/out"
	cat "$T/out"
	# A check line without a figure still gets the summary's "NAME: " form.
	awk '/^(PASS|FAIL|SKIP|INFO) / { if (!index($0, ": ")) $0 = $0 ": -"; print }' \
		"$T/out" >>"$SUM"
	if [ "$RC" = 124 ] || [ "$RC" = 137 ]; then
		res FAIL "$name" "timed out after $own s"
		if [ "$kind" = daemon ] && ! devctl_ok; then
			DEAD=$name
			res INFO devqd "not answering devctl status after step $name timed out"
		fi
	elif [ "$RC" != 0 ] && ! grep -q '^FAIL' "$T/out"; then
		res FAIL "$name" "exit status $RC"
	fi
	test_signal "$name"
	return 0
}

devctl_ok() {
	timeout -k 1 5 $RUN "$BIN/devctl" --socket "$SOCK" status >/dev/null 2>&1
}

test_signal() { # DEVQ_GPU_TEST_SIGNAL=SIG:STEP
	case ${DEVQ_GPU_TEST_SIGNAL:-} in
	*:"$1")
		sig=${DEVQ_GPU_TEST_SIGNAL%%:*}
		p=$(devqd_pid) && kill -"$sig" "$p" && say "run.sh: sent SIG$sig to devqd ($p), as asked"
		;;
	esac
}

say "devq GPU checks, $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -n), deadline $DEADLINE s"
if command -v nvidia-smi >/dev/null; then
	timeout 20 nvidia-smi -L >>"$LOG" 2>&1
	q=$(timeout 20 nvidia-smi -i 0 --query-gpu=name,driver_version,compute_mode,mig.mode.current \
		--format=csv,noheader 2>/dev/null)
	[ -n "$q" ] && res INFO gpu "$q"
	case $q in
	*Exclusive_Process*)
		res INFO hint "compute mode Exclusive_Process: only devqd may hold a context, so the" \
			"native baseline runs before devqd starts and the device's free memory is read" \
			"by nvidia-smi" ;;
	*Prohibited*)
		res INFO hint "compute mode Prohibited: no process may use the GPU (nvidia-smi -c 0" \
			"as root allows it)" ;;
	esac
	case $q in
	*", Enabled"*)
		res INFO hint "MIG is enabled: devqd needs a MIG instance's UUID in" \
			"CUDA_VISIBLE_DEVICES, or MIG disabled (nvidia-smi -mig 0 as root)" ;;
	esac
fi
for d in /dev/nvidiactl /dev/nvidia0 /dev/nvidia-uvm; do
	if [ -e "$d" ] && { [ ! -r "$d" ] || [ ! -w "$d" ]; }; then
		res INFO hint "$d is not readable and writable by $(id -un): the driver cannot open" \
			"the GPU (add the user to the device's group, e.g. video, or run as root)"
	fi
done

# The probe loads libcuda.so.1 and calls cuInit.  Only a C library too old
# for our programs (the dynamic loader names a GLIBC_ version) starts the
# bundled C library; any other failure is the driver's, shown as it is.
step probe 60 host $RUN "$TOOLS/kernel_check" --probe
if [ "$RC" != 0 ] && grep -q 'GLIBC_[0-9]' "$T/out" &&
   [ -x "$B/lib/glibc/ld-linux-x86-64.so.2" ]; then
	RUN="$B/lib/glibc/ld-linux-x86-64.so.2 --library-path $B/lib:$B/lib/glibc${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/lib/x86_64-linux-gnu:/usr/lib64:/lib64"
	res INFO libc "the host's C library is older than the bundle's: using the bundled one"
	step probe-bundled-libc 60 host $RUN "$TOOLS/kernel_check" --probe
fi

# The fatbin: each architecture's SASS by its own ELF entry, the PTX by its
# PTX entry (a name like devq_kernels.1.sm_90.ptx must not pass for SASS).
if command -v cuobjdump >/dev/null && [ -f "$FATBIN" ]; then
	timeout 30 cuobjdump --list-elf --list-ptx "$FATBIN" >"$T/objdump" 2>&1
	cat "$T/objdump" >>"$LOG"
	for a in sm_80 sm_90; do
		if grep -Eq "^ELF file.*\\.$a\\.cubin" "$T/objdump"; then res PASS "fatbin $a SASS" "listed"
		else res FAIL "fatbin $a SASS" "no ELF entry for $a"; fi
	done
	if grep -Eq '^PTX file.*\.sm_90\.ptx' "$T/objdump"; then res PASS "fatbin compute_90 PTX" "listed"
	else res FAIL "fatbin compute_90 PTX" "no PTX entry for compute_90"; fi
else
	res SKIP fatbin "no cuobjdump here (tests/test_fatbin reads the fatbin's headers in make check)"
fi

step kernel_check 120 host $RUN "$TOOLS/kernel_check"
# The native baseline before devqd starts: in EXCLUSIVE_PROCESS compute
# mode a second process cannot have a context beside devqd's.
step native_bench 120 host $RUN "$TOOLS/native_bench" 2000
cp "$T/out" "$T/b2"
# gemm's baseline, also before devqd: cuBLAS in one process (the host's
# libcublas.so.13: $DEVQ_CUBLAS, the dynamic linker's path,
# /usr/local/cuda/lib64, /usr/local/cuda-13/lib64, /usr/lib/x86_64-linux-gnu;
# SKIP when there is none).
step cublas 120 host $RUN "$TOOLS/gpu_check" - cublas 4096 10
cp "$T/out" "$T/b3"

# Device free memory: cuMemGetInfo from a process of its own, or, where the
# compute mode allows devqd's context only, nvidia-smi's count.
meminfo() {
	m=$(timeout -k 1 20 $RUN "$TOOLS/kernel_check" --meminfo 2>/dev/null | awk '/^MEMINFO/ { print $3 }')
	if [ -z "$m" ] && command -v nvidia-smi >/dev/null; then
		m=$(timeout -k 1 20 nvidia-smi -i 0 --query-gpu=memory.free --format=csv,noheader,nounits \
			2>/dev/null | awk '{ print $1 * 1048576 }')
	fi
	echo "$m"
}
counters() { # "buffers B bytes_mapped M ops_in_flight N" from devqd itself
	timeout -k 1 10 $RUN "$TOOLS/gpu_check" "$SOCK" counters 2>/dev/null |
		awk '/^COUNTERS/ { print $3, $5, $7 }'
}

# devqd under a supervisor that restarts it on status 69, like systemd.
supervise() {
	n=0
	while :; do
		n=$((n + 1))
		# DEVQ_HOST_DIR: the bundle's host libraries (gemm on cuBLAS),
		# which devqd would miss when started through the bundled loader.
		DEVQ_HOST_DIR="$BIN/host" $RUN "$BIN/devqd" --backend cuda --socket "$SOCK" \
			--test-fault-injection -v >>"$DLOG" 2>&1 &
		echo $! >"$T/devqd.pid"
		echo "$(date +%s.%N) devqd run $n started, pid $!" >>"$SLOG"
		wait $!
		st=$?
		echo "$(date +%s.%N) devqd run $n exited with status $st" >>"$SLOG"
		[ "$st" = 69 ] || break
	done
}
wait_socket() { # up to $1 tenths of a second
	i=0
	while [ ! -S "$SOCK" ] && [ $i -lt "$1" ] && kill -0 "$SUP" 2>/dev/null; do
		sleep 0.1
		i=$((i + 1))
	done
	[ -S "$SOCK" ]
}
supervise &
SUP=$!
if ! wait_socket 300; then
	res FAIL "devqd start" "devqd --backend cuda is not serving (devqd.log)"
	DEAD="devqd start"
else
	say "$(grep -m1 'backend cuda' "$DLOG")"
fi

step order 120 daemon $RUN "$TOOLS/gpu_check" "$SOCK" order
step seed 60 daemon $RUN "$TOOLS/gpu_check" "$SOCK" seed
step place 60 daemon $RUN "$TOOLS/gpu_check" "$SOCK" place

# Round trip through devqd against the native loop: a figure against its
# target, not a verdict (both sides move with the machine).
if step bench 120 daemon $RUN "$TOOLS/gpu_check" "$SOCK" bench 2000; then
	d=$(awk '/^BENCH devqd_roundtrip_us/ { print $4 }' "$T/out")
	nb=$(awk '/^BENCH native_roundtrip_us/ { print $4 }' "$T/b2")
	ns=$(awk '/^BENCH native_spin_roundtrip_us/ { print $4 }' "$T/b2")
	if [ -n "$d" ] && [ -n "$nb" ]; then
		res INFO bench "null op round trip devqd $d µs, native blocking-sync $nb µs, ratio" \
			"$(awk -v a="$d" -v b="$nb" 'BEGIN { printf "%.2f", a / b }') (target <= 2)," \
			"native spin ${ns:-?} µs"
	else
		res FAIL bench "no figures (devqd ${d:-none}, native ${nb:-none})"
	fi
fi
# gemm_f32 4096^3 on device buffers through devqd (its CUDA host library
# on the host's cuBLAS) against cuBLAS in one process: median device time.
if step gemm 120 daemon $RUN "$TOOLS/gpu_check" "$SOCK" gemm 4096 10; then
	gd=$(awk '/^GEMM / { print $2 }' "$T/out")
	gc=$(awk '/^CUBLAS / { print $2 }' "$T/b3")
	if [ -n "$gd" ] && [ -n "$gc" ]; then
		res INFO "gemm ratio" "gemm_f32 4096^3 device time devq $gd ms, in-process cuBLAS $gc ms," \
			"ratio $(awk -v a="$gd" -v b="$gc" 'BEGIN { printf "%.3f", a / b }') (1 = same speed)"
	fi
fi
if step graph 120 daemon $RUN "$TOOLS/gpu_check" "$SOCK" graph 200; then
	gp=$(awk '/^BENCH devqd_batch64_us_per_kernel/ { print $4 }' "$T/out")
	gr=$(awk '/^BENCH devqd_batch64_us_per_kernel/ { print $6 }' "$T/out")
	gn=$(awk '/^BENCH native_batch64_us_per_kernel/ { print $3 }' "$T/b2")
	if [ -n "$gr" ] && [ -n "$gn" ]; then
		res INFO "graph replay" "$gr µs per kernel in replayable batches of 64, plain $gp," \
			"native cuLaunchKernel loop $gn, ratio" \
			"$(awk -v a="$gr" -v b="$gn" 'BEGIN { printf "%.2f", a / b }') (target < 1)"
	else
		res FAIL "graph replay" "no figures (devqd ${gr:-none}, native ${gn:-none})"
	fi
fi

# Isolation beside heavy work: L's tail alone and beside a gemm flood.
if step iso 120 daemon $RUN "$TOOLS/gpu_check" "$SOCK" iso; then
	ia=$(awk '/^BENCH iso_alone_us/ { print $3 "/" $5 }' "$T/out")
	ib=$(awk '/^BENCH iso_beside_us/ { print $3 "/" $5 " (" $9 " flood gemms)" }' "$T/out")
	if [ -n "$ia" ] && [ -n "$ib" ]; then
		res INFO "iso" "gemm m=8 n=k=1024 every 10 ms, p50/p99 submit to completion:" \
			"alone $ia µs, beside a 4096^3 gemm flood $ib µs"
	elif ! grep -q '^SKIP iso' "$T/out"; then
		res FAIL "iso" "no figures"
	fi
fi

# Sporadic ops (issue 28): devqd's wake-ups on the path of an op that
# comes after an idle gap, against the native launch and synchronize.
if step sporadic 60 daemon $RUN "$TOOLS/gpu_check" "$SOCK" sporadic; then
	for g in 1000 10000; do
		dv=$(awk -v k="BENCH devqd_sporadic_${g}us" 'index($0, k) == 1 { print $4 "/" $6 }' "$T/out")
		nv=$(awk -v k="BENCH native_sporadic_${g}us" 'index($0, k) == 1 { print $4 "/" $6 }' "$T/b2")
		if [ -n "$dv" ]; then
			res INFO "sporadic $((g / 1000)) ms" "null op after a $((g / 1000)) ms gap," \
				"p50/p99 devqd $dv µs, native launch + synchronize ${nv:-?} µs"
		else
			res FAIL "sporadic $((g / 1000)) ms" "no figures"
		fi
	done
fi

# Device buffers, imports, priorities, cancellation, replayable runs, with
# devqd's counters and the device's free memory read before and after.
mem0=$(meminfo)
c0=$(counters)
for m in devbuf roimport prio cancel deadlock onegraph; do
	step "$m" 60 daemon $RUN "$TOOLS/gpu_check" "$SOCK" "$m"
done
if [ -n "$DEAD" ]; then
	res SKIP leak "devqd not answering since step $DEAD"
else
	sleep 1
	mem1=$(meminfo)
	c1=$(counters)
	fig="devqd buffers/mapped bytes/ops in flight ${c0:-?} before, ${c1:-?} after;"
	fig="$fig device free memory ${mem0:-?} B before, ${mem1:-?} B after"
	if ! devqd_pid >/dev/null || [ -z "$c1" ]; then
		res FAIL leak "devqd is gone or not answering: $fig"
	elif [ -n "$c0" ] && [ "$c0" != "$c1" ]; then
		res FAIL leak "devqd holds more than before: $fig"
	elif [ -n "$mem0" ] && [ -n "$mem1" ] &&
	     ! awk -v a="$mem0" -v b="$mem1" 'BEGIN { exit !(b >= a - 64 * 1048576) }'; then
		res FAIL leak "the device lost more than 64 MiB: $fig"
	elif [ -z "$mem1" ]; then
		res PASS leak "$fig (no device figure here)"
	else
		res PASS leak "$fig"
	fi
fi

# Device loss and recovery.
if step fault 60 daemon $RUN "$TOOLS/gpu_check" "$SOCK" fault; then
	if grep -q 'exited with status 69' "$SLOG"; then
		res PASS "device lost" "devqd exited 69 and was restarted"
	else
		res FAIL "device lost" "no exit with status 69 (supervisor.log)"
	fi
	wait_socket 100 || { DEAD=fault; res FAIL "devqd restart" "no devqd serving after the fault"; }
fi

# A stop with long ops queued: those not on the device are cancelled.
if step stopload 30 daemon $RUN "$TOOLS/gpu_check" "$SOCK" stopload; then
	t0=$(date +%s.%N)
	p=$(devqd_pid) && kill -TERM "$p"
	i=0
	while [ $i -lt 150 ] && kill -0 "$SUP" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
	t1=$(date +%s.%N)
	if ! kill -0 "$SUP" 2>/dev/null && tail -n 1 "$SLOG" | grep -q 'exited with status 0$'; then
		wait "$SUP"
		SUP=
		res PASS "cancel on stop" "devqd exited 0 in $(awk -v a="$t0" -v b="$t1" \
			'BEGIN { printf "%.1f", b - a }') s with 16 spins of 300 ms queued"
	else
		res FAIL "cancel on stop" "$(tail -n 1 "$SLOG") (15 s after SIGTERM)"
	fi
else
	res SKIP "cancel on stop" "${DEAD:+devqd not answering since step }${DEAD:-no time left}"
fi

finish
