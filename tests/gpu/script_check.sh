#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tests/gpu/script_check.sh BUNDLE SIMDIR: `make check-gpu-script`.  Runs
# the GPU bundle's run.sh against the driver simulator (SIMDIR holds its
# libcuda.so.1, with occupancy and stream priorities modelled) and checks
# that the run always ends with its results, whatever happens to devqd or
# to the script:
#   1. a plain run ends by itself, prints its summary, and leaves
#      summary.txt (every line "PASS|FAIL|SKIP|INFO NAME: figure") and
#      devqd.log in $OUT;
#   2. devqd frozen (SIGSTOP) once it served: the run ends by itself within
#      its deadline, exit status non-zero, the step that hung FAILs and every
#      later step FAILs or SKIPs, devqd.log is in $OUT, no devqd is left;
#   3. the script sent TERM halfway: it stops within 10 s, leaving what it
#      had in $OUT and no devqd;
#   4. the priority check fails when the high-priority queue lands on a
#      stream of normal priority (the simulated device answers one priority
#      for every stream), and the leak check fails when devqd is dead.
# Timings under the simulator mean nothing; only the outcomes are checked.
set -u
BUNDLE=$1
SIM=$(cd "$2" && pwd)
W=$(mktemp -d /tmp/devq-script-check-XXXXXX)
fails=0
ok() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
run() { # NAME [ENV...]: run.sh with OUT=$W/NAME, in the background; sets PID
	n=$1
	shift
	mkdir -p "$W/$n"
	env OUT="$W/$n" LD_LIBRARY_PATH="$SIM" DEVQ_CUDASIM_OCCUPANCY=1 "$@" \
		sh "$BUNDLE/run.sh" >"$W/$n.stdout" 2>&1 &
	PID=$!
}
wait_for() { # PID SECONDS: waits, at most SECONDS; sets RC (empty on timeout)
	i=0
	RC=
	while [ $i -lt $(($2 * 10)) ] && kill -0 "$1" 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
	if kill -0 "$1" 2>/dev/null; then
		kill -KILL "$1" 2>/dev/null
		wait "$1"
		return 1
	fi
	wait "$1"
	RC=$?
}
# devqd processes a run started, by the pids its supervisor.log names.
leftover() {
	for p in $(awk '/started, pid/ { print $NF }' "$1/supervisor.log" 2>/dev/null); do
		[ -r "/proc/$p/cmdline" ] && tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" |
			grep -q devqd && echo "$p"
	done
}
format_ok() { # every summary line in the promised form
	[ -s "$1" ] && ! grep -Ev '^(PASS|FAIL|SKIP|INFO) [^:]+: ' "$1" | grep -q .
}
start=$(date +%s)

# 1. A plain run.
t0=$(date +%s)
run plain
if wait_for "$PID" 300; then
	d=$(($(date +%s) - t0))
	[ -f "$W/plain/summary.txt" ] && [ -s "$W/plain/devqd.log" ] &&
		format_ok "$W/plain/summary.txt" && grep -q '^== summary' "$W/plain.stdout" &&
		[ "$(ls "$W/plain" | wc -l)" -le 8 ] &&
		ok "plain run: ended in $d s, status $RC, summary.txt and devqd.log in \$OUT" ||
		bad "plain run: summary or devqd.log missing, or a line out of form (status $RC)"
	grep -E '^(FAIL|SKIP)' "$W/plain/summary.txt" | sed 's/^/  plain: /'
	grep '^PASS high-priority queue' "$W/plain/summary.txt" >/dev/null &&
		ok "priority check passes with stream priorities" ||
		bad "priority check with stream priorities: $(grep 'high-priority' "$W/plain/summary.txt")"
else
	bad "plain run: still running after 300 s"
fi

