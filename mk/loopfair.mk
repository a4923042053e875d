# SPDX-License-Identifier: Apache-2.0
# The loop shared by tenant: one tenant's costly requests (status, list,
# whole-ring traces) from several sessions against another tenant's null-op
# round trip.  make bench-loopfair runs the benchmark (bench/RESULTS.md,
# "The loop shared by tenant");
# test_loopshare (mk/tests.mk) is its functional side.
$(BUILD)/bench/loopfair: $(call obj,bench/loopfair.c) $(call obj,bench/bench_util.c) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) -lm

.PHONY: bench-loopfair
## one tenant's costly requests against another's null ops (LOOPFAIR_ARGS)
bench-loopfair: all $(BUILD)/bench/loopfair
	DEVQ_BUILD=$(BUILD) $(BUILD)/bench/loopfair $(LOOPFAIR_ARGS)
