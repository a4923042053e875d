/* SPDX-License-Identifier: Apache-2.0 */
/* Room per device stream, turns by tenant for the rest; see fair.h. */
#include "core/fair.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/lock.h"
#include "core/cost.h"
#include "core/engine.h"
#include "core/job.h"
#include "core/session.h"
#include "core/tenant.h"
#include "core/timeline.h"
#include "devq.pb-c.h"
#include "kernels.h"

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
			if (colon) /* the whole entry, as written */
				*colon = ':';
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

int devq_fair_start(struct devq_fair *f, unsigned streams, unsigned high, uint64_t window_ns,
		    unsigned depth)
{
	f->st = calloc(streams ? streams : 1, sizeof(*f->st));
	f->est_builtin = calloc(devq_nkernels ? devq_nkernels : 1, sizeof(*f->est_builtin));
	if (!f->st || !f->est_builtin) {
		devq_fair_free(f);
		return -ENOMEM;
	}
	f->nstreams = streams;
	f->nnormal = high < streams ? streams - high : 0;
	f->window_ns = window_ns;
	f->depth = depth ? depth : 1;
	return 0;
}

void devq_fair_free(struct devq_fair *f)
{
	free(f->st);
	free(f->est_builtin);
	f->st = NULL;
	f->est_builtin = NULL;
}

/* Taken recursively (a failed enqueue completes its op at once, and that
 * completion comes back here for the op's room), but kept a devq_lock
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

/* Virtual times are compared as distances: they only grow (modulo 2^64). */
static inline bool vt_before(uint64_t a, uint64_t b)
{
	return (int64_t)(a - b) < 0;
}

int devq_fair_tenant_init(struct devq_engine *e, struct devq_tenant *t)
{
	struct devq_fair *f = &e->fair;
	t->fair.waiting_on = calloc(f->nstreams ? f->nstreams : 1, sizeof(*t->fair.waiting_on));
	if (!t->fair.waiting_on)
		return -ENOMEM;
	unsigned w = 1;
	for (unsigned i = 0; i < f->nshares; i++)
		if (f->share_uid[i] == t->uid)
			w = f->share[i];
	t->fair.weight = w;
	fair_lock(f);
	t->fair.vt = f->vnow; /* a newcomer starts level, no credit */
	fair_unlock(f);
	return 0;
}

void devq_fair_tenant_weight(struct devq_engine *e, struct devq_tenant *t, unsigned weight)
{
	if (weight < 1)
		weight = 1;
	if (weight > DEVQ_FAIR_MAX_WEIGHT)
		weight = DEVQ_FAIR_MAX_WEIGHT;
	/* Completers read it under the lock (vt_of); the loop's own reads
	 * (devq_fair_done) are on this thread. */
	fair_lock(&e->fair);
	t->fair.weight = weight;
	fair_unlock(&e->fair);
}

static inline uint64_t inside_of(const struct devq_tenant *t)
{
	return t->fair.handed - atomic_load_explicit(&t->fair.finished, memory_order_relaxed);
}

static inline uint64_t vt_now(const struct devq_tenant *t)
{
	return t->fair.vt + atomic_load_explicit(&t->fair.vt_fix, memory_order_relaxed);
}

void devq_fair_tenant_queue(struct devq_engine *e, const struct devq_tenant *t,
			    uint64_t *waiting, uint64_t *queued_ns, uint64_t *inside)
{
	fair_lock(&e->fair);
	*waiting = t->fair.waiting;
	*queued_ns = t->fair.queued_ns;
	*inside = inside_of(t);
	fair_unlock(&e->fair);
}

