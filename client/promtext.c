/* SPDX-License-Identifier: Apache-2.0 */
/* See promtext.h.  Counters are the daemon's since it started; a
 * session's start at its connect, a tenant's at its first session. */
#include "promtext.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

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

/* name{gpu="N",<rest>} or name{<rest>} or name: the series' start, up to
 * the value.  rest is already escaped ("" for none). */
static void series(FILE *f, const char *name, const struct devq_promtext_instance *x,
		   const struct devq_promtext_opts *o, const char *rest)
{
	fputs(name, f);
	bool gpu = o->exporter;
	if (!gpu && !*rest)
		return;
	fputc('{', f);
	if (gpu) {
		fputs("gpu=\"", f);
		label_value(f, x->gpu ? x->gpu : "");
		fputc('"', f);
	}
	if (*rest)
		fprintf(f, "%s%s", gpu ? "," : "", rest);
	fputc('}', f);
}

/* A label set in a buffer: key="escaped value",... (truncated labels are
 * cut at a whole label, never inside an escape). */
struct lbuf {
	char b[2048];
	size_t n;
};

static void lb_add(struct lbuf *l, const char *key, const char *val)
{
	char tmp[600];
	size_t k = 0;
	int w = snprintf(tmp, sizeof(tmp), "%s%s=\"", l->n ? "," : "", key);
	if (w < 0 || (size_t)w >= sizeof(tmp))
		return;
	k = (size_t)w;
	for (const char *s = val; *s && k + 3 < sizeof(tmp); s++) {
		if (*s == '\\' || *s == '"') {
			tmp[k++] = '\\';
			tmp[k++] = *s;
		} else if (*s == '\n') {
			tmp[k++] = '\\';
			tmp[k++] = 'n';
		} else {
			tmp[k++] = *s;
		}
	}
	tmp[k++] = '"';
	if (l->n + k + 1 > sizeof(l->b))
		return;
	memcpy(l->b + l->n, tmp, k);
	l->n += k;
	l->b[l->n] = '\0';
}

static void lb_init(struct lbuf *l)
{
	l->n = 0;
	l->b[0] = '\0';
}

/* A label name as Prometheus takes it, and not one devq sets itself. */
static bool label_key_ok(const char *k, size_t n)
{
	/* devqd refuses these at grant; job and instance are fine: Prometheus
	 * keeps them as exported_job and exported_instance beside its own. */
	static const char *const ours[] = { "gpu", "UUID", "tenant", "phase", "le" };
	if (!n || n > 64 || (k[0] >= '0' && k[0] <= '9') || (n >= 2 && k[0] == '_' && k[1] == '_'))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = k[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_'))
			return false;
	}
	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		if (strlen(ours[i]) == n && !strncmp(ours[i], k, n))
			return false;
	return true;
}

/* A tenant's row as the scrape prints it: its own, or "other" summing the
 * uid tenants past DEVQ_PROMTEXT_UID_TENANTS. */
struct trow {
	const struct devq_tenant_info *t;
	const struct devq_tenant_extra *x;
	struct devq_tenant_info sum;
	struct devq_tenant_extra xsum;
	bool other;
};

static bool uid_tenant(const struct devq_tenant_info *t)
{
	return !strncmp(t->name, "uid:", 4);
}

static void hist_add(struct devq_histogram *to, const struct devq_histogram *h)
{
	if (!to->nbounds) {
		*to = *h;
		return;
	}
	if (to->nbounds != h->nbounds || memcmp(to->le_ns, h->le_ns, h->nbounds * sizeof(uint64_t)))
		return;
	for (size_t b = 0; b <= h->nbounds; b++)
		to->counts[b] += h->counts[b];
	to->sum_ns += h->sum_ns;
	to->count += h->count;
}

