/* SPDX-License-Identifier: Apache-2.0 */
/* The contended paths of struct devq_lock; see lock.h. */
#include "base/lock.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Spins before sleeping: the holder's section is a few hundred
 * instructions at most, shorter than a futex round trip. */
#define DEVQ_LOCK_SPINS 100

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

void devq_lock_wait(struct devq_lock *l)
{
	for (unsigned i = 0; i < DEVQ_LOCK_SPINS; i++) {
		relax();
		unsigned c = 0;
		if (atomic_load_explicit(&l->v, memory_order_relaxed) == 0 &&
		    atomic_compare_exchange_strong_explicit(&l->v, &c, 1, memory_order_acquire,
							    memory_order_relaxed))
			return;
	}
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
