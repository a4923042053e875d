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
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -fPIC -shared $(CFLAGS) -I$(SLURM_INCLUDE) \
	  $(LDFLAGS) -o $@ $<

.PHONY: check-slurm slurm
slurm: $(SPANK_SO)
check-slurm: all $(SPANK_SO) python
	tests/slurm/check.sh $(BUILD)
