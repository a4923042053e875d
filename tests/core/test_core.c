/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the daemon's core (daemon/core/) without a transport: no
 * socket, no libuv.  The engine runs with a fake backend that records what it
 * is handed and completes ops only when a test says so, so ordering, waits,
 * failure ranges, fairness and quotas are checked exactly, one step at a
 * time.  Sessions are made as the server makes them (devq_session_new,
 * devq_session_admit) and fed Ops as the request layer would. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/lock.h"
#include "base/log.h"
#include "core/buffer.h"
#include "core/cost.h"
#include "core/cpage.h"
#include "core/engine.h"
#include "core/job.h"
#include "core/metrics.h"
#include "core/outbox.h"
#include "core/quota.h"
#include "core/repo.h"
#include "core/sched.h"
#include "core/session.h"
#include "core/tenant.h"
#include "core/trace.h"
#include "core/timeline.h"
#include "core/validate.h"
#include "devq.pb-c.h"
#include "fake_mem.h"
#include "fault.h"

#ifndef DEVQ_FAIL_RANGES_MAX /* before the bound existed */
#define DEVQ_FAIL_RANGES_MAX 1024
#endif

/* ---- the fake backend ------------------------------------------------ */

#define FAKE_MAX 2048

struct fake {
	struct devq_backend be;
	struct devq_bop *ops[FAKE_MAX]; /* enqueued, in order, not completed */
	unsigned n;
	unsigned enqueued, flushes;
	int refuse; /* enqueue returns this when set (a negative errno) */
};

static bool fake_has_kernel(struct devq_backend *b, const struct devq_kernel *k)
{
	(void)b, (void)k;
	return true;
}

static int fake_enqueue(struct devq_backend *b, struct devq_bop *op)
{
	struct fake *f = (struct fake *)b;
	if (f->refuse)
		return f->refuse;
	ck_assert_uint_lt(f->n, FAKE_MAX);
	f->ops[f->n++] = op;
	f->enqueued++;
	return 0;
}

static void fake_flush(struct devq_backend *b)
{
	((struct fake *)b)->flushes++;
}

static void fake_destroy(struct devq_backend *b)
{
	ck_assert_uint_eq(((struct fake *)b)->n, 0); /* nothing left running */
	free(b);
}

static const struct devq_backend_ops fake_ops = {
	.destroy = fake_destroy,
	.map_host = fake_map_host,
	.unmap_host = fake_unmap_host,
	.alloc = fake_alloc,
	.free = fake_free,
	.has_kernel = fake_has_kernel,
	.enqueue = fake_enqueue,
	.flush = fake_flush,
};

static struct fake *FK;

/* enqueue_chain, as the CPU backend has it: the list by b.next, in one
 * call (refused whole when refuse is set). */
static int fake_enqueue_chain(struct devq_backend *b, struct devq_bop *first)
{
	struct fake *f = (struct fake *)b;
	if (f->refuse)
		return f->refuse;
	for (struct devq_bop *op = first; op; op = op->next)
		ck_assert_int_eq(fake_enqueue(b, op), 0);
	return 0;
}

/* Gives the fake backend enqueue_chain, for the tests of fair.c's burst
 * path: fake_ops and that. */
static void fake_use_chain(void)
{
	static struct devq_backend_ops chain_ops;
	chain_ops = fake_ops;
	chain_ops.enqueue_chain = fake_enqueue_chain;
	FK->be.ops = &chain_ops;
}

static int fake_open(const struct devq_backend_config *bc, struct devq_backend **out)
{
	struct fake *f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->be.ops = &fake_ops;
	f->be.name = "fake";
	f->be.streams = bc->streams + bc->high_streams;
	f->be.high_streams = bc->high_streams;
	f->be.on_complete = bc->on_complete;
	f->be.ud = bc->ud;
	FK = f;
	*out = &f->be;
	return 0;
}

/* ---- the engine ------------------------------------------------------ */

static struct devq_engine E;
static unsigned wakes, lost;

static void ev_wake(void *ud)
{
	(void)ud;
	wakes++;
}

static void ev_device_lost(void *ud, const struct devq_job *j)
{
	(void)ud, (void)j;
	lost++;
}

static void engine_up(struct devq_config cfg)
{
	cfg.backend = "cpu";
	if (!cfg.streams)
		cfg.streams = 4;
	cfg.max_op_ns = 1000000000ull;
	cfg.max_buffer_bytes = 1 << 20;
	if (!cfg.max_queues)
		cfg.max_queues = 8;
	struct devq_engine_events ev = { .wake = ev_wake,
					 .device_lost = ev_device_lost };
	wakes = lost = 0;
	ck_assert_int_eq(devq_engine_init(&E, &cfg, &ev, fake_open), 0);
}

/* What the server does after each loop iteration: outboxes are written
 * (here: dropped) and sessions with nothing left freed. */
static void flush_dirty(void)
{
	while (E.dirty) {
		struct devq_session *s = E.dirty;
		E.dirty = s->dirty_next;
		s->dirty = false;
		devq_outbox_push_completions(s);
		devq_session_maybe_free(s);
	}
}

static struct devq_session *session(uid_t uid)
{
	struct devq_session *s = devq_session_new(&E, 1234, uid, uid);
	ck_assert_ptr_nonnull(s);
	char why[200];
	ck_assert_int_eq(devq_session_admit(s, why, sizeof(why)), 0);
	return s;
}

static void session_end(struct devq_session *s)
{
	devq_session_disconnect(s);
	flush_dirty();
	devq_session_unhold(s);
}

static void engine_down(void)
{
	flush_dirty();
	while (E.sessions)
		session_end(E.sessions);
	ck_assert_uint_eq(E.ops_in_flight, 0);
	devq_engine_fini(&E);
}

static void queue(struct devq_session *s, uint32_t id, int prio)
{
	struct devq_timeline *q;
	char err[160];
	s->may_high = true; /* the server's grant at connect (server/policy.c) */
	ck_assert_int_eq(devq_timeline_open(s, id, prio, &q, err, sizeof(err)), 0);
}

static void buffer(struct devq_session *s, uint64_t id, uint64_t size)
{
	int fd = -1;
	char err[200];
	int r = devq_buffer_create(s, id, size, DEVQ__BUFFER_KIND__SHARED, &fd, err, sizeof(err));
	ck_assert_msg(r == 0, "create: %s", err);
	ck_assert_int_eq(close(fd), 0);
}

/* The common start: an engine with default settings, one session of uid
 * 1000 with queues 1 and 2 and 64-byte buffers 5 and 6. */
