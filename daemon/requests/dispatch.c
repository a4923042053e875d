/* SPDX-License-Identifier: Apache-2.0 */
/* What each client message means for its session: one table, requests[],
 * names every message a client may send, what it needs and who answers it.
 * Transport (bytes, fds, flushing) lives in server/server.c; ordering and
 * hand-off in core/sched.c; the admin calls in admin.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "requests/requests.h"
#include "requests/admin.h"

#include "base/log.h"
#include "base/version.h"
#include "codec/strcheck.h"
#include "core/buffer.h"
#include "core/cpage.h"
#include "core/engine.h"
#include "core/outbox.h"
#include "core/quota.h"
#include "core/repo.h"
#include "core/sched.h"
#include "core/session.h"
#include "core/timeline.h"

static void reply(struct devq_session *s, Devq__DaemonMessage__BodyCase c, void *body,
		  const int *fds, unsigned nfds)
{
	Devq__DaemonMessage m = DEVQ__DAEMON_MESSAGE__INIT;
	m.body_case = c;
	/* Every body member of the oneof shares one pointer slot. */
	m.hello_reply = body;
	devq_outbox_send(s, &m, fds, nfds);
}

static void on_hello(struct devq_session *s, const Devq__Hello *h)
{
	struct devq_engine *d = s->e;
	if (s->hello_done) {
		devq_outbox_error(s, DEVQ__CODE__PROTOCOL_ERROR, "hello", NULL, NULL,
				   "Hello sent twice");
		return;
	}
	uint32_t lo = h->min_version > DEVQ_PROTO_MIN ? h->min_version : DEVQ_PROTO_MIN;
	uint32_t hi = h->max_version < DEVQ_PROTO_MAX ? h->max_version : DEVQ_PROTO_MAX;
	if (lo > hi || h->min_version > h->max_version) {
		devq_outbox_error(s, DEVQ__CODE__FAILED_PRECONDITION, "hello", NULL, NULL,
				   "no common protocol version: client speaks %u..%u, daemon "
				   "speaks %u..%u",
				   h->min_version, h->max_version, DEVQ_PROTO_MIN, DEVQ_PROTO_MAX);
		s->close_after_flush = true;
		return;
	}
	/* Printable ASCII only: the name ends up in logs and status. */
	size_t j = 0;
	for (const char *p = h->client_name; p && *p && j < sizeof(s->name) - 1; p++)
		s->name[j++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
	s->name[j] = '\0';
	s->hello_done = true;
	devq_slog(DEVQ_LOG_INFO, s, -1, -1, -1, "hello from '%s' (pid %d, uid %u), protocol %u",
		  s->name, (int)s->pid, (unsigned)s->uid, hi);

	Devq__HelloReply r = DEVQ__HELLO_REPLY__INIT;
	r.version = hi;
	r.daemon_version = (char *)DEVQ_VERSION;
	r.min_version = DEVQ_PROTO_MIN;
	r.max_version = DEVQ_PROTO_MAX;
	r.backend = (char *)d->be->name;
	r.device = d->be->device;
	r.streams = d->be->streams - d->be->high_streams;
	r.priority_streams = d->be->high_streams;
	r.max_frame = d->cfg.max_frame;
	r.max_fds = DEVQ_FDS_PER_MSG;
	r.max_op_ns = d->cfg.max_op_ns;
	r.session = s->id;
	/* The completion page is an optimisation: without one (or when it
	 * cannot be made) completions still come on the socket. */
	Devq__CompletionPage cp = DEVQ__COMPLETION_PAGE__INIT;
	int fds[4];
	unsigned nslots = d->cfg.max_queues < 1024 ? d->cfg.max_queues : 1024;
	if (h->completion_page && !s->cpage) {
		int e = devq_cpage_create(nslots, h->submit_ring, &s->cpage, fds);
		if (e < 0) {
			log_warn("session %llu: no completion page: %s", (unsigned long long)s->id,
				 strerror(-e));
		} else {
			cp.layout = DEVQ_CPAGE_LAYOUT;
			cp.size = (uint32_t)s->cpage->pub_len;
			cp.slots = nslots;
			cp.hint_size = (uint32_t)s->cpage->hint_len;
			cp.sq_entries = s->cpage->sq_n;
			r.completion_page = &cp;
		}
	}
	reply(s, DEVQ__DAEMON_MESSAGE__BODY_HELLO_REPLY, &r, r.completion_page ? fds : NULL,
	      r.completion_page ? (cp.sq_entries ? 4 : 3) : 0);
}

static void on_create(struct devq_session *s, const Devq__CreateBuffer *c)
{
	char err[200];
	int fd = -1;
	int code = devq_buffer_create(s, c->id, c->size, c->kind, &fd, err, sizeof(err));
	if (code) {
		struct devq_buf key = { .id = c->id };
		devq_outbox_error(s, code, "create_buffer", &key, NULL, "%s", err);
		return;
	}
	/* Now, or once a large buffer is prefaulted; the reply owns fd. */
	devq_buffer_reply_ready(devq_idmap_get(&s->bufs, c->id), fd);
}

static void on_import(struct devq_session *s, const Devq__ImportBuffer *im, struct devq_frame *f)
{
	char err[200];
	struct devq_buf key = { .id = im->id };
	if (f->nfds != 1) {
		devq_outbox_error(s, DEVQ__CODE__INVALID_ARGUMENT, "import_buffer", &key, NULL,
				   "import buffer %" PRIu64 ": needs exactly one fd, got %u", im->id,
				   f->nfds);
		return;
	}
	int fd = f->fds[0];
	f->fds[0] = -1;
	int code = devq_buffer_import(s, im->id, im->size, im->read_only, fd, err, sizeof(err));
	if (close(fd) < 0) /* mapped (or refused): the daemon keeps no fd */
		log_err("session %llu: close of an imported memfd: %s", (unsigned long long)s->id,
			strerror(errno));
	if (code) {
		devq_outbox_error(s, code, "import_buffer", &key, NULL, "%s", err);
		return;
	}
	devq_buffer_reply_ready(devq_idmap_get(&s->bufs, im->id), -1);
}

static void on_release(struct devq_session *s, const Devq__ReleaseBuffer *r)
{
	struct devq_buf *b = devq_idmap_get(&s->bufs, r->id);
	struct devq_buf key = { .id = r->id };
	if (!b) {
		devq_outbox_error(s, DEVQ__CODE__NOT_FOUND, "release_buffer", &key, NULL,
				   "release buffer %" PRIu64 ": not found", r->id);
		return;
	}
	if (b->releasing) {
		devq_outbox_error(s, DEVQ__CODE__FAILED_PRECONDITION, "release_buffer", &key,
				   NULL, "release buffer %" PRIu64 ": already being released",
				   r->id);
		return;
	}
	devq_buffer_release(b);
}

static void on_open_queue(struct devq_session *s, const Devq__OpenQueue *o)
{
	char err[160];
	struct devq_timeline *q;
	int code = devq_quota_queue(s, o->id, err, sizeof(err));
	if (!code)
		code = devq_timeline_open(s, o->id, o->priority, &q, err, sizeof(err));
	if (!code) {
		devq_quota_queue_opened(s);
		return;
	}
	devq_outbox_error(s, code, "open_queue", NULL, &o->id, "%s", err);
}

static void on_reset_queue(struct devq_session *s, const Devq__ResetQueue *r)
{
	struct devq_timeline *q = devq_idmap_get(&s->queues, r->id);
	if (!q) {
		devq_outbox_error(s, DEVQ__CODE__NOT_FOUND, "reset_queue", NULL, &r->id,
				   "reset queue %u: queue not open", r->id);
		return;
	}
	devq_timeline_reset(q);
}

#ifdef DEVQ_HAVE_CUDA
#define DEVQ_BUILTIN_BACKENDS "cpu,cuda"
#else
#define DEVQ_BUILTIN_BACKENDS "cpu"
#endif

static char *backends_of(unsigned b)
{
	return b == (DEVQ_EXE_CPU | DEVQ_EXE_CUDA) ? "cpu,cuda" : b == DEVQ_EXE_CUDA ? "cuda" : "cpu";
}

/* The built-ins, then the repository's (at most DEVQ_REPO_MAX): bounded. */
/* An executable's cost and its rate (core/fair.h), as devctl list shows
 * them. */
static void list_rate(Devq__Executable *it, const char *cost, struct devq_fair_est *est)
{
	if (!cost)
		return;
	it->cost = (char *)cost;
	it->rate_pinned = est->pinned != 0;
	it->rate = est->pinned ? est->pinned : atomic_load_explicit(&est->rate, memory_order_relaxed);
	it->rate_samples = atomic_load_explicit(&est->rate_n, memory_order_relaxed);
}

static void on_list(struct devq_session *s)
{
	struct devq_engine *e = s->e;
	size_t cap = devq_nkernels + e->repo.n;
	Devq__Executable *items = calloc(cap, sizeof(*items));
	Devq__Executable **ptrs = calloc(cap, sizeof(*ptrs));
	if (!items || !ptrs) {
		free(items);
		free(ptrs);
		devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "list_executables", NULL, NULL,
				   "out of memory");
		return;
	}
	size_t n = 0;
	for (size_t i = 0; i < devq_nkernels; i++) {
		if (devq_kernels[i].test_only && !e->cfg.test_faults)
			continue;
		devq__executable__init(&items[n]);
		items[n].id = (uint32_t)i;
		items[n].name = (char *)devq_kernels[i].name;
		items[n].signature = (char *)devq_kernels[i].signature;
		items[n].source = "built-in";
		items[n].backends = DEVQ_BUILTIN_BACKENDS;
		items[n].unavailable = !e->be->ops->has_kernel(e->be, &devq_kernels[i]);
		list_rate(&items[n], devq_kernels[i].cost, &e->fair.est_builtin[i]);
		ptrs[n] = &items[n];
		n++;
	}
	for (unsigned i = 0; i < e->repo.n; i++) {
		struct devq_exe *x = e->repo.exes[i];
		devq__executable__init(&items[n]);
		items[n].id = x->id;
		items[n].name = x->name;
		items[n].signature = x->signature;
		items[n].source = x->path;
		items[n].backends = backends_of(x->backends);
		items[n].description = x->description;
		items[n].unavailable = !e->be->ops->has_kernel(e->be, &x->k);
		list_rate(&items[n], x->cost_text[0] ? x->cost_text : NULL, &x->est);
		ptrs[n] = &items[n];
		n++;
	}
	Devq__ExecutableList l = DEVQ__EXECUTABLE_LIST__INIT;
	l.n_items = n;
	l.items = ptrs;
	reply(s, DEVQ__DAEMON_MESSAGE__BODY_EXECUTABLES, &l, NULL, 0);
	free(items);
	free(ptrs);
}

