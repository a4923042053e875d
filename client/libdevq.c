/* SPDX-License-Identifier: Apache-2.0 */
/* libdevq: see devq.h.  Blocking socket; every read goes through pump(),
 * which sorts daemon messages into the completion FIFO, the error FIFO, the
 * buffer list, or the one synchronous reply a caller is waiting for. */
#include "devq.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cmpl_dec.h"
#include "submit_enc.h"
#include "cpage_client.h"
#include "devq.pb-c.h"
#include "frame.h"

/* A thread asleep on the completion page wakes at least this often (ns):
 * the daemon wakes it for everything it waits for, but a daemon that died
 * wakes nobody, and only the socket tells. */
#define WAIT_SLICE_NS (50ull * 1000 * 1000)

/* A growable FIFO of fixed-size items. */
struct ring {
	unsigned char *items;
	size_t elem, head, count, cap;
};

/* A buffer handle libdevq made: the public fields (struct devq_buffer,
 * devq.h) and what only libdevq uses.  The public fields keep the offsets
 * they had when these were in devq.h, and libdevq never writes these
 * through a handle it did not make (buffer_find), so moving them out broke
 * no ABI. */
struct buffer {
	struct devq_buffer pub;
	struct buffer *next; /* q->bufs */
	int fd;              /* the memfd, kept for devq_reconnect; -1: none */
	bool releasing;      /* release asked */
};

struct cq {
	uint32_t id;
	int priority;
	uint64_t submitted, completed;
	const struct devq_cpage_slot *slot; /* in the completion page, once found */
	/* The daemon refused to open it (an open_queue Error): every op on it
	 * completes here as failed with this code and message, and the
	 * daemon's not_found Error for each op sent on it (echoes of them
	 * still to come) is not repeated to the caller. */
	bool refused;
	int refused_code;
	char refused_msg[128];
	uint64_t echoes;
};

struct exec_extra {
	struct devq_exec_info pub;
	char source[512];
	char backends[16];
	char description[256];
	char cost[160];
	uint64_t rate;
	int pinned;
	unsigned samples;
};

struct devq {
	int fd;
	struct devq_rx rx;
	struct devq_tx tx;
	struct devq_info info;
	char err[320];
	/* What the last AdminGrant's reply warned of ("": nothing). */
	char warning[320];
	bool broken; /* connection lost: every call fails */
	/* The process that connected and the fork count then: see
	 * crossed_fork. */
	pid_t pid;
	unsigned long forks;
	/* what devq_reconnect needs to say hello again */
	char path[108];
	char name[64];
	uint32_t min_version, max_version;

	/* the synchronous request in progress and its reply */
	const char *want_request;
	Devq__DaemonMessage__BodyCase want_case;
	Devq__DaemonMessage *reply;
	int reply_fd;
	int reply_fds[4]; /* the first four fds of the reply (HelloReply: the page) */
	unsigned reply_nfds;

	struct ring cmpl; /* struct devq_completion, arrival order */
	struct ring errs; /* struct devq_error, arrival order */

	struct cq *queues;
	size_t nqueues;
	struct buffer *bufs;
	uint64_t next_buf_id;
	struct devq_exec *execs;
	struct exec_extra *exec_extra; /* devq_exec_info, parallel to execs */
	size_t nexecs;

	/* Submit coalescing (0: off): frames of devq_submit stay queued until
	 * this many bytes wait or something reads or waits. */
	size_t coalesce;
	struct devq_io_stats io;

