/* SPDX-License-Identifier: Apache-2.0 */
/* CPU backend: device streams are FIFOs run in order by a pool of worker
 * threads (below).  Enqueue only links the op, flush wakes a worker if
 * one is needed; the worker stamps start and end around the C
 * implementation.  A cross-stream wait blocks the worker on the producer's
 * completion, exactly as a GPU stream blocks on an event: since every op
 * only waits on ops handed off before it, each stream is FIFO and every
 * stream with work can get a worker, the oldest unfinished op can always
 * run, so this cannot deadlock. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "device/backend.h"
#include "device/hostslot.h"
#include "base/lock.h"
#include "base/log.h"
#include "devq.pb-c.h"
#include "cpu_kernels.h"

/* A device stream is a FIFO; workers are a pool of threads, any of which
 * runs any stream, one stream at a time, so each stream stays in order.  A
 * stream with work and no worker waits in a run queue (high-priority
 * streams first).  The loop wakes at most one sleeping worker per flush, and
 * only when no worker is awake and free to take the stream; a worker that
 * takes a stream wakes the next sleeper itself if more streams wait, so the
 * loop thread pays one futex wake per read at most, not one per stream
 * with work, and workers that are not needed stay asleep.  There are as
 * many workers as streams: a worker blocked in a long op or on a
 * dependency holds one stream, so every stream with work can always get a
 * worker (no deadlock, and no stream waits for a thread while another
 * stream's op runs long).
 *
 * A worker sleeps on its own futex word rather than a condition variable:
 * glibc marks the mutex contended whenever a condition wait reacquires it,
 * so every unlock after a wake-up would cost a FUTEX_WAKE for nobody, and
 * signalling with the lock held makes the woken worker block on it at once
 * (measured: bench/RESULTS.md, "Run 10"). */
struct cpu_worker {
	struct cpu_backend *cb;
	pthread_t thread;
	bool started;
	bool sleeping;            /* under the lock: on the sleepers list */
	atomic_uint wake;         /* bumped under the lock to wake it */
	struct cpu_worker *snext; /* sleepers list */
};

struct cpu_stream {
	struct devq_bop *head, *tail; /* queued, not yet taken by a worker */
	bool owned;                   /* a worker runs its ops now */
	bool in_runq;
	bool high;
	struct cpu_stream *rnext;
	/* How long its worker watches a dependency before sleeping (wait_deps;
	 * only the thread that owns the stream touches it). */
	uint64_t dep_spin_ns;
};

/* Threads of the process cpu_starved remembers: its workers (one per
 * stream, at most 64 + 64), their gemm helpers, the loop and the others;
 * a thread beyond it is not judged (it then cannot make a stall look like
 * starvation). */
#define CPU_SEEN_MAX 512

struct cpu_backend {
	struct devq_backend b;
	pthread_mutex_t lock;  /* streams, run queues, workers' sleep state */
	pthread_cond_t done;   /* broadcast on a completion while dep_waiters */
	atomic_uint dep_waiters; /* workers blocked on another stream's op */
	atomic_bool queued;      /* a stream entered a run queue since the last flush */
	bool stop;
	/* Set by the fault-injection kernel: from then on every op fails as on
	 * a GPU whose context took a sticky error. */
	atomic_bool lost;
	struct cpu_stream *s;
	struct cpu_worker *w;
	unsigned nworkers;
	struct cpu_stream *rq_head[2], *rq_tail[2]; /* [1]: high priority, served first */
	unsigned free_awake;        /* workers awake that own no stream */
	struct cpu_worker *sleepers;
	/* Host executables: their per-stream slots, and the cores they
	 * share (run_host). */
	struct devq_hslots *hslots;
	pthread_mutex_t cores_lock;
	pthread_cond_t cores_back; /* broadcast when a waiting slice got cores */
	unsigned ncpu;       /* cores this process may run on */
	unsigned cores_free; /* under cores_lock: for bulk slices */
	unsigned host_ops;   /* under cores_lock: bulk ops running or waiting for cores */
	/* Under cores_lock: bulk slices waiting for cores, in arrival order
	 * (one per worker at most: as many as streams), and room for their
	 * ops to ask core_pick with. */
	struct core_wait **waitv;
	struct devq_bop **waitops;
	unsigned nwait;
	atomic_uint short_ops; /* short host ops running (they take no cores) */
	/* Bulk work runs at SCHED_IDLE: the process may return a thread
	 * from it (bulk_probe).  Cleared for good if a return ever fails. */
	atomic_bool demote;
	/* cpu_starved's last look at each thread of the process (loop
	 * thread only). */
	struct seen_thread {
		int tid;
		uint64_t cpu, at;
	} seen[CPU_SEEN_MAX];
	unsigned nseen;
};

/* A bulk slice waiting for cores: got is set by the thread that gives
 * them (grant), under cores_lock. */
struct core_wait {
	struct devq_bop *op;
	uint64_t want_max;
	unsigned got;
};