/* ---- the table --------------------------------------------------------- */

/* Each handler takes the whole message; the table's wrappers pick its
 * body, so that every entry has one type. */
typedef void devq_request_fn(struct devq_admin *a, struct devq_session *s,
			     const Devq__ClientMessage *m, struct devq_frame *f, uint64_t t);

static void rq_hello(struct devq_admin *a, struct devq_session *s, const Devq__ClientMessage *m,
		     struct devq_frame *f, uint64_t t)
{
	(void)a, (void)f, (void)t;
	on_hello(s, m->hello);
}

static void rq_create(struct devq_admin *a, struct devq_session *s, const Devq__ClientMessage *m,
		      struct devq_frame *f, uint64_t t)
{
	(void)a, (void)f, (void)t;
	on_create(s, m->create_buffer);
}

static void rq_import(struct devq_admin *a, struct devq_session *s, const Devq__ClientMessage *m,
		      struct devq_frame *f, uint64_t t)
{
	(void)a, (void)t;
	on_import(s, m->import_buffer, f);
}

static void rq_release(struct devq_admin *a, struct devq_session *s, const Devq__ClientMessage *m,
		       struct devq_frame *f, uint64_t t)
{
	(void)a, (void)f, (void)t;
	on_release(s, m->release_buffer);
}