	/* The completion page of this connection (NULL: none), and the byte
	 * count received when the connection began, to compare with the
	 * daemon's published tx_bytes. */
	struct devq_cpc *cp;
	uint64_t conn_rx_base;
	uint64_t conn_tx_base; /* io.bytes_sent at connect: submit-ring offsets count from it */
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int fail(devq *q, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(devq *q, int r, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(q->err, sizeof(q->err), fmt, ap);
	va_end(ap);
	return r;
}

/* fork(): a child inherits the parent's socket, completion page and submit
 * ring.  Were it to use them, the daemon would read one session's messages
 * from two processes (buffer ids taken twice, points counted twice) and
 * each process would take the other's completions.  So a handle works only
 * in the process that connected; in any other, every call that talks to
 * devqd or reads what it shares fails with -ECHILD, and devq_disconnect
 * only frees this process's copy.  Forks are counted (pthread_atfork) so
 * that the check is a load: getpid() would put a syscall on the submit
 * path.  A child in which only the fork counter moved (one thread: no
 * lock needed) sees a different count. */
static unsigned long fork_count;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void)
{
	fork_count++;
}

static void watch_forks(void)
{
	/* Fails only for lack of memory; a fork then goes unnoticed, as
	 * before this check existed. */
	(void)pthread_atfork(NULL, NULL, on_fork_child);
}

static bool crossed_fork(devq *q)
{
	if (__builtin_expect(q->forks == fork_count, 1))
		return false;
	fail(q, -ECHILD,
	     "a devq connection cannot cross fork(): this one belongs to process %d; "
	     "call devq_connect() in the child",
	     (int)q->pid);
	return true;
}

#ifndef DEVQ_VERSION
#error "DEVQ_VERSION is defined by the Makefile from the VERSION file"
#endif

const char *devq_version(void)
{
	return DEVQ_VERSION;
}

const char *devq_code_name(int code)
{
	static const char *const names[] = {
		"ok", "invalid_argument", "not_found", "out_of_range", "permission_denied",
		"resource_exhausted", "failed_precondition", "dependency_failed", "device_error",
		"device_lost", "protocol_error", "cancelled", "deadline_exceeded",
	};
	if (code < 0 || code >= (int)(sizeof(names) / sizeof(names[0])))
		return "unknown";
	return names[code];
}

static int code_errno(int code)
{
	switch (code) {
	case DEVQ_E_INVALID_ARGUMENT: return -EINVAL;
	case DEVQ_E_NOT_FOUND: return -ENOENT;
	case DEVQ_E_OUT_OF_RANGE: return -ERANGE;
	case DEVQ_E_PERMISSION_DENIED: return -EACCES;
	case DEVQ_E_RESOURCE_EXHAUSTED: return -ENOSPC;
	case DEVQ_E_FAILED_PRECONDITION: return -EPROTONOSUPPORT;
	case DEVQ_E_PROTOCOL_ERROR: return -EPROTO;
	default: return -EIO;
	}
}

static struct cq *find_queue(const devq *q, uint32_t id)
{
	for (size_t i = 0; i < q->nqueues; i++)
		if (q->queues[i].id == id)
			return &q->queues[i];
	return NULL;
}

static void *ring_at(const struct ring *r, size_t i)
{
	return r->items + ((r->head + i) % r->cap) * r->elem;
}

/* Appends an uninitialised slot; growing unrolls the ring to keep order. */
static void *ring_push(struct ring *r)
{
	if (r->count == r->cap) {
		size_t ncap = r->cap ? r->cap * 2 : 32;
		unsigned char *n = malloc(ncap * r->elem);
		if (!n)
			return NULL;
		for (size_t i = 0; i < r->count; i++)
			memcpy(n + i * r->elem, ring_at(r, i), r->elem);
		free(r->items);
		r->items = n;
		r->cap = ncap;
		r->head = 0;
	}
	return r->items + ((r->head + r->count++) % r->cap) * r->elem;
}

static void ring_pop(struct ring *r, void *out)
{
	memcpy(out, ring_at(r, 0), r->elem);
	r->head = (r->head + 1) % r->cap;
	r->count--;
}

/* Removes item i, keeping the order of the rest. */
static void ring_remove(struct ring *r, size_t i)
{
	for (; i + 1 < r->count; i++)
		memcpy(ring_at(r, i), ring_at(r, i + 1), r->elem);
	r->count--;
}

/* Moves the records waiting in the completion ring into the completion
 * FIFO, in order: a copy each, no syscall, no decoding.  Returns how many. */
static size_t take_ring(devq *q)
{
	struct devq_cpc *c = q->cp;
	uint64_t n = c ? devq_cpc_ring_ready(c) : 0;
	if (!n || crossed_fork(q))
		return 0;
	if (n > c->ring_n) /* only a confused daemon; take what the ring holds */
		n = c->ring_n;
	uint64_t t = now_ns();
	struct cq *cq = NULL;
	for (uint64_t i = 0; i < n; i++) {
		const struct devq_crec *e = devq_cpc_ring_at(c, i);
		uint32_t queue = e->queue;
		uint64_t point = e->point;
		if (!cq || cq->id != queue)
			cq = find_queue(q, queue);
		if (cq && point > cq->completed)
			cq->completed = point;
		struct devq_completion *x = ring_push(&q->cmpl);
		if (!x) {
			fail(q, -ENOMEM, "out of memory: completion of queue %u point %llu lost",
			     queue, (unsigned long long)point);
			continue;
		}
		x->queue = queue;
		x->point = point;
		x->code = e->code;
		if (x->code) {
			size_t m = strnlen(e->msg, sizeof(x->message) - 1);
			memcpy(x->message, e->msg, m);
			x->message[m] = '\0';
		} else {
			x->message[0] = '\0';
		}
		x->t = (struct devq_timing){ e->t[0], e->t[1], e->t[2], e->t[3], e->t[4],
					     e->t[5], t,       e->t[6] };
	}
	devq_cpc_ring_consume(c, n);
	return (size_t)n;
}

static void push_error(devq *q, const Devq__Error *e)
{
	struct devq_error *x = ring_push(&q->errs);
	if (!x)
		return;
	memset(x, 0, sizeof(*x));
	x->code = e->code;
	snprintf(x->request, sizeof(x->request), "%s", e->request ? e->request : "");
	snprintf(x->message, sizeof(x->message), "%s", e->message ? e->message : "");
	x->has_buffer = e->has_buffer;
	x->buffer = e->buffer;
	x->has_queue = e->has_queue;
	x->queue = e->queue;
}

/* A failed completion of a refused queue's next point, made here: the
 * daemon has no timeline to complete it on (proto/README.md, "Queues"). */
static void fail_locally(devq *q, struct cq *cq, uint64_t point)
{
	uint64_t t = now_ns();
	struct devq_completion x = { .queue = cq->id, .point = point, .code = cq->refused_code };
	snprintf(x.message, sizeof(x.message), "queue %u could not be opened: %s", cq->id,
		 cq->refused_msg);
	x.t = (struct devq_timing){ t, t, t, t, t, t, t, 0 };
	if (point > cq->completed)
		cq->completed = point;
	struct devq_completion *slot = ring_push(&q->cmpl);
	if (slot)
		*slot = x;
	else
		fail(q, -ENOMEM, "out of memory: completion of queue %u point %llu lost", cq->id,
		     (unsigned long long)point);
}

/* An Error about a queue: a refused open fails the queue's ops so far and
 * from now on; the not_found answer to each op sent on a refused queue is
 * dropped, as that op has its failed completion.  true: the error is
 * consumed. */
static bool on_queue_error(devq *q, const Devq__Error *e)
{
	if (!e->has_queue || !e->request)
		return false;
	struct cq *cq = find_queue(q, e->queue);
	if (!cq)
		return false;
	if (!strcmp(e->request, "open_queue") && !cq->refused) {
		take_ring(q); /* records that came before the refusal stay first */
		cq->refused = true;
		cq->refused_code = e->code ? (int)e->code : DEVQ_E_FAILED_PRECONDITION;
		snprintf(cq->refused_msg, sizeof(cq->refused_msg), "%s",
			 e->message ? e->message : devq_code_name(cq->refused_code));
		/* Every op sent since the open was answered with not_found. */
		cq->echoes += cq->submitted;
		for (uint64_t p = cq->completed + 1; p <= cq->submitted; p++)
			fail_locally(q, cq, p);
		return false;
	}
	if (!strcmp(e->request, "submit") && e->code == DEVQ__CODE__NOT_FOUND && cq->echoes) {
		cq->echoes--;
		return true;
	}
	return false;
}

static void on_completions(devq *q, const Devq__Completions *cs, uint64_t t_recv)
{
	/* Socket records come after whatever the ring holds (cpage_layout.h). */
	take_ring(q);
	for (size_t i = 0; i < cs->n_items; i++) {
		const Devq__Completion *c = cs->items[i];
		struct devq_completion x = { .queue = c->queue, .point = c->point, .code = c->code };
		snprintf(x.message, sizeof(x.message), "%s", c->message ? c->message : "");
		if (c->timing) {
			x.t.client_submit = c->timing->client_submit;
			x.t.received = c->timing->received;
			x.t.handoff = c->timing->handoff;
			x.t.device_start = c->timing->device_start;
			x.t.device_end = c->timing->device_end;
			x.t.observed = c->timing->observed;
			x.t.enqueue_ns = c->timing->enqueue_ns;
		}
		x.t.client_received = t_recv;
		struct cq *cq = find_queue(q, c->queue);
		if (cq && c->point > cq->completed)
			cq->completed = c->point;
		struct devq_completion *slot = ring_push(&q->cmpl);
		if (slot)
			*slot = x;
		else
			fail(q, -ENOMEM, "out of memory: completion of queue %u point %llu lost",
			     c->queue, (unsigned long long)c->point);
	}
	if (q->cp)
		devq_cpc_sock_seen(q->cp, cs->n_items);
}

/* The Completions frame without protobuf-c (client/cmpl_dec.c): items go
 * straight into the completion FIFO.  1: not such a frame, decode it with
 * protobuf-c; 0: taken; -EPROTO: malformed, and nothing of it is kept, as
 * when protobuf-c rejects a frame. */
static int take_completions(devq *q, const struct devq_frame *f, uint64_t t_recv)
{
	struct devq_cmpl_dec d;
	int r = devq_cmpl_dec_begin(&d, f->payload, f->len);
	if (r)
		return r;
	/* Socket records come after whatever the ring holds (cpage_layout.h). */
	take_ring(q);
	size_t n0 = q->cmpl.count, spilled = 0;
	struct devq_completion spill;
	for (;;) {
		struct devq_completion *slot = ring_push(&q->cmpl);
		r = devq_cmpl_dec_next(&d, slot ? slot : &spill);
		if (r <= 0) {
			if (slot)
				q->cmpl.count--;
			break;
		}
		if (!slot) {
			/* Out of memory: the record is lost but its point still
			 * counts, as on the protobuf-c path. */
			struct cq *cq = find_queue(q, spill.queue);
			if (cq && spill.point > cq->completed)
				cq->completed = spill.point;
			fail(q, -ENOMEM, "out of memory: completion of queue %u point %llu lost",
			     spill.queue, (unsigned long long)spill.point);
			spilled++;
		}
	}
	if (r < 0) {
		q->cmpl.count = n0;
		return r;
	}
	/* Points advance only once the whole frame is known to be sound.
	 * Consecutive records are mostly of one queue: look it up once. */
	struct cq *cq = NULL;
	for (size_t i = n0; i < q->cmpl.count; i++) {
		struct devq_completion *c = ring_at(&q->cmpl, i);
		c->t.client_received = t_recv;
		if (!cq || cq->id != c->queue)
			cq = find_queue(q, c->queue);
		if (cq && c->point > cq->completed)
			cq->completed = c->point;
	}
	if (q->cp)
		devq_cpc_sock_seen(q->cp, q->cmpl.count - n0 + spilled);
	return 0;
}

static void on_message(devq *q, Devq__DaemonMessage *m, struct devq_frame *f, uint64_t t)
{
	switch (m->body_case) {
	case DEVQ__DAEMON_MESSAGE__BODY_COMPLETIONS:
		on_completions(q, m->completions, t);
		break;
	case DEVQ__DAEMON_MESSAGE__BODY_BUFFER_RELEASED:
		for (struct buffer *x = q->bufs; x; x = x->next)
			if (x->pub.id == m->buffer_released->id)
				x->pub.released = true;
		break;
	case DEVQ__DAEMON_MESSAGE__BODY_ERROR:
		if (q->want_request && !q->reply && m->error->request &&
		    !strcmp(m->error->request, q->want_request)) {
			q->reply = m;
			return;
		}
		if (!on_queue_error(q, m->error))
			push_error(q, m->error);
		break;
	default:
		if (q->want_request && !q->reply && m->body_case == q->want_case) {
			q->reply = m;
			if (f->nfds) {
				q->reply_fd = f->fds[0];
				f->fds[0] = -1;
			}
			q->reply_fds[0] = q->reply_fd;
			for (unsigned i = 1; i < f->nfds && i < 4; i++) {
				q->reply_fds[i] = f->fds[i];
				f->fds[i] = -1;
			}
			q->reply_nfds = f->nfds < 4 ? f->nfds : 4;
			return;
		}
		break;
	}
	devq__daemon_message__free_unpacked(m, NULL);
}

/* Reads and sorts what arrives within timeout_ms (0: only what is there). */
static int pump(devq *q, int timeout_ms)
{
	if (crossed_fork(q))
		return -ECHILD;
	if (q->broken)
		return fail(q, -ECONNRESET, "connection to devqd lost");
	/* Whatever waits for an answer must first send what it waits on. */
	int fr = devq_flush(q);
	if (fr < 0)
		return fr;
	struct pollfd p = { .fd = q->fd, .events = POLLIN };
	int r;
	/* Blocked on the socket: the daemon's loop should not sit on
	 * completion records (see devq_cpage_client_reading). */
	if (q->cp && timeout_ms != 0)
		devq_cpc_set_reading(q->cp, true);
	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (q->cp && timeout_ms != 0)
		devq_cpc_set_reading(q->cp, false);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -ETIMEDOUT;
	ssize_t n = devq_rx_recv(&q->rx, q->fd, MSG_DONTWAIT);
	uint64_t t = now_ns();
	q->io.recv_calls++;
	if (n == -EAGAIN)
		return 0;
	if (n > 0)
		q->io.bytes_received += (uint64_t)n;
	if (n <= 0) {
		q->broken = true;
		return fail(q, n == 0 ? -ECONNRESET : (int)n, "connection to devqd %s",
			    n == 0 ? "closed by the daemon" : "failed");
	}
	/* Every record in the ring was written before anything the daemon
	 * sent after it (a BufferReleased it made possible, say): taken
	 * first, the records keep the socket's order rules. */
	take_ring(q);
	struct devq_frame f;
	while ((r = devq_rx_next(&q->rx, &f)) == 1) {
		int c = f.type == DEVQ_FRAME_DAEMON ? take_completions(q, &f, t) : 1;
		if (c == 0) {
			devq_frame_close_fds(&f); /* none belong to Completions */
			continue;
		}
		Devq__DaemonMessage *m = NULL;
		if (c > 0 && f.type == DEVQ_FRAME_DAEMON)
			m = devq__daemon_message__unpack(NULL, f.len, f.payload);
		if (!m) {
			devq_frame_close_fds(&f);
			q->broken = true;
			return fail(q, -EPROTO, "malformed message from devqd");
		}
		on_message(q, m, &f, t);
		devq_frame_close_fds(&f);
	}
	if (r < 0) {
		q->broken = true;
		return fail(q, r, "framing error from devqd");
	}
	return 0;
}

static int send_msg(devq *q, Devq__ClientMessage *m, const int *fds, unsigned nfds)
{
	if (q->broken || crossed_fork(q)) {
		for (unsigned i = 0; i < nfds; i++)
			close(fds[i]);
		return q->broken ? fail(q, -ECONNRESET, "connection to devqd lost") : -ECHILD;
	}
	int r = devq_tx_push(&q->tx, DEVQ_FRAME_CLIENT, &m->base, fds, nfds);
	if (r < 0)
		return fail(q, r, "cannot queue message: %s", strerror(-r));
	/* Coalescing holds only submits back: they need no reply, and every
	 * path that waits flushes first (pump). */
	if (q->coalesce && m->body_case == DEVQ__CLIENT_MESSAGE__BODY_SUBMIT &&
	    q->tx.bytes < q->coalesce)
		return 0;
	return devq_flush(q);
}

int devq_flush(devq *q)
{
	if (crossed_fork(q))
		return -ECHILD;
	if (!q->tx.head)
		return 0;
	if (q->broken)
		return fail(q, -ECONNRESET, "connection to devqd lost");
	size_t before = q->tx.bytes;
	/* Blocking socket: flush returns when all of it is in the kernel. */
	int r = devq_tx_flush(&q->tx, q->fd);
	q->io.flushes++;
	q->io.bytes_sent += before - q->tx.bytes;
	if (r < 0) {
		q->broken = true;
		return fail(q, r, "send to devqd: %s", strerror(-r));
	}
	return 0;
}

int devq_set_coalescing(devq *q, size_t max_bytes)
{
	q->coalesce = max_bytes;
	return max_bytes ? 0 : devq_flush(q);
}

void devq_get_io_stats(const devq *q, struct devq_io_stats *out)
{
	*out = q->io;
	if (q->cp) {
		out->page_hits = q->cp->hits;
		out->futex_waits = q->cp->futex_waits;
	}
}

/* Sends m and waits for the reply of kind c (or an Error for request). */
static int request(devq *q, Devq__ClientMessage *m, const int *fds, unsigned nfds,
		   const char *req, Devq__DaemonMessage__BodyCase c, Devq__DaemonMessage **out)
{
	int r = send_msg(q, m, fds, nfds);
	/* A daemon that refuses the connection says why and closes at once,
	 * possibly before our Hello arrived: its Error may still be read. */
	bool refused = r < 0 && q->broken && !strcmp(req, "hello");
	if (r < 0 && !refused)
		return r;
	if (refused) {
		/* The Hello can never go out; pump must not retry it. */
		devq_tx_fini(&q->tx);
		devq_tx_init(&q->tx);
		q->broken = false;
	}
	q->want_request = req;
	q->want_case = c;
	q->reply = NULL;
	q->reply_fd = -1;
	q->reply_nfds = 0;
	while (!q->reply) {
		r = pump(q, -1);
		if (r < 0 && r != -ETIMEDOUT)
			break;
	}
	q->want_request = NULL;
	if (!q->reply)
		return r;
	Devq__DaemonMessage *rep = q->reply;
	q->reply = NULL;
	if (rep->body_case == DEVQ__DAEMON_MESSAGE__BODY_ERROR) {
		r = fail(q, code_errno(rep->error->code), "%s: %s",
			 devq_code_name(rep->error->code), rep->error->message);
		devq__daemon_message__free_unpacked(rep, NULL);
		for (unsigned i = 0; i < q->reply_nfds; i++)
			if (q->reply_fds[i] >= 0)
				close(q->reply_fds[i]);
		return r;
	}
	*out = rep;
	return 0;
}

static int hello(devq *q);

int devq_connect_versions(const char *path, const char *name, uint32_t min, uint32_t max,
			  devq **out)
{
	*out = NULL;
	if (!path || !*path)
		path = getenv("DEVQ_SOCKET");
	if (!path || !*path)
		path = DEVQ_DEFAULT_SOCKET;
	devq *q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->fd = -1;
	q->next_buf_id = 1;
	q->cmpl.elem = sizeof(struct devq_completion);
	q->errs.elem = sizeof(struct devq_error);
	devq_rx_init(&q->rx, 64u << 20);
	devq_tx_init(&q->tx);
	*out = q;
	if (strlen(path) >= sizeof(q->path))
		return fail(q, -ENAMETOOLONG, "socket path too long: %s", path);
	strcpy(q->path, path);
	snprintf(q->name, sizeof(q->name), "%s", name ? name : "libdevq");
	q->min_version = min;
	q->max_version = max;
	pthread_once(&fork_once, watch_forks);
	q->pid = getpid();
	q->forks = fork_count;
	return hello(q);
}

static int open_socket(devq *q)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	strcpy(sa.sun_path, q->path);
	q->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (q->fd < 0)
		return fail(q, -errno, "socket: %s", strerror(errno));
	if (connect(q->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;
		close(q->fd);
		q->fd = -1;
		/* The packaged socket is 0660 root:devq: say what grants access.
		 * devctl tells this failure from the daemon's refusal by the
		 * message's start (client/devctl/util.c). */
		return fail(q, -e, "cannot connect to devqd at %s: %s%s", q->path, strerror(e),
			    e == EACCES ? " (access is for group devq: ask an admin for "
					  "'usermod -aG devq USER', then log in again; see devqd(8))"
					: "");
	}
	return 0;
}

static int hello(devq *q)
{
	int r = open_socket(q);
	if (r < 0)
		return r;
	Devq__Hello h = DEVQ__HELLO__INIT;
	h.min_version = q->min_version;
	h.max_version = q->max_version;
	h.client_name = q->name;
	/* DEVQ_NO_CPAGE=1: completions only through the socket (comparisons,
	 * debugging). */
	const char *nocp = getenv("DEVQ_NO_CPAGE");
	h.completion_page = !(nocp && *nocp && strcmp(nocp, "0"));
	/* DEVQ_NO_SQ=1: every Submit on the socket (comparisons, debugging). */
	const char *nosq = getenv("DEVQ_NO_SQ");
	h.submit_ring = h.completion_page && !(nosq && *nosq && strcmp(nosq, "0"));
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
	m.hello = &h;
	Devq__DaemonMessage *rep;
	q->conn_rx_base = q->io.bytes_received;
	q->conn_tx_base = q->io.bytes_sent;
	r = request(q, &m, NULL, 0, "hello", DEVQ__DAEMON_MESSAGE__BODY_HELLO_REPLY, &rep);
	if (r < 0)
		return r;
	const Devq__HelloReply *hr = rep->hello_reply;
	const Devq__CompletionPage *pg = hr->completion_page;
	if (pg && q->reply_nfds == 3 + (pg->sq_entries != 0)) {
		/* Without the page everything still works through the socket. */
		if (devq_cpc_open(pg->layout, pg->size, pg->slots, pg->hint_size, pg->sq_entries,
				  q->reply_fds, q->reply_nfds, &q->cp) < 0)
			q->cp = NULL;
		if (q->cp)
			devq_cpc_peer(q->cp, q->fd);
		/* Completion records through the ring unless DEVQ_NO_CRING=1
		 * (comparisons, debugging): armed before any op is sent. */
		const char *nocr = getenv("DEVQ_NO_CRING");
		if (q->cp && !(nocr && *nocr && strcmp(nocr, "0")))
			devq_cpc_ring_arm(q->cp);
	} else {
		for (unsigned i = 0; i < q->reply_nfds; i++)
			if (q->reply_fds[i] >= 0)
				close(q->reply_fds[i]);
	}
	q->reply_nfds = 0;
	q->info.version = hr->version;
	snprintf(q->info.daemon_version, sizeof(q->info.daemon_version), "%s", hr->daemon_version);
	snprintf(q->info.backend, sizeof(q->info.backend), "%s", hr->backend);
	snprintf(q->info.device, sizeof(q->info.device), "%s", hr->device);
	q->info.streams = hr->streams;
	q->info.max_frame = hr->max_frame;
	q->info.max_fds = hr->max_fds;
	q->info.max_op_ns = hr->max_op_ns;
	q->info.session = hr->session;
	q->info.daemon_min_version = hr->min_version;
	q->info.daemon_max_version = hr->max_version;
	devq__daemon_message__free_unpacked(rep, NULL);
	return 0;
}

int devq_connect(const char *path, const char *name, devq **out)
{
	return devq_connect_versions(path, name, DEVQ_PROTOCOL_MIN, DEVQ_PROTOCOL_MAX, out);
}

static void buffer_free(struct buffer *x)
{
	if (x->pub.map)
		munmap(x->pub.map, x->pub.size);
	if (x->fd >= 0)
		close(x->fd);
	free(x);
}

void devq_disconnect(devq *q)
{
	if (!q)
		return;
	/* In a child of fork() the socket's queued bytes are the parent's to
	 * send: crossed_fork refuses the flush, and the rest only frees this
	 * process's copies (close, munmap and free touch nothing shared). */
	if (q->fd >= 0 && !q->broken)
		devq_flush(q); /* coalesced submits were promised to the daemon */
	if (q->fd >= 0)
		close(q->fd);
	devq_rx_fini(&q->rx);
	devq_tx_fini(&q->tx);
	while (q->bufs) {
		struct buffer *x = q->bufs;
		q->bufs = x->next;
		buffer_free(x);
	}
	free(q->cmpl.items);
	free(q->errs.items);
	free(q->queues);
	free(q->execs);
	free(q->exec_extra);
	devq_cpc_free(q->cp);
	free(q);
}

const struct devq_info *devq_get_info(const devq *q)
{
	return &q->info;
}

const char *devq_last_error(const devq *q)
{
	return q->err;
}

int devq_fd(const devq *q)
{
	/* In a child of fork() the socket is the parent's session's, not
	 * this process's to watch, and disarming the ring would turn the
	 * parent's off. */
	if (q->forks != fork_count)
		return -ECHILD;
	/* Whoever watches the socket expects it to become readable when
	 * completions wait: records go there from now on, not to the ring. */
	if (q->cp)
		devq_cpc_ring_disarm(q->cp);
	return q->fd;
}

/* ---- buffers --------------------------------------------------------- */

/* The handle's own record, or NULL for one libdevq did not make: a caller
 * may build a struct devq_buffer to name an id (only the id is sent), so b
 * is never assumed to be the start of a struct buffer. */
static struct buffer *buffer_find(devq *q, const struct devq_buffer *b)
{
	for (struct buffer *x = q->bufs; x; x = x->next)
		if (&x->pub == b)
			return x;
	return NULL;
}

static int buffer_new(devq *q, uint64_t size, enum devq_buffer_kind kind, struct buffer **out)
{
	struct buffer *x = calloc(1, sizeof(*x));
	if (!x)
		return fail(q, -ENOMEM, "out of memory");
	x->pub.id = q->next_buf_id++;
	x->pub.size = size;
	x->pub.kind = kind;
	x->fd = -1;
	*out = x;
	return 0;
}

int devq_buffer_create(devq *q, uint64_t size, enum devq_buffer_kind kind,
		       struct devq_buffer **out)
{
	struct buffer *x = NULL;
	int r = buffer_new(q, size, kind, &x);
	if (r < 0)
		return r;
	struct devq_buffer *b = &x->pub;
	Devq__CreateBuffer c = DEVQ__CREATE_BUFFER__INIT;
	c.id = b->id;
	c.size = size;
	c.kind = kind == DEVQ_BUFFER_DEVICE ? DEVQ__BUFFER_KIND__DEVICE : DEVQ__BUFFER_KIND__SHARED;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_CREATE_BUFFER;
	m.create_buffer = &c;
	Devq__DaemonMessage *rep;
	r = request(q, &m, NULL, 0, "create_buffer", DEVQ__DAEMON_MESSAGE__BODY_BUFFER_READY, &rep);
	if (r < 0) {
		free(x);
		return r;
	}
	int fd = q->reply_fd;
	devq__daemon_message__free_unpacked(rep, NULL);
	if (kind == DEVQ_BUFFER_SHARED) {
		if (fd < 0) {
			free(x);
			return fail(q, -EPROTO, "devqd sent no memfd for shared buffer");
		}
		b->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		x->fd = fd;
		if (b->map == MAP_FAILED) {
			int e = errno;
			b->map = NULL;
			x->next = q->bufs; /* still the daemon's: release it properly */
			q->bufs = x;
			devq_buffer_release(q, b);
			return fail(q, -e, "mmap of buffer %llu: %s", (unsigned long long)b->id,
				    strerror(e));
		}
	} else if (fd >= 0) {
		close(fd);
	}
	x->next = q->bufs;
	q->bufs = x;
	*out = b;
	return 0;
}

int devq_buffer_import(devq *q, int memfd, uint64_t size, unsigned flags,
		       struct devq_buffer **out)
{
	struct buffer *x = NULL;
	int r = buffer_new(q, size, DEVQ_BUFFER_SHARED, &x);
	if (r < 0)
		return r;
	struct devq_buffer *b = &x->pub;
	b->read_only = flags & DEVQ_IMPORT_READ_ONLY;
	int fd = fcntl(memfd, F_DUPFD_CLOEXEC, 0); /* the frame owns and closes its copy */
	if (fd < 0) {
		free(x);
		return fail(q, -errno, "dup: %s", strerror(errno));
	}
	Devq__ImportBuffer im = DEVQ__IMPORT_BUFFER__INIT;
	im.id = b->id;
	im.size = size;
	im.read_only = b->read_only;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_IMPORT_BUFFER;
	m.import_buffer = &im;
	Devq__DaemonMessage *rep;
	r = request(q, &m, &fd, 1, "import_buffer", DEVQ__DAEMON_MESSAGE__BODY_BUFFER_READY, &rep);
	if (r < 0) {
		free(x);
		return r;
	}
	devq__daemon_message__free_unpacked(rep, NULL);
	void *p = mmap(NULL, size, b->read_only ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED,
		       memfd, 0);
	b->map = p == MAP_FAILED ? NULL : p;
	x->fd = fcntl(memfd, F_DUPFD_CLOEXEC, 0); /* -1 only costs devq_reconnect */
	x->next = q->bufs;
	q->bufs = x;
	*out = b;
	return 0;
}

int devq_buffer_release(devq *q, struct devq_buffer *b)
{
	Devq__ReleaseBuffer rel = DEVQ__RELEASE_BUFFER__INIT;
	rel.id = b->id;
	struct buffer *x = buffer_find(q, b);
	if (x)
		x->releasing = true;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_RELEASE_BUFFER;
	m.release_buffer = &rel;
	return send_msg(q, &m, NULL, 0);
}

static int remaining_ms(uint64_t deadline)
{
	if (deadline == UINT64_MAX)
		return -1;
	uint64_t now = now_ns();
	return now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
}

static uint64_t deadline_of(int timeout_ms)
{
	return timeout_ms < 0 ? UINT64_MAX : now_ns() + (uint64_t)timeout_ms * 1000000;
}

int devq_buffer_wait_released(devq *q, struct devq_buffer *b, int timeout_ms)
{
	uint64_t deadline = deadline_of(timeout_ms);
	while (!b->released) {
		int r = pump(q, remaining_ms(deadline));
		if (r < 0)
			return r == -ETIMEDOUT
				       ? fail(q, r, "buffer %llu not released in time",
					      (unsigned long long)b->id)
				       : r;
	}
	for (struct buffer **pp = &q->bufs; *pp; pp = &(*pp)->next) {
		if (&(*pp)->pub == b) {
			struct buffer *x = *pp;
			*pp = x->next;
			buffer_free(x);
			break;
		}
	}
	return 0;
}

/* ---- executables and queues ------------------------------------------ */

const struct devq_exec_info *devq_exec_info(devq *q, const struct devq_exec *e)
{
	if (!q || !e || !q->execs || e < q->execs || e >= q->execs + q->nexecs)
		return NULL;
	return &q->exec_extra[e - q->execs].pub;
}

const char *devq_exec_cost(devq *q, const struct devq_exec *e, uint64_t *rate_per_s, int *pinned,
			   unsigned *samples)
{
	if (!q || !e || !q->execs || e < q->execs || e >= q->execs + q->nexecs)
		return NULL;
	const struct exec_extra *x = &q->exec_extra[e - q->execs];
	if (rate_per_s)
		*rate_per_s = x->rate;
	if (pinned)
		*pinned = x->pinned;
	if (samples)
		*samples = x->samples;
	return x->cost;
}

int devq_exec_list(devq *q, const struct devq_exec **list, size_t *n)
{
	if (!q->execs) {
		Devq__ListExecutables le = DEVQ__LIST_EXECUTABLES__INIT;
		Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
		m.body_case = DEVQ__CLIENT_MESSAGE__BODY_LIST_EXECUTABLES;
		m.list_executables = &le;
		Devq__DaemonMessage *rep;
		int r = request(q, &m, NULL, 0, "list_executables",
				DEVQ__DAEMON_MESSAGE__BODY_EXECUTABLES, &rep);
		if (r < 0)
			return r;
		size_t cnt = rep->executables->n_items;
		q->execs = calloc(cnt ? cnt : 1, sizeof(*q->execs));
		q->exec_extra = calloc(cnt ? cnt : 1, sizeof(*q->exec_extra));
		if (!q->execs || !q->exec_extra) {
			free(q->execs);
			free(q->exec_extra);
			q->execs = NULL;
			q->exec_extra = NULL;
			devq__daemon_message__free_unpacked(rep, NULL);
			return fail(q, -ENOMEM, "out of memory");
		}
		for (size_t i = 0; i < cnt; i++) {
			const Devq__Executable *e = rep->executables->items[i];
			q->execs[i].id = e->id;
			snprintf(q->execs[i].name, sizeof(q->execs[i].name), "%s", e->name);
			snprintf(q->execs[i].signature, sizeof(q->execs[i].signature), "%s",
				 e->signature);
			struct exec_extra *x = &q->exec_extra[i];
			snprintf(x->source, sizeof(x->source), "%s", e->source ? e->source : "");
			snprintf(x->backends, sizeof(x->backends), "%s", e->backends ? e->backends : "");
			snprintf(x->description, sizeof(x->description), "%s",
				 e->description ? e->description : "");
			x->pub.source = x->source;
			x->pub.backends = x->backends;
			x->pub.description = x->description;
			x->pub.unavailable = e->unavailable ? 1 : 0;
			snprintf(x->cost, sizeof(x->cost), "%s", e->cost ? e->cost : "");
			x->rate = e->rate;
			x->pinned = e->rate_pinned ? 1 : 0;
			x->samples = e->rate_samples;
		}
		q->nexecs = cnt;
		devq__daemon_message__free_unpacked(rep, NULL);
	}
	*list = q->execs;
	*n = q->nexecs;
	return 0;
}

int devq_exec_lookup(devq *q, const char *name, const struct devq_exec **out)
{
	const struct devq_exec *l;
	size_t n;
	int r = devq_exec_list(q, &l, &n);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		if (!strcmp(l[i].name, name)) {
			*out = &l[i];
			return 0;
		}
	}
	return fail(q, -ENOENT, "no executable named '%s' (devctl list shows them)", name);
}