static struct devq_session *two_queues(void)
{
	engine_up((struct devq_config){ 0 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	queue(s, 2, 0);
	buffer(s, 5, 64);
	buffer(s, 6, 64);
	return s;
}

/* ---- ops, built as a decoded Submit would be --------------------------- */

struct opmsg {
	Devq__Op op;
	Devq__Wait w[4], *wp[4];
	Devq__FillOp fill;
	Devq__CopyOp copy;
	Devq__BufferArg a, b;
};

/* Ops submitted while set ask for no device timing (Op.no_timing), or
 * are marked replayable (Op.replayable: one of a batch that may pass
 * fair-k). */
static bool untimed, replayable;
/* Op.deadline_us of ops submitted while set (received at 1 ns). */
static uint64_t deadline;

/* Submits an op on queue q: writer (fill of buffer w) when w, reader (copy
 * from r into scratch buffer 99) when r, with explicit waits (queue,
 * point) pairs. */
static int try_submit(struct devq_session *s, uint32_t q, uint64_t w, uint64_t r,
		      unsigned nwaits, const uint32_t *wq, const uint64_t *wpoint, char *err,
		      size_t errlen)
{
	struct opmsg m;
	devq__op__init(&m.op);
	m.op.queue = q;
	m.op.no_timing = untimed;
	m.op.replayable = replayable;
	m.op.deadline_us = deadline;
	for (unsigned i = 0; i < nwaits; i++) {
		devq__wait__init(&m.w[i]);
		m.w[i].queue = wq[i];
		m.w[i].point = wpoint[i];
		m.wp[i] = &m.w[i];
	}
	m.op.n_waits = nwaits;
	m.op.waits = m.wp;
	devq__buffer_arg__init(&m.a);
	devq__buffer_arg__init(&m.b);
	if (w) {
		devq__fill_op__init(&m.fill);
		m.a.id = w;
		m.fill.dst = &m.a;
		m.fill.size = 16;
		m.fill.pattern = 7;
		m.op.body_case = DEVQ__OP__BODY_FILL;
		m.op.fill = &m.fill;
	} else {
		devq__copy_op__init(&m.copy);
		m.a.id = r;
		m.b.id = 99;
		m.copy.src = &m.a;
		m.copy.dst = &m.b;
		m.copy.size = 16;
		m.op.body_case = DEVQ__OP__BODY_COPY;
		m.op.copy = &m.copy;
	}
	return devq_sched_submit(s, &m.op, 1, err, errlen);
}

static void submit(struct devq_session *s, uint32_t q, uint64_t w, uint64_t r, unsigned nwaits,
		   const uint32_t *wq, const uint64_t *wpoint)
{
	char err[160];
	ck_assert_int_eq(try_submit(s, q, w, r, nwaits, wq, wpoint, err, sizeof(err)), 0);
}

/* The job handed to the backend as its i-th op since the start. */
static struct devq_job *handed(unsigned i)
{
	ck_assert_uint_lt(i, FK->n);
	return devq_job_of(FK->ops[i]);
}

/* Whether job j waits on (queue, point). */
static bool waits_on(const struct devq_job *j, uint32_t q, uint64_t point)
{
	for (unsigned i = 0; i < j->b.nwaits; i++) {
		const struct devq_job *w = devq_job_of(j->b.waits[i]);
		if (w->q->id == q && w->point == point)
			return true;
	}
	return false;
}

/* The backend's k-th outstanding op, taken off its list as done. */
static struct devq_bop *take_op(unsigned k)
{
	ck_assert_uint_lt(k, FK->n);
	struct devq_bop *b = FK->ops[k];
	memmove(&FK->ops[k], &FK->ops[k + 1], (FK->n - k - 1) * sizeof(FK->ops[0]));
	FK->n--;
	return b;
}

/* Completes the backend's k-th outstanding op with code and the device
 * start and end stamps given, as a backend thread would, and lets the
 * loop process it. */
static void complete_at(unsigned k, int code, uint64_t start, uint64_t end)
{
	struct devq_bop *b = take_op(k);
	b->code = code;
	if (code)
		snprintf(b->msg, sizeof(b->msg), "failed on purpose");
	b->t_start = start;
	b->t_end = end;
	E.be->on_complete(E.be->ud, b);
	devq_sched_drain(&E);
	flush_dirty();
}

static void complete(unsigned k, int code)
{
	ck_assert_uint_lt(k, FK->n);
	struct devq_bop *b = FK->ops[k];
	/* A spin ran as long as it said (fairness charges what ran). */
	uint64_t start = b->t_handoff + 1;
	complete_at(k, code, start,
		    start + (devq_job_of(b)->fdecl ? devq_job_of(b)->decl_ns : 1));
}

static void complete_all(void)
{
	while (FK->n)
		complete(0, 0);
}

static struct devq_timeline *tl(struct devq_session *s, uint32_t id)
{
	struct devq_timeline *q = devq_idmap_get(&s->queues, id);
	ck_assert_ptr_nonnull(q);
	return q;
}

/* ---- hazards and waits ------------------------------------------------- */

START_TEST(test_reader_after_writer)
{
	engine_up((struct devq_config){ 0 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	queue(s, 2, 0);
	buffer(s, 5, 64);
	buffer(s, 99, 64);
	submit(s, 1, 5, 0, 0, NULL, NULL); /* writer of 5 on q1 */
	submit(s, 2, 0, 5, 0, NULL, NULL); /* reader of 5 on q2 */
	ck_assert_uint_eq(FK->n, 2);
	ck_assert(waits_on(handed(1), 1, 1));
	/* An ordering wait: the writer's failure does not fail the reader. */
	ck_assert_uint_eq(handed(1)->b.nstrict, 0);
	complete_all();
	engine_down();
}
END_TEST

START_TEST(test_writer_after_readers)
{
	engine_up((struct devq_config){ 0 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	queue(s, 2, 0);
	queue(s, 3, 0);
	buffer(s, 5, 64);
	buffer(s, 99, 64);
	submit(s, 1, 0, 5, 0, NULL, NULL); /* reader (1,1) */
	submit(s, 2, 0, 5, 0, NULL, NULL); /* reader (2,1) */
	/* Copies into 99 write it: (2,1) waits on (1,1) for 99 alone. */
	submit(s, 3, 5, 0, 0, NULL, NULL); /* writer of 5 */
	ck_assert_uint_eq(FK->n, 3);
	struct devq_job *w = handed(2);
	ck_assert(waits_on(w, 1, 1));
	ck_assert(waits_on(w, 2, 1));
	/* Completed readers impose nothing on a later writer. */
	complete_all();
	submit(s, 1, 5, 0, 0, NULL, NULL);
	ck_assert_uint_eq(handed(0)->b.nwaits, 0);
	complete_all();
	engine_down();
}
END_TEST

static void spin(struct devq_session *s, uint32_t q, uint64_t ns);

/* A reader that completed, still listed on its buffer (no writer came
 * since), imposes nothing on a writer on another queue. */
START_TEST(test_writer_after_completed_reader)
{
	engine_up((struct devq_config){ 0 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	queue(s, 2, 0);
	buffer(s, 5, 64);
	buffer(s, 99, 64);
	submit(s, 2, 0, 5, 0, NULL, NULL); /* reader (2,1) */
	complete_all();
	submit(s, 1, 5, 0, 0, NULL, NULL); /* writer of 5 */
	ck_assert_uint_eq(handed(0)->b.nwaits, 0);
	complete_all();
	engine_down();
}
END_TEST

/* A buffer read over and over from two queues keeps only the readers
 * still running: each new reader drops the completed ones, so the list
 * (and the references it holds) stays short however long it is read. */
START_TEST(test_readers_list_stays_short)
{
	engine_up((struct devq_config){ 0 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	queue(s, 2, 0);
	buffer(s, 5, 64);
	buffer(s, 99, 64);
	const struct devq_buf *b = devq_idmap_get(&s->bufs, 5);
	ck_assert_ptr_nonnull(b);
	for (unsigned i = 0; i < 20; i++) {
		submit(s, 1 + i % 2, 0, 5, 0, NULL, NULL);
		ck_assert_uint_eq(b->nreaders, 1);
		complete_all();
	}
	engine_down();
}
END_TEST

/* An explicit wait on a queue covers an ordering wait on the same queue
 * at or below its point, and only those: reader R on queue 1 reads
 * buffer 5, whose last writer is on queue 2. */
START_TEST(test_strict_wait_covers_order_wait)
{
	engine_up((struct devq_config){ 0 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	queue(s, 2, 0);
	buffer(s, 5, 64);
	buffer(s, 99, 64);
	submit(s, 2, 5, 0, 0, NULL, NULL); /* (2,1) writes 5 */
	const uint32_t wq = 2;
	uint64_t wp = 1;
	submit(s, 1, 0, 5, 1, &wq, &wp); /* waits on (2,1), which it also reads after */
	struct devq_job *r = handed(1);
	ck_assert_uint_eq(r->b.nwaits, 1);
	ck_assert_uint_eq(r->b.nstrict, 1);
	ck_assert(waits_on(r, 2, 1));
	complete_all();
	/* An explicit wait on (2,2) and the writer (2,3): both kept. */
	spin(s, 2, 1000); /* (2,2) */
	submit(s, 2, 5, 0, 0, NULL, NULL); /* (2,3) writes 5 */
	wp = 2;
	submit(s, 1, 0, 5, 1, &wq, &wp);
	r = devq_timeline_get(tl(s, 1), 2);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->b.nwaits, 2);
	ck_assert(waits_on(r, 2, 2));
	ck_assert(waits_on(r, 2, 3));
	complete_all();
	engine_down();
}
END_TEST

START_TEST(test_explicit_waits_across_queues)
{
	struct devq_session *s = two_queues();
	submit(s, 1, 5, 0, 0, NULL, NULL);
	submit(s, 1, 5, 0, 0, NULL, NULL);
	uint32_t wq[] = { 1, 1 };
	uint64_t wp[] = { 1, 2 };
	submit(s, 2, 6, 0, 2, wq, wp); /* unrelated buffer, explicit waits */
	struct devq_job *j = handed(2);
	/* Deduplicated per queue, keeping the highest point; strict. */
	ck_assert_uint_eq(j->b.nwaits, 1);
	ck_assert_uint_eq(j->b.nstrict, 1);
	ck_assert(waits_on(j, 1, 2));
	/* A wait beyond what was submitted is refused at its point. */
	uint64_t far[] = { 9 };
	submit(s, 2, 6, 0, 1, wq, far);
	struct devq_job *bad = handed(3);
	ck_assert_int_eq(bad->b.kind, DEVQ_BOP_FAIL);
	ck_assert_int_eq(bad->b.code, DEVQ__CODE__INVALID_ARGUMENT);
	complete_all();
	/* Waits on points already complete cost nothing. */
	ck_assert_uint_eq(tl(s, 2)->completed, 2);
	submit(s, 2, 6, 0, 2, wq, wp);
	ck_assert_uint_eq(handed(0)->b.nwaits, 0);
	ck_assert_int_eq(handed(0)->b.code, 0);
	complete_all();
	engine_down();
}
END_TEST

/* ---- failure ranges ---------------------------------------------------- */

/* Submits on queue 1 a spin with no buffers that waits on point 1 of
 * queues 2..nq. */
static int submit_waiting_on_queues(struct devq_session *s, unsigned nq)
{
	Devq__Op op = DEVQ__OP__INIT;
	Devq__KernelOp k = DEVQ__KERNEL_OP__INIT;
	Devq__Arg a = DEVQ__ARG__INIT, *ap = &a;
	Devq__Wait w[64], *wp[64];
	ck_assert_uint_le(nq, 65);
	for (unsigned i = 0; i + 1 < nq; i++) {
		devq__wait__init(&w[i]);
		w[i].queue = i + 2;
		w[i].point = 1;
		wp[i] = &w[i];
	}
	a.name = "ns";
	a.value_case = DEVQ__ARG__VALUE_U64;
	a.u64 = 1000;
	k.executable = (uint32_t)(devq_kernel_find("spin") - devq_kernels);
	k.n_args = 1;
	k.args = &ap;
	op.queue = 1;
	op.n_waits = nq - 1;
	op.waits = wp;
	op.body_case = DEVQ__OP__BODY_KERNEL;
	op.kernel = &k;
	char err[160];
	return devq_sched_submit(s, &op, 1, err, sizeof(err));
}

/* An engine whose session has queues 1..nq, each with one pending spin. */
static struct devq_session *pending_on_queues(unsigned nq)
{
	engine_up((struct devq_config){ .max_queues = nq });
	struct devq_session *s = session(1000);
	for (uint32_t q = 1; q <= nq; q++) {
		queue(s, q, 0);
		spin(s, q, 1000);
	}
	return s;
}

/* An op with no buffers that waits on the pending ops of nq - 1 other
 * queues and follows a pending op of its own: nq waits, all kept, the
 * queue's own too.  The wait set is sized for every explicit wait plus
 * the queue's previous op, on the stack up to 32 entries, and the op
 * keeps up to 4 waits inline: 4 and 5, 32, 33 and 34 entries cross those
 * edges (check-asan sees a set one entry short). */
START_TEST(test_waits_on_many_queues)
{
	static const unsigned sizes[] = { 4, 5, 32, 33, 34, 40 };
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		unsigned nq = sizes[i];
		struct devq_session *s = pending_on_queues(nq);
		ck_assert_int_eq(submit_waiting_on_queues(s, nq), 0);
		const struct devq_job *j = devq_timeline_get(tl(s, 1), 2);
		ck_assert_ptr_nonnull(j);
		ck_assert_uint_eq(j->b.nwaits, nq);
		ck_assert_uint_eq(j->b.nstrict, nq);
		for (uint32_t q = 1; q <= nq; q++)
			ck_assert_msg(waits_on(j, q, 1), "%u queues: no wait on queue %u", nq, q);
		complete_all();
		engine_down();
	}
}
END_TEST

/* Each allocation of that submit failed in turn: the op fails (in order)
 * or keeps all its waits; a failed one holds none. */
START_TEST(test_fault_waits_on_many_queues)
{
	unsigned n;
	for (n = 1; n < 100; n++) {
		struct devq_session *s = pending_on_queues(40);
		fault_arm(FAULT_ALLOC, n, 1, ENOMEM);
		int r = submit_waiting_on_queues(s, 40);
		unsigned failed = fault_failed(FAULT_ALLOC);
		fault_reset();
		if (r == 0) {
			const struct devq_job *j = devq_timeline_get(tl(s, 1), 2);
			ck_assert_ptr_nonnull(j);
			if (j->b.kind == DEVQ_BOP_FAIL) {
				ck_assert_int_eq(j->b.code, DEVQ__CODE__RESOURCE_EXHAUSTED);
				ck_assert_uint_eq(j->b.nwaits, 0);
			} else {
				ck_assert_uint_eq(j->b.nwaits, 40);
			}
		} else {
			ck_assert_int_eq(r, -ENOMEM);
		}
		complete_all();
		engine_down();
		if (!failed)
			break;
	}
	ck_assert_uint_lt(n, 100);
	ck_assert_uint_gt(n, 2);
}
END_TEST

/* A reader whose buffer bookkeeping runs out of memory after its waits
 * were collected: it fails in order, holding none of them (their
 * references were dropped). */
START_TEST(test_fault_refused_op_holds_no_waits)
{
	unsigned n, refused = 0;
	for (n = 1; n < 100; n++) {
		engine_up((struct devq_config){ 0 });
		struct devq_session *s = session(1000);
		for (uint32_t q = 1; q <= 3; q++) {
			queue(s, q, 0);
			spin(s, q, 1000);
		}
		buffer(s, 5, 64);
		buffer(s, 99, 64);
		const uint32_t wq[] = { 2, 3 };
		const uint64_t wpt[] = { 1, 1 };
		char err[160];
		fault_arm(FAULT_ALLOC, n, 1, ENOMEM);
		int r = try_submit(s, 1, 0, 5, 2, wq, wpt, err, sizeof(err));
		unsigned failed = fault_failed(FAULT_ALLOC);
		fault_reset();
		if (r == 0) {
			const struct devq_job *j = devq_timeline_get(tl(s, 1), 2);
			ck_assert_ptr_nonnull(j);
			if (j->b.kind == DEVQ_BOP_FAIL) {
				refused++;
				ck_assert_uint_eq(j->b.nwaits, 0);
				ck_assert_ptr_null(j->b.waits);
			} else {
				ck_assert_uint_eq(j->b.nwaits, 3);
			}
		}
		complete_all();
		engine_down();
		if (!failed)
			break;
	}
	ck_assert_uint_lt(n, 100);
	ck_assert_uint_gt(refused, 0);
}
END_TEST

START_TEST(test_sticky_failure_and_reset)
{
	struct devq_session *s = two_queues();
	submit(s, 1, 5, 0, 0, NULL, NULL); /* (1,1) will fail */
	complete(0, DEVQ__CODE__DEVICE_ERROR);
	ck_assert(devq_timeline_failed(tl(s, 1), 1));
	/* The queue stays failed: the next op fails without running. */
	submit(s, 1, 5, 0, 0, NULL, NULL); /* (1,2) */
	ck_assert_int_eq(handed(0)->b.kind, DEVQ_BOP_FAIL);
	ck_assert_int_eq(handed(0)->b.code, DEVQ__CODE__DEPENDENCY_FAILED);
	complete_all();
	/* A wait from another queue on the failed point fails too. */
	uint32_t wq[] = { 1 };
	uint64_t wp[] = { 1 };
	submit(s, 2, 6, 0, 1, wq, wp);
	ck_assert_int_eq(handed(0)->b.code, DEVQ__CODE__DEPENDENCY_FAILED);
	complete_all();
	/* Reset: the next op runs, and a wait on it succeeds. */
	devq_timeline_reset(tl(s, 1));
	submit(s, 1, 5, 0, 0, NULL, NULL); /* (1,3) */
	ck_assert_int_ne(handed(0)->b.kind, DEVQ_BOP_FAIL);
	ck_assert_int_eq(handed(0)->b.code, 0);
	complete_all();
	ck_assert(!devq_timeline_failed(tl(s, 1), 3));
	ck_assert(devq_timeline_failed(tl(s, 1), 2));
	wp[0] = 3;
	submit(s, 2, 6, 0, 1, wq, wp);
	ck_assert_int_eq(handed(0)->b.code, 0);
	complete_all();
	engine_down();
}
END_TEST

/* The issue-14 wrong result: fail, reset, ok, reset submitted before any
 * completion.  The failed range of (1,1) ends at the reset in force when
 * it failed (point 2), not at the queue's latest reset (point 3): the
 * successful (1,2) must not read as failed. */
START_TEST(test_failure_range_ends_at_its_own_reset)
{
	struct devq_session *s = two_queues();
	submit(s, 1, 5, 0, 0, NULL, NULL); /* (1,1): will fail */
	devq_timeline_reset(tl(s, 1));
	submit(s, 1, 5, 0, 0, NULL, NULL); /* (1,2): will succeed */
	devq_timeline_reset(tl(s, 1));
	ck_assert_uint_eq(FK->n, 2);
	complete(0, DEVQ__CODE__DEVICE_ERROR);
	complete(0, 0);
	ck_assert(devq_timeline_failed(tl(s, 1), 1));
	ck_assert(!devq_timeline_failed(tl(s, 1), 2));
	uint32_t wq[] = { 1 };
	uint64_t wp[] = { 2 };
	submit(s, 2, 6, 0, 1, wq, wp);
	ck_assert_int_eq(handed(0)->b.code, 0);
	complete_all();
	/* And the next op of queue 1 (after the second reset) runs. */
	submit(s, 1, 5, 0, 0, NULL, NULL);
	ck_assert_int_eq(handed(0)->b.code, 0);
	complete_all();
	engine_down();
}
END_TEST

/* k disjoint failed ranges on queue 1: fail (2i+1), reset, ok (2i+2). */
static void fail_ranges(struct devq_session *s, unsigned k)
{
	for (unsigned i = 0; i < k; i++) {
		submit(s, 1, 5, 0, 0, NULL, NULL);
		complete(0, DEVQ__CODE__DEVICE_ERROR);
		devq_timeline_reset(tl(s, 1));
		submit(s, 1, 5, 0, 0, NULL, NULL);
		complete(0, 0);
	}
}

/* The code an op on queue 2 that waits on (1, p) completes with. */
static int wait_code(struct devq_session *s, uint64_t p)
{
	uint32_t wq[] = { 1 };
	uint64_t wp[] = { p };
	submit(s, 2, 6, 0, 1, wq, wp);
	int code = handed(0)->b.code;
	complete_all();
	return code;
}

/* Exactly DEVQ_FAIL_RANGES_MAX ranges: all remembered exactly. */
START_TEST(test_failure_ranges_at_bound)
{
	struct devq_session *s = two_queues();
	fail_ranges(s, DEVQ_FAIL_RANGES_MAX);
	ck_assert_uint_eq(tl(s, 1)->nfails, DEVQ_FAIL_RANGES_MAX);
	ck_assert_int_eq(wait_code(s, 1), DEVQ__CODE__DEPENDENCY_FAILED);
	ck_assert_int_eq(wait_code(s, 2), 0);
	ck_assert_int_eq(wait_code(s, 2 * DEVQ_FAIL_RANGES_MAX - 1), DEVQ__CODE__DEPENDENCY_FAILED);
	ck_assert_int_eq(wait_code(s, 2 * DEVQ_FAIL_RANGES_MAX), 0);
	engine_down();
}
END_TEST

/* One past the bound: the list stays bounded; the oldest range is
 * forgotten, and a wait on it is refused as too old rather than answered
 * wrongly either way. */
START_TEST(test_failure_ranges_past_bound)
{
	struct devq_session *s = two_queues();
	fail_ranges(s, DEVQ_FAIL_RANGES_MAX + 1);
	ck_assert_uint_le(tl(s, 1)->nfails, DEVQ_FAIL_RANGES_MAX);
	ck_assert_int_eq(wait_code(s, 1), DEVQ__CODE__FAILED_PRECONDITION);
	ck_assert_int_eq(wait_code(s, 2), 0);
	ck_assert_int_eq(wait_code(s, 3), DEVQ__CODE__DEPENDENCY_FAILED);
	/* The oldest went; the newest before the new one stays. */
	ck_assert_int_eq(wait_code(s, 2 * DEVQ_FAIL_RANGES_MAX - 1), DEVQ__CODE__DEPENDENCY_FAILED);
	ck_assert_int_eq(wait_code(s, 2 * DEVQ_FAIL_RANGES_MAX + 1), DEVQ__CODE__DEPENDENCY_FAILED);
	ck_assert_int_eq(wait_code(s, 2 * DEVQ_FAIL_RANGES_MAX + 2), 0);
	/* Adjacent failures share one range: no growth from a failing run. */
	unsigned n = tl(s, 1)->nfails;
	for (int i = 0; i < 10; i++) {
		submit(s, 1, 5, 0, 0, NULL, NULL);
		complete(0, DEVQ__CODE__DEVICE_ERROR);
		devq_timeline_reset(tl(s, 1));
	}
	ck_assert_uint_le(tl(s, 1)->nfails, n + 1);
	engine_down();
}
END_TEST

/* ---- memfds the daemon cannot read safely ----------------------------- */

/* A hugetlb memfd is refused at import with a clear error: a client can
 * punch a hole in it and hold every free huge page, and the daemon's next
 * read would die of SIGBUS; its mapping is also rounded to the huge page,
 * so a munmap of the declared size fails and leaks the pages.  Skipped
 * where the kernel has no MFD_HUGETLB; with vm.nr_hugepages = 0 the import
 * used to fail in mmap (RESOURCE_EXHAUSTED), with huge pages it succeeded. */
START_TEST(test_import_refuses_hugetlb_memfd)
{
	int fd = memfd_create("devq-test-huge", MFD_HUGETLB | MFD_ALLOW_SEALING | MFD_CLOEXEC);
	if (fd < 0) {
		printf("test_import_refuses_hugetlb_memfd: skipped, no MFD_HUGETLB: %s\n",
		       strerror(errno));
		return;
	}
	ck_assert_int_eq(ftruncate(fd, 2 << 20), 0);
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	engine_up((struct devq_config){ 0 });
	struct devq_session *s = session(1000);
	char err[200] = "";
	int r = devq_buffer_import(s, 1, 4096, true, fd, err, sizeof(err));
	ck_assert_msg(r == DEVQ__CODE__FAILED_PRECONDITION, "import: %d %s", r, err);
	ck_assert_ptr_nonnull(strstr(err, "hugetlb"));
	ck_assert_uint_eq(s->nbufs, 0);
	ck_assert_uint_eq(E.bytes_mapped, 0);
	/* An ordinary memfd, sealed alike, is accepted. */
	int ok = memfd_create("devq-test", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	ck_assert_int_ge(ok, 0);
	ck_assert_int_eq(ftruncate(ok, 4096), 0);
	ck_assert_int_eq(fcntl(ok, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	r = devq_buffer_import(s, 2, 4096, true, ok, err, sizeof(err));
	ck_assert_msg(r == 0, "import: %s", err);
	close(ok);
	close(fd);
	engine_down();
}
END_TEST

/* ---- fairness -------------------------------------------------------- */

/* Submits spin(ns) on queue q: an op that declares its device time. */
static void spin(struct devq_session *s, uint32_t q, uint64_t ns)
{
	Devq__Op op = DEVQ__OP__INIT;
	Devq__KernelOp k = DEVQ__KERNEL_OP__INIT;
	Devq__Arg a = DEVQ__ARG__INIT, *ap = &a;
	a.name = "ns";
	a.value_case = DEVQ__ARG__VALUE_U64;
	a.u64 = ns;
	k.executable = (uint32_t)(devq_kernel_find("spin") - devq_kernels);
	k.n_args = 1;
	k.args = &ap;
	op.queue = q;
	op.no_timing = untimed;
	op.replayable = replayable;
	op.body_case = DEVQ__OP__BODY_KERNEL;
	op.kernel = &k;
	char err[160];
	ck_assert_int_eq(devq_sched_submit(s, &op, 1, err, sizeof(err)), 0);
}

/* spin(ns) on queue q that also waits on (wq[i], wpoint[i]) of its
 * session, i < n (at most 4). */
static void spin_waits(struct devq_session *s, uint32_t q, uint64_t ns, unsigned n,
		       const uint32_t *wq, const uint64_t *wpoint)
{
	Devq__Op op = DEVQ__OP__INIT;
	Devq__KernelOp k = DEVQ__KERNEL_OP__INIT;
	Devq__Arg a = DEVQ__ARG__INIT, *ap = &a;
	Devq__Wait w[4], *wp[4];
	a.name = "ns";
	a.value_case = DEVQ__ARG__VALUE_U64;
	a.u64 = ns;
	k.executable = (uint32_t)(devq_kernel_find("spin") - devq_kernels);
	k.n_args = 1;
	k.args = &ap;
	ck_assert_uint_le(n, 4);
	for (unsigned i = 0; i < n; i++) {
		devq__wait__init(&w[i]);
		w[i].queue = wq[i];
		w[i].point = wpoint[i];
		wp[i] = &w[i];
	}
	op.queue = q;
	op.n_waits = n;
	op.waits = wp;
	op.replayable = replayable;
	op.body_case = DEVQ__OP__BODY_KERNEL;
	op.kernel = &k;
	char err[160];
	ck_assert_int_eq(devq_sched_submit(s, &op, 1, err, sizeof(err)), 0);
}

/* spin(ns) on queue q that also waits on (wq, wpoint) of its session. */
static void spin_after(struct devq_session *s, uint32_t q, uint64_t ns, uint32_t wq,
		       uint64_t wpoint)
{
	spin_waits(s, q, ns, 1, &wq, &wpoint);
}

/* The session of the op the fake backend received last. */
static struct devq_session *last_handed(void)
{
	return handed(FK->n - 1)->s;
}

/* Completes the oldest op and returns the session of the op that took its
 * room (NULL: none did). */
static struct devq_session *complete_and_refill(void)
{
	unsigned before = FK->enqueued;
	complete(0, 0);
	if (FK->enqueued == before)
		return NULL;
	ck_assert_uint_eq(FK->enqueued, before + 1);
	return last_handed();
}

/* An engine with one stream of fair_k rooms, and two tenants (uids 1000
 * and 1001) of one session each, with queue 1 open. */
static void two_tenants(unsigned fair_k, struct devq_session **a, struct devq_session **b)
{
	engine_up((struct devq_config){ .fair_k = fair_k, .streams = 1 });
	*a = session(1000);
	*b = session(1001);
	queue(*a, 1, 0);
	queue(*b, 1, 0);
}

/* As complete_and_refill, for the backend's k-th outstanding op. */
static struct devq_session *complete_and_refill_at(unsigned k)
{
	unsigned before = FK->enqueued;
	complete(k, 0);
	if (FK->enqueued == before)
		return NULL;
	ck_assert_uint_eq(FK->enqueued, before + 1);
	return last_handed();
}

/* Two levels: tenants by device time, then a tenant's sessions in turn.
 * Tenant A (uid 1000) has three sessions and tenant B (uid 1001) one; a
 * stream with room for fair-k = 2 ops goes to B every other time, however
 * many sessions A has, and A's sessions take turns between themselves. */
START_TEST(test_fairness_by_tenant)
{
	engine_up((struct devq_config){ .fair_k = 2, .streams = 1 });
	struct devq_session *a[3], *b = session(1001);
	for (int i = 0; i < 3; i++) {
		a[i] = session(1000);
		queue(a[i], 1, 0);
		buffer(a[i], 5, 64);
	}
	queue(b, 1, 0);
	buffer(b, 5, 64);
	ck_assert_ptr_eq(a[0]->tenant, a[2]->tenant);
	ck_assert_ptr_ne(a[0]->tenant, b->tenant);
	for (int i = 0; i < 6; i++)
		submit(a[0], 1, 5, 0, 0, NULL, NULL);
	/* fair-k ops on the stream, whoever they belong to. */
	ck_assert_uint_eq(FK->n, 2);
	for (int i = 0; i < 6; i++) {
		submit(a[1], 1, 5, 0, 0, NULL, NULL);
		submit(a[2], 1, 5, 0, 0, NULL, NULL);
	}
	for (int i = 0; i < 4; i++)
		submit(b, 1, 5, 0, 0, NULL, NULL);
	ck_assert_uint_eq(FK->n, 2);
	ck_assert_uint_eq(a[0]->tenant->fair.waiting, 16);
	ck_assert_uint_eq(b->tenant->fair.waiting, 4);
	/* The next 8 rooms: B's 4 ops every other time, A's sessions in turn. */
	struct devq_session *prev_a = NULL;
	unsigned nb = 0;
	for (int i = 0; i < 8; i++) {
		struct devq_session *s = complete_and_refill();
		ck_assert_ptr_nonnull(s);
		if (s == b) {
			nb++;
			continue;
		}
		ck_assert_msg(s != prev_a, "A's session %llu served twice in a row",
			      (unsigned long long)s->id);
		prev_a = s;
	}
	ck_assert_uint_eq(nb, 4);
	/* B has nothing left: it leaves the tenants that wait (A was
	 * first there, B after it), and A alone takes every room
	 * (work-conserving). */
	ck_assert(!b->tenant->fair.active);
	ck_assert_ptr_eq(E.fair.act_head, a[0]->tenant);
	ck_assert_ptr_eq(E.fair.act_tail, a[0]->tenant);
	for (int i = 0; i < 4; i++)
		ck_assert_ptr_eq(complete_and_refill()->tenant, a[0]->tenant);
	complete_all();
	ck_assert_uint_eq(FK->enqueued, 22);
	ck_assert_uint_eq(b->tenant->fair.ops_done, 4);
	engine_down();
}
END_TEST

/* The stream holds ops while their expected time is below the window:
 * a declared duration (spin's ns) counts as such; one op always goes to
 * an empty stream, however long. */
START_TEST(test_fairness_window_by_time)
{
	engine_up((struct devq_config){ .fair_k = 16, .streams = 1, .fair_window_ns = 1000000 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	/* 400 us each: 0, 400, 800 us inside before each hand-over, so
	 * three go (the third starts below the 1 ms window). */
	for (int i = 0; i < 5; i++)
		spin(s, 1, 400000);
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_uint_eq(E.fair.st[0].inside, (3ull << DEVQ_FAIR_OPS_SHIFT) + 1200000);
	complete(0, 0); /* 800 us left: room */
	ck_assert_uint_eq(FK->n, 3);
	complete_all();
	/* A 50 ms op goes alone to the empty stream; the next waits. */
	spin(s, 1, 50000000);
	spin(s, 1, 0);
	ck_assert_uint_eq(FK->n, 1);
	complete(0, 0);
	ck_assert_uint_eq(FK->n, 1);
	complete_all();
	engine_down();
}
END_TEST

/* Completes the n oldest ops of stream x (of any stream: x < 0) as a
 * backend thread would (each ran as long as it declared), then lets the
 * loop run once: n rooms at once. */
static void complete_stream_then_drain(int x, unsigned n)
{
	for (unsigned k = 0, i = 0; k < n; k++) {
		while (x >= 0 && handed(i)->b.stream != (unsigned)x)
			i++;
		struct devq_bop *op = FK->ops[i];
		memmove(&FK->ops[i], &FK->ops[i + 1], (FK->n - i - 1) * sizeof(FK->ops[0]));
		FK->n--;
		op->code = 0;
		op->t_start = op->t_handoff + 1;
		op->t_end = op->t_start + devq_job_of(op)->decl_ns;
		E.be->on_complete(E.be->ud, op);
	}
	devq_sched_drain(&E);
	flush_dirty();
}

/* The n oldest ops, whatever their streams. */
static void complete_n_then_drain(unsigned n)
{
	complete_stream_then_drain(-1, n);
}

/* Several rooms at once (two completions before the loop hands over):
 * the tenants still share them; a session takes a run of rooms without a
 * choice per op only when nobody else waits. */
START_TEST(test_fairness_rooms_at_once)
{
	struct devq_session *a, *b;
	two_tenants(4, &a, &b);
	for (int i = 0; i < 8; i++)
		spin(a, 1, 10000);
	ck_assert_uint_eq(FK->n, 4);
	for (int i = 0; i < 8; i++)
		spin(b, 1, 10000);
	unsigned nb = 0;
	for (int round = 0; round < 3; round++) {
		/* Two of the oldest complete, then the loop runs once. */
		unsigned before = FK->enqueued;
		complete_n_then_drain(2);
		ck_assert_uint_eq(FK->enqueued, before + 2);
		nb += (handed(FK->n - 1)->s == b) + (handed(FK->n - 2)->s == b);
	}
	/* B starts level with A's latest choice, so it may take a round's
	 * two rooms once; never all six. */
	ck_assert_msg(nb >= 2 && nb <= 4, "B got %u of 6 rooms", nb);
	complete_all();
	engine_down();
}
END_TEST

/* Four rooms at once with two tenants level: they alternate (each pick
 * charges the tenant, ties go to the one with fewer ops inside), not a
 * run to whoever was picked first, which only a lone session of a lone
 * tenant gets. */
START_TEST(test_fairness_no_run_when_shared)
{
	struct devq_session *a, *b;
	two_tenants(4, &a, &b);
	for (int i = 0; i < 8; i++)
		spin(a, 1, 10000); /* 4 go at once, 4 wait */
	for (int i = 0; i < 8; i++)
		spin(b, 1, 10000); /* all wait */
	ck_assert_uint_eq(FK->n, 4);
	/* B starts level with A's latest choice (3 of A's ops charged, A is
	 * at 4): B, then a tie that goes to A (fewer ops inside), and so on. */
	for (int batch = 0; batch < 2; batch++) {
		complete_n_then_drain(4);
		for (unsigned i = 0; i < 4; i++)
			ck_assert_msg(handed(i)->s == (i % 2 ? a : b),
				      "batch %d room %u went to %c", batch, i,
				      handed(i)->s == a ? 'A' : 'B');
	}
	complete_all();
	engine_down();
}
END_TEST

/* Completes the backend's k-th outstanding op as having run for ns on the
 * device (ns = 0 and start = 0: an op that was not timed, as on CUDA). */
static void complete_ran(unsigned k, int code, uint64_t ns, bool timed)
{
	ck_assert_uint_lt(k, FK->n);
	uint64_t start = timed ? FK->ops[k]->t_handoff + 1 : 0;
	complete_at(k, code, start, timed ? start + ns : 0);
}

/* Completes the backend's only outstanding op, successful, with the
 * device start and end stamps given (an end before the start: a backend
 * whose clock went wrong). */
static void complete_only_at(uint64_t start, uint64_t end)
{
	ck_assert_uint_eq(FK->n, 1);
	complete_at(0, 0, start, end);
}

/* An executable's expected time is learned from its timed ops: never
 * timed, fair-k of them fill the window; then an average over about the
 * last 8 (per 4 KiB page of arguments); failed ops teach nothing. */
START_TEST(test_fairness_learns_estimate)
{
	engine_up((struct devq_config){ .fair_k = 4, .streams = 1 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	buffer(s, 5, 64);
	submit(s, 1, 5, 0, 0, NULL, NULL);
	const struct devq_job *j = handed(0);
	uint64_t pages = 1 + j->arg_bytes / 4096;
	ck_assert_uint_eq(j->fest, E.fair.window_ns / 4);
	complete_ran(0, 0, 8000 * pages, true);
	ck_assert_uint_eq(E.fair.est_fill.ns16_per_page, 8000 * 16);
	submit(s, 1, 5, 0, 0, NULL, NULL);
	ck_assert_uint_eq(handed(0)->fest, 8000 * pages);
	complete_ran(0, 0, 16000 * pages, true);
	ck_assert_uint_eq(E.fair.est_fill.ns16_per_page, (7 * 8000 * 16 + 16000 * 16) / 8);
	submit(s, 1, 5, 0, 0, NULL, NULL);
	ck_assert_uint_eq(handed(0)->fest, 9000 * pages);
	/* A failed op's time says nothing of the executable's. */
	complete_ran(0, DEVQ__CODE__DEVICE_ERROR, 1000000 * pages, true);
	ck_assert_uint_eq(E.fair.est_fill.ns16_per_page, 9000 * 16);
	devq_timeline_reset(tl(s, 1));
	/* Nor does an untimed op's, nor a backend's end before its start. */
	submit(s, 1, 5, 0, 0, NULL, NULL);
	complete_ran(0, 0, 0, false);
	ck_assert_uint_eq(E.fair.est_fill.ns16_per_page, 9000 * 16);
	submit(s, 1, 5, 0, 0, NULL, NULL);
	complete_only_at(FK->ops[0]->t_handoff + 2, FK->ops[0]->t_handoff + 1);
	ck_assert_uint_eq(E.fair.est_fill.ns16_per_page, 9000 * 16);
	complete_all();
	engine_down();
}
END_TEST

/* Where timing is optional (CUDA), one untimed op in DEVQ_FAIR_SAMPLE of
 * an executable is timed anyway, so its estimate keeps learning; an op
 * that declares its duration (spin) needs no sample. */
START_TEST(test_fairness_samples_untimed_ops)
{
	engine_up((struct devq_config){ .fair_k = 4, .streams = 1 });
	ck_assert(!E.be->always_timed);
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	buffer(s, 5, 64);
	untimed = true;
	unsigned timed = 0;
	for (unsigned i = 0; i < 2 * DEVQ_FAIR_SAMPLE; i++) {
		submit(s, 1, 5, 0, 0, NULL, NULL);
		if (handed(0)->b.timed) {
			ck_assert_uint_eq(i % DEVQ_FAIR_SAMPLE, 0);
			timed++;
		}
		complete_ran(0, 0, 0, handed(0)->b.timed);
	}
	ck_assert_uint_eq(timed, 2);
	for (unsigned i = 0; i < DEVQ_FAIR_SAMPLE + 1; i++) {
		spin(s, 1, 1000);
		ck_assert(!handed(0)->b.timed);
		complete_ran(0, 0, 0, false);
	}
	untimed = false;
	/* Timed ops stay timed. */
	submit(s, 1, 5, 0, 0, NULL, NULL);
	ck_assert(handed(0)->b.timed);
	complete_all();
	engine_down();
}
END_TEST

/* An untimed op is charged to its tenant's device time at its estimate
 * (what it declared), not at nothing, and counts no wait. */
START_TEST(test_fairness_charges_untimed_at_estimate)
{
	engine_up((struct devq_config){ .fair_k = 4, .streams = 1 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	untimed = true;
	spin(s, 1, 5000);
	untimed = false;
	complete_ran(0, 0, 0, false);
	ck_assert_uint_eq(s->tenant->fair.device_ns, 5000);
	ck_assert_uint_eq(s->tenant->fair.waits, 0);
	spin(s, 1, 7000);
	complete(0, 0);
	ck_assert_uint_eq(s->tenant->fair.device_ns, 12000);
	ck_assert_uint_eq(s->tenant->fair.waits, 1);
	/* Timed at 0 ns: charged 0; an end before its start (a backend's
	 * clock gone wrong): charged the estimate. */
	spin(s, 1, 3000);
	complete_ran(0, 0, 0, true);
	ck_assert_uint_eq(s->tenant->fair.device_ns, 12000);
	spin(s, 1, 3000);
	complete_only_at(FK->ops[0]->t_handoff + 2, FK->ops[0]->t_handoff + 1);
	ck_assert_uint_eq(s->tenant->fair.device_ns, 15000);
	/* What ran corrects the charge made at hand-over: declared 1 us,
	 * ran 5 us, so 4 us more of virtual time (weight 1). */
	uint64_t fix = atomic_load(&s->tenant->fair.vt_fix);
	spin(s, 1, 1000);
	complete_ran(0, 0, 5000, true);
	ck_assert_uint_eq(atomic_load(&s->tenant->fair.vt_fix) - fix, 4000 * DEVQ_FAIR_VT_SCALE);
	engine_down();
}
END_TEST

/* Trust to run on the loop (fair.h): an op that took at most
 * DEVQ_FAIR_HERE_NS takes one strike away, one ns more takes none. */
START_TEST(test_fairness_here_score_at_bound)
{
	engine_up((struct devq_config){ .fair_k = 4, .streams = 1 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	struct devq_fair_est *e = &E.fair.est_builtin[devq_kernel_find("spin") - devq_kernels];
	atomic_store(&e->here_score, 3);
	spin(s, 1, DEVQ_FAIR_HERE_NS);
	complete(0, 0);
	ck_assert_uint_eq(atomic_load(&e->here_score), 2);
	spin(s, 1, DEVQ_FAIR_HERE_NS + 1);
	complete(0, 0);
	ck_assert_uint_eq(atomic_load(&e->here_score), 2);
	/* None to take away: stays 0. */
	atomic_store(&e->here_score, 0);
	spin(s, 1, 1000);
	complete(0, 0);
	ck_assert_uint_eq(atomic_load(&e->here_score), 0);
	/* A strike: an op that ran on the loop thread and took more than
	 * DEVQ_FAIR_HERE_OVER_NS; exactly that much, or off the loop, is
	 * none. */
	spin(s, 1, 1000);
	FK->ops[0]->ran_here = true;
	complete_ran(0, 0, DEVQ_FAIR_HERE_OVER_NS, true);
	ck_assert_uint_eq(atomic_load(&e->here_score), 0);
	spin(s, 1, 1000);
	complete_ran(0, 0, DEVQ_FAIR_HERE_OVER_NS + 1, true);
	ck_assert_uint_eq(atomic_load(&e->here_score), 0);
	spin(s, 1, 1000);
	FK->ops[0]->ran_here = true;
	complete_ran(0, 0, DEVQ_FAIR_HERE_OVER_NS + 1, true);
	ck_assert_uint_eq(atomic_load(&e->here_score), DEVQ_FAIR_HERE_STRIKE);
	engine_down();
}
END_TEST

/* A lone tenant's sessions take turns too: four rooms at once go to its
 * two sessions alternately, not as a run to whichever was served first
 * (the run without a choice per op is for a lone session only). */
START_TEST(test_fairness_lone_tenant_sessions_alternate)
{
	engine_up((struct devq_config){ .fair_k = 4, .streams = 1 });
	struct devq_session *a = session(1000), *b = session(1000);
	queue(a, 1, 0);
	queue(b, 1, 0);
	for (int i = 0; i < 8; i++)
		spin(a, 1, 10000);
	for (int i = 0; i < 8; i++)
		spin(b, 1, 10000);
	ck_assert_uint_eq(FK->n, 4);
	complete_n_then_drain(4);
	ck_assert_uint_eq(FK->n, 4);
	for (unsigned i = 1; i < 4; i++)
		ck_assert_msg(handed(i)->s != handed(i - 1)->s, "rooms %u and %u to one session",
			      i - 1, i);
	complete_all();
	engine_down();
}
END_TEST

/* Streams 0 and 1, fair-k 1.  Tenant A's session a1 waits on stream 0
 * and its session a2 on stream 1 (a2 ahead of nothing on stream 0);
 * tenant B waits on stream 0.  Stream 0's room is chosen among the
 * tenants with ops for it, whatever A's other sessions wait on. */
START_TEST(test_fairness_sessions_on_other_streams)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 2 });
	struct devq_session *a1 = session(1000), *a2 = session(1000), *b = session(1001);
	queue(a1, 1, 0);
	queue(a2, 1, 0);
	queue(b, 1, 0);
	ck_assert_uint_eq(tl(a1, 1)->stream, 0);
	ck_assert_uint_eq(tl(a2, 1)->stream, 1);
	ck_assert_uint_eq(tl(b, 1)->stream, 0);
	for (int i = 0; i < 3; i++)
		spin(a1, 1, 10000);
	for (int i = 0; i < 3; i++)
		spin(a2, 1, 10000);
	for (int i = 0; i < 2; i++)
		spin(b, 1, 10000);
	ck_assert_uint_eq(FK->n, 2);
	ck_assert_ptr_eq(a1->tenant->fair.rr_head, a1);
	ck_assert_ptr_eq(a1->tenant->fair.rr_tail, a2);
	unsigned nb = 0;
	for (int i = 0; i < 4; i++) {
		unsigned k = handed(0)->b.stream == 0 ? 0 : 1;
		struct devq_session *s = complete_and_refill_at(k);
		ck_assert_ptr_nonnull(s);
		ck_assert_ptr_ne(s, a2);
		nb += s == b;
	}
	ck_assert_uint_eq(nb, 2);
	complete_all();
	ck_assert_uint_eq(FK->enqueued, 8);
	engine_down();
}
END_TEST

/* An op that waits for an op not yet handed over holds no room: another
 * tenant's op for the same idle stream goes at once. */
START_TEST(test_fairness_waiting_dependency_holds_no_room)
{
	/* Weight 64 for the tenant whose op is held: it is the one the room
	 * goes to by virtual time, so the others must be asked next. */
	engine_up((struct devq_config){ .fair_k = 1, .streams = 2, .fair_shares = "1000:64" });
	struct devq_session *s = session(1000), *b = session(1001);
	queue(s, 1, 0);
	queue(s, 2, 0);
	queue(b, 1, 0);
	buffer(s, 5, 64);
	buffer(s, 6, 64);
	buffer(b, 5, 64);
	ck_assert_uint_eq(tl(s, 1)->stream, 0);
	ck_assert_uint_eq(tl(s, 2)->stream, 1);
	ck_assert_uint_eq(tl(b, 1)->stream, 0);
	submit(s, 2, 6, 0, 0, NULL, NULL); /* stream 1: runs */
	submit(s, 2, 6, 0, 0, NULL, NULL); /* stream 1: waits for room */
	uint32_t wq = 2;
	uint64_t wp = 2;
	submit(s, 1, 5, 0, 1, &wq, &wp); /* stream 0: waits for (2, 2) */
	ck_assert_uint_eq(FK->n, 1);
	submit(b, 1, 5, 0, 0, NULL, NULL);
	ck_assert_uint_eq(FK->n, 2);
	ck_assert_ptr_eq(handed(1)->s, b);
	ck_assert_uint_eq(handed(1)->b.stream, 0);
	complete_all();
	ck_assert_uint_eq(FK->enqueued, 4);
	engine_down();
}
END_TEST

/* What the backend is told to go by to run an op on the loop thread
 * (b.expect_ns): a declared duration, or an estimate once one was learned;
 * never for an executable never timed, nor once its strikes pass
 * DEVQ_FAIR_HERE_DISTRUST; and an op that only fails runs nothing. */
START_TEST(test_fairness_expect_for_loop)
{
	engine_up((struct devq_config){ .fair_k = 4, .streams = 1 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	buffer(s, 5, 64);
	submit(s, 1, 5, 0, 0, NULL, NULL);
	uint64_t pages = 1 + handed(0)->arg_bytes / 4096;
	ck_assert_uint_eq(handed(0)->b.expect_ns, UINT64_MAX);
	complete_ran(0, 0, 0, true); /* 0 ns: learned as the least, not as never */
	ck_assert_uint_eq(E.fair.est_fill.ns16_per_page, 1);
	submit(s, 1, 5, 0, 0, NULL, NULL);
	ck_assert_uint_eq(handed(0)->b.expect_ns, handed(0)->fest);
	ck_assert_uint_eq(handed(0)->fest, 1 * pages / 16);
	complete_ran(0, 0, 8000 * pages, true);
	submit(s, 1, 5, 0, 0, NULL, NULL);
	ck_assert_uint_eq(handed(0)->b.expect_ns, handed(0)->fest);
	ck_assert_uint_ne(handed(0)->fest, 0);
	complete_all();
	struct devq_fair_est *e = &E.fair.est_builtin[devq_kernel_find("spin") - devq_kernels];
	spin(s, 1, 1000);
	ck_assert_uint_eq(handed(0)->b.expect_ns, 1000);
	complete_all();
	atomic_store(&e->here_score, DEVQ_FAIR_HERE_DISTRUST);
	spin(s, 1, 1000);
	ck_assert_uint_eq(handed(0)->b.expect_ns, 1000);
	complete_all(); /* 1 us: one strike off */
	atomic_store(&e->here_score, DEVQ_FAIR_HERE_DISTRUST + 1);
	spin(s, 1, 1000);
	ck_assert_uint_eq(handed(0)->b.expect_ns, UINT64_MAX);
	complete_all();
	engine_down();
}
END_TEST

/* A backend that refuses an op: the op fails with the reason, in order,
 * and its room is given back (the next op goes once it is accepted). */
START_TEST(test_fairness_enqueue_refused)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 1 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	FK->refuse = -EIO;
	spin(s, 1, 1000);
	FK->refuse = 0;
	ck_assert_uint_eq(FK->n, 0);
	devq_sched_drain(&E);
	flush_dirty();
	struct devq_timeline *q = tl(s, 1);
	ck_assert_uint_eq(q->completed, 1);
	ck_assert_uint_eq(E.ops_failed, 1);
	ck_assert_uint_eq(E.fair.st[0].inside, 0);
	devq_timeline_reset(q);
	/* The errno nearest 0 (EPERM, -1) is a refusal too. */
	FK->refuse = -EPERM;
	spin(s, 1, 1000);
	FK->refuse = 0;
	devq_sched_drain(&E);
	flush_dirty();
	ck_assert_uint_eq(q->completed, 2);
	ck_assert_uint_eq(E.ops_failed, 2);
	ck_assert_uint_eq(E.fair.st[0].inside, 0);
	devq_timeline_reset(q);
	spin(s, 1, 1000);
	ck_assert_uint_eq(FK->n, 1);
	complete_all();
	engine_down();
}
END_TEST

/* The window by time at its edge: a stream whose ops inside are expected
 * to take exactly the window has no room; one ns less has. */
START_TEST(test_fairness_window_at_bound)
{
	engine_up((struct devq_config){ .fair_k = 16, .streams = 1, .fair_window_ns = 1000000 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	spin(s, 1, 500000);
	spin(s, 1, 500000);
	spin(s, 1, 1);
	ck_assert_uint_eq(FK->n, 2); /* 1 000 000 inside: full */
	complete_all();
	spin(s, 1, 999999);
	spin(s, 1, 1);
	ck_assert_uint_eq(FK->n, 2); /* 999 999 inside: room for one */
	spin(s, 1, 1);
	ck_assert_uint_eq(FK->n, 2);
	complete_all();
	engine_down();
}
END_TEST

/* A replayable op may pass fair-k (its batch goes as one): a stream full
 * by count takes it when it is the choice, and still not the ordinary op
 * waiting beside it. */
START_TEST(test_fairness_replay_passes_count)
{
	struct devq_session *a, *b;
	two_tenants(1, &a, &b);
	spin(a, 1, 10000);
	spin(a, 1, 10000);
	ck_assert_uint_eq(FK->n, 1);
	replayable = true;
	spin(b, 1, 10000);
	replayable = false;
	ck_assert_uint_eq(FK->n, 2);
	ck_assert_ptr_eq(handed(1)->s, b);
	ck_assert_uint_eq(a->tenant->fair.waiting, 1);
	complete_all();
	engine_down();
}
END_TEST

/* A tenant that comes back after idling starts level with the latest
 * choice even when its first op goes straight to an idle stream: it
 * earned no credit meanwhile, so it shares the busy stream's rooms with
 * the tenant that kept it busy instead of taking them all. */
START_TEST(test_fairness_no_credit_for_idling)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 2 });
	struct devq_session *a = session(1000), *b = session(1001);
	queue(a, 1, 0);
	queue(b, 1, 0);
	queue(b, 2, 0);
	ck_assert_uint_eq(tl(a, 1)->stream, 0);
	ck_assert_uint_eq(tl(b, 1)->stream, 1);
	ck_assert_uint_eq(tl(b, 2)->stream, 0);
	for (int i = 0; i < 10; i++) { /* A alone for a while */
		spin(a, 1, 10000);
		complete_all();
	}
	for (int i = 0; i < 6; i++)
		spin(a, 1, 10000);
	spin(b, 1, 10000); /* straight to idle stream 1 */
	ck_assert_uint_eq(FK->n, 2);
	for (int i = 0; i < 4; i++)
		spin(b, 2, 10000);
	unsigned nb = 0;
	for (int i = 0; i < 4; i++) {
		unsigned k = handed(0)->b.stream == 0 ? 0 : 1;
		struct devq_session *s = complete_and_refill_at(k);
		ck_assert_ptr_nonnull(s);
		nb += s == b;
	}
	ck_assert_msg(nb <= 2, "B took %u of 4 rooms after idling", nb);
	complete_all();
	engine_down();
}
END_TEST

/* A tenant's long op on one stream counts against it on the others: B
 * keeps stream 0 busy; A hands a 10 ms op to idle stream 1, then queues
 * short ops for stream 0.  B's waiting ops take stream 0's next rooms,
 * though A has fewer ops inside. */
START_TEST(test_fairness_long_op_elsewhere_counts)
{
	engine_up((struct devq_config){ .fair_k = 3, .streams = 2 });
	struct devq_session *a = session(1000), *b = session(1001);
	queue(b, 1, 0);
	queue(a, 1, 0);
	queue(a, 2, 0);
	ck_assert_uint_eq(tl(b, 1)->stream, 0);
	ck_assert_uint_eq(tl(a, 1)->stream, 1);
	ck_assert_uint_eq(tl(a, 2)->stream, 0);
	for (int i = 0; i < 7; i++)
		spin(b, 1, 10000);
	ck_assert_uint_eq(FK->n, 3);
	spin(a, 1, 10000000);
	ck_assert_uint_eq(FK->n, 4);
	for (int i = 0; i < 4; i++)
		spin(a, 2, 10000);
	for (int i = 0; i < 4; i++) {
		unsigned k = 0;
		while (handed(k)->b.stream != 0)
			k++;
		struct devq_session *s = complete_and_refill_at(k);
		ck_assert_msg(s == b, "room %d of stream 0 went to %s", i, s == a ? "A" : "none");
	}
	complete_all();
	engine_down();
}
END_TEST

/* Virtual time decides to the unit: a tenant one unit (1/64 ns at weight
 * 1) behind another gets the room, whichever waits first; level, with as
 * many ops inside, the one that waited first does. */
START_TEST(test_fairness_vt_by_one)
{
	struct devq_session *a, *b;
	two_tenants(1, &a, &b);
	for (int round = 0; round < 3; round++) {
		spin(a, 1, 10000);
		spin(a, 1, 10000);
		spin(b, 1, 10000);
		ck_assert_uint_eq(FK->n, 1);
		struct devq_fair_tenant *ta = &a->tenant->fair, *tb = &b->tenant->fair;
		uint64_t va = ta->vt + atomic_load(&ta->vt_fix);
		/* Round 0: B one unit behind A; round 1: one unit ahead;
		 * round 2: level (and neither has an op inside once A's
		 * completes). */
		static const int64_t by[] = { -1, 1, 0 };
		tb->vt = va + (uint64_t)by[round] - atomic_load(&tb->vt_fix);
		ck_assert_ptr_eq(complete_and_refill(), round ? a : b);
		complete_all();
	}
	engine_down();
}
END_TEST

/* The loop's flush (devq_fair_flush_loop) reaches a backend that cannot
 * run ops on the loop thread, and says no time was spent there. */
START_TEST(test_fairness_loop_flush)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 1 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	spin(s, 1, 1000);
	unsigned before = FK->flushes;
	ck_assert_uint_eq(devq_fair_flush_loop(&E), 0);
	ck_assert_uint_eq(FK->flushes, before + 1);
	complete_all();
	engine_down();
}
END_TEST

/* A wait (device start - daemon receipt) is counted when the op started
 * after its receipt, not when it started at it; the longest is kept to
 * the ns. */
START_TEST(test_fairness_wait_counted)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 1 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	struct devq_fair_tenant *t = &s->tenant->fair;
	for (uint64_t start = 1; start <= 3; start++) {
		spin(s, 1, 1000);
		ck_assert_uint_eq(devq_job_of(FK->ops[0])->t_received, 1); /* try_submit's */
		complete_only_at(start, start + 1000);
		ck_assert_uint_eq(t->waits, start - 1);
		ck_assert_uint_eq(t->wait_max_ns, start - 1);
	}
	ck_assert_uint_eq(t->wait_ns, 1 + 2);
	engine_down();
}
END_TEST

/* The choice goes by when each tenant's turn would end with its next op
 * charged, not by where it stands now: A is 1 us behind B in virtual
 * time but its next op takes 10 ms, B's 1 us; B goes first. */
START_TEST(test_fairness_next_op_cost)
{
	struct devq_session *a, *b;
	two_tenants(1, &a, &b);
	spin(a, 1, 1000);
	spin(a, 1, 10000000);
	spin(b, 1, 1000);
	ck_assert_uint_eq(FK->n, 1);
	struct devq_fair_tenant *ta = &a->tenant->fair, *tb = &b->tenant->fair;
	uint64_t va = ta->vt + atomic_load(&ta->vt_fix);
	tb->vt = va + 1000 * DEVQ_FAIR_VT_SCALE - atomic_load(&tb->vt_fix);
	ck_assert_ptr_eq(complete_and_refill(), b);
	complete_all();
	engine_down();
}
END_TEST

/* A tenant that is owed time (behind the latest choice) keeps its lead
 * when it submits more: only a tenant with nothing in the daemon is
 * brought level (it earned nothing while idle). */
START_TEST(test_fairness_owed_keeps_lead)
{
	struct devq_session *a, *b;
	two_tenants(1, &a, &b);
	spin(a, 1, 1000);
	spin(a, 1, 1000);
	spin(b, 1, 1000);
	ck_assert_uint_eq(FK->n, 1);
	struct devq_fair_tenant *ta = &a->tenant->fair, *tb = &b->tenant->fair;
	ta->vt = E.fair.vnow - atomic_load(&ta->vt_fix);
	tb->vt = E.fair.vnow - 5000 * DEVQ_FAIR_VT_SCALE - atomic_load(&tb->vt_fix);
	spin(b, 1, 1000);
	ck_assert_uint_eq(tb->vt + atomic_load(&tb->vt_fix),
			  E.fair.vnow - 5000 * DEVQ_FAIR_VT_SCALE);
	ck_assert_ptr_eq(complete_and_refill(), b);
	complete_all();
	engine_down();
}
END_TEST

/* A tenant's sessions keep their turn when one of them hands an op
 * straight to an idle stream: A and B (one tenant) wait on stream 0, A
 * first; A's op for idle stream 1 goes at once and A stays first. */
START_TEST(test_fairness_turn_kept_by_straight_handover)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 2 });
	struct devq_session *a = session(1000), *b = session(1000);
	queue(a, 1, 0);
	queue(a, 2, 0);
	queue(b, 1, 0);
	ck_assert_uint_eq(tl(a, 1)->stream, 0);
	ck_assert_uint_eq(tl(a, 2)->stream, 1);
	ck_assert_uint_eq(tl(b, 1)->stream, 0);
	spin(a, 2, 1000); /* stream 1 busy, so that B's queue stays on 0 */
	spin(a, 1, 1000);
	spin(a, 1, 1000); /* waits */
	spin(b, 1, 1000); /* waits, after A in the turn */
	ck_assert_uint_eq(FK->n, 2);
	ck_assert_ptr_eq(a->tenant->fair.rr_head, a);
	complete(handed(0)->b.stream == 1 ? 0 : 1, 0); /* stream 1 idle again */
	spin(a, 2, 1000); /* straight to stream 1 */
	ck_assert_uint_eq(handed(FK->n - 1)->b.stream, 1);
	ck_assert_ptr_eq(a->tenant->fair.rr_head, a);
	ck_assert_ptr_eq(complete_and_refill_at(handed(0)->b.stream == 0 ? 0 : 1), a);
	complete_all();
	engine_down();
}
END_TEST

/* engine_up, with the fake backend's enqueue_chain when chain is set. */
static void engine_up_chain(struct devq_config cfg, bool chain)
{
	engine_up(cfg);
	if (chain)
		fake_use_chain();
}

/* Submits n spin(ns) on queue q, replayable where replay_at == i. */
static void spins(struct devq_session *s, uint32_t q, unsigned n, uint64_t ns, int replay_at)
{
	for (unsigned i = 0; i < n; i++) {
		replayable = (int)i == replay_at;
		spin(s, q, ns);
	}
	replayable = false;
}

/* A session of uid with a completion page (its fds closed: the engine
 * keeps its own mapping) and queue 1, which gets a slot in it. */
static struct devq_session *session_paged(uid_t uid)
{
	struct devq_session *s = session(uid);
	int fds[4];
	ck_assert_int_eq(devq_cpage_create(4, false, &s->cpage, fds), 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(close(fds[i]), 0);
	queue(s, 1, 0);
	ck_assert_ptr_nonnull(tl(s, 1)->cslot);
	return s;
}

/* On a backend that refills from its completing thread, a completion
 * there hands the session's next op over at once, a run where rooms
 * allow. */
static void completer_refills(bool chain)
{
	engine_up_chain((struct devq_config){ .fair_k = 1, .streams = 1 }, chain);
	FK->be.enqueue_any_thread = true;
	struct devq_session *s = session_paged(1000);
	spin(s, 1, 1000);
	spin(s, 1, 1000);
	ck_assert_uint_eq(FK->n, 1);
	complete(0, 0); /* hands the second over, from the "completer" */
	ck_assert_uint_eq(FK->n, 1);
	complete_all();
	engine_down();

	/* Two rooms from one completer, fair-k 4: the second completion
	 * refills (half free), a run of two. */
	engine_up_chain((struct devq_config){ .fair_k = 4, .streams = 1 }, chain);
	FK->be.enqueue_any_thread = true;
	s = session_paged(1000);
	spins(s, 1, 6, 1000, -1);
	ck_assert_uint_eq(FK->n, 4);
	complete(0, 0);
	ck_assert_uint_eq(FK->n, 3);
	complete(0, 0);
	ck_assert_uint_eq(FK->n, 4);
	complete_all();
	engine_down();
}

/* Through the backend's enqueue_chain too (a burst arms the loop's lazy
 * poll only when built on the loop). */
START_TEST(test_fairness_completer_refills)
{
	completer_refills(false);
	completer_refills(true);
}
END_TEST

/* A completion reported by a backend thread other than the loop's. */
static void *completer_main(void *arg)
{
	E.be->on_complete(E.be->ud, arg);
	return NULL;
}

static void complete_elsewhere(unsigned k)
{
	struct devq_bop *b = take_op(k);
	b->code = 0;
	b->t_start = b->t_handoff + 1;
	b->t_end = b->t_start + 1;
	pthread_t th;
	ck_assert_int_eq(pthread_create(&th, NULL, completer_main, b), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
}

/* The loop's lazy poll (engine.h, cmpl_parked).  Parked, as at start, a
 * completion published in a page wakes the loop; polling, it does not,
 * and the drain counts it; parking with one waiting says so; one reported
 * on the loop thread wakes nothing and asks for a drain (drain_due). */
START_TEST(test_lazy_poll_parks)
{
	engine_up((struct devq_config){ .fair_k = 4, .streams = 1 });
	struct devq_session *s = session_paged(1000);
	spins(s, 1, 4, 1000, -1);
	ck_assert_uint_eq(FK->n, 4);

	wakes = 0;
	complete_elsewhere(0); /* parked: wakes the loop */
	ck_assert_uint_eq(wakes, 1);
	ck_assert_uint_eq(devq_sched_drain(&E), 1);
	ck_assert(!devq_sched_park(&E)); /* nothing waiting */

	devq_sched_unpark(&E); /* the poll runs: no wake-up */
	complete_elsewhere(0);
	ck_assert_uint_eq(wakes, 1);
	ck_assert(devq_sched_park(&E)); /* it waits for a drain */
	ck_assert_uint_eq(devq_sched_drain(&E), 1);

	E.drain_due = false;
	complete(0, 0); /* on the loop thread, parked: no wake-up either */
	ck_assert_uint_eq(wakes, 1);
	ck_assert(E.drain_due);
	E.drain_due = false;

	devq_sched_unpark(&E);
	complete_elsewhere(0);
	ck_assert_uint_eq(wakes, 1);
	ck_assert_uint_eq(devq_sched_drain(&E), 1);
	ck_assert_uint_eq(devq_sched_drain(&E), 0); /* counted once */
	devq_sched_park(&E);
	engine_down();
}
END_TEST


/* Every op handed to stream x so far, in order, is on queue q with points
 * first, first + 1, ...; how many. */
static unsigned handed_in_order(unsigned x, uint32_t q, uint64_t first)
{
	unsigned n = 0;
	for (unsigned i = 0; i < FK->n; i++) {
		const struct devq_job *j = handed(i);
		if (j->b.stream != x)
			continue;
		ck_assert_uint_eq(j->q->id, q);
		ck_assert_uint_eq(j->point, first + n);
		n++;
	}
	return n;
}

/* The ops of one frame (a batch) go to fairness as one list; the ops of
 * it for one stream wait as one run (fair.c enqueue_run), each stream's
 * in order, and every count comes out as op by op.  Streams 0 and 1 (queues
 * 1 and 2), fair-k 2: 3 ops for stream 0, 3 for stream 1, 2 more for
 * stream 0, two of them replayable. */
START_TEST(test_fairness_batch_waits_as_runs)
{
	engine_up((struct devq_config){ .fair_k = 2, .streams = 2 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	queue(s, 2, 0);
	ck_assert_uint_eq(tl(s, 1)->stream, 0);
	ck_assert_uint_eq(tl(s, 2)->stream, 1);
	struct devq_tenant *t = s->tenant;
	devq_sched_batch_begin(&E);
	for (int i = 0; i < 3; i++)
		spin(s, 1, 10000);
	replayable = true;
	spin(s, 2, 10000);
	replayable = false;
	for (int i = 0; i < 2; i++)
		spin(s, 2, 10000);
	spin(s, 1, 10000);
	replayable = true;
	spin(s, 1, 10000);
	replayable = false;
	ck_assert_uint_eq(FK->n, 0);
	devq_sched_batch_end(&E);
	/* Two each; stream 0's third (point 3) and the two after it wait,
	 * as does stream 1's third.  Stream 1 took its replayable op. */
	ck_assert_uint_eq(FK->n, 4);
	ck_assert_uint_eq(handed_in_order(0, 1, 1), 2);
	ck_assert_uint_eq(handed_in_order(1, 2, 1), 2);
	ck_assert_uint_eq(s->fair.waiting, 4);
	ck_assert_uint_eq(t->fair.waiting, 4);
	ck_assert_uint_eq(t->fair.waiting_on[0], 3);
	ck_assert_uint_eq(t->fair.waiting_on[1], 1);
	ck_assert_uint_eq(t->fair.queued_ns, 40000);
	ck_assert_uint_eq(E.fair.waiting, 4);
	ck_assert_uint_eq(atomic_load(&E.fair.st[0].waiting), 3);
	ck_assert_uint_eq(atomic_load(&E.fair.st[1].waiting), 1);
	ck_assert_uint_eq(E.fair.st[0].waiting_replay, 1);
	ck_assert_uint_eq(E.fair.st[1].waiting_replay, 0);
	ck_assert(s->fair.lanes[0].tail->b.replay);
	ck_assert_uint_eq(s->fair.lanes[0].head->point, 3);
	ck_assert_uint_eq(s->fair.lanes[0].tail->point, 5);
	ck_assert_ptr_null(s->fair.lanes[0].tail->fnext);
	ck_assert_uint_eq(s->fair.lanes[1].head->point, 3);
	ck_assert(s->fair.in_rr && t->fair.active);
	/* Stream 0's replayable op passes the count once it heads the lane:
	 * all are handed, each stream's in order. */
	complete_all();
	ck_assert_uint_eq(FK->enqueued, 8);
	ck_assert_uint_eq(s->fair.waiting, 0);
	ck_assert_uint_eq(t->fair.waiting, 0);
	ck_assert_uint_eq(t->fair.queued_ns, 0);
	ck_assert_uint_eq(E.fair.waiting, 0);
	ck_assert_uint_eq(E.fair.st[0].waiting_replay, 0);
	ck_assert(!s->fair.in_rr && !t->fair.active);
	ck_assert_ptr_null(E.fair.act_head);
	engine_down();
}
END_TEST

/* A lone session's refill goes as a run (fair.c take_run), through the
 * backend's enqueue_chain or op by op: up to the count, exactly (fair-k
 * 4: three rooms take three ops, not four), and to the window by time
 * (250 us ops, 1 ms: the op that would start at 1 ms waits). */
static void run_to_count_and_window(bool chain)
{
	engine_up_chain((struct devq_config){ .fair_k = 4, .streams = 1 }, chain);
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	spins(s, 1, 10, 1000, -1);
	ck_assert_uint_eq(FK->n, 4);
	complete_n_then_drain(3);
	ck_assert_uint_eq(FK->n, 4);
	ck_assert_uint_eq(handed_in_order(0, 1, 4), 4);
	ck_assert_uint_eq(E.fair.st[0].inside, (4ull << DEVQ_FAIR_OPS_SHIFT) + 4000);
	ck_assert_uint_eq(s->fair.waiting, 3);
	ck_assert_uint_eq(s->tenant->fair.handed, 7);
	complete_all();
	ck_assert_uint_eq(FK->enqueued, 10);
	engine_down();

	engine_up_chain((struct devq_config){ .fair_k = 16, .streams = 1, .fair_window_ns = 1000000 },
			chain);
	s = session(1000);
	queue(s, 1, 0);
	spins(s, 1, 8, 250000, -1); /* 0, 250, 500, 750 us inside: four go */
	ck_assert_uint_eq(FK->n, 4);
	complete_n_then_drain(2); /* 500 us inside: two more, to 1 ms */
	ck_assert_uint_eq(FK->n, 4);
	ck_assert_uint_eq(handed_in_order(0, 1, 3), 4);
	ck_assert_uint_eq(E.fair.st[0].inside, (4ull << DEVQ_FAIR_OPS_SHIFT) + 1000000);
	complete_all();
	ck_assert_uint_eq(FK->enqueued, 8);
	engine_down();
}

START_TEST(test_fairness_run_to_count_and_window)
{
	run_to_count_and_window(false);
	run_to_count_and_window(true);
}
END_TEST

/* A run stops at an op that waits for one not yet handed over, and at a
 * replayable op (fill's own choice, which keeps its count); what is left
 * goes once that op is handed.  Through enqueue_chain or op by op. */
static void run_stops(bool chain)
{
	/* Streams 0 and 1 (queues 1 and 2), fair-k 3, one session. */
	engine_up_chain((struct devq_config){ .fair_k = 3, .streams = 2 }, chain);
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	queue(s, 2, 0);
	buffer(s, 5, 64);
	buffer(s, 6, 64);
	for (int i = 0; i < 4; i++)
		submit(s, 2, 6, 0, 0, NULL, NULL); /* stream 1: 1-3 go, 4 waits */
	for (int i = 0; i < 4; i++)
		submit(s, 1, 5, 0, 0, NULL, NULL); /* stream 0: 1-3 go, 4 waits */
	uint32_t wq = 2;
	uint64_t wp = 4;
	submit(s, 1, 5, 0, 1, &wq, &wp); /* 5 waits for stream 1's point 4 */
	submit(s, 1, 5, 0, 0, NULL, NULL); /* 6 */
	ck_assert_uint_eq(FK->n, 6);
	/* Stream 0's three rooms at once: 4 goes, the run stops at 5. */
	complete_stream_then_drain(0, 3);
	ck_assert_uint_eq(FK->n, 4);
	ck_assert_uint_eq(handed_in_order(0, 1, 4), 1);
	ck_assert_uint_eq(s->fair.waiting, 3);
	ck_assert_uint_eq(s->fair.lanes[0].head->point, 5);
	/* Stream 1's point 4 handed: 5 and 6 follow on stream 0. */
	complete_stream_then_drain(1, 1);
	ck_assert_uint_eq(handed_in_order(1, 2, 2), 3);
	ck_assert_uint_eq(handed_in_order(0, 1, 4), 3);
	ck_assert_uint_eq(s->fair.waiting, 0);
	complete_all();
	ck_assert_uint_eq(FK->enqueued, 10);
	engine_down();

	/* One stream, fair-k 3: 1-3 go; 4, replayable 5 and 6 wait. */
	engine_up_chain((struct devq_config){ .fair_k = 3, .streams = 1 }, chain);
	s = session(1000);
	queue(s, 1, 0);
	spins(s, 1, 6, 1000, 4);
	ck_assert_uint_eq(E.fair.st[0].waiting_replay, 1);
	/* Two rooms: 4, then 5 by fill's choice, which counts it out. */
	complete_stream_then_drain(0, 2);
	ck_assert_uint_eq(handed_in_order(0, 1, 3), 3);
	ck_assert_uint_eq(E.fair.st[0].waiting_replay, 0);
	ck_assert_uint_eq(s->fair.waiting, 1);
	complete_all();
	ck_assert_uint_eq(FK->enqueued, 6);
	engine_down();
}

START_TEST(test_fairness_run_stops)
{
	run_stops(false);
	run_stops(true);
}
END_TEST

/* Replayable ops pass fair-k by at most DEVQ_FAIR_REPLAY_MAX (1024): of
 * 1100 of 1 ns each, fair-k 16, the stream takes 1040 and 60 wait. */
START_TEST(test_fairness_replay_cap)
{
	engine_up((struct devq_config){ .fair_k = 16, .streams = 1 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	replayable = true;
	for (int i = 0; i < 1100; i++)
		spin(s, 1, 1);
	replayable = false;
	ck_assert_uint_eq(FK->n, 16 + 1024);
	ck_assert_uint_eq(s->tenant->fair.waiting, 60);
	complete_all();
	engine_down();
}
END_TEST

/* fair-shares: user:weight entries, weights 1..64, at most 64 entries of
 * at most 127 characters; anything else refused naming the entry. */
START_TEST(test_fair_shares_parse)
{
	struct devq_fair f;
	char err[200], list[64 * 8 + 16], entry[200];
	ck_assert_int_eq(devq_fair_init(&f, "1000:1, 1001:64", err, sizeof(err)), 0);
	ck_assert_uint_eq(f.nshares, 2);
	ck_assert_uint_eq(f.share[1], 64);
	ck_assert_int_eq(devq_fair_init(&f, "1000:65", err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "1000:65"), "%s", err);
	ck_assert_int_eq(devq_fair_init(&f, "1000:0", err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(devq_fair_init(&f, "1000", err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(devq_fair_init(&f, "1000:2x", err, sizeof(err)), -EINVAL);
	ck_assert_int_eq(devq_fair_init(&f, "no-such-user-here:2", err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "no user named"), "%s", err);
	/* A name that starts with digits is a name, not the uid it starts
	 * with. */
	ck_assert_int_eq(devq_fair_init(&f, "12no-such-user:2", err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "no user named '12no-such-user'"), "%s", err);
	/* 64 entries, then 65. */
	size_t n = 0;
	for (int i = 0; i < 64; i++)
		n += (size_t)snprintf(list + n, sizeof(list) - n, "%s%d:2", i ? "," : "", 2000 + i);
	ck_assert_int_eq(devq_fair_init(&f, list, err, sizeof(err)), 0);
	ck_assert_uint_eq(f.nshares, 64);
	snprintf(list + n, sizeof(list) - n, ",3000:2");
	ck_assert_int_eq(devq_fair_init(&f, list, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "more than 64"), "%s", err);
	/* An entry of 127 characters is read (and found not to be a user); 128
	 * is too long. */
	memset(entry, '0', sizeof(entry));
	memcpy(entry + 125, ":2", 3); /* 127 characters: uid 000...0 */
	ck_assert_int_eq(devq_fair_init(&f, entry, err, sizeof(err)), 0);
	ck_assert_uint_eq(f.share_uid[0], 0);
	memset(entry, '0', sizeof(entry));
	memcpy(entry + 126, ":2", 3); /* 128 */
	ck_assert_int_eq(devq_fair_init(&f, entry, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "too long"), "%s", err);
}
END_TEST

/* A grant's shares become the tenant's weight, clamped to 1..64 whatever
 * the caller passes (a weight of 0 would divide by zero), and a new grant
 * replaces the old weight. */
START_TEST(test_fair_grant_weight_clamped)
{
	engine_up((struct devq_config){ 0 });
	struct devq_tenant *t;
	ck_assert_int_eq(devq_tenant_grant(&E, "job-1", 2000, 5, 10, 0, false, &t), 0);
	ck_assert_uint_eq(t->fair.weight, 5);
	ck_assert_int_eq(devq_tenant_grant(&E, "job-1", 2000, 0, 10, 0, false, &t), 0);
	ck_assert_uint_eq(t->fair.weight, 1);
	ck_assert_int_eq(devq_tenant_grant(&E, "job-1", 2000, 1, 10, 0, false, &t), 0);
	ck_assert_uint_eq(t->fair.weight, 1);
	ck_assert_int_eq(devq_tenant_grant(&E, "job-1", 2000, DEVQ_FAIR_MAX_WEIGHT, 64, 0, false,
					       &t),
			 0);
	ck_assert_uint_eq(t->fair.weight, DEVQ_FAIR_MAX_WEIGHT);
	ck_assert_int_eq(devq_tenant_grant(&E, "job-1", 2000, 5, 10, 0, false, &t), 0);
	ck_assert_int_eq(devq_tenant_grant(&E, "job-1", 2000, DEVQ_FAIR_MAX_WEIGHT + 1, 65, 0,
					       false, &t),
			 0);
	ck_assert_uint_eq(t->fair.weight, DEVQ_FAIR_MAX_WEIGHT);
	devq_tenant_ungrant(&E, t);
	engine_down();
}
END_TEST

/* Weights: with fair-shares 1001:3, tenant 1001 gets three rooms for each
 * one of tenant 1000 while both wait. */
START_TEST(test_fairness_weights)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 1, .fair_shares = "1001:3" });
	struct devq_session *a = session(1000), *b = session(1001);
	queue(a, 1, 0);
	queue(b, 1, 0);
	ck_assert_uint_eq(b->tenant->fair.weight, 3);
	for (int i = 0; i < 40; i++) {
		spin(a, 1, 100000);
		spin(b, 1, 100000);
	}
	unsigned na = 0, nb = 0;
	for (int i = 0; i < 40; i++) {
		struct devq_session *s = complete_and_refill();
		ck_assert_ptr_nonnull(s);
		na += s == a;
		nb += s == b;
	}
	ck_assert_msg(nb >= 29 && nb <= 31, "share 3 got %u of 40 rooms, share 1 %u", nb, na);
	complete_all();
	engine_down();
}
END_TEST

/* ---- placement ------------------------------------------------------- */

/* Work-conserving placement: a queue with nothing in flight leaves a stream
 * that runs another queue's op for an idle one of its class; a queue with
 * an op in flight stays; high-priority queues stay on high streams. */
START_TEST(test_placement_moves_idle_queue)
{
	engine_up((struct devq_config){ .streams = 2, .priority_streams = 1 });
	struct devq_session *a = session(1000), *b = session(1001);
	queue(a, 1, 0); /* stream 0 */
	queue(a, 2, 0); /* stream 1 */
	queue(b, 1, 0); /* fewest bound: stream 0 */
	buffer(a, 5, 64);
	buffer(b, 5, 64);
	ck_assert_uint_eq(tl(b, 1)->stream, 0);
	submit(a, 1, 5, 0, 0, NULL, NULL); /* a long op, say: stream 0 busy */
	ck_assert_uint_eq(handed(0)->b.stream, 0);
	submit(b, 1, 5, 0, 0, NULL, NULL);
	/* Not behind a's op: moved to the idle stream 1. */
	ck_assert_uint_eq(handed(1)->b.stream, 1);
	ck_assert_uint_eq(tl(b, 1)->stream, 1);
	ck_assert_uint_eq(E.stream_load[0], 1);
	ck_assert_uint_eq(E.stream_load[1], 2);
	/* With an op in flight a queue stays, so its ops do not spread over
	 * streams waiting on each other. */
	submit(a, 1, 5, 0, 0, NULL, NULL);
	ck_assert_uint_eq(handed(2)->b.stream, 0);
	submit(b, 1, 5, 0, 0, NULL, NULL);
	ck_assert_uint_eq(handed(3)->b.stream, 1);
	/* Its own finished op does not make a stream busy: b stays on 1. */
	complete(1, 0);
	complete(2, 0); /* b's ops done; a's second still runs on 0 */
	submit(b, 1, 5, 0, 0, NULL, NULL);
	ck_assert_uint_eq(tl(b, 1)->stream, 1);
	complete_all();
	queue(a, 8, 1);
	queue(b, 9, 1);
	ck_assert_uint_eq(tl(a, 8)->stream, 2);
	ck_assert_uint_eq(tl(b, 9)->stream, 2);
	unsigned n = FK->n;
	submit(a, 8, 5, 0, 0, NULL, NULL);
	submit(b, 9, 5, 0, 0, NULL, NULL);
	/* The normal streams are idle, but a high queue keeps its class. */
	ck_assert_uint_eq(handed(n + 1)->b.stream, 2);
	complete_all();
	engine_down();
}
END_TEST

/* A tenant re-granted without priority (core/timeline.c misplaced): no
 * new high-priority queue opens, and its high queues take normal streams
 * from their next op on: at once when nothing of the queue runs, at once
 * too while its previous op runs (the op waits for it), but not while a
 * reset spares the op that wait (ops of one queue keep their order); with
 * no normal stream idle, the one with the fewest queues bound. */
START_TEST(test_placement_priority_regrant)
{
	engine_up((struct devq_config){ .streams = 2, .priority_streams = 1 });
	struct devq_tenant *t;
	ck_assert_int_eq(devq_tenant_grant(&E, "rj", 1000, 1, 1, 0, true, &t), 0);
	struct devq_session *s = devq_session_new(&E, 1234, 1000, 1000);
	ck_assert_ptr_nonnull(s);
	s->grant = t;
	char why[200];
	ck_assert_int_eq(devq_session_admit(s, why, sizeof(why)), 0);
	struct devq_session *b = session(1001);
	queue(s, 1, 1);
	queue(s, 2, 1);
	queue(s, 4, 1);
	queue(b, 1, 0); /* stream 0 */
	queue(b, 2, 0); /* stream 1 */
	queue(b, 3, 0); /* stream 0: two bound there, one on 1 */
	buffer(s, 5, 64);
	buffer(b, 5, 64);
	ck_assert_uint_eq(tl(s, 1)->stream, 2);
	submit(s, 1, 5, 0, 0, NULL, NULL);
	submit(s, 2, 5, 0, 0, NULL, NULL);
	ck_assert_uint_eq(handed(0)->b.stream, 2);
	ck_assert_uint_eq(handed(1)->b.stream, 2);

	t->priority = false; /* devq_tenant_grant again, without priority */
	struct devq_timeline *q;
	ck_assert_int_eq(devq_timeline_open(s, 3, 1, &q, why, sizeof(why)),
			 DEVQ__CODE__PERMISSION_DENIED);
	ck_assert_int_eq(devq_timeline_open(s, 3, 0, &q, why, sizeof(why)), 0);
	/* Queue 2 was reset: its next op does not wait for the one running
	 * on the high stream, so it stays behind it there. */
	devq_timeline_reset(tl(s, 2));
	submit(s, 2, 5, 0, 0, NULL, NULL);
	ck_assert_uint_eq(handed(2)->b.stream, 2);
	ck_assert_int_eq(tl(s, 2)->priority, 0);
	/* Queue 1's next op waits for its previous one: it moves now. */
	submit(s, 1, 5, 0, 0, NULL, NULL);
	ck_assert_uint_lt(handed(3)->b.stream, 2);
	ck_assert(waits_on(handed(3), 1, 1));
	ck_assert_int_eq(tl(s, 1)->priority, 0);
	complete_all();
	/* Nothing of queue 2 runs now: it leaves the high stream. */
	submit(s, 2, 5, 0, 0, NULL, NULL);
	ck_assert_uint_lt(handed(0)->b.stream, 2);
	complete_all();
	/* Both normal streams busy with b's work: queue 4 (still high, idle)
	 * goes to the least loaded one, 1. */
	submit(b, 1, 5, 0, 0, NULL, NULL);
	submit(b, 2, 5, 0, 0, NULL, NULL);
	unsigned n = FK->n;
	queue(b, 7, 0); /* three queues were bound to each normal stream */
	ck_assert_uint_eq(E.stream_load[0], 4);
	ck_assert_uint_eq(E.stream_load[1], 3);
	ck_assert_uint_eq(tl(s, 4)->stream, 2);
	submit(s, 4, 5, 0, 0, NULL, NULL);
	ck_assert_uint_eq(tl(s, 4)->stream, 1);
	ck_assert_uint_eq(handed(n)->b.stream, 1);
	ck_assert_uint_eq(E.stream_load[2], 0);
	complete_all();
	/* Granted priority again: high queues open again. */
	t->priority = true;
	ck_assert_int_eq(devq_timeline_open(s, 6, 1, &q, why, sizeof(why)), 0);
	ck_assert_uint_eq(q->stream, 2);
	complete_all();
	engine_down();
}
END_TEST

/* The op a stream takes is bound to it when handed over (fair.c,
 * start_cand): a stream with room whose own lanes have nothing that
 * starts at once takes an op waiting for another stream of its class
 * whose waits are all done.  One whose previous op still runs stays (it
 * would wait there for the other stream). */
START_TEST(test_placement_free_stream_takes_waiting_op)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 2 });
	struct devq_session *a = session(1000), *b = session(1001);
	queue(a, 1, 0); /* stream 0 */
	queue(b, 1, 0); /* stream 1 */
	queue(b, 2, 0); /* stream 0 */
	spin(a, 1, 1000000); /* X1 on 0 */
	spin(b, 1, 1000000); /* Y1 on 1 */
	spin(a, 1, 1000000); /* X2 waits for 0: its previous op runs there */
	/* b's queue 2 has nothing in flight but no stream is idle: it stays
	 * on stream 0, behind X2. */
	spin(b, 2, 1000000);
	ck_assert_uint_eq(FK->n, 2);
	ck_assert_uint_eq(tl(b, 2)->stream, 0);
	/* Y1 done: stream 1 has nothing of its own; Z1 moves there, X2
	 * (which would wait for X1 on stream 0) does not. */
	complete(1, 0);
	ck_assert_uint_eq(FK->n, 2);
	struct devq_job *z = handed(1);
	ck_assert_ptr_eq(z->s, b);
	ck_assert_uint_eq(z->q->id, 2);
	ck_assert_uint_eq(z->b.stream, 1);
	ck_assert_uint_eq(E.fair.st[0].waiting, 1); /* X2, still for stream 0 */
	/* X1 done: X2 follows it on stream 0. */
	complete(0, 0);
	ck_assert_uint_eq(FK->n, 2);
	ck_assert_ptr_eq(handed(1)->s, a);
	ck_assert_uint_eq(handed(1)->b.stream, 0);
	complete_all();
	engine_down();
}
END_TEST

/* Weights hold whatever the queues' placement: tenant 1001 (share 3) has
 * two queues bound to stream 1, tenant 1000 one queue on stream 0, each
 * with many ops waiting.  Bound to their queues' streams each would get
 * one stream (1:1); taken in the fair order by whichever stream frees,
 * 1001 gets three rooms for each one of 1000. */
START_TEST(test_placement_weights_across_streams)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 2, .fair_shares = "1001:3" });
	struct devq_session *a = session(1000), *b = session(1001);
	queue(a, 1, 0); /* stream 0 */
	queue(b, 1, 0); /* stream 1 */
	queue(b, 2, 0); /* stream 0 */
	queue(b, 3, 0); /* stream 1 */
	spin(a, 1, 100000);
	spin(b, 1, 100000);
	for (int i = 0; i < 40; i++) {
		spin(b, 3, 100000); /* no idle stream: queue 3 stays on 1 */
		spin(a, 1, 100000);
		spin(b, 1, 100000);
	}
	ck_assert_uint_eq(tl(b, 3)->stream, 1);
	unsigned na = 0, nb = 0, nb0 = 0;
	for (int i = 0; i < 60; i++) {
		struct devq_session *s = complete_and_refill();
		ck_assert_ptr_nonnull(s);
		na += s == a;
		nb += s == b;
		nb0 += s == b && handed(FK->n - 1)->b.stream == 0;
	}
	ck_assert_msg(nb >= 42 && nb <= 48, "share 3 got %u of 60 rooms, share 1 %u", nb, na);
	ck_assert_uint_gt(nb0, 0); /* some of them on a's stream */
	complete_all();
	engine_down();
}
END_TEST

/* Streams of the other class never take a waiting op: a normal queue's op
 * stays off the high-priority stream and a high queue's off the normal
 * ones, however idle. */
START_TEST(test_placement_moves_keep_class)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 2, .priority_streams = 1 });
	struct devq_session *a = session(1000);
	queue(a, 1, 0); /* stream 0 */
	queue(a, 2, 0); /* stream 1 */
	queue(a, 3, 0); /* stream 0 */
	queue(a, 8, 1); /* stream 2, high */
	queue(a, 9, 1); /* stream 2 */
	spin(a, 1, 1000000);
	spin(a, 2, 1000000);
	spin(a, 3, 1000000); /* no normal stream idle: waits for 0 */
	spin(a, 8, 1000000);
	spin(a, 9, 1000000); /* waits for 2 */
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_uint_eq(tl(a, 3)->stream, 0);
	/* The high stream frees: queue 3's op does not go there, queue 9's
	 * does (its own). */
	complete(2, 0);
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_uint_eq(handed(2)->q->id, 9);
	ck_assert_uint_eq(handed(2)->b.stream, 2);
	spin(a, 8, 1000000); /* waits for 2 behind queue 9's */
	/* Stream 1 frees: queue 3's op moves there; queue 8's stays. */
	complete(1, 0);
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_uint_eq(handed(2)->q->id, 3);
	ck_assert_uint_eq(handed(2)->b.stream, 1);
	complete(0, 0); /* stream 0 frees: nothing normal waits */
	ck_assert_uint_eq(FK->n, 2);
	ck_assert_uint_eq(E.fair.st[2].waiting, 1);
	complete_all();
	engine_down();
}
END_TEST

/* The first op after a reset does not wait on its queue's previous op,
 * so their order rests on one stream's: that previous op moves no more,
 * and if it had moved already the new op follows it there. */
START_TEST(test_placement_reset_keeps_order)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 2 });
	struct devq_session *a = session(1000), *b = session(1001);
	queue(a, 1, 0); /* stream 0 */
	queue(b, 1, 0); /* stream 1 */
	queue(b, 2, 0); /* stream 0 */
	spin(a, 1, 1000000); /* X1 on 0 */
	spin(b, 1, 1000000); /* Y1 on 1 */
	spin(b, 2, 1000000); /* Z1 waits for 0 (no stream idle) */
	devq_timeline_reset(tl(b, 2));
	spin(b, 2, 1000000); /* Z2: after the reset, no wait on Z1 */
	ck_assert_uint_eq(E.fair.st[0].waiting, 2);
	/* Y1 done: Z1 could start on stream 1, but Z2 counts on following it
	 * on stream 0. */
	complete(1, 0);
	ck_assert_uint_eq(FK->n, 1);
	complete(0, 0); /* X1: Z1 on 0 */
	ck_assert_uint_eq(handed(0)->point, 1);
	ck_assert_uint_eq(handed(0)->b.stream, 0);
	complete(0, 0); /* Z1: Z2 after it, on 0 */
	ck_assert_uint_eq(handed(0)->point, 2);
	ck_assert_uint_eq(handed(0)->b.stream, 0);
	complete_all();

	/* Moved before the reset: the next op follows it to its stream. */
	spin(a, 1, 1000000); /* on 0 */
	spin(b, 1, 1000000); /* on 1 */
	spin(b, 2, 1000000); /* Z3 waits for 0 */
	complete(1, 0);	     /* Z3 moves to 1 */
	ck_assert_uint_eq(handed(1)->q->id, 2);
	ck_assert_uint_eq(handed(1)->b.stream, 1);
	/* A failed op (no buffer 77) waits on nothing: it follows Z3 too. */
	buffer(b, 5, 64);
	submit(b, 2, 77, 0, 0, NULL, NULL);
	ck_assert_uint_eq(E.fair.st[1].waiting, 1);
	devq_timeline_reset(tl(b, 2));
	spin(b, 2, 1000000); /* Z5: behind them, on stream 1 */
	ck_assert_uint_eq(E.fair.st[1].waiting, 2);
	complete(0, 0); /* stream 0 frees: neither jumps ahead of Z3 */
	ck_assert_uint_eq(FK->n, 1);
	complete(0, 0); /* Z3 */
	ck_assert_uint_eq(handed(0)->point, 4);
	ck_assert_uint_eq(handed(0)->b.stream, 1);
	ck_assert_int_eq(handed(0)->b.kind, DEVQ_BOP_FAIL);
	complete(0, handed(0)->b.code);
	ck_assert_uint_eq(handed(0)->point, 5);
	ck_assert_uint_eq(handed(0)->b.stream, 1);
	complete_all();
	engine_down();
}
END_TEST

/* Weights hold too among ops that cannot start at once anywhere: each op
 * of both tenants waits on its tenant's long op running on another
 * stream, so the stream that frees takes, by pick's order, an op that
 * will wait there. */
START_TEST(test_fairness_weights_behind_other_streams)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 3, .fair_shares = "1001:3" });
	struct devq_session *a = session(1000), *b = session(1001);
	queue(a, 1, 0); /* stream 0 */
	queue(a, 2, 0); /* stream 1 */
	queue(b, 2, 0); /* stream 2 */
	queue(b, 1, 0); /* stream 0 */
	spin(a, 2, 100000); /* on 1, running throughout */
	spin(b, 2, 100000); /* on 2, running throughout */
	for (int i = 0; i < 50; i++) {
		spin_after(a, 1, 100000, 2, 1);
		spin_after(b, 1, 100000, 2, 1);
	}
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_uint_eq(handed(2)->b.stream, 0);
	unsigned na = 0, nb = 0;
	for (int i = 0; i < 48; i++) {
		if (i == 8) /* from here on, past the first op's head start */
			na = nb = 0;
		unsigned before = FK->enqueued;
		complete(2, 0); /* stream 0's op; the long ones stay */
		ck_assert_uint_eq(FK->enqueued, before + 1);
		struct devq_job *j = handed(2);
		ck_assert_uint_eq(j->b.stream, 0);
		na += j->s == a;
		nb += j->s == b;
	}
	ck_assert_msg(nb >= 29 && nb <= 31, "share 3 got %u of 40 rooms, share 1 %u", nb, na);
	complete_all();
	engine_down();
}
END_TEST

/* Three streams of one room each: tenant 1002's op runs on stream 0,
 * tenant 1000's op of ns_a on stream 1 (its queue 2) and 1001's of ns_b
 * on stream 2 (its queue 2), and each of 1000 and 1001 has a queue 1
 * bound to stream 0. */
static void contested(const char *shares, uint64_t ns_a, uint64_t ns_b, struct devq_session **a,
		      struct devq_session **b)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 3, .fair_shares = shares });
	struct devq_session *c = session(1002);
	*a = session(1000);
	*b = session(1001);
	queue(c, 1, 0);	 /* stream 0 */
	queue(*a, 2, 0); /* 1 */
	queue(*b, 2, 0); /* 2 */
	queue(*a, 1, 0); /* 0 */
	queue(*a, 9, 0); /* 1 */
	queue(*b, 9, 0); /* 2 */
	queue(*b, 1, 0); /* 0 */
	ck_assert_uint_eq(tl(*b, 1)->stream, 0);
	spin(*a, 2, ns_a);
	spin(*b, 2, ns_b);
	spin(c, 1, 100000);
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_ptr_eq(handed(2)->s, c);
}

/* Four streams, one op at a time: 1002 (c) on stream 0, 1000 (a) on 1
 * and 2, 1001 (b) on 3; each then has a queue on stream 0 (queue 1), and
 * a and b more on the others (by count, the queues bind in turn). */
static void four_streams(const char *shares, struct devq_session **a, struct devq_session **b,
			 struct devq_session **c)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 4, .fair_shares = shares });
	*c = session(1002);
	*a = session(1000);
	*b = session(1001);
	queue(*c, 1, 0); /* stream 0 */
	queue(*a, 2, 0); /* 1 */
	queue(*a, 3, 0); /* 2 */
	queue(*b, 2, 0); /* 3 */
	queue(*a, 1, 0); /* 0 */
	queue(*a, 9, 0); /* 1 */
	queue(*a, 8, 0); /* 2 */
	queue(*b, 9, 0); /* 3 */
	queue(*b, 1, 0); /* 0 */
}

