/* SPDX-License-Identifier: Apache-2.0 */
/* What the op recorder costs: ops/s through a real devqd with recording off
 * (--trace-records 0), on but idle (nobody tracing), and on while a tracer
 * pulls every new op ten times a second (heavier than devctl top, which
 * asks once a second, or devctl trace --duration, which asks once at the
 * end).  Workload: one client, batches of 64 tiny fills on one queue.
 * Rounds interleave the three modes and each mode reports its median, so
 * a noisy machine hits all three alike.
 *
 *   trace_overhead --devqd build/devqd [--rounds N] [--ops N] [--quick] */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "devq.h"

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct daemon {
	pid_t pid;
	char dir[64], sock[128];
};

static int daemon_start(struct daemon *d, const char *bin, const char *records)
{
	snprintf(d->dir, sizeof(d->dir), "/tmp/devq-bench-trace-XXXXXX");
	if (!mkdtemp(d->dir))
		return -errno;
	snprintf(d->sock, sizeof(d->sock), "%s/devqd.sock", d->dir);
	d->pid = fork();
	if (d->pid < 0)
		return -errno;
	if (d->pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		if (fd >= 0)
			dup2(fd, 2);
		execl(bin, bin, "--socket", d->sock, "--backend", "cpu", "--trace-records", records,
		      (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 2000; i++) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", d->sock);
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		if (fd >= 0)
			close(fd);
		if (ok)
			return 0;
		usleep(5000);
	}
	return -ETIMEDOUT;
}

static void daemon_stop(struct daemon *d)
{
	if (d->pid > 0) {
		kill(d->pid, SIGTERM);
		waitpid(d->pid, NULL, 0);
	}
	unlink(d->sock);
	rmdir(d->dir);
}

/* A tracer: pulls the ops completed since its last pull every 100 ms. */
static pid_t tracer_start(const char *sock)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	devq *q = NULL;
	if (devq_connect(sock, "bench tracer", &q) < 0)
		_exit(1);
	uint64_t since = 0, pulled = 0;
	for (;;) {
		struct devq_trace *t;
		struct devq_trace_query qy = { .all = true, .since_ns = since };
		if (devq_trace_get(q, &qy, &t) < 0)
			_exit(2);
		since = t->now_ns;
		pulled += t->nops;
		devq_trace_free(t);
		usleep(100000);
	}
}

/* ops/s of n tiny fills in batches of 64. */
static double run_load(const char *sock, uint64_t n)
{
	devq *q = NULL;
	if (devq_connect(sock, "bench load", &q) < 0) {
		fprintf(stderr, "trace_overhead: %s\n", q ? devq_last_error(q) : "connect");
		exit(1);
	}
	struct devq_buffer *b;
	if (devq_buffer_create(q, 4096, DEVQ_BUFFER_SHARED, &b) < 0 || devq_queue_open(q, 1) < 0) {
		fprintf(stderr, "trace_overhead: %s\n", devq_last_error(q));
		exit(1);
	}
	struct devq_op ops[64];
	for (int i = 0; i < 64; i++)
		ops[i] = (struct devq_op){ .queue = 1, .kind = DEVQ_OP_FILL, .dst = b, .size = 4,
					   .pattern = (uint32_t)i };
	uint64_t t0 = now_ns(), sent = 0, pts[64];
	while (sent < n) {
		if (devq_submit(q, ops, 64, pts) < 0) {
			fprintf(stderr, "trace_overhead: %s\n", devq_last_error(q));
			exit(1);
		}
		sent += 64;
		/* At most 8 batches in flight: a steady pipeline, no flooding. */
		if (pts[63] > 512 && devq_wait(q, 1, pts[63] - 512, 60000, NULL) < 0) {
			fprintf(stderr, "trace_overhead: %s\n", devq_last_error(q));
			exit(1);
		}
	}
	if (devq_wait(q, 1, pts[63], 60000, NULL) < 0) {
		fprintf(stderr, "trace_overhead: %s\n", devq_last_error(q));
		exit(1);
	}
	double rate = (double)sent / ((double)(now_ns() - t0) / 1e9);
	devq_disconnect(q);
	return rate;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	const char *bin = "build/devqd";
	int rounds = 10;
	uint64_t ops = 200000;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--devqd") && i + 1 < argc)
			bin = argv[++i];
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
			ops = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--quick")) {
			rounds = 5;
			ops = 50000;
		} else {
			fprintf(stderr, "usage: trace_overhead [--devqd PATH] [--rounds N] [--ops N] "
					"[--quick]\n");
			return 2;
		}
	}
	if (rounds < 1 || ops < 64) {
		fprintf(stderr, "trace_overhead: --rounds >= 1 and --ops >= 64\n");
		return 2;
	}
	struct daemon off = { 0 }, on = { 0 };
	if (daemon_start(&off, bin, "0") < 0 || daemon_start(&on, bin, "16384") < 0) {
		fprintf(stderr, "trace_overhead: cannot start %s\n", bin);
		daemon_stop(&off);
		daemon_stop(&on);
		return 1;
	}
	static const char *const names[] = { "recorder off (--trace-records 0)",
					      "recorder on, nobody tracing",
					      "recorder on, tracer pulling every 100 ms" };
	double *r[3];
	for (int m = 0; m < 3; m++)
		r[m] = calloc((size_t)rounds, sizeof(double));
	for (int k = 0; k < rounds; k++) {
		r[0][k] = run_load(off.sock, ops);
		r[1][k] = run_load(on.sock, ops);
		pid_t tp = tracer_start(on.sock);
		usleep(50000);
		r[2][k] = run_load(on.sock, ops);
		kill(tp, SIGKILL);
		waitpid(tp, NULL, 0);
	}
	printf("trace_overhead: %d interleaved rounds of %" PRIu64
	       " fill ops (batches of 64), medians\n",
	       rounds, ops);
	printf("%-44s %12s %12s %12s %9s\n", "mode", "median op/s", "min op/s", "max op/s",
	       "vs off");
	double base = 0;
	for (int m = 0; m < 3; m++) {
		qsort(r[m], (size_t)rounds, sizeof(double), cmp_d);
		double med = rounds % 2 ? r[m][rounds / 2]
					: (r[m][rounds / 2 - 1] + r[m][rounds / 2]) / 2;
		if (m == 0)
			base = med;
		printf("%-44s %12.0f %12.0f %12.0f %+8.1f%%\n", names[m], med, r[m][0],
		       r[m][rounds - 1], 100.0 * (med - base) / base);
		free(r[m]);
	}
	daemon_stop(&off);
	daemon_stop(&on);
	return 0;
}
