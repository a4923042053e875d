/* SPDX-License-Identifier: Apache-2.0 */
/* The completion page: memory layout shared by devqd and libdevq.
 *
 * Two memfds per session, made by the daemon at Hello:
 *   - the published page (struct devq_cpage_hdr + slots), written only by
 *     the daemon; sealed F_SEAL_FUTURE_WRITE after the daemon mapped it, so
 *     the client can map it read-only and nothing else;
 *   - the hint page (struct devq_cpage_hints), written by the client.  The
 *     daemon treats every value in it as an untrusted hint: it only decides
 *     whether to spend a syscall on a wake-up, never an index or a size.
 *
 * Memory ordering (documented in proto/README.md):
 *   daemon, per completed op:  slot.failed (if it failed), then
 *     slot.completed, both release stores; then seq += 1 (seq_cst); then
 *     loads hints.waiters (seq_cst) and FUTEX_WAKEs seq when non-zero and
 *     the publication reaches hints.wait_slot/wait_point.
 *   client: loads slot.completed with acquire; a point p is complete when
 *     completed >= p, and succeeded when, in addition, p > failed (loaded
 *     after completed).  To sleep: set wait_slot/wait_point, read seq,
 *     waiters += 1 (seq_cst), re-check completed, FUTEX_WAIT(seq, value
 *     read), waiters -= 1.
 * The futex is a shared (non-private) one: the two processes map the same
 * memfd page at different addresses. */
#ifndef DEVQ_CPAGE_LAYOUT_H
#define DEVQ_CPAGE_LAYOUT_H

#include <stdatomic.h>
#include <stdint.h>

#define DEVQ_CPAGE_LAYOUT 1
#define DEVQ_CPAGE_MAGIC 0x67707164u /* "dqpg" */

struct devq_cpage_hdr {
	uint32_t magic;
	uint32_t layout;
	uint32_t nslots;
	uint32_t used;          /* slots handed out (release store by the daemon) */
	_Atomic uint32_t seq;   /* futex word: bumped after every publication */
	uint32_t pad0;
	_Atomic uint64_t tx_bytes; /* bytes the daemon has written to the socket */
	uint8_t pad1[32];
};

/* One cache line per queue, so completers of different queues do not
 * bounce a line between them. */
struct devq_cpage_slot {
	_Atomic uint32_t queue; /* queue id; valid once `open` is set */
	_Atomic uint32_t open;  /* 1 once the slot belongs to `queue` */
	_Atomic uint64_t completed; /* highest completed point */
	_Atomic uint64_t failed;    /* highest failed point among completed ones; 0: none */
	uint8_t pad[40];
};

struct devq_cpage_hints {
	_Atomic uint32_t waiters;  /* client threads about to sleep on seq */
	_Atomic uint32_t reading;  /* a client thread is blocked reading the socket */
	_Atomic uint32_t evfd_armed; /* write the eventfd on every publication */
	/* What the sleeping thread waits for: slot index + 1 (0: anything) and
	 * point, so the daemon wakes it once, not for every op before it.  A
	 * devq handle has one thread at a time, hence one target. */
	_Atomic uint32_t wait_slot;
	_Atomic uint64_t wait_point;
};

_Static_assert(sizeof(struct devq_cpage_hdr) == 64, "header is one cache line");
_Static_assert(sizeof(struct devq_cpage_slot) == 64, "slot is one cache line");

static inline struct devq_cpage_slot *devq_cpage_slots(struct devq_cpage_hdr *h)
{
	return (struct devq_cpage_slot *)(h + 1);
}

#endif
