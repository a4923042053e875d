#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The example programs (examples/*.c) against a devqd of their own: built
# as the Makefile builds them (dynamic, run through build/libdevq.so.0) and
# linked statically from libdevq.a with `pkg-config --static --libs devq`.
# Prints a Check-style summary line for `make check`.
B=${DEVQ_BUILD:-build}
CC=${CC:-cc}
tmp=$(mktemp -d)
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
"$B/devqd" --backend cpu --socket "$tmp/s" >"$tmp/devqd.log" 2>&1 &
dpid=$!
i=0
while [ ! -S "$tmp/s" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
export DEVQ_SOCKET="$tmp/s"

# A private .pc file, as `make install` writes it, over a library directory
# that holds only libdevq.a: -ldevq can only be the static library.
mkdir -p "$tmp/lib/pkgconfig"
cp "$B/libdevq.a" "$tmp/lib/"
sed -e "s|@PREFIX@|$tmp|" -e "s|@LIBDIR@|$tmp/lib|" -e "s|@INCLUDEDIR@|$PWD/client|" \
    -e 's|@VERSION@|0|' packaging/devq.pc.in > "$tmp/lib/pkgconfig/devq.pc"

for src in examples/*.c; do
	name=$(basename "$src" .c)
	exe="$B/examples/$name"
	if readelf -d "$exe" | grep -q 'NEEDED.*libdevq.so.0' &&
	   out=$(LD_LIBRARY_PATH="$B" "$exe" 2>&1) && echo "$out" | grep -q '^ok'; then
		ok
	else
		bad "$name (dynamic, LD_LIBRARY_PATH=$B): $out"
	fi
	flags=$(PKG_CONFIG_PATH="$tmp/lib/pkgconfig" pkg-config --cflags --static --libs devq)
	# A sanitizer build's libdevq.a needs its runtime: the build's LDFLAGS.
	if ! "$CC" -std=c11 -o "$tmp/$name" "$src" $flags $DEVQ_EXAMPLE_LDFLAGS 2>"$tmp/cc.log"; then
		bad "$name: static link with pkg-config --static ($flags): $(cat "$tmp/cc.log")"
	elif readelf -d "$tmp/$name" | grep -q 'NEEDED.*libdevq'; then
		bad "$name: the static build needs libdevq.so"
	elif out=$("$tmp/$name" 2>&1) && echo "$out" | grep -q '^ok'; then
		ok
	else
		bad "$name (static): $out"
	fi
done

kill "$dpid" 2>/dev/null
wait "$dpid" 2>/dev/null
rm -rf "$tmp"
total=$((pass + fail))
echo "$(( total ? pass * 100 / total : 0 ))%: Checks: $total, Failures: $fail, Errors: 0"
[ "$fail" = 0 ]