int devq_queue_open(devq *q, uint32_t id)
{
	return devq_queue_open_priority(q, id, 0);
}

/* Sends OpenQueue{id, priority}: 0 or the send's error. */
static int send_open_queue(devq *q, uint32_t id, int priority)
{
	Devq__OpenQueue o = DEVQ__OPEN_QUEUE__INIT;
	o.id = id;
	o.priority = priority;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_OPEN_QUEUE;
	m.open_queue = &o;
	return send_msg(q, &m, NULL, 0);
}

int devq_queue_open_priority(devq *q, uint32_t id, int priority)
{
	struct cq *old = find_queue(q, id);
	if (old && !old->refused)
		return fail(q, -EEXIST, "queue %u is already open", id);
	if (old) {
		/* Trying again after a refusal: points restart at 1, as after
		 * devq_reconnect. */
		int r = send_open_queue(q, id, priority);
		if (r < 0)
			return r;
		old->priority = priority;
		old->refused = false;
		old->submitted = old->completed = 0;
		old->slot = NULL;
		return 0;
	}
	struct cq *n = realloc(q->queues, (q->nqueues + 1) * sizeof(*n));
	if (!n)
		return fail(q, -ENOMEM, "out of memory");
	q->queues = n;
	int r = send_open_queue(q, id, priority);
	if (r < 0)
		return r;
	q->queues[q->nqueues++] = (struct cq){ .id = id, .priority = priority };
	return 0;
}

