/* SPDX-License-Identifier: Apache-2.0 */
/* Fault hooks for the watchdog tests, armed only by --test-fault-injection:
 * SIGRTMIN+1 wedges the loop thread; SIGRTMIN+2 makes every later
 * completion block the device thread that reports it (SIGUSR1 is taken: it
 * logs resource counts).  Each hook announces itself on
 * $NOTIFY_SOCKET first, so a test knows the fault is in place before it
 * watches the watchdog pings stop. */
#include "server/testhooks.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "server/daemon.h"

#include "base/log.h"
#include "base/pool.h"
#include "core/session.h"

struct devq_testhooks {
	uv_signal_t loop_sig, cmpl_sig;
	unsigned open_handles;
};

/* Read by device threads: set once from the loop, never cleared. */
static atomic_bool wedge_completions;
static struct devq_testhooks *hooks;
static devq_complete_fn real_complete; /* set before device threads see the hook */

static void block_forever(void)
{
	for (;;)
		pause();
}

static void on_wedge_loop(uv_signal_t *h, int signum)
{
	(void)h;
	(void)signum;
	log_warn("test hook: wedging the loop");
	sd_notify(0, "DEVQ_TEST_FAULT=loop");
	block_forever();
}

static void on_wedge_completions(uv_signal_t *h, int signum)
{
	(void)h;
	(void)signum;
	log_warn("test hook: wedging the completion path");
	atomic_store(&wedge_completions, true);
	sd_notify(0, "DEVQ_TEST_FAULT=completions");
}

static void complete_hook(void *ud, struct devq_bop *bop)
{
	if (atomic_load(&wedge_completions))
		block_forever();
	real_complete(ud, bop);
}

int devq_testhooks_install(struct devq_daemon *d)
{
	if (!d->e.cfg.test_faults)
		return 0;
	struct devq_testhooks *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	hooks = t;
	/* No op has been submitted yet, so no device thread reads this. */
	real_complete = d->e.be->on_complete;
	d->e.be->on_complete = complete_hook;
	uv_signal_init(d->loop, &t->loop_sig);
	uv_signal_init(d->loop, &t->cmpl_sig);
	t->loop_sig.data = t->cmpl_sig.data = t;
	t->open_handles = 2;
	uv_signal_start(&t->loop_sig, on_wedge_loop, SIGRTMIN + 1);
	uv_signal_start(&t->cmpl_sig, on_wedge_completions, SIGRTMIN + 2);
	log_warn("test fault hooks armed: SIGRTMIN+1 wedges the loop, SIGRTMIN+2 the completions");
	return 0;
}

static void on_closed(uv_handle_t *h)
{
	struct devq_testhooks *t = h->data;
	if (--t->open_handles == 0)
		free(t);
}

void devq_testhooks_close(struct devq_daemon *d)
{
	struct devq_testhooks *t = hooks;
	if (!t)
		return;
	hooks = NULL;
	/* Stopping with nothing in flight: no device thread reads this now. */
	d->e.be->on_complete = real_complete;
	uv_close((uv_handle_t *)&t->loop_sig, on_closed);
	uv_close((uv_handle_t *)&t->cmpl_sig, on_closed);
}
