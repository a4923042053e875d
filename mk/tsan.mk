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

.PHONY: check-tsan
check-tsan:
	TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp second_deadlock_stack=1 $(TSAN_OPTIONS)" \
		$(MAKE) BUILD=$(TSAN_BUILD) SAN=tsan check
