/* SPDX-License-Identifier: Apache-2.0 */
/* Mutexes of the op path (backend FIFOs, fair slots, the completion list):
 * each is held for a few hundred instructions by the loop and by every
 * completer at up to millions of ops per second.  An adaptive mutex spins
 * briefly before it sleeps, so a contended acquisition usually costs no
 * FUTEX_WAIT/FUTEX_WAKE pair; on the launch-bound fit (4 streams, 2 vCPUs)
 * that halved the daemon's futex calls and took the exposed per-op cost
 * from ~1.1 to ~0.9 us (bench/RESULTS.md, run 10). */
#ifndef DEVQ_LOCK_H
#define DEVQ_LOCK_H

#include <pthread.h>

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

#endif
