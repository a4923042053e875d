/* SPDX-License-Identifier: Apache-2.0 */
/* What each client message means for its session.  Transport (bytes, fds,
 * flushing) lives in server/server.c; ordering and hand-off in
 * core/sched.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "requests/requests.h"

#include "base/log.h"
#include "base/version.h"
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

void devq_dispatch_message(struct devq_session *s, const Devq__ClientMessage *m,
			   struct devq_frame *f, uint64_t t_received)
{
	if (!s->hello_done && m->body_case != DEVQ__CLIENT_MESSAGE__BODY_HELLO) {
		devq_outbox_error(s, DEVQ__CODE__PROTOCOL_ERROR, "hello", NULL, NULL,
				   "the first message must be Hello");
		s->close_after_flush = true;
		return;
	}
	/* The client may have seen completions in its page that the loop has
	 * not collected yet: collect them before answering, so whatever the
	 * daemon reports (status, traces, errors) already includes them.  A
	 * status or trace request drains whoever asks: another client may have
	 * seen its page and told this one (the trace test's two clients do). */
	if (s->cpage || m->body_case == DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS ||
	    m->body_case == DEVQ__CLIENT_MESSAGE__BODY_TRACE_REQUEST)
		devq_sched_drain(s->e);
	switch (m->body_case) {
	case DEVQ__CLIENT_MESSAGE__BODY_HELLO:
		on_hello(s, m->hello);
		break;
	case DEVQ__CLIENT_MESSAGE__BODY_CREATE_BUFFER:
		on_create(s, m->create_buffer);
		break;
	case DEVQ__CLIENT_MESSAGE__BODY_IMPORT_BUFFER:
		on_import(s, m->import_buffer, f);
		break;
	case DEVQ__CLIENT_MESSAGE__BODY_RELEASE_BUFFER:
		on_release(s, m->release_buffer);
		break;
	case DEVQ__CLIENT_MESSAGE__BODY_OPEN_QUEUE:
		on_open_queue(s, m->open_queue);
		break;
	case DEVQ__CLIENT_MESSAGE__BODY_RESET_QUEUE:
		on_reset_queue(s, m->reset_queue);
		break;
	case DEVQ__CLIENT_MESSAGE__BODY_SUBMIT:
		if (m->submit->n_ops == 0)
			devq_outbox_error(s, DEVQ__CODE__INVALID_ARGUMENT, "submit", NULL, NULL,
					   "submit with no ops");
		/* In order, up to the in-flight quota; the rest is held (held.c). */
		devq_held_submit(s, m->submit, t_received);
		break;
	case DEVQ__CLIENT_MESSAGE__BODY_LIST_EXECUTABLES:
		on_list(s);
		break;
	case DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS:
		devq_status_handle(s);
		break;
	case DEVQ__CLIENT_MESSAGE__BODY_TRACE_REQUEST:
		devq_tracereq_handle(s, m->trace_request);
		break;
	default:
		devq_outbox_error(s, DEVQ__CODE__PROTOCOL_ERROR, "unknown", NULL, NULL,
				   "unknown message (no known body in ClientMessage)");
		break;
	}
}

