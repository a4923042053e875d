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
	/* The spin rule's state, per connection (cpage.c): how long waits
	 * that found their point not yet complete took lately (an average,
	 * ns; 0: none yet), and the one CPU the daemon is confined to (-1:
	 * more than one, or unknown). */
	uint64_t wait_avg_ns;
	int daemon_cpu;
	/* Whether threads other than this one were runnable on every CPU at
	 * the last look (/proc/loadavg, at most every CPUS_LOOK_NS, cpage.c):
	 * waits for a queue's next point then sleep at once. */
	bool cpus_busy;
	uint64_t cpus_looked_ns;
	long cpus; /* CPUs online, read at the first look (0: not yet) */
	uint64_t hits;        /* points found complete without a syscall */
	uint64_t futex_waits; /* FUTEX_WAIT calls */
	/* The record ring (NULL: the daemon made none); armed once at connect. */
	const struct devq_crec *ring;
	uint32_t ring_n;
	bool ring_on;    /* a ring to take records from (armed once) */
	bool ring_armed; /* the daemon is asked to fill it (until disarmed) */
	uint64_t ring_head; /* entries taken (mirrors hints.ring_head) */
	uint64_t sock_seen; /* socket records taken since arming */
	/* The submit ring (NULL: the daemon made none). */
	struct devq_sq_hdr *sq;
	struct devq_sqe *sqe;
	uint32_t sq_n;
	uint64_t sq_tail; /* entries written (mirrors sq.tail) */
	int bell;         /* the doorbell (a pipe's write end); -1: none */
};

/* Maps the pages from the HelloReply's fds (published page, hint page,
 * eventfd, and with sq_entries the submit ring's doorbell, a pipe's write
 * end: nfds 4), checking sizes and the header.  Takes the fds: the memfds
 * are closed once mapped, the eventfd and the doorbell kept.  A submit
 * ring that does not fit is not used (its doorbell closed).  Negative
 * errno on failure with every fd closed. */
int devq_cpc_open(uint32_t layout, uint32_t size, uint32_t slots, uint32_t hint_size,
		  uint32_t sq_entries, const int *fds, unsigned nfds, struct devq_cpc **out);
void devq_cpc_free(struct devq_cpc *c); /* accepts NULL */
/* Notes the daemon's CPUs from its socket fd (SO_PEERCRED's pid): waits
 * do not spin on the one CPU a confined daemon has. */
void devq_cpc_peer(struct devq_cpc *c, int fd);

/* Where to write a ClientMessage of len bytes in the submit ring, or NULL
 * (no ring, longer than an entry holds, or full).  The caller writes all
 * len bytes, then devq_cpc_sq_commit; one thread at a time. */
uint8_t *devq_cpc_sq_reserve(struct devq_cpc *c, size_t len);
/* Publishes the entry reserved (len bytes; off: the bytes this connection
 * has written to the socket, all of them sent) and rings the doorbell when
 * the daemon has not been told yet.  0, or negative errno from the
 * doorbell's write. */
int devq_cpc_sq_commit(struct devq_cpc *c, uint32_t len, uint64_t off);

/* The slot of queue id, or NULL when the daemon has none (yet). */
const struct devq_cpage_slot *devq_cpc_slot(const struct devq_cpc *c, uint32_t queue);

static inline uint64_t devq_cpc_completed(const struct devq_cpage_slot *s)
{
	return atomic_load_explicit(&s->completed, memory_order_acquire);
}

/* Sleeps until the slot's completed value reaches point or deadline
 * (CLOCK_MONOTONIC ns, UINT64_MAX: none) passes: 0 or -ETIMEDOUT; -EAGAIN
 * when the armed ring is half full (take its records, then wait again). */
int devq_cpc_wait(struct devq_cpc *c, const struct devq_cpage_slot *s, uint64_t point,
		  uint64_t deadline);

/* The publication counter, to pass to devq_cpc_wait_any. */
static inline uint32_t devq_cpc_seq(const struct devq_cpc *c)
{
	return atomic_load_explicit(&c->pub->seq, memory_order_seq_cst);
}

/* Sleeps until anything is published after the counter read seen, or
 * deadline: 0 or -ETIMEDOUT. */
int devq_cpc_wait_any(struct devq_cpc *c, uint32_t seen, uint64_t deadline);

/* Asks the daemon to put completion records in the ring (once, before the
 * first submit).  false: there is no ring. */
bool devq_cpc_ring_arm(struct devq_cpc *c);

/* Asks the daemon to send every later record on the socket (a client
 * that watches the socket in its own event loop).  Entries already in the
 * ring stay to be taken; one the daemon was writing as this happened is
 * followed by a wake-up on the socket. */
void devq_cpc_ring_disarm(struct devq_cpc *c);

/* Ring entries not yet taken, and the oldest of them. */
static inline uint64_t devq_cpc_ring_ready(const struct devq_cpc *c)
{
	if (!c->ring_on)
		return 0;
	return atomic_load_explicit(&c->pub->ring_tail, memory_order_acquire) - c->ring_head;
}
static inline const struct devq_crec *devq_cpc_ring_at(const struct devq_cpc *c, uint64_t i)
{
	return &c->ring[(c->ring_head + i) & (c->ring_n - 1)];
}
/* Gives n entries back to the daemon. */
static inline void devq_cpc_ring_consume(struct devq_cpc *c, uint64_t n)
{
	c->ring_head += n;
	atomic_store_explicit(&c->hint->ring_head, c->ring_head, memory_order_release);
}
/* n records were read from the socket (after every ring entry before them). */
static inline void devq_cpc_sock_seen(struct devq_cpc *c, uint64_t n)
{
	if (!c->ring_on || !n)
		return;
	c->sock_seen += n;
	atomic_store_explicit(&c->hint->sock_seen, c->sock_seen, memory_order_release);
}

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
