/* SPDX-License-Identifier: Apache-2.0 */
/* A tenant: the unit of fairness, quotas and accounting.  Every Unix user
 * is one tenant ("uid:1000"), whatever number of sessions, queues and
 * processes it opens: they share its quotas (quota.c), its weight and place
 * in the device's turns (fair.c) and its usage counters.  An admin may also
 * grant a named tenant ("job_42", server/tenants.c) to one uid: every
 * connection on its own socket belongs to it, with the grant's weight and
 * memory cap in place of the uid's, whichever processes open them.  The record lives while
 * any session of the tenant does (a session outlives its connection until
 * its last op is done), so completers may use it through op->s->tenant.
 * Loop thread, except fair.c's atomics. */
#ifndef DEVQ_TENANT_H
#define DEVQ_TENANT_H

#include <stdint.h>
#include <sys/types.h>

#include "core/fair.h"
#include "core/loopshare.h"
#include "core/metrics.h"

struct devq_engine;

/* A granted tenant's name: [A-Za-z0-9_.-], 1 to this many characters, not
 * starting with '.' (it names a file in the tenant directory). */
#define DEVQ_TENANT_NAME_MAX 64
/* A granted tenant's labels on its metrics (devctl admin grant --label
 * k=v): at most this many, each "key=value" of at most this many bytes. */
#define DEVQ_TENANT_LABELS 8
#define DEVQ_TENANT_LABEL_MAX 127

struct devq_tenant {
	struct devq_tenant *next; /* the engine's list */
	uid_t uid;
	/* "uid:1000", or a granted tenant's name: the label of its metrics
	 * and status rows. */
	char name[DEVQ_TENANT_NAME_MAX + 1];
	/* A granted tenant (devq_tenant_grant): found by name, never by uid,
	 * and not freed while granted.  Cleared when it is evicted: the
	 * record then lives on like an idle one while its sessions drain. */
	bool granted;
	bool named;    /* granted once: never the uid's own tenant */
	bool evicting; /* its sessions are being closed: no new session */
	bool held;     /* an evict's answer waits on it: not freed meanwhile */
	uint32_t shares, of;  /* its weight, and the device's shares it is of */
	uint64_t memory_cap;  /* pinned + device bytes; 0: the per-user quotas */
	bool priority;        /* its sessions may open high-priority queues */
	uint64_t peak;        /* most pinned + device bytes held at once */
	uint64_t failed, cancelled; /* ops completed with an error; CANCELLED ones */
	uint64_t deadline_exceeded; /* of the failed: their client's deadline passed */
	unsigned sessions; /* live and draining */
	uint64_t idle_since; /* when its last session went (0: it has one) */
	/* Usage, summed over its sessions (quota.c). */
	uint64_t buffers, pinned, device, queues, ops;
	struct devq_fair_tenant fair; /* fair.c: its turns and device time */
	struct devq_loop_share loop;  /* its share of the loop thread (server.c) */
	struct devq_metrics_thist hist; /* its ops' latency (devq_tenant_op_seconds) */
	/* A granted tenant's metric labels, "key=value" (grant --label). */
	char labels[DEVQ_TENANT_LABELS][DEVQ_TENANT_LABEL_MAX + 1];
	char *labelp[DEVQ_TENANT_LABELS]; /* into labels: a Grant message's list */
	unsigned nlabels;
};

/* The tenant of uid, made on first use: NULL when out of memory.  Its
 * sessions count is not changed (quota.c admits and counts sessions). */
struct devq_tenant *devq_tenant_get(struct devq_engine *e, uid_t uid);
/* Whether name may name a granted tenant (see DEVQ_TENANT_NAME_MAX). */
bool devq_tenant_name_ok(const char *name);
/* The granted tenant called name, NULL when there is none. */
struct devq_tenant *devq_tenant_find(struct devq_engine *e, const char *name);
/* Makes the granted tenant name for uid (or finds it) and sets its grant:
 * weight shares (1..DEVQ_FAIR_MAX_WEIGHT), memory cap (0: none), priority.
 * 0; -ENOMEM; -EEXIST when it is granted to another uid (t is then set to
 * it, unchanged). */
int devq_tenant_grant(struct devq_engine *e, const char *name, uid_t uid, uint32_t shares,
		      uint32_t of, uint64_t memory_cap, bool priority, struct devq_tenant **t);
/* Ends t's grant (it was granted): found by name no longer, freed like
 * an idle tenant once its last session is gone. */
void devq_tenant_ungrant(struct devq_engine *e, struct devq_tenant *t);

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
