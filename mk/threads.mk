# SPDX-License-Identifier: Apache-2.0
# devqd's threads from outside (/proc/PID/task/): their names, and which
# thread runs a short op (issue 28).  bench/sporadic.sh measures the
# sporadic op's path.
TESTS += test_threads
HARNESS_TESTS += test_threads

