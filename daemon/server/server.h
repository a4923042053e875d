/* SPDX-License-Identifier: Apache-2.0 */
/* The server: devqd's libuv loop around the engine (core/engine.h) — the
 * listening socket, one connection per client session (fd, uv_poll,
 * receive buffer, throttling), the wake-up from backend threads, signals,
 * systemd notification and shutdown.  Loop thread. */
#ifndef DEVQ_SERVER_H
#define DEVQ_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "server/daemon.h"

/* The loop thread's scheduler time slice (base/slice.h): the kernel's
 * shortest. */
#define DEVQ_LOOP_SLICE_NS 100000ull

/* What one tenant's requests may take of a loop turn (one iteration),
 * across all its sessions: past it, the rest waits for a later turn (other
 * tenants' I/O first; a tenant's waiting sessions take turns), and what a
 * request took beyond it is paid for with the tenant's next turns.  Another
 * tenant's request waits about one budget, so it is small, yet large
 * enough that the busy tenant's own request rate does not drop (measured
 * under bench/loopfair's flood of traces: bench/RESULTS.md, "The loop
 * shared by tenant").  A lone tenant never yields (server.c
 * tenants_contend). */
#define DEVQ_FRAMES_SLICE_NS 500000ull

#define DEVQ_FDS_WAIT_NS 1000000000ull

/* The engine's events as this server answers them, for devq_engine_init
 * of d->e. */
struct devq_engine_events devq_server_events(struct devq_daemon *d);

/* Listens and sets up the loop's handles without running it: 0, or the
 * exit status to give up with.  Split from run so that an in-process driver
 * (tests/fuzz) can step the real loop with uv_run(UV_RUN_NOWAIT/ONCE). */
int devq_server_start(struct devq_daemon *d);
/* Blocks the signals the loop handles in the calling thread, so that the
 * threads started after it inherit the mask; devq_server_run unblocks them
 * in the loop thread once their handlers are set.  Call before
 * devq_engine_init. */
void devq_server_block_signals(void);
/* start, then run the loop until stopped: the exit status. */
int devq_server_run(struct devq_daemon *d);
/* Stops as SIGTERM does, then exits with exit_code. */
void devq_server_stop(struct devq_daemon *d, const char *why, int exit_code);
/* Frees what start set up that outlives the loop (after uv_run returns). */
void devq_server_fini(struct devq_daemon *d);

/* The connection's socket of s, -1 once it is closed: for in-process
 * drivers (tests/fuzz) that look at what the daemon has not read yet. */
int devq_server_session_fd(const struct devq_session *s);

#endif