int devq_queue_reset(devq *q, uint32_t id)
{
	if (!find_queue(q, id))
		return fail(q, -ENOENT, "queue %u is not open", id);
	Devq__ResetQueue rq = DEVQ__RESET_QUEUE__INIT;
	rq.id = id;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_RESET_QUEUE;
	m.reset_queue = &rq;
	return send_msg(q, &m, NULL, 0);
}

/* ---- submit ---------------------------------------------------------- */

/* A client that only waits through the page never reads the socket: take
 * the completion records here once enough wait, so neither our socket nor
 * the daemon's outbound queue fills.  The page says how many bytes the
 * daemon wrote, so this costs no syscall when nothing waits. */
static void drain_records(devq *q)
{
	if (!q->cp)
		return;
	/* Records pile up in the ring of a client that only waits on points:
	 * copied out before it fills, they never need the socket. */
	if (devq_cpc_ring_ready(q->cp) >= q->cp->ring_n / 2)
		take_ring(q);
	for (int i = 0; i < 64; i++) {
		uint64_t got = q->io.bytes_received - q->conn_rx_base, tx = devq_cpc_tx_bytes(q->cp);
		if (tx <= got || tx - got < 16384 || pump(q, 0) < 0)
			break;
	}
}

static int submit(devq *q, const struct devq_op *ops, size_t n, uint64_t *points,
		  bool replayable, const struct devq_op_ext *ext);

