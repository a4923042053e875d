# SPDX-License-Identifier: Apache-2.0
# Line and branch coverage of daemon/, client/, proto/ and kernels/ from
# `make check` (gcc --coverage, summarised by lcov and genhtml from Debian).
#
#   make coverage   build in build-coverage/ (-O0 --coverage), run
#                   make check there, then write build/coverage/index.html
#                   and print lcov's summary per directory
#
# What a coverage build changes, and how the suite takes it: libdevq.so
# links libgcov, whose __gcov_* functions are exported, so test_exports
# (tools/check-exports.sh) leaves them out when DEVQ_SANITIZER=coverage; and
# SAN=coverage makes harness_slow() true, as for a sanitizer build, so the
# timing tests keep only the bounds that -O0 and the counters cannot break.
# A test that fails still leaves its counters: the report is written even
# then, and the target fails after it.
COV_BUILD ?= build-coverage
COV_OUT   ?= $(BUILD)/coverage
COV_DEB_PACKAGES = lcov
LCOV_FLAGS = --rc lcov_branch_coverage=1 --quiet

ifeq ($(SAN),coverage)
  CFLAGS  = -O0 -g --coverage
  LDFLAGS += --coverage
endif

.PHONY: coverage coverage-deps
## apt-get install lcov when it is missing
coverage-deps:
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	command -v lcov >/dev/null && command -v genhtml >/dev/null || \
	  { $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive \
	    $$SUDO apt-get install -y --no-install-recommends $(COV_DEB_PACKAGES); }

## line and branch coverage of make check, HTML in build/coverage/
coverage: coverage-deps
	find $(COV_BUILD) -name '*.gcda' -delete 2>/dev/null || true
	@rc=0; $(MAKE) --no-print-directory BUILD=$(COV_BUILD) SAN=coverage check || rc=$$?; \
	mkdir -p $(COV_OUT); \
	lcov $(LCOV_FLAGS) --capture --directory $(COV_BUILD)/obj --base-directory . \
	  --output-file $(COV_OUT)/all.info && \
	lcov $(LCOV_FLAGS) --extract $(COV_OUT)/all.info '$(CURDIR)/daemon/*' '$(CURDIR)/client/*' \
	  '$(CURDIR)/proto/*' '$(CURDIR)/kernels/*' --output-file $(COV_OUT)/devq.info && \
	genhtml $(LCOV_FLAGS) --branch-coverage --output-directory $(COV_OUT) $(COV_OUT)/devq.info && \
	for d in daemon/core daemon client proto kernels; do \
	  lcov $(LCOV_FLAGS) --extract $(COV_OUT)/devq.info "$(CURDIR)/$$d/*" \
	    --output-file $(COV_OUT)/part.info >/dev/null && \
	  lcov --rc lcov_branch_coverage=1 --summary $(COV_OUT)/part.info 2>&1 | \
	    awk -v d="$$d" '/lines\.*:/ { l = $$2 } /branches\.*:/ { b = $$2 } \
	      END { printf "coverage: %-12s lines %-7s branches %s\n", d, l, b }'; \
	done && echo "coverage: HTML in $(COV_OUT)/index.html"; \
	exit $$rc
