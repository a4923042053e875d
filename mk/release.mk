# SPDX-License-Identifier: Apache-2.0
# Release hygiene: the licence line in every file, one version (VERSION)
# everywhere, and the source tarball.
#
#   make dist       $(BUILD)/devq-VERSION.tar.gz: HEAD as git archive makes
#                   it (commit time on every entry, gzip -n), reproducible,
#                   with VERSION in it so it builds outside git
#   make distcheck  make dist twice (same bytes), then make check (and make
#                   deb, when debhelper is there) in the tarball unpacked in
#                   an empty directory; CI runs it
#
# tests/test_release (part of make check) runs tools/check-spdx.sh and
# tools/check-version.sh, and checks that devqd --version, devctl --version,
# devq_version() in libdevq.a and libdevq.so, pkg-config --modversion on
# $(BUILD)/devq.pc, the Python package's _version.py, the built man pages
# and a daemon's HelloReply all say VERSION.
check: $(BUILD)/devq.pc $(BUILD)/python/devq/_version.py

.PHONY: dist distcheck
## build/devq-VERSION.tar.gz: HEAD, reproducible
dist:
	@sh tools/dist.sh $(BUILD)

## make dist twice (same bytes), then make check (and deb) in it, unpacked
distcheck:
	sh tools/distcheck.sh $(BUILD)
