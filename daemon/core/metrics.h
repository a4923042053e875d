/* SPDX-License-Identifier: Apache-2.0 */
/* Counters for `devctl metrics` and `devctl status --json`: failed ops by
 * code, device busy time, per-user counts and phase histograms.  Updated on
 * the loop thread as each completion is observed; sent in Status. */
#ifndef DEVQ_METRICS_H
#define DEVQ_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DEVQ_METRICS_CODES 16
#define DEVQ_METRICS_PHASES 4 /* submit, queued, device, sync */
#define DEVQ_METRICS_BOUNDS 14
/* Users counted one by one; the rest share the last slot (uid -1). */
#define DEVQ_METRICS_USERS 256

struct devq_metrics_user {
	uint32_t uid;
	uint64_t ops_completed, ops_failed, device_busy_ns;
};

struct devq_metrics {
	/* The slot devq_metrics_user_slot found last (NULL: none yet): a
	 * daemon's completions mostly come in runs of one user's. */
	struct devq_metrics_user *last_user;
	uint64_t op_errors[DEVQ_METRICS_CODES];
	uint64_t device_busy_ns;
	uint64_t hist[DEVQ_METRICS_PHASES][DEVQ_METRICS_BOUNDS + 1];
	uint64_t hist_sum[DEVQ_METRICS_PHASES], hist_count[DEVQ_METRICS_PHASES];
	struct devq_metrics_user users[DEVQ_METRICS_USERS];
	unsigned nusers;
};

/* Per-tenant op latency (devq_tenant_op_seconds): queued (devqd's
 * receipt -> device start), device (start -> end), total (receipt ->
 * completion queued to the client), on fixed buckets of 50 us to 60 s. */
#define DEVQ_METRICS_TPHASES 3
#define DEVQ_METRICS_TBOUNDS 14
struct devq_metrics_thist {
	uint64_t hist[DEVQ_METRICS_TPHASES][DEVQ_METRICS_TBOUNDS + 1];
	uint64_t sum[DEVQ_METRICS_TPHASES], count[DEVQ_METRICS_TPHASES];
};
extern const char *const devq_metrics_tphase_names[DEVQ_METRICS_TPHASES];
extern const uint64_t devq_metrics_tbounds_ns[DEVQ_METRICS_TBOUNDS];
/* One completed op of a tenant; a phase whose ends are missing or out of
 * order is left out, as in devq_metrics_op_done. */
void devq_metrics_tenant_op(struct devq_metrics_thist *h, uint64_t received,
			    uint64_t device_start, uint64_t device_end, uint64_t observed);

extern const char *const devq_metrics_phase_names[DEVQ_METRICS_PHASES];
extern const uint64_t devq_metrics_bounds_ns[DEVQ_METRICS_BOUNDS];

/* One completed op.  Timestamps as in Timing (CLOCK_MONOTONIC ns); a phase
 * whose ends are missing or out of order (a client clock of 0, an op that
 * never ran) is left out of its histogram. */
void devq_metrics_op_done(struct devq_metrics *m, uid_t uid, int code, uint64_t client_submit,
			  uint64_t handoff, uint64_t device_start, uint64_t device_end,
			  uint64_t observed);

/* What follows is inline: the loop thread counts every completion here,
 * and as a call with its ten arguments the work cost a quarter more. */

/* For each power of two 2^k, the first bucket whose bound is at least 2^k,
 * and that bucket's bound.  Consecutive bounds are at least 2x apart
 * (test_core's test_metrics_buckets_at_bounds asserts it), so [2^k,
 * 2^(k+1)) holds at most one of them: a value v there belongs to
 * first[k], or to the next bucket when v is above split[k] (a bound of
 * 2^(k+1) or more never splits, nor does the +Inf bucket).  One table per
 * set of bounds, the daemon's phases and the tenants', both filled on
 * first use (loop thread only, like every metric). */