/* How long a worker watches a dependency before it sleeps, at most:
 * longer than a wake-up of an idle CPU (tens of us on a VM: bench/RESULTS.md,
 * "Where a confined sporadic op's time goes"), so that a chain
 * across streams whose other worker went to sleep is caught when it
 * wakes, instead of both then sleeping at every link.  The budget is
 * adapted per stream (cpu_stream.dep_spin_ns, from DEP_SPIN_NS) to how
 * long its producers took from the start of the watch to their end
 * (devq_spin_adapt): halved by each one of DEP_SPIN_NS or more, down to
 * DEP_SPIN_MIN_NS, so a stream whose dependencies are long ops soon stops
 * paying for watching them; raised to twice a shorter one when that is
 * more than the budget, and doubled when a watch missed a short one, so a
 * stream whose dependencies became short again watches long enough for
 * them; never lowered by a short one.  No watch at all where the producer
 * cannot run meanwhile (devq_spin_ok: the daemon is confined to one
 * CPU). */
#define DEP_SPIN_NS 100000
#define DEP_SPIN_MIN_NS 2000

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

/* Host ops share the cores in two classes.  Bulk work (an op expected to
 * take longer than slice-us, on a normal-priority stream) takes cores as
 * tokens, slice by slice, and runs at SCHED_IDLE: below every thread of
 * normal priority, so that short ops, high-priority ops and any other
 * process take the cores from it at once, in the kernel's scheduler, and
 * a latency tenant's op beside a gemm tenant's waits neither for a slice
 * to end nor for a token (measured: bench/RESULTS.md, "Isolation beside
 * heavy work").  Short and high-priority ops take no token: they run at
 * once with a share of every core (ncpu / short ones running).  Slicing
 * alone cannot give that tail: slices short enough to matter cost bulk
 * work much of its throughput and still leave the wake-ups of a short op
 * queued behind equal-priority compute threads. */
static bool is_bulk(const struct cpu_backend *cb, const struct devq_bop *op)
{
	if (op->stream >= cb->b.streams - cb->b.high_streams)
		return false;
	return op->expect_ns > atomic_load_explicit(&cb->b.slice_ns, memory_order_relaxed);
}

/* A bulk op's share of the free cores: every core when it runs alone;
 * with other bulk ops running or waiting, ncpu / their number; at most
 * want_max.  Called with cores_lock held and cores free. */
static unsigned share(const struct cpu_backend *cb, uint64_t want_max)
{
	unsigned want = cb->ncpu / cb->host_ops ? cb->ncpu / cb->host_ops : 1;
	if (want > want_max)
		want = (unsigned)want_max;
	return want < cb->cores_free ? want : cb->cores_free;
}

/* Called with cores_lock held: gives free cores to waiting slices, in the
 * daemon's fair order (core_pick: the tenant with the least virtual time
 * first), so that weights hold for the cores as they do for the streams;
 * arrival order without it. */
static void grant(struct cpu_backend *cb)
{
	bool gave = false;
	while (cb->nwait && cb->cores_free) {
		unsigned i = 0;
		if (cb->nwait > 1 && cb->b.core_pick) {
			for (unsigned j = 0; j < cb->nwait; j++)
				cb->waitops[j] = cb->waitv[j]->op;
			i = cb->b.core_pick(cb->b.ud, cb->waitops, cb->nwait);
			if (i >= cb->nwait)
				i = 0;
		}
		struct core_wait *w = cb->waitv[i];
		w->got = share(cb, w->want_max);
		cb->cores_free -= w->got;
		memmove(&cb->waitv[i], &cb->waitv[i + 1], (cb->nwait - i - 1) * sizeof(*cb->waitv));
		cb->nwait--;
		gave = true;
	}
	if (gave)
		pthread_cond_broadcast(&cb->cores_back);
}

/* Takes cores for a slice of bulk op op (at least one, at most want_max),
 * waiting in the fair order while none is free, after giving back the
 * held ones its previous slice had: in one step, so that the op's next
 * slice competes for them with the slices waiting (given back first, the
 * cores would go to those whatever the order).  The cores are the
 * device: several streams' gemms share them instead of each starting ncpu
 * threads (oversubscribed BLAS threads thrash each other's caches;
 * measured: bench/RESULTS.md, "gemm_f32 against NumPy, and 4 clients
 * against 1"). */
static unsigned cores_take(struct cpu_backend *cb, struct devq_bop *op, uint64_t want_max,
			   unsigned held)
{
	struct core_wait me = { .op = op, .want_max = want_max ? want_max : 1 };
	pthread_mutex_lock(&cb->cores_lock);
	cb->cores_free += held;
	cb->waitv[cb->nwait++] = &me;
	grant(cb);
	while (!me.got)
		pthread_cond_wait(&cb->cores_back, &cb->cores_lock);
	pthread_mutex_unlock(&cb->cores_lock);
	return me.got;
}

static void cores_give(struct cpu_backend *cb, unsigned n)
{
	pthread_mutex_lock(&cb->cores_lock);
	cb->cores_free += n;
	grant(cb);
	pthread_mutex_unlock(&cb->cores_lock);
}

/* The calling thread's class around one call of bulk work: SCHED_IDLE
 * while the call computes, its own policy again after, so that it never
 * holds a lock (cores_lock, the engine's fair lock in core_pick, the
 * completion's) at SCHED_IDLE, where other processes' load could keep it
 * off every CPU while the loop and other workers wait for that lock.  A
 * return that fails (the process lost the right: bulk_probe saw it)
 * stops demoting for good and says so once; the thread itself stays at
 * SCHED_IDLE, where every op it runs later yields to other threads. */
struct sched_keep {
	int policy;
	struct sched_param sp;
	bool have; /* policy and sp were read */
};

