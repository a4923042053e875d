# SPDX-License-Identifier: Apache-2.0
# examples/: complete client programs, as a user would write them.  Built
# against build/libdevq.so with nothing but -Iclient -Lbuild -ldevq, and
# run by `make check` (tests/example.sh, as the program test_example)
# against a devqd of its own, dynamically (LD_LIBRARY_PATH=build, through
# the libdevq.so.0 link) and linked statically with what
# `pkg-config --static --libs devq` says.
EXAMPLE_SRC = $(sort $(wildcard examples/*.c))
EXAMPLES    = $(patsubst examples/%.c,$(BUILD)/examples/%,$(EXAMPLE_SRC))

.PHONY: examples
## build examples/*.c against build/libdevq.so, as a user would
examples: $(EXAMPLES)

$(BUILD)/examples/%: examples/%.c client/devq.h $(BUILD)/libdevq.so.0
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) -std=c11 $(WARN) $(CFLAGS) -Iclient -o $@ $< -L$(BUILD) -ldevq

$(BUILD)/tests/test_example: tests/example.sh $(EXAMPLES) $(BUILD)/devqd $(BUILD)/libdevq.a packaging/devq.pc.in
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)printf '#!/bin/sh\nexec env DEVQ_EXAMPLE_LDFLAGS="%s" sh tests/example.sh "$$@"\n' '$(LDFLAGS)' > $@
	$(Q)chmod +x $@

# README.md's one-minute paths, run as written (tests/oneminute.sh, as the
# program test_oneminute): what their blocks build is built first, so
# their `make` has nothing left to do.
$(BUILD)/tests/test_oneminute: tests/oneminute.sh README.md $(BUILD)/devqd $(BUILD)/devctl python
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)printf '#!/bin/sh\nexec sh tests/oneminute.sh "$$@"\n' > $@
	$(Q)chmod +x $@
