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

/* For each power of two 2^k, the first bucket whose bound is at least 2^k,
 * and that bucket's bound.  Consecutive bounds are at least 2x apart
 * (test_core's test_metrics_buckets_at_bounds asserts it), so [2^k,
 * 2^(k+1)) holds at most one of them: a value v there belongs to
 * first[k], or to the next bucket when v is above split[k] (a bound
 * of 2^(k+1) or more never splits, nor does the +Inf bucket).  Filled on
 * first use (loop thread only, like every metric).  One table per set of
 * bounds: the daemon's phases and the tenants'. */
struct buckets {
	uint8_t first[64];
	uint64_t split[64];
};
static struct buckets phase_buckets, tenant_buckets;

static void fill_buckets(struct buckets *b, const uint64_t *bounds, unsigned n)
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

/* The bucket of v. */
static inline __attribute__((always_inline)) unsigned bucket_of(const struct buckets *b,
							       uint64_t v)
{
	/* The first bound at or above v, from its power of two: a table
	 * look-up and one comparison, where a search of the fourteen bounds
	 * costs several times that, at seven observations per completed op
	 * (measured: bench/RESULTS.md, "Figures from the code's comments").
	 * v = 0 reads the entry of 2^0, bucket 0, as it should. */
	unsigned k = 63 - (unsigned)__builtin_clzll(v | 1);
	return b->first[k] + (v > b->split[k]);
}

static inline __attribute__((always_inline)) void observe(struct devq_metrics *m, int phase,
							 uint64_t from, uint64_t to)
{
	/* to >= from > 0 implies to > 0: two tests, not three. */
	if (!from || to < from)
		return;
	uint64_t v = to - from;
	m->hist[phase][bucket_of(&phase_buckets, v)]++;
	m->hist_sum[phase] += v;
	m->hist_count[phase]++;
}

/* A tenant's phase: inlined in the op's single pass below, where three
 * calls of their own cost as much again as the observations. */
static inline __attribute__((always_inline)) void tobserve(struct devq_metrics_thist *h,
							  int phase, uint64_t from, uint64_t to)
{
	if (!from || to < from) /* as in observe() */
		return;
	uint64_t v = to - from;
	h->hist[phase][bucket_of(&tenant_buckets, v)]++;
	h->sum[phase] += v;
	h->count[phase]++;
}

/* Both tables on first use: one test per op, not one per table. */
static bool buckets_ready;
static void fill_all(void)
{
	fill_buckets(&phase_buckets, devq_metrics_bounds_ns, DEVQ_METRICS_BOUNDS);
	fill_buckets(&tenant_buckets, devq_metrics_tbounds_ns, DEVQ_METRICS_TBOUNDS);
	buckets_ready = true;
}

static inline __attribute__((always_inline)) void tenant_op(struct devq_metrics_thist *h,
							   uint64_t received,
							   uint64_t device_start,
							   uint64_t device_end, uint64_t observed)
{
	tobserve(h, 0, received, device_start);
	tobserve(h, 1, device_start, device_end);
	tobserve(h, 2, received, observed);
}

void devq_metrics_tenant_op(struct devq_metrics_thist *h, uint64_t received,
			    uint64_t device_start, uint64_t device_end, uint64_t observed)
{
	if (!buckets_ready)
		fill_all();
	tenant_op(h, received, device_start, device_end, observed);
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

static inline __attribute__((always_inline)) void
op_done(struct devq_metrics *m, uid_t uid, int code, uint64_t client_submit, uint64_t handoff,
	uint64_t device_start, uint64_t device_end, uint64_t observed)
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

void devq_metrics_op_done(struct devq_metrics *m, uid_t uid, int code, uint64_t client_submit,
			  uint64_t handoff, uint64_t device_start, uint64_t device_end,
			  uint64_t observed)
{
	if (!buckets_ready)
		fill_all();
	op_done(m, uid, code, client_submit, handoff, device_start, device_end, observed);
}

void devq_metrics_op_done_tenant(struct devq_metrics *m, struct devq_metrics_thist *h, uid_t uid,
				 int code, uint64_t client_submit, uint64_t received,
				 uint64_t handoff, uint64_t device_start, uint64_t device_end,
				 uint64_t observed)
{
	if (!buckets_ready)
		fill_all();
	op_done(m, uid, code, client_submit, handoff, device_start, device_end, observed);
	if (h)
		tenant_op(h, received, device_start, device_end, observed);
}