static bool go_idle(struct cpu_backend *cb, struct sched_keep *k)
{
	if (!atomic_load_explicit(&cb->demote, memory_order_relaxed))
		return false;
	if (!k->have && pthread_getschedparam(pthread_self(), &k->policy, &k->sp) != 0)
		return false;
	k->have = true;
	struct sched_param z = { 0 };
	return pthread_setschedparam(pthread_self(), SCHED_IDLE, &z) == 0;
}

static void come_back(struct cpu_backend *cb, struct sched_keep *k)
{
	if (pthread_setschedparam(pthread_self(), k->policy, &k->sp) != 0 &&
	    atomic_exchange(&cb->demote, false))
		log_warn("cpu backend: a worker could not return from SCHED_IDLE; bulk host ops "
			 "run at normal priority from now on");
}

static void *bulk_probe_thread(void *arg)
{
	struct cpu_backend *cb = arg;
	struct sched_keep k = { 0 };
	struct sched_param z = { 0 };
	bool ok = pthread_getschedparam(pthread_self(), &k.policy, &k.sp) == 0 &&
		  pthread_setschedparam(pthread_self(), SCHED_IDLE, &z) == 0 &&
		  pthread_setschedparam(pthread_self(), k.policy, &k.sp) == 0;
	atomic_store(&cb->demote, ok);
	return NULL;
}

/* Reads the whole of a small /proc file into buf; its length, or -1. */
static ssize_t read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, len - 1);
	if (close(fd) < 0 || n <= 0)
		return -1;
	buf[n] = '\0';
	return n;
}

/* Thread tid's state, scheduling policy and CPU time (ns); false where
 * /proc does not say. */
static bool thread_sched(const char *tid, char *state, int *policy, uint64_t *cpu)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/self/task/%.16s/stat", tid);
	if (read_small(path, buf, sizeof(buf)) < 0)
		return false;
	/* After the name, which may hold anything: state is field 3,
	 * policy field 41. */
	const char *p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return false;
	/* The trace builder runs at SCHED_IDLE too (requests/tracereq.c):
	 * not bulk work, and no sign of the device's progress. */
	if (strstr(buf, "(devqd-trace)"))
		return false;
	*state = p[2];
	p += 2;
	for (int field = 3; field < 41 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p, " %d", policy) != 1)
		return false;
	snprintf(path, sizeof(path), "/proc/self/task/%.16s/schedstat", tid);
	unsigned long long run = 0;
	if (read_small(path, buf, sizeof(buf)) < 0 || sscanf(buf, "%llu", &run) != 1)
		return false;
	*cpu = run;
	return true;
}

/* See backend.h.  A thread of the process at SCHED_IDLE (a bulk slice's
 * worker or gemm helper) that is runnable now and ran less than a tenth
 * of the time since the last look is starved: other threads (other
 * processes) take the CPUs, which bulk work yields to.  A slice that
 * hangs asleep is not runnable, and one that spins gets the CPU: both
 * still look stuck.  Each look remembers every thread's CPU time, so a
 * thread is judged from the second look on (the watchdog looks at every
 * tick while nothing progresses). */
static bool cpu_starved(struct devq_backend *b)
{
	struct cpu_backend *cb = (struct cpu_backend *)b;
	DIR *dir = opendir("/proc/self/task");
	if (!dir)
		return false;
	uint64_t now = devq_now_ns();
	struct seen_thread prev[CPU_SEEN_MAX];
	unsigned nprev = cb->nseen;
	memcpy(prev, cb->seen, nprev * sizeof(*prev));
	cb->nseen = 0;
	bool starved = false;
	struct dirent *e;
	while ((e = readdir(dir)) && cb->nseen < CPU_SEEN_MAX) {
		char state;
		int policy;
		uint64_t cpu;
		if (e->d_name[0] == '.' || !thread_sched(e->d_name, &state, &policy, &cpu))
			continue;
		int tid = atoi(e->d_name);
		cb->seen[cb->nseen++] = (struct seen_thread){ tid, cpu, now };
		if (policy != SCHED_IDLE || state != 'R')
			continue;
		for (unsigned i = 0; i < nprev; i++)
			if (prev[i].tid == tid && now > prev[i].at && cpu >= prev[i].cpu &&
			    (cpu - prev[i].cpu) * 10 < now - prev[i].at)
				starved = true;
	}
	if (closedir(dir) < 0)
		log_warn("cpu backend: closedir /proc/self/task: %s", strerror(errno));
	return starved;
}

/* Whether a thread of this process may go to SCHED_IDLE and come back
 * (cb->demote): coming back needs CAP_SYS_NICE or an RLIMIT_NICE of 20 at
 * least (devqd.service: LimitNICE=+0), tried on a thread of its own. */
static void bulk_probe(struct cpu_backend *cb)
{
	pthread_t t;
	atomic_store(&cb->demote, false);
	if (pthread_create(&t, NULL, bulk_probe_thread, cb) == 0 && pthread_join(t, NULL) != 0)
		atomic_store(&cb->demote, false);
}

/* A slice expected to take less core time than this is short for the
 * watchdog: a quarter of the smallest stall timeout (1 s), so that a short
 * slice stretched by a loaded machine still ends well within it. */
#define SHORT_SLICE_NS 250000000ull

