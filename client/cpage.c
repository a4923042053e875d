/* SPDX-License-Identifier: Apache-2.0 */
/* See cpage_client.h.  The waiting protocol pairs with devq_cpage_publish()
 * in the daemon: announce the sleep in the hint page, re-check, then sleep
 * on the published sequence word, so a publication between the check and
 * the sleep is never missed. */
#include "cpage_client.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void devq_cpc_free(struct devq_cpc *c)
{
	if (!c)
		return;
	if (c->pub)
		munmap((void *)c->pub, c->pub_len);
	if (c->hint)
		munmap(c->hint, c->hint_len);
	if (c->efd >= 0)
		close(c->efd);
	if (c->bell >= 0)
		close(c->bell);
	free(c);
}

int devq_cpc_open(uint32_t layout, uint32_t size, uint32_t slots, uint32_t hint_size,
		  uint32_t sq_entries, const int *fds, unsigned nfds, struct devq_cpc **out)
{
	int r = 0;
	struct devq_cpc *c = calloc(1, sizeof(*c));
	int bell = nfds > 3 ? fds[3] : -1;
	if (!c) {
		r = -ENOMEM;
		goto out;
	}
	c->efd = c->bell = -1;
	c->daemon_cpu = -1;
	if (layout != DEVQ_CPAGE_LAYOUT ||
	    size < sizeof(struct devq_cpage_hdr) + (uint64_t)slots * sizeof(struct devq_cpage_slot) ||
	    hint_size < sizeof(struct devq_cpage_hints)) {
		r = -EPROTO;
		goto out;
	}
	void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fds[0], 0);
	if (p == MAP_FAILED) {
		r = -errno;
		goto out;
	}
	c->pub = p;
	c->pub_len = size;
	p = mmap(NULL, hint_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	if (p == MAP_FAILED) {
		r = -errno;
		goto out;
	}
	c->hint = p;
	c->hint_len = hint_size;
	if (c->pub->magic != DEVQ_CPAGE_MAGIC || c->pub->nslots != slots) {
		r = -EPROTO;
		goto out;
	}
	/* A ring that does not fit the page (or is no power of two) is not
	 * used: records then come on the socket, as from an older daemon. */
	uint32_t off = c->pub->ring_off, n = c->pub->ring_size;
	if (off && n && !(n & (n - 1)) && off % 64 == 0 &&
	    hint_size >= sizeof(struct devq_cpage_hints) &&
	    (uint64_t)off + (uint64_t)n * sizeof(struct devq_crec) <= size) {
		c->ring = (const struct devq_crec *)((const char *)c->pub + off);
		c->ring_n = n;
	}
	c->efd = fds[2];
	/* Likewise a submit ring that does not fit the hint page: submits
	 * then go on the socket. */
	if (bell >= 0 && sq_entries && sq_entries <= DEVQ_SQ_MAX && !(sq_entries & (sq_entries - 1)) &&
	    (uint64_t)DEVQ_SQ_OFF + (uint64_t)sq_entries * sizeof(struct devq_sqe) <= hint_size) {
		c->sq = devq_sq_hdr(c->hint);
		c->sqe = devq_sq_entries(c->hint);
		c->sq_n = sq_entries;
		c->bell = bell;
		bell = -1;
	}
out:
	close(fds[0]);
	close(fds[1]);
	if (bell >= 0)
		close(bell);
	if (r < 0) {
		close(fds[2]);
		devq_cpc_free(c);
		return r;
	}
	*out = c;
	return 0;
}

/* One byte to the doorbell pipe.  A full pipe (EAGAIN) holds bytes the
 * daemon has not read: it will look anyway.  A pipe whose read end is
 * closed (devqd exited, or freed a session it closed) would raise
 * SIGPIPE, which kills a program that did not ask for it: the signal is
 * blocked in this thread around the write and, when the write raised it,
 * taken back unless it was blocked (and so maybe pending) before.  The
 * socket has MSG_NOSIGNAL for this; a pipe has nothing like it. */