static void rq_open_queue(struct devq_admin *a, struct devq_session *s,
			  const Devq__ClientMessage *m, struct devq_frame *f, uint64_t t)
{
	(void)a, (void)f, (void)t;
	on_open_queue(s, m->open_queue);
}

static void rq_reset_queue(struct devq_admin *a, struct devq_session *s,
			   const Devq__ClientMessage *m, struct devq_frame *f, uint64_t t)
{
	(void)a, (void)f, (void)t;
	on_reset_queue(s, m->reset_queue);
}

static void rq_submit(struct devq_admin *a, struct devq_session *s, const Devq__ClientMessage *m,
		      struct devq_frame *f, uint64_t t)
{
	(void)a, (void)f;
	if (m->submit->n_ops == 0)
		devq_outbox_error(s, DEVQ__CODE__INVALID_ARGUMENT, "submit", NULL, NULL,
				   "submit with no ops");
	/* In order, up to the in-flight quota; the rest is held (held.c). */
	devq_held_submit(s, m->submit, t);
}

static void rq_list(struct devq_admin *a, struct devq_session *s, const Devq__ClientMessage *m,
		    struct devq_frame *f, uint64_t t)
{
	(void)a, (void)m, (void)f, (void)t;
	on_list(s);
}

static void rq_status(struct devq_admin *a, struct devq_session *s, const Devq__ClientMessage *m,
		      struct devq_frame *f, uint64_t t)
{
	(void)a, (void)f, (void)t;
	devq_status_handle(s, m->get_status);
}