/* When no op starts at once on the stream that frees, pick orders the
 * ops that would wait there by the virtual time each tenant would have
 * once charged: 1000 (share 1) is a little ahead of 1001 (share 3) but
 * its op costs it three times more, so 1001's goes first. */
START_TEST(test_fairness_pick_charges_the_op)
{
	struct devq_session *a, *b;
	contested("1001:3", 100000, 300003, &a, &b);
	spin_after(a, 1, 100000, 2, 1); /* each waits on its long op */
	spin_after(b, 1, 100000, 2, 1);
	complete(2, 0);
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_ptr_eq(handed(2)->s, b);
	ck_assert_uint_eq(handed(2)->b.stream, 0);
	complete_all();
	engine_down();
}
END_TEST

/* Equal virtual times and ops inside: the tenant waiting longest. */
START_TEST(test_fairness_pick_tie_to_the_first)
{
	struct devq_session *a, *b;
	contested(NULL, 100000, 100000, &a, &b);
	spin_after(a, 1, 100000, 2, 1);
	spin_after(b, 1, 100000, 2, 1);
	complete(2, 0);
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_ptr_eq(handed(2)->s, a);
	complete_all();
	engine_down();
}
END_TEST

/* The tenant first in turn has nothing that may go (its op waits on one
 * not handed over yet): the next one's goes rather than none. */