struct devq_metrics_buckets {
	uint8_t first[64];
	uint64_t split[64];
};
extern struct devq_metrics_buckets devq_metrics_phase_buckets, devq_metrics_tenant_buckets;
extern bool devq_metrics_buckets_ready;
void devq_metrics_buckets_fill(void);

/* The bucket of v: the first bound at or above it, from its power of
 * two, a table look-up and one comparison, where a search of the fourteen
 * bounds costs several times that, at seven observations per completed op
 * (measured: bench/RESULTS.md, "Figures from the code's comments").  v = 0
 * reads the entry of 2^0, bucket 0, as it should. */
static inline __attribute__((always_inline)) unsigned
devq_metrics_bucket(const struct devq_metrics_buckets *b, uint64_t v)
{
	unsigned k = 63 - (unsigned)__builtin_clzll(v | 1);
	return b->first[k] + (v > b->split[k]);
}

static inline __attribute__((always_inline)) void
devq_metrics_observe(struct devq_metrics *m, int phase, uint64_t from, uint64_t to)
{
	/* to >= from > 0 implies to > 0: two tests, not three. */
	if (!from || to < from)
		return;
	uint64_t v = to - from;
	m->hist[phase][devq_metrics_bucket(&devq_metrics_phase_buckets, v)]++;
	m->hist_sum[phase] += v;
	m->hist_count[phase]++;
}

static inline __attribute__((always_inline)) void
devq_metrics_tobserve(struct devq_metrics_thist *h, int phase, uint64_t from, uint64_t to)
{
	if (!from || to < from) /* as in devq_metrics_observe */
		return;
	uint64_t v = to - from;
	h->hist[phase][devq_metrics_bucket(&devq_metrics_tenant_buckets, v)]++;
	h->sum[phase] += v;
	h->count[phase]++;
}

/* devq_metrics_tenant_op, tables filled. */
static inline __attribute__((always_inline)) void
devq_metrics_tenant_op_in(struct devq_metrics_thist *h, uint64_t received, uint64_t device_start,
			  uint64_t device_end, uint64_t observed)
{
	devq_metrics_tobserve(h, 0, received, device_start);
	devq_metrics_tobserve(h, 1, device_start, device_end);
	devq_metrics_tobserve(h, 2, received, observed);
}

/* uid's slot in m->users: found, added, or the overflow slot. */
struct devq_metrics_user *devq_metrics_user_slot(struct devq_metrics *m, uid_t uid);

/* Both of the above in one pass, as the loop thread sees each completion:
 * h is the op's tenant's histograms, or NULL for an op of no tenant. */
static inline void devq_metrics_op_done_tenant(struct devq_metrics *m,
					       struct devq_metrics_thist *h, uid_t uid, int code,
					       uint64_t client_submit, uint64_t received,
					       uint64_t handoff, uint64_t device_start,
					       uint64_t device_end, uint64_t observed)
{
	if (__builtin_expect(!devq_metrics_buckets_ready, 0))
		devq_metrics_buckets_fill();
	uint64_t busy = device_start && device_end > device_start ? device_end - device_start : 0;
	m->device_busy_ns += busy;
	if (code)
		m->op_errors[code > 0 && code < DEVQ_METRICS_CODES ? code : DEVQ_METRICS_CODES - 1]++;
	struct devq_metrics_user *u = m->last_user;
	if (!u || u->uid != (uint32_t)uid)
		u = devq_metrics_user_slot(m, uid);
	u->ops_completed++;
	u->ops_failed += code != 0;
	u->device_busy_ns += busy;
	devq_metrics_observe(m, 0, client_submit, handoff);
	devq_metrics_observe(m, 1, handoff, device_start);
	devq_metrics_observe(m, 2, device_start, device_end);
	devq_metrics_observe(m, 3, device_end, observed);
	if (h)
		devq_metrics_tenant_op_in(h, received, device_start, device_end, observed);
}

#endif
