/* SPDX-License-Identifier: Apache-2.0 */
/* The in-process devqd driver shared by the libFuzzer target and the replay
 * test (see fuzz_session.c for the input format). */
#ifndef DEVQ_FUZZ_SESSION_H
#define DEVQ_FUZZ_SESSION_H

#include <stddef.h>
#include <stdint.h>

/* What the client side saw during the last input: every frame the daemon
 * sent was decoded; failures of its invariants abort instead. */
struct fuzz_stats {
	size_t bytes_sent, frames, errors, protocol_errors, completions, failed;
};
extern struct fuzz_stats fuzz_stats;

/* One connection carrying data; 0 always (violations abort). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