/* The rows of s, into rows (room for s->ntenants + 1); how many. */
static size_t tenant_rows(const struct devq_status *s, struct trow *rows)
{
	size_t n = 0, uids = 0;
	struct trow *other = NULL;
	for (size_t i = 0; i < s->ntenants; i++) {
		const struct devq_tenant_info *t = &s->tenants[i];
		const struct devq_tenant_extra *x = s->tenant_extra ? &s->tenant_extra[i] : NULL;
		if (!uid_tenant(t) || uids++ < DEVQ_PROMTEXT_UID_TENANTS) {
			rows[n++] = (struct trow){ .t = t, .x = x };
			continue;
		}
		if (!other) {
			other = &rows[n++];
			memset(other, 0, sizeof(*other));
			other->other = true;
			other->t = &other->sum;
			other->x = &other->xsum;
			snprintf(other->sum.name, sizeof(other->sum.name), "other");
		}
		struct devq_tenant_info *o = &other->sum;
		o->weight += t->weight;
		o->sessions += t->sessions;
		o->ops_waiting += t->ops_waiting;
		o->queued_ns += t->queued_ns;
		o->ops_inside += t->ops_inside;
		o->ops_done += t->ops_done;
		o->device_ns += t->device_ns;
		o->wait_ns += t->wait_ns;
		if (t->wait_max_ns > o->wait_max_ns)
			o->wait_max_ns = t->wait_max_ns;
		o->waits += t->waits;
		if (x) {
			struct devq_tenant_extra *ox = &other->xsum;
			ox->deadline_exceeded += x->deadline_exceeded;
			for (size_t p = 0; p < x->nop_seconds && p < 3; p++) {
				hist_add(&ox->op_seconds[p], &x->op_seconds[p]);
				if (ox->nop_seconds < p + 1)
					ox->nop_seconds = p + 1;
			}
		}
	}
	return n;
}

/* gpu="N",UUID="...",tenant="name" and the grant's labels. */
static void tenant_labels(struct lbuf *l, const struct devq_promtext_instance *in,
			  const struct devq_promtext_opts *o, const struct trow *r)
{
	lb_init(l);
	if (!o->exporter) /* the exporter's series() puts gpu first */
		lb_add(l, "gpu", in->s->gpu);
	lb_add(l, "UUID", in->s->uuid);
	lb_add(l, "tenant", r->t->name);
	for (size_t k = 0; r->x && k < r->x->nlabels; k++) {
		const char *kv = r->x->labels[k];
		const char *eq = strchr(kv, '=');
		if (!eq || !label_key_ok(kv, (size_t)(eq - kv)))
			continue;
		char key[72];
		snprintf(key, sizeof(key), "%.*s", (int)(eq - kv), kv);
		lb_add(l, key, eq + 1);
	}
}

static void histogram_lines(FILE *f, const char *name, const struct devq_promtext_instance *in,
			    const struct devq_promtext_opts *o, const char *base,
			    const struct devq_histogram *h)
{
	char full[256];
	uint64_t cum = 0;
	struct lbuf l;
	for (size_t b = 0; b <= h->nbounds; b++) {
		cum += h->counts[b];
		char le[32];
		if (b < h->nbounds)
			snprintf(le, sizeof(le), "%g", sec(h->le_ns[b]));
		else
			snprintf(le, sizeof(le), "+Inf");
		lb_init(&l);
		snprintf(l.b, sizeof(l.b), "%s", base);
		l.n = strlen(l.b);
		lb_add(&l, "phase", h->phase);
		lb_add(&l, "le", le);
		snprintf(full, sizeof(full), "%s_bucket", name);
		series(f, full, in, o, l.b);
		fprintf(f, " %" PRIu64 "\n", cum);
	}
	lb_init(&l);
	snprintf(l.b, sizeof(l.b), "%s", base);
	l.n = strlen(l.b);
	lb_add(&l, "phase", h->phase);
	snprintf(full, sizeof(full), "%s_sum", name);
	series(f, full, in, o, l.b);
	fprintf(f, " %.9f\n", sec(h->sum_ns));
	snprintf(full, sizeof(full), "%s_count", name);
	series(f, full, in, o, l.b);
	fprintf(f, " %" PRIu64 "\n", h->count);
}

#define EACH(in, n, x) for (const struct devq_promtext_instance *x = (in); x < (in) + (n); x++) \
	if (x->s)

