# SPDX-License-Identifier: Apache-2.0
# `make help` is written from the makefiles themselves: a line "## text"
# right above a rule documents its targets (mk/help.awk reads them), so the
# list follows the rules.  check-help, part of make check, fails when a
# .PHONY target has no such line.
HELP_FILES = Makefile mk/tests.mk $(filter-out mk/tests.mk,$(sort $(wildcard mk/*.mk)))

.PHONY: help check-help
## this list: every .PHONY target, under the file that holds its rule
help:
	@echo "make [TARGET...] [VAR=value...]; without a target, make builds all."
	@echo "V=1 prints each command in full; BUILD=DIR builds there (default build);"
	@echo "CUDA=auto|1|0 builds the CUDA backend when nvcc is found|always|never;"
	@echo "TESTS=\"test_frame test_core\" is what check runs (make list-tests names them)."
	@echo
	@awk -v mode=help -f mk/help.awk $(HELP_FILES)

## every .PHONY target has its "## text" line for make help (in check)
check-help:
	@awk -v mode=check -f mk/help.awk $(HELP_FILES)
check: check-help
