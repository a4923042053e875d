/* SPDX-License-Identifier: Apache-2.0 */
/* Quotas and backpressure; see quota.h. */
#include "core/quota.h"
#include "core/tenant.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "core/engine.h"
#include "core/session.h"
#include "frame.h"

void devq_quota_defaults(struct devq_config *c)
{
	/* Pinned host memory cannot be swapped out: by default one user may
	 * pin at most half of the machine's memory, and device memory on the
	 * CPU backend is host memory too. */
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	uint64_t half = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz / 2 : 1ull << 32;
	if (!c->fair_k)
		c->fair_k = DEVQ_FAIR_K_DEFAULT;
	if (!c->fair_window_ns)
		c->fair_window_ns = DEVQ_FAIR_WINDOW_NS_DEFAULT;
	if (!c->q_session_ops)
		c->q_session_ops = 4096;
	if (!c->q_user_ops)
		c->q_user_ops = 4 * c->q_session_ops;
	if (!c->q_session_buffers)
		c->q_session_buffers = 4096;
	if (!c->q_user_buffers)
		c->q_user_buffers = 4 * c->q_session_buffers;
	if (!c->q_user_pinned)
		c->q_user_pinned = half;
	if (!c->q_session_pinned)
		c->q_session_pinned = c->q_user_pinned;
	if (!c->q_user_device)
		c->q_user_device = half;
	if (!c->q_session_device)
		c->q_session_device = c->q_user_device;
	if (!c->q_user_queues)
		c->q_user_queues = 4 * c->max_queues;
	if (!c->q_session_fds)
		c->q_session_fds = 2 * DEVQ_FDS_PER_MSG + 6;
	if (!c->q_user_sessions)
		c->q_user_sessions = 256;
	if (!c->q_outbound)
		c->q_outbound = 16ull << 20;
}

void devq_quota_who(const struct devq_tenant *t, char *out, size_t n)
{
	if (t->named)
		snprintf(out, n, "tenant %s", t->name);
	else
		snprintf(out, n, "uid %u", (unsigned)t->uid);
}

