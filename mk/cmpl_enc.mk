# SPDX-License-Identifier: Apache-2.0
# Performance: the hand-written Completions encoder (proto/codec/cmpl_enc.c,
# in DAEMON_SRC) checked against protobuf-c, which decodes it on the client
# side.  A unit test: no daemon, only the
# encoder, the framing code and the generated protobuf-c code
# (test_cmpl_enc).

$(BUILD)/tests/test_cmpl_enc: $(call obj,tests/test_cmpl_enc.c proto/codec/cmpl_enc.c) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) $(LIBS_CK) -lm
