# SPDX-License-Identifier: Apache-2.0
# Attacks: test_attack (mk/tests.mk) runs eight hostile-tenant attacks
# against a real devqd; here, what a request costs the loop when a client
# arranged the daemon's state.

# test_tracereq: the request handlers against an engine without transport.
$(BUILD)/tests/test_tracereq: $(call obj,tests/core/test_tracereq.c) \
		$(call obj,daemon/requests/tracereq.c daemon/requests/trace_enc.c) $(BUILD)/libdevqd-core.a \
		$(KERNEL_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) $(LIBS_SD) $(LIBS_CK) -ldl -lm

# The loop's worst stall while a 4 GiB buffer is imported (bench/RESULTS.md,
# "The loop while a 4 GiB buffer is imported").
$(BUILD)/bench/import_stall: $(call obj,bench/import_stall.c) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) -lm

.PHONY: bench-import-stall
## the loop's worst stall while a 4 GiB buffer is imported (IMPORT_MB=N)
bench-import-stall: all $(BUILD)/bench/import_stall
	DEVQ_BUILD=$(BUILD) $(BUILD)/bench/import_stall $(IMPORT_MB)