int devq_submit(devq *q, const struct devq_op *ops, size_t n, uint64_t *points)
{
	return submit(q, ops, n, points, false, NULL);
}

int devq_submit_replayable(devq *q, const struct devq_op *ops, size_t n, uint64_t *points)
{
	return submit(q, ops, n, points, true, NULL);
}

int devq_submit_ex(devq *q, const struct devq_op *ops, size_t n, uint64_t *points,
		   const struct devq_op_ext *ext)
{
	return submit(q, ops, n, points, false, ext);
}

_Static_assert(sizeof(struct devq_op_ext) == DEVQ_OP_EXT_SIZE_V1,
	       "DEVQ_OP_EXT_SIZE_V1 is the first version's size, for good");

/* The options of n ops, entries of ext->size bytes: 0, or -EINVAL with the
 * reason.  A caller built against a later devq.h may pass a larger size;
 * what this library does not know must then be unset (zero), as an option
 * it silently dropped would be a promise broken. */
static int check_ext(devq *q, const struct devq_op_ext *ext, size_t n)
{
	size_t sz = ext->size;
	if (sz < DEVQ_OP_EXT_SIZE_V1 || sz % 8)
		return fail(q, -EINVAL,
			    "submit: devq_op_ext.size %zu is not a struct devq_op_ext's size "
			    "(at least %d, a multiple of 8)",
			    sz, DEVQ_OP_EXT_SIZE_V1);
	for (size_t i = 0; i < n; i++) {
		const unsigned char *e = (const unsigned char *)ext + i * sz;
		struct devq_op_ext x;
		memcpy(&x, e, sizeof(x));
		if (x.size != sz)
			return fail(q, -EINVAL,
				    "submit: op %zu: devq_op_ext.size %u differs from the first "
				    "entry's %zu",
				    i, x.size, sz);
		if (x.reserved)
			return fail(q, -EINVAL, "submit: op %zu: devq_op_ext.reserved is not 0", i);
		for (size_t k = sizeof(x); k < sz; k++)
			if (e[k])
				return fail(q, -EINVAL,
					    "submit: op %zu: devq_op_ext has an option this "
					    "libdevq (%s) does not know (byte %zu of %zu is set)",
					    i, DEVQ_VERSION, k, sz);
	}
	return 0;
}

/* Encodes the batch by hand (client/submit_enc.c) straight into the send
 * queue, which keeps its buffer from one frame to the next: no allocation
 * per call. */
static int submit(devq *q, const struct devq_op *ops, size_t n, uint64_t *points,
		  bool replayable, const struct devq_op_ext *ext)
{
	if (n == 0)
		return fail(q, -EINVAL, "submit: no ops");
	if (ext) {
		int er = check_ext(q, ext, n);
		if (er < 0)
			return er;
	}
	/* Consecutive ops mostly name one queue: look it up once. */
	struct cq *cq = NULL;
	for (size_t i = 0; i < n; i++) {
		if ((!cq || cq->id != ops[i].queue) && !(cq = find_queue(q, ops[i].queue)))
			return fail(q, -ENOENT,
				    "submit: queue %u is not open (no queue is open by default: "
				    "devq_queue_open opens it)",
				    ops[i].queue);
		if (ops[i].kind == DEVQ_OP_KERNEL && !ops[i].exec)
			return fail(q, -EINVAL, "submit: op %zu has no executable", i);
	}
	if (crossed_fork(q))
		return -ECHILD;
	if (q->broken)
		return fail(q, -ECONNRESET, "connection to devqd lost");
	struct devq_submit_enc_batch b = { .ops = ops, .n = n, .submit_ns = now_ns(),
					   .replayable = replayable, .ext = ext,
					   .ext_size = ext ? ext->size : 0 };
	size_t plen = devq_submit_enc_size(&b);
	uint8_t *p;
	int r;
	/* Through the submit ring when everything queued for the socket is
	 * sent (the entry's offset is then one the daemon reaches) and the
	 * batch fits an entry: the daemon's loop wakes from a byte in a pipe,
	 * which costs an idle daemon less than a socket's data (measured:
	 * bench/RESULTS.md, "The submit ring").  Not while coalescing:
	 * batches of frames on the socket cost less. */
	if (q->cp && !q->coalesce && !q->tx.head && (p = devq_cpc_sq_reserve(q->cp, plen))) {
		devq_submit_enc(p, plen, &b);
		r = devq_cpc_sq_commit(q->cp, (uint32_t)plen, q->io.bytes_sent - q->conn_tx_base);
		if (r < 0) {
			q->broken = true;
			return fail(q, r, "submit ring doorbell: %s", strerror(-r));
		}
	} else if ((r = devq_tx_append(&q->tx, DEVQ_FRAME_CLIENT, plen, &p)) < 0) {
		return fail(q, r, "cannot queue message: %s", strerror(-r));
	} else {
		devq_submit_enc(p, plen, &b);
	}
	/* Coalescing holds only submits back: they need no reply, and every
	 * path that waits flushes first (pump). */
	if (q->tx.head && (!q->coalesce || q->tx.bytes >= q->coalesce)) {
		r = devq_flush(q);
		if (r < 0)
			return r;
	}
	/* The daemon counts the same way: no reply needed. */
	cq = NULL;
	for (size_t i = 0; i < n; i++) {
		if (!cq || cq->id != ops[i].queue)
			cq = find_queue(q, ops[i].queue);
		uint64_t pt = ++cq->submitted;
		if (points)
			points[i] = pt;
		if (cq->refused) {
			/* Sent anyway, to keep the daemon's view of the batch
			 * whole; its not_found answer is an echo. */
			cq->echoes++;
			fail_locally(q, cq, pt);
		}
	}
	drain_records(q);
	return 0;
}

/* ---- completions ----------------------------------------------------- */

void devq_timing_phases(const struct devq_timing *t, struct devq_phases *p)
{
	p->submit = t->handoff - t->client_submit;
	p->queued = t->device_start - t->handoff;
	p->device = t->device_end - t->device_start;
	p->sync = t->client_received - t->device_end;
	p->total = t->client_received - t->client_submit;
}

/* Waits until something may have arrived: on the socket, or (with an armed
 * ring) in the ring, whose records never come on the socket while it has
 * room.  0: look again; -ETIMEDOUT at the deadline; another error. */
