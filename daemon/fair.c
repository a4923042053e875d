/* Per-session cap inside the backend, turns above it; see fair.h. */
#include "fair.h"

#include "daemon.h"

static unsigned cap_of(const struct devq_session *s)
{
	return s->d->cfg.fair_k ? s->d->cfg.fair_k : DEVQ_FAIR_K_DEFAULT;
}

static void rr_add(struct devq_session *s)
{
	struct devq_fair *f = &s->d->fair;
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
	struct devq_fair *f = &s->d->fair;
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

static void hand_over(struct devq_op *op)
{
	op->s->fair.inside++;
	devq_sched_handoff(op);
}

void devq_fair_submit(struct devq_op *op)
{
	struct devq_session *s = op->s;
	devq_quota_op(s, +1);
	if (!s->fair.head && s->fair.inside < cap_of(s)) {
		hand_over(op);
		return;
	}
	op->fnext = NULL;
	if (s->fair.tail)
		s->fair.tail->fnext = op;
	else
		s->fair.head = op;
	s->fair.tail = op;
	s->fair.waiting++;
	if (!s->fair.in_rr)
		rr_add(s);
}

void devq_fair_done(struct devq_op *op)
{
	op->s->fair.inside--;
	devq_quota_op(op->s, -1);
}

/* Takes s's oldest waiting op, if s has a free slot. */
static struct devq_op *take(struct devq_session *s)
{
	struct devq_op *op = s->fair.head;
	if (!op || s->fair.inside >= cap_of(s))
		return NULL;
	s->fair.head = op->fnext;
	if (!s->fair.head)
		s->fair.tail = NULL;
	op->fnext = NULL;
	s->fair.waiting--;
	return op;
}

void devq_fair_kick(struct devq_daemon *d)
{
	struct devq_fair *f = &d->fair;
	/* Passes over the turn list, one op per session per pass, so that the
	 * stream receives the sessions' ops interleaved.  A session served
	 * moves to the back, so the next kick starts with someone else. */
	bool progress = true;
	while (progress && f->rr_head) {
		progress = false;
		struct devq_session *last = f->rr_tail;
		for (struct devq_session *s = f->rr_head, *n; s; s = n) {
			n = s->fair.rr_next;
			struct devq_op *op = take(s);
			if (op) {
				progress = true;
				rr_del(s);
				if (s->fair.head)
					rr_add(s);
				hand_over(op);
			}
			if (s == last)
				break;
		}
	}
}
