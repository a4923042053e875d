# SPDX-License-Identifier: Apache-2.0
# Mutation testing (tools/mutate.py, Python 3 standard library): one-line
# mutants of the daemon's decision code, each built in a worker's copy of the
# tree (BUILD/mutate/wN) and run against the fast tests that cover its file.
# A mutant no test kills, and that tests/mutants-equivalent.txt does not
# list with a reason, fails the run.
#
#   make mutate                      every mutant of every file (long)
#   make mutate MUTATE_ARGS='--files daemon/core/validate.c'
#   make mutate MUTATE_ARGS='--sample 100 --seed 7'
#   make mutate MUTATE_ARGS='--only FILE:FUNCTION:OP:N' (or --list)
#   make mutate-ci                   the fixed list tests/mutants-ci.txt
MUTATE_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
MUTATE_ARGS ?=

.PHONY: mutate mutate-ci
mutate:
	python3 tools/mutate.py -j $(MUTATE_JOBS) --build $(BUILD) $(MUTATE_ARGS)
