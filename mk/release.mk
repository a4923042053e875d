# SPDX-License-Identifier: Apache-2.0
# Release hygiene: the licence line in every file, one version (VERSION)
# everywhere.
#
# tests/test_release (part of make check) runs tools/check-spdx.sh and
# tools/check-version.sh, and checks that devqd --version, devctl --version,
# devq_version() in libdevq.a and libdevq.so, pkg-config --modversion on
# $(BUILD)/devq.pc, the Python package's _version.py, the built man pages
# and a daemon's HelloReply all say VERSION.
TESTS += test_release
HARNESS_TESTS += test_release
check: $(BUILD)/devq.pc $(BUILD)/python/devq/_version.py
