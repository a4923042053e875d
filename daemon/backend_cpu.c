/* CPU backend: one worker thread per device stream, each running its FIFO in
 * order.  Enqueue only links the op and signals; the worker stamps start and
 * end around the C implementation.  A cross-stream wait blocks the worker on
 * the producer's completion, exactly as a GPU stream blocks on an event:
 * since every op only waits on ops handed off before it and each stream is
 * FIFO, the oldest unfinished op can always run, so this cannot deadlock. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backend.h"
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
	pthread_mutex_t lock;  /* stream FIFOs and every op's done flag */
	pthread_cond_t done;   /* broadcast on each completion, for waiters */
	bool stop;
	/* Set by the fault-injection kernel: from then on every op fails as on
	 * a GPU whose context took a sticky error. */
	atomic_bool lost;
	struct cpu_stream *s;
};

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

/* Called with the lock held; returns with it held. */
static void wait_deps(struct cpu_backend *cb, struct devq_bop *op)
{
	for (unsigned i = 0; i < op->nwaits; i++) {
		struct devq_bop *w = op->waits[i];
		while (!atomic_load_explicit(&w->done, memory_order_acquire))
			pthread_cond_wait(&cb->done, &cb->lock);
		if (i < op->nstrict && w->code != DEVQ__CODE__OK && op->code == DEVQ__CODE__OK)
			devq_bop_dependency_failed(op, w);
	}
}

static void *worker(void *arg)
{
	struct cpu_stream *st = arg;
	struct cpu_backend *cb = st->cb;

	pthread_mutex_lock(&cb->lock);
	for (;;) {
		while (!st->head && !cb->stop) {
			unsigned v = atomic_load_explicit(&st->wake, memory_order_relaxed);
			st->sleeping = true;
			pthread_mutex_unlock(&cb->lock);
			/* A wake between the unlock and the wait changed the word:
			 * the wait returns at once (EAGAIN). */
			syscall(SYS_futex, &st->wake, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
			pthread_mutex_lock(&cb->lock);
			st->sleeping = false;
		}
		if (!st->head)
			break;
		struct devq_bop *op = st->head;
		st->head = op->next;
		if (!st->head)
			st->tail = NULL;
		if (op->kind != DEVQ_BOP_FAIL)
			wait_deps(cb, op);
		pthread_mutex_unlock(&cb->lock);

		/* Cancellation wins over a failed dependency: the op was not
		 * wanted any more, whatever happened before it. */
		if (op->kind != DEVQ_BOP_FAIL && op->cancel &&
		    atomic_load_explicit(op->cancel, memory_order_relaxed)) {
			op->code = DEVQ__CODE__CANCELLED;
			snprintf(op->msg, sizeof(op->msg), "cancelled before it started");
		}
		op->t_start = devq_now_ns();
		if (op->code == DEVQ__CODE__OK && !atomic_load(&cb->lost))
			run_op(cb, op);
		op->t_end = devq_now_ns();
		/* As on a GPU: once the context is lost, every op that had not
		 * completed reports it, whatever it was doing. */
		if (atomic_load(&cb->lost) && op->kind != DEVQ_BOP_FAIL) {
			op->code = DEVQ__CODE__DEVICE_LOST;
			snprintf(op->msg, sizeof(op->msg), "%s", lost_msg);
		}

		/* Report under the lock, before waking dependents: an op's
		 * completion then always reaches the daemon before that of any
		 * op that waited on it.  From on_complete on, op may be freed. */
		pthread_mutex_lock(&cb->lock);
		atomic_store_explicit(&op->done, 1, memory_order_release);
		op->more_queued = st->head != NULL;
		cb->b.on_complete(cb->b.ud, op);
		pthread_cond_broadcast(&cb->done);
	}
	pthread_mutex_unlock(&cb->lock);
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
	/* Only a worker found sleeping is woken, once: the ops of a batch
	 * after the first cost nothing (the worker drains the FIFO before it
	 * sleeps again).  The word moves under the lock, the wake-up happens
	 * after it, so the woken worker does not block on the lock at once. */
	bool wake = st->sleeping;
	if (wake) {
		st->sleeping = false;
		atomic_fetch_add_explicit(&st->wake, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&cb->lock);
	if (wake)
		syscall(SYS_futex, &st->wake, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
	return 0;
}

static const struct devq_backend_ops cpu_ops = {
	.destroy = cpu_destroy,
	.map_host = cpu_map_host,
	.unmap_host = cpu_unmap_host,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.has_kernel = cpu_has_kernel,
	.enqueue = cpu_enqueue,
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
	cb->b.name = "cpu";
	cb->b.on_complete = cfg->on_complete;
	cb->b.ud = cfg->ud;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	snprintf(cb->b.device, sizeof(cb->b.device),
		 "host CPU (%ld cores), %u worker streams + %u high-priority", ncpu,
		 n - cfg->high_streams, cfg->high_streams);
	pthread_mutex_init(&cb->lock, NULL);
	pthread_cond_init(&cb->done, NULL);
	cb->s = calloc(n, sizeof(*cb->s));
	if (!cb->s) {
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
