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

#include "core/engine.h"
#include "server/culprit.h"
#include "server/policy.h"
#include "server/tenants.h"

/* Exit status after the device was lost (EX_UNAVAILABLE): the service
 * manager restarts devqd on a fresh device context. */
#define DEVQ_EXIT_DEVICE_LOST 69
/* After a device loss, how long the ops still in flight may take to report
 * it before devqd exits without them (a sticky fault fails a GPU's streams
 * at once; a CPU op, or a kernel the fault did not abort, would hold the
 * restart for as long as it runs). */
#define DEVQ_LOST_GRACE_NS 1000000000ull

struct devq_notify;
struct devq_reload;

struct devq_daemon {
	struct devq_engine e; /* first: the engine's events get it back */
	uv_loop_t *loop;
	int listen_fd;
	bool socket_inherited; /* from systemd: not ours to unlink */
	uv_poll_t listen_poll;
	uv_async_t wake;
	/* The trace builder's eventfd (requests/tracereq.c), -1 without one. */
	int trace_fd;
	uv_poll_t trace_poll;
	uv_signal_t sig_term, sig_int;
	uv_timer_t stop_timer;
	bool stopping;
	uint64_t stop_started;
	int exit_code;
	/* Completions published in a completion page do not wake the loop:
	 * this timer drains them within a millisecond while they come
	 * (server.c, on_lazy). */
	uv_timer_t lazy_timer;
	/* Backend flush deferred to the end of the loop iteration: every
	 * frame read in one iteration goes to the device streams with one
	 * wake-up per stream. */
	uv_prepare_t flush_prep;
	struct devq_notify *notify; /* notify.c: READY/STATUS/WATCHDOG state */
	struct devq_reload *reload; /* reload.c: the executable repository's rescans */
	struct devq_policy policy;  /* policy.c: who may connect */
	struct devq_policy priority; /* policy.c: who may open high-priority queues */
	struct devq_culprits culprits; /* culprit.c: uids refused after device losses */
	struct devq_tenants tenants;   /* tenants.c: granted tenants, admin calls */
	/* The listening socket's path (from systemd: as it was bound), which
	 * names the instance: its tenant directory and state files. */
	char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	unsigned nthrottled;        /* sessions not read: over their in-flight quota */
	/* fd exhaustion (server.c): a spare fd kept open so that at EMFILE one
	 * pending connection can still be accepted (an admin's is served, any
	 * other closed at once), and accepting paused meanwhile. */
	int reserve_fd;
	uv_timer_t accept_timer;
	bool accept_paused;
	uint64_t emfile_logged_ns;
	/* Per-user fd budget: a quarter of RLIMIT_NOFILE (at least 64) for one
	 * uid's connections, pidfds and received fds not yet claimed. */
	unsigned user_fd_budget;
	uint64_t budget_logged_ns; /* refusals at accept are logged once a second */
	/* Received fds that no complete frame has claimed yet are closed, with
	 * their connection, after DEVQ_FDS_WAIT_NS. */
	uv_timer_t fds_timer;
	/* Sessions whose tenant's requests took its budget of the loop turn
	 * (DEVQ_FRAMES_SLICE_NS) go on in a later turn: this idle handle runs
	 * while any has frames left (conn.yielded). */
	uv_idle_t frames_idle;
	unsigned nyielded;
	uv_check_t turn_check; /* ends each loop turn: loop_turn++ */
	uint64_t loop_turn, loop_pass; /* turns; frames_idle passes */
	uv_timer_t trim_timer; /* malloc_trim a second after a session closed */
};

/* The loop thread's scheduler time slice (base/slice.h): the kernel's
 * shortest. */
#define DEVQ_LOOP_SLICE_NS 100000ull

/* What one tenant's requests may take of a loop turn (one iteration),
 * across all its sessions: past it, the rest waits for a later turn (other
 * tenants' I/O first; a tenant's waiting sessions take turns), and what a
 * request took beyond it is paid for with the tenant's next turns.  Another
 * tenant's request waits about one budget, so it is small: at 0.5 ms
 * rather than 2 ms, a null op under bench/loopfair's flood of traces took
 * 0.25 ms rather than 1.8 ms at the median (p99 8.2 against 10.7 ms),
 * and the flooding tenant's request rate did not drop (bench/RESULTS.md).
 * A lone tenant never yields (server.c tenants_contend). */
#define DEVQ_FRAMES_SLICE_NS 500000ull

#define DEVQ_FDS_WAIT_NS 1000000000ull

/* The engine's events as this server answers them, for devq_engine_init
 * of d->e. */
struct devq_engine_events devq_server_events(struct devq_daemon *d);

/* Listens and sets up the loop's handles without running it: 0, or the
 * exit status to give up with.  Split from run so that an in-process driver
 * (tests/fuzz) can step the real loop with uv_run(UV_RUN_NOWAIT/ONCE). */
int devq_server_start(struct devq_daemon *d);
/* start, then run the loop until stopped: the exit status. */
/* Blocks the signals the loop handles in the calling thread, so that the
 * threads started after it inherit the mask; devq_server_run unblocks them
 * in the loop thread once their handlers are set.  Call before
 * devq_engine_init. */
void devq_server_block_signals(void);
int devq_server_run(struct devq_daemon *d);
/* Stops as SIGTERM does, then exits with exit_code. */
void devq_server_stop(struct devq_daemon *d, const char *why, int exit_code);
/* Frees what start set up that outlives the loop (after uv_run returns). */
void devq_server_fini(struct devq_daemon *d);

/* The connection's socket of s, -1 once it is closed: for in-process
 * drivers (tests/fuzz) that look at what the daemon has not read yet. */
int devq_server_session_fd(const struct devq_session *s);

/* lost.c: the device took a sticky fault (job is the first op reporting
 * it): logs it and tells every session, naming the sessions that had work
 * on the device.  The server then stops with DEVQ_EXIT_DEVICE_LOST once the
 * ops in flight have failed. */
void devq_lost_notify(struct devq_daemon *d, const struct devq_job *job);

#endif
