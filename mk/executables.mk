# SPDX-License-Identifier: Apache-2.0
# The executable repository (daemon/core/repo.c): the header a CPU kernel is
# written against (kernels/devq/kernel.h, installed as <devq/kernel.h> with
# the pkg-config module devq-kernel), the example executable scale_u32
# (examples/executables/: its .so and, with nvcc, its fatbin, built into
# $(BUILD)/examples/executables/ and installed as documentation, never as a
# live executable), and tests/repo.sh (the program test_repo).
DOCDIR ?= $(PREFIX)/share/doc/devq
EXEC_EXAMPLE = $(BUILD)/examples/executables
EXEC_EXAMPLE_OUT = $(EXEC_EXAMPLE)/scale_u32.so $(if $(filter 1,$(CUDA_ENABLED)),$(EXEC_EXAMPLE)/scale_u32.fatbin)

all: $(EXEC_EXAMPLE_OUT) $(BUILD)/devq-kernel.pc

# As the example's own Makefile builds it, with -Ikernels for the header
# (no sanitizer flags: it is loaded into whatever devqd the tests run).
$(EXEC_EXAMPLE)/scale_u32.so: examples/executables/scale_u32.c kernels/devq/kernel.h
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) -std=c11 $(WARN) -O2 -Ikernels -shared -fPIC -o $@ $<

ifeq ($(CUDA_ENABLED),1)
$(EXEC_EXAMPLE)/scale_u32.fatbin: examples/executables/scale_u32.cu
	@mkdir -p $(dir $@)
	$(call quiet,NVCC,$@)$(NVCC) --fatbin $(CUDA_GENCODE) $(ALL_NVCC_FLAGS) -o $@ $<
endif

$(BUILD)/devq-kernel.pc: packaging/devq-kernel.pc.in VERSION
	$(call quiet,GEN,$@)sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(DEVQ_VERSION)|' $< > $@

.PHONY: install-executables
install: install-executables
## install <devq/kernel.h>, devq-kernel.pc and the example executable's sources
install-executables: install-pc
	@rm -f $(BUILD)/devq-kernel.pc
	@$(MAKE) --no-print-directory $(BUILD)/devq-kernel.pc
	$(INSTALL) -d $(DESTDIR)$(INCLUDEDIR)/devq $(DESTDIR)$(LIBDIR)/pkgconfig \
	  $(DESTDIR)$(DOCDIR)/examples/executables
	$(INSTALL) -m 0644 kernels/devq/kernel.h $(DESTDIR)$(INCLUDEDIR)/devq/kernel.h
	$(INSTALL) -m 0644 $(BUILD)/devq-kernel.pc $(DESTDIR)$(LIBDIR)/pkgconfig/devq-kernel.pc
	$(INSTALL) -m 0644 examples/executables/scale_u32.c examples/executables/scale_u32.cu \
	  examples/executables/scale_u32.exec examples/executables/Makefile \
	  $(DESTDIR)$(DOCDIR)/examples/executables/

# A client that keeps an executable's id across a reload (tests/repo.sh).
$(BUILD)/tests/repo_client: tests/repo_client.c client/devq.h $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) -std=c11 $(WARN) $(CFLAGS) -D_GNU_SOURCE -Iclient -o $@ $< $(BUILD)/libdevq.a $(LDFLAGS) $(LIBS_PB) -pthread -lm
$(BUILD)/tests/test_repo: tests/repo.sh $(BUILD)/tests/repo_client $(EXEC_EXAMPLE_OUT) $(BUILD)/devqd $(BUILD)/devctl
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)printf '#!/bin/sh\nexec sh tests/repo.sh "$$@"\n' > $@
	$(Q)chmod +x $@

# The repository inside the engine against a fake backend with load_image
# and unload_image (tests/core/test_repo_core.c): images outlive a reload
# until their last op, and are unloaded exactly once.
$(BUILD)/tests/test_repo_core: $(call obj,tests/core/test_repo_core.c) $(BUILD)/libdevqd-core.a \
		$(KERNEL_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) $(LIBS_SD) $(LIBS_CK) -ldl -lm