/* How many units each core of the next slice runs: slice_ns of expected
 * time at the core time per unit the op's earlier slices took (one unit
 * when there were none), at least one, at most 4 times the last slice's (a
 * first unit that ran unusually fast does not make the second slice
 * huge). */
static uint64_t slice_per_core(uint64_t slice_ns, uint64_t done, uint64_t core_ns, uint64_t last)
{
	if (!done)
		return 1;
	uint64_t per = core_ns / done;
	uint64_t n = per ? slice_ns / per : slice_ns;
	if (last <= UINT64_MAX / 4 && n > last * 4)
		n = last * 4;
	return n ? n : 1;
}

/* A sliced host op (<devq/kernel.h> units): its units in slices of at
 * most slice_ns of expected time on each core the slice holds; a bulk
 * op's slice with the cores it takes for itself alone (so other bulk ops
 * get theirs between two slices, in the fair order), a short op's with
 * its share, taken at once.  Between two slices: a cancel (admin evict,
 * session close, SIGTERM) stops it CANCELLED; its own device time past
 * max-op-ms fails it DEADLINE_EXCEEDED.  Its own device time is the core
 * time its slices held (the cores taken x a slice's wall time) in whole
 * devices (/ ncpu): an op alone holds every core, and its device time is
 * its wall time, as on a GPU; an op that shares the cores with others
 * runs longer on fewer of them and is charged the same.  The waits for
 * cores are not the op's: they are queued time.  Either stop leaves its
 * outputs partly written.  Returns as the run does, or 1 with op->code
 * set. */
static int run_sliced(struct cpu_backend *cb, struct devq_bop *op, const struct devq_host_exe *x,
		      struct devq_host_call *call, bool bulk, struct sched_keep *keep,
		      uint64_t *waited)
{
	uint64_t units = x->units(op->args);
	uint64_t done = 0, core_ns = 0, last = 1;
	unsigned held = 0; /* cores the previous slice had (bulk) */
	int r = 0;
	while (done < units) {
		if (op->cancel && atomic_load_explicit(op->cancel, memory_order_relaxed)) {
			op->code = DEVQ__CODE__CANCELLED;
			snprintf(op->msg, sizeof(op->msg),
				 "%.40s: cancelled after %llu of %llu units; its outputs are partly "
				 "written",
				 op->kernel->name, (unsigned long long)done,
				 (unsigned long long)units);
			r = 1;
			break;
		}
		uint64_t max_ns = atomic_load_explicit(&cb->b.max_op_ns, memory_order_relaxed);
		uint64_t dev_ns = core_ns / cb->ncpu;
		if (max_ns && dev_ns >= max_ns) {
			op->code = DEVQ__CODE__DEADLINE_EXCEEDED;
			snprintf(op->msg, sizeof(op->msg),
				 "%.32s: %llu ms of device time, past max-op-ms (%llu ms): stopped; "
				 "outputs partly written",
				 op->kernel->name, (unsigned long long)(dev_ns / 1000000),
				 (unsigned long long)(max_ns / 1000000));
			r = 1;
			break;
		}
		uint64_t slice_ns = atomic_load_explicit(&cb->b.slice_ns, memory_order_relaxed);
		uint64_t left = units - done;
		if (bulk) {
			uint64_t w0 = devq_now_ns();
			call->threads = held = cores_take(cb, op, left, held);
			*waited += devq_now_ns() - w0;
		}
		uint64_t each = slice_per_core(slice_ns, done, core_ns, last);
		uint64_t n = each > left / call->threads ? left : each * call->threads;
		/* A slice not known to be short (the first, unmeasured; one of
		 * units so long that each core is expected to take
		 * SHORT_SLICE_NS or more) is, for the watchdog, an op that
		 * cannot be stopped: it may show no progress for max-op-ms. */
		bool long_slice = !done || core_ns / done * each >= SHORT_SLICE_NS;
		if (long_slice)
			atomic_fetch_add(&cb->b.unsliced_running, 1);
		uint64_t t0 = devq_now_ns();
		call->bulk = bulk && go_idle(cb, keep);
		r = devq_hslots_call_units(x, op->kernel->name, op->args, call, done, done + n,
					   op->msg, sizeof(op->msg));
		if (call->bulk)
			come_back(cb, keep);
		uint64_t took = devq_now_ns() - t0;
		if (long_slice)
			atomic_fetch_sub(&cb->b.unsliced_running, 1);
		core_ns += took * call->threads;
		done += n;
		last = each;
		atomic_fetch_add_explicit(&cb->b.slices, 1, memory_order_relaxed);
		if (r < 0)
			break;
	}
	if (held)
		cores_give(cb, held);
	return r;
}

/* A host executable on the worker running the op: its stream's slot
 * (made here by its init the first time: a worker is neither the loop nor
 * a completion thread), then its run: in slices when it has units
 * (run_sliced), else in one call that runs to its end.  Bulk work takes
 * its cores in the fair order and runs at SCHED_IDLE; a short op takes its
 * share at once (is_bulk). */
