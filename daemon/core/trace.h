/* SPDX-License-Identifier: Apache-2.0 */
/* The op recorder behind `devctl trace` and `devctl top`: a fixed ring of
 * the most recent completed ops (who, where, what they waited on, which
 * buffers, raw timestamps, status) plus per-stream device-busy counters.
 *
 * The ring is allocated once at start; recording an op is one copy into the
 * next slot on the loop thread, with no allocation and no lock, so it stays
 * on whether or not anyone is tracing.  A capacity of 0 turns the records
 * off (the counters remain).  Reading happens only when a client asks, on
 * the thread that builds trace replies (requests/tracereq.c): the loop
 * never waits for a reader, and a reader finds out from the two counters
 * below whether the record it copied was overwritten meanwhile (a
 * sequence lock, with the loop the one writer). */
#ifndef DEVQ_TRACE_H
#define DEVQ_TRACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "devq.pb-c.h"
#include "kernels.h"

#define DEVQ_TRACE_DEFAULT_RECORDS 16384u
#define DEVQ_TRACE_MAX_RECORDS (1u << 20)
/* Ops in one TraceReply: keeps a reply well under libdevq's 64 MiB frame
 * limit whatever the ring size; the newest are sent, marked truncated. */
#define DEVQ_TRACE_MAX_REPLY_OPS 131072u
#define DEVQ_TRACE_WAITS 8 /* waits kept per record; more are counted */
/* Buffers kept per record: the first 8 of an op's (up to DEVQ_MAX_PARAMS),
 * as many as libdevq's trace record shows (DEVQ_TRACE_MAX_BUFFERS).  Not
 * 16: every record of the ring (16384 by default) would carry 128 bytes
 * more, resident once the ring has gone round. */
#define DEVQ_TRACE_BUFS 8

struct devq_job;
struct devq_session;
struct devq_config;

struct devq_trace_wait {
	uint64_t point;
	uint32_t queue;
	uint8_t kind; /* Devq__TraceWait__Kind */
};

struct devq_trace_buf {
	uint64_t id;
	uint8_t access;
	bool released;
};

struct devq_trace_rec {
	uint64_t session, point;
	uint64_t t[7]; /* client submit, received, handoff, start, end, observed, enqueue_ns */
	uint32_t uid, pid, queue, stream;
	int32_t exec;
	int32_t code;
	uint8_t nwaits, nbufs, waits_dropped;
	struct devq_trace_wait waits[DEVQ_TRACE_WAITS];
	struct devq_trace_buf bufs[DEVQ_TRACE_BUFS];
	char name[32];
};

struct devq_trace_ring {
	struct devq_trace_rec *recs;
	uint32_t cap;
	/* Ops recorded since start; the next slot is recorded % cap.  Stored
	 * (release) after the slot is filled. */
	_Atomic uint64_t recorded;
	/* recorded + 1 while the loop fills slot recorded % cap, stored
	 * before it starts: a record a copied by another thread is whole when
	 * writing - a <= cap after the copy (devq_trace_read). */
	_Atomic uint64_t writing;
	uint64_t *busy_ns;   /* per device stream */
	unsigned streams;
	bool admin_group_set;
	gid_t admin_gid;
};

/* Allocates the ring (cfg->trace_records slots) and resolves
 * cfg->admin_group.  Logs and returns a negative errno on failure. */
int devq_trace_ring_new(const struct devq_config *cfg, unsigned streams,
			struct devq_trace_ring **out);
void devq_trace_ring_free(struct devq_trace_ring *t);

/* Called once per op as its completion is processed, before its waits and
 * buffers are let go.  Loop thread. */
void devq_trace_record(struct devq_trace_ring *t, const struct devq_job *op);

/* Records so far (any thread): those below it are or were in the ring. */
static inline uint64_t devq_trace_recorded(const struct devq_trace_ring *t)
{
	return atomic_load_explicit(&t->recorded, memory_order_acquire);
}

/* Copies record a (an absolute index, below devq_trace_recorded) to out:
 * true when it was whole, false when it is gone or was being overwritten
 * during the copy (out is then garbage).  Any thread. */
bool devq_trace_read(const struct devq_trace_ring *t, uint64_t a, struct devq_trace_rec *out);

/* Of record a, only whose it is and when it was observed (what a reader
 * selects by): as devq_trace_read, without copying the rest. */
bool devq_trace_peek(const struct devq_trace_ring *t, uint64_t a, uint32_t *uid,
		     uint64_t *observed);

#endif
