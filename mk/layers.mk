# SPDX-License-Identifier: Apache-2.0
# The daemon as layers (ARCHITECTURE.md): a static library of everything but
# main() that devqd, the fuzz driver and the tests link; the core's unit
# tests, which need no socket and no libuv; and the check that includes and
# calls only go down (tools/check_layers.py).

# Everything devqd links but its main(): the CUDA backend too, when built.
DAEMON_LIB_OBJ = $(filter-out $(call obj,daemon/server/main.c),$(DAEMON_OBJ))
$(BUILD)/libdevqd.a: $(DAEMON_LIB_OBJ)
	$(Q)rm -f $@
	$(call quiet,AR,$@)ar rcs $@ $^

# base, device and core: what the engine needs, no transport.
DAEMON_CORE_OBJ = $(call obj,$(DAEMON_BASE_SRC) $(DAEMON_DEVICE_SRC) $(DAEMON_CORE_SRC) \
                  proto/codec/cmpl_enc.c) $(CUDA_DAEMON_OBJ)
$(BUILD)/libdevqd-core.a: $(DAEMON_CORE_OBJ)
	$(Q)rm -f $@
	$(call quiet,AR,$@)ar rcs $@ $^

# Unit tests of the core against a fake backend (tests/core/).
# Linked with fault injection (tests/core/fault.h): the core's calls of
# these go through wrappers a test can make fail.
CORE_FAULT_WRAPS = malloc calloc realloc memfd_create ftruncate fcntl mmap munmap madvise \
		   pthread_create close fstat fstatfs eventfd pipe2
# Check itself is a static library here (libcheck_pic.a): a copy of it calls
# the real functions, so that its own allocations (every ck_assert makes
# one) never fail on a test's request.
$(BUILD)/tests/libcheck-nofault.a:
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)objcopy $(foreach f,$(CORE_FAULT_WRAPS),--redefine-sym $(f)=__real_$(f)) \
		$$($(CC) -print-file-name=libcheck_pic.a) $@
$(BUILD)/tests/test_core: $(call obj,tests/core/test_core.c tests/core/fault.c) \
		$(BUILD)/libdevqd-core.a $(KERNEL_OBJ) $(COMMON_OBJ) $(BUILD)/tests/libcheck-nofault.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread $(foreach f,$(CORE_FAULT_WRAPS),-Wl,--wrap=$(f)) -o $@ $^ \
		$(LIBS_PB) $(LIBS_SD) $(LIBS_CK) -ldl -lm

# Fails on an include or a call that runs up a layer, a cycle among the
# daemon's rooms (header and source) or folders, calls through inline
# functions counted, or a transport in daemon/core/.  Reads the objects of
# devqd, so it runs after they are built; first its self-test plants such
# cycles in small trees and makes sure it fails on each.
.PHONY: check-layers
## includes and calls only go down the daemon's layers, no cycle (in check)
check-layers: $(BUILD)/devqd
	@out=$$(python3 tools/test_check_layers.py 2>&1) || { echo "$$out"; exit 1; }; \
	  echo "check-layers: fails on each planted cycle (tools/test_check_layers.py)"
	@python3 tools/check_layers.py $(BUILD)/obj
check: check-layers