START_TEST(test_fairness_pick_passes_a_blocked_tenant)
{
	struct devq_session *a, *b;
	contested(NULL, 1000, 100000, &a, &b);
	spin(a, 2, 1000);		/* (2, 2) waits for stream 1 */
	spin_after(a, 1, 1000, 2, 2);	/* waits for it */
	spin_after(b, 1, 100000, 2, 1); /* b's may go, after its long op */
	complete(2, 0);
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_ptr_eq(handed(2)->s, b);
	complete_all();
	engine_down();
}
END_TEST

/* Virtual time first, ops inside only on a tie: 1000 (share 3) has two
 * ops running to 1001's one, but would end earlier. */
START_TEST(test_fairness_pick_time_before_ops_inside)
{
	struct devq_session *a, *b, *c;
	four_streams("1000:3", &a, &b, &c);
	ck_assert_uint_eq(tl(b, 1)->stream, 0);
	spin(a, 2, 100000);
	spin(a, 3, 100000);
	spin(b, 2, 100000);
	spin(c, 1, 100000);
	ck_assert_uint_eq(FK->n, 4);
	spin_after(a, 1, 100000, 2, 1);
	spin_after(b, 1, 100000, 2, 1);
	complete(3, 0); /* c's, on stream 0 */
	ck_assert_uint_eq(FK->n, 4);
	ck_assert_ptr_eq(handed(3)->s, a);
	ck_assert_uint_eq(handed(3)->b.stream, 0);
	complete_all();
	engine_down();
}
END_TEST

/* With a backend that refills from its completers (CPU): an op that
 * waits on ops running on two other streams, a stream idle meanwhile.
 * When the second of them completes, its stream goes to another tenant's
 * op; once that op is done (devq_fair_after_done), the idle stream takes
 * the waiting one rather than idling until some other completion. */
START_TEST(test_placement_idle_stream_looks_after_done)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 4, .fair_shares = "1001:3" });
	FK->be.enqueue_any_thread = true;
	struct devq_session *a = session(1000), *b = session(1001);
	queue(a, 1, 0); /* stream 0: X */
	queue(a, 2, 0); /* 1: P1 */
	queue(a, 3, 0); /* 2: P2 */
	queue(a, 4, 0); /* 3: R */
	queue(a, 5, 0); /* 0: O */
	queue(b, 9, 0); /* 1 */
	queue(b, 1, 0); /* 2: Q */
	ck_assert_uint_eq(tl(b, 1)->stream, 2);
	spin(a, 1, 2000000);
	spin(a, 2, 2000000);
	spin(a, 3, 2000000);
	spin(a, 4, 2000000);
	uint32_t wq[2] = { 2, 3 };
	uint64_t wp[2] = { 1, 1 };
	spin_waits(a, 5, 2000000, 2, wq, wp); /* O: no stream idle, waits for 0 */
	replayable = true; /* Q stays on its stream */
	spin(b, 1, 2000000);
	replayable = false;
	ck_assert_uint_eq(FK->n, 4);
	complete(3, 0); /* R: stream 3 idle; O cannot start anywhere yet */
	ck_assert_uint_eq(FK->n, 3);
	ck_assert(atomic_load(&E.fair.starved));
	complete(1, 0); /* P1: stream 1 idle too */
	ck_assert_uint_eq(FK->n, 2);
	complete(1, 0); /* P2: stream 2 to b's Q, then an idle one to O */
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_ptr_eq(handed(1)->s, b);
	ck_assert_uint_eq(handed(1)->b.stream, 2);
	ck_assert_uint_eq(handed(2)->q->id, 5);
	ck_assert(handed(2)->b.stream == 1 || handed(2)->b.stream == 3);
	complete_all();
	engine_down();
}
END_TEST

/* The same with the waiting op's lane the class's last stream. */
START_TEST(test_placement_idle_stream_looks_last_lane)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 4, .fair_shares = "1001:3" });
	FK->be.enqueue_any_thread = true;
	struct devq_session *a = session(1000), *b = session(1001);
	queue(a, 4, 0); /* stream 0: R */
	queue(a, 2, 0); /* 1: P1 */
	queue(a, 3, 0); /* 2: P2 */
	queue(a, 1, 0); /* 3: X */
	queue(a, 6, 0); /* 0 */
	queue(a, 7, 0); /* 1 */
	queue(a, 8, 0); /* 2 */
	queue(a, 5, 0); /* 3: O */
	queue(b, 8, 0); /* 0 */
	queue(b, 9, 0); /* 1 */
	queue(b, 1, 0); /* 2: Q */
	ck_assert_uint_eq(tl(a, 5)->stream, 3);
	ck_assert_uint_eq(tl(b, 1)->stream, 2);
	spin(a, 1, 2000000);
	spin(a, 2, 2000000);
	spin(a, 3, 2000000);
	spin(a, 4, 2000000);
	uint32_t wq[2] = { 2, 3 };
	uint64_t wp[2] = { 1, 1 };
	spin_waits(a, 5, 2000000, 2, wq, wp); /* O waits for 3 */
	replayable = true;
	spin(b, 1, 2000000);
	replayable = false;
	complete(3, 0); /* R: stream 0 idle */
	ck_assert(atomic_load(&E.fair.starved));
	complete(1, 0); /* P1 */
	complete(1, 0); /* P2 */
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_uint_eq(handed(2)->q->id, 5);
	ck_assert(handed(2)->b.stream == 0 || handed(2)->b.stream == 1);
	complete_all();
	engine_down();
}
END_TEST

/* A stream with room looks at the first DEVQ_FAIR_MOVE_SCAN (4) ops of
 * another lane for one that can move: behind three that cannot (a chain
 * waiting on the op running on stream 0) it finds queue 3's op; behind
 * four, not. */
static void move_scan(unsigned blocked, bool found)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 2 });
	struct devq_session *a = session(1000);
	queue(a, 1, 0); /* stream 0 */
	queue(a, 2, 0); /* 1 */
	queue(a, 3, 0); /* 0 */
	spin(a, 1, 1000000); /* X1 on 0 */
	spin(a, 2, 1000000); /* Y1 on 1 */
	for (unsigned i = 0; i < blocked; i++)
		spin(a, 1, 1000000); /* X2...: each waits on the one before */
	spin(a, 3, 1000000);	     /* M: no stream idle, behind them for 0 */
	ck_assert_uint_eq(E.fair.st[0].waiting, blocked + 1);
	complete(1, 0); /* Y1: stream 1 free */
	if (found) {
		ck_assert_uint_eq(FK->n, 2);
		ck_assert_uint_eq(handed(1)->q->id, 3);
		ck_assert_uint_eq(handed(1)->b.stream, 1);
	} else {
		ck_assert_uint_eq(FK->n, 1);
	}
	complete_all();
	engine_down();
}

START_TEST(test_placement_move_scan_bound)
{
	move_scan(3, true);
	move_scan(4, false);
}
END_TEST

/* choose's ties (ops that start at once): equal virtual times once
 * charged and equal ops inside go to the tenant first in turn... */
START_TEST(test_fairness_choose_tie_to_the_first)
{
	struct devq_session *a, *b;
	contested(NULL, 100000, 100000, &a, &b);
	spin(a, 1, 100000); /* no stream idle: each waits for stream 0 */
	spin(b, 1, 100000);
	complete(2, 0);
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_ptr_eq(handed(2)->s, a);
	complete_all();
	engine_down();
}
END_TEST

/* ...and with equal times, to the one with fewer ops inside: 1000
 * (share 2) has two ops running, 1001 one. */
START_TEST(test_fairness_choose_tie_to_fewer_inside)
{
	struct devq_session *a, *b, *c;
	four_streams("1000:2", &a, &b, &c);
	/* 1001's first: it starts at virtual time 0 as 1000 does (a newcomer
	 * starts at the latest choice's). */
	spin(b, 2, 100000);
	spin(a, 2, 100000);
	spin(a, 3, 100000);
	spin(c, 1, 100000);
	spin(a, 1, 200000); /* charged as 100000 at share 2 */
	spin(b, 1, 100000);
	ck_assert_uint_eq(FK->n, 4);
	complete(3, 0); /* c's, on stream 0 */
	ck_assert_uint_eq(FK->n, 4);
	ck_assert_ptr_eq(handed(3)->s, b);
	complete_all();
	engine_down();
}
END_TEST

/* With a backend that refills from its completers: a stream that frees
 * with nothing waiting for it still looks at the others' lanes (ops wait
 * only for the last stream here). */
START_TEST(test_placement_completer_takes_other_lane)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 2 });
	FK->be.enqueue_any_thread = true;
	struct devq_session *a = session(1000);
	queue(a, 1, 0); /* stream 0 */
	queue(a, 2, 0); /* 1 */
	queue(a, 9, 0); /* 0 */
	queue(a, 3, 0); /* 1 */
	spin(a, 1, 1000000);
	spin(a, 2, 1000000);
	spin(a, 3, 1000000); /* M: no stream idle, waits for 1 */
	ck_assert_uint_eq(E.fair.st[1].waiting, 1);
	complete(0, 0); /* stream 0 frees */
	ck_assert_uint_eq(FK->n, 2);
	ck_assert_uint_eq(handed(1)->q->id, 3);
	ck_assert_uint_eq(handed(1)->b.stream, 0);
	complete_all();
	engine_down();
}
END_TEST

/* A stream may look busy to placement (the newest op placed on it moved
 * and still runs elsewhere) while it is empty: an op that could start
 * anywhere, waiting for a full stream, goes to it at once. */
START_TEST(test_placement_submit_fills_empty_stream)
{
	engine_up((struct devq_config){ .fair_k = 1, .streams = 3 });
	struct devq_session *a = session(1000);
	queue(a, 1, 0); /* stream 0 */
	queue(a, 2, 0); /* 1 */
	queue(a, 3, 0); /* 2 */
	queue(a, 4, 0); /* 0 */
	spin(a, 1, 1000000); /* X on 0 */
	spin(a, 2, 1000000); /* Y on 1 */
	spin(a, 3, 1000000); /* Z on 2 */
	spin(a, 4, 1000000); /* M: placed on 0, waits */
	complete(1, 0);	     /* Y: M moves to 1 */
	ck_assert_uint_eq(handed(2)->q->id, 4);
	ck_assert_uint_eq(handed(2)->b.stream, 1);
	complete(0, 0); /* X: stream 0 empty, its newest placed op (M) runs */
	ck_assert_uint_eq(FK->n, 2);
	queue(a, 5, 0); /* 1, which looks idle (Y done) but runs M */
	ck_assert_uint_eq(tl(a, 5)->stream, 1);
	spin(a, 5, 1000000);
	ck_assert_uint_eq(FK->n, 3);
	ck_assert_uint_eq(handed(2)->q->id, 5);
	ck_assert_uint_eq(handed(2)->b.stream, 0);
	complete_all();
	engine_down();
}
END_TEST

/* ---- quotas ---------------------------------------------------------- */

START_TEST(test_submit_on_closed_queue)
{
	engine_up((struct devq_config){ 0 });
	struct devq_session *s = session(1000);
	Devq__Op op = DEVQ__OP__INIT;
	op.queue = 7;
	char err[160];
	/* The error convention: a client-visible code and its message, and no
	 * point taken. */
	ck_assert_int_eq(devq_sched_submit(s, &op, 1, err, sizeof(err)), DEVQ__CODE__NOT_FOUND);
	ck_assert_ptr_nonnull(strstr(err, "queue 7"));
	ck_assert_uint_eq(s->ops_in_flight, 0);
	engine_down();
}
END_TEST