static int wait_progress(devq *q, uint64_t deadline)
{
	struct devq_cpc *c = q->cp;
	if (!c || !c->ring_armed)
		return pump(q, remaining_ms(deadline));
	uint32_t seen = devq_cpc_seq(c);
	if (devq_cpc_ring_ready(c))
		return 0;
	int r = pump(q, 0); /* flushes what we wait on, reads what is there */
	if (r != -ETIMEDOUT)
		return r;
	if (devq_cpc_ring_ready(c))
		return 0;
	uint64_t now = now_ns();
	if (now >= deadline)
		return -ETIMEDOUT;
	/* On the page, for anything: the daemon wakes it for a publication
	 * and for whatever it writes on the socket (records of an overflow,
	 * errors, releases: devq_cpage_note_tx), and when it closes the
	 * session.  The slice bounds only how long a daemon that died goes
	 * unnoticed: short slices would wake a thread waiting on a long op
	 * over and over, and its wake-ups take CPU from the ops it waits for
	 * (measured: bench/RESULTS.md, "Clients sleep through long ops"). */
	uint64_t slice = deadline - now > WAIT_SLICE_NS ? now + WAIT_SLICE_NS : deadline;
	r = devq_cpc_wait_any(c, seen, slice);
	return r == -ETIMEDOUT && slice < deadline ? 0 : r;
}

int devq_next_completion(devq *q, struct devq_completion *out, int timeout_ms)
{
	if (crossed_fork(q))
		return -ECHILD;
	uint64_t deadline = deadline_of(timeout_ms);
	while (!q->cmpl.count && !take_ring(q)) {
		int r = wait_progress(q, deadline);
		if (r < 0)
			return r;
	}
	ring_pop(&q->cmpl, out);
	return 0;
}

int devq_wait(devq *q, uint32_t queue, uint64_t point, int timeout_ms,
	      struct devq_completion *out)
{
	struct cq *cq = find_queue(q, queue);
	if (!cq)
		return fail(q, -ENOENT, "wait: queue %u is not open", queue);
	if (point > cq->submitted)
		return fail(q, -EINVAL, "wait: queue %u has only %llu ops submitted", queue,
			    (unsigned long long)cq->submitted);
	uint64_t deadline = deadline_of(timeout_ms);
	bool ring = q->cp && q->cp->ring_armed;
	if ((!out || ring) && q->cp && cq->completed < point) {
		/* The page answers without a syscall when the point is done,
		 * and sleeps on its futex otherwise.  What it waits on must have
		 * been sent, and the daemon must have opened the queue's slot. */
		int r = devq_flush(q);
		if (r < 0)
			return r;
		if (!cq->slot)
			cq->slot = devq_cpc_slot(q->cp, queue);
		if (cq->slot) {
			if (devq_cpc_completed(cq->slot) >= point) {
				q->cp->hits++;
			} else {
				/* Sleep in slices: records keep arriving on the
				 * socket meanwhile, and a client that never reads
				 * them would eventually be cut off as one that does
				 * not read. */
				for (;;) {
					drain_records(q);
					uint64_t slice = now_ns() + WAIT_SLICE_NS;
					r = devq_cpc_wait(q->cp, cq->slot, point,
							  slice < deadline ? slice : deadline);
					if (r == -EAGAIN) { /* the ring is half full */
						take_ring(q);
						continue;
					}
					if (r != -ETIMEDOUT || slice >= deadline)
						break;
				}
				if (r == -ETIMEDOUT)
					return fail(q, r, "queue %u point %llu not complete in time",
						    queue, (unsigned long long)point);
				if (r < 0)
					return r;
			}
			if (!out)
				return 0;
			/* The record went into the ring before the point was
			 * published (or, in an overflow, is on its way on the
			 * socket). */
			take_ring(q);
		}
	}
	while (cq->completed < point && !(take_ring(q) && cq->completed >= point)) {
		int r = wait_progress(q, deadline);
		if (r == -ETIMEDOUT)
			return fail(q, r, "queue %u point %llu not complete in time", queue,
				    (unsigned long long)point);
		if (r < 0)
			return r;
	}
	if (!out)
		return 0;
	for (size_t i = 0; i < q->cmpl.count; i++) {
		const struct devq_completion *c = ring_at(&q->cmpl, i);
		if (c->queue == queue && c->point == point) {
			*out = *c;
			ring_remove(&q->cmpl, i);
			return 0;
		}
	}
	return fail(q, -ENOENT, "completion of queue %u point %llu was already taken", queue,
		    (unsigned long long)point);
}

uint64_t devq_completed(const devq *q, uint32_t queue)
{
	struct cq *cq = find_queue(q, queue);
	if (!cq)
		return 0;
	if (q->cp && !cq->slot)
		cq->slot = devq_cpc_slot(q->cp, queue);
	uint64_t v = cq->slot ? devq_cpc_completed(cq->slot) : 0;
	return v > cq->completed ? v : cq->completed;
}

int devq_completion_fd(devq *q)
{
	if (crossed_fork(q))
		return -ECHILD;
	if (!q->cp)
		return fail(q, -EOPNOTSUPP, "this connection has no completion page");
	atomic_store_explicit(&q->cp->hint->evfd_armed, 1, memory_order_seq_cst);
	return q->cp->efd;
}

bool devq_has_completion_page(const devq *q)
{
	return q->cp != NULL;
}

int devq_point_state(devq *q, uint32_t queue, uint64_t point)
{
	struct cq *cq = find_queue(q, queue);
	if (!cq)
		return fail(q, -ENOENT, "queue %u is not open", queue);
	if (q->cp && !cq->slot)
		cq->slot = devq_cpc_slot(q->cp, queue);
	if (cq->slot && devq_cpc_completed(cq->slot) >= point) {
		/* failed is stored before completed: loaded after it, it covers
		 * every point up to the completed value just read. */
		uint64_t f = atomic_load_explicit(&cq->slot->failed, memory_order_acquire);
		return point > f ? DEVQ_POINT_OK : DEVQ_POINT_SEE_RECORD;
	}
	return cq->completed >= point ? DEVQ_POINT_SEE_RECORD : DEVQ_POINT_PENDING;
}

int devq_poll(devq *q)
{
	take_ring(q); /* records in the completion ring have arrived too */
	int r = pump(q, 0);
	return r == -ETIMEDOUT ? 0 : r;
}

int devq_next_error(devq *q, struct devq_error *out)
{
	if (!q->errs.count)
		return 0;
	ring_pop(&q->errs, out);
	return 1;
}

/* ---- status ---------------------------------------------------------- */

/* The metrics part of Status (see devq.h); -ENOMEM leaves s freeable. */
static int status_metrics(struct devq_status *s, const Devq__Status *st)
{
	for (size_t i = 0; i < st->n_sessions && i < s->nsessions; i++) {
		const Devq__SessionStatus *x = st->sessions[i];
		struct devq_session_info *y = &s->sessions[i];
		if (!x->n_queue_depths)
			continue;
		y->queue_depths = calloc(x->n_queue_depths, sizeof(*y->queue_depths));
		if (!y->queue_depths)
			return -ENOMEM;
		y->nqueues_depth = x->n_queue_depths;
		for (size_t k = 0; k < x->n_queue_depths; k++) {
			y->queue_depths[k].queue = x->queue_depths[k]->queue;
			y->queue_depths[k].stream = x->queue_depths[k]->stream;
			y->queue_depths[k].depth = x->queue_depths[k]->depth;
		}
	}
	for (size_t i = 0; i < st->n_op_errors; i++) {
		unsigned c = (unsigned)st->op_errors[i]->code;
		if (c < sizeof(s->op_errors) / sizeof(s->op_errors[0]))
			s->op_errors[c] += st->op_errors[i]->count;
	}
	s->device_busy_ns = st->device_busy_ns;
	if (st->n_users) {
		s->users = calloc(st->n_users, sizeof(*s->users));
		if (!s->users)
			return -ENOMEM;
		s->nusers = st->n_users;
		for (size_t i = 0; i < st->n_users; i++) {
			s->users[i].uid = st->users[i]->uid;
			s->users[i].ops_completed = st->users[i]->ops_completed;
			s->users[i].ops_failed = st->users[i]->ops_failed;
			s->users[i].device_busy_ns = st->users[i]->device_busy_ns;
		}
	}
	if (st->n_tenants) {
		s->tenants = calloc(st->n_tenants, sizeof(*s->tenants));
		s->tenant_extra = calloc(st->n_tenants, sizeof(*s->tenant_extra));
		if (!s->tenants || !s->tenant_extra)
			return -ENOMEM;
		s->ntenants = st->n_tenants;
		for (size_t i = 0; i < st->n_tenants; i++) {
			const Devq__TenantStatus *x = st->tenants[i];
			struct devq_tenant_info *y = &s->tenants[i];
			snprintf(y->name, sizeof(y->name), "%s", x->name ? x->name : "");
			y->uid = x->uid;
			y->weight = x->weight;
			y->sessions = x->sessions;
			y->ops_waiting = x->ops_waiting;
			y->queued_ns = x->queued_ns;
			y->ops_inside = x->ops_inside;
			y->ops_done = x->ops_done;
			y->device_ns = x->device_ns;
			y->wait_ns = x->wait_ns;
			y->wait_max_ns = x->wait_max_ns;
			y->waits = x->waits;
			struct devq_tenant_extra *e = &s->tenant_extra[i];
			e->deadline_exceeded = x->deadline_exceeded;
			for (size_t p = 0; p < x->n_op_seconds && e->nop_seconds < 3; p++) {
				const Devq__MetricsHistogram *h = x->op_seconds[p];
				/* One this client cannot hold whole is left out. */
				if (h->n_le_ns > DEVQ_HIST_MAX_BOUNDS || h->n_counts != h->n_le_ns + 1)
					continue;
				struct devq_histogram *o = &e->op_seconds[e->nop_seconds++];
				snprintf(o->phase, sizeof(o->phase), "%s", h->phase ? h->phase : "");
				o->nbounds = h->n_le_ns;
				memcpy(o->le_ns, h->le_ns, h->n_le_ns * sizeof(uint64_t));
				memcpy(o->counts, h->counts, h->n_counts * sizeof(uint64_t));
				o->sum_ns = h->sum_ns;
				o->count = h->count;
			}
			for (size_t k = 0; k < x->n_labels && e->nlabels < DEVQ_TENANT_LABELS; k++)
				snprintf(e->labels[e->nlabels++], sizeof(e->labels[0]), "%s",
					 x->labels[k] ? x->labels[k] : "");
		}
	}
	if (st->n_refused_uids) {
		s->refused = calloc(st->n_refused_uids, sizeof(*s->refused));
		if (!s->refused)
			return -ENOMEM;
		s->nrefused = st->n_refused_uids;
		for (size_t i = 0; i < st->n_refused_uids; i++) {
			s->refused[i].uid = st->refused_uids[i]->uid;
			s->refused[i].losses = st->refused_uids[i]->losses;
			s->refused[i].until_s = st->refused_uids[i]->until_s;
		}
	}
	for (size_t i = 0; i < st->n_phases && s->nphases < 8; i++) {
		const Devq__MetricsHistogram *h = st->phases[i];
		/* A histogram this client cannot hold whole is left out. */
		if (h->n_le_ns > DEVQ_HIST_MAX_BOUNDS || h->n_counts != h->n_le_ns + 1)
			continue;
		struct devq_histogram *o = &s->phases[s->nphases++];
		snprintf(o->phase, sizeof(o->phase), "%s", h->phase);
		o->nbounds = h->n_le_ns;
		memcpy(o->le_ns, h->le_ns, h->n_le_ns * sizeof(uint64_t));
		memcpy(o->counts, h->counts, h->n_counts * sizeof(uint64_t));
		o->sum_ns = h->sum_ns;
		o->count = h->count;
	}
	return 0;
}

