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
 *   daemon, after each write to the session's socket: tx_bytes += bytes
 *     (release), seq += 1 (seq_cst), loads hints.waiters (seq_cst) and
 *     FUTEX_WAKEs seq when non-zero and hints.wait_slot is 0 (a thread that
 *     waits for anything); after closing the socket: seq += 1, and
 *     FUTEX_WAKE when hints.waiters is non-zero.
 *   client: loads slot.completed with acquire; a point p is complete when
 *     completed >= p, and succeeded when, in addition, p > failed (loaded
 *     after completed).  To sleep: set wait_slot/wait_point, read seq,
 *     waiters += 1 (seq_cst), re-check completed, FUTEX_WAIT(seq, value
 *     read), waiters -= 1.
 * The futex is a shared (non-private) one: the two processes map the same
 * memfd page at different addresses.
 *
 * The record ring (io_uring's CQ ring in spirit) follows the slots in the
 * published page, at hdr.ring_off: hdr.ring_size entries of struct
 * devq_crec, a power of two; 0: the daemon made none.  The client arms it
 * once, before its first submit (hints.ring_armed = 1); from then on the
 * completer writes every completion record of the session there:
 *   daemon (completer, one at a time per session): if the ring has room
 *     (ring_tail - hints.ring_head < ring_size), writes entry
 *     ring_tail % ring_size, then ring_tail += 1 (release), all before the
 *     point is published in the slot.  When it has no room the record
 *     goes on the socket instead, and so does every record after it
 *     (hdr.ring_overflow = 1) until the client says it has read all of
 *     those (hints.sock_seen == records sent on the socket since arming):
 *     so ring entries and socket records never need merging by number.
 *   client: loads ring_tail (acquire), copies entries [ring_head,
 *     ring_tail), stores ring_head (release); when a Completion arrives on
 *     the socket, first takes what the ring holds, then the socket record,
 *     then sock_seen += 1 (release).
 * hints.ring_head and hints.sock_seen are untrusted like every hint: a
 * wrong value only loses or reorders that client's own records. */
#ifndef DEVQ_CPAGE_LAYOUT_H
#define DEVQ_CPAGE_LAYOUT_H

#include <stdatomic.h>
#include <stddef.h>
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
	_Atomic uint64_t ring_tail; /* records written to the ring (release) */
	uint32_t ring_off;  /* byte offset of the record ring; 0: none */
	uint32_t ring_size; /* entries in it (a power of two); 0: none */
	_Atomic uint32_t ring_overflow; /* 1: records go on the socket for now */
	uint8_t pad1[12];
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
	uint8_t pad0[40];
	/* The record ring (its own cache line: the client writes it as it
	 * reads, the completer reads it as it writes). */
	_Atomic uint32_t ring_armed; /* 1: put records in the ring */
	uint32_t pad1;
	_Atomic uint64_t ring_head;  /* entries the client has taken */
	_Atomic uint64_t sock_seen;  /* records read from the socket since arming */
};

/* One completion record in the ring: Completion{queue, point, code,
 * message, timing} of proto/devq.proto, fixed size. */
#define DEVQ_CREC_MSG 184
struct devq_crec {
	uint64_t point;
	uint32_t queue;
	int32_t code;
	uint64_t t[7]; /* Timing fields 1..7 in field order; observed: when published */
	char msg[DEVQ_CREC_MSG]; /* NUL-terminated; "" when none */
};

_Static_assert(sizeof(struct devq_cpage_hdr) == 64, "header is one cache line");
_Static_assert(sizeof(struct devq_cpage_slot) == 64, "slot is one cache line");
_Static_assert(sizeof(struct devq_crec) == 256, "ring entry is four cache lines");
_Static_assert(offsetof(struct devq_cpage_hints, ring_armed) == 64, "ring hints: 2nd line");

static inline struct devq_cpage_slot *devq_cpage_slots(struct devq_cpage_hdr *h)
{
	return (struct devq_cpage_slot *)(h + 1);
}

/* Entries per ring unless DEVQD_CRING_ENTRIES says otherwise (0: no ring). */
#define DEVQ_CRING_DEFAULT 1024u

#endif
