/* SPDX-License-Identifier: Apache-2.0 */
/* devctl list (devqd's executables) and devctl status (its sessions,
 * tenants and totals). */
#include "devctl/status.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "devctl/metrics.h"
#include "devctl/util.h"
#include "devq.h"

void devctl_status_usage(FILE *f)
{
	fprintf(f, "  list [--json]       executables and their signatures\n"
		   "  status [--json]     sessions, queues, ops in flight, buffers and totals\n");
}

int devctl_list_main(const char *sock, int argc, char **argv)
{
	bool json = false;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = true;
		} else {
			devctl_errf("%s list: unknown argument '%s'\n", devctl_prog, argv[i]);
			return 2;
		}
	}
	devq *q;
	int r = devctl_connect(sock, &q);
	if (r)
		return r;
	const struct devq_exec *l;
	size_t n;
	if (devq_exec_list(q, &l, &n) < 0) {
		devctl_errf("%s: %s\n", devctl_prog, devq_last_error(q));
		devq_disconnect(q);
		return 3;
	}
	if (json)
		printf("[");
	for (size_t i = 0; i < n; i++) {
		const struct devq_exec_info *x = devq_exec_info(q, &l[i]);
		uint64_t rate;
		int pinned;
		unsigned samples;
		const char *cost = devq_exec_cost(q, &l[i], &rate, &pinned, &samples);
		if (json) {
			printf("%s{\"id\":%u,\"name\":", i ? "," : "", l[i].id);
			devctl_json_str(stdout, l[i].name);
			printf(",\"signature\":");
			devctl_json_str(stdout, l[i].signature);
			printf(",\"source\":");
			devctl_json_str(stdout, x->source);
			printf(",\"backends\":");
			devctl_json_str(stdout, x->backends);
			printf(",\"description\":");
			devctl_json_str(stdout, x->description);
			printf(",\"available\":%s", x->unavailable ? "false" : "true");
			if (cost[0]) {
				printf(",\"cost\":");
				devctl_json_str(stdout, cost);
				printf(",\"rate\":%" PRIu64 ",\"rate_pinned\":%s,\"rate_samples\":%u",
				       rate, pinned ? "true" : "false", samples);
			}
			printf("}");
		} else {
			/* The first line is name(signature), unchanged for
			 * whoever parses it; what else is known indented under
			 * it. */
			printf("%s(%s)\n", l[i].name, l[i].signature);
			if (x->source[0])
				printf("    source: %s  backends: %s%s\n", x->source, x->backends,
				       x->unavailable ? "  (no code for this daemon's device: "
							"submits fail)"
						      : "");
			if (x->description[0])
				printf("    %s\n", x->description);
			if (cost[0] && pinned)
				printf("    cost: %s  rate: %" PRIu64 "/s (pinned)\n", cost, rate);
			else if (cost[0] && rate)
				printf("    cost: %s  rate: %" PRIu64 "/s (learned from %u%s ops)\n",
				       cost, rate, samples, samples >= 8 ? "+" : "");
			else if (cost[0])
				printf("    cost: %s  rate: not known yet\n", cost);
		}
	}
	if (json)
		printf("]\n");
	devq_disconnect(q);
	return 0;
}

