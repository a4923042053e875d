/* SPDX-License-Identifier: Apache-2.0 */
/* Trace requests: a TraceReply built from the op recorder's ring
 * (core/trace.h), filtered to what the asking user may see. */
#include "requests/requests.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/outbox.h"
#include "core/session.h"
#include "core/timeline.h"
#include "core/trace.h"

/* ---- the reply ------------------------------------------------------- */

/* Everything one reply points into, freed together whatever got built. */
struct reply_mem {
	const struct devq_trace_rec **sel;
	Devq__TraceOp *ops, **opp;
	Devq__Timing *tim;
	Devq__TraceWait *w, **wp;
	Devq__TraceBuffer *bf, **bfp;
	Devq__TraceSession *ss, **ssp, *gone, **gonep;
	Devq__TraceQueue *tq, **tqp;
	uint64_t *busy;
};

static void reply_mem_free(struct reply_mem *m)
{
	free(m->sel);
	free(m->ops);
	free(m->opp);
	free(m->tim);
	free(m->w);
	free(m->wp);
	free(m->bf);
	free(m->bfp);
	free(m->ss);
	free(m->ssp);
	free(m->gone);
	free(m->gonep);
	free(m->tq);
	free(m->tqp);
	free(m->busy);
}

static bool visible(const struct devq_session *s, bool all, uid_t uid)
{
	return all || uid == s->uid;
}

/* Picks the records asked for, newest first into m->sel; returns how many. */
static size_t select_recs(const struct devq_trace_ring *t, const struct devq_session *s,
			  const Devq__TraceRequest *r, const struct devq_trace_rec **sel,
			  bool *truncated)
{
	uint64_t kept = t->recorded < t->cap ? t->recorded : t->cap;
	size_t n = 0;
	*truncated = false;
	for (uint64_t k = 0; k < kept; k++) {
		const struct devq_trace_rec *x = &t->recs[(t->recorded - 1 - k) % t->cap];
		/* Records are appended in completion order: stop at since. */
		if (r->since_ns && x->t[5] <= r->since_ns)
			return n;
		if (!visible(s, r->all, x->uid))
			continue;
		if (r->last && n == r->last)
			return n;
		if (n == DEVQ_TRACE_MAX_REPLY_OPS) {
			*truncated = true;
			return n;
		}
		sel[n++] = x;
	}
	/* Ran out of records before reaching since: older ones were dropped. */
	*truncated = r->since_ns && t->recorded > t->cap;
	return n;
}

static void fill_session(Devq__TraceSession *o, const struct devq_session *x)
{
	devq__trace_session__init(o);
	o->id = x->id;
	o->pid = (uint32_t)x->pid;
	o->uid = (uint32_t)x->uid;
	o->name = (char *)x->name;
	o->ops_completed = x->ops_completed;
	o->ops_failed = x->trace_failed;
	o->ops_in_flight = x->ops_in_flight;
	o->bytes_mapped = x->bytes_mapped;
	o->connected = x->connected;
}

static int build_sessions(struct devq_engine *d, const struct devq_session *s, bool all,
			  Devq__TraceReply *rep, struct reply_mem *m)
{
	size_t ns = 0, nq = 0;
	for (const struct devq_session *x = d->sessions; x; x = x->next) {
		if (!visible(s, all, x->uid))
			continue;
		ns++;
		nq += x->queues.count;
	}
	m->ss = calloc(ns + 1, sizeof(*m->ss));
	m->ssp = calloc(ns + 1, sizeof(*m->ssp));
	m->tq = calloc(nq + 1, sizeof(*m->tq));
	m->tqp = calloc(nq + 1, sizeof(*m->tqp));
	if (!m->ss || !m->ssp || !m->tq || !m->tqp)
		return -ENOMEM;
	size_t i = 0, k = 0;
	for (const struct devq_session *x = d->sessions; x; x = x->next) {
		if (!visible(s, all, x->uid))
			continue;
		Devq__TraceSession *o = &m->ss[i];
		fill_session(o, x);
		o->queues = &m->tqp[k];
		for (size_t j = 0; j < x->queues.cap; j++) {
			const struct devq_timeline *q = x->queues.slots[j].val;
			if (!q)
				continue;
			Devq__TraceQueue *tq = &m->tq[k];
			devq__trace_queue__init(tq);
			tq->id = q->id;
			tq->stream = q->stream;
			tq->submitted = q->submitted;
			tq->completed = q->completed;
			m->tqp[k++] = tq;
			o->n_queues++;
		}
		m->ssp[i++] = o;
	}
	rep->sessions = m->ssp;
	rep->n_sessions = i;
	return 0;
}