int devq_promtext_write(FILE *f, const struct devq_promtext_instance *in, size_t n,
			const struct devq_promtext_opts *o)
{
	struct lbuf l;
	if (o->exporter) {
		family(f, "devq_up", "gauge",
		       "1 when the exporter reached this devqd for the scrape, 0 when not.");
		for (size_t i = 0; i < n; i++) {
			series(f, "devq_up", &in[i], o, "");
			fprintf(f, " %d\n", in[i].s ? 1 : 0);
		}
	}
	family(f, "devq_info", "gauge", "The daemon's backend and device (value always 1).");
	EACH(in, n, x) {
		lb_init(&l);
		lb_add(&l, "backend", x->s->backend);
		lb_add(&l, "device", x->s->device);
		char streams[16];
		snprintf(streams, sizeof(streams), "%u", x->s->streams);
		lb_add(&l, "streams", streams);
		if (x->s->uuid[0])
			lb_add(&l, "UUID", x->s->uuid);
		series(f, "devq_info", x, o, l.b);
		fputs(" 1\n", f);
	}
	family(f, "devq_uptime_seconds", "gauge", "Seconds since the daemon started.");
	EACH(in, n, x) {
		series(f, "devq_uptime_seconds", x, o, "");
		fprintf(f, " %.3f\n", sec(x->s->uptime_ns));
	}
	family(f, "devq_device_stalled", "gauge",
	       "1 while ops are in flight and none has completed for longer than one may "
	       "run (the watchdog's verdict).");
	EACH(in, n, x) {
		series(f, "devq_device_stalled", x, o, "");
		fprintf(f, " %d\n", x->s->device_stalled ? 1 : 0);
	}
	family(f, "devq_sessions", "gauge",
	       "Sessions now, including disconnected ones still draining (not this scrape's).");
	EACH(in, n, x) {
		size_t live = x->s->sessions_live;
		series(f, "devq_sessions", x, o, "");
		fprintf(f, " %zu\n", live - (live > 0 && x->self));
	}
	static const struct {
		const char *name, *type, *help;
		int what;
	} totals[] = {
		{ "devq_sessions_total", "counter", "Sessions accepted since start.", 0 },
		{ "devq_ops_in_flight", "gauge", "Ops submitted and not yet completed.", 1 },
		{ "devq_ops_completed_total", "counter", "Ops completed, failed ones included.", 2 },
	};
	for (size_t k = 0; k < sizeof(totals) / sizeof(totals[0]); k++) {
		family(f, totals[k].name, totals[k].type, totals[k].help);
		EACH(in, n, x) {
			uint64_t v = totals[k].what == 0   ? x->s->sessions_total
				     : totals[k].what == 1 ? x->s->ops_in_flight
							   : x->s->ops_completed;
			series(f, totals[k].name, x, o, "");
			fprintf(f, " %" PRIu64 "\n", v);
		}
	}
	family(f, "devq_op_errors_total", "counter", "Ops that completed with an error, by code.");
	EACH(in, n, x) {
		for (int c = 1; c <= DEVQ_E_DEADLINE_EXCEEDED; c++) {
			lb_init(&l);
			lb_add(&l, "code", devq_code_name(c));
			series(f, "devq_op_errors_total", x, o, l.b);
			fprintf(f, " %" PRIu64 "\n", x->s->op_errors[c]);
		}
	}
	family(f, "devq_device_busy_seconds_total", "counter",
	       "Device time of completed ops (start to end), summed over streams.");
	EACH(in, n, x) {
		series(f, "devq_device_busy_seconds_total", x, o, "");
		fprintf(f, " %.9f\n", sec(x->s->device_busy_ns));
	}
	family(f, "devq_pinned_bytes", "gauge", "Bytes of shared buffers mapped and pinned.");
	EACH(in, n, x) {
		series(f, "devq_pinned_bytes", x, o, "");
		fprintf(f, " %" PRIu64 "\n", x->s->bytes_mapped);
	}
	family(f, "devq_buffers", "gauge", "Buffers held, deferred releases included.");
	EACH(in, n, x) {
		series(f, "devq_buffers", x, o, "");
		fprintf(f, " %u\n", x->s->buffers);
	}

	static const struct {
		const char *name, *help;
		int what;
	} per_user[] = {
		{ "devq_user_ops_completed_total",
		  "Ops completed per Unix user (uid \"other\": users beyond the daemon's table).", 0 },
		{ "devq_user_op_errors_total", "Failed ops per Unix user.", 1 },
		{ "devq_user_device_busy_seconds_total", "Device time of completed ops per Unix user.",
		  2 },
	};
	for (size_t k = 0; k < sizeof(per_user) / sizeof(per_user[0]); k++) {
		family(f, per_user[k].name, "counter", per_user[k].help);
		EACH(in, n, x) {
			for (size_t i = 0; i < x->s->nusers; i++) {
				const struct devq_user_info *u = &x->s->users[i];
				char uid[16];
				snprintf(uid, sizeof(uid), u->uid == UINT32_MAX ? "other" : "%u",
					 u->uid);
				lb_init(&l);
				lb_add(&l, "uid", uid);
				series(f, per_user[k].name, x, o, l.b);
				if (per_user[k].what == 0)
					fprintf(f, " %" PRIu64 "\n", u->ops_completed);
				else if (per_user[k].what == 1)
					fprintf(f, " %" PRIu64 "\n", u->ops_failed);
				else
					fprintf(f, " %.9f\n", sec(u->device_busy_ns));
			}
		}
	}

	/* Tenants, bounded (DEVQ_PROMTEXT_UID_TENANTS), per instance. */
	struct trow *rows[n ? n : 1];
	size_t nrows[n ? n : 1];
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		rows[i] = NULL;
		nrows[i] = 0;
		if (!in[i].s)
			continue;
		rows[i] = calloc(in[i].s->ntenants + 1, sizeof(struct trow));
		if (!rows[i]) {
			rc = -1;
			continue;
		}
		nrows[i] = tenant_rows(in[i].s, rows[i]);
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
		for (size_t i = 0; i < n; i++) {
			for (size_t j = 0; j < nrows[i]; j++) {
				const struct devq_tenant_info *t = rows[i][j].t;
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
				default: v = rows[i][j].x ? (double)rows[i][j].x->deadline_exceeded : 0; break;
				}
				tenant_labels(&l, &in[i], o, &rows[i][j]);
				series(f, per_tenant[k].name, &in[i], o, l.b);
				fprintf(f, " %.9g\n", v);
			}
		}
	}
	family(f, "devq_tenant_op_seconds", "histogram",
	       "A tenant's op latency: queued (devqd's receipt to device start), device (start "
	       "to end), total (receipt to completion queued to the client).");
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < nrows[i]; j++) {
			const struct trow *r = &rows[i][j];
			if (!r->x)
				continue;
			tenant_labels(&l, &in[i], o, r);
			for (size_t p = 0; p < r->x->nop_seconds && p < 3; p++)
				histogram_lines(f, "devq_tenant_op_seconds", &in[i], o, l.b,
						&r->x->op_seconds[p]);
		}
	}
	for (size_t i = 0; i < n; i++)
		free(rows[i]);

	if (o->sessions) {
		static const struct {
			const char *name, *type, *help;
			int what;
		} per_session[] = {
			{ "devq_session_ops_completed_total", "counter",
			  "Ops completed since connect.", 0 },
			{ "devq_session_op_errors_total", "counter", "Failed ops since connect.", 1 },
			{ "devq_session_ops_in_flight", "gauge", "Ops not yet completed.", 2 },
			{ "devq_session_pinned_bytes", "gauge",
			  "Bytes of the session's shared buffers.", 3 },
			{ "devq_session_buffers", "gauge", "Buffers the session holds.", 4 },
		};
		for (size_t k = 0; k < sizeof(per_session) / sizeof(per_session[0]); k++) {
			family(f, per_session[k].name, per_session[k].type, per_session[k].help);
			EACH(in, n, x) {
				for (size_t i = 0; i < x->s->nsessions; i++) {
					const struct devq_session_info *y = &x->s->sessions[i];
					if (y->id == x->self)
						continue;
					uint64_t v = per_session[k].what == 0	? y->ops_completed
						     : per_session[k].what == 1 ? y->ops_failed
						     : per_session[k].what == 2 ? y->ops_in_flight
						     : per_session[k].what == 3 ? y->bytes_mapped
										: y->buffers;
					char id[24], pid[16], uid[16];
					snprintf(id, sizeof(id), "%" PRIu64, y->id);
					snprintf(pid, sizeof(pid), "%u", y->pid);
					snprintf(uid, sizeof(uid), "%u", y->uid);
					lb_init(&l);
					lb_add(&l, "session", id);
					lb_add(&l, "pid", pid);
					lb_add(&l, "uid", uid);
					lb_add(&l, "name", y->name);
					series(f, per_session[k].name, x, o, l.b);
					fprintf(f, " %" PRIu64 "\n", v);
				}
			}
		}
		family(f, "devq_queue_depth", "gauge",
		       "Ops submitted on a queue and not yet completed.");
		EACH(in, n, x) {
			for (size_t i = 0; i < x->s->nsessions; i++) {
				const struct devq_session_info *y = &x->s->sessions[i];
				if (y->id == x->self)
					continue;
				for (size_t k = 0; k < y->nqueues_depth; k++) {
					char id[24], qn[16], sn[16];
					snprintf(id, sizeof(id), "%" PRIu64, y->id);
					snprintf(qn, sizeof(qn), "%u", y->queue_depths[k].queue);
					snprintf(sn, sizeof(sn), "%u", y->queue_depths[k].stream);
					lb_init(&l);
					lb_add(&l, "session", id);
					lb_add(&l, "queue", qn);
					lb_add(&l, "stream", sn);
					series(f, "devq_queue_depth", x, o, l.b);
					fprintf(f, " %" PRIu64 "\n", y->queue_depths[k].depth);
				}
			}
		}
	}

	family(f, "devq_phase_seconds", "histogram",
	       "Phase durations of completed ops: submit (client submit to hand-off), queued "
	       "(hand-off to device start), device (start to end), sync (device end to "
	       "completion seen by the daemon).");
	EACH(in, n, x) {
		for (size_t p = 0; p < x->s->nphases; p++)
			histogram_lines(f, "devq_phase_seconds", x, o, "", &x->s->phases[p]);
	}
	if (ferror(f))
		rc = -1;
	return rc;
}
