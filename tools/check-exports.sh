#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# libdevq's ABI is exactly what client/devq.h declares: fails when the
# shared library's dynamic symbol table defines a symbol the header does not
# declare (an internal function or the generated protobuf-c code leaking
# out), or lacks a function the header declares (DEVQ_EXPORT forgotten).
#
#   tools/check-exports.sh [LIB [HEADER]]
#
# LIB defaults to $DEVQ_BUILD/libdevq.so (DEVQ_BUILD: build), HEADER to
# client/devq.h.  The declared functions come from the compiler itself
# (gcc's -aux-info), not from parsing the header by hand.  The last line is
# a summary in Check's format, so `make check` counts it like the others.
set -u

lib=${1:-${DEVQ_BUILD:-build}/libdevq.so}
hdr=${2:-client/devq.h}
cc=${CC:-cc}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

result() {
	if [ "$1" = 0 ]; then echo "100%: Checks: 1, Failures: 0, Errors: 0"; exit 0; fi
	echo "0%: Checks: 1, Failures: 1, Errors: 0"; exit 1
}

if ! nm -D --defined-only "$lib" > "$tmp/nm"; then
	echo "check-exports: cannot read the dynamic symbols of $lib"; result 1
fi
awk 'NF >= 3 { print $3 }' "$tmp/nm" | sed 's/@.*//' | sort -u > "$tmp/exported"
# A coverage build (make coverage, DEVQ_SANITIZER=coverage) links gcc's
# libgcov into the library, whose __gcov_* functions (and, in gcc 12,
# mangle_path) are exported: they are the instrumentation's, not libdevq's
# ABI, and only that build has them.
if [ "${DEVQ_SANITIZER:-}" = coverage ]; then
	grep -v -e '^__gcov_' -e '^mangle_path$' "$tmp/exported" > "$tmp/exported.1"
	mv "$tmp/exported.1" "$tmp/exported"
fi

# -aux-info writes one prototype per function declared in the translation
# unit, each after a comment naming the file and line it came from.
if ! { $cc -fsyntax-only -aux-info "$tmp/aux" -x c "$hdr" 2>/dev/null ||
       gcc -fsyntax-only -aux-info "$tmp/aux" -x c "$hdr"; }; then
	echo "check-exports: cannot list the functions $hdr declares (needs gcc's -aux-info)"
	result 1
fi
grep -F "/* $hdr:" "$tmp/aux" | sed -E 's/^.*[ *]([A-Za-z_][A-Za-z0-9_]*) \(.*$/\1/' |
	sort -u > "$tmp/declared"
if [ ! -s "$tmp/declared" ]; then
	echo "check-exports: found no function declared in $hdr"; result 1
fi

extra=$(comm -23 "$tmp/exported" "$tmp/declared")
missing=$(comm -13 "$tmp/exported" "$tmp/declared")
echo "check-exports: $lib exports $(wc -l < "$tmp/exported") symbols;" \
	"$hdr declares $(wc -l < "$tmp/declared") functions"
rc=0
if [ -n "$extra" ]; then
	echo "exported but not declared in $hdr (give them hidden visibility, or declare them):"
	echo "$extra" | sed 's/^/  /'
	rc=1
fi
if [ -n "$missing" ]; then
	echo "declared in $hdr but not exported (DEVQ_EXPORT missing?):"
	echo "$missing" | sed 's/^/  /'
	rc=1
fi
result $rc
