/* SPDX-License-Identifier: Apache-2.0 */
/* Trace requests: a TraceReply built from the op recorder's ring
 * (core/trace.h), filtered to what the asking user may see.
 *
 * A whole ring is tens of thousands of ops: built at once, one reply held
 * the loop for over 10 ms.  So it is built in steps, each within the time
 * the server's loop share gives the asking tenant (devq_tracereq_step),
 * and the session reads nothing more until it is sent.  The ops are packed
 * as they are found, each as one `ops` field of the TraceReply, into a
 * buffer of the request's own (no copy of the records is kept); the rest of
 * the reply (sessions, gone ones, counters) is packed when the ops are
 * done, and the frame assembled from both: a protobuf message may carry its
 * fields in any order and a repeated field in pieces. */
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
#include "requests/trace_enc.h"

/* ---- the reply ------------------------------------------------------- */

/* Everything one reply points into, freed together whatever got built. */
struct reply_mem {
	Devq__TraceSession *ss, **ssp, *gone, **gonep;
	Devq__TraceQueue *tq, **tqp;
	uint64_t *busy;
};

static void reply_mem_free(struct reply_mem *m)
{
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
	size_t mask, n;
};

static int idset_init(struct idset *t, size_t n)
{
	size_t cap = 16;
	while (cap < 2 * n)
		cap *= 2;
	t->slot = calloc(cap, sizeof(*t->slot));
	t->mask = cap - 1;
	t->n = 0;
	return t->slot ? 0 : -ENOMEM;
}

static size_t idset_find(const struct idset *t, uint64_t id)
{
	size_t i = (size_t)(id * 0x9e3779b97f4a7c15ull >> 17) & t->mask;
	while (t->slot[i] && t->slot[i] != id)
		i = (i + 1) & t->mask;
	return i;
}

/* Adds id; true when it was not there yet.  Grows at half full. */
static int idset_add(struct idset *t, uint64_t id)
{
	if (2 * (t->n + 1) > t->mask + 1) {
		struct idset g;
		if (idset_init(&g, t->n + 1) < 0)
			return -ENOMEM;
		for (size_t i = 0; i <= t->mask; i++)
			if (t->slot[i])
				g.slot[idset_find(&g, t->slot[i])] = t->slot[i];
		g.n = t->n;
		free(t->slot);
		*t = g;
	}
	size_t i = idset_find(t, id);
	if (t->slot[i])
		return 0;
	t->slot[i] = id;
	t->n++;
	return 1;
}

/* A session named by a packed op, in case it is gone by the end. */
struct seen_session {
	uint64_t id;
	uint32_t pid, uid;
	char name[32];
};

/* A reply being built (struct devq_session's trace_job). */
struct trace_job {
	bool all, no_ops;
	uint32_t last;
	uint64_t since_ns;
	bool counting;     /* first pass: which records; then: packing them */
	bool truncated;
	uint64_t top;      /* records older than this absolute index only */
	uint64_t k, kept;  /* counting: records looked at (newest first), of kept */
	uint64_t lo;       /* packing: the next record's absolute index */
	size_t n, want;    /* ops packed; ops selected */
	/* The frame being built, queued as it is when done: LEAD bytes kept
	 * for the frame header and the DaemonMessage field's tag and length
	 * (known last), then the packed ops (each with its field tag) and
	 * gone sessions, then the reply's other fields, packed last
	 * (protobuf takes fields in any order).  buf: c's data; len: bytes
	 * used of it, LEAD included. */
	struct devq_txchunk *c;
	uint8_t *buf;
	size_t len;
	struct idset seen; /* sessions of the packed ops */
	/* The sessions live when the request came (ids are never reused, and
	 * every record it covers is older): one of the ops' sessions not among
	 * them is gone for good and packed at once, as a `gone` field; those
	 * among them are kept here and looked at again at the end. */
	struct idset live;
	struct seen_session *sessions;
	size_t nsessions, sessions_cap;
};

static void job_free(struct trace_job *j)
{
	devq_txchunk_free(j->c);
	free(j->seen.slot);
	free(j->live.slot);
	free(j->sessions);
	free(j);
}

void devq_tracereq_abort(struct devq_session *s)
{
	if (s->trace_job)
		job_free(s->trace_job);
	s->trace_job = NULL;
}

/* Records are checked against the clock this often: one record costs well
 * under a microsecond to look at and a few to pack. */
#define CLOCK_EVERY 64

static bool rec_live(const struct devq_trace_ring *t, uint64_t a)
{
	return t->recorded - a <= t->cap; /* not yet overwritten */
}

/* First pass, newest first: how far back the reply goes (since_ns, last,
 * DEVQ_TRACE_MAX_REPLY_OPS), as select_recs did in one go.  true when done. */