int devq_quota_attach(struct devq_session *s, char *why, size_t whylen)
{
	struct devq_engine *d = s->e;
	/* A connection on a tenant socket is its tenant's, whoever opened it. */
	struct devq_tenant *u = s->grant ? s->grant : devq_tenant_get(d, s->uid);
	if (!u) {
		snprintf(why, whylen, "out of memory");
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	if (s->grant && !u->granted) {
		snprintf(why, whylen, "tenant %s is being evicted", u->name);
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	if (u->sessions >= d->cfg.q_user_sessions) {
		char who[96];
		devq_quota_who(u, who, sizeof(who));
		snprintf(why, whylen, "%s already has %u sessions, the quota (quota-user-sessions)",
			 who, u->sessions);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	if (!u->sessions++)
		d->tenants_live++;
	s->tenant = u;
	return 0;
}

void devq_quota_detach(struct devq_session *s)
{
	struct devq_tenant *u = s->tenant;
	if (s->quota.held)
		devq__submit__free_unpacked(s->quota.held, NULL);
	s->quota.held = NULL;
	if (!u)
		return;
	u->queues -= s->queues.count;
	if (!--u->sessions)
		s->e->tenants_live--;
	s->tenant = NULL;
	devq_tenant_maybe_free(s->e, u);
}

int devq_quota_buffer(struct devq_session *s, uint64_t id, uint64_t size, bool device, char *err,
		      size_t n)
{
	const struct devq_config *c = &s->e->cfg;
	const struct devq_tenant *u = s->tenant;
	unsigned long long uid = (unsigned long long)id;
	if (s->nbufs >= c->q_session_buffers) {
		snprintf(err, n, "buffer %llu: the session already has %u buffers, the quota "
			 "(quota-session-buffers)", uid, s->nbufs);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	char who[96] = "";
	if (u)
		devq_quota_who(u, who, sizeof(who));
	if (u && u->buffers >= c->q_user_buffers) {
		snprintf(err, n, "buffer %llu: %s already has %" PRIu64 " buffers, the quota "
			 "(quota-user-buffers)", uid, who, u->buffers);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	const char *what = device ? "device" : "pinned";
	uint64_t sess = device ? s->quota.device : s->quota.pinned;
	uint64_t slim = device ? c->q_session_device : c->q_session_pinned;
	if (size > slim || sess > slim - size) {
		snprintf(err, n, "buffer %llu: %" PRIu64 " more %s bytes would exceed the session's "
			 "quota of %" PRIu64 " (%" PRIu64 " in use; quota-session-%s-mb)", uid,
			 size, what, slim, sess, what);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	if (u && u->memory_cap) {
		/* A grant's cap covers both kinds, over all of the tenant's
		 * sessions and processes, in place of the per-user quotas. */
		uint64_t used = u->pinned + u->device;
		if (size > u->memory_cap || used > u->memory_cap - size) {
			snprintf(err, n, "buffer %llu: %" PRIu64 " more %s bytes would exceed %s's "
				 "memory cap of %" PRIu64 " (%" PRIu64 " pinned and device bytes "
				 "in use; devctl admin grant --memory)", uid, size, what, who,
				 u->memory_cap, used);
			return DEVQ__CODE__RESOURCE_EXHAUSTED;
		}
	} else if (u) {
		uint64_t used = device ? u->device : u->pinned;
		uint64_t ulim = device ? c->q_user_device : c->q_user_pinned;
		if (size > ulim || used > ulim - size) {
			snprintf(err, n, "buffer %llu: %" PRIu64 " more %s bytes would exceed "
				 "%s's quota of %" PRIu64 " (%" PRIu64 " in use; "
				 "quota-user-%s-mb)", uid, size, what, who, ulim, used, what);
			return DEVQ__CODE__RESOURCE_EXHAUSTED;
		}
	}
	return 0;
}

void devq_quota_charge_buffer(struct devq_session *s, uint64_t size, bool device, int sign)
{
	struct devq_tenant *u = s->tenant;
	uint64_t *sess = device ? &s->quota.device : &s->quota.pinned;
	*sess = sign > 0 ? *sess + size : *sess - size;
	if (!u)
		return;
	uint64_t *used = device ? &u->device : &u->pinned;
	*used = sign > 0 ? *used + size : *used - size;
	u->buffers = sign > 0 ? u->buffers + 1 : u->buffers - 1;
	if (u->pinned + u->device > u->peak)
		u->peak = u->pinned + u->device;
}

int devq_quota_queue(struct devq_session *s, uint32_t id, char *err, size_t n)
{
	struct devq_tenant *u = s->tenant;
	if (u && u->queues >= s->e->cfg.q_user_queues) {
		char who[96];
		devq_quota_who(u, who, sizeof(who));
		snprintf(err, n, "queue %u: %s already has %" PRIu64 " queues, the quota "
			 "(quota-user-queues)", id, who, u->queues);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	return 0;
}

void devq_quota_queue_opened(struct devq_session *s)
{
	if (s->tenant)
		s->tenant->queues++;
}

bool devq_quota_over_ops(const struct devq_session *s)
{
	const struct devq_config *c = &s->e->cfg;
	return s->ops_in_flight >= c->q_session_ops ||
	       (s->tenant && s->tenant->ops >= c->q_user_ops);
}

bool devq_quota_may_resume(const struct devq_session *s)
{
	const struct devq_config *c = &s->e->cfg;
	/* Hysteresis: resuming at the first free slot would stop and start
	 * the socket's poll once per completion. */
	return s->ops_in_flight <= c->q_session_ops - c->q_session_ops / 4 &&
	       !(s->tenant && s->tenant->ops > c->q_user_ops - c->q_user_ops / 4);
}