START_TEST(test_quota_refusals)
{
	engine_up((struct devq_config){ .q_session_buffers = 2, .q_user_sessions = 1,
					.q_session_ops = 3 });
	struct devq_session *s = session(1000);
	buffer(s, 1, 64);
	buffer(s, 2, 64);
	int fd = -1;
	char err[200];
	/* Exactly at the limit: refused, the existing ones untouched. */
	ck_assert_int_eq(devq_buffer_create(s, 3, 64, DEVQ__BUFFER_KIND__SHARED, &fd, err, sizeof(err)),
			 DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_ptr_nonnull(strstr(err, "quota-session-buffers"));
	ck_assert_int_eq(fd, -1);
	ck_assert_uint_eq(s->nbufs, 2);
	/* A second session of the same user: over quota-user-sessions. */
	struct devq_session *t = devq_session_new(&E, 1, 1000, 1000);
	ck_assert_int_eq(devq_session_admit(t, err, sizeof(err)), DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_ptr_nonnull(strstr(err, "quota-user-sessions"));
	session_end(t);
	/* Another user is not affected. */
	struct devq_session *u = session(1001);
	(void)u;
	/* In-flight quota: reached at exactly q_session_ops. */
	queue(s, 1, 0);
	for (int i = 0; i < 3; i++) {
		ck_assert(!devq_quota_over_ops(s));
		submit(s, 1, 1, 0, 0, NULL, NULL);
	}
	ck_assert(devq_quota_over_ops(s));
	complete_all();
	ck_assert(!devq_quota_over_ops(s));
	engine_down();
}
END_TEST

/* Byte quotas at exactly the limit and one byte past: the session's
 * pinned bytes, the user's, and a granted tenant's memory cap. */
static int try_buffer(struct devq_session *s, uint64_t id, uint64_t size, char *err, size_t n)
{
	int fd = -1;
	int r = devq_buffer_create(s, id, size, DEVQ__BUFFER_KIND__SHARED, &fd, err, n);
	if (fd >= 0)
		ck_assert_int_eq(close(fd), 0);
	return r;
}

START_TEST(test_quota_bytes_at_bound_and_past)
{
	engine_up((struct devq_config){ .q_session_pinned = 8192, .q_user_pinned = 16384 });
	char err[300];
	struct devq_session *s = session(1000);
	ck_assert_int_eq(try_buffer(s, 1, 8192, err, sizeof(err)), 0);
	ck_assert_int_eq(try_buffer(s, 2, 1, err, sizeof(err)), DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(err, "quota-session-pinned-mb"), "%s", err);
	struct devq_session *s2 = session(1000);
	ck_assert_int_eq(try_buffer(s2, 1, 8193, err, sizeof(err)),
			 DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(err, "quota-session-pinned-mb"), "%s", err);
	ck_assert_int_eq(try_buffer(s2, 1, 8192, err, sizeof(err)), 0);
	struct devq_session *s3 = session(1000);
	ck_assert_int_eq(try_buffer(s3, 1, 1, err, sizeof(err)), DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(err, "quota-user-pinned-mb"), "%s", err);
	/* A grant's memory cap, in place of the user's quotas. */
	struct devq_tenant *t;
	ck_assert_int_eq(devq_tenant_grant(&E, "job-1", 2000, 1, 1, 4096, false, &t), 0);
	struct devq_session *g = devq_session_new(&E, 1234, 2000, 2000);
	ck_assert_ptr_nonnull(g);
	g->grant = t;
	ck_assert_int_eq(devq_session_admit(g, err, sizeof(err)), 0);
	ck_assert_int_eq(try_buffer(g, 1, 4097, err, sizeof(err)), DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(err, "memory cap"), "%s", err);
	ck_assert_int_eq(try_buffer(g, 1, 4096, err, sizeof(err)), 0);
	ck_assert_int_eq(try_buffer(g, 2, 1, err, sizeof(err)), DEVQ__CODE__RESOURCE_EXHAUSTED);
	devq_tenant_ungrant(&E, t);
	engine_down();
	/* A session quota above the user's: the user's decides, at one byte
	 * past it too; and the user's peak follows its use to the byte. */
	engine_up((struct devq_config){ .q_session_pinned = 32768, .q_user_pinned = 16384 });
	s = session(1000);
	ck_assert_int_eq(try_buffer(s, 1, 16385, err, sizeof(err)), DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(err, "quota-user-pinned-mb"), "%s", err);
	ck_assert_int_eq(try_buffer(s, 1, 4096, err, sizeof(err)), 0);
	ck_assert_uint_eq(s->tenant->peak, 4096);
	ck_assert_int_eq(try_buffer(s, 2, 1, err, sizeof(err)), 0);
	ck_assert_uint_eq(s->tenant->peak, 4097);
	engine_down();
}
END_TEST

/* quota-user-queues at exactly the limit and one past, over all of the
 * user's sessions. */
START_TEST(test_quota_user_queues_at_bound_and_past)
{
	engine_up((struct devq_config){ .q_user_queues = 3 });
	struct devq_session *a = session(1000), *b = session(1000);
	char err[200];
	for (uint32_t id = 1; id <= 3; id++) {
		struct devq_session *s = id == 2 ? b : a;
		ck_assert_int_eq(devq_quota_queue(s, id, err, sizeof(err)), 0);
		queue(s, id, 0);
		devq_quota_queue_opened(s);
	}
	ck_assert_int_eq(devq_quota_queue(b, 4, err, sizeof(err)), DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(err, "quota-user-queues"), "%s", err);
	/* Another user is not affected. */
	struct devq_session *c = session(1001);
	ck_assert_int_eq(devq_quota_queue(c, 1, err, sizeof(err)), 0);
	engine_down();
}
END_TEST

/* Tenants with sessions are counted once each, however many sessions
 * (the server shares its loop only when more than one has any). */
START_TEST(test_tenants_live_counted_once)
{
	engine_up((struct devq_config){ 0 });
	ck_assert_uint_eq(E.tenants_live, 0);
	struct devq_session *a = session(1000);
	ck_assert_uint_eq(E.tenants_live, 1);
	struct devq_session *a2 = session(1000);
	ck_assert_uint_eq(E.tenants_live, 1);
	struct devq_session *b = session(1001);
	ck_assert_uint_eq(E.tenants_live, 2);
	session_end(a2);
	ck_assert_uint_eq(E.tenants_live, 2);
	session_end(a);
	ck_assert_uint_eq(E.tenants_live, 1);
	session_end(b);
	ck_assert_uint_eq(E.tenants_live, 0);
	engine_down();
}
END_TEST

START_TEST(test_session_freed_after_last_op)
{
	engine_up((struct devq_config){ 0 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	buffer(s, 5, 64);
	submit(s, 1, 5, 0, 0, NULL, NULL);
	devq_session_disconnect(s);
	flush_dirty();
	devq_session_unhold(s);
	/* Its op is still on the device: the session stays until it ends. */
	ck_assert_ptr_eq(E.sessions, s);
	ck_assert(atomic_load(&s->cancel));
	complete_all();
	ck_assert_ptr_null(E.sessions);
	ck_assert_uint_eq(E.nbufs, 0);
	engine_down();
}
END_TEST

/* A completion page as the daemon makes it, the client's three fds
 * (published page, hint page, eventfd) closed at once: the daemon's side
 * alone. */
static struct devq_cpage *page_alone(void)
{
	struct devq_cpage *cp;
	int fds[4];
	ck_assert_int_eq(devq_cpage_create(4, false, &cp, fds), 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(close(fds[i]), 0);
	return cp;
}

/* A completion page whose eventfd close fails (here: already closed, the
 * double close a bug would make) says so in the log instead of passing in
 * silence: cleanup syscalls are checked. */
START_TEST(test_cpage_failed_close_logged)
{
	struct devq_cpage *cp = page_alone();
	/* Every fd this test opens is opened first, so that none takes the
	 * number the page's eventfd frees. */
	char path[] = "/tmp/devq-cpage-log-XXXXXX";
	int lfd = mkstemp(path);
	ck_assert_int_ge(lfd, 0);
	fflush(stderr);
	int saved = dup(STDERR_FILENO);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_eq(close(cp->efd), 0);
	ck_assert_int_ge(dup2(lfd, STDERR_FILENO), 0);
	devq_cpage_free(cp);
	fflush(stderr);
	ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
	ck_assert_int_eq(close(saved), 0);
	char got[512] = "";
	ssize_t n = pread(lfd, got, sizeof(got) - 1, 0);
	ck_assert_int_ge(n, 0);
	got[n] = '\0';
	ck_assert_int_eq(close(lfd), 0);
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_msg(strstr(got, "completion page eventfd: close: Bad file descriptor"),
		      "log: '%s'", got);
}
END_TEST

/* A client thread asleep on the completion page, as libdevq's waits
 * sleep (proto/cpage_layout.h): wait_slot (0: anything), seq read,
 * waiters += 1, FUTEX_WAIT on seq for at most timeout_ms. */
struct page_sleeper {
	struct devq_cpage *cp;
	uint32_t wait_slot;
	int timeout_ms;
	_Atomic pid_t tid;
	long rc;
	int err;
};

static void *page_sleep(void *arg)
{
	struct page_sleeper *z = arg;
	atomic_store(&z->cp->hint->wait_slot, z->wait_slot);
	uint32_t v = atomic_load(&z->cp->pub->seq);
	atomic_fetch_add(&z->cp->hint->waiters, 1);
	atomic_store(&z->tid, (pid_t)syscall(SYS_gettid));
	struct timespec ts = { z->timeout_ms / 1000, (long)(z->timeout_ms % 1000) * 1000000 };
	z->rc = syscall(SYS_futex, &z->cp->pub->seq, FUTEX_WAIT, v, &ts, NULL, 0);
	z->err = errno;
	atomic_fetch_sub(&z->cp->hint->waiters, 1);
	return NULL;
}

/* Until the thread tid sleeps (state S in /proc): a FUTEX_WAKE after this
 * finds it in FUTEX_WAIT, so a timeout then means nobody woke it. */
static void until_asleep(pid_t tid)
{
	char path[64], buf[256];
	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	for (int i = 0;; i++) {
		ck_assert_int_lt(i, 10000);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ck_assert_int_ge(fd, 0);
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		ck_assert_int_eq(close(fd), 0);
		ck_assert_int_gt(n, 0);
		buf[n] = '\0';
		const char *st = strrchr(buf, ')');
		if (st && st[1] == ' ' && st[2] == 'S')
			return;
		usleep(1000);
	}
}

static void start_sleeper(pthread_t *th, struct page_sleeper *z)
{
	ck_assert_int_eq(pthread_create(th, NULL, page_sleep, z), 0);
	while (!atomic_load(&z->tid))
		usleep(100);
	until_asleep(atomic_load(&z->tid));
}

/* What the daemon writes on the socket wakes a client thread asleep on the
 * page for anything (libdevq's devq_next_completion: records of an
 * overflow, errors and releases travel the socket, and the thread would
 * otherwise sleep through them); a thread asleep for a queue's point is
 * not woken by it (its point comes in the slot), but is when the session's
 * socket closes.  Before the socket woke the page, libdevq slept in 1 ms
 * slices instead: a client waiting on a 25 ms op woke 40 times. */
START_TEST(test_cpage_socket_wakes_sleepers)
{
	struct devq_cpage *cp = page_alone();
	/* Asleep for anything: woken (or seq moved first), long before its
	 * 2 s. */
	struct page_sleeper any = { .cp = cp, .wait_slot = 0, .timeout_ms = 2000 };
	pthread_t th;
	start_sleeper(&th, &any);
	uint64_t tx0 = atomic_load(&cp->pub->tx_bytes);
	devq_cpage_note_tx(cp, 100);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_msg(any.rc == 0 || any.err == EAGAIN,
		      "a thread asleep for anything was not woken by socket bytes (%s)",
		      strerror(any.err));
	ck_assert_uint_eq(atomic_load(&cp->pub->tx_bytes), tx0 + 100);
	/* Nothing written: no bytes counted, seq unmoved. */
	uint32_t seq = atomic_load(&cp->pub->seq);
	devq_cpage_note_tx(cp, 0);
	ck_assert_uint_eq(atomic_load(&cp->pub->seq), seq);
	ck_assert_uint_eq(atomic_load(&cp->pub->tx_bytes), tx0 + 100);
	/* Asleep for slot 1's point: socket bytes leave it asleep (its
	 * 300 ms run out), a close wakes it. */
	struct page_sleeper pt = { .cp = cp, .wait_slot = 1, .timeout_ms = 300 };
	start_sleeper(&th, &pt);
	devq_cpage_note_tx(cp, 100);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_msg(pt.rc == -1 && pt.err == ETIMEDOUT,
		      "a thread asleep for a point was woken by socket bytes (rc %ld, %s)", pt.rc,
		      strerror(pt.err));
	pt = (struct page_sleeper){ .cp = cp, .wait_slot = 1, .timeout_ms = 2000 };
	start_sleeper(&th, &pt);
	devq_cpage_note_closed(cp);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_msg(pt.rc == 0 || pt.err == EAGAIN,
		      "a thread asleep for a point was not woken by the close (%s)",
		      strerror(pt.err));
	devq_cpage_note_closed(NULL); /* a session without a page */
	devq_cpage_free(cp);
}
END_TEST

/* The completion record ring at its bound: exactly ring-size records fit;
 * the next goes to the socket, and so does every record after it until the
 * client says it read those, even once the ring has room again; then the
 * ring again.  A head past the tail (a lying client) reads as full. */
START_TEST(test_cring_at_bound_and_past)
{
	setenv("DEVQD_CRING_ENTRIES", "8", 1);
	struct devq_cpage *cp = page_alone();
	unsetenv("DEVQD_CRING_ENTRIES");
	ck_assert_uint_eq(cp->ring_n, 8);
	ck_assert_uint_eq(cp->pub->ring_size, 8);
	ck_assert_uint_ge(cp->pub->ring_off, sizeof(struct devq_cpage_hdr));
	ck_assert_uint_ge(cp->pub_len, cp->pub->ring_off + 8 * sizeof(struct devq_crec));
	uint64_t t[7] = { 1, 2, 3, 4, 5, 6, 7 };
	/* Not armed (an older client): the socket, and not counted. */
	ck_assert(!devq_cpage_ring_put(cp, 1, 1, 0, "", t));
	ck_assert_uint_eq(cp->sock_sent, 0);
	atomic_store(&cp->hint->ring_armed, 0xffffffffu); /* garbage is not 1 */
	ck_assert(!devq_cpage_ring_put(cp, 1, 1, 0, "", t));
	atomic_store(&cp->hint->ring_armed, 1);
	for (uint64_t p = 1; p <= 8; p++)
		ck_assert(devq_cpage_ring_put(cp, 1, p, 0, "", t));
	ck_assert_uint_eq(atomic_load(&cp->pub->ring_tail), 8);
	ck_assert_uint_eq(atomic_load(&cp->pub->ring_overflow), 0);
	/* One past. */
	ck_assert(!devq_cpage_ring_put(cp, 1, 9, 0, "", t));
	ck_assert_uint_eq(atomic_load(&cp->pub->ring_overflow), 1);
	ck_assert_uint_eq(cp->sock_sent, 1);
	/* Room again, but record 9 is still on its way: 10 follows it. */
	atomic_store(&cp->hint->ring_head, 8);
	ck_assert(!devq_cpage_ring_put(cp, 1, 10, 0, "", t));
	ck_assert_uint_eq(cp->sock_sent, 2);
	atomic_store(&cp->hint->sock_seen, 1);
	ck_assert(!devq_cpage_ring_put(cp, 1, 11, 0, "", t));
	atomic_store(&cp->hint->sock_seen, 3);
	/* Caught up: a failed op's record, message whole, in the ring. */
	char msg[DEVQ_BOP_MSG];
	memset(msg, 'm', sizeof(msg) - 1);
	msg[sizeof(msg) - 1] = '\0';
	ck_assert(devq_cpage_ring_put(cp, 2, 12, 7, msg, t));
	ck_assert_uint_eq(atomic_load(&cp->pub->ring_overflow), 0);
	const struct devq_crec *e = &cp->ring[8 & 7];
	ck_assert_uint_eq(e->point, 12);
	ck_assert_uint_eq(e->queue, 2);
	ck_assert_int_eq(e->code, 7);
	ck_assert_str_eq(e->msg, msg);
	ck_assert_mem_eq(e->t, t, sizeof(t));
	ck_assert_uint_eq(atomic_load(&cp->pub->ring_tail), 9);
	/* A head past the tail reads as full: the socket, nothing overwritten. */
	atomic_store(&cp->hint->ring_head, 1000);
	ck_assert(!devq_cpage_ring_put(cp, 1, 13, 0, "", t));
	ck_assert_uint_eq(atomic_load(&cp->pub->ring_tail), 9);
	devq_cpage_free(cp);
}
END_TEST

/* Each phase lands in the first bucket whose bound is at least its length,
 * at every bound, one below and one past it (the bucket search is a table
 * look-up by power of two, checked here against the plain scan).  The
 * look-up takes at most one step within a power of two, which holds only
 * while consecutive bounds are at least 2x apart. */
START_TEST(test_metrics_buckets_at_bounds)
{
	static struct devq_metrics m;
	for (unsigned i = 1; i < DEVQ_METRICS_BOUNDS; i++)
		ck_assert_msg(devq_metrics_bounds_ns[i] >= 2 * devq_metrics_bounds_ns[i - 1],
			      "bound %u (%llu ns) is under twice the one before: metrics.c's "
			      "bucket look-up needs 2x steps", i,
			      (unsigned long long)devq_metrics_bounds_ns[i]);
	uint64_t vals[3 * DEVQ_METRICS_BOUNDS + 4];
	unsigned n = 0;
	for (unsigned i = 0; i < DEVQ_METRICS_BOUNDS; i++) {
		vals[n++] = devq_metrics_bounds_ns[i] - 1;
		vals[n++] = devq_metrics_bounds_ns[i];
		vals[n++] = devq_metrics_bounds_ns[i] + 1;
	}
	vals[n++] = 0;
	vals[n++] = 1;
	vals[n++] = 1ull << 40;
	vals[n++] = UINT64_MAX / 4;
	for (unsigned k = 0; k < n; k++) {
		memset(&m, 0, sizeof(m));
		uint64_t t0 = 1000; /* a phase from 0 is left out */
		/* submit = v; the other phases 0 long */
		devq_metrics_op_done(&m, 0, 0, t0, t0 + vals[k], t0 + vals[k], t0 + vals[k],
				     t0 + vals[k]);
		unsigned want = 0;
		while (want < DEVQ_METRICS_BOUNDS && vals[k] > devq_metrics_bounds_ns[want])
			want++;
		ck_assert_msg(m.hist[0][want] == 1, "%llu ns not in bucket %u",
			      (unsigned long long)vals[k], want);
		ck_assert_uint_eq(m.hist_count[0], 1);
		ck_assert_uint_eq(m.hist_sum[0], vals[k]);
		ck_assert_uint_eq(m.hist[1][0], 1);
	}
}
END_TEST

/* The same for a tenant's op histograms (devq_tenant_op_seconds), whose
 * bounds are their own (50 us .. 60 s): each phase in the first bucket at
 * or above its length, at every bound, one below and one past it; queued
 * is receipt -> device start, total receipt -> observed. */
START_TEST(test_metrics_tenant_buckets_at_bounds)
{
	for (unsigned i = 1; i < DEVQ_METRICS_TBOUNDS; i++)
		ck_assert_msg(devq_metrics_tbounds_ns[i] >= 2 * devq_metrics_tbounds_ns[i - 1],
			      "tenant bound %u is under twice the one before", i);
	ck_assert_uint_eq(devq_metrics_tbounds_ns[0], 50000);
	ck_assert_uint_eq(devq_metrics_tbounds_ns[DEVQ_METRICS_TBOUNDS - 1], 60000000000ull);
	uint64_t vals[3 * DEVQ_METRICS_TBOUNDS + 3];
	unsigned n = 0;
	for (unsigned i = 0; i < DEVQ_METRICS_TBOUNDS; i++) {
		vals[n++] = devq_metrics_tbounds_ns[i] - 1;
		vals[n++] = devq_metrics_tbounds_ns[i];
		vals[n++] = devq_metrics_tbounds_ns[i] + 1;
	}
	vals[n++] = 0;
	vals[n++] = 1;
	vals[n++] = 1ull << 40;
	for (unsigned k = 0; k < n; k++) {
		struct devq_metrics_thist h;
		memset(&h, 0, sizeof(h));
		uint64_t t0 = 1000;
		/* queued = v, device 0 long, total = v + 7 */
		devq_metrics_tenant_op(&h, t0, t0 + vals[k], t0 + vals[k], t0 + vals[k] + 7);
		unsigned want = 0;
		while (want < DEVQ_METRICS_TBOUNDS && vals[k] > devq_metrics_tbounds_ns[want])
			want++;
		ck_assert_msg(h.hist[0][want] == 1, "%llu ns not in bucket %u",
			      (unsigned long long)vals[k], want);
		ck_assert_uint_eq(h.sum[0], vals[k]);
		ck_assert_uint_eq(h.hist[1][0], 1);
		ck_assert_uint_eq(h.sum[2], vals[k] + 7);
		ck_assert_uint_eq(h.count[2], 1);
	}
	/* A phase from 0 (no receipt stamp) is left out. */
	struct devq_metrics_thist h;
	memset(&h, 0, sizeof(h));
	devq_metrics_tenant_op(&h, 0, 10, 20, 30);
	ck_assert_uint_eq(h.count[0], 0);
	ck_assert_uint_eq(h.count[1], 1);
	ck_assert_uint_eq(h.count[2], 0);
}
END_TEST

/* DEVQD_CRING_ENTRIES: at most 65536 entries (exactly that, and one past
 * it, give 65536); others round down to a power of two; 0 makes no ring. */
START_TEST(test_cring_size_setting)
{
	static const struct {
		const char *env;
		uint32_t want;
	} cases[] = { { "65536", 65536 }, { "65537", 65536 }, { "100", 64 }, { "1", 1 },
		      { "0", 0 } };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		setenv("DEVQD_CRING_ENTRIES", cases[i].env, 1);
		struct devq_cpage *cp = page_alone();
		unsetenv("DEVQD_CRING_ENTRIES");
		ck_assert_uint_eq(cp->ring_n, cases[i].want);
		ck_assert_uint_eq(cp->pub->ring_size, cases[i].want);
		ck_assert(cases[i].want ? cp->ring != NULL : cp->ring == NULL);
		ck_assert_uint_eq(cp->pub->ring_off != 0, cases[i].want != 0);
		devq_cpage_free(cp);
	}
}
END_TEST

/* ---- the CPU workers' watch budget (base/lock.h) ----------------------- */

/* A chain of small ops across two streams: waits of a few us, one now and
 * then longer (the producer preempted, the watch missed, the waiter slept).
 * The budget must not fall below what those waits take, or every link
 * sleeps; the rule before made it 2 us after the first miss and kept it
 * there (bench/RESULTS.md: the dependent chain at 15-27 us per op). */
START_TEST(test_spin_adapt_chain_keeps_budget)
{
	const uint64_t min = 2000, max = 100000;
	uint64_t b = max;
	/* Short waits never lower it. */
	for (int i = 0; i < 100; i++)
		b = devq_spin_adapt(b, 2500, false, min, max);
	ck_assert_uint_eq(b, max);
	/* From the floor (after long producers), a short producer raises it
	 * to twice its time, and a longer one higher still. */
	ck_assert_uint_eq(devq_spin_adapt(min, 5000, true, min, max), 10000);
	ck_assert_uint_eq(devq_spin_adapt(10000, 4000, false, min, max), 10000);
	ck_assert_uint_eq(devq_spin_adapt(10000, 30000, true, min, max), 60000);
	/* A producer that ended within the budget but whose watch missed
	 * (its completion's own work came first): twice the budget, from
	 * the floor up, even when its end reads as before the watch (0). */
	ck_assert_uint_eq(devq_spin_adapt(min, 0, true, min, max), 2 * min);
	ck_assert_uint_eq(devq_spin_adapt(min, 1000, true, min, max), 2 * min);
	ck_assert_uint_eq(devq_spin_adapt(min, 1000, false, min, max), min);
	/* Just below max: twice it, capped at max; at max and past it: long
	 * producers, half the budget each, down to the floor, missed or not. */
	ck_assert_uint_eq(devq_spin_adapt(min, max - 1, true, min, max), max);
	ck_assert_uint_eq(devq_spin_adapt(max, max, true, min, max), max / 2);
	ck_assert_uint_eq(devq_spin_adapt(max, max + 1, true, min, max), max / 2);
	b = max;
	for (int i = 0; i < 20; i++)
		b = devq_spin_adapt(b, 10 * max, true, min, max);
	ck_assert_uint_eq(b, min);
	ck_assert_uint_eq(devq_spin_adapt(min + 1, max, false, min, max), min);
}
END_TEST

/* ---- the submit ring (proto/cpage_layout.h) ---------------------------- */

static void log_capture(void);
static void log_captured(char *out, size_t n);

/* A page with a submit ring of DEVQD_SQ_ENTRIES=entries (NULL: the
 * default); *bell gets the client's doorbell (-1: none). */
static struct devq_cpage *page_sq(const char *entries, int *bell)
{
	struct devq_cpage *cp;
	int fds[4];
	if (entries)
		setenv("DEVQD_SQ_ENTRIES", entries, 1);
	ck_assert_int_eq(devq_cpage_create(4, true, &cp, fds), 0);
	unsetenv("DEVQD_SQ_ENTRIES");
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(close(fds[i]), 0);
	*bell = cp->sq_n ? fds[3] : -1;
	if (!cp->sq_n)
		ck_assert_int_eq(fds[3], -1);
	return cp;
}

/* What a client does: entry tail % n gets len bytes of fill and offset
 * off, then tail = tail + 1.  Returns the new tail. */
static uint64_t sq_write(struct devq_cpage *cp, uint64_t tail, uint32_t len, uint8_t fill,
			 uint64_t off)
{
	struct devq_sqe *e = &cp->sqe[tail % cp->sq_n];
	e->len = len;
	e->off = off;
	memset(e->frame, fill, len < DEVQ_SQE_FRAME ? len : DEVQ_SQE_FRAME);
	atomic_store(&cp->sq->tail, tail + 1);
	return tail + 1;
}

START_TEST(test_sq_size_setting)
{
	static const struct {
		const char *env;
		uint32_t want;
	} cases[] = { { "1024", 1024 }, { "1025", 1024 }, { "100", 64 }, { "1", 1 }, { "0", 0 } };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int bell;
		struct devq_cpage *cp = page_sq(cases[i].env, &bell);
		ck_assert_uint_eq(cp->sq_n, cases[i].want);
		ck_assert(cases[i].want ? cp->sq != NULL && cp->bell >= 0 : cp->sq == NULL && cp->bell < 0);
		/* The hint page holds the ring whole. */
		ck_assert_uint_ge(cp->hint_len, DEVQ_SQ_OFF + (size_t)cases[i].want * sizeof(struct devq_sqe));
		if (bell >= 0)
			ck_assert_int_eq(close(bell), 0);
		devq_cpage_free(cp);
	}
	/* Not asked for: none, whatever the setting. */
	struct devq_cpage *cp = page_alone();
	ck_assert_ptr_null(cp->sq);
	ck_assert_int_eq(cp->bell, -1);
	devq_cpage_free(cp);
}
END_TEST

/* An entry is taken once the socket frames before its offset are, in
 * order, copied out whole; the head is published for the client. */
START_TEST(test_sq_take_in_order)
{
	int bell;
	struct devq_cpage *cp = page_sq("4", &bell);
	uint8_t buf[DEVQ_SQE_FRAME];
	uint32_t len = 0;
	char err[200] = "";
	ck_assert(!devq_cpage_sq_pending(cp));
	ck_assert_int_eq(devq_cpage_sq_take(cp, 0, buf, &len, err, sizeof(err)), 0);
	uint64_t tail = sq_write(cp, 0, 10, 0xa1, 100);
	ck_assert(devq_cpage_sq_pending(cp));
	/* 99 bytes of socket frames taken: the frame before it is not. */
	ck_assert_int_eq(devq_cpage_sq_take(cp, 99, buf, &len, err, sizeof(err)), 0);
	ck_assert_int_eq(devq_cpage_sq_take(cp, 100, buf, &len, err, sizeof(err)), 1);
	ck_assert_uint_eq(len, 10);
	ck_assert_uint_eq(buf[0], 0xa1);
	ck_assert_uint_eq(buf[9], 0xa1);
	ck_assert_uint_eq(atomic_load(&cp->pub->sq_head), 1);
	ck_assert(!devq_cpage_sq_pending(cp));
	/* Same offset again (no socket frame between): in order; an entry of
	 * exactly DEVQ_SQE_FRAME bytes is whole. */
	tail = sq_write(cp, tail, DEVQ_SQE_FRAME, 0xb2, 100);
	tail = sq_write(cp, tail, 0, 0, 150);
	ck_assert_int_eq(devq_cpage_sq_take(cp, 200, buf, &len, err, sizeof(err)), 1);
	ck_assert_uint_eq(len, DEVQ_SQE_FRAME);
	ck_assert_uint_eq(buf[DEVQ_SQE_FRAME - 1], 0xb2);
	ck_assert_int_eq(devq_cpage_sq_take(cp, 200, buf, &len, err, sizeof(err)), 1);
	ck_assert_uint_eq(len, 0);
	ck_assert_uint_eq(atomic_load(&cp->pub->sq_head), 3);
	/* A full ring (n entries past the head) is taken whole, across the
	 * wrap. */
	for (int i = 0; i < 4; i++)
		tail = sq_write(cp, tail, 1, (uint8_t)i, 150);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(devq_cpage_sq_take(cp, 150, buf, &len, err, sizeof(err)), 1);
		ck_assert_uint_eq(buf[0], (uint8_t)i);
	}
	ck_assert_int_eq(devq_cpage_sq_take(cp, 150, buf, &len, err, sizeof(err)), 0);
	ck_assert_str_eq(err, "");
	ck_assert_int_eq(close(bell), 0);
	devq_cpage_free(cp);
}
END_TEST

/* The client breaks the ring's rules: one past each bound is a protocol
 * error that says which, and nothing is taken. */
START_TEST(test_sq_take_refuses)
{
	uint8_t buf[DEVQ_SQE_FRAME];
	uint32_t len = 0;
	char err[200];
	int bell;
	/* A tail n + 1 past the head. */
	struct devq_cpage *cp = page_sq("4", &bell);
	atomic_store(&cp->sq->tail, 5);
	ck_assert_int_eq(devq_cpage_sq_take(cp, 0, buf, &len, err, sizeof(err)), -EPROTO);
	ck_assert_msg(strstr(err, "tail 5 is more than its 4 entries past the 0 taken"), "%s", err);
	ck_assert_uint_eq(atomic_load(&cp->pub->sq_head), 0);
	/* Behind the head (a wrapped subtraction): the same. */
	atomic_store(&cp->sq->tail, 0);
	cp->sq_head = 2;
	ck_assert_int_eq(devq_cpage_sq_take(cp, 0, buf, &len, err, sizeof(err)), -EPROTO);
	ck_assert_int_eq(close(bell), 0);
	devq_cpage_free(cp);
	/* One byte over an entry. */
	cp = page_sq("4", &bell);
	sq_write(cp, 0, DEVQ_SQE_FRAME + 1, 0, 0);
	ck_assert_int_eq(devq_cpage_sq_take(cp, 0, buf, &len, err, sizeof(err)), -EPROTO);
	ck_assert_msg(strstr(err, "entry 0 of 241 bytes, above the 240 an entry holds"), "%s", err);
	ck_assert_int_eq(close(bell), 0);
	devq_cpage_free(cp);
	/* An offset below the previous entry's. */
	cp = page_sq("4", &bell);
	uint64_t tail = sq_write(cp, 0, 1, 0, 64);
	sq_write(cp, tail, 1, 0, 63);
	ck_assert_int_eq(devq_cpage_sq_take(cp, 64, buf, &len, err, sizeof(err)), 1);
	ck_assert_int_eq(devq_cpage_sq_take(cp, 64, buf, &len, err, sizeof(err)), -EPROTO);
	ck_assert_msg(strstr(err, "entry 1 says socket offset 63, before the previous entry's 64"),
		      "%s", err);
	ck_assert_uint_eq(atomic_load(&cp->pub->sq_head), 1);
	ck_assert_int_eq(close(bell), 0);
	devq_cpage_free(cp);
}
END_TEST

/* Answering the doorbell drains its pipe, at most 256 bytes a time, and
 * clears rung, so that the client's next entry rings again; a pipe whose
 * write end the client closed says so (-EPIPE). */
START_TEST(test_sq_answer_clears_rung)
{
	int bell;
	struct devq_cpage *cp = page_sq(NULL, &bell);
	ck_assert_uint_eq(cp->sq_n, DEVQ_SQ_DEFAULT);
	char bytes[257] = { 0 }, v;
	atomic_store(&cp->sq->rung, 1);
	ck_assert_int_eq(write(bell, bytes, 1), 1);
	ck_assert_int_eq(devq_cpage_sq_answer(cp), 0);
	ck_assert_uint_eq(atomic_load(&cp->sq->rung), 0);
	ck_assert_int_eq(read(cp->bell, &v, 1), -1);
	ck_assert_int_eq(errno, EAGAIN);
	/* 257 bytes (a hostile client): 256 now, the last at the next call. */
	ck_assert_int_eq(write(bell, bytes, sizeof(bytes)), sizeof(bytes));
	ck_assert_int_eq(devq_cpage_sq_answer(cp), 0);
	ck_assert_int_eq(read(cp->bell, &v, 1), 1);
	ck_assert_int_eq(read(cp->bell, &v, 1), -1);
	/* The client cannot make devqd's end blocking: its own end is
	 * another open file. */
	ck_assert_int_eq(fcntl(bell, F_SETFL, 0), 0);
	ck_assert(fcntl(cp->bell, F_GETFL) & O_NONBLOCK);
	ck_assert_int_eq(devq_cpage_sq_answer(cp), 0); /* empty: returns at once */
	/* Already drained (a wake-up for nothing): no error. */
	log_capture();
	devq_cpage_sq_answer(cp);
	char got[256];
	log_captured(got, sizeof(got));
	ck_assert_str_eq(got, "");
	/* A read that fails otherwise is logged (a closed doorbell: a bug). */
	ck_assert_int_eq(close(cp->bell), 0);
	log_capture();
	devq_cpage_sq_answer(cp);
	log_captured(got, sizeof(got));
	ck_assert_msg(strstr(got, "submit ring doorbell: read: Bad file descriptor"), "log: '%s'",
		      got);
	cp->bell = -1;
	ck_assert_int_eq(close(bell), 0);
	devq_cpage_free(cp);
	/* The client closed its end: end of file, said once per call, and
	 * not logged (the session goes on without its doorbell). */
	cp = page_sq(NULL, &bell);
	ck_assert_int_eq(close(bell), 0);
	log_capture();
	ck_assert_int_eq(devq_cpage_sq_answer(cp), -EPIPE);
	log_captured(got, sizeof(got));
	ck_assert_str_eq(got, "");
	ck_assert_uint_eq(atomic_load(&cp->sq->rung), 0);
	devq_cpage_free(cp);
	/* No ring, or no page: nothing to answer. */
	cp = page_alone();
	ck_assert_int_eq(devq_cpage_sq_answer(cp), 0);
	ck_assert_int_eq(devq_cpage_sq_answer(NULL), 0);
	devq_cpage_free(cp);
}
END_TEST

/* ---- validation of an op's buffers and arguments ---------------------- */

/* Runs devq_validate_op on a fresh job, as devq_sched_submit does, and
 * checks its code and that err names want (when not NULL).  Returns the
 * job for its filled fields; the caller discards it. */
static struct devq_job *validated(struct devq_session *s, const Devq__Op *m, int code,
				  const char *want)
{
	struct devq_job *op = devq_job_new();
	ck_assert_ptr_nonnull(op);
	char err[DEVQ_BOP_MSG] = "";
	int r = devq_validate_op(s, m, op, err, sizeof(err));
	ck_assert_msg(r == code, "validate: %d, want %d (%s)", r, code, err);
	if (want)
		ck_assert_msg(strstr(err, want), "error '%s' does not say '%s'", err, want);
	if (code)
		ck_assert_uint_eq(op->nbufs, 0);
	return op;
}

static void validate_copy(struct devq_session *s, uint64_t src, uint64_t src_off, uint64_t dst,
			  uint64_t dst_off, uint64_t size, int code, const char *want)
{
	struct opmsg m;
	devq__op__init(&m.op);
	devq__copy_op__init(&m.copy);
	devq__buffer_arg__init(&m.a);
	devq__buffer_arg__init(&m.b);
	m.a.id = src;
	m.a.offset = src_off;
	m.b.id = dst;
	m.b.offset = dst_off;
	m.copy.src = &m.a;
	m.copy.dst = &m.b;
	m.copy.size = size;
	m.op.body_case = DEVQ__OP__BODY_COPY;
	m.op.copy = &m.copy;
	struct devq_job *j = validated(s, &m.op, code, want);
	if (!code) {
		struct devq_buf *a = devq_idmap_get(&s->bufs, src), *b = devq_idmap_get(&s->bufs, dst);
		ck_assert_int_eq(j->b.kind, DEVQ_BOP_COPY);
		ck_assert_uint_eq(j->b.src, a->devaddr + src_off);
		ck_assert_uint_eq(j->b.dst, b->devaddr + dst_off);
		ck_assert_uint_eq(j->b.size, size);
	}
	devq_job_discard(j);
}

static void validate_fill(struct devq_session *s, uint64_t dst, uint64_t off, uint64_t size,
			  int code, const char *want)
{
	struct opmsg m;
	devq__op__init(&m.op);
	devq__fill_op__init(&m.fill);
	devq__buffer_arg__init(&m.a);
	m.a.id = dst;
	m.a.offset = off;
	m.fill.dst = &m.a;
	m.fill.size = size;
	m.fill.pattern = 0xabcd;
	m.op.body_case = DEVQ__OP__BODY_FILL;
	m.op.fill = &m.fill;
	struct devq_job *j = validated(s, &m.op, code, want);
	if (!code) {
		struct devq_buf *b = devq_idmap_get(&s->bufs, dst);
		ck_assert_int_eq(j->b.kind, DEVQ_BOP_FILL);
		ck_assert_uint_eq(j->b.dst, b->devaddr + off);
		ck_assert_uint_eq(j->b.size, size);
		ck_assert_uint_eq(j->b.pattern, 0xabcd);
		ck_assert_uint_eq(j->nbufs, 1);
		ck_assert_ptr_eq(j->bufs[0], b);
		ck_assert_uint_eq(j->acc[0], DEVQ_ACC_OUT);
	}
	devq_job_discard(j);
}

/* Every range of a copy or fill at exactly its buffer's end is accepted and
 * one byte past it refused: offset + size = 65 on a 64-byte buffer once let
 * an op read or write one byte past the client's buffer with every test
 * green.  An empty range at the very end is inside; one past the end is
 * not, whatever its size. */
START_TEST(test_validate_ranges_at_end_and_past)
{
	struct devq_session *s = two_queues(); /* buffers 5 and 6: 64 bytes */
	validate_copy(s, 5, 0, 6, 0, 64, 0, NULL);
	validate_copy(s, 5, 0, 6, 0, 65, DEVQ__CODE__OUT_OF_RANGE, "copy source");
	validate_copy(s, 5, 1, 6, 0, 63, 0, NULL);
	validate_copy(s, 5, 1, 6, 0, 64, DEVQ__CODE__OUT_OF_RANGE, "bytes [1, 65) lie outside");
	validate_copy(s, 5, 0, 6, 1, 63, 0, NULL);
	validate_copy(s, 5, 0, 6, 1, 64, DEVQ__CODE__OUT_OF_RANGE, "copy destination");
	validate_copy(s, 5, 64, 6, 64, 0, 0, NULL);
	validate_copy(s, 5, 65, 6, 0, 0, DEVQ__CODE__OUT_OF_RANGE, "copy source");
	validate_copy(s, 5, 0, 6, 65, 0, DEVQ__CODE__OUT_OF_RANGE, "copy destination");
	/* An offset whose end wraps around says so; an ordinary one does not. */
	validate_copy(s, 5, UINT64_MAX - 3, 6, 0, 8, DEVQ__CODE__OUT_OF_RANGE, "(overflow)");
	validate_copy(s, 5, 1, 6, 0, UINT64_MAX, DEVQ__CODE__OUT_OF_RANGE, "[1, 0 (overflow))");
	{
		struct opmsg m;
		devq__op__init(&m.op);
		devq__fill_op__init(&m.fill);
		devq__buffer_arg__init(&m.a);
		m.a.id = 5;
		m.a.offset = 68;
		m.fill.dst = &m.a;
		m.op.body_case = DEVQ__OP__BODY_FILL;
		m.op.fill = &m.fill;
		struct devq_job *j = validated(s, &m.op, DEVQ__CODE__OUT_OF_RANGE, "[68, 68)");
		devq_job_discard(j);
	}
	validate_copy(s, 5, 65, 6, 0, 0, DEVQ__CODE__OUT_OF_RANGE, "[65, 65) lie outside buffer 5");

	validate_fill(s, 5, 0, 64, 0, NULL);
	validate_fill(s, 5, 60, 4, 0, NULL);
	validate_fill(s, 5, 60, 8, DEVQ__CODE__OUT_OF_RANGE, "fill destination");
	validate_fill(s, 5, 64, 0, 0, NULL);
	validate_fill(s, 5, 64, 4, DEVQ__CODE__OUT_OF_RANGE, "fill destination");
	validate_fill(s, 5, 0, 68, DEVQ__CODE__OUT_OF_RANGE, "fill destination");
	validate_fill(s, 5, 62, 4, DEVQ__CODE__INVALID_ARGUMENT, "offset 62 is not a multiple of 4");
	validate_fill(s, 5, 0, 6, DEVQ__CODE__INVALID_ARGUMENT, "size 6 is not a multiple of 4");
	engine_down();
}
END_TEST

/* Which buffers an op uses, each once with its merged access, and why
 * one is refused: unknown, missing, being released, read-only. */
START_TEST(test_validate_buffers_used)
{
	struct devq_session *s = two_queues();
	struct opmsg m;
	devq__op__init(&m.op);
	devq__copy_op__init(&m.copy);
	devq__buffer_arg__init(&m.a);
	devq__buffer_arg__init(&m.b);
	m.a.id = 5;
	m.b.id = 6;
	m.copy.src = &m.a;
	m.copy.dst = &m.b;
	m.copy.size = 8;
	m.op.body_case = DEVQ__OP__BODY_COPY;
	m.op.copy = &m.copy;
	struct devq_job *j = validated(s, &m.op, 0, NULL);
	ck_assert_uint_eq(j->nbufs, 2);
	ck_assert_ptr_eq(j->bufs[0], devq_idmap_get(&s->bufs, 5));
	ck_assert_ptr_eq(j->bufs[1], devq_idmap_get(&s->bufs, 6));
	ck_assert_uint_eq(j->acc[0], DEVQ_ACC_IN);
	ck_assert_uint_eq(j->acc[1], DEVQ_ACC_OUT);
	devq_job_discard(j);
	/* Within one buffer: one entry, read and written. */
	m.b.id = 5;
	m.b.offset = 32;
	j = validated(s, &m.op, 0, NULL);
	ck_assert_uint_eq(j->nbufs, 1);
	ck_assert_uint_eq(j->acc[0], DEVQ_ACC_IN | DEVQ_ACC_OUT);
	devq_job_discard(j);

	m.b.id = 42;
	devq_job_discard(validated(s, &m.op, DEVQ__CODE__NOT_FOUND, "copy destination: buffer 42 not found"));
	m.b.id = 6;
	m.copy.src = NULL;
	devq_job_discard(validated(s, &m.op, DEVQ__CODE__INVALID_ARGUMENT, "copy source: no buffer given"));
	m.copy.src = &m.a;
	m.op.body_case = DEVQ__OP__BODY__NOT_SET;
	devq_job_discard(validated(s, &m.op, DEVQ__CODE__INVALID_ARGUMENT, "no body"));
	m.op.body_case = DEVQ__OP__BODY_COPY;

	/* Read-only imports are read, never written. */
	int fd = memfd_create("devq-test", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 4096), 0);
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	char err[200];
	ck_assert_int_eq(devq_buffer_import(s, 7, 4096, true, fd, err, sizeof(err)), 0);
	close(fd);
	validate_copy(s, 7, 0, 6, 0, 64, 0, NULL);
	validate_copy(s, 6, 0, 7, 0, 64, DEVQ__CODE__PERMISSION_DENIED, "imported read-only");
	validate_fill(s, 7, 0, 4, DEVQ__CODE__PERMISSION_DENIED, "imported read-only");

	/* A buffer whose release waits for an op in flight takes no new op. */
	submit(s, 1, 6, 0, 0, NULL, NULL);
	devq_buffer_release(devq_idmap_get(&s->bufs, 6));
	validate_copy(s, 5, 0, 6, 0, 8, DEVQ__CODE__FAILED_PRECONDITION, "is being released");
	validate_copy(s, 5, 0, 5, 8, 8, 0, NULL);
	complete_all();
	engine_down();
}
END_TEST

/* A kernel op with up to six named arguments. */
struct kop {
	Devq__Op op;
	Devq__KernelOp k;
	Devq__Arg a[6], *ap[6];
	Devq__BufferArg ba[6];
	unsigned nba;
};

static Devq__Op *kernel_op(struct kop *m, uint32_t exe)
{
	devq__op__init(&m->op);
	devq__kernel_op__init(&m->k);
	m->k.executable = exe;
	m->k.args = m->ap;
	m->nba = 0;
	m->op.body_case = DEVQ__OP__BODY_KERNEL;
	m->op.kernel = &m->k;
	return &m->op;
}

static Devq__Arg *arg(struct kop *m, const char *name)
{
	Devq__Arg *a = &m->a[m->k.n_args];
	devq__arg__init(a);
	a->name = (char *)name;
	m->ap[m->k.n_args++] = a;
	return a;
}

static void arg_u64(struct kop *m, const char *name, uint64_t v)
{
	Devq__Arg *a = arg(m, name);
	a->value_case = DEVQ__ARG__VALUE_U64;
	a->u64 = v;
}

static void arg_buf(struct kop *m, const char *name, uint64_t id, uint64_t off)
{
	Devq__Arg *a = arg(m, name);
	Devq__BufferArg *b = &m->ba[m->nba++];
	devq__buffer_arg__init(b);
	b->id = id;
	b->offset = off;
	a->value_case = DEVQ__ARG__VALUE_BUFFER;
	a->buffer = b;
}

static uint32_t kernel_index(const char *name)
{
	const struct devq_kernel *k = devq_kernel_find(name);
	ck_assert_ptr_nonnull(k);
	return (uint32_t)(k - devq_kernels);
}

/* fill_u32 (n:u64, value:u32, dst:out u32[n]) of n elements at off in
 * buffer 5, its arguments in the signature's order. */
static void validate_fill_u32(struct devq_session *s, uint64_t n, uint64_t off, int code,
			      const char *want)
{
	struct kop m;
	kernel_op(&m, kernel_index("fill_u32"));
	arg_u64(&m, "n", n);
	Devq__Arg *v = arg(&m, "value");
	v->value_case = DEVQ__ARG__VALUE_U32;
	v->u32 = 9;
	arg_buf(&m, "dst", 5, off);
	struct devq_job *j = validated(s, &m.op, code, want);
	if (!code) {
		ck_assert_int_eq(j->b.kind, DEVQ_BOP_KERNEL);
		ck_assert_uint_eq(j->b.args[0].u64, n);
		ck_assert_uint_eq(j->b.args[1].u32, 9);
		struct devq_buf *b = devq_idmap_get(&s->bufs, 5);
		ck_assert_uint_eq(j->b.args[2].u64, b->devaddr + off);
		ck_assert_uint_eq(j->nbufs, 1);
		ck_assert_uint_eq(j->acc[0], DEVQ_ACC_OUT);
	}
	devq_job_discard(j);
}

/* A kernel's buffer argument: its extent (from n and the element size) at
 * the buffer's end and one element past it, and its alignment. */
START_TEST(test_validate_kernel_buffer_extent)
{
	struct devq_session *s = two_queues();
	validate_fill_u32(s, 16, 0, 0, NULL);
	validate_fill_u32(s, 17, 0, DEVQ__CODE__OUT_OF_RANGE, "argument 'dst'");
	validate_fill_u32(s, 15, 4, 0, NULL);
	validate_fill_u32(s, 16, 4, DEVQ__CODE__OUT_OF_RANGE, "argument 'dst'");
	validate_fill_u32(s, 0, 64, 0, NULL);
	validate_fill_u32(s, 0, 68, DEVQ__CODE__OUT_OF_RANGE, "argument 'dst'");
	validate_fill_u32(s, 1, 61, DEVQ__CODE__INVALID_ARGUMENT, "not a multiple of 4");
	/* The overflow names the dims as given, each once. */
	validate_fill_u32(s, UINT64_MAX / 2, 0, DEVQ__CODE__OUT_OF_RANGE,
			  "argument 'dst': extent overflows 64 bits (9223372036854775807 u32)");
	/* n above the op duration bound is not a duration: only ns is. */
	validate_fill_u32(s, E.cfg.max_op_ns + 1, 0, DEVQ__CODE__OUT_OF_RANGE, "argument 'dst'");
	engine_down();
}
END_TEST

/* How a kernel op's arguments are matched to its signature, and which
 * executables exist. */
START_TEST(test_validate_kernel_arguments)
{
	engine_up((struct devq_config){ .test_faults = true });
	struct devq_session *s = session(1000);
	buffer(s, 5, 64);
	struct kop m;
	uint32_t fill = kernel_index("fill_u32"), spin = kernel_index("spin");

	/* Named out of order: matched by name. */
	kernel_op(&m, fill);
	arg_buf(&m, "dst", 5, 0);
	arg(&m, "value")->value_case = DEVQ__ARG__VALUE_U32;
	arg_u64(&m, "n", 2);
	struct devq_job *j = validated(s, &m.op, 0, NULL);
	ck_assert_uint_eq(j->b.args[0].u64, 2);
	devq_job_discard(j);
	/* One argument more than the signature has, even with an empty name. */
	arg(&m, "")->value_case = DEVQ__ARG__VALUE_U32;
	devq_job_discard(validated(s, &m.op, DEVQ__CODE__INVALID_ARGUMENT, "has no argument ''"));
	m.k.n_args = 3;
	m.a[2].name = "nn";
	devq_job_discard(validated(s, &m.op, DEVQ__CODE__INVALID_ARGUMENT, "has no argument 'nn'"));
	m.a[2].name = "value";
	devq_job_discard(validated(s, &m.op, DEVQ__CODE__INVALID_ARGUMENT, "'value' given twice"));
	m.k.n_args = 2;
	devq_job_discard(validated(s, &m.op, DEVQ__CODE__INVALID_ARGUMENT, "'n' (u64) missing"));
	m.k.n_args = 3;
	m.a[2].name = "n";
	m.a[1].value_case = DEVQ__ARG__VALUE_U64;
	devq_job_discard(validated(s, &m.op, DEVQ__CODE__INVALID_ARGUMENT, "expected u32, got u64"));
	m.a[1].value_case = DEVQ__ARG__VALUE_U32;
	m.a[0].value_case = DEVQ__ARG__VALUE_U64;
	devq_job_discard(validated(s, &m.op, DEVQ__CODE__INVALID_ARGUMENT, "expected a buffer"));

	/* bias_act_f32's act: 1 (ReLU) accepted, 2 refused, not applied as
	 * the identity. */
	buffer(s, 6, 64);
	kernel_op(&m, kernel_index("bias_act_f32"));
	arg_u64(&m, "rows", 2);
	arg_u64(&m, "cols", 4);
	Devq__Arg *act = arg(&m, "act");
	act->value_case = DEVQ__ARG__VALUE_U32;
	act->u32 = 1;
	arg_buf(&m, "bias", 5, 0);
	arg_buf(&m, "x", 6, 0);
	devq_job_discard(validated(s, &m.op, 0, NULL));
	act->u32 = 2;
	devq_job_discard(validated(s, &m.op, DEVQ__CODE__INVALID_ARGUMENT,
				   "argument 'act': 2 is not an activation"));

	/* ns is bounded by max-op-ms: at the bound accepted, past it not. */
	kernel_op(&m, spin);
	arg_u64(&m, "ns", E.cfg.max_op_ns);
	devq_job_discard(validated(s, &m.op, 0, NULL));
	m.a[0].u64 = E.cfg.max_op_ns + 1;
	devq_job_discard(validated(s, &m.op, DEVQ__CODE__OUT_OF_RANGE, "exceeds the maximum op duration"));

	/* The built-ins are ids 0 .. devq_nkernels - 1 (the last, fault, only
	 * with fault injection on); the repository's start at
	 * DEVQ_REPO_FIRST_ID, and a missing one there gets a hint. */
	m.k.executable = (uint32_t)devq_nkernels - 1;
	ck_assert_str_eq(devq_kernels[devq_nkernels - 1].name, "fault");
	m.a[0].u64 = 1;
	devq_job_discard(validated(s, &m.op, 0, NULL));
	m.k.executable = (uint32_t)devq_nkernels;
	j = validated(s, &m.op, DEVQ__CODE__NOT_FOUND, "not found");
	ck_assert_ptr_null(j->b.kernel);
	devq_job_discard(j);
	E.cfg.test_faults = false;
	m.k.executable = (uint32_t)devq_nkernels - 1;
	devq_job_discard(validated(s, &m.op, DEVQ__CODE__NOT_FOUND, "not found"));
	char err[DEVQ_BOP_MSG];
	m.k.executable = DEVQ_REPO_FIRST_ID - 1;
	j = devq_job_new();
	ck_assert_int_eq(devq_validate_op(s, &m.op, j, err, sizeof(err)), DEVQ__CODE__NOT_FOUND);
	ck_assert_ptr_null(strstr(err, "repository"));
	devq_job_discard(j);
	m.k.executable = DEVQ_REPO_FIRST_ID;
	devq_job_discard(validated(s, &m.op, DEVQ__CODE__NOT_FOUND, "removed from the repository?"));
	engine_down();
}
END_TEST

/* The largest buffer: exactly max-buffer-mb is accepted, one byte more is
 * refused (the admin's bound, checked before any memory is mapped), and so
 * is an empty buffer.  Creating and releasing one logs nothing: the log is
 * for what went wrong. */
START_TEST(test_buffer_size_at_bound_and_past)
{
	engine_up((struct devq_config){ 0 });
	struct devq_session *s = session(1000);
	uint64_t max = E.cfg.max_buffer_bytes;
	char path[] = "/tmp/devq-buffer-log-XXXXXX";
	int lfd = mkstemp(path);
	ck_assert_int_ge(lfd, 0);
	fflush(stderr);
	int saved = dup(STDERR_FILENO);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_ge(dup2(lfd, STDERR_FILENO), 0);

	int fd = -1;
	char err[200] = "";
	int r = devq_buffer_create(s, 1, max, DEVQ__BUFFER_KIND__SHARED, &fd, err, sizeof(err));
	ck_assert_msg(r == 0, "create at the bound: %s", err);
	ck_assert_int_eq(close(fd), 0);
	fd = -1;
	ck_assert_int_eq(devq_buffer_create(s, 2, max + 1, DEVQ__BUFFER_KIND__SHARED, &fd, err,
					    sizeof(err)),
			 DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_ptr_nonnull(strstr(err, "exceeds the maximum"));
	ck_assert_int_eq(fd, -1);
	ck_assert_int_eq(devq_buffer_create(s, 3, 0, DEVQ__BUFFER_KIND__SHARED, &fd, err, sizeof(err)),
			 DEVQ__CODE__INVALID_ARGUMENT);
	ck_assert_ptr_nonnull(strstr(err, "size 0"));
	ck_assert_uint_eq(s->nbufs, 1);
	ck_assert_uint_eq(E.bytes_mapped, max);
	devq_buffer_release(devq_idmap_get(&s->bufs, 1));
	flush_dirty();
	ck_assert_uint_eq(s->nbufs, 0);
	ck_assert_uint_eq(E.bytes_mapped, 0);

	fflush(stderr);
	ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
	ck_assert_int_eq(close(saved), 0);
	char got[512] = "";
	ssize_t n = pread(lfd, got, sizeof(got) - 1, 0);
	ck_assert_int_ge(n, 0);
	got[n] = '\0';
	ck_assert_int_eq(close(lfd), 0);
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_msg(n == 0, "log: '%s'", got);
	engine_down();
}
END_TEST

/* ---- fault injection (fault.h) ------------------------------------------ */

/* stderr, where the core logs, captured to a file while a test runs. */
static char cap_path[32];
static int cap_fd = -1, cap_saved = -1;

static void log_capture(void)
{
	strcpy(cap_path, "/tmp/devq-core-log-XXXXXX");
	cap_fd = mkstemp(cap_path);
	ck_assert_int_ge(cap_fd, 0);
	fflush(stderr);
	cap_saved = dup(STDERR_FILENO);
	ck_assert_int_ge(cap_saved, 0);
	ck_assert_int_ge(dup2(cap_fd, STDERR_FILENO), 0);
}

static void log_captured(char *got, size_t n)
{
	fflush(stderr);
	ck_assert_int_ge(dup2(cap_saved, STDERR_FILENO), 0);
	ck_assert_int_eq(close(cap_saved), 0);
	ssize_t k = pread(cap_fd, got, n - 1, 0);
	ck_assert_int_ge(k, 0);
	got[k] = '\0';
	ck_assert_int_eq(close(cap_fd), 0);
	ck_assert_int_eq(unlink(cap_path), 0);
}

/* Whether the log captured so far has needle (another thread may still be
 * writing it). */
static bool log_has(const char *needle)
{
	char buf[4096];
	ssize_t k = pread(cap_fd, buf, sizeof(buf) - 1, 0);
	if (k < 0)
		return false;
	buf[k] = '\0';
	return strstr(buf, needle) != NULL;
}

static unsigned open_fds(void)
{
	unsigned n = 0;
	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* Nothing of any session is left: no op, buffer, mapping or session. */
static void nothing_left(void)
{
	ck_assert_uint_eq(E.ops_in_flight, 0);
	ck_assert_uint_eq(E.nbufs, 0);
	ck_assert_uint_eq(E.bytes_mapped, 0);
	ck_assert_ptr_null(E.sessions);
	ck_assert_uint_eq(FK->n, 0);
}

/* One client's life as the server drives it, where any step may fail: a
 * session admitted, two queues, a shared buffer written on one queue and
 * read on the other into a device buffer, the ops completed, a completion
 * page, the session gone.  A step that fails must refuse cleanly (a code
 * and a reason); the session then ends as a refused client's does.
 * Returns whether every step went through. */
static char life_why[200];

static bool client_life(void)
{
	struct devq_session *s = devq_session_new(&E, 1234, 1000, 1000);
	if (!s)
		return false;
	bool ok = false;
	char why[200] = "";
	int fd = -1, r, line = 0;
#define STEP (line = __LINE__)
	struct devq_timeline *q;
	if (STEP, (r = devq_session_admit(s, why, sizeof(why))))
		goto end;
	s->may_high = true;
	if (STEP, (r = devq_timeline_open(s, 1, 0, &q, why, sizeof(why))) ||
	    (r = devq_timeline_open(s, 2, 0, &q, why, sizeof(why))))
		goto end;
	if (STEP, (r = devq_buffer_create(s, 5, 64, DEVQ__BUFFER_KIND__SHARED, &fd, why, sizeof(why))))
		goto end;
	ck_assert_int_eq(close(fd), 0);
	if (STEP, (r = devq_buffer_create(s, 99, 64, DEVQ__BUFFER_KIND__DEVICE, &fd, why, sizeof(why))))
		goto end;
	uint32_t wq = 1;
	uint64_t wp = 1;
	if (STEP, (r = try_submit(s, 1, 5, 0, 0, NULL, NULL, why, sizeof(why))) ||
	    (STEP, (r = try_submit(s, 2, 0, 5, 1, &wq, &wp, why, sizeof(why)))) ||
	    (r = try_submit(s, 1, 5, 0, 0, NULL, NULL, why, sizeof(why))))
		goto end;
	devq_sched_drain(&E);
	complete_all();
	int fds[4];
	if (STEP, (r = devq_cpage_create(4, false, &s->cpage, fds)) < 0) {
		snprintf(why, sizeof(why), "completion page: %s", strerror(-r));
		goto end;
	}
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(close(fds[i]), 0);
	ok = true;
end:
	if (!ok)
		/* devq_sched_submit's -ENOMEM (a point it cannot track) ends
		 * the session; the request layer says why. */
		ck_assert_msg(r > 0 ? why[0] != '\0' : r == -ENOMEM,
			      "a refusal without a code or reason (%d, line %d)", r, line);
	snprintf(life_why, sizeof(life_why), "%s", why);
	/* What was handed over still completes, as a backend's ops do. */
	complete_all();
	session_end(s);
	flush_dirty();
	return ok;
}

/* Every allocation of a client's life, failed in turn: each refusal is
 * clean, nothing is left, and the next client is served. */
START_TEST(test_fault_each_allocation_of_a_client)
{
	unsigned n, refused = 0, fds = open_fds();
	for (n = 1; n < 1000; n++) {
		engine_up((struct devq_config){ 0 });
		fault_arm(FAULT_ALLOC, n, 1, ENOMEM);
		bool ok = client_life();
		unsigned failed = fault_failed(FAULT_ALLOC);
		fault_reset();
		refused += !ok;
		nothing_left();
		ck_assert_msg(client_life(), "the client after allocation %u failed was refused: %s",
			      n, life_why);
		nothing_left();
		engine_down();
		ck_assert_uint_eq(open_fds(), fds);
		if (!failed) {
			ck_assert(ok);
			break;
		}
	}
	ck_assert_uint_lt(n, 1000);
	ck_assert_uint_gt(n, 10); /* the life allocates; each was failed once */
	ck_assert_uint_gt(refused, 5);
}
END_TEST

/* Each allocation of a session's admission failed in turn: it is refused
 * with a reason, or admitted whole, so that its ops still wait their turn
 * (fair-k 1: the second of two ops waits for the first). */
START_TEST(test_fault_each_allocation_of_admission)
{
	unsigned n;
	for (n = 1; n < 100; n++) {
		engine_up((struct devq_config){ .fair_k = 1, .streams = 1 });
		struct devq_session *s = devq_session_new(&E, 1234, 1000, 1000);
		ck_assert_ptr_nonnull(s);
		char why[200] = "";
		fault_arm(FAULT_ALLOC, n, 1, ENOMEM);
		int r = devq_session_admit(s, why, sizeof(why));
		unsigned failed = fault_failed(FAULT_ALLOC);
		fault_reset();
		if (r == 0) {
			queue(s, 1, 0);
			spin(s, 1, 1000);
			spin(s, 1, 1000);
			ck_assert_msg(FK->n == 1, "allocation %u failed: %u ops handed at once", n,
				      FK->n);
			complete_all();
		} else {
			ck_assert_msg(why[0], "allocation %u failed: refused without a reason", n);
		}
		session_end(s);
		engine_down();
		if (!failed) {
			ck_assert_int_eq(r, 0);
			break;
		}
	}
	ck_assert_uint_lt(n, 100);
	ck_assert_uint_gt(n, 1);
}
END_TEST

/* The engine's own allocations at start, failed in turn: -ENOMEM, and
 * nothing half made is left (ASan's leak check in check-asan). */
START_TEST(test_fault_each_allocation_at_engine_start)
{
	struct devq_config cfg = { .backend = "cpu", .streams = 4, .max_op_ns = 1000000000ull,
				   .max_buffer_bytes = 1 << 20, .max_queues = 8 };
	struct devq_engine_events ev = { .wake = ev_wake,
					 .device_lost = ev_device_lost };
	unsigned n;
	for (n = 1; n < 200; n++) {
		fault_arm(FAULT_ALLOC, n, 1, ENOMEM);
		int r = devq_engine_init(&E, &cfg, &ev, fake_open);
		unsigned failed = fault_failed(FAULT_ALLOC);
		fault_reset();
		if (r == 0) {
			/* A start that says it worked works: an op goes
			 * through (a table the start did not get would be
			 * used here). */
			wakes = lost = 0;
			struct devq_session *s = session(1000);
			queue(s, 1, 0);
			spin(s, 1, 1000);
			ck_assert_uint_eq(FK->n, 1);
			complete_all();
			engine_down();
		} else {
			ck_assert_int_eq(r, -ENOMEM);
		}
		if (!failed) {
			ck_assert_int_eq(r, 0);
			break;
		}
	}
	ck_assert_uint_lt(n, 200);
	ck_assert_uint_gt(n, 3);
}
END_TEST

/* A shared buffer whose memfd, seals or mapping the kernel refuses: the
 * request fails with the call and its reason, nothing is charged, no fd or
 * mapping is left. */
START_TEST(test_fault_shared_buffer_syscalls)
{
	static const struct {
		enum fault_call c;
		int err;
		const char *want;
	} cases[] = {
		{ FAULT_MEMFD_CREATE, EMFILE, "memfd of 64 bytes: Too many open files" },
		{ FAULT_FTRUNCATE, EFBIG, "memfd of 64 bytes: File too large" },
		{ FAULT_FCNTL, EPERM, "memfd of 64 bytes: Operation not permitted" },
		{ FAULT_MMAP, ENOMEM, "mmap: Cannot allocate memory" },
	};
	engine_up((struct devq_config){ 0 });
	struct devq_session *s = session(1000);
	unsigned fds = open_fds();
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int fd = -1;
		char err[200] = "";
		fault_arm(cases[i].c, 1, 1, cases[i].err);
		int r = devq_buffer_create(s, 7, 64, DEVQ__BUFFER_KIND__SHARED, &fd, err,
					   sizeof(err));
		ck_assert_uint_eq(fault_failed(cases[i].c), 1);
		fault_reset();
		ck_assert_int_eq(r, DEVQ__CODE__RESOURCE_EXHAUSTED);
		ck_assert_msg(strstr(err, cases[i].want), "case %zu: '%s'", i, err);
		ck_assert_int_eq(fd, -1);
		ck_assert_uint_eq(s->nbufs, 0);
		ck_assert_uint_eq(E.bytes_mapped, 0);
		ck_assert_uint_eq(open_fds(), fds);
	}
	/* A kernel without MFD_NOEXEC_SEAL answers EINVAL: the memfd is made
	 * without it. */
	int fd = -1;
	char err[200] = "";
	fault_arm(FAULT_MEMFD_CREATE, 1, 1, EINVAL);
	ck_assert_int_eq(devq_buffer_create(s, 7, 64, DEVQ__BUFFER_KIND__SHARED, &fd, err,
					    sizeof(err)),
			 0);
	ck_assert_uint_eq(fault_calls(FAULT_MEMFD_CREATE), 2);
	fault_reset();
	ck_assert_int_eq(close(fd), 0);
	/* A failed unmap or close is logged, naming the buffer. */
	log_capture();
	fault_arm(FAULT_MUNMAP, 1, 1, EINVAL);
	devq_buffer_release(devq_idmap_get(&s->bufs, 7));
	flush_dirty();
	ck_assert_uint_eq(fault_failed(FAULT_MUNMAP), 1);
	fault_reset();
	fault_arm(FAULT_CLOSE, 1, 1, EIO);
	ck_assert_int_eq(devq_buffer_create(s, 8, 64, DEVQ__BUFFER_KIND__DEVICE, &fd, err,
					    sizeof(err)),
			 0);
	fault_arm(FAULT_MMAP, 1, 1, ENOMEM);
	ck_assert_int_eq(devq_buffer_create(s, 9, 64, DEVQ__BUFFER_KIND__SHARED, &fd, err,
					    sizeof(err)),
			 DEVQ__CODE__RESOURCE_EXHAUSTED);
	fault_reset();
	char got[1024];
	log_captured(got, sizeof(got));
	ck_assert_msg(strstr(got, "buffer 7: munmap of 64 bytes failed: Invalid argument"),
		      "log: '%s'", got);
	ck_assert_msg(strstr(got, "buffer 9: close: Input/output error"), "log: '%s'", got);
	ck_assert_uint_eq(s->nbufs, 1);
	session_end(s);
	engine_down();
}
END_TEST

/* An import whose memfd the kernel will not describe or map: refused with
 * the reason, nothing charged. */
START_TEST(test_fault_import_syscalls)
{
	engine_up((struct devq_config){ 0 });
	struct devq_session *s = session(1000);
	int fd = memfd_create("t", MFD_ALLOW_SEALING);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 4096), 0);
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	char err[200] = "";
	/* F_GET_SEALS refused: as for a fd that is not a memfd. */
	fault_arm(FAULT_FCNTL, 1, 1, EIO);
	ck_assert_int_eq(devq_buffer_import(s, 1, 4096, false, fd, err, sizeof(err)),
			 DEVQ__CODE__INVALID_ARGUMENT);
	ck_assert_msg(strstr(err, "not a memfd"), "%s", err);
	fault_arm(FAULT_FSTATFS, 1, 1, EIO);
	ck_assert_int_eq(devq_buffer_import(s, 1, 4096, false, fd, err, sizeof(err)),
			 DEVQ__CODE__INVALID_ARGUMENT);
	ck_assert_msg(strstr(err, "fstatfs: Input/output error"), "%s", err);
	fault_arm(FAULT_FSTAT, 1, 1, EIO);
	ck_assert_int_eq(devq_buffer_import(s, 1, 4096, false, fd, err, sizeof(err)),
			 DEVQ__CODE__INVALID_ARGUMENT);
	ck_assert_msg(strstr(err, "fstat failed"), "%s", err);
	fault_arm(FAULT_MMAP, 1, 1, ENOMEM);
	ck_assert_int_eq(devq_buffer_import(s, 1, 4096, false, fd, err, sizeof(err)),
			 DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(err, "mmap: Cannot allocate memory"), "%s", err);
	fault_arm(FAULT_ALLOC, 1, 1, ENOMEM);
	ck_assert_int_eq(devq_buffer_import(s, 1, 4096, false, fd, err, sizeof(err)),
			 DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(err, "out of memory"), "%s", err);
	fault_reset();
	ck_assert_uint_eq(s->nbufs, 0);
	ck_assert_uint_eq(E.bytes_mapped, 0);
	/* And with the kernel willing, the same import is taken. */
	ck_assert_int_eq(devq_buffer_import(s, 1, 4096, false, fd, err, sizeof(err)), 0);
	ck_assert_uint_eq(s->nbufs, 1);
	ck_assert_int_eq(close(fd), 0);
	session_end(s);
	engine_down();
}
END_TEST

