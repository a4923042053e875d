# SPDX-License-Identifier: Apache-2.0
# Tenancy: identity and access policy, quotas and backpressure, fairness
# between sessions, slow peers and fd bounds (tests/test_tenancy.c).
TESTS += test_tenancy
HARNESS_TESTS += test_tenancy
