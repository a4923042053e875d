# SPDX-License-Identifier: Apache-2.0
# Every test program, one row each.  `make check` builds and runs, in this
# order, the rows whose suites say check; `make check-cuda-sim`
# (mk/cudasim.mk) runs those that say sim against the CUDA driver
# simulator.  tests/README.md opens with the map of the same rows (what
# each covers, how to run it alone); check-test-map holds it to this table.
#
#   make check TESTS="test_frame test_core"   only those programs
#   make list-tests                           this table, as make reads it
#
# A new test is a row here and its source; with link harness that is all.
#
# Columns (five words a row):
#   program  build/tests/PROGRAM, the name TESTS takes
#   link     harness: SOURCE with tests/harness.c (devqd started and
#            stopped per test) and libdevq, linked by the rule below;
#            otherwise the mk/*.mk (named without .mk) whose rule builds it:
#            a unit test of a few objects, a harness test that links more,
#            or a script wrapped as a program
#   root     no; some: the cases that need root (clients as other uids,
#            setuid) print SKIP and pass without it; all: every case does
#   suites   check, sim, or check,sim
#   source   the program's main file
#
# This file is included before the other mk/*.mk: mk/cudasim.mk's rules
# take their prerequisites from CUDASIM_TESTS.

#                   link         root  suites     source
DEVQ_TEST_TABLE = \
  test_kernels      tests        no    check      tests/test_kernels.c \
  test_frame        tests        no    check      tests/test_frame.c \
  test_msg_dec      msg_dec      no    check      tests/test_msg_dec.c \
  test_cmpl_enc     cmpl_enc     no    check      tests/test_cmpl_enc.c \
  test_cli_codec    cli_codec    no    check      tests/test_cli_codec.c \
  test_trace_enc    trace        no    check      tests/test_trace_enc.c \
  test_fatbin       cuda         no    check      tests/test_fatbin.c \
  test_cuda         device       no    check      tests/test_cuda.c \
  test_core         layers       no    check      tests/core/test_core.c \
  test_repo_core    executables  no    check      tests/core/test_repo_core.c \
  test_tracereq     attack       no    check      tests/core/test_tracereq.c \
  test_fuzz_replay  fuzz         no    check      tests/fuzz/test_fuzz_replay.c \
  test_daemon       harness      no    check,sim  tests/test_daemon.c \
  test_devctl       harness      no    check,sim  tests/test_devctl.c \
  test_badinput     harness      no    check,sim  tests/test_badinput.c \
  test_bounds       harness      some  check      tests/test_bounds.c \
  test_attack       harness      all   check      tests/test_attack.c \
  test_tenancy      harness      some  check,sim  tests/test_tenancy.c \
  test_admin        harness      some  check      tests/test_admin.c \
  test_priority     harness      some  check,sim  tests/test_priority.c \
  test_lost         harness      some  check,sim  tests/test_lost.c \
  test_cring        harness      no    check      tests/test_cring.c \
  test_sring        harness      no    check      tests/test_sring.c \
  test_perf         harness      no    check,sim  tests/test_perf.c \
  test_loopshare    harness      some  check      tests/test_loopshare.c \
  test_threads      threads      some  check      tests/test_threads.c \
  test_trace        harness      no    check,sim  tests/test_trace.c \
  test_top_tmux     harness      no    check      tests/top/test_top_tmux.c \
  test_soak         harness      no    check,sim  tests/soak/test_soak.c \
  test_deploy       deploy       some  check      tests/test_deploy.c \
  test_promtext     exporter     no    check      tests/test_promtext.c \
  test_exporter     harness      some  check      tests/test_exporter.c \
  test_release      harness      no    check      tests/test_release.c \
  test_exports      exports      no    check      tools/check-exports.sh \
  test_completion   completion   no    check      tests/completion.sh \
  test_example      examples     no    check      tests/example.sh \
  test_oneminute    examples     no    check      tests/oneminute.sh \
  test_repo         executables  some  check      tests/repo.sh \
  test_host         host         no    check,sim  tests/host.sh \
  test_mlp          host         no    check      tests/mlp.sh \
  test_python       python       no    check      python/tests/run.sh \
  test_cudasim      harness      no    sim        tests/test_cudasim.c \
  test_repo_cuda    cudasim      no    sim        tests/repo_cuda.sh \
  test_cudasim_self cudasim      no    sim        tests/cudasim/selftest.c

# The table as rows "program:link:root:suites:source", and the lists the
# rules below and mk/cudasim.mk take from it.
devq_empty :=
devq_space := $(devq_empty) $(devq_empty)
devq_comma := ,
devq_test_rows = $(if $(1),$(subst $(devq_space),:,$(strip $(wordlist 1,5,$(1)))) \
                 $(call devq_test_rows,$(wordlist 6,$(words $(1)),$(1))))
devq_test_field = $(word $(1),$(subst :, ,$(2)))
DEVQ_TEST_ROWS := $(strip $(call devq_test_rows,$(DEVQ_TEST_TABLE)))
DEVQ_ALL_TESTS := $(foreach r,$(DEVQ_TEST_ROWS),$(call devq_test_field,1,$(r)))
# $(call devq_tests_in,SUITE): the programs of that suite, in table order.
devq_tests_in = $(foreach r,$(DEVQ_TEST_ROWS),$(if $(filter $(1),$(subst $(devq_comma), ,$(call devq_test_field,4,$(r)))),$(call devq_test_field,1,$(r))))

