# SPDX-License-Identifier: Apache-2.0
# Benchmarks (bench/).  `make bench` runs the whole suite against a devqd it
# starts itself and writes tables to stdout and JSON under $(BENCH_OUT);
# `make bench-quick` runs the same in well under a minute or two.  Extra
# daemon options for a with/without comparison: make bench DEVQD_ARGS='...'.
BENCH_OUT ?= $(BUILD)/bench
BENCH_SRC  = bench/devq_bench.c bench/bench_util.c
BENCH_BIN  = $(BUILD)/bench/devq_bench

$(BENCH_BIN): $(call obj,$(BENCH_SRC)) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) -lm

# Fairness between tenants (bench/fair.sh): runs as root, switches uid.
FAIR_BENCH_BIN = $(BUILD)/bench/fair_bench
$(FAIR_BENCH_BIN): $(call obj,bench/fair_bench.c bench/bench_util.c) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) -lm

# A status request's cost to devqd's loop (bench/status_cost.c): root.
STATUS_COST_BIN = $(BUILD)/bench/status_cost
$(STATUS_COST_BIN): $(call obj,bench/status_cost.c bench/bench_util.c) $(BUILD)/libdevq.a
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) -lm

.PHONY: bench bench-quick bench-build check-slow bench-status
## build the benchmark programs of bench/
bench-build: all $(BENCH_BIN) $(FAIR_BENCH_BIN) $(STATUS_COST_BIN)

## loop CPU per status request, 64 sessions of 16 tenants (root; target <= 2 ms)
bench-status: all $(STATUS_COST_BIN)
	@mkdir -p $(BENCH_OUT)
	DEVQ_BUILD=$(BUILD) DEVQ_BENCH_OUT=$(BENCH_OUT) $(STATUS_COST_BIN)

# Saturation runs too slow for make check (seconds each, timing decides):
# the fairness scenarios with generous bounds, and the shape of 4 queues
# per tenant at weights 1:3 (placement against fairness).  CI runs it.
## tenants against each other under saturation, generous bounds (CI; ~40 s)
check-slow: all $(FAIR_BENCH_BIN)
	@mkdir -p $(BENCH_OUT)
	DEVQ_BUILD=$(BUILD) DEVQ_BENCH_OUT=$(BENCH_OUT) $(FAIR_BENCH_BIN) --check --seconds 3

## the benchmark suite: tables on stdout, JSON in build/bench/ (DEVQD_ARGS=...)
bench: bench-build
	@mkdir -p $(BENCH_OUT)
	DEVQ_BUILD=$(BUILD) DEVQ_BENCH_OUT=$(BENCH_OUT) DEVQD_ARGS='$(DEVQD_ARGS)' \
	  $(BENCH_BIN) all | tee $(BENCH_OUT)/bench.txt
	DEVQD_ARGS='$(DEVQD_ARGS)' sh bench/callgrind.sh $(BUILD) $(BENCH_OUT) | tee -a $(BENCH_OUT)/bench.txt

## the benchmark suite, short runs (a minute or two)
bench-quick: bench-build
	@mkdir -p $(BENCH_OUT)
	DEVQ_BUILD=$(BUILD) DEVQ_BENCH_OUT=$(BENCH_OUT) DEVQD_ARGS='$(DEVQD_ARGS)' \
	  $(BENCH_BIN) --quick all | tee $(BENCH_OUT)/bench.txt
	DEVQD_ARGS='$(DEVQD_ARGS)' sh bench/callgrind.sh $(BUILD) $(BENCH_OUT) --quick | tee -a $(BENCH_OUT)/bench.txt

# Isolation beside heavy work (bench/iso.sh): root; builds ISO_BASE once
# under $(BUILD)/iso-base to run beside this build.
ISO_RUNS ?= 5
ISO_BASE ?= 1a7a6b9
.PHONY: bench-iso
## a latency tenant beside a gemm tenant, this build against ISO_BASE (root; ~15 min)
bench-iso: all python
	BUILD=$(BUILD) BENCH_OUT=$(BENCH_OUT) sh bench/iso.sh $(ISO_RUNS) $(ISO_BASE) -- $(ISO_ARGS)
