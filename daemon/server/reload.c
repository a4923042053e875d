/* SPDX-License-Identifier: Apache-2.0 */
/* The executable repository's loads (core/repo.h): the first one before
 * devqd serves, and a rescan on every SIGHUP.  A rescan reads files,
 * dlopens shared objects and loads device images, which can take long: it
 * runs on libuv's thread pool, and only its result is applied on the loop
 * (bounded: at most DEVQ_REPO_MAX executables compared and swapped).  A
 * SIGHUP during a rescan queues exactly one more. */
#include "server/reload.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/tname.h"
#include "core/repo.h"
#include "kernels.h"

struct devq_reload {
	uv_work_t work;
	struct devq_daemon *d;
	struct devq_repo_scan sc;
	char *dirs; /* the setting as the rescan started */
	int result;
	uint64_t t_start, t_scanned; /* CLOCK_MONOTONIC ns */
	bool running, again;
};

static void scan_work(uv_work_t *w)
{
	struct devq_reload *rl = w->data;
	rl->result = devq_repo_scan(rl->dirs, rl->d->e.be, &rl->sc);
	rl->t_scanned = devq_now_ns();
}

static void start(struct devq_reload *rl);

static void scan_done(uv_work_t *w, int status)
{
	struct devq_reload *rl = w->data;
	struct devq_daemon *d = rl->d;
	rl->running = false;
	if (status < 0 || rl->result < 0 || d->stopping) {
		if (status < 0 || rl->result < 0)
			log_err("executables: rescan failed: %s; what was served stays",
				status < 0 ? uv_strerror(status) : strerror(-rl->result));
		devq_repo_scan_discard(&rl->sc);
	} else {
		uint64_t t = devq_now_ns();
		devq_repo_apply(&d->e.repo, &rl->sc);
		log_info("executables: rescan took %.1f ms on the thread pool, %.1f us on the loop",
			 (double)(rl->t_scanned - rl->t_start) / 1e6, (double)(devq_now_ns() - t) / 1e3);
	}
	if (rl->again && !d->stopping) {
		rl->again = false;
		start(rl);
	}
}

static void start(struct devq_reload *rl)
{
	struct devq_daemon *d = rl->d;
	free(rl->dirs);
	rl->dirs = d->e.cfg.executables ? strdup(d->e.cfg.executables) : NULL;
	if (d->e.cfg.executables && !rl->dirs) {
		log_err("executables: out of memory; not rescanned");
		return;
	}
	devq_repo_scan_prepare(&d->e.repo, &rl->sc);
	rl->work.data = rl;
	rl->t_start = devq_now_ns();
	/* libuv starts its thread pool inside the first uv_queue_work, from
	 * this thread, and a new thread inherits its creator's name: the
	 * pool's threads are named "devqd-pool" that way (libuv names none),
	 * and the loop thread gets its own name ("devqd") back at once. */
	static bool pool_named;
	char own[16];
	if (!pool_named)
		devq_tname_push("devqd-pool", own);
	int r = uv_queue_work(d->loop, &rl->work, scan_work, scan_done);
	if (!pool_named)
		devq_tname_pop(own);
	pool_named = true;
	if (r < 0) {
		log_err("executables: rescan: %s", uv_strerror(r));
		devq_repo_scan_discard(&rl->sc);
		return;
	}
	rl->running = true;
}

static struct devq_reload *state(struct devq_daemon *d)
{
	if (!d->reload) {
		d->reload = calloc(1, sizeof(*d->reload));
		if (d->reload)
			d->reload->d = d;
	}
	return d->reload;
}

int devq_reload_initial(struct devq_daemon *d)
{
	struct devq_reload *rl = state(d);
	if (!rl)
		return -ENOMEM;
	devq_repo_scan_prepare(&d->e.repo, &rl->sc);
	int r = devq_repo_scan(d->e.cfg.executables, d->e.be, &rl->sc);
	if (r < 0) {
		devq_repo_scan_discard(&rl->sc);
		return r;
	}
	devq_repo_apply(&d->e.repo, &rl->sc);
	return 0;
}

void devq_reload_executables(struct devq_daemon *d)
{
	struct devq_reload *rl = state(d);
	if (!rl) {
		log_err("executables: out of memory; not rescanned");
		return;
	}
	if (rl->running) {
		rl->again = true;
		return;
	}
	start(rl);
}


void devq_reload_fini(struct devq_daemon *d)
{
	if (!d->reload)
		return;
	free(d->reload->dirs);
	free(d->reload);
	d->reload = NULL;
}
