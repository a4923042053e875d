# SPDX-License-Identifier: Apache-2.0
# The hostile client (tests/hostile.c): raw frames, crafted memfds and what
# the daemon holds, shared by the tests that attack devqd.
$(BUILD)/tests/test_badinput: $(call obj,tests/hostile.c)
