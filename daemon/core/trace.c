/* The op recorder: see trace.h.  Everything here runs on the loop thread. */
#include "trace.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "daemon.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59 /* Linux 4.13; older libc headers lack the name */
#endif

int devq_trace_ring_new(const struct devq_config *cfg, unsigned streams,
			struct devq_trace_ring **out)
{
	*out = NULL;
	struct devq_trace_ring *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->streams = streams;
	t->cap = cfg->trace_records;
	t->busy_ns = calloc(streams ? streams : 1, sizeof(*t->busy_ns));
	if (t->cap)
		t->recs = calloc(t->cap, sizeof(*t->recs));
	if (!t->busy_ns || (t->cap && !t->recs)) {
		log_err("trace: cannot allocate %u records", t->cap);
		devq_trace_ring_free(t);
		return -ENOMEM;
	}
	if (cfg->admin_group && *cfg->admin_group) {
		/* Resolved once: a group renamed later keeps its gid here. */
		struct group *g = getgrnam(cfg->admin_group);
		if (!g) {
			log_err("admin group '%s' does not exist (see --admin-group)",
				cfg->admin_group);
			devq_trace_ring_free(t);
			return -ENOENT;
		}
		t->admin_group_set = true;
		t->admin_gid = g->gr_gid;
	}
	*out = t;
	return 0;
}

void devq_trace_ring_free(struct devq_trace_ring *t)
{
	if (!t)
		return;
	free(t->recs);
	free(t->busy_ns);
	free(t);
}

void devq_trace_record(struct devq_trace_ring *t, const struct devq_op *op)
{
	const struct devq_bop *b = &op->b;
	if (b->code != DEVQ__CODE__OK)
		op->s->trace_failed++;
	/* In-process drivers (the fuzzer) may run without a ring. */
	if (!t)
		return;
	if (b->stream < t->streams && b->t_end > b->t_start)
		t->busy_ns[b->stream] += b->t_end - b->t_start;
	if (!t->cap)
		return;
	struct devq_trace_rec *r = &t->recs[t->recorded++ % t->cap];
	const struct devq_session *s = op->s;
	r->session = s->id;
	r->uid = (uint32_t)s->uid;
	r->pid = (uint32_t)s->pid;
	memcpy(r->name, s->name, sizeof(r->name) - 1);
	r->name[sizeof(r->name) - 1] = '\0';
	r->queue = op->q->id;
	r->point = op->point;
	r->stream = b->stream;
	/* A failed op keeps its kernel when validation got that far. */
	if (b->kernel)
		r->exec = (int32_t)(b->kernel - devq_kernels);
	else
		r->exec = b->kind == DEVQ_BOP_COPY ? -1 : b->kind == DEVQ_BOP_FILL ? -2 : -3;
	r->code = b->code;
	r->t[0] = op->t_client_submit;
	r->t[1] = op->t_received;
	r->t[2] = b->t_handoff;
	r->t[3] = b->t_start;
	r->t[4] = b->t_end;
	r->t[5] = op->t_observed;
	r->t[6] = b->enqueue_ns;
	unsigned nw = b->nwaits < DEVQ_TRACE_WAITS ? b->nwaits : DEVQ_TRACE_WAITS;
	for (unsigned i = 0; i < nw; i++) {
		/* backend.h: struct devq_bop is the first member of devq_op. */
		const struct devq_op *w = (const struct devq_op *)b->waits[i];
		r->waits[i].queue = w->q->id;
		r->waits[i].point = w->point;
		r->waits[i].kind = i >= b->nstrict ? DEVQ__TRACE_WAIT__KIND__HAZARD
				   : w->q == op->q ? DEVQ__TRACE_WAIT__KIND__QUEUE
						   : DEVQ__TRACE_WAIT__KIND__EXPLICIT;
	}
	r->nwaits = (uint8_t)nw;
	r->waits_dropped = (uint8_t)(b->nwaits - nw > 255 ? 255 : b->nwaits - nw);
	r->nbufs = (uint8_t)op->nbufs;
	for (unsigned i = 0; i < op->nbufs; i++) {
		const struct devq_buf *x = op->bufs[i];
		r->bufs[i].id = x->id;
		r->bufs[i].access = (uint8_t)op->acc[i];
		/* This op is the last user of a buffer whose release is pending:
		 * its completion frees the buffer and sends BufferReleased. */
		r->bufs[i].released = x->releasing && x->inflight == 1;
	}
}

bool devq_trace_is_admin(const struct devq_session *s)
{
	const struct devq_trace_ring *t = s->d->trace;
	if (s->uid == 0)
		return true;
	if (!t || !t->admin_group_set)
		return false;
	if (s->gid == t->admin_gid)
		return true;
	/* Supplementary groups as the kernel saw them at connect. */
	gid_t groups[256];
	socklen_t len = sizeof(groups);
	if (s->fd < 0 || getsockopt(s->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return false;
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		if (groups[i] == t->admin_gid)
			return true;
	return false;
}

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

static int build_sessions(struct devq_daemon *d, const struct devq_session *s, bool all,
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
			const struct devq_queue *q = x->queues.slots[j].val;
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

/* Sessions that appear in the records but are gone from the daemon. */
static int build_gone(struct devq_daemon *d, const struct devq_trace_rec **sel, size_t n,
		      Devq__TraceReply *rep, struct reply_mem *m)
{
	m->gone = calloc(n + 1, sizeof(*m->gone));
	m->gonep = calloc(n + 1, sizeof(*m->gonep));
	if (!m->gone || !m->gonep)
		return -ENOMEM;
	size_t g = 0;
	for (size_t i = 0; i < n; i++) {
		const struct devq_trace_rec *x = sel[i];
		bool known = false;
		for (size_t j = 0; j < rep->n_sessions && !known; j++)
			known = rep->sessions[j]->id == x->session;
		for (size_t j = g; j-- > 0 && !known;)
			known = m->gone[j].id == x->session;
		if (known)
			continue;
		/* A live session the caller may not see never reaches here:
		 * records are filtered by the same rule. */
		bool live = false;
		for (const struct devq_session *y = d->sessions; y && !live; y = y->next)
			live = y->id == x->session;
		if (live)
			continue;
		Devq__TraceSession *o = &m->gone[g];
		devq__trace_session__init(o);
		o->id = x->session;
		o->pid = x->pid;
		o->uid = x->uid;
		o->name = (char *)x->name;
		m->gonep[g++] = o;
	}
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

void devq_trace_handle(struct devq_session *s, const Devq__TraceRequest *r)
{
	struct devq_daemon *d = s->d;
	struct devq_trace_ring *t = d->trace;
	if (!t) {
		devq_session_error(s, DEVQ__CODE__FAILED_PRECONDITION, "trace", NULL, NULL,
				   "this daemon was started without the op recorder");
		return;
	}
	if (r->all && !devq_trace_is_admin(s)) {
		devq_session_error(s, DEVQ__CODE__PERMISSION_DENIED, "trace", NULL, NULL,
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
	devq_session_send(s, &msg, NULL, 0);
	reply_mem_free(&m);
	return;
oom:
	reply_mem_free(&m);
	devq_session_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "trace", NULL, NULL,
			   "out of memory building the trace");
}
