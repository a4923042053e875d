#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# devctl's bash completion (client/devctl/devctl.bash) against a devqd of
# its own: commands, executables from the daemon, parameter names from a
# signature, option values.  Prints a Check-style summary line.
B=${DEVQ_BUILD:-build}
tmp=$(mktemp -d)
pass=0; fail=0
"$B/devqd" --backend cpu --socket "$tmp/s" >"$tmp/devqd.log" 2>&1 &
dpid=$!
i=0
while [ ! -S "$tmp/s" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
# expect LINE WANT: completing LINE (cursor at its end) offers exactly WANT
expect() {
	got=$(bash -c 'source client/devctl/devctl.bash; COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}
		_devctl; echo "${COMPREPLY[*]}"' _ "$1")
	if [ "$got" = "$2" ]; then pass=$((pass + 1)); else
		echo "FAIL: '$1' completes to '$got', want '$2'"; fail=$((fail + 1)); fi
}
D="$B/devctl --socket $tmp/s"
expect "$D su" "submit"
expect "$D t" "trace top"
expect "$D submit sax" "saxpy_f32"
# Only names: devctl list indents what it says about each executable.
expect "$D submit s" "saxpy_f32 spin spin_buf"
expect "$D submit saxpy_f32 " "n= a= x= y= ::"
expect "$D submit saxpy_f32 a=2 --queue 1 x" "x="
expect "$D submit spin ns=1 :: che" "checksum"
expect "$D submit spin --priority h" "high"
expect "$D submit spin --rep" "--repeat"
expect "$D submit spin --res" "--reset"
expect "$D submit spin --dead" "--deadline-ms"
expect "$D submit spin --deadline-ms 5 --q" "--queue"
expect "$D submit spin --deadline-ms " ""
expect "$D top --o" "--once"
expect "$D ad" "admin"
expect "$D admin " "grant evict tenants --help"
expect "$D admin grant job_1 --s" "--shares"
expect "$D admin evict job_1 --g" "--grace"
expect "$D he" "health help"
expect "$D cd" "cdi"
expect "$D cdi " "generate --help"
expect "$D cdi generate --s" "--socket-dir"
expect "$D admin grant job_1 --c" "--cdi"
expect "$D admin grant job_1 --u" "--uid --update-only"
bash -c 'source client/devctl/devctl.bash; complete -p devctl' | grep -q _devctl &&
	pass=$((pass + 1)) || { echo "FAIL: not registered for devctl"; fail=$((fail + 1)); }
kill "$dpid" 2>/dev/null
wait "$dpid" 2>/dev/null
rm -rf "$tmp"
total=$((pass + fail))
echo "$(( total ? pass * 100 / total : 0 ))%: Checks: $total, Failures: $fail, Errors: 0"
[ "$fail" = 0 ]
