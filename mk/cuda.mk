# SPDX-License-Identifier: Apache-2.0
# CUDA: the kernels (kernels/cuda_kernels.cu) compiled by nvcc into one
# fatbin, embedded in devqd; the fatbin reader (daemon/device/cuda/fatbin.c); the launch
# geometry (kernels/cuda_launch.c); tests/test_fatbin; and the GPU-only
# kernel checker tests/gpu/kernel_check.
#
#   CUDA=auto (default)  build all of it when nvcc is found
#   CUDA=1               the same, but a missing nvcc is an error
#   CUDA=0               skip it: devqd is built without the CUDA backend
#
# DEVQ_HAVE_CUDA=1 is defined for every object of a CUDA build, so switching
# CUDA in one BUILD directory needs a fresh directory (or make clean).
#
# For rules in the other mk/*.mk files (included after this one):
# CUDA_ENABLED is 1 or 0; objects that include <cuda.h> need $(CUDA_CFLAGS);
# a new daemon object of the CUDA backend belongs in CUDA_DAEMON_OBJ below.

CUDA      ?= auto
NVCC      ?= $(or $(wildcard /usr/local/cuda/bin/nvcc),$(shell command -v nvcc 2>/dev/null))
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

ifeq ($(CUDA),0)
  CUDA_ENABLED := 0
else ifeq ($(CUDA),auto)
  CUDA_ENABLED := $(if $(NVCC),1,0)
else ifeq ($(CUDA),1)
  CUDA_ENABLED := 1
  ifeq ($(NVCC),)
    $(error CUDA=1 but nvcc is not in /usr/local/cuda/bin or on PATH: install the CUDA toolkit, set NVCC=, or build with CUDA=0)
  endif
else
  $(error CUDA=$(CUDA): use auto, 1 or 0)
endif

CUDA_FATBIN = $(BUILD)/kernels/devq_kernels.fatbin
# SASS for Ampere (sm_80, which 8.6/8.7/8.9 also run) and Hopper (sm_90),
# and compute_90 PTX that newer GPUs compile at load.  Images are stored
# uncompressed so tests/test_fatbin can look inside them (the fatbin is
# tens of kB either way).
CUDA_GENCODE = -gencode arch=compute_80,code=sm_80 \
               -gencode arch=compute_90,code=sm_90 \
               -gencode arch=compute_90,code=compute_90
# Never -use_fast_math: saxpy and vadd must match the CPU bit for bit.
NVCC_FLAGS  ?= -O3
ALL_NVCC_FLAGS = -std=c++17 $(NVCC_FLAGS) -Werror all-warnings \
                 -Xcompiler -Wall,-Wextra,-Werror -Ikernels -Xfatbin -compress=false
CUDA_CFLAGS = -isystem $(CUDA_HOME)/include

# Pure C, built in every configuration: test_fatbin exercises the parser
# and the launch geometry even without nvcc.
FATBIN_TEST_OBJ = $(call obj,tests/test_fatbin.c daemon/device/cuda/fatbin.c kernels/cuda_launch.c \
                  kernels/sig.c) $(KERNEL_OBJ)

ifeq ($(CUDA_ENABLED),1)
ALL_CFLAGS += -DDEVQ_HAVE_CUDA=1
CUDA_EMBED_OBJ = $(BUILD)/obj/kernels/fatbin_embed.o
# The daemon's CUDA objects (the backend's included) join DAEMON_OBJ here,
# before the other mk/*.mk files are read, so every program they link from
# $(DAEMON_OBJ) (test builds of devqd included) gets the whole backend.
CUDA_DAEMON_OBJ += $(CUDA_EMBED_OBJ) $(call obj,daemon/device/cuda/fatbin.c kernels/cuda_launch.c \
                   daemon/device/cuda/backend_cuda.c daemon/device/cuda/cuda_drv.c daemon/device/cuda/cuda_time.c \
                   daemon/device/cuda/graph_cache.c daemon/device/cuda/exe_cuda.c)
DAEMON_OBJ += $(CUDA_DAEMON_OBJ)
FATBIN_TEST_OBJ += $(CUDA_EMBED_OBJ)
KERNEL_CHECK = $(BUILD)/tests/gpu/kernel_check

all: $(CUDA_FATBIN) $(KERNEL_CHECK)

$(CUDA_FATBIN): kernels/cuda_kernels.cu kernels/cuda_launch.h
	@mkdir -p $(dir $@)
	$(call quiet,NVCC,$@)$(NVCC) --fatbin $(CUDA_GENCODE) $(ALL_NVCC_FLAGS) -o $@ $<

# .incbin takes the path from a define: the object is rebuilt whenever the
# fatbin changes, and the fatbin never has to exist at run time.
$(CUDA_EMBED_OBJ): kernels/fatbin_embed.S $(CUDA_FATBIN)
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) $(filter-out -fPIC,$(ALL_CFLAGS)) -DDEVQ_FATBIN_PATH='"$(CUDA_FATBIN)"' -c $< -o $@


# The checker loads libcuda.so.1 itself (dlopen), like devqd, so it starts
# on any machine and says what is missing; it needs <cuda.h> to compile.
$(call obj,tests/gpu/kernel_check.c): ALL_CFLAGS += $(CUDA_CFLAGS)
$(KERNEL_CHECK): $(call obj,tests/gpu/kernel_check.c daemon/device/cuda/fatbin.c kernels/cuda_launch.c daemon/device/cuda/cuda_drv.c \
                 kernels/sig.c) $(KERNEL_OBJ) $(CUDA_EMBED_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ -ldl -lm
endif

$(BUILD)/tests/test_fatbin: $(FATBIN_TEST_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_CK) -lm
