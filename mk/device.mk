# SPDX-License-Identifier: Apache-2.0
# Device loss and reconnection (tests/test_lost.c), and the CUDA backend's
# daemon side (the kernels and the fatbin are built by mk/cuda.mk).
# test_lost links the cut of notices to what a client keeps, tested on its
# own there.
$(BUILD)/tests/test_lost: $(call obj,daemon/server/notice.c)

# The CUDA backend: its objects include <cuda.h>; the calibration
# arithmetic is pure C and tested in every build.
# (The backend's objects are listed once, in mk/cuda.mk's CUDA_DAEMON_OBJ.)
ifeq ($(CUDA_ENABLED),1)
$(call obj,$(wildcard daemon/device/cuda/*.c) daemon/device/select.c tests/test_cuda.c): \
	ALL_CFLAGS += $(CUDA_CFLAGS)
TEST_CUDA_OBJ = $(call obj,daemon/device/cuda/cuda_drv.c)
endif

$(BUILD)/tests/test_cuda: $(call obj,tests/test_cuda.c tests/harness.c daemon/device/cuda/cuda_time.c \
		daemon/device/cuda/graph_cache.c) \
		$(TEST_CUDA_OBJ) $(KERNEL_OBJ) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) $(LIBS_CK) -ldl -lm

# ---- the GPU proof: tests/gpu/run.sh -----------------------------------
# gpu_check drives devqd through libdevq; native_bench is the driver-API
# baseline; `make gpu-bundle` gathers them with devqd, devctl,
# kernel_check, run.sh and every shared library they need that is not the
# C library (plus the C library, its loader and its companions libm, libdl,
# libpthread and librt, used only if the GPU host's is older), so a machine
# with a GPU and nothing else installed can run it.
GPU_BUNDLE = $(BUILD)/gpu-bundle
.PHONY: gpu-bundle
ifeq ($(CUDA_ENABLED),1)
# The cublas mode dlopens the driver and cuBLAS (types from the toolkit).
$(call obj,tests/gpu/gpu_check.c): ALL_CFLAGS += $(CUDA_CFLAGS)
$(BUILD)/tests/gpu/gpu_check: $(call obj,tests/gpu/gpu_check.c) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) -ldl -lm
$(call obj,tests/gpu/native_bench.c): ALL_CFLAGS += $(CUDA_CFLAGS)
$(BUILD)/tests/gpu/native_bench: $(call obj,tests/gpu/native_bench.c daemon/device/cuda/cuda_drv.c) $(CUDA_EMBED_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ -ldl
all: $(BUILD)/tests/gpu/gpu_check $(BUILD)/tests/gpu/native_bench

# The bundle is built with the CUDA 13.0 toolkit only (DEVQ_CUDA_API_VERSION,
# daemon/device/cuda/cuda_drv.h): its cuda.h is the one devq's driver calls
# are written against.  CUDA_TOOLKIT_ANY=1 builds it with another anyway.
GPU_BUNDLE_TOOLKIT = 13.0
CUDA_TOOLKIT_VERSION = $(shell $(NVCC) --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
## build/gpu-bundle/: devqd, devctl, the GPU checks, run.sh and their libraries
gpu-bundle: all $(BUILD)/tests/gpu/gpu_check $(BUILD)/tests/gpu/native_bench $(BUILD)/host/libdevq-host-cuda.so
	@if [ "$(CUDA_TOOLKIT_VERSION)" != "$(GPU_BUNDLE_TOOLKIT)" ] && [ "$(CUDA_TOOLKIT_ANY)" != 1 ]; then \
	  echo "gpu-bundle: the CUDA toolkit is $(or $(CUDA_TOOLKIT_VERSION),unknown) ($(NVCC)), not" \
	       "$(GPU_BUNDLE_TOOLKIT), the version devq's driver calls are written against;" \
	       "build with CUDA_TOOLKIT_ANY=1 to bundle it anyway"; exit 1; fi
	rm -rf $(GPU_BUNDLE)
	mkdir -p $(GPU_BUNDLE)/bin $(GPU_BUNDLE)/lib/glibc
	cp $(BUILD)/devqd $(BUILD)/devctl $(BUILD)/tests/gpu/gpu_check \
	   $(BUILD)/tests/gpu/native_bench $(BUILD)/tests/gpu/kernel_check $(GPU_BUNDLE)/bin/
	# The CUDA host library (gemm on the host's cuBLAS), where devqd
	# looks beside itself.
	mkdir -p $(GPU_BUNDLE)/bin/host
	cp $(BUILD)/host/libdevq-host-cuda.so $(GPU_BUNDLE)/bin/host/
	cp $(CUDA_FATBIN) $(GPU_BUNDLE)/
	cp tests/gpu/run.sh $(GPU_BUNDLE)/
	for b in $(GPU_BUNDLE)/bin/*; do ldd $$b; done | awk '$$2 == "=>" && $$3 ~ /^\// { print $$3 }' | \
	  sort -u | while read -r l; do \
	    case $$(basename $$l) in \
	      libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*) cp -L $$l $(GPU_BUNDLE)/lib/glibc/ ;; \
	      *) cp -L $$l $(GPU_BUNDLE)/lib/ ;; \
	    esac; done
	cp -L /lib64/ld-linux-x86-64.so.2 $(GPU_BUNDLE)/lib/glibc/
	# The C library's companions, whether or not our programs link them:
	# the host's libcuda.so.1 may, and must find the bundled C library's.
	libc=$$(ldd $(BUILD)/devqd | awk '$$1 ~ /^libc\.so/ { print $$3 }'); \
	for l in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1; do \
	  cp -L $$(dirname $$libc)/$$l $(GPU_BUNDLE)/lib/glibc/ || exit 1; done
	@du -sh $(GPU_BUNDLE)
else
gpu-bundle:
	@echo "gpu-bundle: this build has no CUDA (nvcc not found, or CUDA=0)"; exit 1
endif
