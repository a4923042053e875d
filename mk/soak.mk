# SPDX-License-Identifier: Apache-2.0
# Soak: N clients doing verified dependent work against one devqd while a
# chaos loop kills clients, opens idle connections, sends garbage and floods
# fds; at the end nothing is lost or duplicated and the daemon is back to its
# baseline (tests/soak/test_soak.c).  A 25-second run is part of `make
# check`; `make soak SOAK_SECONDS=N [SOAK_CLIENTS=N]` runs a longer one.

SOAK_SECONDS ?= 600
SOAK_CLIENTS ?= 4

.PHONY: soak
## SOAK_SECONDS (600) of verified work and chaos against one devqd
soak: all $(BUILD)/tests/test_soak
	SOAK_SECONDS=$(SOAK_SECONDS) SOAK_CLIENTS=$(SOAK_CLIENTS) DEVQ_BUILD=$(BUILD) \
		DEVQ_SANITIZER=$(SAN) $(BUILD)/tests/test_soak
