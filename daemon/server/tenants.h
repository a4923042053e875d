/* SPDX-License-Identifier: Apache-2.0 */
/* Granted tenants and the admin calls (issue "Clusters"): `devctl admin
 * grant` makes a named tenant (core/tenant.h) for one uid, with a socket of
 * its own in the tenant directory, owned by that uid, mode 0600; every
 * connection on it belongs to the tenant, so a scheduler's job is
 * attributed, capped and weighted whatever its processes do.  `evict` ends
 * it: no new work, its sessions closed at once (ops not started are
 * cancelled, running ones finish, buffers go with their last op), the
 * socket removed, its usage logged (DEVQ_TENANT=) and returned once all is
 * freed or the grace ran out.  Grants outlive a restart in the state
 * directory, in a file named after the instance (grants.<instance>).
 *
 * The server hands this file its accept callback and its session close, so
 * that the calls go one way only (server.c calls in here).  Loop thread. */
#ifndef DEVQ_TENANTS_H
#define DEVQ_TENANTS_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/un.h>

#include <uv.h>

#include "devq.pb-c.h"
#include "server/policy.h"

struct devq_daemon;
struct devq_session;
struct devq_tenant;

/* Granted tenants one daemon keeps at most (each holds a listening fd). */
#define DEVQ_GRANTS_MAX 256
/* Shares of the device a grant may say it is "of" at most. */
#define DEVQ_GRANT_OF_MAX 65536

/* One granted tenant's listening socket. */
struct devq_tsock {
	struct devq_tsock *next;
	struct devq_daemon *d;
	struct devq_tenant *t;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int fd;
	uv_poll_t poll;
};

struct devq_evict_wait; /* tenants.c */

struct devq_tenants {
	/* The tenant directory: its sockets' paths must fit in sun_path. */
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char dir_err[256];    /* why grants cannot be made ("": they can) */
	char state[PATH_MAX]; /* grants.<instance> in the state directory; "": none */
	struct devq_policy control; /* who may make admin calls */
	struct devq_tsock *socks;
	unsigned ngranted;
	struct devq_evict_wait *waits; /* evicts not yet answered */
	uv_timer_t evict_timer;
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
 * instance is its name without ".sock"): resolves control-groups, checks
 * or makes the tenant directory and restores the grants of state_dir.
 * 0, or the exit status to give up with (an unsafe tenant directory, a bad
 * control-groups), the reason logged. */
int devq_tenants_start(struct devq_daemon *d, const char *sock_path, const char *state_dir);
/* Stopping: the tenant sockets are closed and removed (grants stay in the
 * state file for the next start). */
void devq_tenants_stop(struct devq_daemon *d);
/* Frees what start made (after the loop ran out). */
void devq_tenants_fini(struct devq_daemon *d);
/* Accepting resumes after fd exhaustion (server.c paused every socket). */
void devq_tenants_pause(struct devq_daemon *d, bool pause);

/* An admin message of s (AdminGrant, AdminEvict, AdminTenants): answered,
 * true; anything else: false, for the requests layer. */
bool devq_tenants_handle(struct devq_session *s, const Devq__ClientMessage *m);

/* "lost-uids.gpu0"-style state file names: the instance of a socket path
 * (its file name without ".sock") into out. */
void devq_tenants_instance(const char *sock_path, char *out, size_t n);

#endif
