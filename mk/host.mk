# SPDX-License-Identifier: Apache-2.0
# The built-in host libraries (kernels/host/): the code of manifest.def's
# DEVQ_HOST_KERNEL built-ins (gemm_f32, gemm_f32_nt) on the host-executable
# ABI of <devq/kernel.h>, one shared object per backend, which devqd loads
# at start from DIR/host/ next to itself (BUILD/host/ in a build tree), else
# from HOSTDIR (daemon/core/repo.c, devq_repo_builtins):
#   libdevq-host-cpu.so   OpenBLAS (libopenblas-dev), linked
#   libdevq-host-cuda.so  cuBLAS, dlopened on first use (CUDA builds only;
#                         needs <cublas_v2.h> from the toolkit to compile)
# No sanitizer flags: they are loaded into whatever devqd runs, as the
# repository's executables are.
HOSTDIR ?= $(PREFIX)/lib/devq
HOST_LIBS = $(BUILD)/host/libdevq-host-cpu.so
$(call obj,daemon/core/repo.c): ALL_CFLAGS += -DDEVQ_HOSTDIR='"$(HOSTDIR)"'

OPENBLAS_CFLAGS = $(shell pkg-config --cflags openblas 2>/dev/null)
OPENBLAS_LIBS   = $(shell pkg-config --libs openblas 2>/dev/null)

$(BUILD)/host/libdevq-host-cpu.so: kernels/host/gemm_cpu.c kernels/host/gemm_exes.h kernels/devq/kernel.h
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -O2 -g -Ikernels $(OPENBLAS_CFLAGS) -shared -fPIC -pthread \
		-o $@ $< $(OPENBLAS_LIBS)

ifeq ($(CUDA_ENABLED),1)
HOST_LIBS += $(BUILD)/host/libdevq-host-cuda.so
$(BUILD)/host/libdevq-host-cuda.so: kernels/host/gemm_cuda.c kernels/host/gemm_exes.h kernels/devq/kernel.h
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -O2 -g -Ikernels $(CUDA_CFLAGS) -shared -fPIC -pthread \
		-o $@ $< -ldl
endif

all: $(HOST_LIBS)

.PHONY: install-host
install: install-host
## install the built-in host libraries into HOSTDIR
install-host: $(HOST_LIBS)
	$(INSTALL) -d $(DESTDIR)$(HOSTDIR)
	$(INSTALL) -m 0644 $(HOST_LIBS) $(DESTDIR)$(HOSTDIR)/

# tests/host.sh (the program test_host): host executables from the test
# library tests/host_exes.c on the CPU backend (and, under
# make check-cuda-sim, on the simulated CUDA backend).
$(BUILD)/tests/test_host: tests/host.sh tests/host_exes.c $(BUILD)/devqd $(BUILD)/devctl
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)printf '#!/bin/sh\nexec sh tests/host.sh "$$@"\n' > $@
	$(Q)chmod +x $@

# examples/mlp/mlp.py with 4 processes at small sizes (tests/mlp.sh, the
# program test_mlp); `make bench-mlp` runs it at full sizes.
$(BUILD)/tests/test_mlp: tests/mlp.sh examples/mlp/mlp.py $(BUILD)/devqd python
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)printf '#!/bin/sh\nPYTHON=%s exec sh tests/mlp.sh "$$@"\n' '$(PYTHON)' > $@
	$(Q)chmod +x $@
