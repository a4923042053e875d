# SPDX-License-Identifier: Apache-2.0
# The completion record ring in the completion page (tests/test_cring.c):
# records from memory, overflow to the socket at and past the ring size.
TESTS += test_cring
HARNESS_TESTS += test_cring
