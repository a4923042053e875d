/* SPDX-License-Identifier: Apache-2.0 */
/* Trace requests: a TraceReply built from the op recorder's ring
 * (core/trace.h), filtered to what the asking user may see.
 *
 * A whole ring is tens of thousands of ops.  Built on the loop, even in
 * steps within the asking tenant's share of it, a tenant asking for traces
 * in a loop keeps the loop thread busy most of the time, and a busy thread
 * waits for a CPU when another tenant's request wakes it, which that
 * tenant's round trips pay for (measured: bench/RESULTS.md, "Trace replies
 * off the loop").  So the ops are selected and packed on a
 * thread of their own, `devqd-trace`, at the lowest priority (SCHED_IDLE):
 * the loop only starts a reply and finishes it, and the builder runs on
 * what CPU time the daemon's other threads and its clients leave.  The
 * builder takes the requests by tenant, in slices of TRACE_SLICE_NS, the
 * tenant served least first: a tenant with six sessions tracing gets no
 * more of it than one with one.  Where the thread cannot be made, the
 * reply is built on the loop in steps, within the asking tenant's share
 * of it.
 *
 * The ops are packed as they are found, each as one `ops` field of the
 * TraceReply, into a buffer of the request's own (no copy of the records
 * is kept); the rest of the reply (sessions, gone ones, counters) is
 * packed on the loop when the ops are done, and the frame assembled from
 * both: a protobuf message may carry its fields in any order and a
 * repeated field in pieces.  The session reads nothing more until its
 * reply is queued, which keeps replies in order. */
#include "requests/requests.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/log.h"
#include "core/engine.h"
#include "core/outbox.h"
#include "core/session.h"
#include "core/timeline.h"
#include "core/trace.h"
#include "requests/trace_enc.h"
#include "wire.h"

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

/* Where a reply is.  LOOP: built on the loop in steps (no builder
 * thread), or handed back by the builder with its ops packed.  QUEUED:
 * the builder's (it alone touches the fields below `c`, and the
 * selection's); the loop may only set `cancelled`. */
enum job_state { JOB_LOOP, JOB_QUEUED };