/* Runs the buffer worker's reports until s holds nbufs buffers, none
 * being populated (at most 10 s). */
static void worker_settle(struct devq_session *s, unsigned nbufs)
{
	for (int i = 0; i < 10000; i++) {
		devq_buffer_collect(&E);
		flush_dirty();
		if (!s->populating && s->nbufs == nbufs)
			return;
		usleep(1000);
	}
	ck_abort_msg("the buffer worker did not report (%u buffers, %u populating)", s->nbufs,
		     s->populating);
}

/* A large buffer (made and unmapped by the buffer worker) of the given
 * kind, announced as the request layer does; from that announcement on,
 * allocation `fail` (0: none) fails. */
static struct devq_buf *large_buffer(struct devq_session *s, uint64_t id, Devq__BufferKind kind,
				     unsigned fail)
{
	int fd = -1, r;
	char err[200] = "";
	int *code = &r;
	*code = devq_buffer_create(s, id, DEVQ_BUFFER_BG_BYTES, kind, &fd, err, sizeof(err));
	ck_assert_msg(*code == 0 || *code == DEVQ__CODE__RESOURCE_EXHAUSTED, "%s", err);
	ck_assert_msg(*code == 0, "large buffer %llu: %s", (unsigned long long)id, err);
	struct devq_buf *b = devq_idmap_get(&s->bufs, id);
	ck_assert_ptr_nonnull(b);
	ck_assert(b->bg);
	if (fail)
		fault_arm(FAULT_ALLOC, fail, 1, ENOMEM);
	devq_buffer_reply_ready(b, fd);
	return b;
}

static struct devq_session *large_buffers_allowed(void)
{
	engine_up((struct devq_config){ 0 });
	E.cfg.max_buffer_bytes = 2 * DEVQ_BUFFER_BG_BYTES;
	return session(1000);
}

/* Mappings of devqd's buffer memfds in this process (/proc/self/maps). */
static unsigned memfd_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	ck_assert_ptr_nonnull(f);
	char line[512];
	unsigned n = 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, "memfd:devq-s") != NULL;
	ck_assert_int_eq(fclose(f), 0);
	return n;
}

/* Any negative errno from the backend's pinning refuses the buffer, -1
 * (EPERM) too: made here (small), by the worker (large) or imported.  A
 * large buffer that was pinned is unpinned once when released. */
