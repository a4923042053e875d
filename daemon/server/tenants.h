/* SPDX-License-Identifier: Apache-2.0 */
/* Granted tenants' sockets: the tenant directory, one listening socket per
 * grant (requests/admin.h says what a grant means), owned by the tenant's
 * uid, mode 0600, so that only its uid may connect.  This file does the
 * admin calls' socket work through devq_admin_ops, and keeps the evict
 * timer.
 *
 * The server hands this file its accept callback and its session close, so
 * that the calls go one way only (server.c calls in here).  Loop thread. */
#ifndef DEVQ_TENANTS_H
#define DEVQ_TENANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/un.h>

#include <uv.h>

#include "server/policy.h"

struct devq_daemon;
struct devq_session;
struct devq_tenant;

/* One granted tenant's listening socket (the grant's handle,
 * requests/admin.h struct devq_admin_grant). */
struct devq_tsock {
	struct devq_daemon *d;
	struct devq_tenant *t;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int fd;
	uv_poll_t poll;
};

struct devq_tenants {
	/* The tenant directory: its sockets' paths must fit in sun_path.
	 * Every directory above it is root's or devqd's and writable by
	 * others only when sticky (checked at start and before it is made). */
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char dir_err[256];    /* why grants cannot be made ("": they can) */
	/* The directory itself, opened once (at start if it exists, else
	 * when made for the first grant; dir_open then): every socket is
	 * bound, given and removed relative to it, so that whatever is put at
	 * its path later is never touched.  Clients are told paths under
	 * dir: each grant checks that dir still leads to it. */
	int dirfd;
	bool dir_open;
	unsigned nsocks; /* tenant sockets in it */
	struct devq_policy control; /* who may make admin calls */
	uv_timer_t evict_timer;     /* evicts waiting (requests/admin.h) */
	bool timer_init;
	/* The server's: accept on a tenant socket (h->data is its devq_tsock),
	 * and close a session's connection at once. */
	uv_poll_cb on_accept;
	void (*close_session)(struct devq_session *s);
	/* And write what the sessions' outboxes hold (after an evict's
	 * answer from a timer, which no I/O callback follows). */
	void (*flush)(struct devq_daemon *d);
};

/* At start, once the listening socket is known (sock_path: its path; the
 * instance is its name without ".sock"): resolves control-groups, sets up
 * the admin calls (d->admin), checks or makes the tenant directory and
 * restores the grants of state_dir.  0, or the exit status to give up with
 * (an unsafe tenant directory, a bad control-groups), the reason logged. */
int devq_tenants_start(struct devq_daemon *d, const char *sock_path, const char *state_dir);
/* Stopping: the tenant sockets are closed and removed (grants stay in the
 * state file for the next start). */
void devq_tenants_stop(struct devq_daemon *d);
/* Frees what start made (after the loop ran out). */
void devq_tenants_fini(struct devq_daemon *d);
/* Accepting resumes after fd exhaustion (server.c paused every socket). */
void devq_tenants_pause(struct devq_daemon *d, bool pause);

/* "lost-uids.gpu0"-style state file names: the instance of a socket path
 * (its file name without ".sock") into out. */
void devq_tenants_instance(const char *sock_path, char *out, size_t n);

#endif