# 2. devqd frozen after it served; a short deadline, so the deadline cuts
# the hung step.
t0=$(date +%s)
run frozen DEVQ_GPU_TEST_SIGNAL=STOP:order DEVQ_GPU_DEADLINE=60
if wait_for "$PID" 150; then
	d=$(($(date +%s) - t0))
	s=$W/frozen/summary.txt
	# Every line after the hung step's: FAIL, SKIP or INFO, never PASS.
	late=$(awk 'o; /^FAIL seed: timed out/ { o = 1 }' "$s")
	[ "$RC" != 0 ] && [ "$d" -le 60 ] && format_ok "$s" && [ -s "$W/frozen/devqd.log" ] &&
		grep -q '^FAIL seed: timed out' "$s" && ! echo "$late" | grep -q '^PASS' &&
		echo "$late" | grep -q '^SKIP leak' && [ -z "$(leftover "$W/frozen")" ] &&
		ok "frozen devqd: ended in $d s (deadline 60), status $RC, seed FAILed (timed out)," \
			"$(echo "$late" | wc -l) later lines FAIL or SKIP, no devqd left" ||
		bad "frozen devqd: status $RC after $d s; summary:" "$(cat "$s")" \
			"left: $(leftover "$W/frozen")"
else
	bad "frozen devqd: still running after 150 s"
fi

# 3. TERM halfway (once the device-buffer checks began).
run term
i=0
while [ $i -lt 600 ] && ! grep -q '^== devbuf' "$W/term/steps.log" 2>/dev/null; do
	sleep 0.1
	i=$((i + 1))
done
t0=$(date +%s)
kill -TERM "$PID"
if wait_for "$PID" 10; then
	d=$(($(date +%s) - t0))
	s=$W/term/summary.txt
	[ "$RC" = 143 ] && grep -q '^INFO run: stopped by SIGTERM' "$s" && grep -q '^PASS' "$s" &&
		[ -s "$W/term/devqd.log" ] && [ -z "$(leftover "$W/term")" ] &&
		ok "TERM halfway: stopped in $d s, status $RC, $(wc -l <"$s") summary lines kept," \
			"no devqd left" ||
		bad "TERM halfway: status $RC; summary: $(cat "$s"); left: $(leftover "$W/term")"
else
	bad "TERM halfway: still running 10 s after SIGTERM"
fi

# 4a. The priority check on a device whose streams all have one priority.
# A fairness window of 100 ms lets all 40 fills onto the device at once, so
# the null op has every fill launched before it ahead of it; with the
# default 1 ms window a stream holds one fill or two, and how many of those
# are ahead of it (2 to 4) is too close to the check's bound to fail it
# every time.
S=$W/prio.sock
LD_LIBRARY_PATH="$SIM" DEVQ_CUDASIM_OCCUPANCY=1 DEVQ_CUDASIM_PRIORITY_RANGE=0:0 \
	"$BUNDLE/bin/devqd" --backend cuda --socket "$S" --fair-window-us 100000 \
	>"$W/prio-devqd.log" 2>&1 &
D=$!
i=0
while [ ! -S "$S" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
timeout 60 "$BUNDLE/bin/gpu_check" "$S" prio >"$W/prio.out" 2>&1
rc=$?
kill -TERM "$D"
wait "$D"
[ $rc = 1 ] && grep -q '^FAIL high-priority queue' "$W/prio.out" &&
	ok "priority check fails on a normal-priority stream: $(grep '^FAIL' "$W/prio.out")" ||
	bad "priority check on a normal-priority stream did not fail (status $rc): $(cat "$W/prio.out")"

# 4b. The leak check with devqd dead (killed after the last checks).
run dead DEVQ_GPU_TEST_SIGNAL=KILL:onegraph DEVQ_GPU_DEADLINE=120
if wait_for "$PID" 150; then
	s=$W/dead/summary.txt
	[ "$RC" = 1 ] && grep -q '^FAIL leak: devqd is gone' "$s" &&
		ok "leak check fails with devqd dead: $(grep '^FAIL leak' "$s")" ||
		bad "leak check with devqd dead: status $RC; $(grep 'leak' "$s")"
else
	bad "dead devqd: still running after 150 s"
fi

echo "check-gpu-script: $fails failed, $(($(date +%s) - start)) s (outputs in $W)"
[ $fails = 0 ] && rm -rf "$W"
[ $fails = 0 ]
