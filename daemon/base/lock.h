/* SPDX-License-Identifier: Apache-2.0 */
/* Locks of the op path (backend FIFOs, fair slots, the completion list):
 * each is held for a few hundred instructions by the loop and by every
 * completer at up to millions of ops per second.  Both kinds below spin
 * briefly before they sleep (glibc's adaptive mutex: at most 100 spins,
 * adapted per mutex; devq_lock: see lock.c), so a contended acquisition
 * usually costs no FUTEX_WAIT/FUTEX_WAKE pair: on a launch-bound workload
 * those futex calls, not the sections, are what contention costs
 * (measured: bench/RESULTS.md, "Run 10").  The CPU backend's FIFO lock
 * stays a mutex (its workers wait on a condition variable with it); the
 * fair slots and the completion list use struct devq_lock (measured:
 * bench/RESULTS.md, "Run 16"). */
#ifndef DEVQ_LOCK_H
#define DEVQ_LOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

static inline void devq_mutex_init_hot(pthread_mutex_t *m)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
	pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
}

/* A lock for the shortest critical sections of the op path (the completion
 * list: a completer holds it to publish one op and link it), where a
 * pthread mutex's lock and unlock cost about as much as the section itself
 * (measured: bench/RESULTS.md, "Figures from the code's comments").
 * Uncontended: one compare-and-swap to take, one exchange to give.
 * Contended: a short spin, then a futex wait (Drepper, "Futexes Are
 * Tricky", mutex 2).  Built on C11 atomics with acquire and release,
 * so race checkers see its ordering.  Not recursive; no condition
 * variables (use a pthread mutex there). */
struct devq_lock {
	atomic_uint v; /* 0 free, 1 held, 2 held and someone may sleep on it */
	/* Adaptive spin: about how many spins a contended take needed lately
	 * (lock.c); per lock, updated racily (a lost update only delays it). */
	atomic_uint spins;
};

#define DEVQ_LOCK_INIT { 0, 0 }

/* The one rule for spinning in devqd (this lock, the CPU workers' wait on
 * a dependency; libdevq's wait keeps the same rule on its side): a spin
 * waits for another thread to finish something, so it is worth its CPU
 * only while that thread can run at the same time.  False when this
 * process may run on one CPU only (sched_getaffinity: taskset, a cpuset,
 * CPUAffinity=), read again at most once a second since it can change
 * while devqd runs: every waiter then sleeps at once (or yields), so it
 * never holds the one CPU the thread it waits for needs.  Called on
 * contended paths only. */
bool devq_spin_ok(void);

/* The next watch budget of a waiter that watches for up to budget ns
 * before it sleeps, after a producer that ended waited_ns after the watch
 * began (its own end, not when the waiter saw it: a sleeper's wake-up is
 * not the producer's time), and whose watch missed it (missed: the waiter
 * slept).  One that ended within max_ns keeps the budget, or raises it to
 * twice that time, so that the next watch catches one like it, and
 * doubles it at least when the watch missed anyway (what the producer's
 * completion took after its end, before the waiter could see it, was more
 * than the budget); one of max_ns or more (a long producer: watching it
 * only costs CPU) halves it; always within [min_ns, max_ns].  A short one
 * never lowers it: the budget only caps watches of long producers, and a
 * short one ends the watch by itself.  Why short waits must not lower it:
 * on a chain of small ops across two streams a budget that follows the
 * caught waits falls to min_ns, a watch that short misses any producer
 * that was preempted, and every miss then costs a sleep and a wake-up per
 * link (measured: bench/RESULTS.md, "The dependent chain across two
 * streams"). */
static inline uint64_t devq_spin_adapt(uint64_t budget, uint64_t waited_ns, bool missed,
				       uint64_t min_ns, uint64_t max_ns)
{
	uint64_t b = waited_ns >= max_ns     ? budget / 2
		     : 2 * waited_ns > budget ? 2 * waited_ns
					      : budget;
	if (missed && waited_ns < max_ns && b < 2 * budget)
		b = 2 * budget;
	return b < min_ns ? min_ns : b > max_ns ? max_ns : b;
}

void devq_lock_wait(struct devq_lock *l);
void devq_lock_wake(struct devq_lock *l);

static inline void devq_lock_take(struct devq_lock *l)
{
	unsigned c = 0;
	if (!atomic_compare_exchange_strong_explicit(&l->v, &c, 1, memory_order_acquire,
						     memory_order_relaxed))
		devq_lock_wait(l);
}

static inline void devq_lock_give(struct devq_lock *l)
{
	if (atomic_exchange_explicit(&l->v, 0, memory_order_release) == 2)
		devq_lock_wake(l);
}

#endif
