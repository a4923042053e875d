/* SPDX-License-Identifier: Apache-2.0 */
/* Counters for `devctl metrics` and `devctl status --json`: failed ops by
 * code, device busy time, per-user counts and phase histograms.  Updated on
 * the loop thread as each completion is observed; sent in Status. */
#ifndef DEVQ_METRICS_H
#define DEVQ_METRICS_H

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

/* Both of the above in one pass, as the loop thread sees each completion:
 * h is the op's tenant's histograms, or NULL for an op of no tenant. */
void devq_metrics_op_done_tenant(struct devq_metrics *m, struct devq_metrics_thist *h, uid_t uid,
				 int code, uint64_t client_submit, uint64_t received,
				 uint64_t handoff, uint64_t device_start, uint64_t device_end,
				 uint64_t observed);

#endif