/* A set of session ids (never 0), open addressing: the gone sessions are
 * found in time linear in the records and the live sessions, whatever
 * mix of them a client arranged. */
struct idset {
	uint64_t *slot;
	size_t mask;
};

static int idset_init(struct idset *t, size_t n)
{
	size_t cap = 16;
	while (cap < 2 * n)
		cap *= 2;
	t->slot = calloc(cap, sizeof(*t->slot));
	t->mask = cap - 1;
	return t->slot ? 0 : -ENOMEM;
}

/* Adds id; true when it was not there yet. */
static bool idset_add(struct idset *t, uint64_t id)
{
	size_t i = (size_t)(id * 0x9e3779b97f4a7c15ull >> 17) & t->mask;
	while (t->slot[i]) {
		if (t->slot[i] == id)
			return false;
		i = (i + 1) & t->mask;
	}
	t->slot[i] = id;
	return true;
}

/* Sessions that appear in the records but are gone from the daemon.  A
 * live session the caller may not see never counts as gone: every live
 * session is in the set first (and its records are filtered out anyway). */
static int build_gone(struct devq_engine *d, const struct devq_trace_rec **sel, size_t n,
		      Devq__TraceReply *rep, struct reply_mem *m)
{
	size_t live = 0;
	for (const struct devq_session *y = d->sessions; y; y = y->next)
		live++;
	struct idset seen;
	m->gone = calloc(n + 1, sizeof(*m->gone));
	m->gonep = calloc(n + 1, sizeof(*m->gonep));
	if (!m->gone || !m->gonep || idset_init(&seen, live + n) < 0)
		return -ENOMEM;
	for (const struct devq_session *y = d->sessions; y; y = y->next)
		idset_add(&seen, y->id);
	size_t g = 0;
	for (size_t i = 0; i < n; i++) {
		const struct devq_trace_rec *x = sel[i];
		if (!idset_add(&seen, x->session))
			continue;
		Devq__TraceSession *o = &m->gone[g];
		devq__trace_session__init(o);
		o->id = x->session;
		o->pid = x->pid;
		o->uid = x->uid;
		o->name = (char *)x->name;
		m->gonep[g++] = o;
	}
	free(seen.slot);
	rep->gone = m->gonep;
	rep->n_gone = g;
	return 0;
}

