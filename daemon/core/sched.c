/* SPDX-License-Identifier: Apache-2.0 */
/* Ordering and hand-off.  Each session queue is an in-order timeline; an op
 * waits (strictly: failure propagates) on the previous op of its queue and on
 * explicit points, and (ordering only) on the buffer hazards it has: a reader
 * on the last writer, a writer on the last writer and every reader since.
 * Waits are deduplicated per queue keeping the highest point, since a queue
 * completes in order.  Completions come back from backend threads through a
 * locked list and one wake-up of the loop (ev.wake), and are coalesced per
 * session. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sched.h"

#include "core/buffer.h"
#include "core/cpage.h"
#include "core/engine.h"
#include "core/fair.h"
#include "core/job.h"
#include "core/metrics.h"
#include "core/outbox.h"
#include "core/quota.h"
#include "core/repo.h"
#include "core/session.h"
#include "core/timeline.h"
#include "core/trace.h"
#include "core/validate.h"

/* ---- submission ------------------------------------------------------ */

static void make_fail(struct devq_job *op, int code, const char *msg)
{
	op->b.kind = DEVQ_BOP_FAIL;
	op->b.code = code;
	snprintf(op->b.msg, sizeof(op->b.msg), "%s", msg);
	op->nbufs = 0;
	if (op->b.waits != op->winline)
		free(op->b.waits);
	op->b.waits = NULL;
	op->b.nwaits = 0;
}

/* Adds target to the wait set: one entry per queue, the highest point. */
static void add_wait(struct devq_job **set, unsigned *n, struct devq_job *target)
{
	for (unsigned i = 0; i < *n; i++) {
		if (set[i]->q == target->q) {
			if (target->point > set[i]->point)
				set[i] = target;
			return;
		}
	}
	set[(*n)++] = target;
}

