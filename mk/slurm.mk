# SPDX-License-Identifier: Apache-2.0
# Slurm: the SPANK plugin spank_devq.so (slurm/), built where libslurm-dev's
# <slurm/spank.h> is installed (`make` says when it is not and goes on: the
# rest of devq needs no Slurm), and `make check-slurm`, a real Slurm cluster
# of two nodes on this machine (tests/slurm/check.sh; root).
SLURM_INCLUDE ?= /usr/include
HAVE_SPANK := $(wildcard $(SLURM_INCLUDE)/slurm/spank.h)
SPANK_SO = $(BUILD)/slurm/spank_devq.so

ifneq ($(HAVE_SPANK),)
all: $(SPANK_SO)
endif

# No libslurm on the link line: slurmd, slurmstepd, srun and sbatch, which
# load the plugin, provide the spank_* and slurm_* symbols.
$(SPANK_SO): slurm/spank_devq.c
	@test -n "$(HAVE_SPANK)" || { echo "spank_devq.so needs <slurm/spank.h>: apt-get install libslurm-dev"; exit 1; }
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -fPIC -shared $(CFLAGS) -I$(SLURM_INCLUDE) \
	  $(LDFLAGS) -o $@ $<

# The plugin's readers of slurmctld's answers (hostlists, GRES lines) on
# their own, spank and slurm calls stubbed: check.sh runs it first, as any
# user.
PARSE_CHECK = $(BUILD)/slurm/parse_check
$(PARSE_CHECK): tests/slurm/parse_check.c slurm/spank_devq.c
	@test -n "$(HAVE_SPANK)" || { echo "parse_check needs <slurm/spank.h>: apt-get install libslurm-dev"; exit 1; }
	@mkdir -p $(dir $@)
	$(call quiet,CC,$@)$(CC) -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -I$(SLURM_INCLUDE) $(LDFLAGS) -o $@ $<

.PHONY: check-slurm slurm
## build/slurm/spank_devq.so, the SPANK plugin (needs libslurm-dev)
slurm: $(SPANK_SO)
## a two-node Slurm cluster here sharing devqd, podman with CDI (root)
check-slurm: all $(SPANK_SO) $(PARSE_CHECK) python
	tests/slurm/check.sh $(BUILD)

# make install-slurm: the plugin into Slurm's plugin directory (Debian's
# slurm-wlm path under LIBDIR by default), the HealthCheckProgram into
# LIBEXECDIR/slurm-devq, devq-slurm(8), and the plugstack.conf and
# health-check settings as examples.  `make install` leaves Slurm alone.
SLURM_PLUGINDIR ?= $(LIBDIR)/slurm-wlm
LIBEXECDIR      ?= $(PREFIX)/libexec
SLURM_DOCDIR    ?= $(PREFIX)/share/doc/slurm-devq
.PHONY: install-slurm
## install the SPANK plugin, the health check and devq-slurm(8)
install-slurm: $(SPANK_SO) $(BUILD)/man/devq-slurm.8
	$(INSTALL) -d $(DESTDIR)$(SLURM_PLUGINDIR) $(DESTDIR)$(LIBEXECDIR)/slurm-devq \
	  $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(SLURM_DOCDIR)/examples
	$(INSTALL) -m 0644 $(SPANK_SO) $(DESTDIR)$(SLURM_PLUGINDIR)/spank_devq.so
	$(INSTALL) -m 0755 slurm/devq-healthcheck $(DESTDIR)$(LIBEXECDIR)/slurm-devq/devq-healthcheck
	$(INSTALL) -m 0644 $(BUILD)/man/devq-slurm.8 $(DESTDIR)$(MANDIR)/man8/
	$(INSTALL) -m 0644 slurm/plugstack.conf.example slurm/devq-healthcheck.conf.example \
	  $(DESTDIR)$(SLURM_DOCDIR)/examples/