static bool count_step(struct trace_job *j, const struct devq_session *s,
		       const struct devq_trace_ring *t, uint64_t deadline)
{
	while (j->k < j->kept) {
		if (j->k % CLOCK_EVERY == 0 && j->k && devq_now_ns() >= deadline)
			return false;
		uint64_t a = j->top - 1 - j->k;
		if (!rec_live(t, a)) {
			/* Overwritten while we counted: what is older is gone. */
			j->truncated = true;
			break;
		}
		const struct devq_trace_rec *x = &t->recs[a % t->cap];
		if (j->since_ns && x->t[5] <= j->since_ns)
			break; /* appended in completion order: the rest is older */
		if (visible(s, j->all, x->uid)) {
			if (j->last && j->want == j->last)
				break;
			if (j->want == DEVQ_TRACE_MAX_REPLY_OPS) {
				j->truncated = true;
				break;
			}
			j->want++;
		}
		j->k++;
		j->lo = a;
	}
	/* Ran out of records before reaching since: older ones were dropped. */
	if (j->kept && j->k == j->kept && j->since_ns && t->recorded > t->cap)
		j->truncated = true;
	if (!j->want)
		j->lo = j->top;
	j->counting = false;
	return true;
}

static int put_varint(uint8_t *p, uint64_t v)
{
	int n = 0;
	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

/* Room for the frame header and two varints (tag and length). */
#define LEAD (DEVQ_FRAME_HDR + 16)

static int reserve(struct trace_job *j, size_t more)
{
	size_t have = j->c ? devq_txchunk_cap(j->c) : 0, used = j->c ? j->len : LEAD;
	if (have - used >= more && j->c)
		return 0;
	size_t cap = have ? have : 64 << 10;
	while (cap - used < more)
		cap *= 2;
	if (!j->c) {
		if (!(j->c = devq_txchunk_new(cap)))
			return -ENOMEM;
		j->len = LEAD;
	} else if (devq_txchunk_grow(&j->c, cap) < 0) {
		return -ENOMEM;
	}
	j->buf = devq_txchunk_data(j->c);
	return 0;
}

/* A gone session as field 11 (`gone`) of the reply. */
static int pack_gone(struct trace_job *j, const struct devq_trace_rec *x)
{
	Devq__TraceSession o = DEVQ__TRACE_SESSION__INIT;
	o.id = x->session;
	o.pid = x->pid;
	o.uid = x->uid;
	char name[sizeof(x->name) + 1];
	memcpy(name, x->name, sizeof(x->name));
	name[sizeof(x->name)] = '\0';
	o.name = name;
	size_t size = devq__trace_session__get_packed_size(&o);
	if (reserve(j, size + 11) < 0)
		return -ENOMEM;
	j->buf[j->len++] = (11 << 3) | 2;
	j->len += (size_t)put_varint(j->buf + j->len, size);
	j->len += devq__trace_session__pack(&o, j->buf + j->len);
	return 0;
}

static int note_session(struct trace_job *j, const struct devq_trace_rec *x)
{
	int r = idset_add(&j->seen, x->session);
	if (r <= 0)
		return r;
	if (!j->live.slot[idset_find(&j->live, x->session)])
		return pack_gone(j, x);
	if (j->nsessions == j->sessions_cap) {
		size_t cap = j->sessions_cap ? 2 * j->sessions_cap : 16;
		struct seen_session *n = realloc(j->sessions, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		j->sessions = n;
		j->sessions_cap = cap;
	}
	struct seen_session *o = &j->sessions[j->nsessions++];
	o->id = x->session;
	o->pid = x->pid;
	o->uid = x->uid;
	memcpy(o->name, x->name, sizeof(o->name));
	return 0;
}

/* One record as a TraceOp, appended to the buffer as field 10 (`ops`),
 * its bytes written by hand (trace_enc.h). */
static int pack_op(struct trace_job *j, const struct devq_trace_rec *x)
{
	if (reserve(j, DEVQ_TRACE_ENC_OP_MAX) < 0)
		return -ENOMEM;
	j->len += devq_trace_enc_op(j->buf + j->len, x);
	j->n++;
	return note_session(j, x);
}

/* Second pass, oldest first: packs the records the first pass chose.  One
 * overwritten meanwhile is left out (the reply says truncated).  true when
 * done; -ENOMEM through *err. */
static bool pack_step(struct trace_job *j, const struct devq_session *s,
		      const struct devq_trace_ring *t, uint64_t deadline, int *err)
{
	for (unsigned i = 0; j->lo < j->top && j->n < j->want; i++, j->lo++) {
		if (i % CLOCK_EVERY == 0 && i && devq_now_ns() >= deadline)
			return false;
		if (!rec_live(t, j->lo)) {
			j->truncated = true;
			continue;
		}
		const struct devq_trace_rec *x = &t->recs[j->lo % t->cap];
		if (!visible(s, j->all, x->uid))
			continue;
		if ((*err = pack_op(j, x)) < 0)
			return true;
	}
	return true;
}

/* The rest of the reply, then the frame: DaemonMessage.trace_reply (field
 * 70) holding the header fields and the ops packed so far. */
static int finish(struct trace_job *j, struct devq_session *s)
{
	struct devq_engine *d = s->e;
	struct devq_trace_ring *t = d->trace;
	struct reply_mem m = { 0 };
	Devq__TraceReply rep = DEVQ__TRACE_REPLY__INIT;
	rep.now_ns = devq_now_ns();
	rep.backend = (char *)d->be->name;
	rep.device = d->be->device;
	rep.streams = d->be->streams;
	rep.capacity = t->cap;
	rep.recorded = t->recorded;
	rep.truncated = j->truncated;
	int r = -ENOMEM;
	m.busy = calloc(t->streams + 1, sizeof(*m.busy));
	if (!m.busy)
		goto out;
	memcpy(m.busy, t->busy_ns, t->streams * sizeof(*m.busy));
	rep.stream_busy_ns = m.busy;
	rep.n_stream_busy_ns = t->streams;
	if (build_sessions(d, s, j->all, &rep, &m) < 0)
		goto out;
	/* Sessions of the ops that were live at the request and have left
	 * since (the others are packed already).  A live session the caller
	 * may not see never counts as gone (its records were left out). */
	struct idset live;
	size_t nlive = 0;
	for (const struct devq_session *y = d->sessions; y; y = y->next)
		nlive++;
	m.gone = calloc(j->nsessions + 1, sizeof(*m.gone));
	m.gonep = calloc(j->nsessions + 1, sizeof(*m.gonep));
	if (!m.gone || !m.gonep || idset_init(&live, nlive) < 0)
		goto out;
	for (const struct devq_session *y = d->sessions; y; y = y->next)
		live.slot[idset_find(&live, y->id)] = y->id;
	size_t g = 0;
	for (size_t i = 0; i < j->nsessions; i++) {
		const struct seen_session *x = &j->sessions[i];
		if (live.slot[idset_find(&live, x->id)])
			continue;
		Devq__TraceSession *o = &m.gone[g];
		devq__trace_session__init(o);
		o->id = x->id;
		o->pid = x->pid;
		o->uid = x->uid;
		o->name = (char *)x->name;
		m.gonep[g++] = o;
	}
	free(live.slot);
	rep.gone = m.gonep;
	rep.n_gone = g;
	/* The reply's own fields after what is packed already. */
	size_t head = devq__trace_reply__get_packed_size(&rep);
	if (reserve(j, head) < 0)
		goto out;
	j->len += devq__trace_reply__pack(&rep, j->buf + j->len);
	size_t body = j->len - LEAD;
	uint8_t pre[16];
	int np = put_varint(pre, (70 << 3) | 2); /* DaemonMessage.trace_reply */
	np += put_varint(pre + np, body);
	if (!s->connected) {
		r = 0;
		goto out;
	}
	memcpy(j->buf + LEAD - np, pre, (size_t)np);
	devq_outbox_push_completions(s);
	/* Queued as built: a whole-ring reply is a few MiB, which a copy
	 * would take a millisecond of the loop to make. */
	r = devq_tx_push_chunk(&s->tx, j->c, DEVQ_FRAME_DAEMON, LEAD - (size_t)np - DEVQ_FRAME_HDR,
			       (size_t)np + body);
	j->c = NULL;
	if (r < 0)
		goto out;
	devq_outbox_mark_dirty(s);
	r = 0;
out:
	reply_mem_free(&m);
	return r;
}

bool devq_tracereq_step(struct devq_session *s, uint64_t deadline_ns)
{
	struct trace_job *j = s->trace_job;
	if (!j)
		return true;
	const struct devq_trace_ring *t = s->e->trace;
	int err = 0;
	if (j->counting && !count_step(j, s, t, deadline_ns))
		return false;
	if (!j->counting && !pack_step(j, s, t, deadline_ns, &err))
		return false;
	if (!err)
		err = finish(j, s);
	devq_tracereq_abort(s);
	if (err < 0)
		devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "trace", NULL, NULL,
				   "out of memory building the trace");
	return true;
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
	devq_tracereq_abort(s); /* none: the server reads nothing while one is built */
	struct trace_job *j = calloc(1, sizeof(*j));
	size_t nlive = 0;
	for (const struct devq_session *y = d->sessions; y; y = y->next)
		nlive++;
	if (!j || idset_init(&j->seen, 16) < 0 || idset_init(&j->live, nlive) < 0) {
		if (j)
			free(j->seen.slot);
		free(j);
		devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "trace", NULL, NULL,
				   "out of memory building the trace");
		return;
	}
	j->all = r->all;
	j->no_ops = r->no_ops;
	j->last = r->last;
	j->since_ns = r->since_ns;
	j->counting = true;
	j->top = t->recorded;
	j->kept = r->no_ops || !t->cap ? 0 : t->recorded < t->cap ? t->recorded : t->cap;
	j->lo = j->top;
	for (const struct devq_session *y = d->sessions; y; y = y->next)
		j->live.slot[idset_find(&j->live, y->id)] = y->id;
	j->live.n = nlive;
	s->trace_job = j;
}
