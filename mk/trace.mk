# SPDX-License-Identifier: Apache-2.0
# Tracing: devctl trace / devctl top and the daemon's op recorder
# (daemon/core/trace.c, client/devctl/trace.c, client/devctl/top.c are listed in
# the Makefile's source lists).

# Debian packages the tests below need (make deps installs them).
DEB_PACKAGES += tmux python3

# Integration tests against a real devqd, linked with the harness
# (mk/tests.mk): test_trace runs tests/trace/check_trace.py (python3);
# test_top_tmux drives devctl top in tmux.

# Recording overhead: ops/s with the recorder off, idle, and while a trace
# is taken.  `make bench-trace` (BENCH_TRACE_ARGS=--quick for a short run).
.PHONY: bench-trace
## ops/s with the op recorder off, idle and tracing (BENCH_TRACE_ARGS)
bench-trace: $(BUILD)/bench/trace_overhead $(BUILD)/devqd
	$(BUILD)/bench/trace_overhead --devqd $(BUILD)/devqd $(BENCH_TRACE_ARGS)

$(BUILD)/bench/trace_overhead: $(call obj,bench/trace_overhead.c) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) -lm

# The hand-written TraceOp of a TraceReply (daemon/requests/trace_enc.c)
# against protobuf-c's packer: a unit test, no daemon (test_trace_enc).
$(BUILD)/tests/test_trace_enc: $(call obj,tests/test_trace_enc.c daemon/requests/trace_enc.c) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) $(LIBS_CK) -lm
