/* SPDX-License-Identifier: Apache-2.0 */
/* Session queues as timelines; see timeline.h. */
#include "core/timeline.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cpage.h"
#include "core/engine.h"
#include "core/job.h"
#include "core/session.h"
#include "core/tenant.h"
#include "devq.pb-c.h"

/* Whether s may use the high-priority streams now: a tenant socket's
 * session while its grant says so (a re-grant reaches live sessions), any
 * other as the server decided at connect. */
static bool may_high(const struct devq_session *s)
{
	return s->may_high && (!s->grant || s->grant->priority);
}

int devq_timeline_open(struct devq_session *s, uint32_t id, int priority,
		       struct devq_timeline **out, char *err, size_t n)
{
	struct devq_engine *e = s->e;
	unsigned high = e->be->high_streams, first = 0, end = e->be->streams - high;
	if (priority != 0 && priority != 1) {
		snprintf(err, n, "queue %u: priority %d: use 0 (normal) or 1 (high)", id, priority);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if (priority == 1) {
		if (!high) {
			snprintf(err, n, "queue %u: no high-priority streams (priority-streams = 0)",
				 id);
			return DEVQ__CODE__FAILED_PRECONDITION;
		}
		if (!may_high(s)) {
			/* A grant, not a choice: any user taking the high
			 * streams would make them as busy as the others. */
			snprintf(err, n,
				 "queue %u: high priority is not granted to uid %u (settings "
				 "priority-users, priority-groups)",
				 id, (unsigned)s->uid);
			return DEVQ__CODE__PERMISSION_DENIED;
		}
		first = end;
		end = e->be->streams;
	}
	if (devq_idmap_get(&s->queues, id)) {
		snprintf(err, n, "queue %u is already open", id);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if (s->queues.count >= e->cfg.max_queues) {
		snprintf(err, n, "queue %u: the session already has %u queues (the maximum)", id,
			 e->cfg.max_queues);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	struct devq_timeline *q = calloc(1, sizeof(*q));
	if (!q || devq_idmap_put(&s->queues, id, q) < 0) {
		free(q);
		snprintf(err, n, "queue %u: out of memory", id);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	q->id = id;
	q->priority = priority;
	q->class_check = priority != 0;
	/* The stream with the fewest queues bound, so a session's queues (and
	 * different sessions) overlap as far as the streams allow; the first
	 * op may move it (devq_timeline_place). */
	unsigned best = first;
	for (unsigned i = first + 1; i < end; i++)
		if (e->stream_load[i] < e->stream_load[best])
			best = i;
	q->stream = best;
	e->stream_load[best]++;
	q->cslot = devq_cpage_slot_open(s->cpage, id);
	*out = q;
	return 0;
}

/* Whether stream i has nothing queued or running: streams run in order,
 * so the newest op placed on it being done says so. */
static bool stream_idle(const struct devq_engine *e, unsigned i)
{
	const struct devq_job *last = e->stream_last[i];
	return !last || atomic_load_explicit(&last->b.done, memory_order_acquire);
}

/* A high-priority queue whose session lost the right (its tenant was
 * re-granted without priority) is a normal one from its next op on.
 * Whether q sits on a high-priority stream although it is not one: it
 * must move, at once unless its previous op still runs there and this op
 * does not wait for it (the first after a reset): one queue's ops keep
 * their order. */
static __attribute__((noinline)) bool misplaced(struct devq_timeline *q,
						const struct devq_session *s)
{
	const struct devq_backend *be = s->e->be;
	if (q->priority && !may_high(s)) {
		q->priority = 0;
		devq_slog(DEVQ_LOG_INFO, s, -1, q->id, -1,
			  "queue %u: high priority no longer granted: normal streams from now on",
			  q->id);
	}
	bool off = !q->priority && q->stream >= be->streams - be->high_streams;
	q->class_check = q->priority || off;
	return off;
}

/* The least-loaded normal stream, for a queue that must leave a
 * high-priority one although no normal stream is idle. */
static unsigned least_loaded_normal(const struct devq_engine *e)
{
	unsigned end = e->be->streams - e->be->high_streams, best = 0;
	for (unsigned i = 1; i < end; i++)
		if (e->stream_load[i] < e->stream_load[best])
			best = i;
	return best;
}

void devq_timeline_place(struct devq_timeline *q, struct devq_job *op)
{
	struct devq_engine *e = op->s->e;
	const struct devq_job *prev = devq_timeline_get(q, op->point - 1);
	bool in_flight = prev && !atomic_load_explicit(&prev->b.done, memory_order_acquire);
	/* Only a high-priority queue can lose its class, and only one that
	 * lost it can be out of it: a normal queue (the usual case) tests a
	 * flag, not the streams (misplaced is out of line). */
	bool must = q->class_check && misplaced(q, op->s) &&
		    (!in_flight || !q->reset);
	if (must || (!in_flight && !stream_idle(e, q->stream))) {
		/* Its stream runs someone else's work: an idle stream of the
		 * queue's class, if there is one, takes it instead. */
		unsigned high = e->be->high_streams, end = e->be->streams - high, first = 0;
		if (q->priority) {
			first = end;
			end = e->be->streams;
		}
		unsigned best = UINT32_MAX;
		for (unsigned i = first; i < end; i++)
			if (stream_idle(e, i) &&
			    (best == UINT32_MAX || e->stream_load[i] < e->stream_load[best]))
				best = i;
		if (best == UINT32_MAX && must)
			best = least_loaded_normal(e);
		if (best != UINT32_MAX) {
			e->stream_load[q->stream]--;
			e->stream_load[best]++;
			q->stream = best;
			q->class_check = q->priority != 0; /* best is of its class */
		}
	}
	op->b.stream = q->stream;
	devq_job_unref(e->stream_last[q->stream]);
	e->stream_last[q->stream] = devq_job_ref(op);
}

void devq_timeline_reset(struct devq_timeline *q)
{
	q->reset = true;
	q->reset_at = q->submitted + 1;
	/* The reset ends the failure of the points up to submitted: a range
	 * already open closes here; one that opens later, when one of those
	 * points fails, finds the mark on the last of them. */
	if (q->nfails && q->fails[q->nfails - 1].to == UINT64_MAX)
		q->fails[q->nfails - 1].to = q->reset_at;
	struct devq_job *last = devq_timeline_get(q, q->submitted);
	if (last)
		last->reset_after = true;
}

void devq_timeline_free(struct devq_engine *e, struct devq_timeline *q)
{
	e->stream_load[q->stream]--;
	free(q->ring);
	free(q->fails);
	free(q);
}

int devq_timeline_grow(struct devq_timeline *q, uint64_t point)
{
	size_t ncap = q->ring_cap ? q->ring_cap * 2 : 64;
	struct devq_job **n = calloc(ncap, sizeof(*n));
	if (!n)
		return -ENOMEM;
	for (uint64_t p = q->completed + 1; p < point; p++)
		n[p & (ncap - 1)] = q->ring[p & (q->ring_cap - 1)];
	free(q->ring);
	q->ring = n;
	q->ring_cap = ncap;
	return 0;
}

uint64_t devq_timeline_failed_from(const struct devq_timeline *q, uint64_t p)
{
	/* The last range with from <= p. */
	unsigned lo = 0, hi = q->nfails;
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		if (q->fails[mid].from <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo && p < q->fails[lo - 1].to ? q->fails[lo - 1].from : 0;
}

bool devq_timeline_failed(const struct devq_timeline *q, uint64_t p)
{
	return devq_timeline_failed_from(q, p) != 0;
}

bool devq_timeline_forgotten(const struct devq_timeline *q, uint64_t p)
{
	return p < q->fail_horizon;
}

void devq_timeline_note_failure(struct devq_timeline *q, const struct devq_job *op)
{
	uint64_t p = op->point;
	if (devq_timeline_failed(q, p))
		return;
	/* The end: the first reset after some point in [p, submitted], marked
	 * on that point while it was in flight; none: open until a reset
	 * closes it.  Amortised O(1): every point up to that reset fails with
	 * p (inherited) and finds this range above. */
	uint64_t to = UINT64_MAX;
	for (uint64_t k = p; k <= q->submitted; k++) {
		const struct devq_job *j = k == p ? op : devq_timeline_get(q, k);
		if (j && j->reset_after) {
			to = k + 1;
			break;
		}
	}
	if (q->nfails && q->fails[q->nfails - 1].to == p) { /* adjacent: merge */
		q->fails[q->nfails - 1].to = to;
		return;
	}
	if (q->nfails == DEVQ_FAIL_RANGES_MAX) {
		/* Forget the oldest: waits below its end are refused from now. */
		q->fail_horizon = q->fails[0].to;
		memmove(q->fails, q->fails + 1, (q->nfails - 1) * sizeof(*q->fails));
		q->nfails--;
	}
	if (q->nfails == q->fails_cap) {
		unsigned ncap = q->fails_cap ? q->fails_cap * 2 : 4;
		if (ncap > DEVQ_FAIL_RANGES_MAX)
			ncap = DEVQ_FAIL_RANGES_MAX;
		struct devq_fail_range *n = realloc(q->fails, ncap * sizeof(*n));
		if (!n) {
			/* Out of memory: forget rather than answer wrongly. */
			if (!q->nfails)
				return; /* only costs precision: a later wait on p runs */
			q->fail_horizon = q->fails[0].to;
			memmove(q->fails, q->fails + 1, (q->nfails - 1) * sizeof(*q->fails));
			q->nfails--;
		} else {
			q->fails = n;
			q->fails_cap = ncap;
		}
	}
	q->fails[q->nfails].from = p;
	q->fails[q->nfails].to = to;
	q->nfails++;
}
