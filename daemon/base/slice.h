/* SPDX-License-Identifier: Apache-2.0 */
/* The scheduler's time slice of the calling thread.  Under EEVDF (Linux
 * 6.6 on) a thread of the normal policy that wakes runs at once only if
 * its virtual deadline, its slice past its eligible time, comes before
 * the running thread's; with the default slice (0.75 ms times 1 + log2 of
 * the CPUs) a thread that wakes on a CPU busy with other processes waits
 * for a slice or a tick more often than not.  A shorter slice of its own
 * (Linux 6.12 on, sched_attr.sched_runtime for SCHED_OTHER) makes its
 * deadline come sooner, and its turns shorter: for a thread that wakes
 * often and works briefly, what latency wants. */
#ifndef DEVQ_BASE_SLICE_H
#define DEVQ_BASE_SLICE_H

#include <stdint.h>

/* Sets the calling thread's slice to ns (the kernel takes 0.1 to 100 ms)
 * when it runs under the normal policy (SCHED_OTHER), keeping its nice
 * value.  0: set; -EINVAL where the kernel has no slices of its own;
 * -EPERM or another negative errno from sched_setattr; 1: left alone (a
 * real-time or batch policy an administrator chose). */
int devq_slice_set(uint64_t ns);

/* The calling thread's slice in ns as the kernel reports it in
 * /proc/thread-self/sched (se.slice), or 0 when it does not. */
uint64_t devq_slice_get(void);

#endif
