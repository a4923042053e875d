/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon: the engine (core/engine.h) and what the server keeps around
 * it.  Its own header, apart from the loop's code (server.h), so that the
 * server's other rooms (notify, tenants, stats, lost, reload, testhooks)
 * reach its state without depending on the loop.  Loop thread. */
#ifndef DEVQ_DAEMON_H
#define DEVQ_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/un.h>

#include <uv.h>

#include "core/engine.h"
#include "requests/admin.h"
#include "server/culprit.h"
#include "server/policy.h"
#include "server/tenants.h"

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
	struct devq_policy observers; /* policy.c: who sees every tenant's status */
	struct devq_culprits culprits; /* culprit.c: uids refused after device losses */
	struct devq_tenants tenants;   /* tenants.c: granted tenants' sockets */
	struct devq_admin admin;       /* requests/admin.c: the admin calls */
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

#endif
