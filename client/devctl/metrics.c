/* SPDX-License-Identifier: Apache-2.0 */
/* devctl metrics: one GetStatus round trip printed in the Prometheus text
 * exposition format 0.0.4, so node_exporter's textfile collector or any
 * scraper can take it.  Counters are the daemon's since it started; the
 * sessions' own counters start at their connect. */
#include "devctl/metrics.h"

#include <inttypes.h>
#include <string.h>

#include "devctl/util.h"

static void label_value(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\\\", f);
		else if (*s == '"')
			fputs("\\\"", f);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static double sec(uint64_t ns)
{
	return (double)ns / 1e9;
}

static void session_labels(FILE *f, const struct devq_session_info *x)
{
	fprintf(f, "{session=\"%" PRIu64 "\",pid=\"%u\",uid=\"%u\",name=\"", x->id, x->pid, x->uid);
	label_value(f, x->name);
	fputs("\"}", f);
}

static void print_metrics(FILE *f, const struct devq_status *s, uint64_t self)
{
	family(f, "devq_info", "gauge", "The daemon's backend and device (value always 1).");
	fputs("devq_info{backend=\"", f);
	label_value(f, s->backend);
	fputs("\",device=\"", f);
	label_value(f, s->device);
	fprintf(f, "\",streams=\"%u\"} 1\n", s->streams);
	family(f, "devq_uptime_seconds", "gauge", "Seconds since the daemon started.");
	fprintf(f, "devq_uptime_seconds %.3f\n", sec(s->uptime_ns));
	size_t others = 0;
	for (size_t i = 0; i < s->nsessions; i++)
		others += s->sessions[i].id != self;
	family(f, "devq_sessions", "gauge",
	       "Sessions now, including disconnected ones still draining (not this scrape's).");
	fprintf(f, "devq_sessions %zu\n", others);
	family(f, "devq_sessions_total", "counter", "Sessions accepted since start.");
	fprintf(f, "devq_sessions_total %" PRIu64 "\n", s->sessions_total);
	family(f, "devq_ops_in_flight", "gauge", "Ops submitted and not yet completed.");
	fprintf(f, "devq_ops_in_flight %" PRIu64 "\n", s->ops_in_flight);
	family(f, "devq_ops_completed_total", "counter", "Ops completed, failed ones included.");
	fprintf(f, "devq_ops_completed_total %" PRIu64 "\n", s->ops_completed);
	family(f, "devq_op_errors_total", "counter", "Ops that completed with an error, by code.");
	for (int c = 1; c <= DEVQ_E_DEADLINE_EXCEEDED; c++)
		fprintf(f, "devq_op_errors_total{code=\"%s\"} %" PRIu64 "\n", devq_code_name(c),
			s->op_errors[c]);
	family(f, "devq_device_busy_seconds_total", "counter",
	       "Device time of completed ops (start to end), summed over streams.");
	fprintf(f, "devq_device_busy_seconds_total %.9f\n", sec(s->device_busy_ns));
	family(f, "devq_pinned_bytes", "gauge", "Bytes of shared buffers mapped and pinned.");
	fprintf(f, "devq_pinned_bytes %" PRIu64 "\n", s->bytes_mapped);
	family(f, "devq_buffers", "gauge", "Buffers held, deferred releases included.");
	fprintf(f, "devq_buffers %u\n", s->buffers);

	family(f, "devq_user_ops_completed_total", "counter",
	       "Ops completed per Unix user (uid \"other\": users beyond the daemon's table).");
	for (size_t i = 0; i < s->nusers; i++) {
		const struct devq_user_info *u = &s->users[i];
		if (u->uid == UINT32_MAX)
			fprintf(f, "devq_user_ops_completed_total{uid=\"other\"} %" PRIu64 "\n",
				u->ops_completed);
		else
			fprintf(f, "devq_user_ops_completed_total{uid=\"%u\"} %" PRIu64 "\n", u->uid,
				u->ops_completed);
	}
	family(f, "devq_user_op_errors_total", "counter", "Failed ops per Unix user.");
	for (size_t i = 0; i < s->nusers; i++) {
		const struct devq_user_info *u = &s->users[i];
		char uid[16];
		snprintf(uid, sizeof(uid), u->uid == UINT32_MAX ? "other" : "%u", u->uid);
		fprintf(f, "devq_user_op_errors_total{uid=\"%s\"} %" PRIu64 "\n", uid,
			u->ops_failed);
	}
	family(f, "devq_user_device_busy_seconds_total", "counter",
	       "Device time of completed ops per Unix user.");
	for (size_t i = 0; i < s->nusers; i++) {
		const struct devq_user_info *u = &s->users[i];
		char uid[16];
		snprintf(uid, sizeof(uid), u->uid == UINT32_MAX ? "other" : "%u", u->uid);
		fprintf(f, "devq_user_device_busy_seconds_total{uid=\"%s\"} %.9f\n", uid,
			sec(u->device_busy_ns));
	}

	static const struct {
		const char *name, *type, *help;
		int what;
	} per_tenant[] = {
		{ "devq_tenant_weight", "gauge", "The tenant's fair-shares weight.", 0 },
		{ "devq_tenant_sessions", "gauge", "Sessions of the tenant, draining ones included.",
		  1 },
		{ "devq_tenant_ops_waiting", "gauge",
		  "Ops waiting in the daemon for room on their device stream.", 2 },
		{ "devq_tenant_queued_seconds", "gauge", "Expected device time of those ops.", 3 },
		{ "devq_tenant_ops_inside", "gauge", "Ops handed to the device, not completed.", 4 },
		{ "devq_tenant_ops_total", "counter", "Ops completed.", 5 },
		{ "devq_tenant_device_seconds_total", "counter", "Device time its ops used.", 6 },
		{ "devq_tenant_wait_seconds_total", "counter",
		  "Device start minus the daemon's receipt, summed over timed ops.", 7 },
		{ "devq_tenant_wait_max_seconds", "gauge", "The longest of those waits.", 8 },
		{ "devq_tenant_waits_total", "counter", "Timed ops those waits sum.", 9 },
		{ "devq_tenant_deadline_exceeded_total", "counter",
		  "Ops not started by their client's deadline (deadline_exceeded).", 10 },
	};
	for (size_t k = 0; k < sizeof(per_tenant) / sizeof(per_tenant[0]); k++) {
		family(f, per_tenant[k].name, per_tenant[k].type, per_tenant[k].help);
		for (size_t i = 0; i < s->ntenants; i++) {
			const struct devq_tenant_info *t = &s->tenants[i];
			double v;
			switch (per_tenant[k].what) {
			case 0: v = t->weight; break;
			case 1: v = t->sessions; break;
			case 2: v = (double)t->ops_waiting; break;
			case 3: v = sec(t->queued_ns); break;
			case 4: v = t->ops_inside; break;
			case 5: v = (double)t->ops_done; break;
			case 6: v = sec(t->device_ns); break;
			case 7: v = sec(t->wait_ns); break;
			case 8: v = sec(t->wait_max_ns); break;
			case 9: v = (double)t->waits; break;
			default: v = (double)s->tenant_deadline_exceeded[i]; break;
			}
			fprintf(f, "%s{tenant=\"%s\"} %.9g\n", per_tenant[k].name, t->name, v);
		}
	}

	static const struct {
		const char *name, *type, *help;
		int what;
	} per_session[] = {
		{ "devq_session_ops_completed_total", "counter", "Ops completed since connect.", 0 },
		{ "devq_session_op_errors_total", "counter", "Failed ops since connect.", 1 },
		{ "devq_session_ops_in_flight", "gauge", "Ops not yet completed.", 2 },
		{ "devq_session_pinned_bytes", "gauge", "Bytes of the session's shared buffers.", 3 },
		{ "devq_session_buffers", "gauge", "Buffers the session holds.", 4 },
	};
	for (size_t k = 0; k < sizeof(per_session) / sizeof(per_session[0]); k++) {
		family(f, per_session[k].name, per_session[k].type, per_session[k].help);
		for (size_t i = 0; i < s->nsessions; i++) {
			const struct devq_session_info *x = &s->sessions[i];
			if (x->id == self)
				continue;
			uint64_t v = per_session[k].what == 0 ? x->ops_completed
				     : per_session[k].what == 1 ? x->ops_failed
				     : per_session[k].what == 2 ? x->ops_in_flight
				     : per_session[k].what == 3 ? x->bytes_mapped
								: x->buffers;
			fputs(per_session[k].name, f);
			session_labels(f, x);
			fprintf(f, " %" PRIu64 "\n", v);
		}
	}
	family(f, "devq_queue_depth", "gauge", "Ops submitted on a queue and not yet completed.");
	for (size_t i = 0; i < s->nsessions; i++) {
		const struct devq_session_info *x = &s->sessions[i];
		if (x->id == self)
			continue;
		for (size_t k = 0; k < x->nqueues_depth; k++)
			fprintf(f,
				"devq_queue_depth{session=\"%" PRIu64 "\",queue=\"%u\",stream=\"%u\"} "
				"%" PRIu64 "\n",
				x->id, x->queue_depths[k].queue, x->queue_depths[k].stream,
				x->queue_depths[k].depth);
	}

	family(f, "devq_phase_seconds", "histogram",
	       "Phase durations of completed ops: submit (client submit to hand-off), queued "
	       "(hand-off to device start), device (start to end), sync (device end to "
	       "completion seen by the daemon).");
	for (size_t p = 0; p < s->nphases; p++) {
		const struct devq_histogram *h = &s->phases[p];
		uint64_t cum = 0;
		for (size_t b = 0; b < h->nbounds; b++) {
			cum += h->counts[b];
			fprintf(f, "devq_phase_seconds_bucket{phase=\"%s\",le=\"%g\"} %" PRIu64 "\n",
				h->phase, sec(h->le_ns[b]), cum);
		}
		cum += h->counts[h->nbounds];
		fprintf(f, "devq_phase_seconds_bucket{phase=\"%s\",le=\"+Inf\"} %" PRIu64 "\n",
			h->phase, cum);
		fprintf(f, "devq_phase_seconds_sum{phase=\"%s\"} %.9f\n", h->phase, sec(h->sum_ns));
		fprintf(f, "devq_phase_seconds_count{phase=\"%s\"} %" PRIu64 "\n", h->phase,
			h->count);
	}
}

void devctl_metrics_usage(FILE *f)
{
	fprintf(f, "  metrics             the daemon's counters and gauges in Prometheus text\n"
		   "                      format (for a scraper or node_exporter's textfile\n"
		   "                      collector); see devctl(1) for the families\n");
}

int devctl_metrics(const char *sock, int argc, char **argv)
{
	if (argc > 0) {
		fprintf(stderr, "devctl metrics: unknown argument '%s'\n", argv[0]);
		return 2;
	}
	devq *q = NULL;
	int r = devq_connect(sock, "devctl-metrics", &q);
	if (r < 0) {
		fprintf(stderr, "devctl: %s%s\n", q ? devq_last_error(q) : "cannot connect",
			devctl_conn_hint(r, q));
		devq_disconnect(q);
		return 3;
	}
	struct devq_status *s;
	if (devq_get_status(q, &s) < 0) {
		fprintf(stderr, "devctl: %s\n", devq_last_error(q));
		devq_disconnect(q);
		return 3;
	}
	print_metrics(stdout, s, devq_get_info(q)->session);
	devq_status_free(s);
	devq_disconnect(q);
	return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
}

void devctl_metrics_json(FILE *f, const struct devq_status *s)
{
	fputs(",\"op_errors\":{", f);
	for (int c = 1; c <= DEVQ_E_DEADLINE_EXCEEDED; c++)
		fprintf(f, "%s\"%s\":%" PRIu64, c > 1 ? "," : "", devq_code_name(c), s->op_errors[c]);
	fprintf(f, "},\"device_busy_ns\":%" PRIu64 ",\"users\":[", s->device_busy_ns);
	for (size_t i = 0; i < s->nusers; i++) {
		const struct devq_user_info *u = &s->users[i];
		fprintf(f,
			"%s{\"uid\":%" PRIu32 ",\"ops_completed\":%" PRIu64 ",\"ops_failed\":%" PRIu64
			",\"device_busy_ns\":%" PRIu64 "}",
			i ? "," : "", u->uid, u->ops_completed, u->ops_failed, u->device_busy_ns);
	}
	fputs("],\"phases\":[", f);
	for (size_t p = 0; p < s->nphases; p++) {
		const struct devq_histogram *h = &s->phases[p];
		fprintf(f, "%s{\"phase\":\"%s\",\"count\":%" PRIu64 ",\"sum_ns\":%" PRIu64 ",\"le_ns\":[",
			p ? "," : "", h->phase, h->count, h->sum_ns);
		for (size_t b = 0; b < h->nbounds; b++)
			fprintf(f, "%s%" PRIu64, b ? "," : "", h->le_ns[b]);
		fputs("],\"counts\":[", f);
		for (size_t b = 0; b <= h->nbounds; b++)
			fprintf(f, "%s%" PRIu64, b ? "," : "", h->counts[b]);
		fputs("]}", f);
	}
	fputs("]", f);
}

void devctl_metrics_tenants_json(FILE *f, const struct devq_status *s)
{
	fputs(",\"tenants\":[", f);
	for (size_t i = 0; i < s->ntenants; i++) {
		const struct devq_tenant_info *t = &s->tenants[i];
		fprintf(f, "%s{\"tenant\":", i ? "," : "");
		devctl_json_str(f, t->name);
		fprintf(f,
			",\"uid\":%" PRIu32 ",\"weight\":%" PRIu32 ",\"sessions\":%" PRIu32
			",\"ops_waiting\":%" PRIu64 ",\"queued_ns\":%" PRIu64 ",\"ops_inside\":%" PRIu32
			",\"ops_done\":%" PRIu64 ",\"device_ns\":%" PRIu64 ",\"wait_ns\":%" PRIu64
			",\"wait_max_ns\":%" PRIu64 ",\"waits\":%" PRIu64
			",\"deadline_exceeded\":%" PRIu64 "}",
			t->uid, t->weight, t->sessions, t->ops_waiting, t->queued_ns, t->ops_inside,
			t->ops_done, t->device_ns, t->wait_ns, t->wait_max_ns, t->waits,
			s->tenant_deadline_exceeded[i]);
	}
	fputs("]", f);
}

void devctl_metrics_session_json(FILE *f, const struct devq_session_info *x)
{
	fprintf(f, ",\"ops_failed\":%" PRIu64 ",\"queue_depths\":[", x->ops_failed);
	for (size_t k = 0; k < x->nqueues_depth; k++)
		fprintf(f, "%s{\"queue\":%u,\"stream\":%u,\"depth\":%" PRIu64 "}", k ? "," : "",
			x->queue_depths[k].queue, x->queue_depths[k].stream,
			x->queue_depths[k].depth);
	fputs("]", f);
}