int devq_get_status(devq *q, struct devq_status **out)
{
	return devq_get_status_opts(q, 0, out);
}

int devq_get_status_opts(devq *q, unsigned flags, struct devq_status **out)
{
	Devq__GetStatus gs = DEVQ__GET_STATUS__INIT;
	gs.no_sessions = (flags & DEVQ_STATUS_NO_SESSIONS) != 0;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS;
	m.get_status = &gs;
	Devq__DaemonMessage *rep;
	int r = request(q, &m, NULL, 0, "get_status", DEVQ__DAEMON_MESSAGE__BODY_STATUS, &rep);
	if (r < 0)
		return r;
	const Devq__Status *st = rep->status;
	struct devq_status *s = calloc(1, sizeof(*s));
	if (s)
		s->sessions = calloc(st->n_sessions ? st->n_sessions : 1, sizeof(*s->sessions));
	if (!s || !s->sessions) {
		free(s);
		devq__daemon_message__free_unpacked(rep, NULL);
		return fail(q, -ENOMEM, "out of memory");
	}
	snprintf(s->backend, sizeof(s->backend), "%s", st->backend);
	snprintf(s->device, sizeof(s->device), "%s", st->device);
	s->streams = st->streams;
	s->uptime_ns = st->uptime_ns;
	s->ops_in_flight = st->ops_in_flight;
	s->bytes_mapped = st->bytes_mapped;
	s->sessions_total = st->sessions_total;
	s->ops_completed = st->ops_completed;
	s->ops_failed = st->ops_failed;
	s->buffers = st->buffers;
	s->nsessions = st->n_sessions;
	snprintf(s->gpu, sizeof(s->gpu), "%s", st->gpu ? st->gpu : "");
	snprintf(s->uuid, sizeof(s->uuid), "%s", st->uuid ? st->uuid : "");
	s->device_stalled = st->device_stalled;
	/* An older daemon sends no count: its rows are every session. */
	s->sessions_live = st->sessions_live ? st->sessions_live : st->n_sessions;
	for (size_t i = 0; i < st->n_sessions; i++) {
		const Devq__SessionStatus *x = st->sessions[i];
		struct devq_session_info *y = &s->sessions[i];
		y->id = x->id;
		y->pid = x->pid;
		y->uid = x->uid;
		snprintf(y->name, sizeof(y->name), "%s", x->name);
		y->queues = x->queues;
		y->buffers = x->buffers;
		y->ops_in_flight = x->ops_in_flight;
		y->bytes_mapped = x->bytes_mapped;
		y->ops_completed = x->ops_completed;
		y->ops_failed = x->ops_failed;
	}
	if (status_metrics(s, st) < 0) {
		devq_status_free(s);
		devq__daemon_message__free_unpacked(rep, NULL);
		return fail(q, -ENOMEM, "out of memory");
	}
	devq__daemon_message__free_unpacked(rep, NULL);
	*out = s;
	return 0;
}

void devq_status_free(struct devq_status *s)
{
	if (!s)
		return;
	for (size_t i = 0; s->sessions && i < s->nsessions; i++)
		free(s->sessions[i].queue_depths);
	free(s->sessions);
	free(s->users);
	free(s->refused);
	free(s->tenants);
	free(s->tenant_extra);
	free(s);
}

/* ---- admin calls ------------------------------------------------------ */

static void grant_of(struct devq_grant *o, const Devq__Grant *g)
{
	memset(o, 0, sizeof(*o));
	snprintf(o->tenant, sizeof(o->tenant), "%s", g->tenant ? g->tenant : "");
	o->uid = g->uid;
	snprintf(o->socket, sizeof(o->socket), "%s", g->socket ? g->socket : "");
	o->shares = g->shares;
	o->of = g->of;
	o->memory_bytes = g->memory_bytes;
	o->priority = g->priority;
	o->sessions = g->sessions;
	o->device_ns = g->device_ns;
	o->ops = g->ops;
	o->peak_bytes = g->peak_bytes;
	o->errors = g->errors;
	o->cancelled = g->cancelled;
	o->bytes = g->bytes;
	o->ops_in_flight = g->ops_in_flight;
}

/* devq_admin_grant and devq_admin_update: one request, update_only apart
 * (a field of the message, not of the caller's struct, whose size is ABI). */
static int admin_grant(devq *q, const struct devq_grant_request *req, bool update_only,
		       const char *const *labels, size_t nlabels, struct devq_grant *out)
{
	if (!req || !req->tenant)
		return fail(q, -EINVAL, "admin grant: no tenant");
	Devq__AdminGrant a = DEVQ__ADMIN_GRANT__INIT;
	a.tenant = (char *)req->tenant;
	a.uid = req->uid;
	a.shares = req->shares;
	a.of = req->of;
	a.memory_bytes = req->memory_bytes;
	a.priority = req->priority;
	a.update_only = update_only;
	a.n_labels = nlabels;
	a.labels = (char **)labels;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_ADMIN_GRANT;
	m.admin_grant = &a;
	Devq__DaemonMessage *rep;
	q->warning[0] = '\0';
	int r = request(q, &m, NULL, 0, "admin_grant", DEVQ__DAEMON_MESSAGE__BODY_GRANT, &rep);
	if (r < 0)
		return r;
	if (out)
		grant_of(out, rep->grant);
	snprintf(q->warning, sizeof(q->warning), "%s",
		 rep->grant->warning ? rep->grant->warning : "");
	devq__daemon_message__free_unpacked(rep, NULL);
	return 0;
}

int devq_admin_grant(devq *q, const struct devq_grant_request *req, struct devq_grant *out)
{
	return admin_grant(q, req, false, NULL, 0, out);
}

int devq_admin_update(devq *q, const struct devq_grant_request *req, struct devq_grant *out)
{
	return admin_grant(q, req, true, NULL, 0, out);
}

int devq_admin_grant_labels(devq *q, const struct devq_grant_request *req,
			    const char *const *labels, size_t nlabels, unsigned flags,
			    struct devq_grant *out)
{
	if (nlabels && !labels)
		return fail(q, -EINVAL, "admin grant: labels missing");
	return admin_grant(q, req, (flags & DEVQ_GRANT_UPDATE_ONLY) != 0, labels, nlabels, out);
}

const char *devq_admin_warning(const devq *q)
{
	return q ? q->warning : "";
}

int devq_admin_evict(devq *q, const char *tenant, uint32_t grace_ms, struct devq_evict_result *out)
{
	Devq__AdminEvict a = DEVQ__ADMIN_EVICT__INIT;
	a.tenant = (char *)(tenant ? tenant : "");
	a.grace_ms = grace_ms;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_ADMIN_EVICT;
	m.admin_evict = &a;
	Devq__DaemonMessage *rep;
	int r = request(q, &m, NULL, 0, "admin_evict", DEVQ__DAEMON_MESSAGE__BODY_EVICTED, &rep);
	if (r < 0)
		return r;
	if (out) {
		const Devq__Evicted *e = rep->evicted;
		memset(out, 0, sizeof(*out));
		snprintf(out->tenant, sizeof(out->tenant), "%s", e->tenant ? e->tenant : "");
		out->device_ns = e->device_ns;
		out->ops = e->ops;
		out->peak_bytes = e->peak_bytes;
		out->errors = e->errors;
		out->cancelled = e->cancelled;
		out->still_running = e->still_running;
		out->bytes_left = e->bytes_left;
	}
	devq__daemon_message__free_unpacked(rep, NULL);
	return 0;
}