static void rq_trace(struct devq_admin *a, struct devq_session *s, const Devq__ClientMessage *m,
		     struct devq_frame *f, uint64_t t)
{
	(void)a, (void)f, (void)t;
	devq_tracereq_handle(s, m->trace_request);
}

static void rq_grant(struct devq_admin *a, struct devq_session *s, const Devq__ClientMessage *m,
		     struct devq_frame *f, uint64_t t)
{
	(void)f, (void)t;
	devq_admin_on_grant(a, s, m->admin_grant);
}

static void rq_evict(struct devq_admin *a, struct devq_session *s, const Devq__ClientMessage *m,
		     struct devq_frame *f, uint64_t t)
{
	(void)f, (void)t;
	devq_admin_on_evict(a, s, m->admin_evict);
}

static void rq_tenants(struct devq_admin *a, struct devq_session *s,
		       const Devq__ClientMessage *m, struct devq_frame *f, uint64_t t)
{
	(void)m, (void)f, (void)t;
	devq_admin_on_tenants(a, s);
}

/* What a message needs before its handler runs. */
enum {
	/* Answered only after the session's Hello. */
	RQ_NEEDS_HELLO = 1 << 0,
	/* Answered only for a session that may make admin calls (setting
	 * control-groups; never on a tenant socket). */
	RQ_ADMIN = 1 << 1,
	/* May come through the submit ring (core/cpage.h), not only the
	 * socket. */
	RQ_RING = 1 << 2,
	/* Completions are collected first whoever asks, page or not: the
	 * answer (status, a trace) must include every op the client may have
	 * seen complete, and another client may have seen its page and told
	 * this one (the trace test's two clients do). */
	RQ_DRAINS = 1 << 3,
	/* Its strings are names the daemon acts on: each is checked with its
	 * length on the wire (codec/strcheck.h), and one that holds a NUL,
	 * which the decoded C string would silently cut, is refused before
	 * the handler runs.  Not on the Submit path, which pays nothing. */
	RQ_STRINGS = 1 << 4,
};

