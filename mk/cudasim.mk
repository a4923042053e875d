# SPDX-License-Identifier: Apache-2.0
# The CUDA backend under test without a GPU: tests/cudasim/ is a test
# instrument built as libcuda.so.1 that simulates the driver API devqd uses
# and reports every breach of CUDA's rules (see its header comment).
#
#   make check-cuda-sim        the integration suites with devqd --backend
#                              cuda against the simulator (an sm_90 GPU;
#                              test_cudasim again as sm_80 and as sm_100,
#                              which runs the PTX; test_repo_cuda, the
#                              executable repository, on sm_80, sm_90
#                              and sm_100); fails on any test failure or
#                              any rule violation
#   make check-cuda-sim-asan   the same built with ASan+UBSan (build-asan/)
#
# DEVQ_CUDASIM_ARCH picks the simulated device (80, 90, 100).

CUDASIM_DIR = $(BUILD)/tests/cudasim
CUDASIM_LIB = $(CUDASIM_DIR)/libcuda.so.1
# CUDASIM_TESTS, the programs it runs, are the rows of mk/tests.mk whose
# suites say sim.
CUDASIM_SOAK_SECONDS ?= 20
.PHONY: check-cuda-sim check-cuda-sim-asan

ifeq ($(CUDA_ENABLED),1)
$(call obj,tests/cudasim/cudasim.c): ALL_CFLAGS += $(CUDA_CFLAGS) -fvisibility=hidden
$(CUDASIM_LIB): $(call obj,tests/cudasim/cudasim.c daemon/device/cuda/fatbin.c kernels/sig.c) \
		$(KERNEL_OBJ) tests/cudasim/exports.map
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -shared -Wl,-soname,libcuda.so.1 -Wl,--version-script=tests/cudasim/exports.map \
		-pthread -o $@ $(filter %.o,$^) -lm

# The executable repository on the CUDA backend (tests/repo_cuda.sh), with
# an image of the example that has SASS for sm_80 only (no PTX), and the
# example as a bare sm_90 cubin and as compute_90 PTX.
$(CUDASIM_DIR)/scale_u32_sm80.fatbin: examples/executables/scale_u32.cu
	@mkdir -p $(dir $@)
	$(call quiet,NVCC,$@)$(NVCC) --fatbin -gencode arch=compute_80,code=sm_80 $(ALL_NVCC_FLAGS) -o $@ $<
$(CUDASIM_DIR)/scale_u32.cubin: examples/executables/scale_u32.cu
	@mkdir -p $(dir $@)
	$(call quiet,NVCC,$@)$(NVCC) --cubin -arch sm_90 $(ALL_NVCC_FLAGS) -o $@ $<
$(CUDASIM_DIR)/scale_u32.ptx: examples/executables/scale_u32.cu
	@mkdir -p $(dir $@)
	$(call quiet,NVCC,$@)$(NVCC) --ptx -arch compute_90 $(ALL_NVCC_FLAGS) -o $@ $<
$(BUILD)/tests/test_repo_cuda: tests/repo_cuda.sh $(EXEC_EXAMPLE_OUT) $(CUDASIM_DIR)/scale_u32_sm80.fatbin \
		$(CUDASIM_DIR)/scale_u32.cubin $(CUDASIM_DIR)/scale_u32.ptx $(BUILD)/devqd $(BUILD)/devctl
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)printf '#!/bin/sh\nexec sh tests/repo_cuda.sh "$$@"\n' > $@
	$(Q)chmod +x $@

# The simulator's own handling of repository images, against its API
# (tests/cudasim/selftest.c), with a stand-in that runs 1.5 s.
$(CUDASIM_DIR)/selftest: $(call obj,tests/cudasim/selftest.c) $(CUDASIM_LIB)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -o $@ $< $(CUDASIM_LIB) -Wl,-rpath,$(abspath $(CUDASIM_DIR))
$(call obj,tests/cudasim/selftest.c): ALL_CFLAGS += $(CUDA_CFLAGS)
$(CUDASIM_DIR)/slow.so: tests/repo_kernels.c kernels/devq/kernel.h
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) -std=c11 $(WARN) -O2 -Ikernels -shared -fPIC -DSLOW -o $@ $<
$(BUILD)/tests/test_cudasim_self: $(CUDASIM_DIR)/selftest $(CUDASIM_DIR)/slow.so \
		$(EXEC_EXAMPLE_OUT) $(CUDASIM_DIR)/scale_u32_sm80.fatbin $(CUDASIM_DIR)/scale_u32.ptx
	$(call quiet,GEN,$@)printf '#!/bin/sh\nexec %s %s %s %s %s\n' $(abspath $(CUDASIM_DIR)/selftest) \
		$(abspath $(EXEC_EXAMPLE)/scale_u32.fatbin $(CUDASIM_DIR)/scale_u32_sm80.fatbin \
		$(CUDASIM_DIR)/scale_u32.ptx $(CUDASIM_DIR)/slow.so) > $@
	$(Q)chmod +x $@