static int collect_waits(struct devq_job *op, const Devq__Op *m, bool inherit, char *err, size_t n)
{
	struct devq_session *s = op->s;
	struct devq_timeline *q = op->q;
	size_t cap = m->n_waits + 1;
	for (unsigned i = 0; i < op->nbufs; i++)
		cap += 1 + op->bufs[i]->nreaders;
	/* Small sets (the usual case) live on the stack. */
	struct devq_job *strict_s[32], *order_s[32];
	struct devq_job **strict = cap <= 32 ? strict_s : calloc(cap, sizeof(*strict));
	struct devq_job **order = cap <= 32 ? order_s : calloc(cap, sizeof(*order));
	unsigned ns = 0, no = 0;
	int code = 0;
	if (!strict || !order) {
		snprintf(err, n, "out of memory");
		code = DEVQ__CODE__RESOURCE_EXHAUSTED;
		goto out;
	}

	/* The queue's own order: inherit the previous op's failure. */
	if (inherit && op->point > 1) {
		/* A queue that never failed (the usual case) answers with one
		 * load, where the call costs a dozen instructions per op. */
		uint64_t first = q->nfails ? devq_timeline_failed_from(q, op->point - 1) : 0;
		if (first) {
			/* Where it went wrong: that op's own error says why. */
			snprintf(err, n, "queue %u failed at point %llu (an earlier point); reset it",
				 q->id, (unsigned long long)first);
			op->b.qfail = first; /* the same words if an op waits on it */
			code = DEVQ__CODE__DEPENDENCY_FAILED;
			goto out;
		}
		struct devq_job *prev = devq_timeline_get(q, op->point - 1);
		if (prev) {
			add_wait(strict, &ns, prev); /* the first: waits[0] */
			op->b.waits_prev = true;
		}
	}

	for (size_t i = 0; i < m->n_waits; i++) {
		const Devq__Wait *w = m->waits[i];
		struct devq_timeline *wq = devq_idmap_get(&s->queues, w->queue);
		if (!wq) {
			snprintf(err, n, "wait on queue %u: queue not open", w->queue);
			code = DEVQ__CODE__NOT_FOUND;
			goto out;
		}
		uint64_t limit = wq == q ? op->point - 1 : wq->submitted;
		if (w->point > limit) {
			snprintf(err, n,
				 "wait on queue %u point %" PRIu64 ": only %" PRIu64
				 " ops submitted there",
				 w->queue, w->point, limit);
			code = DEVQ__CODE__INVALID_ARGUMENT;
			goto out;
		}
		if (w->point == 0)
			continue;
		if (w->point <= wq->completed) {
			if (devq_timeline_forgotten(wq, w->point)) {
				snprintf(err, n,
					 "wait on queue %u point %" PRIu64
					 ": too old to tell whether it failed (more than %u failed"
					 " ranges since); wait on a later point",
					 w->queue, w->point, DEVQ_FAIL_RANGES_MAX);
				code = DEVQ__CODE__FAILED_PRECONDITION;
				goto out;
			}
			if (devq_timeline_failed(wq, w->point)) {
				snprintf(err, n, "waits on queue %u point %" PRIu64 ", which failed",
					 w->queue, w->point);
				code = DEVQ__CODE__DEPENDENCY_FAILED;
				goto out;
			}
			continue; /* already complete: nothing to wait for */
		}
		add_wait(strict, &ns, devq_timeline_get(wq, w->point));
	}

	for (unsigned i = 0; i < op->nbufs; i++) {
		struct devq_buf *b = op->bufs[i];
		if (b->last_writer && !b->last_writer->completed && b->last_writer->q != q)
			add_wait(order, &no, b->last_writer);
		if (op->acc[i] & DEVQ_ACC_OUT)
			for (unsigned r = 0; r < b->nreaders; r++)
				if (!b->readers[r]->completed && b->readers[r]->q != q)
					add_wait(order, &no, b->readers[r]);
	}

	/* One array: strict waits first; ordering waits already covered by a
	 * strict wait on the same queue are dropped. */
	op->b.waits = ns + no <= 4 ? op->winline : calloc(ns + no, sizeof(*op->b.waits));
	if (!op->b.waits) {
		snprintf(err, n, "out of memory");
		code = DEVQ__CODE__RESOURCE_EXHAUSTED;
		goto out;
	}
	for (unsigned i = 0; i < ns; i++)
		op->b.waits[op->b.nwaits++] = &devq_job_ref(strict[i])->b;
	op->b.nstrict = ns;
	for (unsigned i = 0; i < no; i++) {
		bool covered = false;
		for (unsigned j = 0; j < ns; j++)
			covered |= strict[j]->q == order[i]->q && strict[j]->point >= order[i]->point;
		if (!covered)
			op->b.waits[op->b.nwaits++] = &devq_job_ref(order[i])->b;
	}
out:
	if (strict != strict_s)
		free(strict);
	if (order != order_s)
		free(order);
	return code;
}

/* Records op as the newest access of each buffer it uses. */
static int update_hazards(struct devq_job *op)
{
	for (unsigned i = 0; i < op->nbufs; i++) {
		struct devq_buf *b = op->bufs[i];
		if (op->acc[i] & DEVQ_ACC_OUT) {
			devq_job_unref(b->last_writer);
			for (unsigned r = 0; r < b->nreaders; r++)
				devq_job_unref(b->readers[r]);
			b->nreaders = 0;
			b->last_writer = devq_job_ref(op);
			continue;
		}
		/* Completed readers impose nothing any more. */
		unsigned k = 0;
		for (unsigned r = 0; r < b->nreaders; r++) {
			if (b->readers[r]->completed || b->readers[r]->q == op->q)
				devq_job_unref(b->readers[r]);
			else
				b->readers[k++] = b->readers[r];
		}
		b->nreaders = k;
		if (b->nreaders == b->readers_cap) {
			unsigned ncap = b->readers_cap ? b->readers_cap * 2 : 4;
			struct devq_job **nr = realloc(b->readers, ncap * sizeof(*nr));
			if (!nr)
				return -ENOMEM;
			b->readers = nr;
			b->readers_cap = ncap;
		}
		b->readers[b->nreaders++] = devq_job_ref(op);
	}
	return 0;
}

