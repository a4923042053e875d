/* SPDX-License-Identifier: Apache-2.0 */
/* Resource counts on SIGUSR1; see stats.h. */
#include "server/stats.h"

#include <dirent.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>

#include "server/daemon.h"

#include "base/log.h"
#include "base/pool.h"
#include "core/session.h"

static uv_signal_t usr1;
static bool started;

static int count_fds(void)
{
	DIR *dir = opendir("/proc/self/fd");
	if (!dir)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n - 1; /* not the directory's own fd */
}

static void on_usr1(uv_signal_t *h, int signum)
{
	struct devq_daemon *d = h->data;
	(void)signum;
	size_t sessions = 0;
	for (struct devq_session *s = d->e.sessions; s; s = s->next)
		sessions++;
	struct mallinfo2 mi = mallinfo2();
	/* Asked for explicitly, so not subject to the log level. */
	fprintf(stderr,
		"devqd: stats: sessions=%zu ops_in_flight=%llu buffers=%u bytes_mapped=%llu "
		"fds=%d heap_in_use=%zu heap_cached=%zu\n",
		sessions, (unsigned long long)d->e.ops_in_flight, d->e.nbufs,
		(unsigned long long)d->e.bytes_mapped, count_fds(), mi.uordblks + mi.hblkhd,
		devq_pool_cached_bytes());
}

int devq_stats_start(struct devq_daemon *d)
{
	int r = uv_signal_init(d->loop, &usr1);
	if (r < 0)
		return r;
	usr1.data = d;
	started = true;
	/* Not a reason to keep the loop running. */
	uv_unref((uv_handle_t *)&usr1);
	return uv_signal_start(&usr1, on_usr1, SIGUSR1);
}

void devq_stats_stop(void)
{
	if (started && !uv_is_closing((uv_handle_t *)&usr1))
		uv_close((uv_handle_t *)&usr1, NULL);
}