static int run_host(struct cpu_backend *cb, struct devq_bop *op, const struct devq_host_exe *x)
{
	struct devq_host_call call = { .stream_index = op->stream, .start_ns = op->t_start };
	char why[DEVQ_BOP_MSG] = "";
	int r = devq_hslots_get_sync(cb->hslots, x, op->stream, NULL, &call.slot, why,
				     sizeof(why));
	if (r < 0) {
		snprintf(op->msg, sizeof(op->msg), "%s: init: %.130s", op->kernel->name, why);
		return r;
	}
	bool bulk = is_bulk(cb, op);
	struct sched_keep keep = { 0 };
	uint64_t waited = 0; /* for cores: queued time, not the op's */
	if (bulk) {
		pthread_mutex_lock(&cb->cores_lock);
		cb->host_ops++;
		pthread_mutex_unlock(&cb->cores_lock);
	} else {
		unsigned k = atomic_fetch_add_explicit(&cb->short_ops, 1, memory_order_relaxed) + 1;
		call.threads = cb->ncpu / k ? cb->ncpu / k : 1;
	}
	if (devq_host_sliced(x)) {
		atomic_fetch_add(&cb->b.sliced_running, 1);
		r = run_sliced(cb, op, x, &call, bulk, &keep, &waited);
		atomic_fetch_sub(&cb->b.sliced_running, 1);
	} else {
		atomic_fetch_add(&cb->b.unsliced_running, 1);
		if (bulk) {
			uint64_t w0 = devq_now_ns();
			call.threads = cores_take(cb, op, UINT64_MAX, 0);
			waited = devq_now_ns() - w0;
		}
		call.bulk = bulk && go_idle(cb, &keep);
		r = devq_hslots_call(x, op->kernel->name, op->args, &call, op->msg,
				     sizeof(op->msg));
		if (call.bulk)
			come_back(cb, &keep);
		if (bulk)
			cores_give(cb, call.threads);
		atomic_fetch_sub(&cb->b.unsliced_running, 1);
	}
	if (!bulk) {
		atomic_fetch_sub_explicit(&cb->short_ops, 1, memory_order_relaxed);
		return r;
	}
	pthread_mutex_lock(&cb->cores_lock);
	cb->host_ops--;
	pthread_mutex_unlock(&cb->cores_lock);
	/* Its device time is the time it held cores: the waits for them,
	 * while other tenants' slices ran, are queued time (device start
	 * moves by them), so fairness does not charge one tenant for
	 * another's turn. */
	op->t_start += waited;
	return r;
}