/* Ops waiting for a backend slot need the loop to learn of completions at
 * once: no laziness for this session until they are handed over.
 * Completions deferred so far are collected now.  Inline: it runs once
 * per Submit, one op each at batch 1, and is a few tests. */
static inline void eager_if_waiting(struct devq_session *s)
{
	struct devq_engine *d = s->e;
	if (s->cpage && !d->be->enqueue_any_thread && !atomic_load(&s->cp_eager) &&
	    devq_fair_waiting(s)) {
		atomic_store(&s->cp_eager, true);
		d->ev.wake(d->ev.ud);
	}
}

/* The client's deadline (Op.deadline_us), from receipt: the backend and
 * hand-over compare their clock with it, so no timer per op is needed.  A
 * replayable batch is replayed as captured, so it takes none. */
static int set_deadline(struct devq_job *op, const Devq__Op *m, char *err, size_t n)
{
	if (m->replayable) {
		snprintf(err, n,
			 "deadline_us is not allowed on a replayable op (a replayed batch runs "
			 "whole, as captured)");
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	uint64_t ns = m->deadline_us > UINT64_MAX / 1000 ? UINT64_MAX : m->deadline_us * 1000;
	op->b.deadline_ns = op->t_received > UINT64_MAX - ns ? UINT64_MAX : op->t_received + ns;
	op->b.deadline_us = m->deadline_us;
	atomic_store_explicit(&op->s->e->deadlines_seen, true, memory_order_relaxed);
	return 0;
}

int devq_sched_submit(struct devq_session *s, const Devq__Op *m, uint64_t t_received, char *err,
		      size_t errlen)
{
	struct devq_engine *d = s->e;
	struct devq_timeline *q = s->last_q;
	if (!q || q->id != m->queue)
		q = s->last_q = devq_idmap_get(&s->queues, m->queue);
	if (!q) {
		snprintf(err, errlen, "submit on queue %u: queue not open", m->queue);
		return DEVQ__CODE__NOT_FOUND;
	}
	struct devq_job *op = devq_job_new();
	if (!op)
		return -ENOMEM;
	op->s = s;
	op->q = q;
	/* Its one reference: the queue's ring, until the completion is
	 * processed. */
	op->point = ++q->submitted;
	op->b.queue = q->id;
	op->b.point = op->point;
	op->t_client_submit = m->client_submit_ns;
	op->t_received = t_received;
	op->b.cancel = &s->cancel;
	op->b.timed = !m->no_timing;
	op->b.expect_ns = UINT64_MAX; /* unknown until fair.c hands it over */
	op->b.replay = m->replayable;
	if (devq_timeline_put(q, op, op->point) < 0) {
		/* Without a ring slot the point cannot be tracked: end the session. */
		q->submitted--;
		devq_job_discard(op);
		return -ENOMEM;
	}
	devq_timeline_place(q, op); /* its stream: work-conserving */

	/* A reset covers exactly the next op, whatever becomes of it. */
	bool inherit = !q->reset;
	q->reset = false;
	char why[DEVQ_BOP_MSG]; /* the failed completion's message */
	int code = m->deadline_us ? set_deadline(op, m, why, sizeof(why)) : 0;
	if (!code)
		code = devq_validate_op(s, m, op, why, sizeof(why));
	if (!code)
		code = collect_waits(op, m, inherit, why, sizeof(why));
	if (!code && update_hazards(op) < 0) {
		code = DEVQ__CODE__RESOURCE_EXHAUSTED;
		snprintf(why, sizeof(why), "out of memory");
	}
	if (code) {
		log_debug("session %llu queue %u point %llu rejected: %s", (unsigned long long)s->id,
			  q->id, (unsigned long long)op->point, why);
		for (unsigned i = 0; i < op->b.nwaits; i++)
			devq_job_unref(devq_job_of(op->b.waits[i]));
		make_fail(op, code, why);
	}
	for (unsigned i = 0; i < op->nbufs; i++)
		op->bufs[i]->inflight++;
	s->ops_in_flight++;
	d->ops_in_flight++;
	devq_quota_op(s->tenant, +1);
	op->fnext = NULL;
	if (d->batching) { /* to fairness at devq_sched_batch_end */
		if (d->batch_tail)
			d->batch_tail->fnext = op;
		else
			d->batch_head = op;
		d->batch_tail = op;
		return 0;
	}
	devq_fair_submit(op); /* now, or once the session has a backend slot */
	eager_if_waiting(s);
	return 0;
}

void devq_sched_batch_begin(struct devq_engine *d)
{
	d->batching = true;
}

void devq_sched_batch_end(struct devq_engine *d)
{
	struct devq_job *first = d->batch_head;
	d->batching = false;
	d->batch_head = d->batch_tail = NULL;
	if (!first)
		return;
	struct devq_session *s = first->s; /* one frame: one session */
	devq_fair_submit(first); /* the list, under one lock */
	eager_if_waiting(s);
}

/* ---- completion ------------------------------------------------------ */

void devq_sched_on_complete(void *ud, struct devq_bop *bop)
{
	struct devq_engine *d = ud;
	struct devq_job *op = devq_job_of(bop);
	bool lazy = false;
	bool refills = d->be->enqueue_any_thread;
	/* Before the loop can see this completion (and free the op or its
	 * session): the slot goes to the session's next op right here. */
	if (refills)
		devq_fair_completed(op);
	op->cnext = NULL;
	devq_lock_take(&d->cmpl_lock);
	/* Fast path: the completer itself publishes the point and wakes the
	 * client.  The loop's share (completion record, buffer releases) can
	 * then wait for the lazy timer, unless a client thread is blocked on
	 * the socket for it.  Published under cmpl_lock: once a client has
	 * seen the point, a drain by the loop is sure to find the op. */
	struct devq_cpage *cp = op->s->cpage;
	/* The record first, in the order the loop will see completions (the
	 * lock): the client finds it in memory once it sees the point. */
	if (cp && devq_cpage_ring_armed(cp)) {
		/* Observed now, by the completer: the time the record says,
		 * and the one the loop's metrics and trace keep for it. */
		op->t_observed = devq_now_ns();
		uint64_t t[7] = { op->t_client_submit, op->t_received, op->b.t_handoff,
				  op->b.t_start,       op->b.t_end,	 op->t_observed,
				  op->b.enqueue_ns };
		op->rec_ring =
			devq_cpage_ring_put(cp, op->q->id, op->point, op->b.code, op->b.msg, t);
		if (op->rec_ring && !op->q->cslot)
			devq_cpage_publish(cp, NULL, op->point, false); /* the wake-up */
	}
	if (op->q->cslot) {
		devq_cpage_publish(cp, op->q->cslot, op->point, op->b.code != DEVQ__CODE__OK);
		lazy = !devq_cpage_client_reading(op->s->cpage);
		/* With ops waiting for backend slots, the loop must refill the
		 * session's lanes: it comes once half a lane's worth completed,
		 * handing over a burst while the rest still runs, or at once
		 * when this op's stream has nothing more queued. */
		if (lazy && !refills &&
		    atomic_load_explicit(&op->s->cp_eager, memory_order_seq_cst)) {
			unsigned k = d->cfg.fair_k ? d->cfg.fair_k : DEVQ_FAIR_K_DEFAULT;
			unsigned n = atomic_fetch_add(&op->s->cp_deferred, 1) + 1;
			lazy = op->b.more_queued && n < (k / 2 ? k / 2 : 1);
		}
	}
	if (d->cmpl_tail)
		d->cmpl_tail->cnext = op;
	else
		d->cmpl_head = op;
	d->cmpl_tail = op;
	/* The backend's dependents may go only now that this completion is
	 * queued ahead of theirs (backend.h); the last access to op. */
	atomic_store(&op->b.done, 1);
	/* Bounded laziness: a long list is drained at once, and so is one
	 * nobody polls for (parked: engine.h). */
	bool wake = true;
	if (lazy) {
		d->cmpl_lazy++;
		wake = d->cmpl_parked || ++d->cmpl_deferred >= 256;
	}
	if (wake)
		d->cmpl_deferred = 0;
	devq_lock_give(&d->cmpl_lock);
	/* On the loop thread a wake-up would only send the loop a write to
	 * itself: it drains before it waits. */
	if (lazy && pthread_equal(pthread_self(), d->loop_thread)) {
		d->drain_due = true;
		return;
	}
	if (wake)
		d->ev.wake(d->ev.ud);
	/* op is done: a stream left idle for want of an op that could start
	 * there may have one now (fair.c).  Not on the loop thread's lazy
	 * path above: an op run there (run_here) is one of at most
	 * DEVQ_FAIR_HERE_NS, and the next completion looks. */
	if (refills && atomic_load(&d->fair.starved))
		devq_fair_after_done(d);
}

static void complete_one(struct devq_engine *d, struct devq_job *op, uint64_t now)
{
	struct devq_session *s = op->s;
	struct devq_timeline *q = op->q;
	if (op->b.code == DEVQ__CODE__DEVICE_LOST && !d->device_lost) {
		d->device_lost = true;
		d->ev.device_lost(d->ev.ud, op);
	}
	op->completed = true;
	if (!op->rec_ring) /* else stamped by the completer, in the record */
		op->t_observed = now;
	if (op->point != q->completed + 1)
		log_err("queue %u completed point %llu after %llu: stream order broken", q->id,
			(unsigned long long)op->point, (unsigned long long)q->completed);
	q->completed = op->point;
	q->ring[op->point & (q->ring_cap - 1)] = NULL;
	if (op->b.code != DEVQ__CODE__OK) {
		devq_timeline_note_failure(q, op);
		d->ops_failed++;
		if (s->tenant) { /* a tenant's usage (devctl admin tenants, evict) */
			if (op->b.code == DEVQ__CODE__CANCELLED)
				s->tenant->cancelled++;
			else
				s->tenant->failed++;
			if (op->b.code == DEVQ__CODE__DEADLINE_EXCEEDED)
				s->tenant->deadline_exceeded++;
		}
	}
	d->ops_completed++;
	d->ops_in_flight--;
	s->ops_completed++;
	s->ops_in_flight--;
	devq_quota_op(s->tenant, -1);
	devq_metrics_op_done_tenant(&d->metrics, s->tenant ? &s->tenant->hist : NULL, s->uid,
				    op->b.code, op->t_client_submit, op->t_received,
				    op->b.t_handoff, op->b.t_start, op->b.t_end, op->t_observed);
	if (op->b.code != DEVQ__CODE__OK)
		devq_slog(DEVQ_LOG_DEBUG, s, op->b.code, q->id, (int64_t)op->point,
			  "queue %u point %llu failed: %s", q->id, (unsigned long long)op->point,
			  op->b.msg);
	devq_fair_done(op);
	devq_trace_record(d->trace, op); /* while its waits and buffers are known */
	if (op->exe) { /* its code may be unloaded from here on */
		devq_repo_put(op->exe);
		op->exe = NULL;
		op->b.kernel = NULL;
	}

	for (unsigned i = 0; i < op->b.nwaits; i++)
		devq_job_unref(devq_job_of(op->b.waits[i]));
	if (op->b.waits != op->winline)
		free(op->b.waits);
	op->b.waits = NULL;
	op->b.nwaits = 0;

	/* A record already in the session's ring is not sent again; a client
	 * that disarmed its ring meanwhile (it watches the socket) gets a
	 * wake-up there to take it. */
	if (s->connected && op->rec_ring && !devq_cpage_ring_armed(s->cpage)) {
		s->cmpl_nudge = true;
		devq_outbox_mark_dirty(s);
	}
	if (s->connected && !op->rec_ring) {
		if (s->ncmpl == s->cmpl_cap) {
			size_t ncap = s->cmpl_cap ? s->cmpl_cap * 2 : 16;
			struct devq_cmpl *n = realloc(s->cmpl, ncap * sizeof(*n));
			if (n) {
				s->cmpl = n;
				s->cmpl_cap = ncap;
			}
		}
		if (s->ncmpl < s->cmpl_cap) {
			struct devq_cmpl *c = &s->cmpl[s->ncmpl++];
			c->queue = q->id;
			c->point = op->point;
			c->code = op->b.code;
			_Static_assert(sizeof(c->msg) == sizeof(op->b.msg),
				       "a backend's message is a completion record's");
			memcpy(c->msg, op->b.msg, sizeof(c->msg));
			c->t[0] = op->t_client_submit;
			c->t[1] = op->t_received;
			c->t[2] = op->b.t_handoff;
			c->t[3] = op->b.t_start;
			c->t[4] = op->b.t_end;
			c->t[5] = op->t_observed;
			c->t[6] = op->b.enqueue_ns;
			devq_outbox_mark_dirty(s);
		} else {
			/* Its client would wait for it forever: the session
			 * ends once what it has queued is sent. */
			log_err("session %llu: out of memory; completion of queue %u point %llu "
				"lost; closing the session",
				(unsigned long long)s->id, q->id, (unsigned long long)op->point);
			s->close_after_flush = true;
			devq_outbox_mark_dirty(s);
		}
	}
	/* Completion first, then the releases it makes possible. */
	for (unsigned i = 0; i < op->nbufs; i++)
		devq_buffer_put(op->bufs[i]);
	op->nbufs = 0;
	devq_job_unref(op);
	/* Through the dirty list whether connected or not: a session whose
	 * connection is gone is freed there once idle (core/session.h). */
	devq_outbox_mark_dirty(s);
}

unsigned devq_sched_drain(struct devq_engine *d)
{
	devq_lock_take(&d->cmpl_lock);
	struct devq_job *list = d->cmpl_head;
	d->cmpl_head = d->cmpl_tail = NULL;
	d->cmpl_deferred = 0;
	unsigned lazy = d->cmpl_lazy;
	d->cmpl_lazy = 0;
	devq_lock_give(&d->cmpl_lock);
	uint64_t now = devq_now_ns();
	while (list) {
		struct devq_job *next = list->cnext;
		complete_one(d, list, now);
		list = next;
	}
	devq_fair_kick(d); /* the slots those completions freed */
	for (struct devq_session *s = d->sessions; s; s = s->next)
		if (s->cpage) {
			atomic_store_explicit(&s->cp_deferred, 0, memory_order_relaxed);
			if (atomic_load_explicit(&s->cp_eager, memory_order_relaxed) &&
			    !devq_fair_waiting(s))
				atomic_store(&s->cp_eager, false);
		}
	return lazy;
}

bool devq_sched_park(struct devq_engine *d)
{
	devq_lock_take(&d->cmpl_lock);
	d->cmpl_parked = true;
	bool pending = d->cmpl_head != NULL;
	devq_lock_give(&d->cmpl_lock);
	return pending;
}

void devq_sched_unpark(struct devq_engine *d)
{
	devq_lock_take(&d->cmpl_lock);
	d->cmpl_parked = false;
	devq_lock_give(&d->cmpl_lock);
}