struct devq_request {
	const char *name; /* the request an Error names */
	unsigned flags;
	devq_request_fn *handle;
};

/* Indexed by the ClientMessage body's field number (proto/devq.proto). */
static const struct devq_request requests[] = {
	[DEVQ__CLIENT_MESSAGE__BODY_HELLO] = { "hello", RQ_STRINGS, rq_hello },
	[DEVQ__CLIENT_MESSAGE__BODY_CREATE_BUFFER] = { "create_buffer", RQ_NEEDS_HELLO, rq_create },
	[DEVQ__CLIENT_MESSAGE__BODY_IMPORT_BUFFER] = { "import_buffer", RQ_NEEDS_HELLO, rq_import },
	[DEVQ__CLIENT_MESSAGE__BODY_RELEASE_BUFFER] = { "release_buffer", RQ_NEEDS_HELLO,
							rq_release },
	[DEVQ__CLIENT_MESSAGE__BODY_OPEN_QUEUE] = { "open_queue", RQ_NEEDS_HELLO, rq_open_queue },
	[DEVQ__CLIENT_MESSAGE__BODY_RESET_QUEUE] = { "reset_queue", RQ_NEEDS_HELLO,
						     rq_reset_queue },
	[DEVQ__CLIENT_MESSAGE__BODY_SUBMIT] = { "submit", RQ_NEEDS_HELLO | RQ_RING, rq_submit },
	[DEVQ__CLIENT_MESSAGE__BODY_LIST_EXECUTABLES] = { "list_executables", RQ_NEEDS_HELLO,
							  rq_list },
	[DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS] = { "get_status", RQ_NEEDS_HELLO | RQ_DRAINS,
						    rq_status },
	[DEVQ__CLIENT_MESSAGE__BODY_TRACE_REQUEST] = { "trace", RQ_NEEDS_HELLO | RQ_DRAINS,
						       rq_trace },
	[DEVQ__CLIENT_MESSAGE__BODY_ADMIN_GRANT] = { "admin_grant",
						     RQ_NEEDS_HELLO | RQ_ADMIN | RQ_STRINGS,
						     rq_grant },
	[DEVQ__CLIENT_MESSAGE__BODY_ADMIN_EVICT] = { "admin_evict",
						     RQ_NEEDS_HELLO | RQ_ADMIN | RQ_STRINGS,
						     rq_evict },
	[DEVQ__CLIENT_MESSAGE__BODY_ADMIN_TENANTS] = { "admin_tenants",
						       RQ_NEEDS_HELLO | RQ_ADMIN | RQ_STRINGS,
						       rq_tenants },
};

/* The message's entry; an unknown body (or none) has one without a
 * handler, answered after the Hello check with a protocol error. */
static const struct devq_request *request_of(const Devq__ClientMessage *m)
{
	static const struct devq_request unknown = { "unknown", RQ_NEEDS_HELLO, NULL };
	size_t i = (size_t)m->body_case;
	if (i < sizeof(requests) / sizeof(requests[0]) && requests[i].handle)
		return &requests[i];
	return &unknown;
}

/* RQ_STRINGS: the raw ClientMessage's strings against what C reads of
 * them; false, with the Error sent, where one differs.  The path of field
 * names starts at the ClientMessage's body, so it names the request too:
 * "admin_grant: tenant: contains a NUL byte".
 *
 * A Hello refused here closes the connection once the Error is flushed,
 * as the Hello refused for its versions does: a session without a Hello
 * can do nothing, every first-Hello refusal ends it alike (proto/README.md
 * says Error + close), and a client that would retry reconnects.  A second
 * Hello is refused without a close, as "Hello sent twice" is: the session
 * already has its Hello. */
