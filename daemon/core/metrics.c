/* SPDX-License-Identifier: Apache-2.0 */
/* See metrics.h.  Fixed-size tables: no allocation on the completion path
 * and nothing to free. */
#include "core/metrics.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>


const char *const devq_metrics_phase_names[DEVQ_METRICS_PHASES] = { "submit", "queued", "device",
								      "sync" };

/* 10 us .. 10 s: from a bare submit to the longest op the default allows. */
const uint64_t devq_metrics_bounds_ns[DEVQ_METRICS_BOUNDS] = {
	10000,	   25000,     50000,	  100000,     250000,	  500000,      1000000,
	2500000,   5000000,   10000000,	  50000000,   100000000,  1000000000,  10000000000,
};

const char *const devq_metrics_tphase_names[DEVQ_METRICS_TPHASES] = { "queued", "device",
									"total" };

/* 50 us .. 60 s: a bare op's turn to the longest op a tenant may wait on;
 * fourteen, so that a tenant's three histograms stay a few dozen series. */
const uint64_t devq_metrics_tbounds_ns[DEVQ_METRICS_TBOUNDS] = {
	50000,	    100000,	250000,	    500000,	1000000,     2500000,	 10000000,
	25000000,   100000000,	250000000,  1000000000, 2500000000,  10000000000, 60000000000,
};

struct devq_metrics_buckets devq_metrics_phase_buckets, devq_metrics_tenant_buckets;
bool devq_metrics_buckets_ready;

static void fill_buckets(struct devq_metrics_buckets *b, const uint64_t *bounds, unsigned n)
{
	for (unsigned k = 0; k < 64; k++) {
		uint64_t lo = 1ull << k;
		unsigned i = 0;
		while (i < n && bounds[i] < lo)
			i++;
		b->first[k] = (uint8_t)i;
		b->split[k] = i < n ? bounds[i] : UINT64_MAX;
	}
}

void devq_metrics_buckets_fill(void)
{
	fill_buckets(&devq_metrics_phase_buckets, devq_metrics_bounds_ns, DEVQ_METRICS_BOUNDS);
	fill_buckets(&devq_metrics_tenant_buckets, devq_metrics_tbounds_ns, DEVQ_METRICS_TBOUNDS);
	devq_metrics_buckets_ready = true;
}

void devq_metrics_tenant_op(struct devq_metrics_thist *h, uint64_t received,
			    uint64_t device_start, uint64_t device_end, uint64_t observed)
{
	if (!devq_metrics_buckets_ready)
		devq_metrics_buckets_fill();
	devq_metrics_tenant_op_in(h, received, device_start, device_end, observed);
}

struct devq_metrics_user *devq_metrics_user_slot(struct devq_metrics *m, uid_t uid)
{
	struct devq_metrics_user *u = NULL;
	for (unsigned i = 0; i < m->nusers && !u; i++)
		if (m->users[i].uid == (uint32_t)uid)
			u = &m->users[i];
	if (!u && m->nusers < DEVQ_METRICS_USERS - 1) {
		u = &m->users[m->nusers++];
		memset(u, 0, sizeof(*u));
		u->uid = (uint32_t)uid;
	}
	if (!u) {
		/* Table full: the overflow slot, always last; not remembered
		 * as the last user's, whose uid it does not carry. */
		u = &m->users[DEVQ_METRICS_USERS - 1];
		if (m->nusers == DEVQ_METRICS_USERS - 1) {
			memset(u, 0, sizeof(*u));
			u->uid = UINT32_MAX;
			m->nusers++;
		}
		return u;
	}
	m->last_user = u;
	return u;
}

void devq_metrics_op_done(struct devq_metrics *m, uid_t uid, int code, uint64_t client_submit,
			  uint64_t handoff, uint64_t device_start, uint64_t device_end,
			  uint64_t observed)
{
	devq_metrics_op_done_tenant(m, NULL, uid, code, client_submit, 0, handoff, device_start,
				    device_end, observed);
}