static int ring_bell(int fd)
{
	sigset_t pipe_set, old;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	char one = 1;
	int r = write(fd, &one, 1) < 0 && errno != EAGAIN ? -errno : 0;
	if (r == -EPIPE && !sigismember(&old, SIGPIPE)) {
		const struct timespec now = { 0, 0 };
		while (sigtimedwait(&pipe_set, NULL, &now) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

uint8_t *devq_cpc_sq_reserve(struct devq_cpc *c, size_t len)
{
	if (!c->sq || len > DEVQ_SQE_FRAME)
		return NULL;
	uint32_t head = atomic_load_explicit(&c->pub->sq_head, memory_order_acquire);
	if ((uint32_t)c->sq_tail - head >= c->sq_n)
		return NULL; /* full: the daemon has not taken the oldest yet */
	return c->sqe[c->sq_tail & (c->sq_n - 1)].frame;
}

int devq_cpc_sq_commit(struct devq_cpc *c, uint32_t len, uint64_t off)
{
	struct devq_sqe *e = &c->sqe[c->sq_tail & (c->sq_n - 1)];
	e->len = len;
	e->off = off;
	/* seq_cst, with the exchange below and the daemon's store of rung
	 * and load of tail: either the daemon's look after it cleared rung
	 * sees this entry, or the exchange sees rung 0 and rings. */
	atomic_store_explicit(&c->sq->tail, ++c->sq_tail, memory_order_seq_cst);
	if (atomic_exchange_explicit(&c->sq->rung, 1, memory_order_seq_cst) == 0)
		return ring_bell(c->bell);
	return 0;
}

const struct devq_cpage_slot *devq_cpc_slot(const struct devq_cpc *c, uint32_t queue)
{
	uint32_t used = __atomic_load_n(&c->pub->used, __ATOMIC_ACQUIRE);
	if (used > c->pub->nslots)
		used = c->pub->nslots;
	const struct devq_cpage_slot *s = devq_cpage_slots((struct devq_cpage_hdr *)c->pub);
	for (uint32_t i = 0; i < used; i++)
		if (atomic_load_explicit(&s[i].open, memory_order_acquire) &&
		    atomic_load_explicit(&s[i].queue, memory_order_relaxed) == queue)
			return &s[i];
	return NULL;
}

/* The spin rule, libdevq's side (devqd's is in daemon/base/lock.h).  A
 * wait polls the page before it sleeps: $DEVQ_SPIN_US, default 50 us (0:
 * sleep at once).  A short op completes sooner than a sleeping thread
 * wakes (a wake-up of an idle CPU costs more than a null op's round trip:
 * measured, bench/RESULTS.md, "Run 7"); a wait on a long op pays at most
 * this much CPU before sleeping.
 *
 * Adapted per connection (struct devq_cpc): waits for a queue's next
 * point that found it not yet complete keep an average of how long they
 * took (wait_avg_ns, over about the last 8); waits for points further on
 * (a client that pipelines) neither teach nor use it, and never yield.
 * While that average is below SPIN_ADAPT_MAX
 * times $DEVQ_SPIN_US (400 us at the default), a wait polls for up to 1.5
 * times it: a sporadic op after an idle gap takes longer than 50 us
 * (both the daemon's CPU and this one wake from idle), and a sleep that
 * starts just before its completion adds a whole wake-up of this thread
 * to it.  Past $DEVQ_SPIN_US without a completion each poll yields the
 * CPU first, so the longer budget never holds off a daemon thread waiting
 * for this CPU.
 * Waits that take longer (long ops) keep the plain budget.
 *
 * No poll at all while this thread runs on the one CPU a confined daemon
 * has (devq_cpc_peer): the daemon cannot run meanwhile.
 *
 * Nor, in a wait for a queue's next point, while threads other than this
 * one are runnable on every CPU (per connection: devq_cpc's cpus_busy,
 * from /proc/loadavg at most every CPUS_LOOK_NS): the daemon's threads
 * then wait for a CPU too, and a thread that polls spends its place in
 * the scheduler's order, so it waits the longer once it sleeps (measured
 * under bench/loopfair, another user's busy processes on every CPU:
 * bench/RESULTS.md, "Trace replies off the loop"). */
#define SPIN_US_DEFAULT 50
#define SPIN_ADAPT_MAX 8
#define CPUS_LOOK_NS 10000000ull
/* Progress extends the spin to at most this many times $DEVQ_SPIN_US
 * (2 ms at the default): past that a sleep and a wake-up cost < 2 %. */
#define SPIN_PROGRESS_MAX 40

void devq_cpc_peer(struct devq_cpc *c, int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	cpu_set_t set;
	c->daemon_cpu = -1;
	/* pid 0: the daemon is in another pid namespace; nothing known. */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0 || cr.pid <= 0 ||
	    sched_getaffinity(cr.pid, sizeof(set), &set) < 0 || CPU_COUNT(&set) != 1)
		return;
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &set))
			c->daemon_cpu = i;
}

/* Whether polling can help: the daemon may run while this thread polls. */
static bool spin_useful(const struct devq_cpc *c)
{
	return c->daemon_cpu < 0 || sched_getcpu() != c->daemon_cpu;
}

/* Whether threads other than this one are runnable on every CPU now:
 * /proc/loadavg's fourth field counts the runnable ones (this one
 * included), against cpus, the CPUs online.  Unknown: false. */