/* A reply being built (struct devq_session's trace_job). */
struct trace_job {
	struct devq_engine *e;
	uid_t uid;          /* the asking user: whose ops it may see */
	uintptr_t tenant;   /* the builder's fairness key */
	enum job_state state; /* the builder's lock (tr.lock) guards it */
	bool packed;        /* the builder is done with it (under tr.lock) */
	atomic_bool cancelled; /* its session closed: nobody to send it to */
	struct trace_job *next; /* the builder's queue, then its done list */
	struct devq_session *s; /* the asking session (loop only; none once cancelled) */
	int err;            /* of the packing: -ENOMEM */
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

static bool job_sees(const struct trace_job *j, uint32_t uid)
{
	return j->all || uid == (uint32_t)j->uid;
}

static void job_free(struct trace_job *j)
{
	devq_txchunk_free(j->c);
	free(j->seen.slot);
	free(j->live.slot);
	free(j->sessions);
	free(j);
}


/* Records are checked against the clock this often: one record costs well
 * under a microsecond to look at and a few to pack. */
#define CLOCK_EVERY 64

/* First pass, newest first: how far back the reply goes (since_ns, last,
 * DEVQ_TRACE_MAX_REPLY_OPS), as select_recs did in one go.  true when done. */
static bool count_step(struct trace_job *j, const struct devq_trace_ring *t, uint64_t deadline)
{
	while (j->k < j->kept) {
		if (j->k % CLOCK_EVERY == 0 && j->k && devq_now_ns() >= deadline)
			return false;
		uint64_t a = j->top - 1 - j->k;
		uint32_t uid;
		uint64_t observed;
		if (!devq_trace_peek(t, a, &uid, &observed)) {
			/* Overwritten while we counted: what is older is gone. */
			j->truncated = true;
			break;
		}
		if (j->since_ns && observed <= j->since_ns)
			break; /* appended in completion order: the rest is older */
		if (job_sees(j, uid)) {
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
	if (j->kept && j->k == j->kept && j->since_ns && devq_trace_recorded(t) > t->cap)
		j->truncated = true;
	if (!j->want)
		j->lo = j->top;
	j->counting = false;
	return true;
}

/* Room for the frame header and two varints (tag and length). */
#define LEAD (DEVQ_FRAME_HDR + 16)

static int reserve(struct trace_job *j, size_t more)
{
	size_t have = j->c ? devq_txchunk_cap(j->c) : 0, used = j->c ? j->len : LEAD;
	if (have - used >= more && j->c)
		return 0;
	/* First: room for exactly this much (at least 64 KiB); then doubled. */
	size_t cap = have ? have : used + more > (64u << 10) ? used + more : 64u << 10;
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

/* The most bytes one record adds to a reply: its op, and its session's
 * `gone` field (tag, length, id, pid, uid, a name of up to 31 bytes: 58,
 * for which pack_gone asks room for 67). */
#define REC_MAX (DEVQ_TRACE_ENC_OP_MAX + 80)

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
	j->buf[j->len++] = DEVQ_WIRE_TAG1(TRACE_REPLY_GONE);
	j->len = (size_t)(devq_wire_put_varint(j->buf + j->len, size) - j->buf);
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
static bool pack_step(struct trace_job *j, const struct devq_trace_ring *t, uint64_t deadline,
		      int *err)
{
	struct devq_trace_rec rec, *x = &rec;
	for (unsigned i = 0; j->lo < j->top && j->n < j->want; i++, j->lo++) {
		if (i % CLOCK_EVERY == 0 && i && devq_now_ns() >= deadline)
			return false;
		uint32_t uid;
		uint64_t observed;
		if (!devq_trace_peek(t, j->lo, &uid, &observed)) {
			j->truncated = true;
			continue;
		}
		if (!job_sees(j, uid))
			continue; /* another user's: not copied */
		if (!devq_trace_read(t, j->lo, x) || !job_sees(j, x->uid)) {
			j->truncated = true; /* overwritten since the look */
			continue;
		}
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
	rep.recorded = devq_trace_recorded(t);
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
	/* The room for the most the ops could take, given back: a reply
	 * waiting to be sent holds its size (a client with a thousand small
	 * replies unsent, test_attack's 7-snoop, would keep gigabytes of
	 * address space otherwise). */
	devq_txchunk_shrink(&j->c, j->len);
	j->buf = devq_txchunk_data(j->c);
	size_t body = j->len - LEAD;
	uint8_t pre[16];
	uint8_t *e = devq_wire_put_varint(pre, DEVQ_WIRE_TAG_OF(DAEMON_MESSAGE_TRACE_REPLY));
	int np = (int)(devq_wire_put_varint(e, body) - pre);
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

/* ---- the builder thread ---------------------------------------------- */

/* What the builder runs of one request before it looks again for the
 * least served tenant: some thousands of records. */
#define TRACE_SLICE_NS 1000000ull

/* A tenant with requests queued, and how many slices of the builder it
 * had.  One that comes (back) starts level with the least served tenant
 * queued: what it did not ask for before is not owed to it. */
struct tr_tenant {
	uintptr_t key;
	uint64_t served;
	unsigned njobs;
	struct tr_tenant *next;
};

/* One builder per process (like core/buffer.c's worker): started at the
 * first TraceRequest, stopped by devq_tracereq_fini. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_t thread;
	bool started, failed, stop;
	/* Written once per reply handed back, read by the loop (a uv_poll of
	 * the server's).  Not uv_async_send: its sender marks the handle busy
	 * before its write and the loop spins until the mark is cleared, so a
	 * low-priority builder preempted in between would have the loop
	 * spinning and yielding for milliseconds (measured under
	 * bench/loopfair: bench/RESULTS.md, "Trace replies off the loop"). */
	int efd;
	struct trace_job *head, *tail; /* queued, oldest first */
	struct trace_job *done;        /* packed or cancelled, for the loop */
	atomic_bool any_done;          /* done is not empty: a lock-free look */
	struct tr_tenant *tenants;
} tr = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .efd = -1 };

static struct tr_tenant *tr_tenant_of(uintptr_t key)
{
	for (struct tr_tenant *t = tr.tenants; t; t = t->next)
		if (t->key == key)
			return t;
	return NULL;
}

/* The least served tenant's oldest request, or NULL.  Under tr.lock. */
static struct trace_job *tr_pick(void)
{
	struct tr_tenant *best = NULL;
	for (struct tr_tenant *t = tr.tenants; t; t = t->next)
		if (!best || t->served < best->served)
			best = t;
	if (!best)
		return NULL;
	for (struct trace_job *j = tr.head; j; j = j->next)
		if (j->tenant == best->key)
			return j;
	return NULL; /* not reached: a tenant listed has a job queued */
}

/* j leaves the queue for the done list, its ops all packed or not (a
 * builder stopped midway: the loop goes on with it).  Under tr.lock. */
static void tr_done(struct trace_job *j, bool packed)
{
	struct trace_job **p = &tr.head, *prev = NULL;
	while (*p != j) {
		prev = *p;
		p = &(*p)->next;
	}
	*p = j->next;
	if (tr.tail == j)
		tr.tail = prev;
	struct tr_tenant **tp = &tr.tenants;
	while ((*tp)->key != j->tenant)
		tp = &(*tp)->next;
	if (!--(*tp)->njobs) {
		struct tr_tenant *t = *tp;
		*tp = t->next;
		free(t);
	}
	j->packed = packed;
	j->next = tr.done;
	tr.done = j;
	atomic_store_explicit(&tr.any_done, true, memory_order_release);
}

/* One slice of j: true when its ops are all packed (or it ran out of
 * memory: j->err). */
static bool tr_slice(struct trace_job *j)
{
	const struct devq_trace_ring *t = j->e->trace;
	uint64_t deadline = devq_now_ns() + TRACE_SLICE_NS;
	if (j->counting && !count_step(j, t, deadline))
		return false;
	return j->counting || pack_step(j, t, deadline, &j->err);
}

static void *tr_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "devqd-trace"); /* for top -H */
	/* The lowest priority, SCHED_IDLE: the builder runs when the loop, the
	 * device threads and the clients leave a CPU free, and any of them
	 * that wakes takes its CPU at once (at a high nice value instead, a
	 * waking thread can still wait out the builder's time slice, and
	 * another tenant's round trips pay for it; measured under
	 * bench/loopfair: bench/RESULTS.md, "Trace replies off the loop").
	 * The price: while normal threads keep every CPU busy
	 * (the CPU backend's own kernels included) a trace waits for them.
	 * Lowering one's own priority needs no privilege. */
	struct sched_param sp = { .sched_priority = 0 };
	int e = pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
	if (e)
		log_warn("trace: cannot lower the builder thread's priority: %s", strerror(e));
	pthread_mutex_lock(&tr.lock);
	for (;;) {
		struct trace_job *j = NULL;
		while (!tr.stop && !(j = tr_pick()))
			pthread_cond_wait(&tr.cond, &tr.lock);
		if (tr.stop)
			break;
		pthread_mutex_unlock(&tr.lock);
		bool done = atomic_load_explicit(&j->cancelled, memory_order_relaxed) || tr_slice(j);
		pthread_mutex_lock(&tr.lock);
		tr_tenant_of(j->tenant)->served++;
		if (done) {
			tr_done(j, true); /* the loop's once unlocked */
			uint64_t one = 1;
			/* Full (2^64 - 2 unread): the loop has as many to read. */
			if (write(tr.efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
				log_err("trace: waking the loop: %s", strerror(errno));
		}
	}
	pthread_mutex_unlock(&tr.lock);
	return NULL;
}

/* Hands j to the builder, started on first use; false when there is none
 * (it could not be made, or it was stopped): then the loop builds j. */
static bool tr_submit(struct trace_job *j)
{
	pthread_mutex_lock(&tr.lock);
	if (!tr.started && !tr.failed && !tr.stop && tr.efd >= 0) {
		/* Signals stay with the loop: the builder blocks them all. */
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		int e = pthread_create(&tr.thread, NULL, tr_main, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (e) {
			tr.failed = true;
			log_warn("trace: no builder thread (%s): trace replies are built on the loop",
				 strerror(e));
		} else {
			tr.started = true;
		}
	}
	struct tr_tenant *t = NULL;
	if (tr.started && !tr.stop && !(t = tr_tenant_of(j->tenant))) {
		t = calloc(1, sizeof(*t));
		if (t) {
			t->key = j->tenant;
			t->served = UINT64_MAX;
			for (struct tr_tenant *o = tr.tenants; o; o = o->next)
				if (o->served < t->served)
					t->served = o->served;
			if (t->served == UINT64_MAX)
				t->served = 0;
			t->next = tr.tenants;
			tr.tenants = t;
		}
	}
	if (!t) {
		pthread_mutex_unlock(&tr.lock);
		return false;
	}
	t->njobs++;
	j->state = JOB_QUEUED;
	j->next = NULL;
	if (tr.tail)
		tr.tail->next = j;
	else
		tr.head = j;
	tr.tail = j;
	pthread_cond_signal(&tr.cond);
	pthread_mutex_unlock(&tr.lock);
	return true;
}

int devq_tracereq_start(void)
{
	pthread_mutex_lock(&tr.lock);
	if (tr.efd < 0 && !tr.stop) {
		tr.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (tr.efd < 0)
			log_warn("trace: no eventfd for the builder thread (%s): trace replies "
				 "are built on the loop", strerror(errno));
	}
	int fd = tr.efd;
	pthread_mutex_unlock(&tr.lock);
	return fd;
}

void devq_tracereq_collect(void)
{
	if (!atomic_load_explicit(&tr.any_done, memory_order_acquire))
		return; /* every wake-up of the loop passes here */
	pthread_mutex_lock(&tr.lock);
	struct trace_job *j = tr.done;
	tr.done = NULL;
	atomic_store_explicit(&tr.any_done, false, memory_order_relaxed);
	pthread_mutex_unlock(&tr.lock);
	while (j) {
		struct trace_job *n = j->next;
		if (atomic_load_explicit(&j->cancelled, memory_order_relaxed)) {
			job_free(j);
		} else {
			j->state = JOB_LOOP; /* its session finishes it (step) */
			devq_outbox_mark_dirty(j->s);
		}
		j = n;
	}
}

void devq_tracereq_fini(void)
{
	pthread_mutex_lock(&tr.lock);
	tr.stop = true;
	pthread_cond_signal(&tr.cond);
	bool started = tr.started;
	pthread_mutex_unlock(&tr.lock);
	if (started) {
		int e = pthread_join(tr.thread, NULL);
		if (e)
			log_err("trace: joining the builder thread: %s", strerror(e));
		pthread_mutex_lock(&tr.lock);
		tr.started = false;
		pthread_mutex_unlock(&tr.lock);
	}
	/* What it left queued goes back to the loop, which builds it (its
	 * session's next step) or frees it (cancelled). */
	pthread_mutex_lock(&tr.lock);
	while (tr.head)
		tr_done(tr.head, false);
	pthread_mutex_unlock(&tr.lock);
	devq_tracereq_collect();
	if (tr.efd >= 0 && close(tr.efd) < 0)
		log_err("trace: close: %s", strerror(errno));
	tr.efd = -1;
}

bool devq_tracereq_pending(const struct devq_session *s)
{
	const struct trace_job *j = s->trace_job;
	return j && j->state == JOB_QUEUED;
}

void devq_tracereq_abort(struct devq_session *s)
{
	struct trace_job *j = s->trace_job;
	if (!j)
		return;
	s->trace_job = NULL;
	if (j->state == JOB_QUEUED) /* the builder's: freed when it hands it back */
		atomic_store_explicit(&j->cancelled, true, memory_order_relaxed);
	else
		job_free(j);
}

bool devq_tracereq_step(struct devq_session *s, uint64_t deadline_ns)
{
	struct trace_job *j = s->trace_job;
	if (!j)
		return true;
	if (j->state == JOB_QUEUED)
		return false; /* with the builder: collect hands it back */
	const struct devq_trace_ring *t = s->e->trace;
	int err = j->err;
	if (!j->packed) { /* no builder: in steps here */
		if (j->counting && !count_step(j, t, deadline_ns))
			return false;
		if (!j->counting && !pack_step(j, t, deadline_ns, &err))
			return false;
	}
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
	if (!j)
		goto oom;
	j->all = r->all;
	j->no_ops = r->no_ops;
	j->last = r->last;
	j->since_ns = r->since_ns;
	j->counting = true;
	j->top = devq_trace_recorded(t);
	j->kept = r->no_ops || !t->cap ? 0 : j->top < t->cap ? j->top : t->cap;
	j->lo = j->top;
	/* Everything the reply can need, allocated here, for the most ops it
	 * can carry (untouched room costs address space, not memory; the
	 * buffer is trimmed to size when finished): the builder thread then
	 * allocates nothing.  It runs at the lowest priority, and memory it
	 * allocated is its malloc arena's, which the loop must lock to free
	 * or resize: a builder preempted while holding that lock (its CPU
	 * taken by any other thread) held the loop up for as long. */
	uint64_t most = j->kept < DEVQ_TRACE_MAX_REPLY_OPS ? j->kept : DEVQ_TRACE_MAX_REPLY_OPS;
	if (j->last && j->last < most)
		most = j->last;
	size_t nlive = 0;
	for (const struct devq_session *y = d->sessions; y; y = y->next)
		nlive++;
	if (idset_init(&j->seen, most) < 0 || idset_init(&j->live, nlive) < 0 ||
	    !(j->sessions = malloc((most ? most : 1) * sizeof(*j->sessions))) ||
	    reserve(j, most * REC_MAX) < 0)
		goto oom;
	j->sessions_cap = most;
	for (const struct devq_session *y = d->sessions; y; y = y->next)
		j->live.slot[idset_find(&j->live, y->id)] = y->id;
	j->live.n = nlive;
	j->e = d;
	j->s = s;
	j->uid = s->uid;
	j->tenant = s->tenant ? (uintptr_t)s->tenant : (uintptr_t)s->uid;
	j->state = JOB_LOOP;
	s->trace_job = j;
	if (!j->kept)
		return; /* no ops to look at: finished by the first step */
	tr_submit(j);
	return;
oom:
	if (j)
		job_free(j);
	devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "trace", NULL, NULL,
			   "out of memory building the trace");
}
