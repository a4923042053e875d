/* SPDX-License-Identifier: Apache-2.0 */
/* Held submits: backpressure on a client over its in-flight quota (see
 * core/quota.h).  The ops of a Submit beyond the quota are kept, in order,
 * in a copy of their own, and submitted as completions free room. */
#include "requests/requests.h"

#include <errno.h>
#include <stdlib.h>

#include "core/engine.h"
#include "core/outbox.h"
#include "core/quota.h"
#include "core/sched.h"
#include "core/session.h"

/* Submits ops[i..n) while the quota allows; returns where it stopped. */
static size_t submit_some(struct devq_session *s, Devq__Op *const *ops, size_t i, size_t n,
			  uint64_t t)
{
	devq_sched_batch_begin(s->e);
	for (; i < n && !s->close_after_flush; i++) {
		if (devq_quota_over_ops(s))
			break;
		char err[160];
		int r = devq_sched_submit(s, ops[i], t, err, sizeof(err));
		if (r > 0) {
			devq_outbox_error(s, r, "submit", NULL, &ops[i]->queue, "%s", err);
		} else if (r < 0) {
			/* Points can no longer be tracked: end the session. */
			devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "submit", NULL,
					  &ops[i]->queue, "out of memory; the session is closed");
			s->close_after_flush = true;
		}
	}
	devq_sched_batch_end(s->e);
	/* The batch is handed over: let it go once this loop iteration has
	 * read what else arrived (one wake-up per stream for all of it). */
	s->e->flush_due = true;
	return i;
}

int devq_held_submit(struct devq_session *s, const Devq__Submit *m, uint64_t t)
{
	size_t i = submit_some(s, m->ops, 0, m->n_ops, t);
	if (i == m->n_ops || s->close_after_flush)
		return 0;
	/* Keep the rest in a copy of our own: the frame's memory (and
	 * whatever allocator unpacked it) is gone once this returns. */
	Devq__Submit rest = DEVQ__SUBMIT__INIT;
	rest.ops = m->ops + i;
	rest.n_ops = m->n_ops - i;
	size_t len = devq__submit__get_packed_size(&rest);
	uint8_t *buf = malloc(len ? len : 1);
	Devq__Submit *copy = NULL;
	if (buf) {
		devq__submit__pack(&rest, buf);
		copy = devq__submit__unpack(NULL, len, buf);
		free(buf);
	}
	if (!copy) {
		devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "submit", NULL, NULL,
				   "out of memory; the session is closed");
		s->close_after_flush = true;
		return -ENOMEM;
	}
	s->quota.held = copy;
	s->quota.held_next = 0;
	s->quota.held_t = t;
	return 0;
}

bool devq_held_resume(struct devq_session *s)
{
	Devq__Submit *h = s->quota.held;
	if (!h)
		return true;
	s->quota.held_next = submit_some(s, h->ops, s->quota.held_next, h->n_ops, s->quota.held_t);
	if (s->quota.held_next < h->n_ops && !s->close_after_flush)
		return false;
	devq__submit__free_unpacked(h, NULL);
	s->quota.held = NULL;
	return true;
}
