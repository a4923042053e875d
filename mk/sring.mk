# SPDX-License-Identifier: Apache-2.0
# The submit ring in the hint page (tests/test_sring.c): submits without
# the socket, their order against the socket's frames, and each of the
# ring's bounds at and one past its limit.
TESTS += test_sring
HARNESS_TESTS += test_sring
$(BUILD)/tests/test_sring: $(call obj,tests/hostile.c)
