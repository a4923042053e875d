/* SPDX-License-Identifier: Apache-2.0 */
/* Fault injection for the core tests: test_core is linked with
 * -Wl,--wrap=NAME for each call below, so the daemon's core objects (and
 * the test's own, but not libc's internals or shared libraries) call
 * __wrap_NAME, which fails on request and otherwise calls the real one.
 * The error paths of daemon/core/ (allocation failures, failing syscalls)
 * run this way, without a preload that would also fail libc's or Check's
 * own allocations. */
#ifndef DEVQ_TESTS_FAULT_H
#define DEVQ_TESTS_FAULT_H

#include <stdbool.h>

enum fault_call {
	FAULT_ALLOC, /* malloc, calloc and realloc, counted together */
	FAULT_MEMFD_CREATE,
	FAULT_FTRUNCATE,
	FAULT_FCNTL,
	FAULT_MMAP,
	FAULT_MUNMAP,
	FAULT_MADVISE,
	FAULT_PTHREAD_CREATE,
	FAULT_CLOSE,
	FAULT_FSTAT,
	FAULT_FSTATFS,
	FAULT_EVENTFD,
	FAULT_PIPE2,
	FAULT_NCALLS
};

/* The nth call of c from now (1: the next) fails with errno err, and so do
 * the following `count - 1` ones (count 0: every later one). */
void fault_arm(enum fault_call c, unsigned nth, unsigned count, int err);
/* Every call succeeds again; counts restart. */
void fault_reset(void);
/* Calls of c since the last fault_arm of it or fault_reset. */
unsigned fault_calls(enum fault_call c);
/* How many calls of c were failed since then. */
unsigned fault_failed(enum fault_call c);

#endif
