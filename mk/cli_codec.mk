# SPDX-License-Identifier: Apache-2.0
# Performance: libdevq's hand-written Submit encoder and Completions decoder
# (client/submit_enc.c, client/cmpl_dec.c, in LIB_SRC) and the
# send queue they write into (devq_tx_append), checked against protobuf-c.
# A unit test: no daemon, only the codecs, the framing code and the
# generated protobuf-c code (test_cli_codec).

$(BUILD)/tests/test_cli_codec: $(call obj,tests/test_cli_codec.c client/submit_enc.c client/cmpl_dec.c) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) $(LIBS_CK) -lm
