# SPDX-License-Identifier: Apache-2.0
# devq build.  `make` builds the daemon, the client library and devctl;
# `make check` runs the whole test suite (`make check TESTS=test_frame` one
# program of it: the table is mk/tests.mk, the map tests/README.md);
# `make demo` shows it working; `make deps` installs the Debian packages
# the build needs; `make help` lists every target.
#
# Each area (CUDA, deployment, tenancy, performance, tracing, ...) keeps
# its rules in its own mk/*.mk, included below.  A phony target is
# documented by a `## text` line right above its rule: `make help` prints
# those lines, and `make check` fails on one that lacks it (mk/help.mk).

BUILD   ?= build

# The one version of devq: the VERSION file (a tarball from `make dist`
# carries it too).  devqd, devctl, libdevq's devq_version(), devq.pc, the
# man pages' headers, the Python package's __version__ and the protocol's
# daemon version all take it from here; CHANGELOG.md, packaging/debian/changelog and a release tag vX.Y.Z
# on HEAD must say the same (tools/check-version.sh, part of make check).
# libdevq's soname major is DEVQ_SONAME_MAJOR: libdevq(3) says what bumps it.
DEVQ_VERSION := $(shell cat VERSION 2>/dev/null)
ifeq ($(DEVQ_VERSION),)
  $(error VERSION is missing: run make from the top of the devq tree)
endif
DEVQ_SONAME_MAJOR = 0
CC      ?= cc
PREFIX  ?= /usr/local
SAN     ?=

# Debian package for each pkg-config module (and tool) the build needs.
DEB_PACKAGES = build-essential pkg-config libuv1-dev libprotobuf-c-dev \
               protobuf-c-compiler libsystemd-dev check systemd man-db procps \
               libopenblas-dev libopenblas0-pthread libmicrohttpd-dev
PKG_libuv          = libuv1-dev
PKG_libprotobuf-c  = libprotobuf-c-dev
PKG_libsystemd     = libsystemd-dev
PKG_check          = check
PKG_openblas       = libopenblas-dev
PKG_libmicrohttpd  = libmicrohttpd-dev
MODULES = libuv libprotobuf-c libsystemd check openblas libmicrohttpd

NODEPS_GOALS = deps deps-deb deps-torch clean help check-help list-tests demo dist
ifeq ($(filter-out $(NODEPS_GOALS),$(or $(MAKECMDGOALS),all)),)
else ifneq ($(DEVQ_SKIP_DEPCHECK),1)
  ifeq ($(shell command -v pkg-config),)
    $(error pkg-config not found: install it with 'apt-get install pkg-config' (or run 'make deps'))
  endif
  MISSING := $(strip $(foreach m,$(MODULES),$(if $(shell pkg-config --exists $(m) && echo y),,$(m))))
  ifneq ($(MISSING),)
    $(error missing libraries: $(MISSING); install them with 'apt-get install $(foreach m,$(MISSING),$(PKG_$(m)))' (or run 'make deps'))
  endif
  ifeq ($(shell command -v protoc-c),)
    $(error protoc-c not found: install it with 'apt-get install protobuf-c-compiler' (or run 'make deps'))
  endif
endif

# Build lines say what they make (`CC build/obj/proto/frame.o`, `LD
# build/devqd`, `AR`, `GEN`, `NVCC`); `make V=1` prints every command in
# full instead, and `make -s` neither.  A recipe line starts with
# $(call quiet,LABEL,$@) before its command, or $(Q) for one that needs no
# line of its own.
V ?= 0
ifeq ($(V),1)
  Q     =
  quiet =
else ifneq ($(findstring s,$(firstword -$(MAKEFLAGS))),)
  Q     = @
  quiet = @
else
  Q     = @
  quiet = @printf '  %-4s %s\n' '$(1)' '$(2)';
endif

WARN     = -Wall -Wextra -Werror
CFLAGS  ?= -O2 -g
ifeq ($(SAN),1)
  CFLAGS  += -O1 -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS += -fsanitize=address,undefined
endif
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE -DDEVQ_VERSION='"$(DEVQ_VERSION)"' $(WARN) -fPIC -pthread $(CFLAGS) \
             -Iproto -Ikernels -Idaemon -Iclient -I$(BUILD)/gen \
             $(shell pkg-config --cflags libuv libprotobuf-c libsystemd 2>/dev/null)
LIBS_UV   = $(shell pkg-config --libs libuv 2>/dev/null)
LIBS_PB   = $(shell pkg-config --libs libprotobuf-c 2>/dev/null)
LIBS_SD   = $(shell pkg-config --libs libsystemd 2>/dev/null)
LIBS_CK   = $(shell pkg-config --libs check 2>/dev/null)

GEN_C = $(BUILD)/gen/devq.pb-c.c
GEN_H = $(BUILD)/gen/devq.pb-c.h