static bool cpus_taken(long cpus)
{
	int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	char buf[128];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	double l1, l5, l15;
	unsigned running, total;
	if (sscanf(buf, "%lf %lf %lf %u/%u", &l1, &l5, &l15, &running, &total) != 5)
		return false;
	return cpus > 0 && running > (unsigned long)cpus;
}

/* Looked at no more than every CPUS_LOOK_NS per connection: an open and a
 * read, a few microseconds, not paid by every wait. */
static bool cpus_busy(struct devq_cpc *c, uint64_t now)
{
	if (now - c->cpus_looked_ns >= CPUS_LOOK_NS) {
		/* The CPUs online once per connection: sysconf reads a file
		 * under /sys for them each time. */
		if (!c->cpus)
			c->cpus = sysconf(_SC_NPROCESSORS_ONLN);
		c->cpus_looked_ns = now;
		c->cpus_busy = cpus_taken(c->cpus);
	}
	return c->cpus_busy;
}

static uint64_t spin_ns(void)
{
	/* Read once per process; threads that race to read it first store the
	 * same value, so relaxed atomics suffice. */
	static _Atomic int64_t v = -1;
	int64_t ns = atomic_load_explicit(&v, memory_order_relaxed);
	if (ns < 0) {
		const char *e = getenv("DEVQ_SPIN_US");
		unsigned long us = e && *e ? strtoul(e, NULL, 10) : SPIN_US_DEFAULT;
		ns = (int64_t)(us > 100000 ? 100000 : us) * 1000;
		atomic_store_explicit(&v, ns, memory_order_relaxed);
	}
	return (uint64_t)ns;
}

/* A wait that found its point not complete took ns: the average the spin
 * budget adapts to. */
static void note_wait(struct devq_cpc *c, uint64_t ns)
{
	c->wait_avg_ns = c->wait_avg_ns ? (7 * c->wait_avg_ns + ns) / 8 : ns;
}

int devq_cpc_wait(struct devq_cpc *c, const struct devq_cpage_slot *s, uint64_t point,
		  uint64_t deadline)
{
	_Atomic uint32_t *seq = (_Atomic uint32_t *)&c->pub->seq;
	/* A short spin first: on a VM, waking a thread whose vCPU went idle
	 * costs tens of microseconds, more than a null op's whole path.  The
	 * spin goes on while the queue keeps completing (each step restarts
	 * it), up to SPIN_PROGRESS_MAX spins in all: a wait for a point a
	 * few hundred small ops away is then not paid with a sleep and a
	 * wake-up, while a wait on a long op sleeps after one spin. */
	uint64_t now = mono_ns(), t0 = now, base = spin_ns(), spin = base;
	uint64_t first = devq_cpc_completed(s);
	if (first >= point) {
		c->hits++;
		return 0;
	}
	/* A wait for the queue's next point (a sporadic op, a round trip)
	 * adapts; a wait for a point further on (a pipelining client) keeps
	 * the plain budget and teaches nothing. */
	bool next = point == first + 1;
	if (next && c->wait_avg_ns && c->wait_avg_ns < SPIN_ADAPT_MAX * base &&
	    c->wait_avg_ns + c->wait_avg_ns / 2 > base)
		spin = c->wait_avg_ns + c->wait_avg_ns / 2;
	if (!spin_useful(c) || (next && cpus_busy(c, now)))
		spin = base = 0;
	uint64_t spin_until = now + spin, seen = devq_cpc_completed(s), moved = t0;
	while (now < spin_until && now < deadline) {
		uint64_t done = devq_cpc_completed(s);
		if (done >= point) {
			c->hits++; /* found without a syscall */
			if (next)
				note_wait(c, mono_ns() - t0);
			return 0;
		}
		/* Records pile up while the queue completes: the caller takes
		 * them before the ring fills and the daemon turns to the socket. */
		if (c->ring_armed && devq_cpc_ring_ready(c) >= c->ring_n / 2)
			return -EAGAIN;
		/* No sched_yield() while the queue completes, nor within the
		 * first $DEVQ_SPIN_US: yielding there slows pipelined clients
		 * and does not help a slow round trip (measured:
		 * bench/RESULTS.md, "Run 10").  Past that, in a wait for the
		 * next point with nothing completing, every poll yields: the
		 * daemon's thread may be waiting for this very CPU, and a poll
		 * of hundreds of microseconds would hold it off, and the
		 * round trips after it (measured: bench/RESULTS.md, "Figures
		 * from the code's comments"). */
		now = mono_ns();
		if (next && now - moved >= base)
			sched_yield();
		if (done != seen) {
			seen = done;
			moved = now;
			if (now + base <= t0 + SPIN_PROGRESS_MAX * base && now + base > spin_until)
				spin_until = now + base;
		}
	}
	for (;;) {
		if (devq_cpc_completed(s) >= point) {
			if (next)
				note_wait(c, mono_ns() - t0);
			return 0;
		}
		if (c->ring_armed && devq_cpc_ring_ready(c) >= c->ring_n / 2)
			return -EAGAIN;
		atomic_store_explicit(&c->hint->wait_slot,
				      (uint32_t)(s - devq_cpage_slots((struct devq_cpage_hdr *)c->pub)) + 1,
				      memory_order_relaxed);
		atomic_store_explicit(&c->hint->wait_point, point, memory_order_relaxed);
		uint32_t v = atomic_load_explicit(seq, memory_order_seq_cst);
		atomic_fetch_add_explicit(&c->hint->waiters, 1, memory_order_seq_cst);
		if (atomic_load_explicit(&s->completed, memory_order_seq_cst) >= point) {
			atomic_fetch_sub_explicit(&c->hint->waiters, 1, memory_order_relaxed);
			if (next)
				note_wait(c, mono_ns() - t0);
			return 0;
		}
		/* The daemon wakes a sleeper whose ring is half full (seq_cst
		 * here against its tail store and seq increment). */
		if (c->ring_armed && devq_cpc_ring_ready(c) >= c->ring_n / 2) {
			atomic_fetch_sub_explicit(&c->hint->waiters, 1, memory_order_relaxed);
			return -EAGAIN;
		}
		struct timespec ts, *tsp = NULL;
		if (deadline != UINT64_MAX) {
			uint64_t now = mono_ns();
			if (now >= deadline) {
				atomic_fetch_sub_explicit(&c->hint->waiters, 1, memory_order_relaxed);
				return -ETIMEDOUT;
			}
			ts.tv_sec = (time_t)((deadline - now) / 1000000000u);
			ts.tv_nsec = (long)((deadline - now) % 1000000000u);
			tsp = &ts;
		}
		/* Shared futex: the daemon maps the same page elsewhere.  EAGAIN
		 * (seq moved), EINTR and timeouts all lead back to the check. */
		c->futex_waits++;
		syscall(SYS_futex, seq, FUTEX_WAIT, v, tsp, NULL, 0);
		atomic_fetch_sub_explicit(&c->hint->waiters, 1, memory_order_relaxed);
	}
}

