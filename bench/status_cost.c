/* SPDX-License-Identifier: Apache-2.0 */
/* What a status request costs devqd's loop thread: the CPU time of the
 * loop (the daemon's main thread, /proc/PID/task/PID/schedstat, in ns) over
 * back-to-back GetStatus requests on one connection, with 64 sessions of
 * 16 granted tenants connected, each with a queue and a completed op: the
 * request a metrics scrape makes (no per-session rows, what devctl metrics
 * and devq-exporter ask by default) and the full one (--sessions, devctl
 * status).  Target: at most 2 ms of loop CPU per request (issue 44).
 * Needs root (the grants).
 *
 *   status_cost [--requests N] [--quick]   JSON: $DEVQ_BENCH_OUT/status_cost.json */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "devq.h"

#define TENANTS 16
#define SESSIONS 64

static uint64_t loop_cpu_ns(pid_t pid)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/task/%d/schedstat", (int)pid, (int)pid);
	FILE *f = fopen(p, "r");
	unsigned long long ns = 0;
	if (!f || fscanf(f, "%llu", &ns) != 1)
		ns = 0;
	if (f && fclose(f) != 0)
		perror("status_cost: close");
	return ns;
}

static int fail(const char *what, devq *q)
{
	fprintf(stderr, "status_cost: %s: %s\n", what, q ? devq_last_error(q) : strerror(errno));
	return 1;
}

/* CPU ns of the loop per request over n requests with flags. */
static double per_request(devq *q, pid_t pid, unsigned flags, int n, double *wall_us)
{
	uint64_t c0 = loop_cpu_ns(pid), t0 = bu_now_ns();
	for (int i = 0; i < n; i++) {
		struct devq_status *s;
		if (devq_get_status_opts(q, flags, &s) < 0)
			return -1;
		devq_status_free(s);
	}
	uint64_t c1 = loop_cpu_ns(pid), t1 = bu_now_ns();
	*wall_us = (double)(t1 - t0) / 1e3 / n;
	return (double)(c1 - c0) / n;
}

int main(int argc, char **argv)
{
	int requests = 1000;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			requests = 200;
		else if (!strcmp(argv[i], "--requests") && i + 1 < argc)
			requests = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: status_cost [--requests N] [--quick]\n");
			return 2;
		}
	}
	if (geteuid() != 0) {
		fprintf(stderr, "status_cost: needs root (it grants %d tenants)\n", TENANTS);
		return 77;
	}
	struct bu_daemon d;
	if (bu_daemon_start(&d) < 0)
		return fail("devqd", NULL);
	devq *q = NULL;
	if (devq_connect(d.sock, "status-cost", &q) < 0)
		return fail("connect", q);
	static devq *s[SESSIONS];
	for (int t = 0; t < TENANTS; t++) {
		char name[32];
		snprintf(name, sizeof(name), "bench_%d", t);
		struct devq_grant_request r = { .tenant = name, .uid = getuid(), .shares = 1 + t % 4,
						.of = 4 };
		struct devq_grant g;
		if (devq_admin_grant(q, &r, &g) < 0)
			return fail("grant", q);
		for (int k = 0; k < SESSIONS / TENANTS; k++) {
			devq **x = &s[t * (SESSIONS / TENANTS) + k];
			const struct devq_exec *e;
			if (devq_connect(g.socket, "status-cost-session", x) < 0 ||
			    devq_queue_open(*x, 1) < 0 || devq_exec_lookup(*x, "spin", &e) < 0)
				return fail("session", *x);
			struct devq_arg a = { .name = "ns", .type = DEVQ_ARG_U64, .v.u64 = 1000 };
			struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = e,
					      .args = &a, .nargs = 1 };
			uint64_t pt;
			if (devq_submit(*x, &op, 1, &pt) < 0 || devq_wait(*x, 1, pt, 10000, NULL) < 0)
				return fail("op", *x);
		}
	}
	double w0, w1;
	/* Warm-up, then the two kinds interleaved twice: the better of each. */
	per_request(q, d.pid, 0, requests / 10 + 1, &w0);
	double scrape = 1e18, full = 1e18, ws = 0, wf = 0;
	for (int round = 0; round < 2; round++) {
		double a = per_request(q, d.pid, DEVQ_STATUS_NO_SESSIONS, requests, &w0);
		double b = per_request(q, d.pid, 0, requests, &w1);
		if (a < 0 || b < 0)
			return fail("status", q);
		if (a < scrape) {
			scrape = a;
			ws = w0;
		}
		if (b < full) {
			full = b;
			wf = w1;
		}
	}
	bu_print_host();
	printf("status requests, %d back to back, %d sessions of %d tenants:\n", requests,
	       SESSIONS, TENANTS);
	printf("  scrape (no per-session rows): loop CPU %.1f us per request (round trip %.1f us)\n",
	       scrape / 1e3, ws);
	printf("  full (every session's rows):  loop CPU %.1f us per request (round trip %.1f us)\n",
	       full / 1e3, wf);
	printf("  target: at most 2000 us of loop CPU per request: %s\n",
	       scrape <= 2e6 && full <= 2e6 ? "met" : "NOT MET");
	struct bu_json j;
	if (bu_json_open(&j, "status_cost") == 0) {
		bu_json_host(&j);
		bu_json_key_num(&j, "requests", requests);
		bu_json_key_num(&j, "sessions", SESSIONS);
		bu_json_key_num(&j, "tenants", TENANTS);
		bu_json_key_num(&j, "loop_cpu_ns_per_scrape_request", scrape);
		bu_json_key_num(&j, "loop_cpu_ns_per_full_request", full);
		bu_json_key_num(&j, "round_trip_us_scrape", ws);
		bu_json_key_num(&j, "round_trip_us_full", wf);
		bu_json_close(&j);
	}
	for (int i = 0; i < SESSIONS; i++)
		devq_disconnect(s[i]);
	for (int t = 0; t < TENANTS; t++) {
		char name[32];
		snprintf(name, sizeof(name), "bench_%d", t);
		struct devq_evict_result er;
		if (devq_admin_evict(q, name, 0, &er) < 0)
			fail("evict", q);
	}
	devq_disconnect(q);
	return bu_daemon_stop(&d) == 0 ? 0 : 1;
}