## the integration suites on devqd --backend cuda against the driver simulator
check-cuda-sim: all $(CUDASIM_LIB) $(addprefix $(BUILD)/tests/,$(CUDASIM_TESTS))
	@rm -f $(CUDASIM_DIR)/violations; start=$$(date +%s); \
	DEVQ_BUILD=$(BUILD) DEVQ_SANITIZER=$(SAN) DEVQ_TEST_BACKEND=cuda DEVQ_CUDASIM_ARCH=90 \
	  DEVQ_CUDASIM_DIR=$(abspath $(CUDASIM_DIR)) \
	  DEVQ_CUDASIM_REPORT=$(abspath $(CUDASIM_DIR))/violations SOAK_SECONDS=$(CUDASIM_SOAK_SECONDS) \
	  RUN_TESTS_WHAT="(cuda, simulated)" \
	  sh tools/run-tests.sh $(BUILD)/tests $(CUDASIM_DIR) $(CUDASIM_TESTS) test_cudasim@80 test_cudasim@100; \
	rc=$$?; v=$$(cat $(CUDASIM_DIR)/violations 2>/dev/null | wc -l); \
	[ $$v = 0 ] || { echo "CUDA simulator rule violations:"; sort $(CUDASIM_DIR)/violations | uniq -c; }; \
	echo "check-cuda-sim: $$v rule violations, $$(( $$(date +%s) - start )) s"; \
	[ $$rc = 0 ] && [ $$v = 0 ]

## check-cuda-sim built with ASan+UBSan, in build-asan/
check-cuda-sim-asan:
	$(MAKE) BUILD=build-asan SAN=1 check-cuda-sim
else
check-cuda-sim check-cuda-sim-asan:
	@echo "$@: this build has no CUDA (nvcc not found, or CUDA=0)"; exit 1
endif

# The GPU bundle's run.sh against the simulator, as a test of the script:
# a plain run, devqd frozen by SIGSTOP, the script sent TERM halfway, the
# priority check on streams of one priority and the leak check with devqd
# dead (tests/gpu/script_check.sh says what each must show).
.PHONY: check-gpu-script
ifeq ($(CUDA_ENABLED),1)
## the GPU bundle's run.sh on the simulator: ends, keeps results, obeys TERM
check-gpu-script: $(CUDASIM_LIB)
	$(MAKE) gpu-bundle
	sh tests/gpu/script_check.sh $(GPU_BUNDLE) $(CUDASIM_DIR)
else
check-gpu-script:
	@echo "$@: this build has no CUDA (nvcc not found, or CUDA=0)"; exit 1
endif

# tests/gpu/run.sh, the GPU proof, against the simulator: shows the script
# and gpu_check complete and consistent without a GPU (its timings are the
# simulator's, so the seed and graph-replay numbers mean nothing here, and
# under load the seed check's 10% bound can fail).  Not part of CI.
.PHONY: gpu-script-sim
ifeq ($(CUDA_ENABLED),1)
## tests/gpu/run.sh, the GPU proof, against the simulator (timings mean nothing)
gpu-script-sim: all $(CUDASIM_LIB) $(BUILD)/tests/gpu/gpu_check $(BUILD)/tests/gpu/native_bench
	@rm -f $(CUDASIM_DIR)/violations
	LD_LIBRARY_PATH=$(abspath $(CUDASIM_DIR)) DEVQ_CUDASIM_OCCUPANCY=1 \
		DEVQ_CUDASIM_REPORT=$(abspath $(CUDASIM_DIR))/violations \
		sh tests/gpu/run.sh $(BUILD); rc=$$?; \
	v=$$(cat $(CUDASIM_DIR)/violations 2>/dev/null | wc -l); echo "gpu-script-sim: $$v rule violations"; \
	[ $$v = 0 ] && exit $$rc
endif