bool devq_cpc_ring_arm(struct devq_cpc *c)
{
	if (!c->ring)
		return false;
	c->ring_head = atomic_load_explicit(&c->pub->ring_tail, memory_order_acquire);
	atomic_store_explicit(&c->hint->ring_head, c->ring_head, memory_order_relaxed);
	atomic_store_explicit(&c->hint->sock_seen, 0, memory_order_relaxed);
	atomic_store_explicit(&c->hint->ring_armed, 1, memory_order_seq_cst);
	c->ring_on = c->ring_armed = true;
	return true;
}

void devq_cpc_ring_disarm(struct devq_cpc *c)
{
	if (!c->ring_armed)
		return;
	atomic_store_explicit(&c->hint->ring_armed, 0, memory_order_seq_cst);
	c->ring_armed = false;
}

int devq_cpc_wait_any(struct devq_cpc *c, uint32_t seen, uint64_t deadline)
{
	_Atomic uint32_t *seq = (_Atomic uint32_t *)&c->pub->seq;
	uint64_t now = mono_ns(), spin_until = now + (spin_useful(c) ? spin_ns() : 0);
	while (now < spin_until && now < deadline) {
		if (atomic_load_explicit(seq, memory_order_acquire) != seen) {
			c->hits++;
			return 0;
		}
		now = mono_ns();
	}
	/* wait_slot 0: woken by any publication. */
	atomic_store_explicit(&c->hint->wait_slot, 0, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->hint->waiters, 1, memory_order_seq_cst);
	int r = 0;
	if (atomic_load_explicit(seq, memory_order_seq_cst) == seen) {
		struct timespec ts, *tsp = NULL;
		now = mono_ns();
		if (deadline != UINT64_MAX) {
			if (now >= deadline) {
				r = -ETIMEDOUT;
				goto out;
			}
			ts.tv_sec = (time_t)((deadline - now) / 1000000000u);
			ts.tv_nsec = (long)((deadline - now) % 1000000000u);
			tsp = &ts;
		}
		c->futex_waits++;
		syscall(SYS_futex, seq, FUTEX_WAIT, seen, tsp, NULL, 0);
		if (atomic_load_explicit(seq, memory_order_acquire) == seen && mono_ns() >= deadline)
			r = -ETIMEDOUT;
	}
out:
	atomic_fetch_sub_explicit(&c->hint->waiters, 1, memory_order_relaxed);
	return r;
}
