/* SPDX-License-Identifier: Apache-2.0 */
/* The contended paths of struct devq_lock, and the spinning rule; see
 * lock.h. */
#include "base/lock.h"

#include <linux/futex.h>
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The spin budget of a contended take: at most this many spins (a pause
 * each, ~1-4 us in all), because the holder's section is a few hundred
 * instructions at most, shorter than a futex round trip.  Adapted per
 * lock as glibc's adaptive mutex does: a take spins up to twice what
 * takes spun lately, plus a few, and what it spun (all of it when it
 * had to sleep) moves that figure by an eighth, so a lock whose holders
 * are often a little slow earns the whole budget and one taken at once
 * spins little. */
#define DEVQ_LOCK_SPINS 100
#define DEVQ_LOCK_SPINS_MIN 10

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

bool devq_spin_ok(void)
{
	/* 0: not read yet; else 1 + whether to spin, and when it was read. */
	static _Atomic uint64_t checked_ns;
	static atomic_uint verdict;
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	unsigned v = atomic_load_explicit(&verdict, memory_order_relaxed);
	if (!v || now - atomic_load_explicit(&checked_ns, memory_order_relaxed) > 1000000000ull) {
		cpu_set_t set;
		bool many = sched_getaffinity(0, sizeof(set), &set) < 0 || CPU_COUNT(&set) > 1;
		v = 1 + many;
		atomic_store_explicit(&verdict, v, memory_order_relaxed);
		atomic_store_explicit(&checked_ns, now, memory_order_relaxed);
	}
	return v == 2;
}

void devq_lock_wait(struct devq_lock *l)
{
	unsigned past = atomic_load_explicit(&l->spins, memory_order_relaxed);
	unsigned max = 2 * past + DEVQ_LOCK_SPINS_MIN;
	if (max > DEVQ_LOCK_SPINS)
		max = DEVQ_LOCK_SPINS;
	if (!devq_spin_ok())
		max = 0;
	for (unsigned i = 0; i < max; i++) {
		relax();
		unsigned c = 0;
		if (atomic_load_explicit(&l->v, memory_order_relaxed) == 0 &&
		    atomic_compare_exchange_strong_explicit(&l->v, &c, 1, memory_order_acquire,
							    memory_order_relaxed)) {
			atomic_store_explicit(&l->spins,
					      (unsigned)((int)past + ((int)(i + 1) - (int)past) / 8),
					      memory_order_relaxed);
			return;
		}
	}
	if (max)
		atomic_store_explicit(&l->spins,
				      (unsigned)((int)past + ((int)max - (int)past) / 8),
				      memory_order_relaxed);
	/* Marked contended before sleeping, so the holder's give wakes one
	 * sleeper; whoever takes it this way keeps the mark (it cannot know
	 * whether others sleep), at the cost of one spare wake at most. */
	while (atomic_exchange_explicit(&l->v, 2, memory_order_acquire) != 0)
		syscall(SYS_futex, &l->v, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

void devq_lock_wake(struct devq_lock *l)
{
	syscall(SYS_futex, &l->v, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}
