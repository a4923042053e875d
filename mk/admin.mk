# SPDX-License-Identifier: Apache-2.0
# The admin API: granted tenants and their sockets, evict, grants across
# restarts, devctl admin and health (tests/test_admin.c).
TESTS += test_admin
HARNESS_TESTS += test_admin
