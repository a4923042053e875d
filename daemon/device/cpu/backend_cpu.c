/* SPDX-License-Identifier: Apache-2.0 */
/* CPU backend: one worker thread per device stream, each running its FIFO in
 * order.  Enqueue only links the op, flush wakes the workers that sleep with
 * work; the worker stamps start and end around the C implementation.  A cross-stream wait blocks the worker on
 * the producer's completion, exactly as a GPU stream blocks on an event:
 * since every op only waits on ops handed off before it and each stream is
 * FIFO, the oldest unfinished op can always run, so this cannot deadlock. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "device/backend.h"
#include "base/lock.h"
#include "devq.pb-c.h"

/* A worker sleeps on its own futex word rather than a condition variable:
 * glibc marks the mutex contended whenever a condition wait reacquires it,
 * so every unlock after a wake-up cost a FUTEX_WAKE for nobody, and
 * signalling with the lock held made the woken worker block on it at once
 * (bench/RESULTS.md, run 10: the round trip fell from 6.3 to ~4 us). */
struct cpu_stream {
	struct cpu_backend *cb;
	pthread_t thread;
	bool started;
	bool sleeping;      /* under the lock: the worker waits on wake */
	atomic_uint wake;   /* bumped under the lock to wake a sleeping worker */
	struct devq_bop *head, *tail;
};

struct cpu_backend {
	struct devq_backend b;
	pthread_mutex_t lock;  /* stream FIFOs; the done condition */
	pthread_cond_t done;   /* broadcast on a completion while dep_waiters */
	atomic_uint dep_waiters; /* workers blocked on another stream's op */
	atomic_bool queued;      /* enqueued since the last flush */
	struct cpu_stream **to_wake; /* flush's scratch, under the lock */
	bool stop;
	/* Set by the fault-injection kernel: from then on every op fails as on
	 * a GPU whose context took a sticky error. */
	atomic_bool lost;
	struct cpu_stream *s;
};

/* How long a worker watches a dependency before it sleeps: longer than a
 * wake-up of an idle vCPU (~35 us here), so that a chain across streams
 * whose other worker went to sleep is caught when it wakes, instead of
 * both then sleeping at every link. */
#define DEP_SPIN_NS 100000

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

static const char lost_msg[] =
	"simulated sticky fault (fault-injection kernel): the device context is lost";

static void run_op(struct cpu_backend *cb, struct devq_bop *op)
{
	switch (op->kind) {
	case DEVQ_BOP_KERNEL: {
		struct devq_kctx ctx = { .start_ns = op->t_start };
		int r = op->kernel->cpu(op->args, &ctx);
		if (r == -ENOTRECOVERABLE) {
			atomic_store(&cb->lost, true);
		} else if (r < 0) {
			op->code = DEVQ__CODE__DEVICE_ERROR;
			snprintf(op->msg, sizeof(op->msg), "%s failed: %s", op->kernel->name,
				 strerror(-r));
		}
		break;
	}
	case DEVQ_BOP_COPY:
		memmove((void *)(uintptr_t)op->dst, (const void *)(uintptr_t)op->src, op->size);
		break;
	case DEVQ_BOP_FILL: {
		uint32_t *d = (uint32_t *)(uintptr_t)op->dst;
		for (uint64_t i = 0; i < op->size / 4; i++)
			d[i] = op->pattern;
		break;
	}
	case DEVQ_BOP_FAIL:
		break;
	}
}

/* The stream whose worker this thread is (NULL on other threads). */
static _Thread_local struct cpu_stream *self_stream;

/* Blocks until every op op waits on is done, as a GPU stream blocks on an
 * event.  The lock is taken only when one is not done yet. */
static void wait_deps(struct cpu_backend *cb, struct devq_bop *op)
{
	for (unsigned i = 0; i < op->nwaits; i++) {
		struct devq_bop *w = op->waits[i];
		/* A dependency handed to another stream usually ends within
		 * microseconds when ops are small (a chain across streams):
		 * watching it a bounded while costs less than sleeping and
		 * being woken, as an adaptive mutex spins before it sleeps.  A
		 * long op costs the waiter DEP_SPIN_NS of CPU once. */
		if (!atomic_load(&w->done)) {
			/* Yielding after the first microseconds: on a busy
			 * machine the producer may be waiting for this very
			 * CPU, and a pure spin would hold it off for the whole
			 * DEP_SPIN_NS at every link (seen: 100 us per op). */
			uint64_t t0 = devq_now_ns(), now = t0;
			while (!atomic_load(&w->done) && now - t0 < DEP_SPIN_NS) {
				if (now - t0 < 2000)
					cpu_relax();
				else
					sched_yield();
				now = devq_now_ns();
			}
		}
		if (!atomic_load(&w->done)) {
			pthread_mutex_lock(&cb->lock);
			/* Announced before the check: a completer that stores done
			 * after it sees the announcement and broadcasts. */
			atomic_fetch_add(&cb->dep_waiters, 1);
			while (!atomic_load(&w->done))
				pthread_cond_wait(&cb->done, &cb->lock);
			atomic_fetch_sub(&cb->dep_waiters, 1);
			pthread_mutex_unlock(&cb->lock);
		}
		if (i < op->nstrict && w->code != DEVQ__CODE__OK && op->code == DEVQ__CODE__OK)
			devq_bop_dependency_failed(op, w);
	}
}

