/* SPDX-License-Identifier: Apache-2.0 */
/* Per-session cap inside the backend, turns above it; see fair.h. */
#include "core/fair.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lock.h"
#include "core/engine.h"
#include "core/job.h"
#include "core/quota.h"
#include "core/session.h"
#include "core/timeline.h"
#include "devq.pb-c.h"

int devq_fair_init(struct devq_fair *f, const char *shares, char *err, size_t n)
{
	memset(f, 0, sizeof(*f));
	atomic_init(&f->lock.v, 0);
	for (const char *p = shares; p && *p;) {
		size_t len = strcspn(p, ", \t");
		char item[128];
		if (!len) {
			p++;
			continue;
		}
		if (len >= sizeof(item)) {
			snprintf(err, n, "fair-shares: entry too long: '%.40s...'", p);
			return -EINVAL;
		}
		memcpy(item, p, len);
		item[len] = '\0';
		p += len;
		char *colon = strrchr(item, ':'), *end;
		unsigned long w = 0;
		if (colon) {
			*colon = '\0';
			errno = 0;
			w = strtoul(colon + 1, &end, 10);
			if (errno || end == colon + 1 || *end)
				w = 0;
		}
		if (!colon || w < 1 || w > DEVQ_FAIR_MAX_WEIGHT) {
			snprintf(err, n, "fair-shares: '%s' is not user:weight with a weight in 1..%d",
				 item, DEVQ_FAIR_MAX_WEIGHT);
			return -EINVAL;
		}
		unsigned long uid = strtoul(item, &end, 10);
		if (!isdigit((unsigned char)item[0]) || *end) {
			struct passwd *pw = getpwnam(item);
			if (!pw) {
				snprintf(err, n, "fair-shares: no user named '%s'", item);
				return -EINVAL;
			}
			uid = pw->pw_uid;
		}
		if (f->nshares == DEVQ_FAIR_MAX_SHARES) {
			snprintf(err, n, "fair-shares: more than %d entries", DEVQ_FAIR_MAX_SHARES);
			return -EINVAL;
		}
		f->share_uid[f->nshares] = (uid_t)uid;
		f->share[f->nshares++] = (unsigned)w;
	}
	return 0;
}

/* Taken recursively (a failed enqueue completes its op at once, and that
 * completion comes back here for the op's slot), but kept a devq_lock
 * (lock.h), which is not recursive: the depth is counted per thread.  One
 * daemon per process. */
static _Thread_local unsigned lock_depth;

static void fair_lock(struct devq_fair *f)
{
	if (lock_depth++ == 0)
		devq_lock_take(&f->lock);
}

static void fair_unlock(struct devq_fair *f)
{
	if (--lock_depth == 0)
		devq_lock_give(&f->lock);
}

static unsigned cap_of(struct devq_session *s)
{
	if (!s->fair.cap) {
		const struct devq_fair *f = &s->e->fair;
		unsigned k = s->e->cfg.fair_k ? s->e->cfg.fair_k : DEVQ_FAIR_K_DEFAULT, w = 1;
		for (unsigned i = 0; i < f->nshares; i++)
			if (f->share_uid[i] == s->uid)
				w = f->share[i];
		s->fair.cap = k * w;
	}
	return s->fair.cap;
}

static void rr_add(struct devq_session *s)
{
	struct devq_fair *f = &s->e->fair;
	s->fair.rr_next = NULL;
	s->fair.rr_prev = f->rr_tail;
	if (f->rr_tail)
		f->rr_tail->fair.rr_next = s;
	else
		f->rr_head = s;
	f->rr_tail = s;
	s->fair.in_rr = true;
}

static void rr_del(struct devq_session *s)
{
	struct devq_fair *f = &s->e->fair;
	if (s->fair.rr_prev)
		s->fair.rr_prev->fair.rr_next = s->fair.rr_next;
	else
		f->rr_head = s->fair.rr_next;
	if (s->fair.rr_next)
		s->fair.rr_next->fair.rr_prev = s->fair.rr_prev;
	else
		f->rr_tail = s->fair.rr_prev;
	s->fair.rr_prev = s->fair.rr_next = NULL;
	s->fair.in_rr = false;
}

int devq_fair_attach(struct devq_session *s)
{
	unsigned n = s->e->be->streams;
	s->fair.lanes = calloc(n ? n : 1, sizeof(*s->fair.lanes));
	if (!s->fair.lanes)
		return -ENOMEM;
	s->fair.nlanes = n;
	return 0;
}

void devq_fair_fini(struct devq_session *s)
{
	free(s->fair.lanes);
	s->fair.lanes = NULL;
}

static struct devq_fair_lane *lane_of(const struct devq_job *op)
{
	const struct devq_fair_sess *f = &op->s->fair;
	return f->lanes && op->b.stream < f->nlanes ? &f->lanes[op->b.stream] : NULL;
}

