/* SPDX-License-Identifier: Apache-2.0 */
/* A tenant: the unit of fairness, quotas and accounting.  Today every Unix
 * user is one tenant, whatever number of sessions, queues and processes it
 * opens: they share its quotas (quota.c), its weight and place in the
 * device's turns (fair.c) and its usage counters.  The record lives while
 * any session of the tenant does (a session outlives its connection until
 * its last op is done), so completers may use it through op->s->tenant.
 * Loop thread, except fair.c's atomics. */
#ifndef DEVQ_TENANT_H
#define DEVQ_TENANT_H

#include <stdint.h>
#include <sys/types.h>

#include "core/fair.h"
#include "core/loopshare.h"

struct devq_engine;

struct devq_tenant {
	struct devq_tenant *next; /* the engine's list */
	uid_t uid;
	/* "uid:1000": the label of its metrics and status rows. */
	char name[24];
	unsigned sessions; /* live and draining */
	uint64_t idle_since; /* when its last session went (0: it has one) */
	/* Usage, summed over its sessions (quota.c). */
	uint64_t buffers, pinned, device, queues, ops;
	struct devq_fair_tenant fair; /* fair.c: its turns and device time */
	struct devq_loop_share loop;  /* its share of the loop thread (server.c) */
};

/* The tenant of uid, made on first use: NULL when out of memory.  Its
 * sessions count is not changed (quota.c admits and counts sessions). */
struct devq_tenant *devq_tenant_get(struct devq_engine *e, uid_t uid);
/* Idle tenants (no session) kept, so that their counters outlive a
 * client's exit (devctl status, metrics); past this many the one idle
 * longest is freed. */
#define DEVQ_TENANT_IDLE_MAX 64

/* t's last session went: keeps it among the idle ones, freeing the one
 * idle longest when there are more than DEVQ_TENANT_IDLE_MAX. */
void devq_tenant_maybe_free(struct devq_engine *e, struct devq_tenant *t);
/* Frees every tenant (engine teardown: no session is left). */
void devq_tenant_free_all(struct devq_engine *e);

#endif