void devq_fair_tenant_fini(struct devq_tenant *t)
{
	free(t->fair.waiting_on);
	t->fair.waiting_on = NULL;
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

/* ---- expected device time ------------------------------------------- */

static inline uint64_t pages_of(const struct devq_job *op)
{
	return 1 + op->arg_bytes / 4096;
}

static uint64_t expected_ns(const struct devq_fair *f, const struct devq_job *op)
{
	if (op->b.kind == DEVQ_BOP_FAIL)
		return 0;
	if (op->fdecl)
		return op->decl_ns;
	/* A cost and a rate: cost / rate, whatever the buffers' size. */
	if (op->fcost) {
		uint64_t r = op->festp->pinned
				     ? op->festp->pinned
				     : atomic_load_explicit(&op->festp->rate, memory_order_relaxed);
		if (r)
			return devq_cost_ns(op->cost, r);
	}
	uint64_t v = op->festp ? atomic_load_explicit(&op->festp->ns16_per_page,
						      memory_order_relaxed)
			       : 0;
	/* Never timed yet: fair-k of them fill the window, so a stream holds
	 * no more of them than fair-k until the first one has taught the
	 * rest. */
	return v ? v * pages_of(op) / 16 : f->window_ns / f->depth;
}

/* One op's rate (cost per second): the average (old - old/8 + r/8, which
 * cannot overflow), the fastest, the count up to DEVQ_COST_SAMPLES.
 * Racy like the per-page average: a lost update only delays learning.
 * Out of line (see release). */
static __attribute__((noinline)) void learn_rate(struct devq_fair_est *e, uint64_t cost,
						 uint64_t dev_ns)
{
	uint64_t r = devq_cost_rate(cost, dev_ns);
	uint64_t old = atomic_load_explicit(&e->rate, memory_order_relaxed);
	atomic_store_explicit(&e->rate, old ? old - old / 8 + r / 8 : r, memory_order_relaxed);
	if (r > atomic_load_explicit(&e->rate_max, memory_order_relaxed))
		atomic_store_explicit(&e->rate_max, r, memory_order_relaxed);
	unsigned n = atomic_load_explicit(&e->rate_n, memory_order_relaxed);
	if (n < DEVQ_COST_SAMPLES)
		atomic_store_explicit(&e->rate_n, n + 1, memory_order_relaxed);
}

/* The per-page average; true when the op's rate is to be learned too
 * (learn_rate, which the caller calls last). */
static bool learn(struct devq_job *op, uint64_t dev_ns)
{
	struct devq_fair_est *e = op->festp;
	if (!e || op->fdecl || op->b.code != DEVQ__CODE__OK)
		return false;
	uint64_t sample = dev_ns * 16 / pages_of(op);
	if (!sample)
		sample = 1;
	uint64_t old = atomic_load_explicit(&e->ns16_per_page, memory_order_relaxed);
	/* An average over about the last 8 ops. */
	atomic_store_explicit(&e->ns16_per_page, old ? (7 * old + sample) / 8 : sample,
			      memory_order_relaxed);
	return op->fcost;
}

static inline uint64_t vt_of(const struct devq_tenant *t, uint64_t ns)
{
	return ns * DEVQ_FAIR_VT_SCALE / t->fair.weight;
}

/* ---- hand-over ------------------------------------------------------- */

/* Whether every op op waits on is already in the backend (or done). */
static bool deps_handed(const struct devq_job *op)
{
	for (unsigned i = 0; i < op->b.nwaits; i++)
		if (!devq_job_of(op->b.waits[i])->fhanded)
			return false;
	return true;
}

/* Whether op, handed to stream x now, starts there without waiting: every
 * op it waits on is done, or was handed to x itself (x runs in order).
 * Sequentially consistent loads: see devq_fair_after_done. */
static bool ready_on(const struct devq_job *op, unsigned x)
{
	for (unsigned i = 0; i < op->b.nwaits; i++) {
		const struct devq_job *w = devq_job_of(op->b.waits[i]);
		if (!(w->fhanded && w->b.stream == x) && !atomic_load(&w->b.done))
			return false;
	}
	return true;
}

/* ready_on(op, f->nstreams): every op op waits on is done (none is
 * handed to that stream, which does not exist).  Inline: submit_one asks
 * it of every op that waits in a lane, and the usual answer, its
 * previous op (waits[0]) still runs, is a few loads. */
static inline bool all_done(const struct devq_job *op)
{
	for (unsigned i = 0; i < op->b.nwaits; i++)
		if (!atomic_load(&devq_job_of(op->b.waits[i])->b.done))
			return false;
	return true;
}

/* The streams of x's class, [*first, *end): normal or high priority. */
static inline void class_of(const struct devq_fair *f, unsigned x, unsigned *first, unsigned *end)
{
	bool high = x >= f->nnormal;
	*first = high ? f->nnormal : 0;
	*end = high ? f->nstreams : f->nnormal;
}

/* Ops of one replayable batch a stream may hold past fair-k. */
#define DEVQ_FAIR_REPLAY_MAX 1024

/* Whether stream x may take more by time: one op always goes to an
 * empty stream. */
static inline bool time_room(const struct devq_fair *f, unsigned x)
{
	uint64_t v = atomic_load(&f->st[x].inside);
	return !(v >> DEVQ_FAIR_OPS_SHIFT) ||
	       (v & ((1ull << DEVQ_FAIR_OPS_SHIFT) - 1)) < f->window_ns;
}

static inline bool count_room(const struct devq_fair *f, unsigned x, bool replay)
{
	uint64_t n = atomic_load(&f->st[x].inside) >> DEVQ_FAIR_OPS_SHIFT;
	return n < f->depth + (replay ? DEVQ_FAIR_REPLAY_MAX : 0);
}

/* After a completion: whether to refill now.  Time is refilled as soon as
 * there is room; the count once half is free, so a stream of short ops
 * costs one lock and one burst per depth/2 ops. */
static inline bool refill_due(const struct devq_fair *f, unsigned x)
{
	uint64_t v = atomic_load(&f->st[x].inside), n = v >> DEVQ_FAIR_OPS_SHIFT;
	return !n || (n <= f->depth / 2 &&
		      (v & ((1ull << DEVQ_FAIR_OPS_SHIFT) - 1)) < f->window_ns);
}

void devq_fair_flush(struct devq_engine *e)
{
	if (e->be->ops->flush)
		e->be->ops->flush(e->be);
}

uint64_t devq_fair_flush_loop(struct devq_engine *e)
{
	if (e->be->ops->run_here)
		return e->be->ops->run_here(e->be, DEVQ_FAIR_HERE_NS);
	devq_fair_flush(e);
	return 0;
}

/* What the backend may go by to run op on the loop thread (run_here): a
 * declared duration, or an estimate learned from timed ops and not yet
 * caught short there; never a guess for an executable never timed. */
static uint64_t here_ns(const struct devq_job *op)
{
	if (op->b.kind == DEVQ_BOP_FAIL)
		return 0;
	if (!op->festp || atomic_load_explicit(&op->festp->here_score, memory_order_relaxed) >
				  DEVQ_FAIR_HERE_DISTRUST)
		return UINT64_MAX;
	if (op->fdecl)
		return op->decl_ns;
	if (!atomic_load_explicit(&op->festp->ns16_per_page, memory_order_relaxed))
		return UINT64_MAX;
	return op->fest;
}

/* Stamps t_handoff and gives op to the backend. */
static void handoff(struct devq_job *op)
{
	struct devq_engine *d = op->s->e;
	/* Stamped before the push: the device may start the op at once. */
	op->b.t_handoff = devq_now_ns();
	devq_bop_deadline_passed(&op->b, op->b.t_handoff); /* then it runs nothing */
	int r = d->be->ops->enqueue(d->be, &op->b);
	op->b.enqueue_ns = devq_now_ns() - op->b.t_handoff;
	if (r < 0) {
		op->b.code = DEVQ__CODE__DEVICE_ERROR;
		snprintf(op->b.msg, sizeof(op->b.msg), "enqueue failed: %s", strerror(-r));
		op->b.t_start = op->b.t_end = devq_now_ns();
		atomic_store(&op->b.done, 1);
		/* Completed as the backend would have: through the callback the
		 * engine gave it (core/sched.c), which comes back here for the
		 * op's room. */
		d->be->on_complete(d->be->ud, &op->b);
	}
}

/* The ops one call here hands over, given to a backend with enqueue_chain
 * in one call (one lock there, two clock reads) before the fair lock is
 * released, so a lane still reaches the backend in order.  A backend
 * without it gets each op at once, as it is handed over. */
struct burst {
	struct devq_job *head, *tail;
	bool chain; /* the backend has enqueue_chain */
};

static inline struct burst burst_of(const struct devq_engine *d)
{
	return (struct burst){ .chain = d->be->ops->enqueue_chain != NULL };
}

/* Out of line: until a client sets a deadline, burst_go has no call to
 * save registers for. */
static __attribute__((noinline)) void burst_deadlines(struct devq_job *op, uint64_t t)
{
	/* Past its client's deadline: handed over all the same, to complete
	 * in its stream's order, but it runs nothing. */
	for (struct devq_job *j = op; j; j = j->b.next ? devq_job_of(j->b.next) : NULL)
		devq_bop_deadline_passed(&j->b, t);
}

static void burst_go(struct devq_engine *d, struct burst *bu)
{
	struct devq_job *op = bu->head;
	if (!op)
		return;
	bu->head = bu->tail = NULL;
	/* One stamp for the burst: every op in it is handed over now. */
	uint64_t t = devq_now_ns();
	for (struct devq_job *j = op; j; j = j->b.next ? devq_job_of(j->b.next) : NULL)
		j->b.t_handoff = t;
	if (atomic_load_explicit(&d->deadlines_seen, memory_order_relaxed)) /* engine.h */
		burst_deadlines(op, t);
	if (d->be->ops->enqueue_chain(d->be, &op->b) == 0)
		return; /* the ops are the backend's now: not touched again here */
	/* Refused whole: op by op, so each gets its own error. */
	while (op) {
		struct devq_job *next = op->b.next ? devq_job_of(op->b.next) : NULL;
		handoff(op);
		op = next;
	}
}

/* What hand_over does to an op besides charging it: whether it is timed,
 * what run_here may go by, and the mark that lets its dependants go. */
static inline void ready_op(struct devq_job *op)
{
	/* Where timing is optional, one op in DEVQ_FAIR_SAMPLE keeps the
	 * estimate learning. */
	if (!op->b.timed && op->festp && !op->fdecl && !op->s->e->be->always_timed &&
	    atomic_fetch_add_explicit(&op->festp->ops, 1, memory_order_relaxed) %
			    DEVQ_FAIR_SAMPLE ==
		    0)
		op->b.timed = true;
	op->b.expect_ns = here_ns(op);
	op->fhanded = true;
}

/* Charges ns of expected time to t's virtual time, as k ops whose last
 * one is last_ns (part of ns): the latest choice's virtual time is t's
 * before that last op's charge. */
static inline void charge_tenant(struct devq_fair *f, struct devq_tenant *t, uint64_t ns,
				 uint64_t last_ns, unsigned k)
{
	uint64_t vt = vt_now(t) + vt_of(t, ns - last_ns);
	if (vt_before(f->vnow, vt))
		f->vnow = vt;
	t->fair.vt += vt_of(t, ns);
	t->fair.handed += k;
}

/* Called with the lock held: a lane hands over in order, so the enqueue
 * happens under it too (burst_go before the unlock).  Charges the op's
 * expected time to its stream and its tenant. */
static void hand_over(struct devq_job *op, struct burst *bu)
{
	struct devq_fair *f = &op->s->e->fair;
	struct devq_tenant *t = op->s->tenant;
	if (op->b.stream < f->nstreams) {
		atomic_fetch_add(&f->st[op->b.stream].inside,
				 (1ull << DEVQ_FAIR_OPS_SHIFT) + op->fest);
	}
	if (t)
		charge_tenant(f, t, op->fest, op->fest, 1);
	ready_op(op);
	if (!bu->chain) {
		handoff(op);
		return;
	}
	op->b.next = NULL;
	if (bu->tail)
		bu->tail->b.next = &op->b;
	else
		bu->head = op;
	bu->tail = op;
}

/* ---- the waiting ops: lanes, a tenant's turns, the active tenants ----- */

static void rr_add(struct devq_tenant *t, struct devq_session *s)
{
	struct devq_fair_tenant *ft = &t->fair;
	s->fair.rr_next = NULL;
	s->fair.rr_prev = ft->rr_tail;
	if (ft->rr_tail)
		ft->rr_tail->fair.rr_next = s;
	else
		ft->rr_head = s;
	ft->rr_tail = s;
	s->fair.in_rr = true;
}

static void rr_del(struct devq_tenant *t, struct devq_session *s)
{
	struct devq_fair_tenant *ft = &t->fair;
	if (s->fair.rr_prev)
		s->fair.rr_prev->fair.rr_next = s->fair.rr_next;
	else
		ft->rr_head = s->fair.rr_next;
	if (s->fair.rr_next)
		s->fair.rr_next->fair.rr_prev = s->fair.rr_prev;
	else
		ft->rr_tail = s->fair.rr_prev;
	s->fair.rr_prev = s->fair.rr_next = NULL;
	s->fair.in_rr = false;
}

static void act_add(struct devq_fair *f, struct devq_tenant *t)
{
	t->fair.act_next = NULL;
	t->fair.act_prev = f->act_tail;
	if (f->act_tail)
		f->act_tail->fair.act_next = t;
	else
		f->act_head = t;
	f->act_tail = t;
	t->fair.active = true;
}

static void act_del(struct devq_fair *f, struct devq_tenant *t)
{
	if (t->fair.act_prev)
		t->fair.act_prev->fair.act_next = t->fair.act_next;
	else
		f->act_head = t->fair.act_next;
	if (t->fair.act_next)
		t->fair.act_next->fair.act_prev = t->fair.act_prev;
	else
		f->act_tail = t->fair.act_prev;
	t->fair.act_prev = t->fair.act_next = NULL;
	t->fair.active = false;
}

/* An op chosen for a stream: of session s, waiting in its lane from (the
 * stream its queue placed it on), after prev there (NULL: the head). */
struct cand {
	struct devq_session *s;
	struct devq_job *op, *prev;
	unsigned from;
};

/* Takes c's op out of its lane for stream x (the caller checked it may
 * go there): from another lane of x's class, it is bound to x now. */
static struct devq_job *dequeue(struct devq_fair *f, const struct cand *c, unsigned x)
{
	struct devq_session *s = c->s;
	struct devq_tenant *t = s->tenant;
	unsigned y = c->from;
	struct devq_fair_lane *l = &s->fair.lanes[y];
	struct devq_job *op = c->op;
	if (c->prev)
		c->prev->fnext = op->fnext;
	else
		l->head = op->fnext;
	if (l->tail == op)
		l->tail = c->prev;
	op->fnext = NULL;
	op->b.stream = x;
	s->fair.waiting--;
	t->fair.waiting--;
	t->fair.waiting_on[y]--;
	t->fair.queued_ns -= op->fest;
	f->st[y].waiting_replay -= op->b.replay;
	atomic_fetch_sub(&f->st[y].waiting, 1);
	f->waiting--;
	/* Sessions take turns inside their tenant: the one served goes to
	 * the back (where it is already when alone). */
	if (!s->fair.waiting)
		rr_del(t, s);
	else if (s->fair.rr_next) {
		rr_del(t, s);
		rr_add(t, s);
	}
	if (!t->fair.waiting)
		act_del(f, t);
	return op;
}

/* The first session in t's turn whose op for stream x may go now: every
 * op it waits on handed over. */
static struct devq_session *ready_session(struct devq_tenant *t, unsigned x)
{
	for (struct devq_session *s = t->fair.rr_head; s; s = s->fair.rr_next) {
		const struct devq_job *op = s->fair.lanes[x].head;
		if (op && deps_handed(op))
			return s;
	}
	return NULL;
}

/* The session whose op goes to stream x next: of the tenants with ops
 * for x, the one whose virtual time would be least once this op is
 * charged (its turn ends earliest; ties to the one with fewer ops inside
 * the backend, then to the one waiting longest: first in the active
 * list), and inside it the next session in turn.  A tenant whose
 * ops for x all wait for dependencies lets the others go first. */
static struct devq_session *pick(struct devq_fair *f, unsigned x)
{
	struct devq_tenant *best = NULL;
	uint64_t bfin = 0, bin = 0;
	/* One tenant waiting (a lone client, the common case): no choice. */
	if (f->act_head && f->act_head == f->act_tail)
		return ready_session(f->act_head, x);
	for (struct devq_tenant *t = f->act_head; t; t = t->fair.act_next) {
		if (!t->fair.waiting_on[x])
			continue;
		/* The head of its first session with an op for x stands for
		 * its next op's cost (the cost only orders tenants). */
		const struct devq_job *h = NULL;
		for (struct devq_session *s = t->fair.rr_head; s && !h; s = s->fair.rr_next)
			h = s->fair.lanes[x].head;
		uint64_t fin = vt_now(t) + (h ? vt_of(t, h->fest) : 0);
		uint64_t in = inside_of(t);
		if (!best || vt_before(fin, bfin) || (fin == bfin && in < bin)) {
			best = t;
			bfin = fin;
			bin = in;
		}
	}
	if (!best)
		return NULL;
	struct devq_session *s = ready_session(best, x);
	if (s)
		return s;
	for (struct devq_tenant *t = f->act_head; t; t = t->fair.act_next)
		if (t != best && t->fair.waiting_on[x] && (s = ready_session(t, x)))
			return s;
	return NULL;
}

/* Whether op, waiting in a lane, may be handed to another stream of its
 * class: may_move's answer when it entered the lane (fpin records a no,
 * but for a chained op, whose only no is being replayable), unless an op
 * after it follows it since (follow_prev).  Lock held. */
static inline bool movable(const struct devq_job *op)
{
	return !op->fpin && !op->b.replay;
}

/* Lane ops looked at, from the head, per session and stream for one
 * that may move: the look stays bounded however long the lane. */
#define DEVQ_FAIR_MOVE_SCAN 4

/* t's op that would start at once on stream x, if any: first, in t's
 * session turn, the head of a lane for x that starts there without
 * waiting (ready_on); else an op among the first DEVQ_FAIR_MOVE_SCAN of
 * a lane for a stream of x's class (x's own too: past a head that cannot
 * start) that may move (movable) and would start there as well: its
 * queue's previous op, say, ran or runs on x. */
static bool start_cand(const struct devq_fair *f, struct devq_tenant *t, unsigned x,
		       struct cand *c)
{
	for (struct devq_session *s = t->fair.rr_head; s; s = s->fair.rr_next) {
		struct devq_job *h = s->fair.lanes[x].head;
		if (h && ready_on(h, x)) {
			*c = (struct cand){ s, h, NULL, x };
			return true;
		}
	}
	unsigned first, end;
	class_of(f, x, &first, &end);
	for (struct devq_session *s = t->fair.rr_head; s; s = s->fair.rr_next)
		for (unsigned y = first; y < end; y++) {
			if (!t->fair.waiting_on[y])
				continue;
			struct devq_job *p = NULL, *o = s->fair.lanes[y].head;
			for (unsigned k = 0; o && k < DEVQ_FAIR_MOVE_SCAN; k++, p = o, o = o->fnext)
				if (movable(o) && ready_on(o, x)) {
					*c = (struct cand){ s, o, p, y };
					return true;
				}
		}
	return false;
}

/* Whether an op waiting for a stream of x's class other than its own
 * lane's may become able to move once ops now running are done: the head
 * of a lane whose waits not done are all handed to other streams than
 * that lane's (its queue's previous op moved).  Its own stream would not
 * take it at once then, so the completion of those ops must look
 * (devq_fair_after_done).  Lane heads only: it answers a failed choice. */
static bool may_start_soon(const struct devq_fair *f, unsigned x)
{
	unsigned first, end;
	class_of(f, x, &first, &end);
	for (const struct devq_tenant *t = f->act_head; t; t = t->fair.act_next)
		for (const struct devq_session *s = t->fair.rr_head; s; s = s->fair.rr_next)
			for (unsigned y = first; y < end; y++) {
				const struct devq_job *h = s->fair.lanes[y].head;
				if (!h || !movable(h))
					continue;
				bool soon = true;
				for (unsigned i = 0; i < h->b.nwaits && soon; i++) {
					const struct devq_job *w = devq_job_of(h->b.waits[i]);
					soon = atomic_load(&w->b.done) ||
					       (w->fhanded && w->b.stream != y);
				}
				if (soon)
					return true;
			}
	return false;
}

/* The op stream x takes next, lock held: of the tenants with an op that
 * starts at once on x (start_cand), the one whose virtual time would be
 * least once that op is charged (ties to fewer ops inside the backend);
 * failing any, pick's (an op of x's own lanes whose waits were all
 * handed over, which may wait there for another stream). */
static bool choose(struct devq_fair *f, unsigned x, struct cand *c)
{
	struct devq_tenant *best = NULL;
	uint64_t bfin = 0;
	bool alone = f->act_head && !f->act_head->fair.act_next;
	/* One tenant waiting (a lone client's refills): nothing to compare
	 * its finish with. */
	if (alone && start_cand(f, f->act_head, x, c))
		return true;
	for (struct devq_tenant *t = alone ? NULL : f->act_head; t; t = t->fair.act_next) {
		uint64_t v = vt_now(t);
		if (best && !vt_before(v, bfin))
			continue; /* cannot end earlier: its charge only adds */
		struct cand tc;
		if (!start_cand(f, t, x, &tc))
			continue;
		uint64_t fin = v + vt_of(t, tc.op->fest);
		if (!best || vt_before(fin, bfin) ||
		    (fin == bfin && inside_of(t) < inside_of(best))) {
			best = t;
			bfin = fin;
			*c = tc;
		}
	}
	if (best)
		return true;
	struct devq_session *s = atomic_load(&f->st[x].waiting) ? pick(f, x) : NULL;
	if (s) {
		*c = (struct cand){ s, s->fair.lanes[x].head, NULL, x };
		return true;
	}
	if (!atomic_load(&f->starved) && may_start_soon(f, x))
		atomic_store(&f->starved, true);
	return false;
}

/* The only session waiting, of the only tenant (a lone client's
 * refills): nobody to choose between, so its ops for stream x go on while
 * there is room, in order, up to a replayable one (fill's own choice) or
 * one whose dependencies are not all handed over.  What dequeue and
 * hand_over count per op is counted once for the run: one atomic add to
 * the stream's room, one charge to the tenant.  The room is judged from
 * one read of it plus the run: completers only free room meanwhile, so
 * the run may stop short, never long, and the completer that freed the
 * room refills after it (the lock orders them).  Lock held; how many. */
static unsigned take_run(struct devq_fair *f, struct devq_session *s, unsigned x,
			 struct burst *bu)
{
	struct devq_fair_lane *l = &s->fair.lanes[x];
	struct devq_job *h = l->head, *first = h, *last = NULL;
	uint64_t v = atomic_load(&f->st[x].inside);
	uint64_t in_n = v >> DEVQ_FAIR_OPS_SHIFT, in_ns = v & ((1ull << DEVQ_FAIR_OPS_SHIFT) - 1);
	/* time_room and count_room as the run goes: the count below depth,
	 * the time below the window.  (An empty stream's first op, which
	 * time_room lets past the window, is fill's: the run comes after
	 * one op was handed over.)  Stopping short costs nothing but speed:
	 * fill's loop looks again. */
	unsigned room_n = in_n < f->depth ? f->depth - (unsigned)in_n : 0;
	uint64_t room_ns = in_ns < f->window_ns ? f->window_ns - in_ns : 0;
	uint64_t ns = 0;
	unsigned k = 0;
	while (h && k < room_n && ns < room_ns && !h->b.replay && deps_handed(h)) {
		ns += h->fest;
		k++;
		ready_op(h); /* fhanded: the next op may wait on this one */
		struct devq_job *nx = h->fnext;
		h->fnext = NULL;
		h->b.next = nx ? &nx->b : NULL; /* the run, in order */
		last = h;
		h = nx;
	}
	if (!k)
		return 0;
	last->b.next = NULL;
	/* Out of the lane and its counts, as dequeue does op by op. */
	l->head = h;
	if (!h)
		l->tail = NULL;
	struct devq_tenant *t = s->tenant;
	s->fair.waiting -= k;
	t->fair.waiting -= k;
	t->fair.waiting_on[x] -= k;
	t->fair.queued_ns -= ns;
	atomic_fetch_sub(&f->st[x].waiting, k);
	f->waiting -= k;
	if (!s->fair.waiting)
		rr_del(t, s);
	if (!t->fair.waiting)
		act_del(f, t);
	/* Charged before any of them reaches the backend, so no completion
	 * gives back room not yet taken. */
	atomic_fetch_add(&f->st[x].inside, ((uint64_t)k << DEVQ_FAIR_OPS_SHIFT) + ns);
	charge_tenant(f, t, ns, last->fest, k);
	if (!bu->chain) {
		for (struct devq_job *op = first, *next; op; op = next) {
			next = op->b.next ? devq_job_of(op->b.next) : NULL;
			op->b.next = NULL;
			handoff(op);
		}
		return k;
	}
	if (bu->tail)
		bu->tail->b.next = &first->b;
	else
		bu->head = first;
	bu->tail = last;
	return k;
}

/* Hands stream x what it has room for, lock held; how many.  A stream
 * full by count is told before any choice is made (the usual answer
 * while a client submits faster than its ops run), unless a replayable
 * op, which may pass the count, waits for it. */
static unsigned fill(struct devq_fair *f, unsigned x, struct burst *bu)
{
	struct devq_fair_stream *st = &f->st[x];
	unsigned n = 0;
	while (f->waiting && time_room(f, x)) {
		bool full = !count_room(f, x, false);
		if (full && (!st->waiting_replay || !count_room(f, x, true)))
			break;
		struct cand c;
		if (!choose(f, x, &c) || (full && !c.op->b.replay))
			break;
		struct devq_session *s = c.s;
		hand_over(dequeue(f, &c, x), bu);
		n++;
		if (f->act_head && f->act_head == f->act_tail && !s->fair.rr_prev && !s->fair.rr_next &&
		    c.from == x)
			n += take_run(f, s, x, bu);
	}
	return n;
}

/* Every stream with room, until nothing more can go: an op handed to one
 * stream may be what another's head waited for, and a stream with
 * nothing of its own may take another's op that can move. */
static void fill_all(struct devq_fair *f, struct burst *bu)
{
	if (!f->waiting)
		return;
	if (atomic_load_explicit(&f->starved, memory_order_relaxed))
		atomic_store(&f->starved, false); /* choose sets it again if still so */
	bool more = true;
	while (more) {
		more = false;
		for (unsigned x = 0; x < f->nstreams; x++)
			if (fill(f, x, bu))
				more = true;
	}
}

/* Whether ops wait for streams other than x: only they can have waited
 * for what x was just handed. */
static inline bool others_wait(const struct devq_fair *f, unsigned x)
{
	return f->waiting > atomic_load_explicit(&f->st[x].waiting, memory_order_relaxed);
}

/* Whether op, about to wait in a lane, may later go to another stream of
 * its class: its queue's order must rest on its waits, not on the
 * stream's order (a previous op still in flight is waits[0], or there is
 * none), and it must not be a failed op (completed in stream order) nor
 * part of a replayable run (one graph per stream).  The class needs no
 * test: an op moves only among its lane's class (start_cand), and a
 * normal queue's op waits for a high-priority stream only as the first
 * op after a reset behind its previous op there (core/timeline.c
 * misplaced), which keeps it where it is.  Loop thread (the timeline),
 * lock held. */
static inline bool may_move(const struct devq_job *op)
{
	if (op->b.kind == DEVQ_BOP_FAIL || op->b.replay)
		return false;
	return op->b.waits_prev || !devq_timeline_get(op->q, op->point - 1);
}

/* An op whose queue order rests on its stream's order (the first after a
 * reset does not wait on its previous op; a failed op waits on nothing)
 * while its previous op is in flight and not done: it goes where that op
 * is, and that op moves no more.  Loop thread, lock held. */
static void follow_prev(struct devq_job *op)
{
	if (op->b.waits_prev && op->b.kind != DEVQ_BOP_FAIL)
		return;
	struct devq_job *prev = devq_timeline_get(op->q, op->point - 1);
	if (!prev || atomic_load_explicit(&prev->b.done, memory_order_acquire))
		return;
	prev->fpin = true;
	op->b.stream = prev->b.stream;
}

/* Puts op at the back of its session's lane for its stream, with the ops
 * after it in devq_fair_submit's list that are for the same stream (a
 * batch's usual shape): they would each wait behind op anyway, so they go
 * in as one run, linked as the list already links them, counted once.
 * n: the op after op in the list.  Returns the first op of the list
 * after the run. */
static struct devq_job *enqueue_run(struct devq_fair *f, struct devq_job *op, struct devq_job *n,
				    bool chained)
{
	struct devq_session *s = op->s;
	unsigned x = op->b.stream;
	struct devq_job *last = op;
	uint64_t ns = op->fest;
	unsigned k = 1, replay = op->b.replay;
	/* A chained op (submit_one) may move unless replayable, which
	 * movable() tests: fpin stays clear, as for the run's others. */
	if (!chained)
		op->fpin = !may_move(op);
	/* An op that may have to follow its previous op elsewhere
	 * (follow_prev) takes its own turn through submit_one. */
	for (; n && n->s == s && n->b.stream == x && n->b.waits_prev && n->b.kind != DEVQ_BOP_FAIL;
	     n = n->fnext, k++) {
		last->fnext = n;
		last = n;
		n->fhanded = false;
		n->fest = expected_ns(f, n);
		ns += n->fest;
		replay += n->b.replay;
	}
	last->fnext = NULL;
	struct devq_tenant *t = s->tenant;
	struct devq_fair_lane *l = &s->fair.lanes[x];
	if (l->tail)
		l->tail->fnext = op;
	else
		l->head = op;
	l->tail = last;
	s->fair.waiting += k;
	t->fair.waiting += k;
	t->fair.waiting_on[x] += k;
	t->fair.queued_ns += ns;
	f->st[x].waiting_replay += replay;
	/* Counted before the stream's room is looked at, while a completer
	 * frees room before it looks at this count (both sequentially
	 * consistent): one of the two sees the other, so room freed just now
	 * is never missed by both. */
	atomic_fetch_add(&f->st[x].waiting, k);
	f->waiting += k;
	if (!s->fair.in_rr)
		rr_add(t, s);
	if (!t->fair.active)
		act_add(f, t);
	return n;
}

/* One op of devq_fair_submit's list, with the lock held; returns the
 * next op of the list not yet taken. */
static struct devq_job *submit_one(struct devq_fair *f, struct devq_job *op, struct burst *bu)
{
	struct devq_job *next = op->fnext;
	struct devq_session *s = op->s;
	struct devq_tenant *t = s->tenant;
	op->fhanded = false;
	op->fnext = NULL;
	op->fest = expected_ns(f, op);
	/* Its queue's order rests on its waits (waits[0] is its previous
	 * op), the usual case: it follows nothing, and may_move's answer is
	 * whether it is replayable. */
	bool chained = op->b.waits_prev && op->b.kind != DEVQ_BOP_FAIL;
	if (!chained)
		follow_prev(op);
	if (!s->fair.lanes || !t || op->b.stream >= f->nstreams) {
		hand_over(op, bu);
		return next;
	}
	/* A tenant that had nothing in the daemon starts from the latest
	 * choice's virtual time: idling earns no credit. */
	if (!t->fair.waiting && !inside_of(t) && vt_before(vt_now(t), f->vnow))
		t->fair.vt = f->vnow - atomic_load_explicit(&t->fair.vt_fix, memory_order_relaxed);
	unsigned x = op->b.stream;
	/* Straight through when nobody waits for the stream, nothing of the
	 * session waits ahead on it and it has room: the usual case of a
	 * device that is not saturated. */
	if (!s->fair.lanes[x].head && !atomic_load(&f->st[x].waiting) && time_room(f, x) &&
	    count_room(f, x, op->b.replay) && deps_handed(op)) {
		hand_over(op, bu);
		return next;
	}
	next = enqueue_run(f, op, next, chained);
	/* fill()'s own first test, inline: a full stream (the usual case
	 * here) costs no call. */
	if (time_room(f, x) && (count_room(f, x, false) || f->st[x].waiting_replay) &&
	    fill(f, x, bu) && others_wait(f, x))
		fill_all(f, bu);
	else if (atomic_load_explicit(&f->starved, memory_order_relaxed) ||
		 (movable(op) && all_done(op)))
		fill_all(f, bu); /* op may start at once on any stream: all done */
	return next;
}

void devq_fair_submit(struct devq_job *first)
{
	struct devq_engine *d = first->s->e;
	struct devq_fair *f = &d->fair;
	struct burst bu = burst_of(d);
	fair_lock(f);
	for (struct devq_job *op = first; op;)
		op = submit_one(f, op, &bu);
	burst_go(d, &bu);
	fair_unlock(f);
}

bool devq_fair_waiting(struct devq_session *s)
{
	return atomic_load(&s->fair.waiting) != 0;
}

/* op completed: its stream's room back, the estimate taught.  Any
 * thread; the tenant's share of it is devq_fair_done's, on the loop. */
static void release(struct devq_job *op)
{
	struct devq_fair *f = &op->s->e->fair;
	bool rate = false;
	uint64_t ns = 0;
	if (op->b.t_start && op->b.t_end >= op->b.t_start) {
		ns = op->b.t_end - op->b.t_start;
		if (!op->fdecl)
			rate = learn(op, ns);
		/* Declared or learned, the time it was let onto the loop for
		 * was wrong by far: a strike (fair.h). */
		struct devq_fair_est *e = op->festp;
		unsigned sc = e ? atomic_load_explicit(&e->here_score, memory_order_relaxed) : 0;
		if (e && op->b.ran_here && ns > DEVQ_FAIR_HERE_OVER_NS)
			atomic_store_explicit(&e->here_score, sc + DEVQ_FAIR_HERE_STRIKE,
					      memory_order_relaxed);
		else if (sc && ns <= DEVQ_FAIR_HERE_NS)
			atomic_store_explicit(&e->here_score, sc - 1, memory_order_relaxed);
	}
	if (op->b.stream < f->nstreams) {
		atomic_fetch_sub(&f->st[op->b.stream].inside,
				 (1ull << DEVQ_FAIR_OPS_SHIFT) + op->fest);
	}
	/* Last, as a tail call: a call anywhere before costs every
	 * completion registers saved and restored, an op of no cost too. */
	if (rate)
		learn_rate(op->festp, op->cost, ns);
}

/* Whether ops wait for any stream (x, freed, may take them or ops that
 * can move): outside the lock, from the per-stream counts. */
static bool any_waiting(const struct devq_fair *f)
{
	for (unsigned i = 0; i < f->nstreams; i++)
		if (atomic_load(&f->st[i].waiting))
			return true;
	return false;
}

void devq_fair_completed(struct devq_job *op)
{
	struct devq_engine *d = op->s->e;
	struct devq_fair *f = &d->fair;
	if (!d->be->enqueue_any_thread || !op->fhanded)
		return;
	release(op);
	unsigned x = op->b.stream;
	if (x >= f->nstreams || !refill_due(f, x) || !any_waiting(f))
		return;
	struct burst bu = burst_of(d);
	fair_lock(f);
	/* The others too while ops wait for them: one with room may take an
	 * op that can move. */
	fill(f, x, &bu);
	if (others_wait(f, x))
		fill_all(f, &bu);
	burst_go(d, &bu);
	fair_unlock(f);
	devq_fair_flush(d);
}

void devq_fair_after_done(struct devq_engine *d)
{
	struct devq_fair *f = &d->fair;
	/* Sequentially consistent, as the op's done flag was stored and as
	 * choose's loads of done flags and its store here are: either this
	 * sees the flag or that choice saw the op done. */
	if (!atomic_load(&f->starved) || lock_depth || !d->be->enqueue_any_thread)
		return; /* other backends: the loop fills, devq_fair_kick */
	struct burst bu = burst_of(d);
	fair_lock(f);
	fill_all(f, &bu);
	burst_go(d, &bu);
	fair_unlock(f);
	devq_fair_flush(d);
}

/* devq_fair_done's share of op for its tenant: the charge corrected to
 * what ran, and its usage, on the loop (a completer's choice may see the
 * charge a little late: the estimate stood in for it meanwhile). */
static inline __attribute__((always_inline)) void done_tenant(struct devq_job *op)
{
	struct devq_tenant *t = op->s->tenant;
	if (!t)
		return;
	struct devq_fair_tenant *ft = &t->fair;
	bool timed = op->b.t_start && op->b.t_end >= op->b.t_start;
	uint64_t dev = timed ? op->b.t_end - op->b.t_start : op->fest;
	if (op->fhanded) {
		/* Loop-only writers: a load and a store, no locked add. */
		if (dev != op->fest)
			atomic_store_explicit(
				&ft->vt_fix,
				atomic_load_explicit(&ft->vt_fix, memory_order_relaxed) +
					(uint64_t)((int64_t)(dev - op->fest) * DEVQ_FAIR_VT_SCALE /
						   (int64_t)ft->weight),
				memory_order_relaxed);
		atomic_store_explicit(&ft->finished,
				      atomic_load_explicit(&ft->finished, memory_order_relaxed) + 1,
				      memory_order_relaxed);
	}
	ft->device_ns += dev;
	ft->ops_done++;
	if (timed && op->b.t_start > op->t_received) {
		uint64_t w = op->b.t_start - op->t_received;
		ft->wait_ns += w;
		ft->waits++;
		if (w > ft->wait_max_ns)
			ft->wait_max_ns = w;
	}
}

static __attribute__((noinline)) void done_release(struct devq_job *op)
{
	release(op);
	done_tenant(op);
}

void devq_fair_done(struct devq_job *op)
{
	/* The release (other backends than those whose completers release)
	 * as a tail call: on the usual path no call is left to save
	 * registers for. */
	if (op->fhanded && !op->s->e->be->enqueue_any_thread)
		done_release(op);
	else
		done_tenant(op);
}

void devq_fair_kick(struct devq_engine *d)
{
	struct devq_fair *f = &d->fair;
	d->flush_due = true;
	/* A backend that takes enqueue from any thread had its room handed
	 * over by the completion that freed it (devq_fair_completed): every
	 * room-making event already looked, so the loop has nothing to add. */
	if (d->be->enqueue_any_thread)
		return;
	struct burst bu = burst_of(d);
	fair_lock(f);
	fill_all(f, &bu);
	burst_go(d, &bu);
	fair_unlock(f);
}

unsigned devq_fair_core_pick(void *ud, struct devq_bop *const *ops, unsigned n)
{
	struct devq_engine *d = ud;
	struct devq_fair *f = &d->fair;
	unsigned best = 0;
	uint64_t best_vt = 0;
	bool have = false;
	fair_lock(f);
	for (unsigned i = 0; i < n; i++) {
		/* The bop is its job's first member (job.h). */
		const struct devq_tenant *t = ((const struct devq_job *)ops[i])->s->tenant;
		if (!t)
			continue;
		uint64_t vt = vt_now(t);
		if (!have || vt_before(vt, best_vt)) {
			best = i;
			best_vt = vt;
			have = true;
		}
	}
	fair_unlock(f);
	return best;
}