int devctl_status_main(const char *sock, int argc, char **argv)
{
	bool json = false;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--json")) {
			json = true;
		} else {
			devctl_errf("%s status: unknown argument '%s'\n", devctl_prog, argv[i]);
			return 2;
		}
	}
	devq *q;
	int r = devctl_connect(sock, &q);
	if (r)
		return r;
	struct devq_status *s;
	if (devq_get_status(q, &s) < 0) {
		devctl_errf("%s: %s\n", devctl_prog, devq_last_error(q));
		devq_disconnect(q);
		return 3;
	}
	/* Status counts normal streams; top, trace and the SVG count the
	 * high-priority ones too: the trace's total gives their number. */
	uint32_t high = 0;
	struct devq_trace *tr;
	struct devq_trace_query tq = { .no_ops = true };
	if (devq_trace_get(q, &tq, &tr) == 0) {
		if (tr->streams > s->streams)
			high = tr->streams - s->streams;
		devq_trace_free(tr);
	}
	uint64_t self = devq_get_info(q)->session;
	/* This connection is itself a session; leave it out of the picture. */
	size_t others = 0;
	for (size_t i = 0; i < s->nsessions; i++)
		others += s->sessions[i].id != self;
	if (json) {
		printf("{\"backend\":");
		devctl_json_str(stdout, s->backend);
		printf(",\"device\":");
		devctl_json_str(stdout, s->device);
		printf(",\"streams\":%u,\"priority_streams\":%u,\"uptime_ns\":%" PRIu64 ",\"ops_in_flight\":%" PRIu64
		       ",\"buffers\":%u,\"bytes_mapped\":%" PRIu64 ",\"sessions_total\":%" PRIu64
		       ",\"ops_completed\":%" PRIu64 ",\"ops_failed\":%" PRIu64 ",\"sessions\":[",
		       s->streams, high, s->uptime_ns, s->ops_in_flight, s->buffers, s->bytes_mapped,
		       s->sessions_total, s->ops_completed, s->ops_failed);
		size_t k = 0;
		for (size_t i = 0; i < s->nsessions; i++) {
			const struct devq_session_info *x = &s->sessions[i];
			if (x->id == self)
				continue;
			printf("%s{\"id\":%" PRIu64 ",\"pid\":%u,\"uid\":%u,\"name\":", k++ ? "," : "",
			       x->id, x->pid, x->uid);
			devctl_json_str(stdout, x->name);
			printf(",\"queues\":%u,\"ops_in_flight\":%" PRIu64 ",\"buffers\":%u,"
			       "\"bytes_mapped\":%" PRIu64 ",\"ops_completed\":%" PRIu64,
			       x->queues, x->ops_in_flight, x->buffers, x->bytes_mapped,
			       x->ops_completed);
			devctl_metrics_session_json(stdout, x);
			printf("}");
		}
		printf("],\"refused_uids\":[");
		for (size_t i = 0; i < s->nrefused; i++)
			printf("%s{\"uid\":%u,\"losses\":%u,\"until_s\":%" PRId64 "}",
			       i ? "," : "", s->refused[i].uid, s->refused[i].losses,
			       s->refused[i].until_s);
		printf("]");
		devctl_metrics_json(stdout, s);
		devctl_metrics_tenants_json(stdout, s);
		printf("}\n");
	} else {
		printf("backend:        %s (%s), %u streams + %u high-priority\n", s->backend,
		       s->device, s->streams, high);
		printf("uptime:         %.1f s\n", (double)s->uptime_ns / 1e9);
		printf("sessions:       %zu now, %" PRIu64 " since start\n", others,
		       s->sessions_total);
		printf("ops in flight:  %" PRIu64 "\n", s->ops_in_flight);
		printf("buffers:        %u (%.1f MiB mapped)\n", s->buffers,
		       (double)s->bytes_mapped / 1048576.0);
		printf("ops completed:  %" PRIu64 " (%" PRIu64 " failed)\n", s->ops_completed,
		       s->ops_failed);
		for (size_t i = 0; i < s->nrefused; i++) {
			time_t t = (time_t)s->refused[i].until_s;
			struct tm tm;
			char until[40];
			if (!gmtime_r(&t, &tm) ||
			    !strftime(until, sizeof(until), "%Y-%m-%d %H:%M:%S UTC", &tm))
				snprintf(until, sizeof(until), "%" PRId64, s->refused[i].until_s);
			printf("%s uid %u until %s (%u device losses)\n",
			       i ? "               " : "refused:       ", s->refused[i].uid, until,
			       s->refused[i].losses);
		}
		/* Tenants: the unit of fairness (devqd(8) FAIRNESS).  SHARE is
		 * of the daemon's device time since start; WAIT is device start
		 * minus the daemon's receipt, averaged over timed ops. */
		if (s->ntenants)
			printf("\n%-16s %6s %8s %8s %9s %7s %10s %9s %6s %9s %9s\n", "TENANT", "WEIGHT",
			       "SESSIONS", "WAITING", "QUEUED", "INSIDE", "OPS", "DEVICE", "SHARE",
			       "WAIT-AVG", "WAIT-MAX");
		for (size_t i = 0; i < s->ntenants; i++) {
			const struct devq_tenant_info *t = &s->tenants[i];
			double share = s->device_busy_ns ? 100.0 * (double)t->device_ns /
								   (double)s->device_busy_ns
							 : 0;
			printf("%-16.16s %6u %8u %8" PRIu64 " %7.1fms %7u %10" PRIu64 " %8.2fs %5.1f%% "
			       "%7.2fms %7.2fms\n",
			       t->name, t->weight, t->sessions, t->ops_waiting, t->queued_ns / 1e6,
			       t->ops_inside, t->ops_done, t->device_ns / 1e9, share,
			       t->waits ? t->wait_ns / 1e6 / (double)t->waits : 0.0,
			       t->wait_max_ns / 1e6);
		}
		if (others)
			printf("\n%8s %8s %6s %-16s %6s %9s %7s %10s %10s\n", "SESSION", "PID", "UID",
			       "NAME", "QUEUES", "INFLIGHT", "BUFFERS", "MAPPED", "COMPLETED");
		for (size_t i = 0; i < s->nsessions; i++) {
			const struct devq_session_info *x = &s->sessions[i];
			if (x->id == self)
				continue;
			printf("%8" PRIu64 " %8u %6u %-16.16s %6u %9" PRIu64 " %7u %9.1fM %10" PRIu64
			       "\n",
			       x->id, x->pid, x->uid, x->name, x->queues, x->ops_in_flight,
			       x->buffers, (double)x->bytes_mapped / 1048576.0, x->ops_completed);
		}
	}
	devq_status_free(s);
	devq_disconnect(q);
	return 0;
}
