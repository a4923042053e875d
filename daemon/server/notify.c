/* SPDX-License-Identifier: Apache-2.0 */
/* sd_notify for devqd, and SIGHUP's reload that it announces.  Both
 * timers run on the loop thread, so a wedged
 * loop stops the watchdog pings by itself.  A wedged device or completion
 * thread does not stop the loop, so the watchdog tick also checks progress:
 * with ops in flight, some op must complete, or a sliced host op finish a
 * slice, within the stall timeout (an op that cannot be stopped is bounded
 * by the maximum op duration, which then sets the floor; a sliced one
 * finishes a slice every few ms, so a healthy device never goes that long
 * without progress).  When none does, the pings stop and systemd
 * restarts the daemon (WatchdogSec= in devqd.service). */
#include "server/notify.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <systemd/sd-daemon.h>

#include "base/config.h"
#include "server/daemon.h"

#include "base/log.h"
#include "base/pool.h"
#include "core/session.h"
#include "server/reload.h"
#include "server/testhooks.h"

#define STATUS_PERIOD_MS 1000

struct devq_notify {
	struct devq_daemon *d;
	uv_timer_t status_timer, wd_timer;
	uv_signal_t hup;
	char reload_error[256]; /* the last reload's failure, until one works */
	unsigned open_handles;
	uint64_t wd_usec;         /* 0: no watchdog */
	uint64_t last_progress;   /* ops_completed when last seen moving */
	uint64_t progress_at;     /* when it last moved (or work began) */
	bool stalled;
	char last_status[512];
};

static bool have_manager(void)
{
	const char *e = getenv("NOTIFY_SOCKET");
	return e && *e;
}

static void format_status(const struct devq_daemon *d, char *out, size_t len)
{
	unsigned sessions = 0;
	for (const struct devq_session *s = d->e.sessions; s; s = s->next)
		sessions += s->connected;
	int n = snprintf(out, len,
			 "%ssessions %u, ops in flight %llu, pinned %.1f MiB; backend %s (%s)",
			 d->stopping ? "stopping: " : "", sessions,
			 (unsigned long long)d->e.ops_in_flight,
			 (double)d->e.bytes_mapped / (1024.0 * 1024.0), d->e.be->name, d->e.be->device);
	if (n > 0 && (size_t)n < len && d->e.backend_note[0])
		n += snprintf(out + n, len - (size_t)n, "; %s", d->e.backend_note);
	char refused[160];
	if (n > 0 && (size_t)n < len &&
	    devq_culprit_describe(&d->culprits, &d->e.cfg, (int64_t)time(NULL), refused,
				  sizeof(refused)))
		n += snprintf(out + n, len - (size_t)n, "; %s", refused);
	if (n > 0 && (size_t)n < len && d->notify && d->notify->reload_error[0])
		snprintf(out + n, len - (size_t)n, "; reload failed: %s", d->notify->reload_error);
}

static void send_status(struct devq_notify *n, bool force)
{
	char st[sizeof(n->last_status)];
	format_status(n->d, st, sizeof(st));
	if (n->stalled)
		snprintf(st, sizeof(st), "device stuck: %llu ops in flight, none completed for %llu s",
			 (unsigned long long)n->d->e.ops_in_flight,
			 (unsigned long long)((devq_now_ns() - n->progress_at) / 1000000000ull));
	if (!force && !strcmp(st, n->last_status))
		return;
	memcpy(n->last_status, st, sizeof(st));
	sd_notifyf(0, "STATUS=%s", st);
}

static void on_status_tick(uv_timer_t *t)
{
	send_status(t->data, false);
}

/* True while the device makes progress (or has nothing to do).  Progress
 * is a completion or a finished slice of a sliced host op (a long gemm
 * moves on every few ms without completing); bulk work starved of CPU by
 * other processes (it runs below them: backend cpu_starved) is waiting,
 * not stuck. */
static bool device_alive(struct devq_notify *n)
{
	struct devq_daemon *d = n->d;
	struct devq_backend *be = d->e.be;
	uint64_t now = devq_now_ns();
	uint64_t progress = d->e.ops_completed + atomic_load(&be->slices);
	/* Bulk work that waited for a CPU since the last look (other
	 * processes took the cores: it runs below them) is not stuck: the
	 * stall clock starts again.  Asked only while nothing moves. */
	if (d->e.ops_in_flight == 0 || progress != n->last_progress ||
	    (be->ops->cpu_starved && be->ops->cpu_starved(be))) {
		n->last_progress = progress;
		n->progress_at = now;
		if (n->stalled)
			log_warn("device moving again; watchdog pings resume");
		n->stalled = false;
		d->e.device_stalled = false;
		return true;
	}
	/* Never shorter than one op may legitimately run without progress:
	 * max-op-ms while an op that cannot be stopped before its end might
	 * be running (a CPU or CUDA kernel, an unsliced host executable, a
	 * slice not known to be short).  Ops that run in short slices show
	 * progress every slice: for them the stall timeout alone. */
	uint64_t limit = d->e.cfg.stall_ns;
	bool only_sliced = atomic_load(&be->sliced_running) > 0 &&
			   atomic_load(&be->unsliced_running) == 0;
	if (!only_sliced && limit < d->e.cfg.max_op_ns + 1000000000ull)
		limit = d->e.cfg.max_op_ns + 1000000000ull;
	if (now - n->progress_at <= limit)
		return true;
	if (!n->stalled)
		log_err("device stuck: %llu ops in flight and none completed for %llu ms%s",
			(unsigned long long)d->e.ops_in_flight,
			(unsigned long long)((now - n->progress_at) / 1000000),
			n->wd_usec ? "; stopping watchdog pings" : "");
	n->stalled = true;
	d->e.device_stalled = true;
	return false;
}