# A row of the wrong shape shifts every row after it: refuse it here, not
# as a missing rule three programs later.
$(foreach r,$(DEVQ_TEST_ROWS),$(if $(and $(filter test_%,$(call devq_test_field,1,$(r))), \
  $(filter no some all,$(call devq_test_field,3,$(r))), \
  $(filter check sim check$(devq_comma)sim,$(call devq_test_field,4,$(r))), \
  $(wildcard $(call devq_test_field,5,$(r)))),,\
  $(error mk/tests.mk: the row '$(subst :, ,$(r))' is not "program link root suites source" with an existing source)))

TESTS := $(call devq_tests_in,check)
CUDASIM_TESTS := $(call devq_tests_in,sim)
ifeq ($(origin TESTS),command line)
  ifneq ($(filter-out $(DEVQ_ALL_TESTS),$(TESTS)),)
    $(error TESTS names no test program: $(filter-out $(DEVQ_ALL_TESTS),$(TESTS)) (make list-tests lists them))
  endif
endif
TEST_BIN = $(addprefix $(BUILD)/tests/,$(TESTS))

# link harness: the source, the harness and libdevq.
define devq_harness_rule
$(BUILD)/tests/$(1): $(call obj,$(2) tests/harness.c) $(KERNEL_OBJ) $(BUILD)/libdevq.a
	@mkdir -p $$(dir $$@)
	$$(call quiet,LD,$$@)$$(CC) $$(LDFLAGS) -pthread -o $$@ $$^ $$(LIBS_PB) $$(LIBS_CK) -lm
endef
$(foreach r,$(DEVQ_TEST_ROWS),$(if $(filter harness,$(call devq_test_field,2,$(r))),\
  $(eval $(call devq_harness_rule,$(call devq_test_field,1,$(r)),$(call devq_test_field,5,$(r))))))

# Harness programs that link the hostile client too (tests/hostile.c: raw
# frames, crafted memfds, what the daemon holds).
$(addprefix $(BUILD)/tests/,test_attack test_badinput test_bounds test_sring): $(call obj,tests/hostile.c)

# link tests: unit tests of the signature parser and kernels, and of the
# framing code, with no other home.
$(BUILD)/tests/test_kernels: $(call obj,tests/test_kernels.c) $(KERNEL_OBJ) $(call obj,kernels/sig.c)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_CK) -lm

$(BUILD)/tests/test_frame: $(call obj,tests/test_frame.c) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) $(LIBS_CK) -lm

.PHONY: check check-asan check-valgrind list-tests check-test-map
# Each test program prints Check's summary; the last line adds them up
# (tools/run-tests.sh, which repeats a failing program's failure lines).
## build and run every test program, or TESTS="test_frame test_core" only
check: all $(TEST_BIN)
	@DEVQ_BUILD=$(BUILD) DEVQ_SANITIZER=$(SAN) sh tools/run-tests.sh $(BUILD)/tests $(BUILD)/tests $(TESTS)

## make check with the daemon of every integration test under valgrind memcheck
check-valgrind: all $(TEST_BIN)
	@command -v valgrind >/dev/null || { echo "valgrind not found: apt-get install valgrind"; exit 1; }
	$(MAKE) --no-print-directory check DEVQ_VALGRIND=1 SAN=valgrind

## make check built with ASan+UBSan, in build-asan/ (TESTS= works here too)
check-asan:
	$(MAKE) BUILD=build-asan SAN=1 check

## print the test table: program, link, root, suites, source
list-tests:
	@printf '%-18s %-12s %-5s %-10s %s\n' program link root suites source \
	  $(foreach r,$(DEVQ_TEST_ROWS),$(subst :, ,$(r)))

# The map in tests/README.md has a row "| `program` | ..." for each program
# of the table and no other; a program that is not linked by the harness
# has its rule in the mk file its row names; nothing adds to TESTS outside
# the table.
## tests/README.md's map and the mk files agree with the test table (in check)
check-test-map:
	@bad=0; \
	map=$$(sed -n 's/^| `\(test_[a-z0-9_]*\)` |.*/\1/p' tests/README.md); \
	for t in $(DEVQ_ALL_TESTS); do \
	  echo "$$map" | grep -qx "$$t" || { echo "check-test-map: $$t has no row in tests/README.md's map"; bad=1; }; \
	done; \
	for t in $$map; do \
	  case " $(DEVQ_ALL_TESTS) " in *" $$t "*) ;; \
	  *) echo "check-test-map: tests/README.md maps $$t, which mk/tests.mk does not list"; bad=1 ;; esac; \
	done; \
	for r in $(DEVQ_TEST_ROWS); do \
	  t=$${r%%:*}; l=$${r#*:}; l=$${l%%:*}; [ $$l = harness ] && continue; \
	  grep -q "^\$$(BUILD)/tests/$$t:" mk/$$l.mk 2>/dev/null || \
	    { echo "check-test-map: $$t: no rule \$$(BUILD)/tests/$$t: in mk/$$l.mk"; bad=1; }; \
	done; \
	for t in $(filter-out $(DEVQ_ALL_TESTS),$(TESTS)); do \
	  echo "check-test-map: $$t is added to TESTS outside mk/tests.mk's table"; bad=1; \
	done; \
	[ $$bad = 0 ] && echo "check-test-map: $(words $(DEVQ_ALL_TESTS)) test programs, each in tests/README.md's map and built by its rule"
check: check-test-map
