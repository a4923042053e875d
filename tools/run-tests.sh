#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs test programs and adds up Check's summaries: the loop of make check
# (mk/tests.mk) and of make check-cuda-sim (mk/cudasim.mk).
#
#   tools/run-tests.sh BINDIR LOGDIR NAME...
#
# NAME is a program of BINDIR, or PROGRAM@ARCH: the program with
# DEVQ_CUDASIM_ARCH=ARCH (the simulated GPU's compute capability).  The
# caller's environment reaches every program.  Each program's output goes
# to LOGDIR/NAME.log and then to standard output, after a line "== NAME"
# (and $RUN_TESTS_WHAT, when set).  A program whose log has no Check
# summary, or that exits non-zero, counts as failed.  A failing program's
# failure lines are repeated after the loop, so that the tail of a long log
# (what a CI summary shows) says why, not only which.  The last line is
# "N passed, M failed"; the exit status is 1 when any program failed.
set -u
bin=${1:?BINDIR}
logs=${2:?LOGDIR}
shift 2
pass=0 fail=0 bad=
for t in "$@"; do
	p=${t%@*}
	arch=${t#"$p"}
	arch=${arch#@}
	echo "== $t${RUN_TESTS_WHAT:+ $RUN_TESTS_WHAT}${arch:+ sm_$arch}"
	log=$logs/$t.log
	if [ -n "$arch" ]; then
		DEVQ_CUDASIM_ARCH=$arch "$bin/$p" > "$log" 2>&1
	else
		"$bin/$p" > "$log" 2>&1
	fi
	rc=$?
	cat "$log"
	line=$(grep -E '^[0-9]+%: Checks: ' "$log" | tail -n 1)
	n=$(echo "$line" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
	f=$(echo "$line" | sed -E 's/.*Failures: ([0-9]+), Errors: ([0-9]+).*/\1+\2/')
	if [ -z "$line" ]; then n=1; f=1; fi
	f=$(($f))
	if [ "$rc" != 0 ] && [ "$f" = 0 ]; then f=1; fi
	pass=$((pass + n - f))
	fail=$((fail + f))
	[ "$rc" = 0 ] || bad="$bad $t"
done
for t in $bad; do
	echo "-- why $t failed ($logs/$t.log):"
	grep -E ':[FE]:' "$logs/$t.log" | head -n 20 | grep . || tail -n 15 "$logs/$t.log"
done
[ -z "$bad" ] || echo "failing programs:$bad"
echo "$pass passed, $fail failed"
[ -z "$bad" ]