/* Whether every op op waits on is already in the backend (or done). */
static bool deps_handed(const struct devq_job *op)
{
	for (unsigned i = 0; i < op->b.nwaits; i++)
		if (!devq_job_of(op->b.waits[i])->fhanded)
			return false;
	return true;
}

void devq_fair_flush(struct devq_engine *e)
{
	if (e->be->ops->flush)
		e->be->ops->flush(e->be);
}

/* Stamps t_handoff and gives op to the backend.  from_loop: called on the
 * loop thread (else from a completer). */
static void handoff(struct devq_job *op, bool from_loop)
{
	struct devq_engine *d = op->s->e;
	/* Its completion may not wake the loop.  From a completer the lazy
	 * poll already runs: the op has been in flight since it was
	 * submitted. */
	if (from_loop && op->q->cslot)
		d->ev.arm_lazy(d->ev.ud);
	/* Stamped before the push: the device may start the op at once. */
	op->b.t_handoff = devq_now_ns();
	int r = d->be->ops->enqueue(d->be, &op->b);
	op->b.enqueue_ns = devq_now_ns() - op->b.t_handoff;
	if (r < 0) {
		op->b.code = DEVQ__CODE__DEVICE_ERROR;
		snprintf(op->b.msg, sizeof(op->b.msg), "enqueue failed: %s", strerror(-r));
		op->b.t_start = op->b.t_end = devq_now_ns();
		atomic_store(&op->b.done, 1);
		/* Completed as the backend would have: through the callback the
		 * engine gave it (core/sched.c), which comes back here for the
		 * op's slot. */
		d->be->on_complete(d->be->ud, &op->b);
	}
}

/* The ops one call here hands over, given to a backend with enqueue_chain
 * in one call (one lock there, two clock reads) before the fair lock is
 * released, so a lane still reaches the backend in order.  A backend
 * without it gets each op at once, as it is handed over. */
struct burst {
	struct devq_job *head, *tail;
	bool chain;     /* the backend has enqueue_chain */
	bool from_loop; /* on the loop thread, else a completer */
	bool arm;       /* an op's completion may not wake the loop */
};

static inline struct burst burst_of(const struct devq_engine *d, bool from_loop)
{
	return (struct burst){ .chain = d->be->ops->enqueue_chain != NULL, .from_loop = from_loop };
}

static void burst_go(struct devq_engine *d, struct burst *bu)
{
	struct devq_job *op = bu->head;
	if (!op)
		return;
	bu->head = bu->tail = NULL;
	if (bu->arm) /* as handoff: before any of them can complete */
		d->ev.arm_lazy(d->ev.ud);
	bu->arm = false;
	/* One stamp for the burst: every op in it is handed over now. */
	uint64_t t = devq_now_ns();
	for (struct devq_job *j = op; j; j = j->b.next ? devq_job_of(j->b.next) : NULL)
		j->b.t_handoff = t;
	if (d->be->ops->enqueue_chain(d->be, &op->b) == 0)
		return; /* the ops are the backend's now: not touched again here */
	/* Refused whole: op by op, so each gets its own error. */
	while (op) {
		struct devq_job *next = op->b.next ? devq_job_of(op->b.next) : NULL;
		handoff(op, bu->from_loop);
		op = next;
	}
}

/* Called with the lock held: a lane hands over in order, so the enqueue
 * happens under it too (burst_go before the unlock). */
static void hand_over(struct devq_job *op, struct burst *bu)
{
	struct devq_fair_lane *l = lane_of(op);
	if (l)
		atomic_fetch_add(&l->inside, 1);
	op->fhanded = true;
	if (!bu->chain) {
		handoff(op, bu->from_loop);
		return;
	}
	op->b.next = NULL;
	if (bu->tail)
		bu->tail->b.next = &op->b;
	else
		bu->head = op;
	bu->tail = op;
	bu->arm |= bu->from_loop && op->q->cslot;
}

static struct devq_job *take(struct devq_session *s);

/* l's oldest op, if it may go now: a free slot, every op it waits on
 * handed over. */
/* Ops of one replayable batch a lane may hold past its cap. */
#define DEVQ_FAIR_REPLAY_MAX 1024

static struct devq_job *pop_ready(struct devq_session *s, struct devq_fair_lane *l)
{
	struct devq_job *op = l->head;
	if (!op)
		return NULL;
	/* The slot first: a full lane (the usual answer while a session
	 * submits faster than its ops run) is told without the waits' walk.
	 * A replayable batch (its ops share t_received) enters whole once its
	 * first op has a slot: split, it would reach the backend as several
	 * short runs, each its own graph launch. */
	unsigned cap = cap_of(s), inside = atomic_load(&l->inside);
	if (inside >= cap && !(op->b.replay && l->replay_t == op->t_received &&
			       inside < cap + DEVQ_FAIR_REPLAY_MAX))
		return NULL;
	if (!deps_handed(op))
		return NULL;
	l->replay_t = op->b.replay ? op->t_received : 0;
	l->head = op->fnext;
	if (!l->head)
		l->tail = NULL;
	op->fnext = NULL;
	s->fair.waiting--;
	return op;
}

