# SPDX-License-Identifier: Apache-2.0
# Mutation testing (tools/mutate.py, Python 3 standard library): one-line
# mutants of the daemon's decision code, each built in a worker's copy of the
# tree (BUILD/mutate/wN) and run against the fast tests that cover its file.
# A mutant no test kills, and that tests/mutants-equivalent.txt does not
# list with a reason, fails the run.  make mutate rebuilds each survivor with
# ASan and UBSan and runs its killers again (--asan): a read or write one
# past an array, which a plain build cannot see, kills it there.
#
#   make mutate                      every mutant of every file (long)
#   make mutate MUTATE_ARGS='--files daemon/core/validate.c'
#   make mutate MUTATE_ARGS='--sample 100 --seed 7'
#   make mutate MUTATE_ARGS='--only FILE:FUNCTION:OP:N' (or --list)
#   make mutate-ci                   the fixed list tests/mutants-ci.txt
MUTATE_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
MUTATE_ARGS ?=

.PHONY: mutate mutate-ci check-mutate-sites
# The tool's site finder names the identities the lists above hold: its
# self-test runs with make check.
## tools/mutate.py's self-test: it names functions and sites right (in check)
check-mutate-sites:
	@out=$$(python3 tools/test_mutate.py 2>&1) || { echo "$$out"; exit 1; }; \
	  echo "check-mutate-sites: tools/mutate.py names functions and finds sites as it should"
check: check-mutate-sites

## mutation testing of the daemon's decision code (long; MUTATE_ARGS=...)
mutate:
	python3 tools/mutate.py -j $(MUTATE_JOBS) --build $(BUILD) --asan $(MUTATE_ARGS)

# CI: a fixed list of mutants across the core's validation, buffers,
# timelines and completion pages, the framing and the submit decoder (about
# 6 minutes with 2 workers on a 2-vCPU VM; see tests/README.md).  It fails
# when one of them survives and is not listed as equivalent, or when the list
# names a mutant that no longer exists (its function was edited: pick the
# new identity with --list).
## the fixed list of mutants tests/mutants-ci.txt, as CI runs it
mutate-ci:
	python3 tools/mutate.py -j $(MUTATE_JOBS) --build $(BUILD) --only @tests/mutants-ci.txt
