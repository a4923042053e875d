/* Test-only fault hooks for the watchdog tests, linked only into
 * tests/devqd-faults (never into the installed devqd) with
 *   -Wl,--wrap=devq_server_run,--wrap=devq_on_complete
 * SIGUSR1 wedges the loop thread; SIGUSR2 makes the next completion block
 * the device thread that reports it.  Each hook announces itself on
 * $NOTIFY_SOCKET first, so a test knows the fault is in place before it
 * watches the pings stop. */
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#include <systemd/sd-daemon.h>

#include "daemon.h"

int __real_devq_server_run(struct devq_daemon *d);
int __wrap_devq_server_run(struct devq_daemon *d);
void __real_devq_on_complete(void *ud, struct devq_bop *bop);
void __wrap_devq_on_complete(void *ud, struct devq_bop *bop);

static atomic_bool wedge_completions;
static uv_signal_t sig_loop, sig_cmpl;

static void block_forever(void)
{
	for (;;)
		pause();
}

static void on_wedge_loop(uv_signal_t *h, int signum)
{
	(void)h;
	(void)signum;
	sd_notify(0, "DEVQ_TEST_FAULT=loop");
	block_forever();
}

static void on_wedge_completions(uv_signal_t *h, int signum)
{
	(void)h;
	(void)signum;
	atomic_store(&wedge_completions, true);
	sd_notify(0, "DEVQ_TEST_FAULT=completions");
}

void __wrap_devq_on_complete(void *ud, struct devq_bop *bop)
{
	if (atomic_load(&wedge_completions))
		block_forever();
	__real_devq_on_complete(ud, bop);
}

int __wrap_devq_server_run(struct devq_daemon *d)
{
	uv_signal_init(d->loop, &sig_loop);
	uv_signal_init(d->loop, &sig_cmpl);
	uv_signal_start(&sig_loop, on_wedge_loop, SIGUSR1);
	uv_signal_start(&sig_cmpl, on_wedge_completions, SIGUSR2);
	/* The hooks must not keep a stopping daemon's loop alive. */
	uv_unref((uv_handle_t *)&sig_loop);
	uv_unref((uv_handle_t *)&sig_cmpl);
	return __real_devq_server_run(d);
}
