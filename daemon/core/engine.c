/* SPDX-License-Identifier: Apache-2.0 */
/* The engine's lifetime; see engine.h. */
#include "core/tenant.h"
#include "core/engine.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/lock.h"
#include "base/log.h"
#include "core/job.h"
#include "core/quota.h"
#include "core/sched.h"
#include "core/trace.h"
#include "device/select.h"

static void free_parts(struct devq_engine *e)
{
	free(e->sigs);
	free(e->costs);
	free(e->stream_load);
	free(e->stream_last);
	devq_fair_free(&e->fair);
	e->sigs = NULL;
	e->costs = NULL;
	e->stream_load = NULL;
	e->stream_last = NULL;
}

static int load_manifest(struct devq_engine *e)
{
	e->sigs = calloc(devq_nkernels, sizeof(*e->sigs));
	e->costs = calloc(devq_nkernels, sizeof(*e->costs));
	if (!e->sigs || !e->costs)
		return -ENOMEM;
	for (size_t i = 0; i < devq_nkernels; i++) {
		char err[160];
		if (devq_sig_parse(devq_kernels[i].signature, &e->sigs[i], err, sizeof(err)) < 0) {
			log_err("manifest: %s: %s", devq_kernels[i].name, err);
			return -EINVAL;
		}
		/* Compiled once here: a submit only evaluates it. */
		if (devq_kernels[i].cost &&
		    devq_cost_compile(devq_kernels[i].cost, &e->sigs[i], &e->costs[i], err,
				      sizeof(err)) < 0) {
			log_err("manifest: %s: cost: %s", devq_kernels[i].name, err);
			return -EINVAL;
		}
	}
	return 0;
}

void devq_engine_limits(struct devq_engine *e)
{
	atomic_store(&e->be->max_op_ns, e->cfg.max_op_ns);
	atomic_store(&e->be->slice_ns,
		     e->cfg.slice_ns ? e->cfg.slice_ns : DEVQ_SLICE_NS_DEFAULT);
}

int devq_engine_init(struct devq_engine *e, const struct devq_config *cfg,
		     const struct devq_engine_events *ev, devq_backend_open_fn open)
{
	memset(e, 0, sizeof(*e));
	e->cfg = *cfg;
	e->ev = *ev;
	devq_quota_defaults(&e->cfg);
	char err[256];
	if (devq_fair_init(&e->fair, e->cfg.fair_shares, err, sizeof(err)) < 0) {
		log_err("%s", err);
		return -EINVAL;
	}
	int r = load_manifest(e);
	if (r < 0) {
		if (r == -ENOMEM)
			log_err("out of memory");
		free_parts(e);
		return r == -EINVAL ? -EIO : r; /* a broken manifest is not a setting */
	}
	atomic_init(&e->cmpl_lock.v, 0);
	e->cmpl_parked = true; /* no poll yet: a deferred completion wakes the loop */
	e->loop_thread = pthread_self();
	struct devq_backend_config bc = { .streams = e->cfg.streams,
					  .high_streams = e->cfg.priority_streams,
					  .on_complete = devq_sched_on_complete,
					  .core_pick = devq_fair_core_pick,
					  .ud = e };
	r = open ? open(&bc, &e->be)
		 : devq_select_backend(&e->cfg, &bc, &e->be, e->backend_note,
				       sizeof(e->backend_note));
	if (r < 0) {
		free_parts(e);
		return r;
	}
	devq_engine_limits(e);
	e->stream_load = calloc(e->be->streams, sizeof(*e->stream_load));
	e->stream_last = calloc(e->be->streams, sizeof(*e->stream_last));
	if (!e->stream_load || !e->stream_last ||
	    devq_fair_start(&e->fair, e->be->streams, e->be->high_streams, e->cfg.fair_window_ns,
			    e->cfg.fair_k) < 0 ||
	    devq_trace_ring_new(&e->cfg, e->be->streams, &e->trace) < 0) {
		log_err("out of memory");
		e->be->ops->destroy(e->be);
		free_parts(e);
		return -ENOMEM;
	}
	/* devqd.conf's rate key, for the built-ins now and for repository
	 * executables as they are served (devq_repo_apply). */
	for (size_t i = 0; i < devq_nkernels; i++)
		e->fair.est_builtin[i].pinned = devq_config_rate(e->cfg.rate, devq_kernels[i].name);
	devq_repo_init(&e->repo, e->be);
	e->repo.rates = e->cfg.rate;
	(void)devq_repo_builtins(e->be); /* logs what it could not load */
	e->start_ns = devq_now_ns();
	return 0;
}

void devq_engine_fini(struct devq_engine *e)
{
	for (unsigned i = 0; i < e->be->streams; i++)
		devq_job_unref(e->stream_last[i]);
	devq_repo_fini(&e->repo); /* unloads device images: before the backend goes */
	e->be->ops->destroy(e->be);
	devq_trace_ring_free(e->trace);
	devq_tenant_free_all(e);
	free_parts(e);
	devq_job_fini();
}
