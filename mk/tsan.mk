# SPDX-License-Identifier: Apache-2.0
# Race detection: `make check-tsan` builds the daemon, libdevq and every test
# with ThreadSanitizer in build-tsan/ and runs the whole suite; a race in any
# devqd (reported at exit, status 66) fails the test that started it.
# Suppressions live in tests/tsan.supp, each with the argument that it is
# benign.

TSAN_BUILD ?= build-tsan

ifeq ($(SAN),tsan)
  CFLAGS  += -O1 -fsanitize=thread -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=thread
endif

# setarch -R: kernels with more mmap randomisation (vm.mmap_rnd_bits > 28)
# put mappings where gcc 12's TSan runtime does not expect them ("FATAL:
# ThreadSanitizer: unexpected memory mapping"); without ASLR it always fits.
TSAN_SETARCH = $(if $(shell command -v setarch 2>/dev/null),setarch $(shell uname -m) -R)

.PHONY: check-tsan
## make check built with ThreadSanitizer, in build-tsan/
check-tsan:
	TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp second_deadlock_stack=1 $(TSAN_OPTIONS)" \
		$(TSAN_SETARCH) $(MAKE) BUILD=$(TSAN_BUILD) SAN=tsan check
