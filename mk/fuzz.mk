# SPDX-License-Identifier: Apache-2.0
# Fuzzing: a libFuzzer target driving devqd's real connection path in
# process (tests/fuzz/fuzz_session.c), its seed corpus, and the replay of the
# corpus and of every kept crasher in `make check` (test_fuzz_replay).
#
#   make fuzz FUZZ_SECONDS=N  build the target with clang
#                             -fsanitize=fuzzer,address,undefined in
#                             build-fuzz/ and fuzz for N seconds; crashers
#                             land in build-fuzz/fuzz/artifacts/
#   make fuzz-corpus          regenerate tests/fuzz/corpus with mkcorpus
#
# Debian packages: clang-14 and libclang-rt-14-dev (libFuzzer), in fuzz-deps.

FUZZ_SECONDS ?= 60
FUZZ_BUILD   ?= build-fuzz
FUZZ_CC      ?= clang-14
FUZZ_DEB_PACKAGES = clang-14 libclang-rt-14-dev

# The daemon library (mk/layers.mk): everything devqd links but its main().
FUZZ_LIBS = $(LIBS_UV) $(LIBS_PB) $(LIBS_SD) -ldl -lm

ifeq ($(SAN),fuzz)
  CFLAGS  += -O1 -fsanitize=fuzzer-no-link,address,undefined \
             -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  LDFLAGS += -fsanitize=address,undefined
endif

$(BUILD)/tests/test_fuzz_replay: $(call obj,tests/fuzz/test_fuzz_replay.c) \
		$(call obj,tests/fuzz/fuzz_session.c) $(BUILD)/libdevqd.a $(KERNEL_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(FUZZ_LIBS) $(LIBS_CK)

$(BUILD)/fuzz/fuzz_session: $(call obj,tests/fuzz/fuzz_session.c) $(BUILD)/libdevqd.a \
		$(KERNEL_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -fsanitize=fuzzer -pthread -o $@ $^ $(FUZZ_LIBS)

$(BUILD)/fuzz/mkcorpus: $(call obj,tests/fuzz/mkcorpus.c) $(KERNEL_OBJ) $(COMMON_OBJ)
	@mkdir -p $(dir $@)
	$(call quiet,LD,$@)$(CC) $(LDFLAGS) -pthread -o $@ $^ $(LIBS_PB) -lm

.PHONY: fuzz fuzz-corpus fuzz-deps
## apt-get install clang-14 and libFuzzer when missing
fuzz-deps:
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	command -v $(FUZZ_CC) >/dev/null && \
	  [ -n "$$(find /usr/lib/llvm-14 -name 'libclang_rt.fuzzer-x86_64.a' 2>/dev/null)" ] || \
	  { $$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive \
	    $$SUDO apt-get install -y --no-install-recommends $(FUZZ_DEB_PACKAGES); }

## write tests/fuzz/corpus again with mkcorpus
fuzz-corpus: $(BUILD)/fuzz/mkcorpus
	@mkdir -p tests/fuzz/corpus
	rm -f tests/fuzz/corpus/ok-* tests/fuzz/corpus/edge-* tests/fuzz/corpus/reset-* tests/fuzz/corpus/ring-*
	$(BUILD)/fuzz/mkcorpus tests/fuzz/corpus

# New inputs go to build-fuzz/fuzz/corpus (the first directory), never into
# the committed seeds.  CUDA=0: the target drives the CPU backend (no GPU
# here, and no nvcc run for a fuzz build).
## libFuzzer on devqd's connection path for FUZZ_SECONDS (60), in build-fuzz/
fuzz: fuzz-deps
	$(MAKE) --no-print-directory BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) SAN=fuzz CUDA=0 \
		$(FUZZ_BUILD)/fuzz/fuzz_session
	@mkdir -p $(FUZZ_BUILD)/fuzz/corpus $(FUZZ_BUILD)/fuzz/artifacts
	$(FUZZ_BUILD)/fuzz/fuzz_session -max_total_time=$(FUZZ_SECONDS) -timeout=60 \
		-max_len=16384 -rss_limit_mb=4096 -print_final_stats=1 \
		-artifact_prefix=$(FUZZ_BUILD)/fuzz/artifacts/ \
		$(FUZZ_BUILD)/fuzz/corpus tests/fuzz/corpus tests/fuzz/regress
