#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The Python binding's pytest suite, as one test program of `make check`
# (mk/python.mk writes $(BUILD)/tests/test_python to call this from the
# repository root).  Uses $DEVQ_BUILD's package, library and devqd; pytest
# prints a Check-style summary line ("NN%: Checks: N, Failures: F, Errors: E")
# that the check target adds up, and its exit status is the program's.
set -u
PYTHON=${PYTHON:-/usr/bin/python3}
build=$(cd "${DEVQ_BUILD:-build}" && pwd)
export PYTHONPATH="$build/python" DEVQ_LIBRARY="$build/libdevq.so.0"
export PYTHONDONTWRITEBYTECODE=1
case "${DEVQ_SANITIZER:-}" in
1)	# ASan+UBSan: the runtime must be the first library of the interpreter.
	# Python's own allocations are not ours to leak-check.
	asan=$(${CC:-cc} -print-file-name=libasan.so)
	ubsan=$(${CC:-cc} -print-file-name=libubsan.so)
	export LD_PRELOAD="$asan $ubsan"
	export ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}" ;;
tsan)	# TSan cannot be loaded into an interpreter that was not started with
	# it; the daemons and libdevq are race-checked by the C tests.
	echo "test_python: skipped under TSan (the python3 interpreter is not built with it)"
	echo "100%: Checks: 0, Failures: 0, Errors: 0"
	exit 0 ;;
esac
"$PYTHON" -c 'import numpy, pytest' 2>/dev/null || {
	echo "test_python: $PYTHON lacks numpy or pytest: apt-get install python3-numpy python3-pytest (make deps)"
	exit 1
}
exec "$PYTHON" -m pytest -p no:cacheprovider -q -rfEs "$(dirname "$0")" "$@"
