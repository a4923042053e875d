#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make demo: start devqd (CPU backend) on a private socket, drive it with
# devctl, stop it.  Every number printed is measured, nothing is canned.
set -eu
BUILD=${BUILD:-build}
dir=$(mktemp -d /tmp/devq-demo-XXXXXX)
sock="$dir/devqd.sock"
log="$dir/devqd.log"
devctl="$BUILD/devctl --socket $sock"

cleanup() {
	if [ -n "${pid:-}" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid"
		wait "$pid" || true
	fi
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

say() { printf '\n== %s\n$ %s\n' "$1" "$2"; }

"$BUILD/devqd" --socket "$sock" --backend cpu --streams 4 -v 2>"$log" &
pid=$!
i=0
while [ ! -S "$sock" ]; do
	i=$((i + 1))
	if [ $i -gt 200 ] || ! kill -0 "$pid" 2>/dev/null; then
		echo "devqd did not start:"; cat "$log"; exit 1
	fi
	sleep 0.05
done
echo "devqd (pid $pid) listening on $sock"

say "executables and their typed signatures" "devctl list"
$devctl list

say "a 5 ms kernel: device time is the kernel, submit is microseconds" \
	"devctl submit spin ns=5000000 --json"
$devctl submit spin ns=5000000 --json

head -c 1048576 /dev/urandom > "$dir/data.bin"
say "checksum of 1 MiB of random data in a shared buffer (n taken from the file)" \
	"devctl submit checksum data=@data.bin"
$devctl submit checksum data=@"$dir/data.bin"

say "saxpy on two buffers, result written back to a file" \
	"devctl submit saxpy_f32 a=2.5 x=@data.bin y=@data.bin --out y=y.bin"
$devctl submit saxpy_f32 a=2.5 x=@"$dir/data.bin" y=@"$dir/data.bin" --out y="$dir/y.bin"
echo "wrote $(wc -c < "$dir/y.bin") bytes to y.bin"

say "a dependent pair across two queues: a 20 ms producer on queue 1, its consumer on queue 2" \
	"devctl submit spin_buf ns=20000000 buf=size:65536 --queue 1 :: checksum data=%buf --queue 2 --wait 1:1"
$devctl submit spin_buf ns=20000000 buf=size:65536 --queue 1 :: checksum data=%buf --queue 2 --wait 1:1
echo "(the consumer's 'queued' phase is the producer's 20 ms; its checksum is over bytes the producer incremented)"

say "the same pair with no explicit wait: the buffer hazard orders it" \
	"devctl submit spin_buf ns=20000000 buf=size:65536 --queue 1 :: checksum data=%buf --queue 2"
$devctl submit spin_buf ns=20000000 buf=size:65536 --queue 1 :: checksum data=%buf --queue 2

say "a bad argument is refused with a clear error, nothing runs" \
	"devctl submit saxpy_f32 a=1 x=size:400 y=size:100"
$devctl submit saxpy_f32 a=1 x=size:400 y=size:100 || echo "(exit status $?)"

say "daemon status afterwards: no buffers, nothing in flight" "devctl status"
$devctl status

kill -TERM "$pid"
wait "$pid"
status=$?
pid=
echo
echo "devqd stopped (exit status $status)"
