/* SPDX-License-Identifier: Apache-2.0 */
/* devctl metrics: one GetStatus round trip printed in the Prometheus text
 * exposition format 0.0.4 (client/promtext.c, which devq-exporter serves
 * too), so a textfile collector or any scraper can take it. */
#include "devctl/metrics.h"

#include <inttypes.h>
#include <string.h>

#include "devctl/util.h"
#include "promtext.h"

void devctl_metrics_usage(FILE *f)
{
	fprintf(f, "  metrics [--sessions]  the daemon's counters and gauges in Prometheus\n"
		   "                      text format (for a scraper or a textfile collector;\n"
		   "                      --sessions adds the per-session and per-queue\n"
		   "                      families); see devctl(1) for the families\n");
}

int devctl_metrics(const char *sock, int argc, char **argv)
{
	bool sessions = false;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--sessions")) {
			sessions = true;
			continue;
		}
		fprintf(stderr, "devctl metrics: unknown argument '%s'\n", argv[i]);
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
	/* Without --sessions the daemon builds no per-session rows. */
	if (devq_get_status_opts(q, sessions ? 0 : DEVQ_STATUS_NO_SESSIONS, &s) < 0) {
		fprintf(stderr, "devctl: %s\n", devq_last_error(q));
		devq_disconnect(q);
		return 3;
	}
	struct devq_promtext_instance in = { .s = s, .gpu = s->gpu,
					     .self = devq_get_info(q)->session };
	struct devq_promtext_opts o = { .sessions = sessions };
	int w = devq_promtext_write(stdout, &in, 1, &o);
	devq_status_free(s);
	devq_disconnect(q);
	return w == 0 && fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
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
			s->tenant_extra ? s->tenant_extra[i].deadline_exceeded : 0);
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