int devq_admin_tenants(devq *q, struct devq_grant **list, size_t *n)
{
	*list = NULL;
	*n = 0;
	Devq__AdminTenants a = DEVQ__ADMIN_TENANTS__INIT;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_ADMIN_TENANTS;
	m.admin_tenants = &a;
	Devq__DaemonMessage *rep;
	int r = request(q, &m, NULL, 0, "admin_tenants", DEVQ__DAEMON_MESSAGE__BODY_GRANTS, &rep);
	if (r < 0)
		return r;
	const Devq__GrantList *l = rep->grants;
	struct devq_grant *g = calloc(l->n_items ? l->n_items : 1, sizeof(*g));
	if (!g) {
		devq__daemon_message__free_unpacked(rep, NULL);
		return fail(q, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < l->n_items; i++)
		grant_of(&g[i], l->items[i]);
	*list = g;
	*n = l->n_items;
	devq__daemon_message__free_unpacked(rep, NULL);
	return 0;
}

/* ---- reconnection ---------------------------------------------------- */

static void reset_connection(devq *q)
{
	take_ring(q); /* records already in the ring stay readable */
	devq_cpc_free(q->cp); /* the new session gets its own page */
	q->cp = NULL;
	for (size_t i = 0; i < q->nqueues; i++)
		q->queues[i].slot = NULL;
	if (q->fd >= 0)
		close(q->fd);
	q->fd = -1;
	devq_rx_fini(&q->rx);
	devq_tx_fini(&q->tx);
	devq_rx_init(&q->rx, 64u << 20);
	devq_tx_init(&q->tx);
	q->broken = false;
}

static int reimport(devq *q, struct buffer *x)
{
	const struct devq_buffer *b = &x->pub;
	int fd = fcntl(x->fd, F_DUPFD_CLOEXEC, 0); /* the frame owns its copy */
	if (fd < 0)
		return fail(q, -errno, "dup: %s", strerror(errno));
	Devq__ImportBuffer im = DEVQ__IMPORT_BUFFER__INIT;
	im.id = b->id;
	im.size = b->size;
	im.read_only = b->read_only;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_IMPORT_BUFFER;
	m.import_buffer = &im;
	Devq__DaemonMessage *rep;
	int r = request(q, &m, &fd, 1, "import_buffer", DEVQ__DAEMON_MESSAGE__BODY_BUFFER_READY,
			&rep);
	if (r < 0)
		return r;
	devq__daemon_message__free_unpacked(rep, NULL);
	return 0;
}

int devq_reconnect(devq *q, int timeout_ms)
{
	if (crossed_fork(q))
		return -ECHILD;
	uint64_t deadline = deadline_of(timeout_ms);
	int r;
	for (;;) {
		reset_connection(q);
		r = hello(q);
		if (r == 0)
			break;
		/* Only "nobody there yet" is worth retrying: a refusal by a
		 * live daemon (version, policy) will not change. */
		bool transient = r == -ENOENT || r == -ECONNREFUSED || r == -ECONNRESET ||
				 r == -EPIPE || r == -EAGAIN;
		if (!transient)
			return r;
		if (remaining_ms(deadline) == 0) {
			char why[sizeof(q->err)];
			memcpy(why, q->err, sizeof(why));
			return fail(q, -ETIMEDOUT, "devqd did not come back within %d ms (%.200s)",
				    timeout_ms, why);
		}
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	free(q->execs); /* ids may differ in the new daemon: look them up again */
	free(q->exec_extra);
	q->exec_extra = NULL;
	q->execs = NULL;
	q->nexecs = 0;
	for (struct buffer *x = q->bufs; x; x = x->next) {
		struct devq_buffer *b = &x->pub;
		if (b->released || b->lost)
			continue;
		if (x->releasing) {
			/* No daemon holds it any more: the release is done. */
			b->released = true;
			continue;
		}
		if (b->kind == DEVQ_BUFFER_DEVICE || x->fd < 0) {
			b->lost = true;
			continue;
		}
		r = reimport(q, x);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < q->nqueues; i++) {
		r = send_open_queue(q, q->queues[i].id, q->queues[i].priority);
		if (r < 0)
			return r;
		q->queues[i].submitted = q->queues[i].completed = 0;
		q->queues[i].refused = false;
		q->queues[i].echoes = 0;
	}
	return devq_flush(q);
}

/* ---- tracing --------------------------------------------------------- */

void devq_trace_free(struct devq_trace *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nsessions; i++)
		free(t->sessions[i].queues);
	free(t->sessions);
	free(t->ops);
	free(t->stream_busy_ns);
	free(t);
}

static int trace_session(struct devq_trace_session *y, const Devq__TraceSession *x)
{
	y->id = x->id;
	y->pid = x->pid;
	y->uid = x->uid;
	snprintf(y->name, sizeof(y->name), "%s", x->name ? x->name : "");
	y->connected = x->connected;
	y->ops_completed = x->ops_completed;
	y->ops_failed = x->ops_failed;
	y->ops_in_flight = x->ops_in_flight;
	y->bytes_mapped = x->bytes_mapped;
	y->queues = calloc(x->n_queues ? x->n_queues : 1, sizeof(*y->queues));
	if (!y->queues)
		return -ENOMEM;
	y->nqueues = x->n_queues;
	for (size_t k = 0; k < x->n_queues; k++) {
		y->queues[k].id = x->queues[k]->id;
		y->queues[k].stream = x->queues[k]->stream;
		y->queues[k].submitted = x->queues[k]->submitted;
		y->queues[k].completed = x->queues[k]->completed;
	}
	return 0;
}

static void trace_op(struct devq_trace_op *y, const Devq__TraceOp *x)
{
	y->session = x->session;
	y->queue = x->queue;
	y->stream = x->stream;
	y->point = x->point;
	y->executable = x->executable;
	y->code = x->code;
	if (x->timing) {
		y->t.client_submit = x->timing->client_submit;
		y->t.received = x->timing->received;
		y->t.handoff = x->timing->handoff;
		y->t.device_start = x->timing->device_start;
		y->t.device_end = x->timing->device_end;
		y->t.observed = x->timing->observed;
		y->t.enqueue_ns = x->timing->enqueue_ns;
	}
	/* More than a record holds: count them with the dropped ones. */
	y->nwaits = x->n_waits < DEVQ_TRACE_MAX_WAITS ? x->n_waits : DEVQ_TRACE_MAX_WAITS;
	y->waits_dropped = x->waits_dropped + (uint32_t)(x->n_waits - y->nwaits);
	for (size_t k = 0; k < y->nwaits; k++) {
		y->waits[k].queue = x->waits[k]->queue;
		y->waits[k].point = x->waits[k]->point;
		y->waits[k].kind = (enum devq_trace_wait_kind)x->waits[k]->kind;
	}
	y->nbuffers = x->n_buffers < DEVQ_TRACE_MAX_BUFFERS ? x->n_buffers : DEVQ_TRACE_MAX_BUFFERS;
	for (size_t k = 0; k < y->nbuffers; k++) {
		y->buffers[k].id = x->buffers[k]->id;
		y->buffers[k].access = x->buffers[k]->access;
		y->buffers[k].released = x->buffers[k]->released;
	}
}

int devq_trace_get(devq *q, const struct devq_trace_query *query, struct devq_trace **out)
{
	*out = NULL;
	Devq__TraceRequest tr = DEVQ__TRACE_REQUEST__INIT;
	if (query) {
		tr.all = query->all;
		tr.last = query->last;
		tr.since_ns = query->since_ns;
		tr.no_ops = query->no_ops;
	}
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_TRACE_REQUEST;
	m.trace_request = &tr;
	Devq__DaemonMessage *rep;
	int r = request(q, &m, NULL, 0, "trace", DEVQ__DAEMON_MESSAGE__BODY_TRACE_REPLY, &rep);
	if (r < 0)
		return r;
	const Devq__TraceReply *x = rep->trace_reply;
	struct devq_trace *t = calloc(1, sizeof(*t));
	if (!t)
		goto oom;
	t->now_ns = x->now_ns;
	snprintf(t->backend, sizeof(t->backend), "%s", x->backend ? x->backend : "");
	snprintf(t->device, sizeof(t->device), "%s", x->device ? x->device : "");
	t->streams = x->streams;
	t->capacity = x->capacity;
	t->recorded = x->recorded;
	t->truncated = x->truncated;
	t->stream_busy_ns = calloc(x->streams + 1, sizeof(*t->stream_busy_ns));
	t->sessions = calloc(x->n_sessions + x->n_gone + 1, sizeof(*t->sessions));
	t->ops = calloc(x->n_ops + 1, sizeof(*t->ops));
	if (!t->stream_busy_ns || !t->sessions || !t->ops)
		goto oom;
	for (size_t i = 0; i < x->n_stream_busy_ns && i < x->streams; i++)
		t->stream_busy_ns[i] = x->stream_busy_ns[i];
	for (size_t i = 0; i < x->n_sessions + x->n_gone; i++) {
		const Devq__TraceSession *s =
			i < x->n_sessions ? x->sessions[i] : x->gone[i - x->n_sessions];
		/* Counted first, so a failure mid-way frees what was built. */
		t->nsessions++;
		if (trace_session(&t->sessions[i], s) < 0)
			goto oom;
	}
	for (size_t i = 0; i < x->n_ops; i++)
		trace_op(&t->ops[i], x->ops[i]);
	t->nops = x->n_ops;
	devq__daemon_message__free_unpacked(rep, NULL);
	*out = t;
	return 0;
oom:
	devq_trace_free(t);
	devq__daemon_message__free_unpacked(rep, NULL);
	return fail(q, -ENOMEM, "out of memory");
}
