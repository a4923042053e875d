# Device loss and reconnection (tests/test_lost.c), and the CUDA backend's
# daemon side (the kernels and the fatbin are built by mk/cuda.mk).
TESTS += test_lost
HARNESS_TESTS += test_lost
