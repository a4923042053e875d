/* SPDX-License-Identifier: Apache-2.0 */
/* See metrics.h.  Fixed-size tables: no allocation on the completion path
 * and nothing to free. */
#include "core/metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>


const char *const devq_metrics_phase_names[DEVQ_METRICS_PHASES] = { "submit", "queued", "device",
								      "sync" };

/* 10 us .. 10 s: from a bare submit to the longest op the default allows. */
const uint64_t devq_metrics_bounds_ns[DEVQ_METRICS_BOUNDS] = {
	10000,	   25000,     50000,	  100000,     250000,	  500000,      1000000,
	2500000,   5000000,   10000000,	  50000000,   100000000,  1000000000,  10000000000,
};

static void observe(struct devq_metrics *m, int phase, uint64_t from, uint64_t to)
{
	if (!from || !to || to < from)
		return;
	uint64_t v = to - from;
	/* The first bound above v, by halving: four looks instead of up to
	 * fourteen, at four observations per completed op. */
	unsigned lo = 0, n = DEVQ_METRICS_BOUNDS;
	while (n) {
		unsigned half = n / 2;
		if (v > devq_metrics_bounds_ns[lo + half]) {
			lo += half + 1;
			n -= half + 1;
		} else {
			n = half;
		}
	}
	m->hist[phase][lo]++;
	m->hist_sum[phase] += v;
	m->hist_count[phase]++;
}

static struct devq_metrics_user *user_slot(struct devq_metrics *m, uid_t uid)
{
	for (unsigned i = 0; i < m->nusers; i++)
		if (m->users[i].uid == (uint32_t)uid)
			return &m->users[i];
	if (m->nusers < DEVQ_METRICS_USERS - 1) {
		struct devq_metrics_user *u = &m->users[m->nusers++];
		memset(u, 0, sizeof(*u));
		u->uid = (uint32_t)uid;
		return u;
	}
	/* Table full: the overflow slot, always last. */
	struct devq_metrics_user *u = &m->users[DEVQ_METRICS_USERS - 1];
	if (m->nusers == DEVQ_METRICS_USERS - 1) {
		memset(u, 0, sizeof(*u));
		u->uid = UINT32_MAX;
		m->nusers++;
	}
	return u;
}

void devq_metrics_op_done(struct devq_metrics *m, uid_t uid, int code, uint64_t client_submit,
			  uint64_t handoff, uint64_t device_start, uint64_t device_end,
			  uint64_t observed)
{
	uint64_t busy = device_start && device_end > device_start ? device_end - device_start : 0;
	m->device_busy_ns += busy;
	if (code)
		m->op_errors[code > 0 && code < DEVQ_METRICS_CODES ? code : DEVQ_METRICS_CODES - 1]++;
	struct devq_metrics_user *u = user_slot(m, uid);
	u->ops_completed++;
	u->ops_failed += code != 0;
	u->device_busy_ns += busy;
	observe(m, 0, client_submit, handoff);
	observe(m, 1, handoff, device_start);
	observe(m, 2, device_start, device_end);
	observe(m, 3, device_end, observed);
}