START_TEST(test_buffer_pinning_any_errno)
{
	struct devq_session *s = large_buffers_allowed();
	char err[200] = "";
	int fd = -1;
	fake_map_host_err = -EPERM;
	ck_assert_int_eq(devq_buffer_create(s, 1, 64, DEVQ__BUFFER_KIND__SHARED, &fd, err,
					    sizeof(err)),
			 DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(err, "pinning failed: Operation not permitted"), "%s", err);
	ck_assert_int_eq(devq_buffer_create(s, 2, DEVQ_BUFFER_BG_BYTES, DEVQ__BUFFER_KIND__SHARED,
					    &fd, err, sizeof(err)),
			 0);
	devq_buffer_reply_ready(devq_idmap_get(&s->bufs, 2), fd);
	worker_settle(s, 0);
	ck_assert_ptr_null(devq_idmap_get(&s->bufs, 2));
	/* The refused large one's mapping goes once the worker gets to it. */
	for (int i = 0; i < 10000 && memfd_maps(); i++)
		usleep(1000);
	ck_assert_uint_eq(memfd_maps(), 0);
	/* Imported: refused, its mapping gone, nothing charged. */
	unsigned maps = 0;
	int mfd = memfd_create("devq-s99-b3", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ck_assert_int_ge(mfd, 0);
	ck_assert_int_eq(ftruncate(mfd, 4096), 0);
	ck_assert_int_eq(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	ck_assert_int_eq(devq_buffer_import(s, 3, 4096, false, mfd, err, sizeof(err)),
			 DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(err, "pinning failed"), "%s", err);
	ck_assert_ptr_null(devq_idmap_get(&s->bufs, 3));
	ck_assert_uint_eq(memfd_maps(), maps);
	ck_assert_uint_eq(E.bytes_mapped, 0);
	fake_map_host_err = 0;
	ck_assert_int_eq(devq_buffer_import(s, 3, 4096, false, mfd, err, sizeof(err)), 0);
	ck_assert_int_eq(close(mfd), 0);
	/* Pinned by the worker, unpinned once when released. */
	struct devq_buf *b = large_buffer(s, 4, DEVQ__BUFFER_KIND__SHARED, 0);
	worker_settle(s, 2);
	unsigned before = fake_unmaps;
	devq_buffer_release(b);
	worker_settle(s, 1);
	ck_assert_uint_eq(fake_unmaps, before + 1);
	session_end(s);
	engine_down();
}
END_TEST

/* Buffers made, refused (every syscall of a shared one, a device
 * allocation) and released, small and device ones: none of it logs an
 * error (no close of fd -1, no unmap of what was never mapped, no
 * successful close reported). */
START_TEST(test_buffer_paths_log_nothing)
{
	struct devq_session *s = large_buffers_allowed();
	log_capture();
	char err[200] = "";
	int fd = -1;
	ck_assert_int_eq(devq_buffer_create(s, 1, 64, DEVQ__BUFFER_KIND__DEVICE, &fd, err,
					    sizeof(err)),
			 0);
	ck_assert_int_eq(fd, -1);
	devq_buffer_reply_ready(devq_idmap_get(&s->bufs, 1), fd);
	ck_assert_int_eq(devq_buffer_create(s, 2, 64, DEVQ__BUFFER_KIND__SHARED, &fd, err,
					    sizeof(err)),
			 0);
	devq_buffer_reply_ready(devq_idmap_get(&s->bufs, 2), fd);
	devq_buffer_release(devq_idmap_get(&s->bufs, 1));
	devq_buffer_release(devq_idmap_get(&s->bufs, 2));
	flush_dirty();
	static const enum fault_call calls[] = { FAULT_MEMFD_CREATE, FAULT_FTRUNCATE, FAULT_FCNTL,
						 FAULT_MMAP };
	for (unsigned i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		fault_arm(calls[i], 1, 1, EIO);
		ck_assert_int_eq(devq_buffer_create(s, 3, 64, DEVQ__BUFFER_KIND__SHARED, &fd, err,
						    sizeof(err)),
				 DEVQ__CODE__RESOURCE_EXHAUSTED);
		fault_reset();
	}
	fake_alloc_err = -ENOMEM;
	ck_assert_int_eq(devq_buffer_create(s, 4, 64, DEVQ__BUFFER_KIND__DEVICE, &fd, err,
					    sizeof(err)),
			 DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(err, "device allocation failed"), "%s", err);
	fake_alloc_err = 0;
	char got[4096];
	log_captured(got, sizeof(got));
	ck_assert_msg(!strstr(got, "close:") && !strstr(got, "munmap"), "logged '%s'", got);
	ck_assert_uint_eq(E.bytes_mapped, 0);
	session_end(s);
	engine_down();
}
END_TEST

/* Each allocation of making a shared buffer failed in turn, small and
 * large: refused cleanly (no mapping, nothing charged), or made whole and
 * entered in the session.  A refusal after the small one was pinned
 * unpins it; a large one, not yet pinned (the worker does that), is not
 * unpinned. */
START_TEST(test_fault_buffer_each_allocation)
{
	static const uint64_t sizes[] = { 64, DEVQ_BUFFER_BG_BYTES };
	for (unsigned k = 0; k < 2; k++) {
		struct devq_session *s = large_buffers_allowed();
		unsigned unpinned = 0, n;
		for (n = 1; n < 50; n++) {
			for (int i = 0; i < 10000 && memfd_maps(); i++)
				usleep(1000); /* a large refused one's worker unmap */
			ck_assert_uint_eq(memfd_maps(), 0);
			unsigned before = fake_unmaps;
			int fd = -1;
			char err[200] = "";
			fault_arm(FAULT_ALLOC, n, 1, ENOMEM);
			int r = devq_buffer_create(s, 1, sizes[k], DEVQ__BUFFER_KIND__SHARED, &fd, err,
						   sizeof(err));
			unsigned failed = fault_failed(FAULT_ALLOC);
			fault_reset();
			if (r == 0) {
				ck_assert_ptr_nonnull(devq_idmap_get(&s->bufs, 1));
				ck_assert_int_eq(close(fd), 0);
				if (!failed)
					break;
				continue;
			}
			ck_assert_int_eq(r, DEVQ__CODE__RESOURCE_EXHAUSTED);
			ck_assert_int_eq(fd, -1);
			ck_assert_ptr_null(devq_idmap_get(&s->bufs, 1));
			ck_assert_uint_eq(s->nbufs, 0);
			ck_assert_uint_eq(E.bytes_mapped, 0);
			unpinned += fake_unmaps - before;
		}
		ck_assert_uint_lt(n, 50);
		/* Small: the refusal after pinning (entering the session)
		 * unpinned it once; large: never pinned, never unpinned. */
		ck_assert_uint_eq(unpinned, k == 0 ? 1 : 0);
		devq_session_disconnect(s);
		worker_settle(s, 0);
		session_end(s);
		engine_down();
	}
}
END_TEST

/* Threads of this process named devqd-buffer (the buffer worker). */
static unsigned worker_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	ck_assert_ptr_nonnull(d);
	unsigned n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		char path[300], comm[32] = "";
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue; /* exited meanwhile */
		if (fgets(comm, sizeof(comm), f) && !strncmp(comm, "devqd-buffer", 12))
			n++;
		ck_assert_int_eq(fclose(f), 0);
	}
	ck_assert_int_eq(closedir(d), 0);
	return n;
}

/* A memfd for import: size bytes, sealed with seals (0: none; made with
 * MFD_ALLOW_SEALING), named name. */
static int import_memfd(const char *name, off_t size, int seals)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, size), 0);
	if (seals)
		ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

/* Imports refused for what they are, each with its own code: a tmpfs
 * file that is not a memfd, a memfd without F_SEAL_SHRINK, one a byte
 * short of the size declared, one sealed against writing imported
 * writable (read-only is fine), and one over the session's quota; a
 * memfd with the longest name Linux allows is accepted. */
START_TEST(test_import_refusals)
{
	engine_up((struct devq_config){ .q_session_pinned = 8192 });
	struct devq_session *s = session(1000);
	char err[300];
	char shm[] = "/dev/shm/devq-test-XXXXXX";
	int f = mkstemp(shm);
	ck_assert_int_ge(f, 0);
	ck_assert_int_eq(unlink(shm), 0);
	ck_assert_int_eq(ftruncate(f, 4096), 0);
	ck_assert_int_eq(devq_buffer_import(s, 1, 4096, false, f, err, sizeof(err)),
			 DEVQ__CODE__INVALID_ARGUMENT);
	ck_assert_msg(strstr(err, "not a memfd"), "%s", err);
	ck_assert_int_eq(close(f), 0);

	f = import_memfd("devq-import", 4096, 0);
	ck_assert_int_eq(devq_buffer_import(s, 1, 4096, false, f, err, sizeof(err)),
			 DEVQ__CODE__FAILED_PRECONDITION);
	ck_assert_msg(strstr(err, "F_SEAL_SHRINK"), "%s", err);
	ck_assert_int_eq(close(f), 0);

	f = import_memfd("devq-import", 4095, F_SEAL_SHRINK);
	ck_assert_int_eq(devq_buffer_import(s, 1, 4096, false, f, err, sizeof(err)),
			 DEVQ__CODE__OUT_OF_RANGE);
	ck_assert_int_eq(devq_buffer_import(s, 1, 4095, false, f, err, sizeof(err)), 0);
	ck_assert_int_eq(close(f), 0);

	f = import_memfd("devq-import", 4096, F_SEAL_SHRINK | F_SEAL_WRITE);
	ck_assert_int_eq(devq_buffer_import(s, 2, 4096, false, f, err, sizeof(err)),
			 DEVQ__CODE__PERMISSION_DENIED);
	ck_assert_msg(strstr(err, "read-only"), "%s", err);
	ck_assert_int_eq(devq_buffer_import(s, 2, 4096, true, f, err, sizeof(err)), 0);
	ck_assert_int_eq(close(f), 0);

	/* 4095 + 4096 in use of 8192: 2 more bytes are over the quota. */
	f = import_memfd("devq-import", 4096, F_SEAL_SHRINK);
	ck_assert_int_eq(devq_buffer_import(s, 3, 2, false, f, err, sizeof(err)),
			 DEVQ__CODE__RESOURCE_EXHAUSTED);
	ck_assert_msg(strstr(err, "quota-session-pinned-mb"), "%s", err);
	ck_assert_int_eq(devq_buffer_import(s, 3, 1, false, f, err, sizeof(err)), 0);
	ck_assert_int_eq(close(f), 0);
	devq_buffer_release(devq_idmap_get(&s->bufs, 3));
	flush_dirty();

	/* Its /proc link ("/memfd:NAME (deleted)") is longer than is_memfd's
	 * buffer: read truncated, still a memfd. */
	char name[250];
	memset(name, 'm', 249);
	name[249] = '\0';
	f = import_memfd(name, 1, F_SEAL_SHRINK);
	ck_assert_int_eq(devq_buffer_import(s, 3, 1, false, f, err, sizeof(err)), 0);
	ck_assert_int_eq(close(f), 0);
	engine_down();
}
END_TEST

/* BufferReleased goes out when a buffer of a connected session is
 * released; BufferReady once the worker has installed a large one.  A
 * large buffer released while the worker still installs it is unmapped
 * once that is done. */
START_TEST(test_buffer_replies_and_release_while_installing)
{
	struct devq_session *s = large_buffers_allowed();
	int fd = -1;
	char err[200] = "";
	ck_assert_int_eq(devq_buffer_create(s, 1, 64, DEVQ__BUFFER_KIND__SHARED, &fd, err,
					    sizeof(err)),
			 0);
	ck_assert_int_eq(close(fd), 0);
	size_t frames = s->tx.frames;
	devq_buffer_release(devq_idmap_get(&s->bufs, 1));
	flush_dirty();
	ck_assert_uint_eq(s->tx.frames, frames + 1);

	frames = s->tx.frames;
	unsigned fds = open_fds();
	struct devq_buf *b = large_buffer(s, 2, DEVQ__BUFFER_KIND__SHARED, 0);
	worker_settle(s, 1);
	ck_assert_uint_eq(s->tx.frames, frames + 1); /* BufferReady, with the fd */
	devq_buffer_release(b);
	worker_settle(s, 0);
	ck_assert_uint_eq(open_fds(), fds + 1); /* the memfd, in BufferReady till sent */

	bool busy_seen = false;
	for (uint64_t id = 3; id < 23 && !busy_seen; id++) {
		for (int i = 0; i < 10000 && memfd_maps(); i++)
			usleep(1000);
		ck_assert_uint_eq(memfd_maps(), 0);
		b = large_buffer(s, id, DEVQ__BUFFER_KIND__SHARED, 0);
		busy_seen = b->bg_busy; /* the worker has not reported yet */
		devq_buffer_release(b);
		worker_settle(s, 0);
	}
	ck_assert(busy_seen);
	for (int i = 0; i < 10000 && memfd_maps(); i++)
		usleep(1000);
	ck_assert_uint_eq(memfd_maps(), 0);
	ck_assert_uint_eq(E.bytes_mapped, 0);
	session_end(s);
	engine_down();
}
END_TEST

/* The worker takes buffers of DEVQ_BUFFER_BG_BYTES and more; one byte
 * less is mapped and pinned at once.  After the worker is stopped
 * (devq_buffer_worker_fini, at shutdown), its jobs run inline: a large
 * buffer released then is still unmapped. */
START_TEST(test_buffer_worker_bound_and_fini)
{
	struct devq_session *s = large_buffers_allowed();
	int fd = -1;
	char err[200] = "";
	ck_assert_int_eq(devq_buffer_create(s, 1, DEVQ_BUFFER_BG_BYTES - 1,
					    DEVQ__BUFFER_KIND__SHARED, &fd, err, sizeof(err)),
			 0);
	struct devq_buf *b = devq_idmap_get(&s->bufs, 1);
	ck_assert(!b->bg);
	ck_assert(b->mapped);
	ck_assert_int_eq(close(fd), 0);
	devq_buffer_release(b);
	/* Device memory too: one byte under, allocated at once. */
	ck_assert_int_eq(devq_buffer_create(s, 3, DEVQ_BUFFER_BG_BYTES - 1,
					    DEVQ__BUFFER_KIND__DEVICE, &fd, err, sizeof(err)),
			 0);
	b = devq_idmap_get(&s->bufs, 3);
	ck_assert(!b->bg);
	ck_assert(b->mapped);
	devq_buffer_release(b);
	flush_dirty();
	unsigned maps = memfd_maps();
	b = large_buffer(s, 2, DEVQ__BUFFER_KIND__SHARED, 0);
	worker_settle(s, 1);
	ck_assert(b->bg);
	ck_assert_uint_eq(memfd_maps(), maps + 1);
	ck_assert_uint_eq(worker_threads(), 1);
	devq_buffer_worker_fini(&E);
	/* Gone (joined), not merely told to stop: what comes next cannot be
	 * left to it. */
	for (int i = 0; i < 10000 && worker_threads(); i++)
		usleep(1000);
	ck_assert_uint_eq(worker_threads(), 0);
	devq_buffer_release(b);
	worker_settle(s, 0);
	ck_assert_uint_eq(memfd_maps(), maps);
	ck_assert_uint_eq(E.bytes_mapped, 0);
	session_end(s);
	engine_down();
}
END_TEST

/* A shared buffer whose pinning the backend refuses, after it was
 * mapped: small (refused at once) or large (refused by the worker), its
 * mapping is gone and nothing is logged; a failed unmap there is. */
START_TEST(test_buffer_pinning_refused_unmaps)
{
	static const uint64_t sizes[] = { 64, DEVQ_BUFFER_BG_BYTES };
	for (unsigned k = 0; k < 2; k++) {
		for (int bad_unmap = 0; bad_unmap < 2; bad_unmap++) {
			struct devq_session *s = large_buffers_allowed();
			unsigned maps = memfd_maps();
			log_capture();
			fake_map_host_err = -ENOMEM;
			if (bad_unmap)
				fault_arm(FAULT_MUNMAP, 1, 1, EINVAL);
			int fd = -1;
			char err[200] = "";
			int r = devq_buffer_create(s, 1, sizes[k], DEVQ__BUFFER_KIND__SHARED, &fd,
						   err, sizeof(err));
			if (k == 0) {
				ck_assert_int_eq(r, DEVQ__CODE__RESOURCE_EXHAUSTED);
				ck_assert_msg(strstr(err, "pinning failed"), "%s", err);
			} else {
				ck_assert_int_eq(r, 0);
				devq_buffer_reply_ready(devq_idmap_get(&s->bufs, 1), fd);
				worker_settle(s, 0);
			}
			ck_assert_ptr_null(devq_idmap_get(&s->bufs, 1));
			fake_map_host_err = 0;
			/* A large one's worker unmaps after it left the session. */
			for (int i = 0; i < 10000 && (bad_unmap ? !log_has("buffer 1: munmap of")
								: memfd_maps() != maps);
			     i++)
				usleep(1000);
			ck_assert_uint_eq(fault_failed(FAULT_MUNMAP), bad_unmap ? 1 : 0);
			fault_reset();
			char got[4096];
			log_captured(got, sizeof(got));
			if (!bad_unmap) {
				ck_assert_msg(memfd_maps() == maps, "%llu bytes: mapping left",
					      (unsigned long long)sizes[k]);
				ck_assert_msg(!strstr(got, "munmap"), "logged '%s'", got);
			} else {
				ck_assert_msg(strstr(got, "buffer 1: munmap of"),
					      "%llu bytes: logged '%s'", (unsigned long long)sizes[k],
					      got);
			}
			ck_assert_uint_eq(E.bytes_mapped, 0);
			session_end(s);
			engine_down();
		}
	}
}
END_TEST

/* Large shared buffers are prefaulted and unmapped by the worker in steps
 * (buffer.c's BG_STEP, 16 MiB): whole steps only, a step and a byte, a
 * step and a page and a byte.  Every page is resident once the buffer is
 * ready, every page is gone once it is released, and nothing is logged. */
START_TEST(test_buffer_worker_steps)
{
	const uint64_t bg_step = 16u << 20;
	static const uint64_t sizes[] = { DEVQ_BUFFER_BG_BYTES, DEVQ_BUFFER_BG_BYTES + 1,
					  DEVQ_BUFFER_BG_BYTES + 4096 + 1 };
	long pg = sysconf(_SC_PAGESIZE);
	ck_assert_uint_eq(DEVQ_BUFFER_BG_BYTES % bg_step, 0);
	for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct devq_session *s = large_buffers_allowed();
		log_capture();
		int fd = -1;
		char err[200] = "";
		ck_assert_int_eq(devq_buffer_create(s, 1, sizes[k], DEVQ__BUFFER_KIND__SHARED, &fd,
						    err, sizeof(err)),
				 0);
		struct devq_buf *b = devq_idmap_get(&s->bufs, 1);
		ck_assert_ptr_nonnull(b);
		ck_assert(b->bg);
		devq_buffer_reply_ready(b, fd);
		worker_settle(s, 1);
		ck_assert(b->mapped);
		char *addr = b->host;
		size_t pages = (sizes[k] + (size_t)pg - 1) / (size_t)pg;
		unsigned char *vec = malloc(pages);
		ck_assert_ptr_nonnull(vec);
		ck_assert_int_eq(mincore(addr, pages * (size_t)pg, vec), 0);
		for (size_t i = 0; i < pages; i++)
			ck_assert_msg(vec[i] & 1, "%llu bytes: page %zu not prefaulted",
				      (unsigned long long)sizes[k], i);
		devq_buffer_release(b);
		worker_settle(s, 0);
		for (size_t i = 0; i < pages; i++) {
			unsigned char v;
			errno = 0;
			ck_assert_msg(mincore(addr + i * (size_t)pg, (size_t)pg, &v) < 0 &&
					      errno == ENOMEM,
				      "%llu bytes: page %zu still mapped", (unsigned long long)sizes[k],
				      i);
		}
		free(vec);
		char got[4096];
		log_captured(got, sizeof(got));
		ck_assert_msg(!strstr(got, "buffer 1"), "%llu bytes: logged '%s'",
			      (unsigned long long)sizes[k], got);
		session_end(s);
		engine_down();
	}
}
END_TEST

/* The buffer worker's faults: no thread can be made (the job runs on the
 * caller), no job record (likewise, reported at once), prefaulting or
 * unmapping refused by the kernel (logged, naming the buffer), a device
 * allocation failing on the worker (the request fails, nothing charged).
 * Each buffer is usable or cleanly refused, and every byte comes back. */
START_TEST(test_fault_buffer_worker)
{
	struct devq_session *s = large_buffers_allowed();
	log_capture();

	/* No worker thread: the install and the unmap run here. */
	fault_arm(FAULT_PTHREAD_CREATE, 1, 0, EAGAIN);
	struct devq_buf *b = large_buffer(s, 1, DEVQ__BUFFER_KIND__SHARED, 0);
	worker_settle(s, 1);
	ck_assert(b->mapped);
	devq_buffer_release(b);
	worker_settle(s, 0);
	ck_assert_uint_ge(fault_failed(FAULT_PTHREAD_CREATE), 2);
	fault_reset();
	ck_assert_uint_eq(E.bytes_mapped, 0);

	/* No job record: the same, at once. */
	b = large_buffer(s, 2, DEVQ__BUFFER_KIND__SHARED, 0);
	worker_settle(s, 1);
	fault_arm(FAULT_ALLOC, 1, 1, ENOMEM);
	devq_buffer_release(b);
	ck_assert_uint_eq(fault_failed(FAULT_ALLOC), 1);
	fault_reset();
	worker_settle(s, 0);
	struct devq_buf *b3 = large_buffer(s, 3, DEVQ__BUFFER_KIND__SHARED, 1);
	ck_assert_uint_eq(fault_failed(FAULT_ALLOC), 1);
	fault_reset();
	worker_settle(s, 1);
	ck_assert(b3->mapped);

	/* Prefaulting refused (EIO is logged; EINVAL, a kernel without
	 * MADV_POPULATE_*, is not), and an unmap refused. */
	fault_arm(FAULT_MADVISE, 1, 1, EIO);
	b = large_buffer(s, 4, DEVQ__BUFFER_KIND__SHARED, 0);
	worker_settle(s, 2);
	ck_assert(b->mapped);
	fault_arm(FAULT_MADVISE, 1, 1, EINVAL);
	b = large_buffer(s, 5, DEVQ__BUFFER_KIND__SHARED, 0);
	worker_settle(s, 3);
	fault_arm(FAULT_MUNMAP, 1, 1, EINVAL);
	devq_buffer_release(b3);
	worker_settle(s, 2);
	ck_assert_uint_eq(fault_failed(FAULT_MUNMAP), 1);
	fault_reset();

	/* A device buffer the backend cannot allocate, on the worker: the
	 * first allocation is the job's record, the second the backend's. */
	b = large_buffer(s, 6, DEVQ__BUFFER_KIND__DEVICE, 2);
	worker_settle(s, 2);
	ck_assert_uint_eq(fault_failed(FAULT_ALLOC), 1);
	fault_reset();
	ck_assert_ptr_null(devq_idmap_get(&s->bufs, 6));

	char got[4096];
	log_captured(got, sizeof(got));
	ck_assert_msg(strstr(got, "buffer 4: prefaulting 67108864 bytes: Input/output error"),
		      "log: '%s'", got);
	ck_assert_msg(!strstr(got, "buffer 5: prefaulting"), "log: '%s'", got);
	ck_assert_msg(strstr(got, "buffer 3: munmap of "), "log: '%s'", got);
	devq_session_disconnect(s);
	worker_settle(s, 0);
	ck_assert_uint_eq(E.bytes_mapped, 0);
	session_end(s);
	engine_down();
}
END_TEST

/* The completion page's memfds, mappings, seals and eventfds (with and
 * without the submit ring's doorbell), each refused in turn: an error,
 * nothing left open or mapped. */
START_TEST(test_fault_cpage_syscalls)
{
	static const enum fault_call calls[] = { FAULT_ALLOC, FAULT_MEMFD_CREATE, FAULT_FTRUNCATE,
						 FAULT_MMAP, FAULT_FCNTL, FAULT_EVENTFD, FAULT_PIPE2 };
	unsigned fds = open_fds();
	for (size_t j = 0; j < 2 * sizeof(calls) / sizeof(calls[0]); j++) {
		size_t i = j % (sizeof(calls) / sizeof(calls[0]));
		bool sq = j >= sizeof(calls) / sizeof(calls[0]);
		if (!sq && calls[i] == FAULT_PIPE2)
			continue; /* only the submit ring's doorbell is a pipe */
		for (unsigned n = 1;; n++) {
			struct devq_cpage *cp = NULL;
			int f[4];
			/* EPERM is 1: -EPERM is -1, which a check against -1
			 * instead of 0 would take for a descriptor. */
			fault_arm(calls[i], n, 1, EPERM);
			log_capture();
			int r = devq_cpage_create(4, sq, &cp, f);
			char got[512];
			log_captured(got, sizeof(got));
			/* Undoing closes only what was opened. */
			ck_assert_msg(!strstr(got, "close"), "log: '%s'", got);
			unsigned failed = fault_failed(calls[i]);
			fault_reset();
			if (!failed) {
				ck_assert_int_eq(r, 0);
				ck_assert_uint_eq(cp->sq_n, sq ? DEVQ_SQ_DEFAULT : 0);
				for (int k = 0; k < 3 + sq; k++)
					ck_assert_int_eq(close(f[k]), 0);
				devq_cpage_free(cp);
				ck_assert_uint_ge(n, 2);
				break;
			}
			ck_assert_int_eq(r, calls[i] == FAULT_ALLOC ? -ENOMEM : -EPERM);
			ck_assert_uint_eq(open_fds(), fds);
		}
	}
	/* A memfd refused with EINVAL (a kernel without MFD_NOEXEC_SEAL) is
	 * made again without it; a page made and freed logs nothing. */
	struct devq_cpage *cp = NULL;
	int f[4];
	log_capture();
	fault_arm(FAULT_MEMFD_CREATE, 1, 1, EINVAL);
	ck_assert_int_eq(devq_cpage_create(4, false, &cp, f), 0);
	fault_reset();
	for (int k = 0; k < 3; k++)
		ck_assert_int_eq(close(f[k]), 0);
	struct devq_cpage *quiet = NULL;
	ck_assert_int_eq(devq_cpage_create(4, false, &quiet, f), 0);
	for (int k = 0; k < 3; k++)
		ck_assert_int_eq(close(f[k]), 0);
	devq_cpage_free(quiet);
	char clean[512];
	log_captured(clean, sizeof(clean));
	ck_assert_msg(!clean[0], "log: '%s'", clean);
	/* Unmaps refused at the end are logged. */
	log_capture();
	fault_arm(FAULT_MUNMAP, 1, 2, EINVAL);
	devq_cpage_free(cp);
	fault_reset();
	char got[1024];
	log_captured(got, sizeof(got));
	ck_assert_msg(strstr(got, "completion page: munmap: Invalid argument") &&
			      strstr(got, "completion page hint: munmap: Invalid argument"),
		      "log: '%s'", got);
	ck_assert_uint_eq(open_fds(), fds);
}
END_TEST

/* A completion the daemon has no memory to record (or to queue) would be
 * lost, and its client would wait for it forever: the session is closed
 * instead, once what it has queued is sent, and the client learns from the
 * closed connection. */
START_TEST(test_fault_completion_unrecorded_closes_session)
{
	for (int where = 0; where < 2; where++) {
		struct devq_session *s = two_queues();
		submit(s, 1, 5, 0, 0, NULL, NULL);
		devq_sched_drain(&E);
		ck_assert_uint_eq(FK->n, 1);
		if (where == 1) { /* records have room: the frame they go out in */
			complete(0, 0);
			submit(s, 1, 5, 0, 0, NULL, NULL);
			devq_sched_drain(&E);
		}
		log_capture();
		fault_arm(FAULT_ALLOC, 1, 0, ENOMEM);
		complete(0, 0);
		ck_assert_uint_ge(fault_failed(FAULT_ALLOC), 1);
		fault_reset();
		char got[1024];
		log_captured(got, sizeof(got));
		ck_assert_msg(strstr(got, "lost"), "log: '%s'", got);
		ck_assert_msg(s->close_after_flush, "case %d: a completion was lost and the session "
			      "stays open", where);
		session_end(s);
		engine_down();
	}
}
END_TEST

/* A reset sent while the failing op was still the queue's last: its
 * failure ends at the reset, and the next op (and a wait on it) runs. */
START_TEST(test_failure_of_last_op_ends_at_its_reset)
{
	struct devq_session *s = two_queues();
	submit(s, 1, 5, 0, 0, NULL, NULL); /* (1,1), the last submitted */
	devq_timeline_reset(tl(s, 1));
	complete(0, DEVQ__CODE__DEVICE_ERROR);
	submit(s, 1, 5, 0, 0, NULL, NULL); /* (1,2) */
	ck_assert_int_eq(handed(0)->b.code, 0);
	complete_all();
	ck_assert_int_eq(wait_code(s, 1), DEVQ__CODE__DEPENDENCY_FAILED);
	ck_assert_int_eq(wait_code(s, 2), 0);
	engine_down();
}
END_TEST

/* A queue's ring of ops in flight grows (64, 128, 256 points): each op
 * still finds every earlier one in flight, its predecessor first, whose
 * order it keeps. */
START_TEST(test_ring_grows_keeping_every_point)
{
	struct devq_session *s = two_queues();
	enum { N = 200 };
	for (int i = 0; i < N; i++)
		submit(s, 1, 5, 0, 0, NULL, NULL);
	struct devq_timeline *q = tl(s, 1);
	ck_assert_uint_ge(q->ring_cap, N);
	for (uint64_t p = 1; p <= N; p++) {
		struct devq_job *j = devq_timeline_get(q, p);
		ck_assert_ptr_nonnull(j);
		ck_assert_uint_eq(j->point, p);
		if (p > 1)
			ck_assert(waits_on(j, 1, p - 1));
	}
	complete_all();
	engine_down();
}
END_TEST

/* A queue's ring (64 slots to start) with 64 ops in flight: point 64
 * shares slot 0 with point 0.  Completing point 1 clears its own slot
 * only; every other point stays in flight, and nothing is logged about
 * the order (completions come in stream order). */
START_TEST(test_ring_full_completion_clears_its_slot)
{
	struct devq_session *s = two_queues();
	for (int i = 0; i < 64; i++)
		submit(s, 1, 5, 0, 0, NULL, NULL);
	struct devq_timeline *q = tl(s, 1);
	ck_assert_uint_eq(q->ring_cap, 64);
	log_capture();
	complete(0, 0);
	char got[4096];
	log_captured(got, sizeof(got));
	ck_assert_uint_eq(q->completed, 1);
	ck_assert_ptr_null(devq_timeline_get(q, 1));
	for (uint64_t p = 2; p <= 64; p++) {
		struct devq_job *j = devq_timeline_get(q, p);
		ck_assert_msg(j && j->point == p, "point %llu lost", (unsigned long long)p);
	}
	ck_assert_msg(!strstr(got, "order"), "logged: %s", got);
	complete_all();
	engine_down();
}
END_TEST

/* The first op that completes with DEVICE_LOST tells the server once;
 * later ones do not again.  An op observed by the loop is stamped then
 * (the trace keeps it). */
