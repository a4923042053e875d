/* SPDX-License-Identifier: Apache-2.0 */
/* A session queue: an in-order timeline whose k-th op completes point k.
 * Holds the ops in flight (a ring indexed by point), the device stream the
 * queue is bound to now (devq_timeline_place may move it whenever it has
 * nothing in flight), and which points failed (ranges closed by a reset).
 * Named timeline in the daemon so as not to share names with libdevq's
 * queue calls.  Loop thread. */
#ifndef DEVQ_TIMELINE_H
#define DEVQ_TIMELINE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct devq_engine;
struct devq_session;
struct devq_job;
struct devq_cpage_slot;

struct devq_fail_range {
	uint64_t from, to; /* failed points [from, to); to == UINT64_MAX: open */
};

/* At most this many failed ranges per queue (16 bytes each).  Kept sorted
 * and disjoint (points complete in order), adjacent ones merged, looked up
 * by binary search.  Past the bound the oldest is forgotten: a wait on a
 * point below fail_horizon is refused (FAILED_PRECONDITION), never answered
 * wrongly. */
#define DEVQ_FAIL_RANGES_MAX 1024

struct devq_timeline {
	uint32_t id;
	int priority;    /* 0 normal, 1 high: the class of streams it may use */
	unsigned stream; /* bound now; see devq_timeline_place */
	/* devq_timeline_place checks the queue's class: a high-priority
	 * queue (its session may lose the grant), or a normal one left on a
	 * high-priority stream (it lost it while an op ran there), which
	 * moves.  A normal queue, the usual case, is spared the check. */
	bool class_check;
	uint64_t submitted; /* points handed out */
	uint64_t completed; /* highest point whose completion the loop has seen */
	/* Ops in flight, ring indexed by point % ring_cap, points
	 * (completed, submitted]. */
	struct devq_job **ring;
	size_t ring_cap;
	bool reset;        /* the next op does not inherit earlier failure */
	uint64_t reset_at; /* first point submitted after the last reset */
	struct devq_fail_range *fails; /* sorted, disjoint; see above */
	unsigned nfails, fails_cap;
	uint64_t fail_horizon; /* points below it: whether they failed is forgotten */
	struct devq_cpage_slot *cslot; /* completion page slot, NULL: none */
};

/* Opens queue id of s (priority 0 normal, 1 high) on the least-loaded
 * device stream of its class.  0 and *out set, or a Devq__Code with err
 * filled in (the error convention, core/engine.h). */
int devq_timeline_open(struct devq_session *s, uint32_t id, int priority,
		       struct devq_timeline **out, char *err, size_t errlen);
/* Work-conserving placement of op, the newest op of q (its point assigned
 * and put in the ring): sets op->b.stream.  A queue with nothing in flight
 * (its previous op done) whose stream still runs an unrelated op moves to
 * an idle stream of its class (normal or high priority), the one with the
 * fewest queues bound; a queue with an op in flight stays where it is, so
 * its ops follow each other on one stream with no cross-stream wait.  The
 * queue's previous op, if the loop has not processed it yet, stays among
 * op's waits: done already, it costs no blocking on any backend.  O(1)
 * unless the queue moves, then O(streams). */
void devq_timeline_place(struct devq_timeline *q, struct devq_job *op);
/* ResetQueue: the next op submitted does not inherit earlier failure. */
void devq_timeline_reset(struct devq_timeline *q);
void devq_timeline_free(struct devq_engine *e, struct devq_timeline *q);
/* Doubles the ring of q (devq_timeline_put): 0 or -ENOMEM. */
int devq_timeline_grow(struct devq_timeline *q, uint64_t point);
/* Records j (its point already assigned) as in flight: 0 or -ENOMEM.
 * Inline: once per op, and the ring rarely grows. */
static inline int devq_timeline_put(struct devq_timeline *q, struct devq_job *j, uint64_t point)
{
	if (q->submitted - q->completed > q->ring_cap && devq_timeline_grow(q, point) < 0)
		return -ENOMEM;
	q->ring[point & (q->ring_cap - 1)] = j;
	return 0;
}
/* The job in flight at point, or NULL when it is not in flight.  Inline:
 * it runs for every wait of every op. */
static inline struct devq_job *devq_timeline_get(const struct devq_timeline *q, uint64_t point)
{
	if (point <= q->completed || point > q->submitted)
		return NULL;
	return q->ring[point & (q->ring_cap - 1)];
}
/* Whether point p failed and no reset since covers it.  O(log nfails). */
bool devq_timeline_failed(const struct devq_timeline *q, uint64_t p);
/* The first point of the failure that covers p (0: p did not fail), for
 * messages that name where a queue went wrong.  O(log nfails). */
uint64_t devq_timeline_failed_from(const struct devq_timeline *q, uint64_t p);
/* Whether point p lies below the horizon of what the queue remembers of its
 * failures (more than DEVQ_FAIL_RANGES_MAX ranges since). */
bool devq_timeline_forgotten(const struct devq_timeline *q, uint64_t p);
/* The loop saw op (its point p) fail.  Points complete in order, so p is above every
 * point noted before; its range ends at the first ResetQueue that followed
 * p (not the queue's latest one), or stays open until one does. */
void devq_timeline_note_failure(struct devq_timeline *q, const struct devq_job *op);

#endif
