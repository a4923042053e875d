# SPDX-License-Identifier: Apache-2.0
# Performance: the hand-written decoder of ClientMessage{submit}
# (proto/codec/msg_dec.c, in DAEMON_SRC) checked against protobuf-c's
# unpacker, which decodes the frames it declines.  A unit test: the decoder, the frame arena it
# decodes into in the daemon (daemon/base/pool.c) and the generated
# protobuf-c code (test_msg_dec).

$(BUILD)/tests/test_msg_dec: $(call obj,tests/test_msg_dec.c proto/codec/msg_dec.c proto/codec/strcheck.c \
		daemon/base/pool.c) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) $(LIBS_CK) -lm
