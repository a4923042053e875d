/* SPDX-License-Identifier: Apache-2.0 */
/* SIGUSR1: the daemon writes one line of resource counts to stderr (the
 * journal under systemd), whatever the log level:
 *
 *   devqd: stats: sessions=N ops_in_flight=N buffers=N bytes_mapped=N fds=N
 *                 heap_in_use=N heap_cached=N
 *
 * heap_in_use is glibc's mallinfo2() uordblks + hblkhd: bytes handed out by
 * malloc and not yet freed.  heap_cached is the part of it the daemon keeps
 * on purpose for reuse (op record pools, the frame arena; bounded, see
 * pool.h).  tests/soak compares heap_in_use - heap_cached before and after
 * minutes of abuse to prove that nothing grows; an operator can do the
 * same. */
#ifndef DEVQ_STATS_H
#define DEVQ_STATS_H

struct devq_daemon;

/* Installs the SIGUSR1 handler on d's loop (one daemon per process). */
int devq_stats_start(struct devq_daemon *d);
/* Closes the handler so the loop can end. */
void devq_stats_stop(void);

#endif