/* Takes everything queued on st, sleeping while there is nothing; NULL once
 * the backend stops and st is empty. */
static struct devq_bop *take_all(struct cpu_stream *st)
{
	struct cpu_backend *cb = st->cb;
	pthread_mutex_lock(&cb->lock);
	while (!st->head && !cb->stop) {
		unsigned v = atomic_load_explicit(&st->wake, memory_order_relaxed);
		st->sleeping = true;
		pthread_mutex_unlock(&cb->lock);
		/* A wake between the unlock and the wait changed the word: the
		 * wait returns at once (EAGAIN). */
		syscall(SYS_futex, &st->wake, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
		pthread_mutex_lock(&cb->lock);
		st->sleeping = false;
	}
	struct devq_bop *list = st->head;
	st->head = st->tail = NULL;
	pthread_mutex_unlock(&cb->lock);
	return list;
}

/* The worker holds no lock while it runs and reports ops: it takes its
 * whole FIFO at once, and the daemon's on_complete marks the op done (the
 * last thing it does with it), so an op's completion always reaches the
 * daemon before that of any op that waited on it, and on_complete may hand
 * the session's next ops to any stream (enqueue_any_thread). */
static void *worker(void *arg)
{
	struct cpu_stream *st = arg;
	struct cpu_backend *cb = st->cb;
	struct devq_bop *op;

	self_stream = st;
	while ((op = take_all(st))) {
		while (op) {
			struct devq_bop *next = op->next;
			if (op->kind != DEVQ_BOP_FAIL)
				wait_deps(cb, op);
			/* Cancellation wins over a failed dependency: the op was
			 * not wanted any more, whatever happened before it. */
			if (op->kind != DEVQ_BOP_FAIL && op->cancel &&
			    atomic_load_explicit(op->cancel, memory_order_relaxed)) {
				op->code = DEVQ__CODE__CANCELLED;
				snprintf(op->msg, sizeof(op->msg), "cancelled before it started");
			}
			op->t_start = devq_now_ns();
			if (op->code == DEVQ__CODE__OK && !atomic_load(&cb->lost))
				run_op(cb, op);
			op->t_end = devq_now_ns();
			/* As on a GPU: once the context is lost, every op that
			 * had not completed reports it, whatever it was doing. */
			if (atomic_load(&cb->lost) && op->kind != DEVQ_BOP_FAIL) {
				op->code = DEVQ__CODE__DEVICE_LOST;
				snprintf(op->msg, sizeof(op->msg), "%s", lost_msg);
			}
			op->more_queued = next != NULL;
			cb->b.on_complete(cb->b.ud, op); /* from here on op may be freed */
			if (atomic_load(&cb->dep_waiters)) {
				pthread_mutex_lock(&cb->lock);
				pthread_cond_broadcast(&cb->done);
				pthread_mutex_unlock(&cb->lock);
			}
			op = next;
		}
	}
	return NULL;
}

/* Called with the lock held. */
static void wake_worker(struct cpu_stream *st)
{
	atomic_fetch_add_explicit(&st->wake, 1, memory_order_relaxed);
	syscall(SYS_futex, &st->wake, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void cpu_destroy(struct devq_backend *b)
{
	struct cpu_backend *cb = (struct cpu_backend *)b;
	if (!cb)
		return;
	pthread_mutex_lock(&cb->lock);
	cb->stop = true;
	for (unsigned i = 0; i < b->streams; i++)
		wake_worker(&cb->s[i]);
	pthread_mutex_unlock(&cb->lock);
	for (unsigned i = 0; i < b->streams; i++)
		if (cb->s[i].started)
			pthread_join(cb->s[i].thread, NULL);
	pthread_cond_destroy(&cb->done);
	pthread_mutex_destroy(&cb->lock);
	free(cb->s);
	free(cb->to_wake);
	free(cb);
}

/* Host memory is already addressable by the workers; nothing to pin. */
static int cpu_map_host(struct devq_backend *b, void *addr, size_t len, bool read_only,
			uint64_t *devaddr)
{
	(void)b;
	(void)len;
	(void)read_only;
	*devaddr = (uint64_t)(uintptr_t)addr;
	return 0;
}

static void cpu_unmap_host(struct devq_backend *b, void *addr, size_t len)
{
	(void)b;
	(void)addr;
	(void)len;
}

static int cpu_alloc(struct devq_backend *b, size_t len, uint64_t *devaddr)
{
	(void)b;
	/* Zeroed like a fresh memfd, so both kinds start from known contents. */
	void *p = calloc(1, len ? len : 1);
	if (!p)
		return -ENOMEM;
	*devaddr = (uint64_t)(uintptr_t)p;
	return 0;
}

static void cpu_free(struct devq_backend *b, uint64_t devaddr, size_t len)
{
	(void)b;
	(void)len;
	free((void *)(uintptr_t)devaddr);
}

static bool cpu_has_kernel(struct devq_backend *b, const struct devq_kernel *k)
{
	(void)b;
	return k->cpu != NULL;
}

static int cpu_enqueue(struct devq_backend *b, struct devq_bop *op)
{
	struct cpu_backend *cb = (struct cpu_backend *)b;
	if (op->stream >= b->streams)
		return -EINVAL;
	struct cpu_stream *st = &cb->s[op->stream];
	op->next = NULL;
	pthread_mutex_lock(&cb->lock);
	if (st->tail)
		st->tail->next = op;
	else
		st->head = op;
	st->tail = op;
	pthread_mutex_unlock(&cb->lock);
	/* A completion handing its session's next op to its own stream (the
	 * common refill) needs no wake-up: that worker takes its FIFO as soon
	 * as on_complete returns. */
	if (st != self_stream)
		atomic_store(&cb->queued, true);
	return 0;
}

/* Wakes every sleeping worker with work.  The daemon flushes once it has
 * handed over all it has for now, with its own locks released: a worker
 * woken inside them would preempt the caller on its CPU, run the op and
 * block on the caller's lock at its completion.  It also makes a batch
 * cost one wake-up.  The words move under the lock, the wake-ups happen
 * after it, so a woken worker does not block on this lock either. */
static void cpu_flush(struct devq_backend *b)
{
	struct cpu_backend *cb = (struct cpu_backend *)b;
	if (!atomic_exchange(&cb->queued, false))
		return;
	unsigned n = 0;
	pthread_mutex_lock(&cb->lock);
	for (unsigned i = 0; i < b->streams; i++) {
		struct cpu_stream *st = &cb->s[i];
		if (st->sleeping && st->head) {
			st->sleeping = false;
			atomic_fetch_add_explicit(&st->wake, 1, memory_order_relaxed);
			cb->to_wake[n++] = st;
		}
	}
	struct cpu_stream *w[n ? n : 1];
	memcpy(w, cb->to_wake, n * sizeof(*w));
	pthread_mutex_unlock(&cb->lock);
	for (unsigned i = 0; i < n; i++)
		syscall(SYS_futex, &w[i]->wake, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static const struct devq_backend_ops cpu_ops = {
	.destroy = cpu_destroy,
	.map_host = cpu_map_host,
	.unmap_host = cpu_unmap_host,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.has_kernel = cpu_has_kernel,
	.enqueue = cpu_enqueue,
	.flush = cpu_flush,
};

int devq_backend_cpu_open(const struct devq_backend_config *cfg, struct devq_backend **out)
{
	/* A high-priority stream is a worker of its own: its queues never wait
	 * behind normal queues' ops in a FIFO.  Threads are not reniced. */
	unsigned n = (cfg->streams ? cfg->streams : 4) + cfg->high_streams;
	struct cpu_backend *cb = calloc(1, sizeof(*cb));
	if (!cb)
		return -ENOMEM;
	cb->b.ops = &cpu_ops;
	cb->b.enqueue_any_thread = true;
	cb->b.name = "cpu";
	cb->b.on_complete = cfg->on_complete;
	cb->b.ud = cfg->ud;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	snprintf(cb->b.device, sizeof(cb->b.device),
		 "host CPU (%ld cores), %u worker streams + %u high-priority", ncpu,
		 n - cfg->high_streams, cfg->high_streams);
	devq_mutex_init_hot(&cb->lock);
	pthread_cond_init(&cb->done, NULL);
	cb->s = calloc(n, sizeof(*cb->s));
	cb->to_wake = calloc(n, sizeof(*cb->to_wake));
	if (!cb->s || !cb->to_wake) {
		cpu_destroy(&cb->b);
		return -ENOMEM;
	}
	cb->b.streams = n;
	cb->b.high_streams = cfg->high_streams;
	for (unsigned i = 0; i < n; i++)
		cb->s[i].cb = cb;
	for (unsigned i = 0; i < n; i++) {
		int r = pthread_create(&cb->s[i].thread, NULL, worker, &cb->s[i]);
		if (r) {
			cpu_destroy(&cb->b);
			return -r;
		}
		cb->s[i].started = true;
	}
	*out = &cb->b;
	return 0;
}
