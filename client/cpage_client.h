/* SPDX-License-Identifier: Apache-2.0 */
/* libdevq's side of the completion page (layout: proto/cpage_layout.h).
 * Private to libdevq. */
#ifndef DEVQ_CPAGE_CLIENT_H
#define DEVQ_CPAGE_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpage_layout.h"

struct devq_cpc {
	const struct devq_cpage_hdr *pub;
	size_t pub_len;
	struct devq_cpage_hints *hint;
	size_t hint_len;
	int efd;
	uint64_t hits;        /* points found complete without a syscall */
	uint64_t futex_waits; /* FUTEX_WAIT calls */
};

/* Maps the pages from the HelloReply's three fds (published page, hint
 * page, eventfd), checking sizes and the header.  Takes the fds: the memfds
 * are closed once mapped, the eventfd kept.  Negative errno on failure with
 * every fd closed. */
int devq_cpc_open(uint32_t layout, uint32_t size, uint32_t slots, uint32_t hint_size,
		  const int fds[3], struct devq_cpc **out);
void devq_cpc_free(struct devq_cpc *c); /* accepts NULL */

/* The slot of queue id, or NULL when the daemon has none (yet). */
const struct devq_cpage_slot *devq_cpc_slot(const struct devq_cpc *c, uint32_t queue);

static inline uint64_t devq_cpc_completed(const struct devq_cpage_slot *s)
{
	return atomic_load_explicit(&s->completed, memory_order_acquire);
}

/* Sleeps until the slot's completed value reaches point or deadline
 * (CLOCK_MONOTONIC ns, UINT64_MAX: none) passes: 0 or -ETIMEDOUT. */
int devq_cpc_wait(struct devq_cpc *c, const struct devq_cpage_slot *s, uint64_t point,
		  uint64_t deadline);

/* Bytes the daemon has written to the socket so far. */
static inline uint64_t devq_cpc_tx_bytes(const struct devq_cpc *c)
{
	return atomic_load_explicit(&c->pub->tx_bytes, memory_order_acquire);
}

static inline void devq_cpc_set_reading(struct devq_cpc *c, bool on)
{
	atomic_store_explicit(&c->hint->reading, on, memory_order_seq_cst);
}

#endif
