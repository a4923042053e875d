# SPDX-License-Identifier: Apache-2.0
# make check-systemd: the .deb packages installed in a booted Debian 12
# container with a real systemd as PID 1 (tests/deploy/systemd-check.sh).
# The container's root is debootstrapped once into $(SYSTEMD_ROOT) and
# reused; every run boots a fresh copy of it.  Needs root and
# CAP_SYS_ADMIN (systemd-nspawn): elsewhere it says why and skips.
# Debian packages: debootstrap and systemd-container, in systemd-deps.

SYSTEMD_DIR   = $(BUILD)/systemd
SYSTEMD_ROOT  = $(SYSTEMD_DIR)/root-bookworm
SYSTEMD_SUITE = bookworm
# The archive debootstrap fetches from: the one this machine's apt already
# uses (tools/debian-mirror.sh reads apt's sources), which archive a machine
# may reach being its own configuration; DEBIAN_MIRROR=URI overrides.
DEBIAN_MIRROR ?= $(shell tools/debian-mirror.sh)
SYSTEMD_DEB_PACKAGES = debootstrap systemd-container
# SYSTEMD_BUILD_DEB=0 uses the packages already in $(DEB_DIR) (CI, right
# after make deb) instead of building them again.
SYSTEMD_BUILD_DEB ?= 1
# What the container needs besides minbase: systemd as init, and the
# packages' dependencies (dpkg -i installs no dependencies).
SYSTEMD_ROOT_PACKAGES = systemd,systemd-sysv,dbus,procps,sudo,adduser,libuv1,libprotobuf-c1,libsystemd0,python3,python3-numpy,libopenblas0-pthread,libopenblas0
# The root is made again when that list changes (a cached root lacking a
# package would fail dpkg -i).
SYSTEMD_STAMP = .devq-root-$(shell echo '$(SYSTEMD_ROOT_PACKAGES)' | cksum | cut -d' ' -f1)

.PHONY: check-systemd systemd-deps systemd-root
## apt-get install debootstrap and systemd-container when missing
systemd-deps:
	@command -v debootstrap >/dev/null && command -v systemd-nspawn >/dev/null || \
	  { apt-get update && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y --no-install-recommends $(SYSTEMD_DEB_PACKAGES); }

## debootstrap the Debian 12 root of check-systemd into build/systemd/ (cached)
systemd-root: $(SYSTEMD_ROOT)/$(SYSTEMD_STAMP)
$(SYSTEMD_ROOT)/$(SYSTEMD_STAMP):
	@test -n "$(DEBIAN_MIRROR)" || { echo "systemd-root: apt's sources (/etc/apt/sources.list.d/*.sources, /etc/apt/sources.list) name no Debian release to debootstrap from: make DEBIAN_MIRROR=URI"; exit 1; }
	rm -rf $(SYSTEMD_ROOT) $(SYSTEMD_ROOT).tmp
	mkdir -p $(SYSTEMD_DIR)
	debootstrap --variant=minbase --include=$(SYSTEMD_ROOT_PACKAGES) $(SYSTEMD_SUITE) \
	  $(SYSTEMD_ROOT).tmp $(DEBIAN_MIRROR) > $(SYSTEMD_DIR)/debootstrap.log 2>&1 || \
	  { tail -n 20 $(SYSTEMD_DIR)/debootstrap.log; exit 1; }
	rm -rf $(SYSTEMD_ROOT).tmp/var/cache/apt/archives/*.deb
	touch $(SYSTEMD_ROOT).tmp/$(SYSTEMD_STAMP)
	mv $(SYSTEMD_ROOT).tmp $(SYSTEMD_ROOT)

## the .debs in a booted Debian 12 container, systemd as PID 1 (root)
check-systemd:
	@if [ "$$(id -u)" != 0 ]; then \
	  echo "check-systemd: SKIPPED: needs root (debootstrap, systemd-nspawn)"; \
	elif [ $$(( 0x$$(sed -n 's/^CapEff:[[:space:]]*//p' /proc/self/status) >> 21 & 1 )) != 1 ]; then \
	  echo "check-systemd: SKIPPED: no CAP_SYS_ADMIN here, systemd-nspawn cannot run"; \
	else \
	  $(MAKE) --no-print-directory systemd-deps $(if $(filter 0,$(SYSTEMD_BUILD_DEB)),,deb) systemd-root \
	    $(BUILD)/tests/host_exes.so && \
	  tests/deploy/systemd-check.sh $(SYSTEMD_ROOT) $(DEB_DIR) $(SYSTEMD_DIR)/run $(BUILD)/tests/host_exes.so; \
	fi

# The test host executables (tests/host_exes.c), for the crash check.
$(BUILD)/tests/host_exes.so: tests/host_exes.c kernels/devq/kernel.h
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) -std=c11 $(WARN) -O2 -Ikernels -shared -fPIC -o $@ $<