static void run_op(struct cpu_backend *cb, struct devq_bop *op)
{
	switch (op->kind) {
	case DEVQ_BOP_KERNEL: {
		if (op->kernel->cpu_host) {
			int r = run_host(cb, op, op->kernel->cpu_host);
			if (r == -ENOTRECOVERABLE)
				atomic_store(&cb->lost, true);
			else if (r < 0)
				op->code = DEVQ__CODE__DEVICE_ERROR;
			break;
		}
		struct devq_kctx ctx = { .start_ns = op->t_start };
		/* It runs to its end: the watchdog allows it max-op-ms. */
		atomic_fetch_add_explicit(&cb->b.unsliced_running, 1, memory_order_relaxed);
		int r = op->kernel->cpu(op->args, &ctx);
		atomic_fetch_sub_explicit(&cb->b.unsliced_running, 1, memory_order_relaxed);
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


/* Blocks until every op op waits on is done, as a GPU stream blocks on an
 * event.  The lock is taken only when one is not done yet. */
static void wait_deps(struct cpu_backend *cb, struct cpu_stream *st, struct devq_bop *op)
{
	for (unsigned i = 0; i < op->nwaits; i++) {
		struct devq_bop *w = op->waits[i];
		/* A dependency handed to another stream usually ends within
		 * microseconds when ops are small (a chain across streams):
		 * watching it a bounded while costs less than sleeping and
		 * being woken, as an adaptive mutex spins before it sleeps.  A
		 * long op costs the waiter DEP_SPIN_NS of CPU once. */
		uint64_t t0 = 0; /* when the watch began; 0: no watch */
		if (!atomic_load(&w->done) && devq_spin_ok()) {
			/* Yielding after the first microseconds: on a busy
			 * machine the producer may be waiting for this very
			 * CPU, and a pure spin would hold it off for the whole
			 * budget at every link (measured: bench/RESULTS.md,
			 * "Figures from the code's comments"). */
			if (!st->dep_spin_ns)
				st->dep_spin_ns = DEP_SPIN_NS;
			uint64_t now = t0 = devq_now_ns();
			while (!atomic_load(&w->done) && now - t0 < st->dep_spin_ns) {
				if (now - t0 < 2000)
					cpu_relax();
				else
					sched_yield();
				now = devq_now_ns();
			}
		}
		bool missed = false;
		if (!atomic_load(&w->done)) {
			missed = true;
			pthread_mutex_lock(&cb->lock);
			/* Announced before the check: a completer that stores done
			 * after it sees the announcement and broadcasts. */
			atomic_fetch_add(&cb->dep_waiters, 1);
			while (!atomic_load(&w->done))
				pthread_cond_wait(&cb->done, &cb->lock);
			atomic_fetch_sub(&cb->dep_waiters, 1);
			pthread_mutex_unlock(&cb->lock);
		}
		/* What the producer took from the start of the watch to its
		 * end (its t_end, stamped before done was stored), not when
		 * this worker saw it: a sleep's wake-up is not the producer's
		 * time, and counting it would make a producer just under the
		 * budget look like a long one after every missed watch.  A
		 * short producer whose watch missed all the same (its
		 * completion's work before done) doubles the budget. */
		if (t0) {
			uint64_t end = w->t_end;
			st->dep_spin_ns = devq_spin_adapt(st->dep_spin_ns, end > t0 ? end - t0 : 0,
							  missed, DEP_SPIN_MIN_NS, DEP_SPIN_NS);
		}
		if (i < op->nstrict && w->code != DEVQ__CODE__OK && op->code == DEVQ__CODE__OK)
			devq_bop_dependency_failed(op, w, i);
	}
}

static void rq_push(struct cpu_backend *cb, struct cpu_stream *st)
{
	unsigned c = st->high;
	st->rnext = NULL;
	st->in_runq = true;
	if (cb->rq_tail[c])
		cb->rq_tail[c]->rnext = st;
	else
		cb->rq_head[c] = st;
	cb->rq_tail[c] = st;
}

static bool rq_empty(const struct cpu_backend *cb)
{
	return !cb->rq_head[0] && !cb->rq_head[1];
}

static struct cpu_stream *rq_pop(struct cpu_backend *cb)
{
	unsigned c = cb->rq_head[1] ? 1 : 0;
	struct cpu_stream *st = cb->rq_head[c];
	if (st) {
		cb->rq_head[c] = st->rnext;
		if (!cb->rq_head[c])
			cb->rq_tail[c] = NULL;
		st->in_runq = false;
	}
	return st;
}

/* Called with the lock held: takes a sleeper off the list and counts it
 * free and awake; the caller wakes it with futex_wake after unlocking.
 * NULL when every worker is awake. */
static struct cpu_worker *pick_sleeper(struct cpu_backend *cb)
{
	struct cpu_worker *w = cb->sleepers;
	if (w) {
		cb->sleepers = w->snext;
		w->sleeping = false;
		atomic_fetch_add_explicit(&w->wake, 1, memory_order_relaxed);
		cb->free_awake++;
	}
	return w;
}

static void futex_wake(struct cpu_worker *w)
{
	syscall(SYS_futex, &w->wake, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Called with the lock held: a stream waits in a run queue and no free
 * worker is awake to take it. */
static struct cpu_worker *need_worker(struct cpu_backend *cb)
{
	return !rq_empty(cb) && cb->free_awake == 0 ? pick_sleeper(cb) : NULL;
}

/* Runs list, the ops taken from one stream, in order.  The worker holds no
 * lock while it runs and reports ops, and the daemon's on_complete marks
 * the op done (the last thing it does with it), so an op's completion
 * always reaches the daemon before that of any op that waited on it, and
 * on_complete may hand the session's next ops to any stream
 * (enqueue_any_thread). */
static void run_list(struct cpu_backend *cb, struct cpu_stream *st, struct devq_bop *op)
{
	while (op) {
		struct devq_bop *next = op->next;
		if (op->kind != DEVQ_BOP_FAIL)
			wait_deps(cb, st, op);
		/* Cancellation wins over a failed dependency: the op was not
		 * wanted any more, whatever happened before it. */
		if (op->kind != DEVQ_BOP_FAIL && op->cancel &&
		    atomic_load_explicit(op->cancel, memory_order_relaxed)) {
			op->code = DEVQ__CODE__CANCELLED;
			snprintf(op->msg, sizeof(op->msg), "cancelled before it started");
		}
		op->t_start = devq_now_ns();
		devq_bop_deadline_passed(op, op->t_start); /* then it does not run */
		if (op->code == DEVQ__CODE__OK && !atomic_load(&cb->lost))
			run_op(cb, op);
		op->t_end = devq_now_ns();
		/* As on a GPU: once the context is lost, every op that had not
		 * completed reports it, whatever it was doing. */
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

static void *worker(void *arg)
{
	struct cpu_worker *me = arg;
	struct cpu_backend *cb = me->cb;
	/* Named for top -H and /proc/PID/task/ (at most 15 characters); the
	 * main thread alone stays "devqd", which scripts look for. */
	char name[16];
	snprintf(name, sizeof(name), "devqd-cpu/%u", (unsigned)(me - cb->w) % 10000u);
	pthread_setname_np(pthread_self(), name);
	pthread_mutex_lock(&cb->lock);
	for (;;) {
		struct cpu_stream *st = rq_pop(cb);
		if (!st) {
			if (cb->stop)
				break;
			unsigned v = atomic_load_explicit(&me->wake, memory_order_relaxed);
			me->sleeping = true;
			me->snext = cb->sleepers;
			cb->sleepers = me;
			cb->free_awake--;
			pthread_mutex_unlock(&cb->lock);
			/* A wake between the unlock and the wait changed the word:
			 * the wait returns at once (EAGAIN). */
			syscall(SYS_futex, &me->wake, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
			pthread_mutex_lock(&cb->lock);
			if (me->sleeping) { /* not picked: a spurious return */
				struct cpu_worker **pp = &cb->sleepers;
				while (*pp != me)
					pp = &(*pp)->snext;
				*pp = me->snext;
				me->sleeping = false;
				cb->free_awake++;
			}
			continue;
		}
		st->owned = true;
		cb->free_awake--;
		struct devq_bop *list = st->head;
		st->head = st->tail = NULL;
		/* More streams wait: the next worker is woken from here, not
		 * by the loop. */
		struct cpu_worker *next = need_worker(cb);
		pthread_mutex_unlock(&cb->lock);
		if (next)
			futex_wake(next);
		run_list(cb, st, list);
		pthread_mutex_lock(&cb->lock);
		st->owned = false;
		cb->free_awake++;
		/* Ops queued meanwhile: behind the streams already waiting. */
		if (st->head)
			rq_push(cb, st);
	}
	pthread_mutex_unlock(&cb->lock);
	return NULL;
}

static void cpu_destroy(struct devq_backend *b)
{
	struct cpu_backend *cb = (struct cpu_backend *)b;
	if (!cb)
		return;
	pthread_mutex_lock(&cb->lock);
	cb->stop = true;
	struct cpu_worker *w;
	while ((w = pick_sleeper(cb)))
		futex_wake(w);
	pthread_mutex_unlock(&cb->lock);
	for (unsigned i = 0; i < cb->nworkers; i++)
		if (cb->w[i].started)
			pthread_join(cb->w[i].thread, NULL);
	/* After the workers: no op runs, every slot can go. */
	devq_hslots_close(cb->hslots);
	free(cb->waitv);
	free(cb->waitops);
	pthread_cond_destroy(&cb->cores_back);
	pthread_mutex_destroy(&cb->cores_lock);
	pthread_cond_destroy(&cb->done);
	pthread_mutex_destroy(&cb->lock);
	free(cb->s);
	free(cb->w);
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
	return k->cpu != NULL || k->cpu_host != NULL;
}

static void cpu_host_release(struct devq_backend *b, const struct devq_host_exe *x,
			     void (*done)(void *ud), void *ud)
{
	devq_hslots_release(((struct cpu_backend *)b)->hslots, x, done, ud);
}

/* One lock for a burst.  enqueue_ns is stamped under the lock, before the
 * op is linked where a worker can see it: the time from the hand-over
 * until the backend took the op (what enqueue's cost is, the lock being
 * all of it that can wait). */
static int cpu_enqueue_chain(struct devq_backend *b, struct devq_bop *first)
{
	struct cpu_backend *cb = (struct cpu_backend *)b;
	for (struct devq_bop *op = first; op; op = op->next)
		if (op->stream >= b->streams)
			return -EINVAL;
	bool queued = false;
	pthread_mutex_lock(&cb->lock);
	uint64_t now = devq_now_ns();
	for (struct devq_bop *op = first, *next; op; op = next) {
		next = op->next;
		atomic_store_explicit(&op->enqueue_ns, now - op->t_handoff, memory_order_relaxed);
		struct cpu_stream *st = &cb->s[op->stream];
		op->next = NULL;
		if (st->tail)
			st->tail->next = op;
		else
			st->head = op;
		st->tail = op;
		/* A stream a worker runs now (the completion handing its
		 * session's next op to its own stream: the common refill)
		 * needs no wake-up: that worker looks at its FIFO again when
		 * its list is done. */
		if (!st->owned && !st->in_runq) {
			rq_push(cb, st);
			queued = true;
		}
	}
	pthread_mutex_unlock(&cb->lock);
	if (queued)
		atomic_store(&cb->queued, true);
	return 0;
}

static int cpu_enqueue(struct devq_backend *b, struct devq_bop *op)
{
	op->next = NULL;
	return cpu_enqueue_chain(b, op);
}

/* Wakes a worker if streams wait for one and none is awake and free.  The
 * daemon flushes once it has handed over all it has for now, with its own
 * locks released: a worker woken inside them would preempt the caller on
 * its CPU, run the op and block on the caller's lock at its completion.
 * It also makes a batch cost one wake-up at most.  The word moves under
 * the lock, the wake-up happens after it, so the woken worker does not
 * block on this lock either. */
static void cpu_flush(struct devq_backend *b)
{
	struct cpu_backend *cb = (struct cpu_backend *)b;
	if (!atomic_exchange(&cb->queued, false))
		return;
	pthread_mutex_lock(&cb->lock);
	struct cpu_worker *w = need_worker(cb);
	pthread_mutex_unlock(&cb->lock);
	if (w)
		futex_wake(w);
}

/* Whether op can run on the loop thread now without blocking it: every op
 * it waits on is done. */
static bool deps_done(const struct devq_bop *op)
{
	for (unsigned i = 0; i < op->nwaits; i++)
		if (!atomic_load(&op->waits[i]->done))
			return false;
	return true;
}

/* See backend.h.  A lone short op on an idle stream, with every worker
 * asleep, runs here: waking a sleeping worker costs the op a futex wake,
 * a context switch into the worker (on an idle vCPU, tens of
 * microseconds), and the worker's own sleep after it, more than a short
 * op takes; the loop thread was awake anyway.  Only one op, and only a
 * stream alone in the run queue: a batch goes to a worker, so the loop
 * reads the next frames while it runs (pipelining), and other streams'
 * workers are not held back.  The loop is blocked while the op runs: the
 * caller bounds that by max_ns of expected time and charges what it took
 * to a tenant's loop share (devq_fair_flush_loop). */
/* A host executable's op never runs on the loop: its stream's slot may
 * need its init (a BLAS handle: far longer than the op), and it may wait
 * for cores other host ops hold (run_host). */
static bool is_host(const struct devq_bop *op)
{
	return op->kind == DEVQ_BOP_KERNEL && op->kernel->cpu_host;
}

static uint64_t cpu_run_here(struct devq_backend *b, uint64_t max_ns)
{
	struct cpu_backend *cb = (struct cpu_backend *)b;
	/* cpu_flush's work and the check for a lone short op under one
	 * acquisition of the lock the workers take too. */
	if (!atomic_exchange(&cb->queued, false))
		return 0;
	struct cpu_stream *st = NULL;
	struct devq_bop *op = NULL;
	struct cpu_worker *w = NULL;
	pthread_mutex_lock(&cb->lock);
	unsigned c = cb->rq_head[1] ? 1 : 0;
	struct cpu_stream *h = cb->rq_head[c];
	if (h && !h->rnext && !cb->rq_head[c ^ 1] && cb->free_awake == 0 && h->head &&
	    h->head == h->tail && h->head->expect_ns <= max_ns && !is_host(h->head) &&
	    deps_done(h->head)) {
		st = rq_pop(cb);
		st->owned = true;
		op = st->head;
		st->head = st->tail = NULL;
	} else {
		w = need_worker(cb);
	}
	pthread_mutex_unlock(&cb->lock);
	if (!op) {
		if (w)
			futex_wake(w);
		return 0;
	}
	uint64_t t0 = devq_now_ns();
	op->ran_here = true;
	run_list(cb, st, op);
	uint64_t spent = devq_now_ns() - t0;
	pthread_mutex_lock(&cb->lock);
	st->owned = false;
	/* Its completion handed the session's next ops to this stream. */
	if (st->head) {
		rq_push(cb, st);
		atomic_store(&cb->queued, true);
	}
	pthread_mutex_unlock(&cb->lock);
	cpu_flush(b);
	return spent ? spent : 1;
}

static const struct devq_backend_ops cpu_ops = {
	.destroy = cpu_destroy,
	.map_host = cpu_map_host,
	.unmap_host = cpu_unmap_host,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.has_kernel = cpu_has_kernel,
	.enqueue = cpu_enqueue,
	.enqueue_chain = cpu_enqueue_chain,
	.flush = cpu_flush,
	.host_release = cpu_host_release,
	.run_here = cpu_run_here,
	.cpu_starved = cpu_starved,
};

int devq_backend_cpu_open(const struct devq_backend_config *cfg, struct devq_backend **out)
{
	/* High-priority streams are FIFOs of their own, taken from the run
	 * queue before normal ones: their queues never wait behind normal
	 * queues' ops.  Threads are not reniced. */
	unsigned n = (cfg->streams ? cfg->streams : 4) + cfg->high_streams;
	struct cpu_backend *cb = calloc(1, sizeof(*cb));
	if (!cb)
		return -ENOMEM;
	cb->b.ops = &cpu_ops;
	cb->b.enqueue_any_thread = true;
	cb->b.always_timed = true; /* the worker stamps every op (worker()) */
	cb->b.name = "cpu";
	cb->b.on_complete = cfg->on_complete;
	cb->b.core_pick = cfg->core_pick;
	cb->b.ud = cfg->ud;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	/* The cores this process may run on (a unit's CPUAffinity), which
	 * host ops share. */
	cpu_set_t set;
	int allowed = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : (int)ncpu;
	cb->ncpu = allowed > 0 ? (unsigned)allowed : 1;
	cb->cores_free = cb->ncpu;
	pthread_mutex_init(&cb->cores_lock, NULL);
	pthread_cond_init(&cb->cores_back, NULL);
	snprintf(cb->b.device, sizeof(cb->b.device),
		 "host CPU (%ld cores), %u worker streams + %u high-priority, %s kernels", ncpu,
		 n - cfg->high_streams, cfg->high_streams, devq_cpu_isa_name(devq_cpu_isa()));
	devq_mutex_init_hot(&cb->lock);
	pthread_cond_init(&cb->done, NULL);
	cb->s = calloc(n, sizeof(*cb->s));
	cb->w = calloc(n, sizeof(*cb->w));
	cb->waitv = calloc(n, sizeof(*cb->waitv));
	cb->waitops = calloc(n, sizeof(*cb->waitops));
	if (!cb->s || !cb->w || !cb->waitv || !cb->waitops) {
		cpu_destroy(&cb->b);
		return -ENOMEM;
	}
	cb->b.streams = n;
	cb->b.high_streams = cfg->high_streams;
	bulk_probe(cb);
	if (!atomic_load(&cb->demote))
		log_warn("cpu backend: bulk host ops run at normal priority, beside short ops: "
			 "this process may not return a thread from SCHED_IDLE (it needs "
			 "CAP_SYS_NICE or RLIMIT_NICE 20: LimitNICE=+0 in devqd.service)");
	int hr = devq_hslots_open(n, NULL, NULL, &cb->hslots);
	if (hr < 0) {
		cpu_destroy(&cb->b);
		return hr;
	}
	for (unsigned i = 0; i < n; i++)
		cb->s[i].high = i >= n - cfg->high_streams;
	/* Every worker starts awake and free; it goes to sleep on its own. */
	pthread_mutex_lock(&cb->lock);
	for (unsigned i = 0; i < n; i++) {
		cb->w[i].cb = cb;
		int r = pthread_create(&cb->w[i].thread, NULL, worker, &cb->w[i]);
		if (r) {
			pthread_mutex_unlock(&cb->lock);
			cpu_destroy(&cb->b);
			return -r;
		}
		cb->w[i].started = true;
		cb->nworkers++;
		cb->free_awake++;
	}
	pthread_mutex_unlock(&cb->lock);
	*out = &cb->b;
	return 0;
}
