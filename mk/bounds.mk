# SPDX-License-Identifier: Apache-2.0
# Boundaries: documented limits at exactly the limit and one past it, and
# every numeric devqd.conf key's accepted range as devqd.conf(5) states it
# (tests/test_bounds.c; tests/README.md, "Boundaries", maps each limit to
# its tests).
TESTS += test_bounds
HARNESS_TESTS += test_bounds

$(BUILD)/tests/test_bounds: $(call obj,tests/hostile.c)