START_TEST(test_device_lost_told_once)
{
	engine_up((struct devq_config){ .trace_records = 16 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	queue(s, 2, 0);
	buffer(s, 5, 64);
	buffer(s, 6, 64);
	submit(s, 1, 5, 0, 0, NULL, NULL);
	submit(s, 2, 6, 0, 0, NULL, NULL);
	uint64_t t0 = devq_now_ns();
	complete(0, DEVQ__CODE__DEVICE_LOST);
	ck_assert_uint_eq(lost, 1);
	const struct devq_trace_rec *r = &E.trace->recs[(E.trace->recorded - 1) % E.trace->cap];
	ck_assert_uint_ge(r->t[5], t0);
	complete(0, DEVQ__CODE__DEVICE_LOST);
	ck_assert_uint_eq(lost, 1);
	engine_down();
}
END_TEST

/* At debug level, a failed op's completion is logged with its reason;
 * an op that succeeded is not. */
START_TEST(test_failed_completion_logged_at_debug)
{
	struct devq_session *s = two_queues();
	submit(s, 1, 5, 0, 0, NULL, NULL);
	submit(s, 2, 6, 0, 0, NULL, NULL);
	devq_log_set_level(DEVQ_LOG_DEBUG);
	log_capture();
	complete(0, 0);
	complete(0, DEVQ__CODE__DEVICE_ERROR);
	char got[4096];
	log_captured(got, sizeof(got));
	devq_log_set_level(DEVQ_LOG_INFO);
	ck_assert_msg(strstr(got, "queue 2 point 1 failed: failed on purpose"), "logged: %s", got);
	ck_assert_msg(!strstr(got, "queue 1 point 1"), "logged: %s", got);
	engine_down();
}
END_TEST

/* Out of memory for a queue's fifth failure range: the oldest is
 * forgotten (a wait below its end is refused, never run), the others and
 * the new one are kept. */
START_TEST(test_fault_failure_range_without_memory)
{
	struct devq_session *s = two_queues();
	fail_ranges(s, 4); /* failed points 1, 3, 5, 7: the ranges fill 4 slots */
	ck_assert_uint_eq(tl(s, 1)->fails_cap, 4);
	submit(s, 1, 5, 0, 0, NULL, NULL); /* (1,9) */
	fault_arm(FAULT_ALLOC, 1, 0, ENOMEM);
	complete(0, DEVQ__CODE__DEVICE_ERROR);
	ck_assert_uint_ge(fault_failed(FAULT_ALLOC), 1);
	fault_reset();
	ck_assert_uint_eq(tl(s, 1)->nfails, 4);
	ck_assert_int_eq(wait_code(s, 1), DEVQ__CODE__FAILED_PRECONDITION);
	ck_assert_int_eq(wait_code(s, 3), DEVQ__CODE__DEPENDENCY_FAILED);
	ck_assert_int_eq(wait_code(s, 4), 0);
	ck_assert_int_eq(wait_code(s, 7), DEVQ__CODE__DEPENDENCY_FAILED);
	ck_assert_int_eq(wait_code(s, 9), DEVQ__CODE__DEPENDENCY_FAILED);
	engine_down();
}
END_TEST

/* ---- cost expressions (core/cost.h) ---------------------------------- */

static const char *const cost_sig = "m:u64, n:u64, k:u32, alpha:f32, a:in f32[m,n]";

/* The cost of text for m, n, k; compiling must succeed. */
static uint64_t cost_of(const char *text, uint64_t m, uint64_t n, uint32_t k)
{
	struct devq_sig sig;
	char err[160];
	ck_assert_int_eq(devq_sig_parse(cost_sig, &sig, err, sizeof(err)), 0);
	struct devq_cost c;
	int r = devq_cost_compile(text, &sig, &c, err, sizeof(err));
	ck_assert_msg(r == 0, "'%s': %s", text, err);
	ck_assert_uint_gt(c.n, 0);
	union devq_kval args[5] = { { .u64 = m }, { .u64 = n }, { .u32 = k } };
	return devq_cost_eval(&c, args);
}

/* Compiling text fails, saying want. */
static void cost_refused(const char *text, const char *want)
{
	struct devq_sig sig;
	char err[160] = "";
	ck_assert_int_eq(devq_sig_parse(cost_sig, &sig, err, sizeof(err)), 0);
	struct devq_cost c;
	ck_assert_msg(devq_cost_compile(text, &sig, &c, err, sizeof(err)) == -EINVAL,
		      "'%s' compiled", text);
	ck_assert_msg(strstr(err, want), "'%s': '%s' does not say '%s'", text, err, want);
	ck_assert_uint_eq(c.n, 0);
}

START_TEST(test_cost_precedence)
{
	ck_assert_uint_eq(cost_of("2*m*n*k", 3, 5, 7), 210);
	ck_assert_uint_eq(cost_of("2+3*4", 0, 0, 0), 14);
	ck_assert_uint_eq(cost_of("(2+3)*4", 0, 0, 0), 20);
	ck_assert_uint_eq(cost_of("10-3-2", 0, 0, 0), 5);   /* left to right */
	ck_assert_uint_eq(cost_of("100/10/5", 0, 0, 0), 2); /* left to right */
	ck_assert_uint_eq(cost_of("7/2*2", 0, 0, 0), 6);    /* integer division first */
	ck_assert_uint_eq(cost_of(" m + n * k ", 1, 2, 3), 7);
	ck_assert_uint_eq(cost_of("min(m, n) + max(m,n)*10", 4, 9, 0), 94);
	ck_assert_uint_eq(cost_of("max(min(m,n),k)", 4, 9, 6), 6);
	/* min and max at neighbours and at the ends of the range. */
	ck_assert_uint_eq(cost_of("min(m,n)", 4, 5, 0), 4);
	ck_assert_uint_eq(cost_of("max(m,n)", 5, 4, 0), 5);
	ck_assert_uint_eq(cost_of("min(m,n)", 5, UINT64_MAX, 0), 5);
	ck_assert_uint_eq(cost_of("max(m,n)", 5, 0, 0), 5);
	ck_assert_uint_eq(cost_of("k", 0, 0, 4000000000u), 4000000000u); /* u32, unsigned */
	ck_assert_uint_eq(cost_of("18446744073709551615", 0, 0, 0), UINT64_MAX);
}
END_TEST

/* No overflow, whatever the arguments: sums and products saturate at
 * UINT64_MAX and stay there, differences stop at 0, x / 0 is UINT64_MAX. */
START_TEST(test_cost_saturates)
{
	uint64_t big = 1ull << 32;
	ck_assert_uint_eq(cost_of("m*n", big, big - 1, 0), UINT64_MAX - big + 1); /* fits */
	ck_assert_uint_eq(cost_of("m*n", big, big, 0), UINT64_MAX);
	ck_assert_uint_eq(cost_of("m*n*0", big, big, 0), 0); /* saturated, then times 0 */
	ck_assert_uint_eq(cost_of("m+n", UINT64_MAX - 1, 1, 0), UINT64_MAX);
	ck_assert_uint_eq(cost_of("m+n", UINT64_MAX - 1, 2, 0), UINT64_MAX);
	ck_assert_uint_eq(cost_of("m+n", 1, UINT64_MAX, 0), UINT64_MAX);
	ck_assert_uint_eq(cost_of("m*n", UINT64_MAX / 2, 2, 0), UINT64_MAX - 1); /* fits exactly */
	ck_assert_uint_eq(cost_of("m*n", UINT64_MAX / 2 + 1, 2, 0), UINT64_MAX);
	ck_assert_uint_eq(cost_of("m-n", 5, 4, 0), 1);
	ck_assert_uint_eq(cost_of("m-n", 5, 0, 0), 5);
	ck_assert_uint_eq(cost_of("m-n", 5, 5, 0), 0);
	ck_assert_uint_eq(cost_of("m+n-1", UINT64_MAX - 1, 1, 0), UINT64_MAX); /* sticky */
	ck_assert_uint_eq(cost_of("m*n/4", big, big, 0), UINT64_MAX);         /* sticky */
	ck_assert_uint_eq(cost_of("(m+n-1)-1", UINT64_MAX - 2, 1, 0), UINT64_MAX - 3);
	ck_assert_uint_eq(cost_of("m-n", 3, 5, 0), 0);
	ck_assert_uint_eq(cost_of("m-n+1", 3, 5, 0), 1);
	ck_assert_uint_eq(cost_of("m/n", 3, 0, 0), UINT64_MAX);
	ck_assert_uint_eq(cost_of("m/k", 3, 0, 0), UINT64_MAX);
	ck_assert_uint_eq(cost_of("m/n", 0, 0, 0), UINT64_MAX);
	ck_assert_uint_eq(cost_of("m/n", 9, 3, 0), 3);
	/* Time and rate: rounded up, exact at the boundary, saturating. */
	ck_assert_uint_eq(devq_cost_ns(2000, 2000), 1000000000);
	ck_assert_uint_eq(devq_cost_ns(2001, 2000), 1000500000);
	ck_assert_uint_eq(devq_cost_ns(1, 3), 333333334);
	ck_assert_uint_eq(devq_cost_ns(0, 3), 0);
	ck_assert_uint_eq(devq_cost_ns(UINT64_MAX, 1), UINT64_MAX);
	ck_assert_uint_eq(devq_cost_ns(UINT64_MAX, UINT64_MAX), 1000000000);
	ck_assert_uint_eq(devq_cost_ns(5, 0), UINT64_MAX);
	ck_assert_uint_eq(devq_cost_rate(2000, 1000000000), 2000);
	ck_assert_uint_eq(devq_cost_rate(1, 1000000001), 1); /* at least 1 */
	ck_assert_uint_eq(devq_cost_rate(UINT64_MAX, 1), UINT64_MAX);
	ck_assert_uint_eq(devq_cost_rate(7, 0), 7000000000ull);
}
END_TEST

/* Mistakes name their column (from 1); the bounds at exactly the limit
 * and one past. */
START_TEST(test_cost_errors_and_bounds)
{
	cost_refused("", "column 1: unexpected end");
	cost_refused("m*", "column 3: unexpected end");
	cost_refused("m n", "column 3: expected an operator or the end");
	cost_refused("2*x", "column 3: no argument named x");
	cost_refused("alpha", "column 1: 'alpha' is not a u32 or u64 scalar argument");
	cost_refused("m+a", "column 3: 'a' is not a u32 or u64 scalar argument");
	cost_refused("(m+n", "column 5: expected ')', found the end");
	cost_refused("min(m n)", "column 7: expected ','");
	cost_refused("min(m)", "column 6: expected ','");
	cost_refused("m/0", "column 2: division by 0");
	cost_refused("m/(0)", "column 2: division by 0");
	cost_refused("m%2", "column 2: expected an operator or the end");
	cost_refused("-m", "column 1: expected a number, a name or '('");
	cost_refused("18446744073709551616", "column 1: number does not fit 64 bits");
	cost_refused("min", "column 1: no argument named min");
	/* A name of 31 characters (a parameter's longest) is looked up, one
	 * of 32 is refused as such. */
	cost_refused("m+abcdefghijklmnopqrstuvwxyz_1234",
		     "column 3: no argument named abcdefghijklmnopqrstuvwxyz_1234");
	cost_refused("m+abcdefghijklmnopqrstuvwxyz_12345", "column 3: name too long");
	/* Text: DEVQ_COST_TEXT_MAX characters, and one more. */
	char t[DEVQ_COST_TEXT_MAX + 2];
	memset(t, ' ', sizeof(t));
	t[0] = 'm';
	t[DEVQ_COST_TEXT_MAX] = '\0';
	ck_assert_uint_eq(cost_of(t, 5, 0, 0), 5);
	t[DEVQ_COST_TEXT_MAX] = ' ';
	t[DEVQ_COST_TEXT_MAX + 1] = '\0';
	cost_refused(t, "column 129: longer than 128 characters");
	/* Length: DEVQ_COST_MAX numbers, names and operators (m+1+1...: 1 +
	 * 2 per "+1"), and one more. */
	char l[DEVQ_COST_TEXT_MAX + 1] = "m";
	for (unsigned i = 1; i + 2 <= DEVQ_COST_MAX; i += 2)
		strcat(l, "+1");
	strcat(l, "*1"); /* 33 in all: the 1 fits, the * does not */
	cost_refused(l, "longer than 32 numbers, names and operators");
	l[strlen(l) - 2] = '\0';
	ck_assert_uint_eq(cost_of(l, 5, 0, 0), 5 + (DEVQ_COST_MAX - 1) / 2);
	/* Nesting: DEVQ_COST_DEPTH parentheses, and one more. */
	char d[64] = "", e[96] = "";
	for (unsigned i = 0; i < DEVQ_COST_DEPTH; i++)
		strcat(d, "(");
	strcat(d, "m");
	for (unsigned i = 0; i < DEVQ_COST_DEPTH; i++)
		strcat(d, ")");
	ck_assert_uint_eq(cost_of(d, 5, 0, 0), 5);
	snprintf(e, sizeof(e), "(%s)", d);
	cost_refused(e, "column 9: parentheses nested deeper than 8");
	/* min( and max( open a level too. */
	snprintf(e, sizeof(e), "max(1,%s)", d + 1);
	e[strlen(e) - 2] = ')'; /* d less one level: 8 with max's */
	e[strlen(e) - 1] = '\0';
	ck_assert_uint_eq(cost_of(e, 5, 0, 0), 5);
	snprintf(e, sizeof(e), "max(1,%s)", d);
	cost_refused(e, "column 14: parentheses nested deeper than 8");
}
END_TEST

/* A kernel op of checksum (cost n) over n bytes of buffer 7, or of
 * gemm_f32 (cost 2*m*n*k) over buffer 7, as validated. */
static struct devq_job *validated_checksum(struct devq_session *s, uint64_t n, int code,
					   const char *want)
{
	struct kop m;
	kernel_op(&m, kernel_index("checksum"));
	arg_u64(&m, "n", n);
	arg_buf(&m, "data", 7, 0);
	arg_buf(&m, "out", 8, 0);
	return validated(s, &m.op, code, want);
}

static struct devq_job *validated_gemm(struct devq_session *s, uint64_t mm, uint64_t nn,
				       uint64_t kk, int code, const char *want)
{
	struct kop m;
	kernel_op(&m, kernel_index("gemm_f32"));
	arg_u64(&m, "m", mm);
	arg_u64(&m, "n", nn);
	arg_u64(&m, "k", kk);
	arg(&m, "alpha")->value_case = DEVQ__ARG__VALUE_F32;
	arg(&m, "beta")->value_case = DEVQ__ARG__VALUE_F32;
	m.k.n_args = 5;
	/* a, b, c: the sixth argument slot is the last the helper has. */
	Devq__Arg *extra[3];
	Devq__BufferArg ba[3];
	Devq__Arg ea[3];
	const char *names[3] = { "a", "b", "c" };
	Devq__Arg *all[8];
	for (unsigned i = 0; i < 5; i++)
		all[i] = m.ap[i];
	for (unsigned i = 0; i < 3; i++) {
		devq__arg__init(&ea[i]);
		devq__buffer_arg__init(&ba[i]);
		ba[i].id = 7;
		ea[i].name = (char *)names[i];
		ea[i].value_case = DEVQ__ARG__VALUE_BUFFER;
		ea[i].buffer = &ba[i];
		extra[i] = &ea[i];
		all[5 + i] = extra[i];
	}
	m.k.args = all;
	m.k.n_args = 8;
	return validated(s, &m.op, code, want);
}

/* With a pinned rate, an op whose expected time (cost / rate) is exactly
 * max-op-ms is accepted and one unit of cost more refused, naming both
 * figures; an executable's learned rate refuses only from
 * DEVQ_COST_SAMPLES samples on, by the fastest seen. */
START_TEST(test_cost_bounds_op_time)
{
	struct devq_session *s = two_queues();
	buffer(s, 7, 1 << 20);
	buffer(s, 8, 64);
	ck_assert_uint_eq(E.cfg.max_op_ns, 1000000000ull);
	struct devq_fair_est *ck = &E.fair.est_builtin[kernel_index("checksum")];
	/* No rate: no bound from the cost, whatever it is. */
	struct devq_job *j = validated_checksum(s, 1 << 20, 0, NULL);
	ck_assert(j->fcost);
	ck_assert_uint_eq(j->cost, 1 << 20);
	devq_job_discard(j);
	ck->pinned = 1000000; /* 1 MB/s: 1 s is 10^6 bytes */
	devq_job_discard(validated_checksum(s, 1000000, 0, NULL));
	devq_job_discard(validated_checksum(
		s, 1000001, DEVQ__CODE__OUT_OF_RANGE,
		"expected 1000001000 ns exceeds max-op-ms, 1000000000 ns: checksum's cost 1000001 "
		"at 1000000/s (pinned rate)"));
	/* max-op-ms is read at each submit (SIGHUP may change it). */
	E.cfg.max_op_ns = 1000001000;
	devq_job_discard(validated_checksum(s, 1000001, 0, NULL));
	/* At 1 byte per ns: max-op-ms's ns exactly, and one ns more. */
	ck->pinned = 1000000000;
	E.cfg.max_op_ns = 1000;
	devq_job_discard(validated_checksum(s, 1000, 0, NULL));
	devq_job_discard(validated_checksum(s, 1001, DEVQ__CODE__OUT_OF_RANGE,
					    "expected 1001 ns exceeds max-op-ms, 1000 ns"));
	E.cfg.max_op_ns = 1000000000;
	ck->pinned = 0;
	/* Learned: 7 samples are not enough, whatever they say. */
	atomic_store(&ck->rate_max, 1000000);
	atomic_store(&ck->rate, 1000);
	atomic_store(&ck->rate_n, DEVQ_COST_SAMPLES - 1);
	devq_job_discard(validated_checksum(s, 1 << 20, 0, NULL));
	atomic_store(&ck->rate_n, DEVQ_COST_SAMPLES);
	devq_job_discard(validated_checksum(s, 1000000, 0, NULL)); /* by the fastest, not the average */
	devq_job_discard(validated_checksum(s, 1000001, DEVQ__CODE__OUT_OF_RANGE,
					    "expected 1000001000 ns exceeds max-op-ms, 1000000000 ns: "
					    "checksum's cost 1000001 at 1000000/s (fastest rate seen)"));
	/* gemm_f32: 2*m*n*k flop; 10x10x10 is 2000, exactly 1 s at 2000/s;
	 * 2002 (its next cost up) is not. */
	E.fair.est_builtin[kernel_index("gemm_f32")].pinned = 2000;
	devq_job_discard(validated_gemm(s, 10, 10, 10, 0, NULL));
	devq_job_discard(validated_gemm(s, 1, 1, 1001, DEVQ__CODE__OUT_OF_RANGE,
					"expected 1001000000 ns exceeds max-op-ms, 1000000000 ns: "
					"gemm_f32's cost 2002 at 2000/s (pinned rate)"));
	/* Saturated: still refused, the figures first. */
	devq_job_discard(validated_gemm(s, 1ull << 32, 1ull << 32, 1, DEVQ__CODE__OUT_OF_RANGE,
					"expected 18446744073709551615 ns exceeds max-op-ms"));
	engine_down();
}
END_TEST

/* Fairness charges an op of an executable with a cost cost / rate once a
 * rate is known (pinned, or learned from its timed ops: rate, an average
 * of about the last 8), and its bytes model before. */
START_TEST(test_fairness_charges_cost)
{
	engine_up((struct devq_config){ .fair_k = 4, .streams = 1 });
	struct devq_session *s = session(1000);
	queue(s, 1, 0);
	buffer(s, 7, 1 << 20);
	buffer(s, 8, 64);
	struct devq_fair_est *ck = &E.fair.est_builtin[kernel_index("checksum")];
	char err[DEVQ_BOP_MSG];
	struct kop m;
	kernel_op(&m, kernel_index("checksum"));
	m.op.queue = 1;
	arg_u64(&m, "n", 4096);
	arg_buf(&m, "data", 7, 0);
	arg_buf(&m, "out", 8, 0);
	/* Nothing known: the guess of an executable never timed. */
	ck_assert_int_eq(devq_sched_submit(s, &m.op, 1, err, sizeof(err)), 0);
	ck_assert_uint_eq(handed(0)->fest, E.fair.window_ns / 4);
	/* 4096 bytes in 2 us: 2048000000 bytes per second. */
	complete_ran(0, 0, 2000, true);
	ck_assert_uint_eq(atomic_load(&ck->rate), 2048000000ull);
	ck_assert_uint_eq(atomic_load(&ck->rate_max), 2048000000ull);
	ck_assert_uint_eq(atomic_load(&ck->rate_n), 1);
	/* Charged by cost: 4 times the bytes, 4 times the time, where the
	 * bytes model (per 4 KiB page, plus one) would say less. */
	m.a[0].u64 = 16384;
	ck_assert_int_eq(devq_sched_submit(s, &m.op, 1, err, sizeof(err)), 0);
	ck_assert_uint_eq(handed(0)->fest, 8000);
	/* A slower op moves the average by an eighth, not the fastest. */
	complete_ran(0, 0, 16000, true); /* 1024000000 per second */
	ck_assert_uint_eq(atomic_load(&ck->rate), 2048000000ull - 256000000 + 128000000);
	ck_assert_uint_eq(atomic_load(&ck->rate_max), 2048000000ull);
	ck_assert_uint_eq(atomic_load(&ck->rate_n), 2);
	/* The fastest moves to a sample one faster than it. */
	atomic_store(&ck->rate_max, 1023999999);
	ck_assert_int_eq(devq_sched_submit(s, &m.op, 1, err, sizeof(err)), 0);
	complete_ran(0, 0, 16000, true);
	ck_assert_uint_eq(atomic_load(&ck->rate_max), 1024000000);
	ck_assert_uint_eq(atomic_load(&ck->rate_n), 3);
	atomic_store(&ck->rate_max, 2048000000ull);
	atomic_store(&ck->rate, 2048000000ull - 256000000 + 128000000);
	/* Pinned wins over learned. */
	ck->pinned = 1000000000; /* 1 byte per ns */
	ck_assert_int_eq(devq_sched_submit(s, &m.op, 1, err, sizeof(err)), 0);
	ck_assert_uint_eq(handed(0)->fest, 16384);
	/* A failed op teaches nothing. */
	complete_ran(0, DEVQ__CODE__DEVICE_ERROR, 1, true);
	ck_assert_uint_eq(atomic_load(&ck->rate_n), 3);
	ck_assert_uint_eq(atomic_load(&ck->rate_max), 2048000000ull);
	devq_timeline_reset(tl(s, 1));
	/* The count stops at DEVQ_COST_SAMPLES. */
	ck->pinned = 0;
	for (unsigned i = 0; i < DEVQ_COST_SAMPLES + 2; i++) {
		ck_assert_int_eq(devq_sched_submit(s, &m.op, 1, err, sizeof(err)), 0);
		complete_ran(0, 0, 16000, true);
	}
	ck_assert_uint_eq(atomic_load(&ck->rate_n), DEVQ_COST_SAMPLES);
	engine_down();
}
END_TEST

/* ---- client deadlines --------------------------------------------------- */

/* The check itself at its bound: an op may start at its deadline, not a
 * nanosecond after; no deadline never passes; an op already failed keeps
 * its own code. */
START_TEST(test_deadline_at_bound_and_past)
{
	struct devq_bop b;
	memset(&b, 0, sizeof(b));
	b.deadline_ns = 1000;
	b.deadline_us = 1;
	ck_assert(!devq_bop_deadline_passed(&b, 999));
	ck_assert(!devq_bop_deadline_passed(&b, 1000));
	ck_assert_int_eq(b.code, DEVQ__CODE__OK);
	ck_assert(devq_bop_deadline_passed(&b, 1001));
	ck_assert_int_eq(b.code, DEVQ__CODE__DEADLINE_EXCEEDED);
	ck_assert_msg(strstr(b.msg, "client's deadline of 1 us"), "%s", b.msg);
	memset(&b, 0, sizeof(b));
	ck_assert(!devq_bop_deadline_passed(&b, UINT64_MAX)); /* 0: none */
	b.deadline_ns = 1000;
	b.code = DEVQ__CODE__DEPENDENCY_FAILED;
	ck_assert(!devq_bop_deadline_passed(&b, 2000));
	ck_assert_int_eq(b.code, DEVQ__CODE__DEPENDENCY_FAILED);
}
END_TEST

/* Receipt plus the deadline, saturating; fair.c's hand-over fails an op
 * past it (it reaches the backend in its stream's order, failed), op by op
 * (enqueue: the CUDA backend) and in a burst (enqueue_chain: the CPU
 * one); the tenant counts it, and a replayable op may not carry one. */
START_TEST(test_deadline_at_hand_over)
{
	for (int chain = 0; chain < 2; chain++) {
		struct devq_session *s = two_queues();
		if (chain)
			fake_use_chain();
		deadline = UINT64_MAX; /* far past any clock: saturates, never passes */
		submit(s, 1, 5, 0, 0, NULL, NULL);
		ck_assert_uint_eq(handed(0)->b.deadline_ns, UINT64_MAX);
		ck_assert_int_eq(handed(0)->b.code, DEVQ__CODE__OK);
		complete_all();
		deadline = 3; /* received at 1 ns: passed long before the hand-over */
		submit(s, 2, 6, 0, 0, NULL, NULL);
		ck_assert_uint_eq(handed(0)->b.deadline_ns, 3001);
		ck_assert_int_eq(handed(0)->b.code, DEVQ__CODE__DEADLINE_EXCEEDED);
		ck_assert_msg(strstr(handed(0)->b.msg, "deadline of 3 us"), "%s",
			      handed(0)->b.msg);
		ck_assert_int_eq(handed(0)->b.kind, DEVQ_BOP_FILL); /* in order, runs nothing */
		complete(0, DEVQ__CODE__DEADLINE_EXCEEDED);
		ck_assert_uint_eq(s->tenant->deadline_exceeded, 1);
		ck_assert_uint_eq(s->tenant->failed, 1);
		replayable = true;
		deadline = 1000000;
		submit(s, 1, 5, 0, 0, NULL, NULL);
		ck_assert_int_eq(handed(0)->b.kind, DEVQ_BOP_FAIL);
		ck_assert_int_eq(handed(0)->b.code, DEVQ__CODE__INVALID_ARGUMENT);
		ck_assert_msg(strstr(handed(0)->b.msg, "replayable"), "%s", handed(0)->b.msg);
		replayable = false;
		deadline = 0;
		complete_all();
		ck_assert_uint_eq(s->tenant->deadline_exceeded, 1);
		engine_down();
	}
}
END_TEST

int main(void)
{
	Suite *su = suite_create("core");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_reader_after_writer);
	tcase_add_test(tc, test_writer_after_readers);
	tcase_add_test(tc, test_explicit_waits_across_queues);
	tcase_add_test(tc, test_sticky_failure_and_reset);
	tcase_add_test(tc, test_failure_range_ends_at_its_own_reset);
	tcase_add_test(tc, test_failure_ranges_at_bound);
	tcase_add_test(tc, test_failure_ranges_past_bound);
	tcase_add_test(tc, test_failure_of_last_op_ends_at_its_reset);
	tcase_add_test(tc, test_ring_grows_keeping_every_point);
	tcase_add_test(tc, test_import_refuses_hugetlb_memfd);
	tcase_add_test(tc, test_waits_on_many_queues);
	tcase_add_test(tc, test_writer_after_completed_reader);
	tcase_add_test(tc, test_ring_full_completion_clears_its_slot);
	tcase_add_test(tc, test_device_lost_told_once);
	tcase_add_test(tc, test_failed_completion_logged_at_debug);
	tcase_add_test(tc, test_readers_list_stays_short);
	tcase_add_test(tc, test_strict_wait_covers_order_wait);
	tcase_add_test(tc, test_deadline_at_bound_and_past);
	tcase_add_test(tc, test_deadline_at_hand_over);
	tcase_add_test(tc, test_fairness_by_tenant);
	tcase_add_test(tc, test_fairness_window_by_time);
	tcase_add_test(tc, test_fairness_weights);
	tcase_add_test(tc, test_fairness_rooms_at_once);
	tcase_add_test(tc, test_fair_shares_parse);
	tcase_add_test(tc, test_fair_grant_weight_clamped);
	tcase_add_test(tc, test_fairness_learns_estimate);
	tcase_add_test(tc, test_fairness_samples_untimed_ops);
	tcase_add_test(tc, test_fairness_charges_untimed_at_estimate);
	tcase_add_test(tc, test_fairness_here_score_at_bound);
	tcase_add_test(tc, test_fairness_lone_tenant_sessions_alternate);
	tcase_add_test(tc, test_fairness_sessions_on_other_streams);
	tcase_add_test(tc, test_fairness_waiting_dependency_holds_no_room);
	tcase_add_test(tc, test_fairness_expect_for_loop);
	tcase_add_test(tc, test_fairness_enqueue_refused);
	tcase_add_test(tc, test_fairness_window_at_bound);
	tcase_add_test(tc, test_fairness_replay_passes_count);
	tcase_add_test(tc, test_fairness_no_credit_for_idling);
	tcase_add_test(tc, test_fairness_long_op_elsewhere_counts);
	tcase_add_test(tc, test_fairness_vt_by_one);
	tcase_add_test(tc, test_fairness_loop_flush);
	tcase_add_test(tc, test_fairness_wait_counted);
	tcase_add_test(tc, test_fairness_next_op_cost);
	tcase_add_test(tc, test_fairness_owed_keeps_lead);
	tcase_add_test(tc, test_fairness_turn_kept_by_straight_handover);
	tcase_add_test(tc, test_fairness_completer_refills);
	tcase_add_test(tc, test_lazy_poll_parks);
	tcase_add_test(tc, test_fairness_replay_cap);
	tcase_add_test(tc, test_fairness_batch_waits_as_runs);
	tcase_add_test(tc, test_fairness_run_to_count_and_window);
	tcase_add_test(tc, test_fairness_run_stops);
	tcase_add_test(tc, test_fairness_no_run_when_shared);
	tcase_add_test(tc, test_placement_moves_idle_queue);
	tcase_add_test(tc, test_placement_priority_regrant);
	tcase_add_test(tc, test_placement_free_stream_takes_waiting_op);
	tcase_add_test(tc, test_placement_weights_across_streams);
	tcase_add_test(tc, test_placement_moves_keep_class);
	tcase_add_test(tc, test_placement_reset_keeps_order);
	tcase_add_test(tc, test_fairness_weights_behind_other_streams);
	tcase_add_test(tc, test_fairness_pick_charges_the_op);
	tcase_add_test(tc, test_fairness_pick_tie_to_the_first);
	tcase_add_test(tc, test_fairness_pick_passes_a_blocked_tenant);
	tcase_add_test(tc, test_fairness_pick_time_before_ops_inside);
	tcase_add_test(tc, test_placement_idle_stream_looks_after_done);
	tcase_add_test(tc, test_placement_idle_stream_looks_last_lane);
	tcase_add_test(tc, test_placement_move_scan_bound);
	tcase_add_test(tc, test_fairness_choose_tie_to_the_first);
	tcase_add_test(tc, test_fairness_choose_tie_to_fewer_inside);
	tcase_add_test(tc, test_placement_completer_takes_other_lane);
	tcase_add_test(tc, test_placement_submit_fills_empty_stream);
	tcase_add_test(tc, test_submit_on_closed_queue);
	tcase_add_test(tc, test_quota_refusals);
	tcase_add_test(tc, test_quota_bytes_at_bound_and_past);
	tcase_add_test(tc, test_tenants_live_counted_once);
	tcase_add_test(tc, test_quota_user_queues_at_bound_and_past);
	tcase_add_test(tc, test_session_freed_after_last_op);
	tcase_add_test(tc, test_cring_at_bound_and_past);
	tcase_add_test(tc, test_cpage_socket_wakes_sleepers);
	tcase_add_test(tc, test_cpage_failed_close_logged);
	tcase_add_test(tc, test_cring_size_setting);
	tcase_add_test(tc, test_spin_adapt_chain_keeps_budget);
	tcase_add_test(tc, test_sq_size_setting);
	tcase_add_test(tc, test_sq_take_in_order);
	tcase_add_test(tc, test_sq_take_refuses);
	tcase_add_test(tc, test_sq_answer_clears_rung);
	tcase_add_test(tc, test_metrics_buckets_at_bounds);
	tcase_add_test(tc, test_metrics_tenant_buckets_at_bounds);
	suite_add_tcase(su, tc);
	TCase *tv = tcase_create("validate");
	tcase_add_test(tv, test_validate_ranges_at_end_and_past);
	tcase_add_test(tv, test_validate_buffers_used);
	tcase_add_test(tv, test_validate_kernel_buffer_extent);
	tcase_add_test(tv, test_validate_kernel_arguments);
	tcase_add_test(tv, test_buffer_size_at_bound_and_past);
	tcase_add_test(tv, test_cost_precedence);
	tcase_add_test(tv, test_cost_saturates);
	tcase_add_test(tv, test_cost_errors_and_bounds);
	tcase_add_test(tv, test_cost_bounds_op_time);
	tcase_add_test(tv, test_fairness_charges_cost);
	TCase *tf = tcase_create("faults");
	tcase_set_timeout(tf, 60);
	tcase_add_test(tf, test_fault_each_allocation_of_a_client);
	tcase_add_test(tf, test_fault_each_allocation_at_engine_start);
	tcase_add_test(tf, test_fault_each_allocation_of_admission);
	tcase_add_test(tf, test_fault_waits_on_many_queues);
	tcase_add_test(tf, test_fault_refused_op_holds_no_waits);
	tcase_add_test(tf, test_fault_shared_buffer_syscalls);
	tcase_add_test(tf, test_fault_import_syscalls);
	tcase_add_test(tf, test_buffer_worker_steps);
	tcase_add_test(tf, test_buffer_pinning_refused_unmaps);
	tcase_add_test(tf, test_buffer_worker_bound_and_fini);
	tcase_add_test(tf, test_buffer_pinning_any_errno);
	tcase_add_test(tf, test_buffer_paths_log_nothing);
	tcase_add_test(tf, test_fault_buffer_each_allocation);
	tcase_add_test(tf, test_import_refusals);
	tcase_add_test(tf, test_buffer_replies_and_release_while_installing);
	tcase_add_test(tf, test_fault_buffer_worker);
	tcase_add_test(tf, test_fault_cpage_syscalls);
	tcase_add_test(tf, test_fault_completion_unrecorded_closes_session);
	tcase_add_test(tf, test_fault_failure_range_without_memory);
	suite_add_tcase(su, tf);
	suite_add_tcase(su, tv);
	SRunner *sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
