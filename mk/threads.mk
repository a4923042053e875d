# SPDX-License-Identifier: Apache-2.0
# devqd's threads from outside (/proc/PID/task/): their names, and which
# thread runs a short op.  bench/sporadic.sh measures the sporadic op's
# path.
$(BUILD)/tests/test_threads: $(BUILD)/obj/tests/test_threads.o $(call obj,tests/harness.c daemon/base/lock.c daemon/base/slice.c) $(KERNEL_OBJ) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) $(LIBS_CK) -lm

# The sporadic-client benchmark (bench/sporadic.sh; not part of make check).
$(BUILD)/bench/sporadic: $(call obj,bench/sporadic.c bench/bench_util.c) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) -lm
bench-build: $(BUILD)/bench/sporadic

# What waking an idle CPU's thread costs by futex, socket, epoll and
# eventfd (bench/wake.c: the floor under any submit path; not part of make
# check).
$(BUILD)/bench/wake: $(call obj,bench/wake.c bench/bench_util.c) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) -lm
bench-build: $(BUILD)/bench/wake