static void on_wd_tick(uv_timer_t *t)
{
	struct devq_notify *n = t->data;
	bool alive = device_alive(n);
	if (!n->wd_usec) /* no watchdog: the check only feeds Status */
		return;
	if (alive)
		sd_notify(0, "WATCHDOG=1");
	else
		send_status(n, false);
}

/* SIGHUP: the limits devqd reads at use time follow the file again (see
 * devq_config_reload); the manager sees RELOADING=1, then READY=1. */
static void on_hup(uv_signal_t *h, int signum)
{
	struct devq_notify *n = h->data;
	struct devq_daemon *d = n->d;
	(void)signum;
	sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading the configuration",
		   (unsigned long long)(devq_now_ns() / 1000));
	char err[sizeof(n->reload_error)];
	int r = devq_config_reload(&d->e.cfg, err, sizeof(err));
	if (r < 0) {
		log_err("reload: %s; the running configuration stays", err);
		memcpy(n->reload_error, err, sizeof(err));
	} else {
		n->reload_error[0] = '\0';
		/* Derived as main.c derives it at start. */
		d->e.cfg.stop_grace_ns = d->e.cfg.max_op_ns + 2ull * 1000 * 1000 * 1000;
		devq_engine_limits(&d->e);
		devq_log_set_level(DEVQ_LOG_NOTICE + d->e.cfg.verbose + devq_config_verbose_flags());
		/* At the default level: what the reload changed, for the journal. */
		log_notice("reload: done; ops up to %llu ms, buffers up to %llu MiB, "
			   "%u queues per session",
			   (unsigned long long)(d->e.cfg.max_op_ns / 1000000),
			   (unsigned long long)(d->e.cfg.max_buffer_bytes >> 20), d->e.cfg.max_queues);
	}
	/* Whether or not the file changed: the repository is rescanned off
	 * the loop, and applied when that is done (reload.c). */
	devq_reload_executables(d);
	char st[sizeof(n->last_status)];
	format_status(d, st, sizeof(st));
	memcpy(n->last_status, st, sizeof(st));
	sd_notifyf(0, "READY=1\nSTATUS=%s", st);
}

int devq_notify_ready(struct devq_daemon *d)
{
	struct devq_notify *n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->d = d;
	n->progress_at = devq_now_ns();
	d->notify = n;
	uv_timer_init(d->loop, &n->status_timer);
	uv_timer_init(d->loop, &n->wd_timer);
	uv_signal_init(d->loop, &n->hup);
	n->open_handles = 3;
	n->status_timer.data = n->wd_timer.data = n->hup.data = n;
	uv_signal_start(&n->hup, on_hup, SIGHUP);
	if (devq_testhooks_install(d) < 0)
		return -ENOMEM;

	char st[sizeof(n->last_status)];
	format_status(d, st, sizeof(st));
	memcpy(n->last_status, st, sizeof(st));
	/* Ready only now: the backend is up and the socket is being served. */
	sd_notifyf(0, "READY=1\nSTATUS=%s", st);
	if (have_manager())
		uv_timer_start(&n->status_timer, on_status_tick, STATUS_PERIOD_MS, STATUS_PERIOD_MS);
	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) > 0 && usec) {
		n->wd_usec = usec;
		uint64_t half_ms = usec / 2000 ? usec / 2000 : 1;
		log_info("watchdog: pinging every %llu ms", (unsigned long long)half_ms);
		sd_notify(0, "WATCHDOG=1");
		uv_timer_start(&n->wd_timer, on_wd_tick, half_ms, half_ms);
	} else {
		/* Without a watchdog the same check still runs, once a second,
		 * so that Status (devq_device_stalled) tells a stuck device;
		 * unreferenced: it never keeps the loop alive. */
		uv_timer_start(&n->wd_timer, on_wd_tick, STATUS_PERIOD_MS, STATUS_PERIOD_MS);
		uv_unref((uv_handle_t *)&n->wd_timer);
	}
	return 0;
}

void devq_notify_stopping(struct devq_daemon *d)
{
	sd_notify(0, "STOPPING=1");
	if (d->notify)
		send_status(d->notify, true);
}

static void on_closed(uv_handle_t *h)
{
	struct devq_notify *n = h->data;
	if (--n->open_handles == 0)
		free(n);
}

void devq_notify_close(struct devq_daemon *d)
{
	struct devq_notify *n = d->notify;
	if (!n)
		return;
	d->notify = NULL;
	devq_testhooks_close(d);
	uv_close((uv_handle_t *)&n->status_timer, on_closed);
	uv_close((uv_handle_t *)&n->wd_timer, on_closed);
	uv_close((uv_handle_t *)&n->hup, on_closed);
}
