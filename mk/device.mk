# Device loss and reconnection (tests/test_lost.c), and the CUDA backend's
# daemon side (the kernels and the fatbin are built by mk/cuda.mk).
TESTS += test_lost
HARNESS_TESTS += test_lost

# The CUDA backend: its objects include <cuda.h>; the calibration
# arithmetic is pure C and tested in every build.
ifeq ($(CUDA_ENABLED),1)
CUDA_BACKEND_OBJ = $(call obj,daemon/backend_cuda.c daemon/cuda_drv.c daemon/cuda_time.c)
$(call obj,daemon/backend_cuda.c daemon/cuda_drv.c daemon/backend_select.c tests/test_cuda.c): \
	ALL_CFLAGS += $(CUDA_CFLAGS)
$(BUILD)/devqd: $(CUDA_BACKEND_OBJ)
TEST_CUDA_OBJ = $(call obj,daemon/cuda_drv.c)
endif

TESTS += test_cuda
$(BUILD)/tests/test_cuda: $(call obj,tests/test_cuda.c tests/harness.c daemon/cuda_time.c) \
		$(TEST_CUDA_OBJ) $(KERNEL_OBJ) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) $(LIBS_CK) -ldl -lm
