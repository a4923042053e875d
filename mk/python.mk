# SPDX-License-Identifier: Apache-2.0
# Python: the `devq` package (python/devq/, pure Python over libdevq.so.0
# with ctypes), built into $(BUILD)/python/ by `make python` and importable
# with PYTHONPATH=$(BUILD)/python; its pytest suite (python/tests/) runs in
# `make check` as the program test_python.  Debian's interpreter, because
# that is where python3-numpy and python3-pytest live and what python3-devq
# targets (a python3 earlier on PATH, e.g. pyenv's, may lack them).

PYTHON ?= /usr/bin/python3
# The wheel and the venv install (python/pyproject.toml) need setuptools,
# wheel, build and venv from Debian: nothing comes from PyPI.
DEB_PACKAGES += python3-numpy python3-pytest python3-setuptools python3-wheel \
                python3-build python3-venv
# devq.torch and its tests (they skip, saying so, without it): large, so
# apart from `make deps`; CI installs it (.ci/run).
TORCH_DEB_PACKAGES = python3-torch

PY_PKG_SRC = $(sort $(wildcard python/devq/*.py))
PY_PKG_OUT = $(patsubst python/devq/%,$(BUILD)/python/devq/%,$(PY_PKG_SRC)) \
             $(BUILD)/python/devq/_version.py

.PHONY: python install-python
## the Python package devq in build/python/ (PYTHONPATH=build/python)
python: $(PY_PKG_OUT) $(BUILD)/libdevq.so.0

# $(BUILD)/libdevq.so.0 (the Makefile's rule) is what the package loads from
# a build tree (python/devq/_lib.py looks beside build/python/).

$(BUILD)/python/devq/%.py: python/devq/%.py
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)cp $< $@

$(BUILD)/python/devq/_version.py: VERSION
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)echo '__version__ = "$(DEVQ_VERSION)"' > $@

.PHONY: deps-torch
## apt-get install python3-torch, for devq.torch and its tests
deps-torch:
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get update && \
	DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y --no-install-recommends $(TORCH_DEB_PACKAGES)

# The wheel: python/pyproject.toml with setuptools, built from python/ as
# it is (--no-isolation: Debian's setuptools and wheel, offline), into
# $(BUILD)/wheel/ alone, so exactly one devq-$(DEVQ_VERSION)-py3-none-any.whl
# is there.  setuptools works in python/build/ (git ignores it).
.PHONY: python-wheel
## the wheel build/wheel/devq-VERSION-py3-none-any.whl (pip install it in a venv)
python-wheel:
	@$(PYTHON) -c 'import build, setuptools, wheel' 2>/dev/null || { \
	  echo "python-wheel: $(PYTHON) lacks build, setuptools or wheel: apt-get install python3-build python3-setuptools python3-wheel (make deps)"; exit 1; }
	$(Q)rm -rf $(BUILD)/wheel
	@mkdir -p $(BUILD)/wheel
	$(call quiet,WHL,$(BUILD)/wheel/devq-$(DEVQ_VERSION)-py3-none-any.whl)$(PYTHON) -m build --wheel --no-isolation \
	  --outdir $(BUILD)/wheel python/ > $(BUILD)/wheel/build.log 2>&1 || { cat $(BUILD)/wheel/build.log; exit 1; }
	$(Q)rm -f $(BUILD)/wheel/build.log
	$(Q)test -f $(BUILD)/wheel/devq-$(DEVQ_VERSION)-py3-none-any.whl

# The suite as a test program of `make check`: python/tests/run.sh runs
# pytest, which prints a Check-style summary line the check target adds up.
$(BUILD)/tests/test_python: python/tests/run.sh $(PY_PKG_OUT) $(BUILD)/libdevq.so.0 $(BUILD)/devqd
	@mkdir -p $(dir $@)
	$(call quiet,GEN,$@)printf '#!/bin/sh\nPYTHON=%s exec sh python/tests/run.sh "$$@"\n' '$(PYTHON)' > $@
	$(Q)chmod +x $@

# Installed where Debian's python3 looks (/usr/lib/python3/dist-packages
# for PREFIX=/usr, /usr/local/lib/python3.X/dist-packages otherwise).
PYTHON_VER  = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHONDIR  ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(PYTHON_VER)/dist-packages)

install: install-python
## install the Python package where Debian's python3 finds it
install-python: python
	$(INSTALL) -d $(DESTDIR)$(PYTHONDIR)/devq
	$(INSTALL) -m 0644 $(PY_PKG_OUT) $(DESTDIR)$(PYTHONDIR)/devq/

# The binding against the C client, in one run (bench/py_bench.py).
.PHONY: bench-python
## the Python binding against the C client (bench/py_bench.py)
bench-python: bench-build python
	DEVQ_BUILD=$(BUILD) PYTHONPATH=$(BUILD)/python $(PYTHON) bench/py_bench.py $(PY_BENCH_ARGS)

# The CPU backend's streaming kernels against NumPy, in one run
# (bench/kernels.py).  NumPy's BLAS tuning variables are unset for that
# command only, so the baseline is NumPy as it runs by default.
.PHONY: bench-kernels
## the CPU backend's streaming kernels against NumPy (bench/kernels.py)
bench-kernels: all python
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE DEVQ_BUILD=$(BUILD) \
	  DEVQ_BENCH_OUT=$(BENCH_OUT) PYTHONPATH=$(BUILD)/python \
	  $(PYTHON) bench/kernels.py $(KERNEL_BENCH_ARGS)

# A PyTorch MLP through devq.torch.mode against torch's own forward in one
# process, interleaved (bench/torch_mlp.py); examples/torch_mlp.py with 4
# processes on one devqd, then torch alone.
.PHONY: bench-torch bench-torch-mlp
## a PyTorch MLP through devq.torch against torch's own forward (bench/torch_mlp.py)
bench-torch: all python
	DEVQ_BUILD=$(BUILD) PYTHONPATH=$(BUILD)/python DEVQ_LIBRARY=$(BUILD)/libdevq.so.0 \
	  $(PYTHON) bench/torch_mlp.py $(TORCH_BENCH_ARGS)
## examples/torch_mlp.py: 4 processes on one devqd, then torch alone (TORCH_MLP_ARGS)
bench-torch-mlp: all python
	sh -c 'd=$$(mktemp -d); $(BUILD)/devqd --backend cpu --socket $$d/s & p=$$!; sleep 1; \
	  PYTHONPATH=$(BUILD)/python DEVQ_LIBRARY=$(BUILD)/libdevq.so.0 $(PYTHON) \
	  examples/torch_mlp.py --socket $$d/s $(TORCH_MLP_ARGS); \
	  rc=$$?; kill $$p; wait $$p; rm -rf $$d; exit $$rc'

# gemm_f32 against NumPy's OpenBLAS matmul, and 4 clients against 1
# (bench/gemm.py); examples/mlp/ at full sizes with 4 processes.
.PHONY: bench-gemm bench-mlp
## gemm_f32 against NumPy's OpenBLAS matmul, 4 clients against 1 (bench/gemm.py)
bench-gemm: all python
	DEVQ_BUILD=$(BUILD) PYTHONPATH=$(BUILD)/python $(PYTHON) bench/gemm.py $(GEMM_BENCH_ARGS)
## examples/mlp/ at full sizes with 4 processes (MLP_ARGS)
bench-mlp: all python
	sh -c 'd=$$(mktemp -d); $(BUILD)/devqd --backend cpu --socket $$d/s & p=$$!; sleep 1; \
	  PYTHONPATH=$(BUILD)/python $(PYTHON) examples/mlp/mlp.py --socket $$d/s --procs 4 $(MLP_ARGS); \
	  rc=$$?; kill $$p; wait $$p; rm -rf $$d; exit $$rc'
