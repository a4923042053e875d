/* SPDX-License-Identifier: Apache-2.0 */
/* A job: the daemon's record of one submitted op, from its submit to the
 * loop's processing of its completion.  The backend sees only its first
 * member (struct devq_bop); devq_job_of is the one way back.  Records are
 * recycled through a pool.  Loop thread, except what backend.h lets the
 * backend and its completers touch. */
#ifndef DEVQ_JOB_H
#define DEVQ_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device/backend.h"
#include "kernels.h"

struct devq_session;
struct devq_timeline;
struct devq_buf;
struct devq_fair_est;

struct devq_job {
	struct devq_bop b; /* first: the backend's view */
	struct devq_session *s;
	struct devq_timeline *q;
	uint64_t point;
	unsigned refs;
	unsigned nbufs; /* of bufs[], below */
	/* The flags together, with no padding between them: devq_job_new
	 * clears the record up to bufs, once per op, and bytes cost time. */
	bool completed;
	bool reset_after; /* timeline.c: a ResetQueue came right after this point */
	bool fhanded;     /* fair.c: given to the backend */
	/* fair.c: while it waits, it may not be handed to another stream of
	 * its class than the one its queue placed it on (queue order rests on
	 * that stream's order, or a later op follows it there); clear, the
	 * usual case, it may unless replayable (fair.c movable).  Written and
	 * read under fair.c's lock. */
	bool fpin;
	bool fdecl; /* decl_ns is set */
	/* validate.c: cost (below) is set: its executable declares one. */
	bool fcost;
	bool rec_ring; /* its completion record went into the session's ring */
	uint64_t t_client_submit, t_received, t_observed;
	struct devq_job *cnext; /* completion list link (backend threads -> loop) */
	struct devq_bop *winline[4]; /* b.waits when it has at most 4 entries */
	struct devq_job *fnext; /* fair.c: waiting for a backend slot */
	/* repo.c: the repository executable b.kernel belongs to, referenced
	 * until the completion is processed (NULL: a built-in or no kernel). */
	struct devq_exe *exe;
	/* validate.c: the device time the op declares (a u64 argument named
	 * ns), 0: none (fdecl); and the bytes of its buffer arguments.
	 * fair.c estimates its device time from them. */
	uint64_t decl_ns, arg_bytes;
	/* validate.c: its executable's cost (core/cost.h) for these
	 * arguments, when it declares one (fcost). */
	uint64_t cost;
	uint64_t fest;                /* fair.c: expected device time, charged */
	/* validate.c: what learns from its device time (fair.h): its
	 * executable's, or copies', or fills'; NULL for an op that failed
	 * before its executable was known. */
	struct devq_fair_est *festp;
	/* Last, and not cleared by devq_job_new (only what is before them
	 * is): entry i is written before it is read, for i < nbufs. */
	struct devq_buf *bufs[DEVQ_MAX_PARAMS]; /* referenced, each once */
	unsigned acc[DEVQ_MAX_PARAMS];          /* access of bufs[i] */
};

/* The job a backend op belongs to: every devq_bop the daemon hands to a
 * backend is the first member of a job. */
static inline struct devq_job *devq_job_of(struct devq_bop *b)
{
	_Static_assert(offsetof(struct devq_job, b) == 0, "devq_bop must be a job's first member");
	return (struct devq_job *)b;
}

/* A zeroed record (but for bufs and acc) with one reference, or NULL when
 * out of memory. */
struct devq_job *devq_job_new(void);
static inline struct devq_job *devq_job_ref(struct devq_job *j)
{
	j->refs++;
	return j;
}
void devq_job_free(struct devq_job *j);
/* Drops a reference (NULL is ignored); the last one frees the record.
 * Inline: several per op (its queue, each wait, each hazard). */
static inline void devq_job_unref(struct devq_job *j)
{
	if (j && --j->refs == 0)
		devq_job_free(j);
}
/* Gives back a record that never got further than devq_job_new. */
void devq_job_discard(struct devq_job *j);
/* Frees the recycled records (at exit). */
void devq_job_fini(void);
/* Frees the recycled records kept after a burst of ops (at most 8192);
 * the pool refills on demand. */
void devq_job_trim(void);

#endif
