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
 * The record ring (a completion queue in shared memory) follows the slots
 * in the published page, at hdr.ring_off: hdr.ring_size entries of struct
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
 * wrong value only loses or reorders that client's own records.
 *
 * The submit ring (a submission queue in shared memory; asked for with
 * Hello.submit_ring) lets a Submit reach devqd's loop without the socket:
 * a write to a Unix socket wakes an idle daemon later than a write to an
 * eventfd or a pipe (measured by bench/wake: bench/RESULTS.md, "Where a
 * confined sporadic op's time goes" and "The submit ring").  In the hint
 * page, after the hints: struct devq_sq_hdr at DEVQ_SQ_HDR_OFF, then
 * CompletionPage.sq_entries entries of struct devq_sqe from DEVQ_SQ_OFF.
 * Each entry holds one ClientMessage whose body is a Submit (a frame's
 * payload, without the frame header) and the number of bytes the client
 * had written to the socket when it wrote the entry (off):
 *   client (one thread at a time per connection), only when every frame
 *     it queued for the socket has been written (so the daemon can reach
 *     off): if tail - hdr.sq_head < sq_entries, writes entry
 *     tail % sq_entries, then sq.tail = tail + 1 (seq_cst); then, when
 *     exchange(sq.rung, 1) returns 0, writes a byte to the doorbell (the
 *     write end of a pipe whose read end devqd polls: two open files, so
 *     neither side can change the other's O_NONBLOCK).
 *   daemon (loop thread): on the doorbell, reads what is in the pipe (at
 *     most 64 bytes a time: a hostile client may write more), stores
 *     sq.rung = 0 (seq_cst), then loads sq.tail (seq_cst): either it sees
 *     the entry or the client's exchange saw 0 and rang again.  It takes
 *     the entry at its head before any socket frame that starts at or
 *     after the entry's off, and only once it has taken every socket
 *     frame that ends at or before off: the two inputs keep the order the
 *     client wrote them in.  It copies the entry out before it reads it,
 *     then hdr.sq_head = head + 1 (release; 32 bits, modulo 2^32).
 * Everything in the submit ring is untrusted input, checked like a
 * socket frame: a tail more than sq_entries past the daemon's head, a
 * length over DEVQ_SQE_FRAME, an off below the previous entry's or a
 * message other than a Submit is a protocol error that closes the
 * session.  An entry whose off the socket never reaches waits, and holds
 * only that session's entries behind it. */
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
	_Atomic uint32_t sq_head; /* submit-ring entries the daemon took (mod 2^32) */
	uint8_t pad1[8];
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

/* The submit ring's header in the hint page (its own cache line). */
#define DEVQ_SQ_HDR_OFF 128u
struct devq_sq_hdr {
	_Atomic uint32_t rung; /* 1: the doorbell was written, the daemon will look */
	uint32_t pad0;
	_Atomic uint64_t tail; /* entries the client wrote */
	uint8_t pad1[48];
};

/* One submit-ring entry: a ClientMessage (a Submit) of len bytes. */
#define DEVQ_SQ_OFF 256u
#define DEVQ_SQE_FRAME 240u
struct devq_sqe {
	uint32_t len;
	uint32_t pad;
	uint64_t off; /* bytes the client had written to the socket */
	uint8_t frame[DEVQ_SQE_FRAME];
};

/* Entries per submit ring unless DEVQD_SQ_ENTRIES says otherwise (0: none). */
#define DEVQ_SQ_DEFAULT 32u
#define DEVQ_SQ_MAX 1024u

_Static_assert(sizeof(struct devq_cpage_hdr) == 64, "header is one cache line");
_Static_assert(sizeof(struct devq_cpage_hints) <= DEVQ_SQ_HDR_OFF, "the hints end before the SQ");
_Static_assert(sizeof(struct devq_sq_hdr) == 64, "SQ header is one cache line");
_Static_assert(sizeof(struct devq_sqe) == 256, "SQ entry is four cache lines");
_Static_assert(sizeof(struct devq_cpage_slot) == 64, "slot is one cache line");
_Static_assert(sizeof(struct devq_crec) == 256, "ring entry is four cache lines");
_Static_assert(offsetof(struct devq_cpage_hints, ring_armed) == 64, "ring hints: 2nd line");

static inline struct devq_cpage_slot *devq_cpage_slots(struct devq_cpage_hdr *h)
{
	return (struct devq_cpage_slot *)(h + 1);
}

static inline struct devq_sq_hdr *devq_sq_hdr(void *hint_page)
{
	return (struct devq_sq_hdr *)((char *)hint_page + DEVQ_SQ_HDR_OFF);
}

static inline struct devq_sqe *devq_sq_entries(void *hint_page)
{
	return (struct devq_sqe *)((char *)hint_page + DEVQ_SQ_OFF);
}

/* Entries per ring unless DEVQD_CRING_ENTRIES says otherwise (0: no ring). */
#define DEVQ_CRING_DEFAULT 1024u

#endif
