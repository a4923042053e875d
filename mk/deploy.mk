# SPDX-License-Identifier: Apache-2.0
# Deployment: systemd integration tests, install, Debian packages, lint.

# test_deploy: the harness, and the daemon's configuration parser and log.
$(BUILD)/tests/test_deploy: $(call obj,tests/test_deploy.c) $(call obj,tests/harness.c) $(call obj,daemon/base/config.c daemon/base/log.c) $(KERNEL_OBJ) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $(filter %.o %.a,$^) $(LIBS_PB) $(LIBS_SD) $(LIBS_CK) -lm

# ---- install ---------------------------------------------------------
# FHS layout under $(DESTDIR)$(PREFIX); Debian's rules pass its own
# LIBDIR (multiarch) and UNITDIR.  The service's ExecStart= follows SBINDIR.
BINDIR      ?= $(PREFIX)/bin
SBINDIR     ?= $(PREFIX)/sbin
LIBDIR      ?= $(PREFIX)/lib
INCLUDEDIR  ?= $(PREFIX)/include
MANDIR      ?= $(PREFIX)/share/man
SYSCONFDIR  ?= /etc
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
INSTALL     ?= install
# The man pages' headers say "devq @VERSION@" in man/; the build writes
# them with the version into $(BUILD)/man/, which install and lint use.
MAN_SRC     = man/devqd.8 man/devctl.1 man/devqd.conf.5 man/libdevq.3 man/devq-slurm.8 \
              man/devq-exporter.8
DATADIR     ?= $(PREFIX)/share
MAN_PAGES   = $(addprefix $(BUILD)/,$(MAN_SRC))

all: $(MAN_PAGES)
$(BUILD)/man/%: man/% VERSION
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)sed 's/@VERSION@/$(DEVQ_VERSION)/g' $< > $@

$(BUILD)/devq.pc: packaging/devq.pc.in VERSION
	$(call quiet,GEN,$@)sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(DEVQ_VERSION)|' $< > $@

# The .pc file depends on PREFIX and LIBDIR: rebuild it on every install.
.PHONY: install install-pc deb lint lint-deb deb-check promtool
## write build/devq.pc for this PREFIX and LIBDIR (install does)
install-pc:
	@rm -f $(BUILD)/devq.pc
	@$(MAKE) --no-print-directory $(BUILD)/devq.pc

## install under DESTDIR/PREFIX: programs, library, units, man pages
install: all install-pc
	$(INSTALL) -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig \
	  $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) \
	  $(DESTDIR)$(SYSCONFDIR)/devqd $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man3 \
	  $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man8
	$(INSTALL) -m 0755 $(BUILD)/devqd $(DESTDIR)$(SBINDIR)/devqd
	$(INSTALL) -m 0755 $(BUILD)/devctl $(DESTDIR)$(BINDIR)/devctl
	$(INSTALL) -m 0755 $(BUILD)/devq-exporter $(DESTDIR)$(BINDIR)/devq-exporter
	$(INSTALL) -m 0644 $(BUILD)/libdevq.so $(DESTDIR)$(LIBDIR)/libdevq.so.$(DEVQ_VERSION)
	ln -sf libdevq.so.$(DEVQ_VERSION) $(DESTDIR)$(LIBDIR)/libdevq.so.$(DEVQ_SONAME_MAJOR)
	ln -sf libdevq.so.$(DEVQ_SONAME_MAJOR) $(DESTDIR)$(LIBDIR)/libdevq.so
	$(INSTALL) -m 0644 $(BUILD)/libdevq.a $(DESTDIR)$(LIBDIR)/libdevq.a
	$(INSTALL) -m 0644 $(BUILD)/devq.pc $(DESTDIR)$(LIBDIR)/pkgconfig/devq.pc
	$(INSTALL) -m 0644 client/devq.h $(DESTDIR)$(INCLUDEDIR)/devq.h
	for u in devqd.service devqd@.service; do \
	  sed 's|^\(Exec[A-Za-z]*=\)/usr/sbin/devqd|\1$(SBINDIR)/devqd|' systemd/$$u \
	    > $(DESTDIR)$(UNITDIR)/$$u && chmod 0644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; done
	$(INSTALL) -m 0644 systemd/devqd.socket systemd/devqd@.socket $(DESTDIR)$(UNITDIR)/
	$(INSTALL) -m 0644 systemd/devq.sysusers $(DESTDIR)$(SYSUSERSDIR)/devq.conf
	$(INSTALL) -m 0644 systemd/devq-metrics.sysusers $(DESTDIR)$(SYSUSERSDIR)/devq-metrics.conf
	sed 's|^ExecStart=/usr/bin/devq-exporter|ExecStart=$(BINDIR)/devq-exporter|' \
	  systemd/devq-metrics.service > $(DESTDIR)$(UNITDIR)/devq-metrics.service && \
	  chmod 0644 $(DESTDIR)$(UNITDIR)/devq-metrics.service
	$(INSTALL) -d $(DESTDIR)$(DATADIR)/devq/prometheus
	$(INSTALL) -m 0644 packaging/prometheus/devq-rules.yml packaging/prometheus/devq-rules.test.yml \
	  $(DESTDIR)$(DATADIR)/devq/prometheus/
	$(INSTALL) -m 0644 packaging/devqd.conf $(DESTDIR)$(SYSCONFDIR)/devqd/devqd.conf
	$(INSTALL) -m 0644 $(BUILD)/man/devctl.1 $(DESTDIR)$(MANDIR)/man1/
	$(INSTALL) -m 0644 $(BUILD)/man/libdevq.3 $(DESTDIR)$(MANDIR)/man3/
	$(INSTALL) -m 0644 $(BUILD)/man/devqd.conf.5 $(DESTDIR)$(MANDIR)/man5/
	$(INSTALL) -m 0644 $(BUILD)/man/devqd.8 $(DESTDIR)$(MANDIR)/man8/
	$(INSTALL) -m 0644 $(BUILD)/man/devq-exporter.8 $(DESTDIR)$(MANDIR)/man8/