static int build_ops(const struct devq_trace_rec **sel, size_t n, Devq__TraceReply *rep,
		     struct reply_mem *m)
{
	size_t nw = 0, nb = 0;
	for (size_t i = 0; i < n; i++) {
		nw += sel[i]->nwaits;
		nb += sel[i]->nbufs;
	}
	m->ops = calloc(n + 1, sizeof(*m->ops));
	m->opp = calloc(n + 1, sizeof(*m->opp));
	m->tim = calloc(n + 1, sizeof(*m->tim));
	m->w = calloc(nw + 1, sizeof(*m->w));
	m->wp = calloc(nw + 1, sizeof(*m->wp));
	m->bf = calloc(nb + 1, sizeof(*m->bf));
	m->bfp = calloc(nb + 1, sizeof(*m->bfp));
	if (!m->ops || !m->opp || !m->tim || !m->w || !m->wp || !m->bf || !m->bfp)
		return -ENOMEM;
	size_t wi = 0, bi = 0;
	for (size_t i = 0; i < n; i++) {
		const struct devq_trace_rec *x = sel[n - 1 - i]; /* oldest first */
		Devq__TraceOp *o = &m->ops[i];
		devq__trace_op__init(o);
		o->session = x->session;
		o->queue = x->queue;
		o->point = x->point;
		o->stream = x->stream;
		o->executable = x->exec;
		o->code = x->code;
		Devq__Timing *t = &m->tim[i];
		devq__timing__init(t);
		t->client_submit = x->t[0];
		t->received = x->t[1];
		t->handoff = x->t[2];
		t->device_start = x->t[3];
		t->device_end = x->t[4];
		t->observed = x->t[5];
		t->enqueue_ns = x->t[6];
		o->timing = t;
		o->waits = &m->wp[wi];
		o->n_waits = x->nwaits;
		for (unsigned j = 0; j < x->nwaits; j++, wi++) {
			devq__trace_wait__init(&m->w[wi]);
			m->w[wi].queue = x->waits[j].queue;
			m->w[wi].point = x->waits[j].point;
			m->w[wi].kind = x->waits[j].kind;
			m->wp[wi] = &m->w[wi];
		}
		o->waits_dropped = x->waits_dropped;
		o->buffers = &m->bfp[bi];
		o->n_buffers = x->nbufs;
		for (unsigned j = 0; j < x->nbufs; j++, bi++) {
			devq__trace_buffer__init(&m->bf[bi]);
			m->bf[bi].id = x->bufs[j].id;
			m->bf[bi].access = x->bufs[j].access;
			m->bf[bi].released = x->bufs[j].released;
			m->bfp[bi] = &m->bf[bi];
		}
		m->opp[i] = o;
	}
	rep->ops = m->opp;
	rep->n_ops = n;
	return 0;
}

void devq_tracereq_handle(struct devq_session *s, const Devq__TraceRequest *r)
{
	struct devq_engine *d = s->e;
	struct devq_trace_ring *t = d->trace;
	if (!t) {
		devq_outbox_error(s, DEVQ__CODE__FAILED_PRECONDITION, "trace", NULL, NULL,
				   "this daemon was started without the op recorder");
		return;
	}
	if (r->all && !s->admin) {
		devq_outbox_error(s, DEVQ__CODE__PERMISSION_DENIED, "trace", NULL, NULL,
				   "tracing all sessions needs root or the admin group%s%s; uid %u "
				   "may trace only its own sessions",
				   t->admin_group_set ? " " : " (none is configured)",
				   t->admin_group_set ? d->cfg.admin_group : "", (unsigned)s->uid);
		return;
	}
	struct reply_mem m = { 0 };
	Devq__TraceReply rep = DEVQ__TRACE_REPLY__INIT;
	rep.now_ns = devq_now_ns();
	rep.backend = (char *)d->be->name;
	rep.device = d->be->device;
	rep.streams = d->be->streams;
	rep.capacity = t->cap;
	rep.recorded = t->recorded;
	m.busy = calloc(t->streams + 1, sizeof(*m.busy));
	uint64_t kept = t->recorded < t->cap ? t->recorded : t->cap;
	if (kept > DEVQ_TRACE_MAX_REPLY_OPS)
		kept = DEVQ_TRACE_MAX_REPLY_OPS;
	if (!r->no_ops)
		m.sel = calloc(kept + 1, sizeof(*m.sel));
	if (!m.busy || (!r->no_ops && !m.sel))
		goto oom;
	memcpy(m.busy, t->busy_ns, t->streams * sizeof(*m.busy));
	rep.stream_busy_ns = m.busy;
	rep.n_stream_busy_ns = t->streams;
	size_t n = 0;
	bool truncated = false;
	if (!r->no_ops && t->cap)
		n = select_recs(t, s, r, m.sel, &truncated);
	rep.truncated = truncated;
	if (build_sessions(d, s, r->all, &rep, &m) < 0 || build_gone(d, m.sel, n, &rep, &m) < 0 ||
	    build_ops(m.sel, n, &rep, &m) < 0)
		goto oom;
	Devq__DaemonMessage msg = DEVQ__DAEMON_MESSAGE__INIT;
	msg.body_case = DEVQ__DAEMON_MESSAGE__BODY_TRACE_REPLY;
	msg.trace_reply = &rep;
	devq_outbox_send(s, &msg, NULL, 0);
	reply_mem_free(&m);
	return;
oom:
	reply_mem_free(&m);
	devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "trace", NULL, NULL,
			   "out of memory building the trace");
}
