/* SPDX-License-Identifier: Apache-2.0 */
/* tests/repo.sh's client: looks scale_u32 up and runs it once (k=3 over
 * 1, 2, 3, 4), then removes DIR/scale_u32.exec, sends devqd (PID) SIGHUP,
 * waits until a fresh connection no longer finds scale_u32, and submits
 * again by the id it looked up first.  Prints both outcomes; exit status
 * 0 when the second was refused with not_found.
 *
 *   repo_client DIR PID */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devq.h"

static int run(devq *q, const struct devq_exec *e, struct devq_buffer *x, struct devq_completion *c)
{
	uint32_t *v = x->map;
	for (unsigned i = 0; i < 4; i++)
		v[i] = i + 1;
	struct devq_arg args[] = { DEVQ_U64("n", 4), DEVQ_U32("k", 3), DEVQ_BUF("x", x, 0) };
	struct devq_op op = { .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = e, .args = args,
			      .nargs = 3 };
	uint64_t point;
	if (devq_submit(q, &op, 1, &point) < 0 || devq_wait(q, 0, point, 10000, c) < 0)
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: repo_client DIR PID\n");
		return 2;
	}
	devq *q;
	const struct devq_exec *e;
	struct devq_buffer *x;
	struct devq_completion c;
	if (devq_connect(NULL, "repo-client", &q) < 0 || devq_exec_lookup(q, "scale_u32", &e) < 0 ||
	    devq_buffer_create(q, 16, DEVQ_BUFFER_SHARED, &x) < 0 || devq_queue_open(q, 0) < 0 ||
	    run(q, e, x, &c) < 0) {
		fprintf(stderr, "repo_client: %s\n", q ? devq_last_error(q) : "out of memory");
		return 1;
	}
	const uint32_t *v = x->map;
	const struct devq_exec_info *info = devq_exec_info(q, e);
	printf("first: %s %u %u %u %u (id %u, %s, %s)\n", devq_code_name(c.code), v[0], v[1], v[2],
	       v[3], e->id, info ? info->source : "?", info ? info->backends : "?");
	char path[4096];
	snprintf(path, sizeof(path), "%s/scale_u32.exec", argv[1]);
	if (unlink(path) < 0 || kill((pid_t)atoi(argv[2]), SIGHUP) < 0) {
		perror("repo_client");
		return 1;
	}
	bool gone = false;
	for (int i = 0; i < 500 && !gone; i++) {
		devq *p;
		const struct devq_exec *pe;
		if (devq_connect(NULL, "repo-client-poll", &p) < 0) {
			fprintf(stderr, "repo_client: %s\n", p ? devq_last_error(p) : "connect");
			return 1;
		}
		gone = devq_exec_lookup(p, "scale_u32", &pe) < 0;
		devq_disconnect(p);
		if (!gone) {
			struct timespec ts = { 0, 20 * 1000 * 1000 };
			nanosleep(&ts, NULL);
		}
	}
	if (!gone) {
		fprintf(stderr, "repo_client: scale_u32 still served 10 s after SIGHUP\n");
		return 1;
	}
	if (run(q, e, x, &c) < 0) {
		fprintf(stderr, "repo_client: %s\n", devq_last_error(q));
		return 1;
	}
	printf("after removal: %s: %s\n", devq_code_name(c.code), c.message);
	devq_disconnect(q);
	return c.code == DEVQ_E_NOT_FOUND ? 0 : 1;
}
