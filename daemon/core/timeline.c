/* SPDX-License-Identifier: Apache-2.0 */
/* Session queues as timelines; see timeline.h. */
#include "core/timeline.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/cpage.h"
#include "core/engine.h"
#include "core/job.h"
#include "core/session.h"
#include "devq.pb-c.h"

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
	/* Least-loaded device stream, so a session's queues (and different
	 * sessions) overlap as far as the streams allow. */
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

void devq_timeline_reset(struct devq_timeline *q)
{
	q->reset = true;
	q->reset_at = q->submitted + 1;
	if (q->nfails && q->fails[q->nfails - 1].to == UINT64_MAX)
		q->fails[q->nfails - 1].to = q->reset_at;
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

bool devq_timeline_failed(const struct devq_timeline *q, uint64_t p)
{
	for (unsigned i = 0; i < q->nfails; i++)
		if (p >= q->fails[i].from && p < q->fails[i].to)
			return true;
	return false;
}

void devq_timeline_note_failure(struct devq_timeline *q, uint64_t p)
{
	if (devq_timeline_failed(q, p))
		return;
	struct devq_fail_range *n = realloc(q->fails, (q->nfails + 1) * sizeof(*n));
	if (!n)
		return; /* only costs precision: a later wait on p runs */
	q->fails = n;
	n[q->nfails].from = p;
	n[q->nfails].to = q->reset_at > p ? q->reset_at : UINT64_MAX;
	q->nfails++;
}
