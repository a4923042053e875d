# SPDX-License-Identifier: Apache-2.0
# Attacks: each of eight hostile-tenant attacks run against a real devqd
# while a client of another uid must be served within a stated bound, then
# the daemon's fds, memory and huge pages checked back at their baseline
# (tests/test_attack.c; DEVQ_ATTACK=NAME runs one).  The hostile client
# (tests/hostile.c: raw frames, crafted memfds, what the daemon holds) is
# shared with test_badinput.
TESTS += test_attack
HARNESS_TESTS += test_attack

$(BUILD)/tests/test_attack $(BUILD)/tests/test_badinput: $(call obj,tests/hostile.c)

# What a request costs the loop when a client arranged the daemon's state:
# the request handlers against an engine without transport.
TESTS += test_tracereq
$(BUILD)/tests/test_tracereq: $(call obj,tests/core/test_tracereq.c) \
		$(call obj,daemon/requests/tracereq.c daemon/requests/trace_enc.c) $(BUILD)/libdevqd-core.a \
		$(KERNEL_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) $(LIBS_SD) $(LIBS_CK) -ldl -lm

# The loop's worst stall while a 4 GiB buffer is imported (bench/RESULTS.md).
$(BUILD)/bench/import_stall: $(call obj,bench/import_stall.c) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) -lm

.PHONY: bench-import-stall
bench-import-stall: all $(BUILD)/bench/import_stall
	DEVQ_BUILD=$(BUILD) $(BUILD)/bench/import_stall $(IMPORT_MB)