# promtool and the prometheus server (from Debian's prometheus package,
# unpacked, not installed) for test_deploy's and test_exporter's checks:
# $(BUILD)/promtool/usr/bin/promtool and .../prometheus, which
# test_exporter runs as a real server scraping devq-exporter.
## unpack Debian's promtool and prometheus into build/promtool/ (metrics tests)
promtool: $(BUILD)/promtool/usr/bin/promtool $(BUILD)/promtool/usr/bin/prometheus
$(BUILD)/promtool/usr/bin/promtool $(BUILD)/promtool/usr/bin/prometheus:
	@mkdir -p $(BUILD)/promtool/deb
	cd $(BUILD)/promtool/deb && apt-get download prometheus
	dpkg -x $(BUILD)/promtool/deb/prometheus_*.deb $(BUILD)/promtool/x
	install -D -m 0755 $(BUILD)/promtool/x/usr/bin/$(notdir $@) $@
	rm -rf $(BUILD)/promtool/x $(BUILD)/promtool/deb

# ---- Debian packages --------------------------------------------------
# `make deb` builds devqd, devctl, devq-metrics, libdevq0, libdevq-dev, python3-devq and slurm-devq from the files
# git tracks (as they are in the working tree; outside git, every file but
# build*/) with dpkg-buildpackage, into
# $(BUILD)/deb/.  DEB_BUILD_PROFILES=pkg.devq.nocuda leaves CUDA out.
DEB_DIR = $(BUILD)/deb
DEB_SRC = $(DEB_DIR)/devq-$(DEVQ_VERSION)
## Debian packages in build/deb/ (DEB_BUILD_PROFILES=pkg.devq.nocuda: no CUDA)
deb:
	@command -v dpkg-buildpackage >/dev/null && command -v dh >/dev/null || \
	  { echo "make deb needs dpkg-dev and debhelper: make deps-deb installs them"; exit 1; }
	rm -rf $(DEB_DIR)
	mkdir -p $(DEB_SRC)
	{ if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then git ls-files; \
	  else find . \( -path './build*' -o -path './$(BUILD)' -o -path './.git' \) -prune -o \
	    -type f -print | sed 's|^\./||'; fi; } | \
	while IFS= read -r f; do \
	  if [ -e "$$f" ]; then cp --parents -p "$$f" $(DEB_SRC)/; fi; done
	cp -r packaging/debian $(DEB_SRC)/debian
	cp systemd/devq.sysusers $(DEB_SRC)/debian/devqd.sysusers
	cp systemd/devq-metrics.sysusers $(DEB_SRC)/debian/devq-metrics.sysusers
	cd $(DEB_SRC) && dpkg-buildpackage -us -uc -b
	@ls -l $(DEB_DIR)/*.deb
	@# The packages' version comes from debian/changelog, which
	@# tools/check-version.sh holds to VERSION; this catches a stale one.
	@for d in $(DEB_DIR)/*.deb; do v=$$(dpkg-deb -f $$d Version); \
	  case $$v in $(DEVQ_VERSION)-*) ;; *) echo "$$d: version $$v, but VERSION says $(DEVQ_VERSION)"; exit 1 ;; esac; done

# lintian on what `make deb` built: errors fail, warnings are listed.
## lintian on what make deb built: errors fail
lint-deb:
	lintian --fail-on error --info $(DEB_DIR)/devq_$(DEVQ_VERSION)-*_*.changes

# Everything deployment-related that `make check` does not already cover:
# the packages, lintian, and (as root) installing them here and purging.
## deb, lint-deb, and as root dpkg -i, check and purge
deb-check: deb lint-deb
	@if [ "$$(id -u)" = 0 ]; then tests/deploy/deb-install-check.sh $(DEB_DIR); \
	else echo "deb-check: not root, skipping the dpkg -i check"; fi

# Units and man pages, with systemd's and man's own checkers: the units as
# installed (verify in a DESTDIR tree, with the host's systemd units and
# /bin/kill copied in), the man pages formatted with warnings on, and the
# service's offline exposure score (printed; above 2.0 fails).
LINT_ROOT = $(BUILD)/lint-root
## units (systemd-analyze verify, exposure score) and man pages (man --warnings)
lint: all
	rm -rf $(LINT_ROOT)
	$(MAKE) --no-print-directory install DESTDIR=$(abspath $(LINT_ROOT)) PREFIX=/usr >/dev/null
	mkdir -p $(LINT_ROOT)/lib/systemd $(LINT_ROOT)/bin
	cp -a /lib/systemd/system $(LINT_ROOT)/lib/systemd/
	cp -p /bin/kill /bin/sh $(LINT_ROOT)/bin/
	cd / && out=$$(MANPATH=$(abspath $(LINT_ROOT))/usr/share/man systemd-analyze verify \
	  --root=$(abspath $(LINT_ROOT)) devqd.service devqd.socket devqd@0.service \
	  devqd@0.socket devq-metrics.service 2>&1); \
	  if [ -n "$$out" ]; then echo "$$out"; exit 1; fi
	for m in $(MAN_PAGES); do \
	  out=$$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l $$m 2>&1 >/dev/null); \
	  if [ -n "$$out" ]; then echo "$$m: $$out"; exit 1; fi; done
	@score=$$(systemd-analyze security --offline=true systemd/devqd.service 2>&1 | \
	  sed -n 's/.*Overall exposure level for devqd.service: \([0-9.]*\).*/\1/p'); \
	  echo "devqd.service exposure (systemd-analyze security --offline=true): $$score"; \
	  awk -v s="$$score" 'BEGIN { exit !(s != "" && s <= 2.0) }'
	@score=$$(systemd-analyze security --offline=true systemd/devq-metrics.service 2>&1 | \
	  sed -n 's/.*Overall exposure level for devq-metrics.service: \([0-9.]*\).*/\1/p'); \
	  echo "devq-metrics.service exposure (systemd-analyze security --offline=true): $$score"; \
	  awk -v s="$$score" 'BEGIN { exit !(s != "" && s <= 2.0) }'
	@# devqd@.service is devqd.service for one GPU: nothing else may differ.
	sed -e 's/^Description=devq device-sharing daemon$$/& for GPU %i/' \
	    -e 's/^\(Requires\|After\|Also\)=devqd\.socket$$/\1=devqd@%i.socket/' \
	    -e 's|^ExecStart=/usr/sbin/devqd$$|& --device %i|' \
	    -e 's|^RuntimeDirectory=devqd/devqd.tenants$$|RuntimeDirectory=devqd/gpu%i.tenants|' \
	    systemd/devqd.service > $(LINT_ROOT)/tmpl
	sed '/^# devqd@N.service/,/^# and the socket/d;/^# (\/run\/devqd/d' systemd/devqd@.service | \
	  diff -u $(LINT_ROOT)/tmpl - || \
	  { echo "systemd/devqd@.service differs from devqd.service beyond the instance"; exit 1; }
	rm -rf $(LINT_ROOT)
	@echo "lint: units and man pages clean"