COMMON_SRC = proto/frame.c kernels/sig.c $(GEN_C)
KERNEL_SRC = kernels/manifest.c kernels/cpu_kernels.c
# The daemon, one list per layer (folders are layers: see ARCHITECTURE.md;
# each calls only the ones below it, which `make check-layers` enforces).
# The CUDA backend (daemon/device/cuda/) joins in mk/cuda.mk when built.
DAEMON_BASE_SRC     = $(sort $(wildcard daemon/base/*.c))
DAEMON_DEVICE_SRC   = daemon/device/select.c daemon/device/hostslot.c $(sort $(wildcard daemon/device/cpu/*.c))
DAEMON_CORE_SRC     = $(sort $(wildcard daemon/core/*.c))
DAEMON_REQUESTS_SRC = $(sort $(wildcard daemon/requests/*.c))
DAEMON_SERVER_SRC   = $(sort $(wildcard daemon/server/*.c))
DAEMON_SRC = $(DAEMON_BASE_SRC) $(DAEMON_DEVICE_SRC) $(DAEMON_CORE_SRC) \
             $(DAEMON_REQUESTS_SRC) $(DAEMON_SERVER_SRC) proto/codec/cmpl_enc.c proto/codec/msg_dec.c \
             proto/codec/strcheck.c
LIB_SRC    = client/libdevq.c
DEVCTL_SRC = client/devctl/devctl.c client/devctl/metrics.c client/devctl/util.c \
             client/devctl/submit.c client/devctl/status.c client/devctl/admin.c \
             client/devctl/trace.c client/devctl/top.c \
             client/devctl/cdi.c client/promtext.c
LIB_SRC    += client/cpage.c
# Performance: Submit encoded and Completions decoded by hand (mk/cli_codec.mk).
LIB_SRC    += client/submit_enc.c client/cmpl_dec.c

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(patsubst $(BUILD)/%,%,$(1)))

COMMON_OBJ = $(call obj,$(COMMON_SRC))
KERNEL_OBJ = $(call obj,$(KERNEL_SRC))
DAEMON_OBJ = $(call obj,$(DAEMON_SRC))
LIB_OBJ    = $(call obj,$(LIB_SRC))
DEVCTL_OBJ = $(call obj,$(DEVCTL_SRC))

.PHONY: all deps deps-deb demo clean install
## build build/devqd, build/devctl, build/devq-exporter, build/libdevq.{so,so.0,a} (the default)
all: $(BUILD)/devqd $(BUILD)/devctl $(BUILD)/devq-exporter $(BUILD)/libdevq.so $(BUILD)/libdevq.so.0 $(BUILD)/libdevq.a

## apt-get install the Debian packages the build and the tests need
deps:
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get update && \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y --no-install-recommends $(DEB_PACKAGES)

# What `make deb` needs besides the build's own: dpkg-buildpackage (dpkg-dev),
# dh (debhelper), lintian for lint-deb, and libslurm-dev, which
# packaging/debian/control's Build-Depends names for slurm-devq.
DEB_BUILD_PACKAGES = dpkg-dev debhelper lintian libslurm-dev
## apt-get install what make deb and lint-deb need (dpkg-dev debhelper lintian libslurm-dev)
deps-deb:
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get update && \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y --no-install-recommends $(DEB_BUILD_PACKAGES)

$(GEN_C) $(GEN_H): proto/devq.proto
	@mkdir -p $(BUILD)/gen
	$(call quiet,GEN,$@)protoc-c --proto_path=proto --c_out=$(BUILD)/gen proto/devq.proto

# Generated code is not ours to lint: no -Werror on it.
$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c $(GEN_H) VERSION
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) $(filter-out -Werror,$(ALL_CFLAGS)) -MMD -MP -c $< -o $@

# Every object depends on VERSION, which sets DEVQ_VERSION.
$(BUILD)/obj/%.o: %.c $(GEN_H) VERSION
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

# devqd is main() and the daemon library (mk/layers.mk), which the fuzz
# driver links too.
$(BUILD)/devqd: $(call obj,daemon/server/main.c) $(BUILD)/libdevqd.a $(KERNEL_OBJ) $(COMMON_OBJ)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_UV) $(LIBS_PB) $(LIBS_SD) -ldl -lm

$(BUILD)/libdevq.a: $(LIB_OBJ) $(COMMON_OBJ)
	$(Q)rm -f $@
	$(call quiet,AR,$@)ar rcs $@ $^

$(BUILD)/libdevq.so: $(LIB_OBJ) $(COMMON_OBJ)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -shared -Wl,-soname,libdevq.so.$(DEVQ_SONAME_MAJOR) -pthread -o $@ $^ $(LIBS_PB)

# The SONAME's link, as an installed library has it: a program linked with
# -Lbuild -ldevq runs with LD_LIBRARY_PATH=build (and the Python package
# loads it from a build tree).
$(BUILD)/libdevq.so.0: $(BUILD)/libdevq.so
	$(call quiet,LN,$@)ln -sf libdevq.so $@

$(BUILD)/devctl: $(DEVCTL_OBJ) $(BUILD)/libdevq.a
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) -lm

# The test programs (one table) and `make check` first: mk/cudasim.mk
# takes its list from there.  Then every area's rules.
include mk/tests.mk
include $(filter-out mk/tests.mk,$(sort $(wildcard mk/*.mk)))

## start devqd on a private socket and drive it with devctl
demo: 
	@if ! pkg-config --exists $(MODULES) 2>/dev/null || ! command -v protoc-c >/dev/null; then \
	  echo "demo: installing build dependencies (make deps)"; $(MAKE) deps; fi
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) sh tools/demo.sh

## remove build/ and build-asan/
clean:
	rm -rf build build-asan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
