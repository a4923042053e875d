/* SPDX-License-Identifier: Apache-2.0 */
/* The per-session completion page (daemon side).  Made at Hello when the
 * client asks; the device-side completer publishes each op's completion in
 * it and wakes the client itself, so a client learns of a completion with
 * no daemon-loop hop and checks a point with no syscall.  Layout and memory
 * ordering: proto/cpage_layout.h. */
#ifndef DEVQ_CPAGE_H
#define DEVQ_CPAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpage_layout.h"

struct devq_cpage {
	struct devq_cpage_hdr *pub;
	size_t pub_len;
	struct devq_cpage_hints *hint;
	size_t hint_len;
	int efd;        /* eventfd the daemon writes; the client got a copy */
	bool always_wake; /* FUTEX_WAKE every publication, ignoring the hints */
	/* The (slot, point) of the hint last woken for: the sleeper needs
	 * tens of microseconds to run and take itself off the hint, and
	 * every publication meanwhile would wake it again for nothing. */
	_Atomic uint64_t woke;
	/* The record ring (proto/cpage_layout.h); written by completers under
	 * the engine's completion lock, so one at a time. */
	struct devq_crec *ring; /* NULL: none */
	uint32_t ring_n;        /* entries, a power of two */
	uint64_t ring_tail;     /* entries written */
	bool overflow;          /* records go on the socket until the client caught up */
	uint64_t sock_sent;     /* records routed to the socket since the client armed */
	/* The submit ring (proto/cpage_layout.h), loop thread only. */
	struct devq_sq_hdr *sq;  /* NULL: none */
	struct devq_sqe *sqe;
	uint32_t sq_n;           /* entries, a power of two */
	uint64_t sq_head;        /* entries taken */
	uint64_t sq_off;         /* the last taken entry's socket offset */
	int bell;                /* the doorbell pipe's read end; the client has the write end */
};

/* Makes the two memfds and the eventfd; fds_out gets the published page,
 * the hint page and the eventfd for the client, and with submit_ring (and
 * a ring made: cp->sq_n) the doorbell pipe's write end as a fourth (the
 * caller sends them and closes them).  nslots: queue slots.  Negative
 * errno on failure, with nothing left allocated. */
int devq_cpage_create(unsigned nslots, bool submit_ring, struct devq_cpage **out,
		      int fds_out[4]);
void devq_cpage_free(struct devq_cpage *cp); /* accepts NULL */

/* Loop thread: the slot of a newly opened queue, or NULL when all slots are
 * used (that queue's completions then travel only on the socket). */
struct devq_cpage_slot *devq_cpage_slot_open(struct devq_cpage *cp, uint32_t queue);

/* Completer thread: point of the slot's queue completed (failed or not),
 * then the wake-up of the client.  One writer per slot at a time (a queue
 * lives on one device stream); several slots may publish concurrently.
 * slot NULL: only a record went into the ring (a queue without a slot). */
void devq_cpage_publish(struct devq_cpage *cp, struct devq_cpage_slot *slot, uint64_t point,
			bool failed);

/* Completer thread, serialised by the caller (one record of the session at
 * a time, in the order the loop will see the completions): offers one
 * completion record to the ring.  t: Timing fields 1..7.  true: written to
 * the ring, before any publication of its point; false: it must go on the
 * socket (no ring, not armed, full, or earlier records still on their way
 * there: see proto/cpage_layout.h).  Never blocks. */
bool devq_cpage_ring_put(struct devq_cpage *cp, uint32_t queue, uint64_t point, int code,
			 const char *msg, const uint64_t t[7]);

/* Whether the client armed the ring (a record then costs no encoding when
 * there is room). */
static inline bool devq_cpage_ring_armed(const struct devq_cpage *cp)
{
	/* Exactly 1: a hint page full of garbage does not arm it. */
	return cp->ring && atomic_load_explicit(&cp->hint->ring_armed, memory_order_relaxed) == 1;
}

/* Whether a client thread is blocked reading the socket (an untrusted
 * hint: it only makes the daemon's loop hurry). */
bool devq_cpage_client_reading(const struct devq_cpage *cp);

/* Loop thread, on the doorbell: drains the pipe (up to 256 bytes) and
 * clears sq.rung, so that a client that writes an entry after the look
 * that follows rings again.  Call before taking entries.  0, or -EPIPE
 * when the client closed its end of the pipe (stop polling it: it would
 * read as ready for ever). */
int devq_cpage_sq_answer(struct devq_cpage *cp);
/* Whether the submit ring holds entries not taken yet (ready or not). */
static inline bool devq_cpage_sq_pending(const struct devq_cpage *cp)
{
	return cp && cp->sq && atomic_load_explicit(&cp->sq->tail, memory_order_seq_cst) != cp->sq_head;
}
/* Loop thread: takes the entry at the submit ring's head when it is ready,
 * that is when its socket offset is at most taken (the bytes of the socket
 * frames taken so far).  1: copied out into buf (*len bytes of a
 * ClientMessage); 0: none ready; -EPROTO: the client broke the ring's
 * rules, err says how (proto/cpage_layout.h). */
int devq_cpage_sq_take(struct devq_cpage *cp, uint64_t taken, uint8_t buf[DEVQ_SQE_FRAME],
		       uint32_t *len, char *err, size_t errlen);

/* Loop thread: bytes just written to the session's socket.  Also wakes a
 * client thread asleep on the page waiting for anything (hints.wait_slot
 * 0): what came on the socket (records of an overflow, errors, releases)
 * is what it waits for, and nothing else would wake it. */
void devq_cpage_note_tx(struct devq_cpage *cp, uint64_t bytes);

/* Loop thread: the session's socket is closed.  Wakes every client thread
 * asleep on the page, so it reads the end of the connection at once. */
void devq_cpage_note_closed(struct devq_cpage *cp);

#endif