static bool strings_ok(struct devq_session *s, const struct devq_request *rq,
		       const struct devq_frame *f)
{
	char where[160];
	enum devq_strcheck r = devq_strcheck(&devq__client_message__descriptor, f->payload,
					     f->len, where, sizeof(where));
	if (r == DEVQ_STRCHECK_OK)
		return true;
	/* protobuf-c accepted these bytes, so only a NUL is expected here;
	 * the others are refused alike rather than trusted. */
	const char *what = r == DEVQ_STRCHECK_NUL    ? "contains a NUL byte"
			   : r == DEVQ_STRCHECK_DEEP ? "messages nested too deep"
						     : "malformed";
	devq_outbox_error(s, DEVQ__CODE__INVALID_ARGUMENT, rq->name, NULL, NULL, "%s: %s",
			   where[0] ? where : rq->name, what);
	if (!s->hello_done)
		s->close_after_flush = true;
	return false;
}

/* The checks of rq's flags, then its handler. */
static inline __attribute__((always_inline)) void
dispatch(struct devq_admin *a, struct devq_session *s, const struct devq_request *rq,
	 const Devq__ClientMessage *m, struct devq_frame *f, uint64_t t_received, bool ring)
{
	if (ring && !(rq->flags & RQ_RING)) {
		/* The ring's entries are the client's hot path only: anything
		 * else there is a client gone wrong. */
		devq_outbox_error(s, DEVQ__CODE__PROTOCOL_ERROR, "frame", NULL, NULL,
				   "the submit ring carries only Submit messages, not body %d",
				   (int)m->body_case);
		s->close_after_flush = true;
		return;
	}
	if (!s->hello_done && (rq->flags & RQ_NEEDS_HELLO)) {
		devq_outbox_error(s, DEVQ__CODE__PROTOCOL_ERROR, "hello", NULL, NULL,
				   "the first message must be Hello");
		s->close_after_flush = true;
		return;
	}
	if (rq->flags & RQ_ADMIN) {
		if (!s->control) {
			devq_outbox_error(s, DEVQ__CODE__PERMISSION_DENIED, rq->name, NULL, NULL,
					   "%s: uid %u may not make admin calls; allowed: %s "
					   "(setting control-groups)%s",
					   rq->name, (unsigned)s->uid, a->control,
					   s->grant ? "; never on a tenant socket" : "");
			return;
		}
	} else if (s->cpage || (rq->flags & RQ_DRAINS)) {
		/* (An admin call answers about tenants, not about this
		 * session's ops: it collects nothing.)  The client may have seen completions in its page that the
		 * loop has not collected yet: collect them before answering,
		 * so whatever the daemon reports (status, traces, errors)
		 * already includes them. */
		devq_sched_drain(s->e);
	}
	if ((rq->flags & RQ_STRINGS) && !strings_ok(s, rq, f))
		return;
	if (!rq->handle) {
		devq_outbox_error(s, DEVQ__CODE__PROTOCOL_ERROR, rq->name, NULL, NULL,
				   "unknown message (no known body in ClientMessage)");
		return;
	}
	rq->handle(a, s, m, f, t_received);
}

static __attribute__((noinline)) void dispatch_other(struct devq_admin *a, struct devq_session *s,
						     const struct devq_request *rq,
						     const Devq__ClientMessage *m,
						     struct devq_frame *f, uint64_t t_received,
						     bool ring)
{
	dispatch(a, s, rq, m, f, t_received, ring);
}

void devq_dispatch_message(struct devq_admin *a, struct devq_session *s,
			   const Devq__ClientMessage *m, struct devq_frame *f, uint64_t t_received,
			   bool ring)
{
	/* Submit, nearly every message, through the same checks with its
	 * entry's flags and handler known here: they fold into a few tests
	 * and a direct call, where the table's cost as much as a null op's
	 * whole hand-over. */
	if (m->body_case == DEVQ__CLIENT_MESSAGE__BODY_SUBMIT)
		dispatch(a, s, &requests[DEVQ__CLIENT_MESSAGE__BODY_SUBMIT], m, f, t_received, ring);
	else
		dispatch_other(a, s, request_of(m), m, f, t_received, ring);
}
