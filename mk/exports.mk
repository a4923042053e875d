# SPDX-License-Identifier: Apache-2.0
# libdevq exports what client/devq.h declares with DEVQ_EXPORT and nothing
# else: its objects, those it shares with devqd and the tests included
# (COMMON_OBJ: framing, signatures, the generated protobuf-c code), are
# compiled with hidden visibility, which changes nothing for the programs
# that link them statically.  They depend on this file so that a build
# directory from before it (or from a change to the flag) recompiles them.
$(LIB_OBJ) $(COMMON_OBJ): ALL_CFLAGS += -fvisibility=hidden
$(LIB_OBJ) $(COMMON_OBJ): mk/exports.mk

# test_exports is tools/check-exports.sh, which compares
# `nm -D --defined-only libdevq.so` with the functions client/devq.h
# declares; it prints a Check-style summary, so `make check` runs and counts
# it with the other tests.  `make check-exports` runs it alone.

$(BUILD)/tests/test_exports: tools/check-exports.sh $(BUILD)/libdevq.so client/devq.h
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)cp tools/check-exports.sh $@
	$(Q)chmod +x $@

.PHONY: check-exports
## libdevq.so exports what client/devq.h declares, nothing else (test_exports)
check-exports: $(BUILD)/tests/test_exports
	DEVQ_BUILD=$(BUILD) $(BUILD)/tests/test_exports
