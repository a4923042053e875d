/* SPDX-License-Identifier: Apache-2.0 */
/* The admin calls: what `devctl admin grant`, `evict` and `tenants` mean.
 * A grant makes a named tenant (core/tenant.h) for one uid, with a socket
 * of its own, owned by that uid, mode 0600; every connection on it belongs
 * to the tenant, so a scheduler's job is attributed, capped and weighted
 * whatever its processes do.  An evict ends it: no new work, its sessions
 * closed at once (ops not started are cancelled, a sliced host op stops at
 * the end of its slice, other running ones finish,
 * buffers go with their last op), the socket removed, its usage logged
 * (DEVQ_TENANT=) and returned once all is freed or the grace ran out.
 * Grants outlive a restart in the state file (grants.<instance>).
 *
 * The sockets, their directory and the connections are the server's: this
 * file reaches them through devq_admin_ops, which the server fills in, so
 * that calls go one way only (the server calls in here).  Loop thread. */
#ifndef DEVQ_ADMIN_H
#define DEVQ_ADMIN_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "devq.pb-c.h"

struct devq_engine;
struct devq_session;
struct devq_tenant;

/* Granted tenants one daemon keeps at most (each holds a listening fd). */
#define DEVQ_GRANTS_MAX 256
/* Shares of the device a grant may say it is "of" at most. */
#define DEVQ_GRANT_OF_MAX 65536
/* The largest memory cap a grant may give, 2^63 bytes: the grants file
 * keeps every cap the call accepts, and no more. */
#define DEVQ_GRANT_MEMORY_MAX (UINT64_C(1) << 63)
/* How often a waiting evict looks again (devq_admin_evict_tick): its
 * answer comes within this of the last buffer going. */
#define DEVQ_EVICT_POLL_MS 5

/* The server's socket work, as the admin calls use it. */
struct devq_admin_ops {
	/* Whether tenant name's socket path fits a socket address: 0, or a
	 * Devq__Code with err filled. */
	int (*sock_fits)(void *ud, const char *name, char *err, size_t n);
	/* Listens on t's own socket (making the tenant directory first),
	 * owned by t's uid, mode 0600: 0 with *sock its handle, or a
	 * Devq__Code with err filled. */
	int (*sock_open)(void *ud, struct devq_tenant *t, void **sock, char *err, size_t n);
	/* Stops listening on sock and removes its file. */
	void (*sock_close)(void *ud, void *sock);
	/* sock's path, as clients connect to it. */
	const char *(*sock_path)(void *ud, const void *sock);
	/* Closes s's connection at once. */
	void (*close_session)(void *ud, struct devq_session *s);
	/* Calls devq_admin_evict_tick every DEVQ_EVICT_POLL_MS until none
	 * waits, writing what the sessions' outboxes hold after each (no I/O
	 * callback follows a timer's answer). */
	void (*evict_poll)(void *ud);
	void *ud;
};

/* One granted tenant and its socket (NULL once the server stopped). */
struct devq_admin_grant {
	struct devq_admin_grant *next;
	struct devq_tenant *t;
	void *sock;
	/* Sessions numbered above this one were opened after the grant
	 * (session ids only grow): those of its uid on the main socket go
	 * with the uid's last grant. */
	uint64_t after_session;
};

struct devq_evict_wait; /* admin.c */

struct devq_admin {
	struct devq_engine *e;
	struct devq_admin_ops ops;
	/* Who may make admin calls, in words (setting control-groups): the
	 * server's policy, for refusals. */
	const char *control;
	/* Why no grant can be made now ("": one can): the server's view of
	 * its tenant directory. */
	const char *unavailable;
	char state[PATH_MAX]; /* grants.<instance> in the state directory; "": none */
	struct devq_admin_grant *grants; /* newest first */
	unsigned ngranted;
	struct devq_evict_wait *waits; /* evicts not yet answered */
};

/* Before any call: the engine, and the server's ops (copied). */
void devq_admin_init(struct devq_admin *a, struct devq_engine *e, const struct devq_admin_ops *ops);
/* At start, with state set: the grants of the state file, from before a
 * restart.  A bad line is logged and skipped: it never stops devqd. */
void devq_admin_load(struct devq_admin *a);
/* The server stopped listening on every tenant socket (grants stay in the
 * state file for the next start). */
void devq_admin_socks_gone(struct devq_admin *a);
/* Evicts waiting for their tenant's ops and buffers: answered once all is
 * freed or their grace ran out.  Whether any is still waiting. */
bool devq_admin_evict_tick(struct devq_admin *a);
/* Frees what the admin calls hold (after the loop ran out). */
void devq_admin_fini(struct devq_admin *a);
/* How many live grants uid holds; their sockets' paths, comma-separated,
 * into socks (cut to n).  The server refuses such a uid's connections on
 * the main socket (setting grant-exclusive). */
unsigned devq_admin_grants_of(const struct devq_admin *a, uid_t uid, char *socks, size_t n);

/* The calls (requests/dispatch.c's table: admin only, after Hello). */
void devq_admin_on_grant(struct devq_admin *a, struct devq_session *s, const Devq__AdminGrant *m);
void devq_admin_on_evict(struct devq_admin *a, struct devq_session *s, const Devq__AdminEvict *m);
void devq_admin_on_tenants(struct devq_admin *a, struct devq_session *s);

#endif