/* One op of devq_fair_submit's list, with the lock held. */
static void submit_one(struct devq_job *op, struct burst *bu)
{
	struct devq_session *s = op->s;
	struct devq_fair_lane *l = lane_of(op);
	op->fhanded = false;
	op->fnext = NULL;
	if (!l) {
		hand_over(op, bu);
		return;
	}
	/* Queued first, then handed over at once if it may go.  The count
	 * goes up before the lane's slots are looked at, and a completer
	 * frees its slot before it looks at the count (both sequentially
	 * consistent): one of the two sees the other, so a slot freed just
	 * now is never missed by both. */
	if (l->tail)
		l->tail->fnext = op;
	else
		l->head = op;
	l->tail = op;
	s->fair.waiting++;
	struct devq_job *n;
	bool handed = false;
	while ((n = pop_ready(s, l))) {
		hand_over(n, bu);
		handed = true;
	}
	/* A head of another lane may have waited for these only (its slots
	 * free themselves; this would not). */
	while (handed && s->fair.waiting && (n = take(s)))
		hand_over(n, bu);
	if (s->fair.waiting && !s->fair.in_rr)
		rr_add(s);
	else if (!s->fair.waiting && s->fair.in_rr)
		rr_del(s);
}

void devq_fair_submit(struct devq_job *first)
{
	struct devq_engine *d = first->s->e;
	struct burst bu = burst_of(d, true);
	fair_lock(&d->fair);
	for (struct devq_job *op = first, *next; op; op = next) {
		next = op->fnext;
		submit_one(op, &bu);
	}
	burst_go(d, &bu);
	fair_unlock(&d->fair);
}

bool devq_fair_waiting(struct devq_session *s)
{
	fair_lock(&s->e->fair);
	bool r = s->fair.waiting != 0;
	fair_unlock(&s->e->fair);
	return r;
}

void devq_fair_completed(struct devq_job *op)
{
	struct devq_session *s = op->s;
	struct devq_fair_lane *l = lane_of(op);
	if (!l)
		return;
	/* A lane is refilled once half of its slots are free, not at every
	 * completion: one lock and one burst per k/2 ops, while the stream
	 * still has the other half to run.  (cap was set at this op's
	 * submit, before it was handed over.) */
	unsigned left = atomic_fetch_sub(&l->inside, 1) - 1;
	if (left > s->fair.cap / 2 || !s->fair.waiting)
		return;
	fair_lock(&s->e->fair);
	/* Everything of this session that may go now: first the lane whose
	 * slot just freed; then, only if that handed something over, heads of
	 * other lanes that waited for it (a head that waits for a slot gets
	 * it from its own lane's completions). */
	if (s->fair.waiting) {
		struct burst bu = burst_of(s->e, false);
		struct devq_job *n;
		bool handed = false;
		while ((n = pop_ready(s, l))) {
			hand_over(n, &bu);
			handed = true;
		}
		while (handed && (n = take(s)))
			hand_over(n, &bu);
		if (!s->fair.waiting && s->fair.in_rr)
			rr_del(s);
		burst_go(s->e, &bu);
	}
	fair_unlock(&s->e->fair);
	devq_fair_flush(s->e);
}

void devq_fair_done(struct devq_job *op)
{
	struct devq_fair_lane *l = lane_of(op);
	if (l && !op->s->e->be->enqueue_any_thread)
		atomic_fetch_sub(&l->inside, 1);
	devq_quota_op(&op->s->quota, -1);
}

/* Takes an op of s that may go now: the oldest of a lane with a free slot,
 * all of whose dependencies are handed over.  Lanes take turns too. */
static struct devq_job *take(struct devq_session *s)
{
	struct devq_fair_sess *f = &s->fair;
	unsigned n = f->nlanes, i = f->next_lane < n ? f->next_lane : 0;
	for (unsigned j = 0; j < n; j++) {
		struct devq_job *op = pop_ready(s, &f->lanes[i]);
		if (++i == n)
			i = 0;
		if (op) {
			f->next_lane = i;
			return op;
		}
	}
	return NULL;
}

void devq_fair_kick(struct devq_engine *d)
{
	struct devq_fair *f = &d->fair;
	/* Passes over the turn list, one op per session per pass, so that the
	 * stream receives the sessions' ops interleaved.  A session served
	 * moves to the back, so the next kick starts with someone else. */
	struct burst bu = burst_of(d, true);
	fair_lock(f);
	bool progress = true;
	while (progress && f->rr_head) {
		progress = false;
		struct devq_session *last = f->rr_tail;
		for (struct devq_session *s = f->rr_head, *n; s; s = n) {
			n = s->fair.rr_next;
			struct devq_job *op = take(s);
			if (op) {
				progress = true;
				rr_del(s);
				if (s->fair.waiting)
					rr_add(s);
				hand_over(op, &bu);
			}
			if (s == last)
				break;
		}
	}
	burst_go(d, &bu);
	fair_unlock(f);
	d->flush_due = true;
}
