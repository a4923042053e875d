/* SPDX-License-Identifier: Apache-2.0 */
/* devctl trace: devqd's recent ops as a Chrome trace-event JSON file (for
 * ui.perfetto.dev and chrome://tracing) and as a standalone SVG timeline.
 *
 * JSON layout: one process per client session (pid = session id, named by
 * client name, pid and uid); in it one thread per device stream the session
 * used (its ops' device spans, "X" events) and one per queue (the submit,
 * queued and sync phases as nestable async slices, because a pipelined
 * queue has many ops in flight at once and "X" slices on one thread must
 * nest); a "buffers" thread with one zero-length slice per BufferReleased.
 * Flow events draw dependencies (producer's device span -> consumer's) and
 * releases (last consumer's device span -> the release).  Timestamps are
 * CLOCK_MONOTONIC in microseconds with nanosecond decimals, so they compare
 * exactly with the timing a client gets in its completions. */
#include "devctl/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "devctl/util.h"
#include "devq.h"

/* What devctl trace takes without --last or --duration: enough to see a
 * pattern, few enough to read (devqd keeps up to 16384 by default, a
 * 10 MB SVG).  More than this, or a file over WARN_BYTES, is warned about. */
#define DEFAULT_LAST 1000
#define WARN_BYTES (4l << 20)

#define TID_BUFFERS 999
#define TID_QUEUE0 1000

struct trace_ctx {
	struct devq_trace *t;
	const struct devq_exec *execs;
	size_t nexecs;
	uint32_t normal_streams; /* streams [normal_streams, t->streams) are high priority */
};

void devctl_trace_usage(FILE *f)
{
	fprintf(f,
		"  trace [--duration SECONDS | --last N] [--all] [-o FILE] [--svg FILE]\n"
		"      Recent ops as devqd recorded them: sessions, queues, device streams, the\n"
		"      submit/queued/device/sync phases, waits (explicit and from buffer\n"
		"      hazards) and buffer releases.  -o writes Chrome trace-event JSON (open\n"
		"      it in ui.perfetto.dev or chrome://tracing); --svg draws a standalone SVG\n"
		"      timeline: a lane per device stream, op boxes coloured by session, phases\n"
		"      shaded, dependency arrows, a time axis.  --duration records what\n"
		"      completes in the next SECONDS; --last N takes the newest N ops, 0\n"
		"      every op devqd still keeps (devqd --trace-records); by default the\n"
		"      newest 1000.  More than 1000 ops or a file over 4 MiB is warned\n"
		"      about.  Sessions beyond 12 share legend entries (by uid, or others);\n"
		"      runs of ops too short to see merge into one box; hover for details;\n"
		"      high-priority streams are marked.  You see your own uid's sessions;\n"
		"      --all (every user) needs root or devqd's --admin-group.  '-' as FILE\n"
		"      is standard output.\n"
		"  top [--once] [--interval SECONDS] [--all]\n"
		"      A live view refreshed every interval (default 1 s); q quits.  Header:\n"
		"      backend and device, uptime, ops/s, ops in flight, errors/s, device busy\n"
		"      %% overall and per stream (device time / interval).  PHASE rows: p50\n"
		"      and p99 over the interval's completed ops of submit (client submit ->\n"
		"      hand-off), queued (hand-off -> device start), device (start -> end)\n"
		"      and sync (device end -> completion seen by devqd).  SESSION rows: ID,\n"
		"      PID, UID, NAME, OPS/S (completed per second), INFLIGHT, PINNED MiB\n"
		"      (mapped buffer memory), ERRORS (failed ops since connect).  QUEUE rows:\n"
		"      SESSION, QUEUE, STREAM, DEPTH (submitted - completed), SUBMITTED.\n"
		"      --once prints one frame (measured over one interval) and exits;\n"
		"      --all shows every user's sessions (root or admin group; default when\n"
		"      allowed).\n");
}

/* ---- common ---------------------------------------------------------- */

static const struct devq_trace_op *find_op(const struct devq_trace *t, uint64_t session,
					   uint32_t queue, uint64_t point)
{
	for (size_t i = t->nops; i-- > 0;) {
		const struct devq_trace_op *o = &t->ops[i];
		if (o->session == session && o->queue == queue && o->point == point)
			return o;
	}
	return NULL;
}

static void op_name(const struct trace_ctx *c, const struct devq_trace_op *o, char *buf, size_t n)
{
	/* By id: repository executables' ids are not list positions. */
	if (o->executable >= 0) {
		for (size_t i = 0; i < c->nexecs; i++) {
			if (c->execs[i].id == (uint32_t)o->executable) {
				snprintf(buf, n, "%s", c->execs[i].name);
				return;
			}
		}
		/* Removed from the repository since it ran. */
		snprintf(buf, n, "exec#%d", o->executable);
	} else if (o->executable == -1)
		snprintf(buf, n, "copy");
	else if (o->executable == -2)
		snprintf(buf, n, "fill");
	else
		snprintf(buf, n, "op");
}

/* The name, and for a failed op its error: "spin (failed: invalid_argument)".
 * The trace carries the code, not the message (that went to the client). */
static void op_label(const struct trace_ctx *c, const struct devq_trace_op *o, char *buf, size_t n)
{
	char name[48];
	op_name(c, o, name, sizeof(name));
	if (o->code)
		snprintf(buf, n, "%s (failed: %s)", name, devq_code_name(o->code));
	else
		snprintf(buf, n, "%s", name);
}

static int session_index(const struct devq_trace *t, uint64_t id)
{
	for (size_t i = 0; i < t->nsessions; i++)
		if (t->sessions[i].id == id)
			return (int)i;
	return -1;
}

/* Queue tracks are numbered by the order queues first appear per session. */
static int queue_tid(const struct devq_trace *t, const struct devq_trace_op *o)
{
	int k = 0;
	uint32_t seen[256];
	for (size_t i = 0; i < t->nops; i++) {
		const struct devq_trace_op *x = &t->ops[i];
		if (x->session != o->session)
			continue;
		bool dup = false;
		for (int j = 0; j < k && !dup; j++)
			dup = seen[j] == x->queue;
		if (dup)
			continue;
		if (x->queue == o->queue)
			return TID_QUEUE0 + k;
		if (k < 256)
			seen[k++] = x->queue;
	}
	return TID_QUEUE0 + k;
}

static int stream_tid(uint32_t stream)
{
	return 1 + (int)stream;
}

/* ---- JSON ------------------------------------------------------------ */

/* Microseconds with exact nanosecond decimals. */
static void json_us(FILE *f, const char *key, uint64_t ns)
{
	fprintf(f, ",\"%s\":%" PRIu64 ".%03u", key, ns / 1000, (unsigned)(ns % 1000));
}

struct ev {
	FILE *f;
	bool first;
};

static void ev_begin(struct ev *e, const char *ph, uint64_t pid, int tid, uint64_t ts_ns)
{
	fprintf(e->f, "%s\n{\"ph\":\"%s\",\"pid\":%" PRIu64 ",\"tid\":%d", e->first ? "" : ",", ph,
		pid, tid);
	json_us(e->f, "ts", ts_ns);
	e->first = false;
}

static void ev_meta(struct ev *e, uint64_t pid, int tid, const char *what, const char *name)
{
	ev_begin(e, "M", pid, tid, 0);
	fprintf(e->f, ",\"name\":\"%s\",\"args\":{\"name\":", what);
	devctl_json_str_ascii(e->f, name);
	fprintf(e->f, "}}");
}

static void ev_meta_sort(struct ev *e, uint64_t pid, int tid, const char *what, int idx)
{
	ev_begin(e, "M", pid, tid, 0);
	fprintf(e->f, ",\"name\":\"%s\",\"args\":{\"sort_index\":%d}}", what, idx);
}

static const char *wait_kind_name(enum devq_trace_wait_kind k)
{
	return k == DEVQ_TRACE_WAIT_HAZARD ? "hazard" : k == DEVQ_TRACE_WAIT_EXPLICIT ? "explicit"
										    : "queue";
}

static void op_args(FILE *f, const struct devq_trace_op *o)
{
	fprintf(f, ",\"args\":{\"session\":%" PRIu64 ",\"queue\":%u,\"point\":%" PRIu64
		   ",\"stream\":%u,\"status\":\"%s\"",
		o->session, o->queue, o->point, o->stream, devq_code_name(o->code));
	fprintf(f, ",\"waits\":[");
	for (size_t k = 0; k < o->nwaits; k++)
		fprintf(f, "%s{\"queue\":%u,\"point\":%" PRIu64 ",\"kind\":\"%s\"}", k ? "," : "",
			o->waits[k].queue, o->waits[k].point, wait_kind_name(o->waits[k].kind));
	fprintf(f, "],\"buffers\":[");
	for (size_t k = 0; k < o->nbuffers; k++)
		fprintf(f, "%s{\"id\":%" PRIu64 ",\"access\":\"%s\",\"released\":%s}", k ? "," : "",
			o->buffers[k].id,
			o->buffers[k].access == 3 ? "rw" : o->buffers[k].access == 2 ? "w" : "r",
			o->buffers[k].released ? "true" : "false");
	fprintf(f, "]");
	json_us(f, "client_submit_us", o->t.client_submit);
	json_us(f, "received_us", o->t.received);
	json_us(f, "handoff_us", o->t.handoff);
	json_us(f, "device_start_us", o->t.device_start);
	json_us(f, "device_end_us", o->t.device_end);
	json_us(f, "observed_us", o->t.observed);
	fprintf(f, ",\"enqueue_ns\":%" PRIu64, o->t.enqueue_ns);
	if (o->waits_dropped)
		fprintf(f, ",\"waits_not_recorded\":%u", o->waits_dropped);
	fprintf(f, "}");
}

/* One nestable async slice on a queue track; id names the op. */
static void ev_async(struct ev *e, const struct devq_trace_op *o, int tid, const char *name,
		     uint64_t from, uint64_t to)
{
	if (to < from)
		to = from; /* clocks of different hosts never mix here; be safe */
	for (int k = 0; k < 2; k++) {
		ev_begin(e, k ? "e" : "b", o->session, tid, k ? to : from);
		fprintf(e->f, ",\"cat\":\"queue\",\"name\":\"%s\",\"id\":\"%" PRIu64 ".%u.%" PRIu64 "\"}",
			name, o->session, o->queue, o->point);
	}
}

static void write_json(const struct trace_ctx *c, FILE *f)
{
	const struct devq_trace *t = c->t;
	struct ev e = { .f = f, .first = true };
	fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"devctl trace\","
		   "\"backend\":");
	devctl_json_str_ascii(f, t->backend);
	fprintf(f, ",\"device\":");
	devctl_json_str_ascii(f, t->device);
	fprintf(f, ",\"streams\":%u,\"ops\":%zu,\"truncated\":%s,\"clock\":\"CLOCK_MONOTONIC\"},"
		   "\"traceEvents\":[",
		t->streams, t->nops, t->truncated ? "true" : "false");

	/* Names: a process per session with ops, its threads. */
	for (size_t i = 0; i < t->nsessions; i++) {
		const struct devq_trace_session *s = &t->sessions[i];
		bool used = false;
		for (size_t k = 0; k < t->nops && !used; k++)
			used = t->ops[k].session == s->id;
		if (!used)
			continue;
		char name[160];
		snprintf(name, sizeof(name), "%s (pid %u, uid %u, session %" PRIu64 ")",
			 s->name[0] ? s->name : "client", s->pid, s->uid, s->id);
		ev_meta(&e, s->id, 0, "process_name", name);
		ev_meta_sort(&e, s->id, 0, "process_sort_index", (int)i);
		bool streams[1024] = { false }, queues_done[1024] = { false }, bufs = false;
		for (size_t k = 0; k < t->nops; k++) {
			const struct devq_trace_op *o = &t->ops[k];
			if (o->session != s->id)
				continue;
			char tn[64];
			if (o->stream < 1024 && !streams[o->stream]) {
				streams[o->stream] = true;
				snprintf(tn, sizeof(tn), "device stream %u", o->stream);
				ev_meta(&e, s->id, stream_tid(o->stream), "thread_name", tn);
				ev_meta_sort(&e, s->id, stream_tid(o->stream), "thread_sort_index",
					     stream_tid(o->stream));
			}
			int qt = queue_tid(t, o);
			if (qt - TID_QUEUE0 < 1024 && !queues_done[qt - TID_QUEUE0]) {
				queues_done[qt - TID_QUEUE0] = true;
				snprintf(tn, sizeof(tn), "queue %u", o->queue);
				ev_meta(&e, s->id, qt, "thread_name", tn);
				ev_meta_sort(&e, s->id, qt, "thread_sort_index", qt);
			}
			for (size_t b = 0; b < o->nbuffers; b++)
				bufs |= o->buffers[b].released;
		}
		if (bufs)
			ev_meta(&e, s->id, TID_BUFFERS, "thread_name", "buffers");
	}

	uint64_t flow = 0;
	for (size_t i = 0; i < t->nops; i++) {
		const struct devq_trace_op *o = &t->ops[i];
		char name[96];
		op_label(c, o, name, sizeof(name));
		int st = stream_tid(o->stream), qt = queue_tid(t, o);
		/* The device span, on the stream's thread. */
		ev_begin(&e, "X", o->session, st, o->t.device_start);
		json_us(f, "dur", o->t.device_end >= o->t.device_start
					  ? o->t.device_end - o->t.device_start
					  : 0);
		fprintf(f, ",\"cat\":\"device\",\"name\":");
		devctl_json_str_ascii(f, name);
		op_args(f, o);
		fprintf(f, "}");
		/* The host-side phases on the queue's track. */
		char label[128];
		snprintf(label, sizeof(label), "%s q%u #%" PRIu64, name, o->queue, o->point);
		/* The op's slice encloses its phases; its end is written last so
		 * that equal timestamps still close the phases first. */
		for (int k = 0; k < 2; k++) {
			if (k) {
				ev_async(&e, o, qt, "submit", o->t.client_submit, o->t.handoff);
				ev_async(&e, o, qt, "queued", o->t.handoff, o->t.device_start);
				ev_async(&e, o, qt, "sync", o->t.device_end, o->t.observed);
			}
			ev_begin(&e, k ? "e" : "b", o->session, qt, k ? o->t.observed : o->t.client_submit);
			fprintf(f, ",\"cat\":\"queue\",\"name\":");
			devctl_json_str_ascii(f, label);
			fprintf(f, ",\"id\":\"%" PRIu64 ".%u.%" PRIu64 "\"", o->session, o->queue, o->point);
			if (!k)
				op_args(f, o);
			fprintf(f, "}");
		}

		/* Dependencies: from the producer's device span to this one. */
		for (size_t k = 0; k < o->nwaits; k++) {
			if (o->waits[k].kind == DEVQ_TRACE_WAIT_QUEUE)
				continue; /* the queue's own order: drawn by the track itself */
			const struct devq_trace_op *p =
				find_op(t, o->session, o->waits[k].queue, o->waits[k].point);
			if (!p)
				continue; /* recorded before the window */
			const char *fname = o->waits[k].kind == DEVQ_TRACE_WAIT_HAZARD
						    ? "buffer hazard"
						    : "explicit wait";
			flow++;
			ev_begin(&e, "s", p->session, stream_tid(p->stream), p->t.device_start);
			fprintf(f, ",\"cat\":\"dependency\",\"name\":\"%s\",\"id\":%" PRIu64 "}", fname,
				flow);
			ev_begin(&e, "f", o->session, st, o->t.device_start);
			fprintf(f, ",\"bp\":\"e\",\"cat\":\"dependency\",\"name\":\"%s\",\"id\":%" PRIu64
				   "}",
				fname, flow);
		}
		/* Releases this completion made possible. */
		for (size_t k = 0; k < o->nbuffers; k++) {
			if (!o->buffers[k].released)
				continue;
			char rn[64];
			snprintf(rn, sizeof(rn), "BufferReleased %" PRIu64, o->buffers[k].id);
			ev_begin(&e, "X", o->session, TID_BUFFERS, o->t.observed);
			fprintf(f, ",\"dur\":0,\"cat\":\"buffer\",\"name\":");
			devctl_json_str_ascii(f, rn);
			fprintf(f, ",\"args\":{\"buffer\":%" PRIu64 ",\"last_queue\":%u,"
				   "\"last_point\":%" PRIu64 "}}",
				o->buffers[k].id, o->queue, o->point);
			flow++;
			ev_begin(&e, "s", o->session, st, o->t.device_start);
			fprintf(f, ",\"cat\":\"release\",\"name\":\"release\",\"id\":%" PRIu64 "}", flow);
			ev_begin(&e, "f", o->session, TID_BUFFERS, o->t.observed);
			fprintf(f, ",\"bp\":\"e\",\"cat\":\"release\",\"name\":\"release\",\"id\":%" PRIu64
				   "}",
				flow);
		}
	}
	fprintf(f, "\n]}\n");
}

/* ---- SVG ------------------------------------------------------------- */

/* Twelve colours told apart at a glance.  The legend never has more
 * entries than colours (sessions beyond it are grouped), so a colour
 * always names one entry. */
static const char *const palette[] = {
	"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2",
	"#edc948", "#ff9da7", "#9c755f", "#17becf", "#8c8c00", "#7f7f7f",
};
#define LEGEND_MAX (sizeof(palette) / sizeof(palette[0]))
/* The narrowest op box drawn, in px: a shorter op still shows. */
#define MIN_W 2.0

/* Legend entries: sessions with ops, each its own while they fit; beyond
 * LEGEND_MAX the busiest keep theirs and the rest are grouped by uid (up to
 * three uids) or as "others". */
struct legend {
	size_t n;
	int *entry; /* [t->nsessions]: its entry, -1 for a session without ops */
	char label[LEGEND_MAX][192];
};

struct sess_ops {
	size_t idx, ops;
};

static int by_ops_desc(const void *a, const void *b)
{
	const struct sess_ops *x = a, *y = b;
	if (x->ops != y->ops)
		return x->ops < y->ops ? 1 : -1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static void session_label(char *buf, size_t n, const struct devq_trace_session *s, size_t ops)
{
	snprintf(buf, n, "%s (pid %u, uid %u, session %" PRIu64 "): %zu op%s",
		 s->name[0] ? s->name : "client", s->pid, s->uid, s->id, ops, ops == 1 ? "" : "s");
}

static int build_legend(const struct devq_trace *t, struct legend *L)
{
	size_t ns = t->nsessions, used = 0;
	L->n = 0;
	L->entry = malloc((ns + 1) * sizeof(*L->entry));
	struct sess_ops *so = calloc(ns + 1, sizeof(*so));
	if (!L->entry || !so) {
		free(so);
		return -1;
	}
	for (size_t i = 0; i < ns; i++) {
		so[i].idx = i;
		L->entry[i] = -1;
	}
	for (size_t k = 0; k < t->nops; k++) {
		int si = session_index(t, t->ops[k].session);
		if (si >= 0)
			so[si].ops++;
	}
	for (size_t i = 0; i < ns; i++)
		if (so[i].ops)
			so[used++] = so[i];
	if (used <= LEGEND_MAX) {
		for (size_t i = 0; i < used; i++) {
			L->entry[so[i].idx] = (int)i;
			session_label(L->label[i], sizeof(L->label[i]), &t->sessions[so[i].idx],
				      so[i].ops);
		}
		L->n = used;
		free(so);
		return 0;
	}
	qsort(so, used, sizeof(*so), by_ops_desc);
	/* g groups leave LEGEND_MAX - g sessions their own entry: the fewest
	 * groups by uid (up to 3) whose uids cover the rest, else "others". */
	size_t groups = 1, keep = LEGEND_MAX - 1;
	uint32_t uids[3];
	bool by_uid = false;
	for (size_t g = 1; g <= 3 && !by_uid; g++) {
		size_t nu = 0, k = LEGEND_MAX - g;
		bool fits = true;
		for (size_t i = k; i < used && fits; i++) {
			uint32_t u = t->sessions[so[i].idx].uid;
			size_t j = 0;
			while (j < nu && uids[j] != u)
				j++;
			if (j == nu) {
				if (nu == g)
					fits = false;
				else
					uids[nu++] = u;
			}
		}
		if (fits) {
			by_uid = true;
			groups = nu;
			keep = LEGEND_MAX - g;
		}
	}
	for (size_t i = 0; i < keep; i++) {
		L->entry[so[i].idx] = (int)i;
		session_label(L->label[i], sizeof(L->label[i]), &t->sessions[so[i].idx], so[i].ops);
	}
	for (size_t g = 0; g < groups; g++) {
		size_t nsess = 0, nops = 0;
		for (size_t i = keep; i < used; i++) {
			if (by_uid && t->sessions[so[i].idx].uid != uids[g])
				continue;
			L->entry[so[i].idx] = (int)(keep + g);
			nsess++;
			nops += so[i].ops;
		}
		if (by_uid)
			snprintf(L->label[keep + g], sizeof(L->label[0]),
				 "%zu more sessions of uid %u: %zu ops", nsess, uids[g], nops);
		else
			snprintf(L->label[keep + g], sizeof(L->label[0]),
				 "others: %zu more sessions of several users: %zu ops", nsess, nops);
	}
	L->n = keep + groups;
	free(so);
	return 0;
}

static void xml_str(FILE *f, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '&': fputs("&amp;", f); break;
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '"': fputs("&quot;", f); break;
		case '\'': fputs("&apos;", f); break;
		default:
			/* XML 1.0 forbids most control characters. */
			fputc((unsigned char)*s < 0x20 ? '?' : *s, f);
		}
	}
}

/* A round tick step (1, 2 or 5 times a power of ten) and its unit. */
static uint64_t tick_step(uint64_t span, int want)
{
	uint64_t raw = span / (uint64_t)want + 1, step = 1;
	while (step * 10 <= raw)
		step *= 10;
	if (step * 5 <= raw)
		return step * 5;
	if (step * 2 <= raw)
		return step * 2;
	return step;
}

static void fmt_time(char *buf, size_t n, uint64_t ns, uint64_t step)
{
	if (step >= 1000000000ull)
		snprintf(buf, n, "%g s", (double)ns / 1e9);
	else if (step >= 1000000)
		snprintf(buf, n, "%g ms", (double)ns / 1e6);
	else if (step >= 1000)
		snprintf(buf, n, "%g µs", (double)ns / 1e3);
	else
		snprintf(buf, n, "%" PRIu64 " ns", ns);
}

#define SVG_W 1200
#define SVG_LEFT 120
#define SVG_RIGHT 30
#define LANE_H 48
#define LANE_GAP 12

struct svg_geom {
	uint64_t t0, t1;
	double scale; /* px per ns */
	int top;
	int lane_of[1024]; /* stream -> lane index, -1 unused */
};

static double sx(const struct svg_geom *g, uint64_t t)
{
	if (t < g->t0)
		t = g->t0;
	return SVG_LEFT + (double)(t - g->t0) * g->scale;
}

static int lane_y(const struct svg_geom *g, uint32_t stream)
{
	return g->top + g->lane_of[stream < 1024 ? stream : 1023] * (LANE_H + LANE_GAP);
}

static uint64_t dt(uint64_t from, uint64_t to)
{
	return to > from ? to - from : 0;
}

static void svg_box(FILE *f, const struct svg_geom *g, uint64_t a, uint64_t b, int y, int h,
		    const char *color, double opacity, const char *cls)
{
	double x0 = sx(g, a), x1 = sx(g, b);
	double w = x1 - x0 < 0.5 ? 0.5 : x1 - x0;
	fprintf(f, "<rect class=\"%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\" "
		   "fill-opacity=\"%.2f\"/>\n",
		cls, x0, y, w, h, color, opacity);
}

/* One op: its phases shaded around the device box, a tooltip naming it. */
static void svg_op(FILE *f, const struct trace_ctx *c, const struct svg_geom *g,
		   const struct devq_trace_op *o, const char *col)
{
	int y = lane_y(g, o->stream);
	char name[48], label[96], d[4][24];
	op_name(c, o, name, sizeof(name));
	op_label(c, o, label, sizeof(label));
	devctl_fmt_dur(d[0], sizeof(d[0]), dt(o->t.client_submit, o->t.handoff));
	devctl_fmt_dur(d[1], sizeof(d[1]), dt(o->t.handoff, o->t.device_start));
	devctl_fmt_dur(d[2], sizeof(d[2]), dt(o->t.device_start, o->t.device_end));
	devctl_fmt_dur(d[3], sizeof(d[3]), dt(o->t.device_end, o->t.observed));
	fprintf(f, "<g class=\"op\" data-session=\"%" PRIu64 "\" data-queue=\"%u\" "
		   "data-point=\"%" PRIu64 "\"><title>",
		o->session, o->queue, o->point);
	xml_str(f, label);
	fprintf(f, " — session %" PRIu64 " queue %u point %" PRIu64 " on stream %u: %s; "
		   "submit %s, queued %s, device %s, sync %s</title>\n",
		o->session, o->queue, o->point, o->stream, devq_code_name(o->code), d[0], d[1], d[2],
		d[3]);
	svg_box(f, g, o->t.client_submit, o->t.handoff, y + 2, 7, col, 0.25, "submit");
	svg_box(f, g, o->t.handoff, o->t.device_start, y + 2, 7, col, 0.55, "queued");
	double x0 = sx(g, o->t.device_start), x1 = sx(g, o->t.device_end);
	double w = x1 - x0 < MIN_W ? MIN_W : x1 - x0;
	/* An outline only where it leaves colour inside, or marks a failure. */
	const char *stroke = o->code ? "#d00000" : w >= 3 ? "#333" : "none";
	fprintf(f, "<rect class=\"device\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
		   "fill=\"%s\" stroke=\"%s\" stroke-width=\"%s\"/>\n",
		x0, y + 11, w, LANE_H - 22, col, stroke, o->code ? "1.5" : "0.5");
	if (w > 7.0 * (double)strlen(name)) {
		fprintf(f, "<text x=\"%.2f\" y=\"%d\" fill=\"white\">", x0 + 3, y + LANE_H / 2 + 4);
		xml_str(f, name);
		fprintf(f, "</text>\n");
	}
	svg_box(f, g, o->t.device_end, o->t.observed, y + LANE_H - 9, 7, col, 0.35, "sync");
	for (size_t k = 0; k < o->nbuffers; k++) {
		if (!o->buffers[k].released)
			continue;
		double x = sx(g, o->t.observed);
		fprintf(f, "<path class=\"release\" d=\"M%.2f,%d l-4,-7 l8,0 z\" fill=\"#222\">"
			   "<title>buffer %" PRIu64 " released</title></path>\n",
			x, y + LANE_H, o->buffers[k].id);
	}
	fprintf(f, "</g>\n");
}

/* Successive ops on a lane, each narrower than MIN_W and each starting
 * within MIN_W of the one before, of one legend entry, none failed nor
 * releasing a buffer: drawn as one box with one tooltip, where a box each
 * made a smear of outlines (and megabytes). */
struct burst {
	bool on, mixed;
	size_t first, last, n;
	int entry;
	double x1;
	uint64_t device_ns;
};

static void svg_burst(FILE *f, const struct trace_ctx *c, const struct svg_geom *g,
		      const struct burst *b, const char *col)
{
	const struct devq_trace *t = c->t;
	const struct devq_trace_op *a = &t->ops[b->first], *z = &t->ops[b->last];
	if (b->n == 1) {
		svg_op(f, c, g, a, col);
		return;
	}
	char name[48], dev[24], span[24];
	op_name(c, a, name, sizeof(name));
	devctl_fmt_dur(dev, sizeof(dev), b->device_ns);
	devctl_fmt_dur(span, sizeof(span), dt(a->t.device_start, z->t.device_end));
	int y = lane_y(g, a->stream);
	double x0 = sx(g, a->t.device_start);
	double w = b->x1 - x0 < MIN_W ? MIN_W : b->x1 - x0;
	fprintf(f, "<g class=\"burst\" data-ops=\"%zu\" data-stream=\"%u\"><title>%zu short ops "
		   "(%s%s) on stream %u, from session %" PRIu64 " queue %u point %" PRIu64
		   " to session %" PRIu64 " queue %u point %" PRIu64 ": device %s in all, within %s"
		   "</title>\n",
		b->n, a->stream, b->n, b->mixed ? "mostly " : "", name, a->stream, a->session,
		a->queue, a->point, z->session, z->queue, z->point, dev, span);
	fprintf(f, "<rect class=\"device\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" "
		   "fill=\"%s\" stroke=\"none\"/>\n</g>\n",
		x0, y + 11, w, LANE_H - 22, col);
}

static int write_svg(const struct trace_ctx *c, FILE *f)
{
	const struct devq_trace *t = c->t;
	struct svg_geom g = { .t0 = UINT64_MAX, .t1 = 0 };
	for (int i = 0; i < 1024; i++)
		g.lane_of[i] = -1;
	for (size_t i = 0; i < t->nops; i++) {
		const struct devq_trace_op *o = &t->ops[i];
		if (o->t.client_submit && o->t.client_submit < g.t0)
			g.t0 = o->t.client_submit;
		if (o->t.handoff < g.t0)
			g.t0 = o->t.handoff;
		if (o->t.observed > g.t1)
			g.t1 = o->t.observed;
		if (o->stream < 1024)
			g.lane_of[o->stream] = 0;
	}
	int nlanes = 0;
	for (int i = 0; i < 1024; i++)
		if (g.lane_of[i] == 0)
			g.lane_of[i] = nlanes++;
	if (!t->nops)
		g.t0 = g.t1 = 0;
	uint64_t span = g.t1 > g.t0 ? g.t1 - g.t0 : 1;
	g.scale = (double)(SVG_W - SVG_LEFT - SVG_RIGHT) / (double)span;

	/* The legend: a colour per entry, in two columns beyond four. */
	struct legend L;
	if (build_legend(t, &L) < 0) {
		free(L.entry);
		return -1;
	}
	int cols = L.n > 4 ? 2 : 1, rows = (int)((L.n + (size_t)cols - 1) / (size_t)cols);
	g.top = 60 + rows * 16 + 24;
	int axis_y = g.top + nlanes * (LANE_H + LANE_GAP) + 4;
	int height = axis_y + 50;

	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		   "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
		   "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n",
		SVG_W, height, SVG_W, height);
	fprintf(f, "<title>devq trace: %zu ops on %d device streams</title>\n", t->nops, nlanes);
	fprintf(f, "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"9\" refY=\"5\" "
		   "markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\"><path d=\"M0,0 L10,5 L0,10 "
		   "z\" fill=\"#222\"/></marker><marker id=\"arrow-h\" viewBox=\"0 0 10 10\" "
		   "refX=\"9\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\">"
		   "<path d=\"M0,0 L10,5 L0,10 z\" fill=\"#c05000\"/></marker></defs>\n");
	fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
	fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">devq timeline — "
		   "backend ");
	xml_str(f, t->backend);
	fprintf(f, " (");
	xml_str(f, t->device);
	fprintf(f, "), %zu ops</text>\n", t->nops);
	fprintf(f, "<text x=\"10\" y=\"38\">Each lane is a device stream.  Box: device time (red "
		   "outline: failed); thin bar above: submit (light) then queued (darker); thin bar "
		   "below: sync.  Arrows: explicit waits (black), buffer hazards (orange, dashed); ▼ "
		   "buffer released.  Hover for details.</text>\n");
	for (size_t i = 0; i < L.n; i++) {
		int x = 10 + (int)(i % (size_t)cols) * (SVG_W / 2), y = 56 + (int)(i / (size_t)cols) * 16;
		fprintf(f, "<g class=\"legend\"><rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" "
			   "fill=\"%s\"/><text x=\"%d\" y=\"%d\">",
			x, y, palette[i], x + 18, y + 10);
		xml_str(f, L.label[i]);
		fprintf(f, "</text></g>\n");
	}

	/* Lanes; the high-priority streams marked and tinted. */
	for (int i = 0; i < 1024; i++) {
		if (g.lane_of[i] < 0)
			continue;
		int y = lane_y(&g, (uint32_t)i);
		bool high = c->normal_streams && (uint32_t)i >= c->normal_streams;
		fprintf(f, "<g class=\"lane%s\" id=\"stream-%d\" data-stream=\"%d\">"
			   "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" "
			   "stroke=\"#ccc\"/><text x=\"10\" y=\"%d\">stream %d</text>",
			high ? " high" : "", i, i, SVG_LEFT, y, SVG_W - SVG_LEFT - SVG_RIGHT, LANE_H,
			high ? "#fdf0e0" : "#f4f4f4", y + LANE_H / 2 - (high ? 2 : -4), i);
		if (high)
			fprintf(f, "<text x=\"10\" y=\"%d\" fill=\"#c05000\">high priority</text>",
				y + LANE_H / 2 + 12);
		fprintf(f, "</g>\n");
	}

	/* Ops, short ones in a burst merged per lane. */
	struct burst *open = calloc((size_t)nlanes + 1, sizeof(*open));
	for (size_t i = 0; i < t->nops; i++) {
		const struct devq_trace_op *o = &t->ops[i];
		int si = session_index(t, o->session);
		int entry = si < 0 ? -1 : L.entry[si];
		const char *col = entry < 0 ? "#7f7f7f" : palette[entry];
		double x0 = sx(&g, o->t.device_start), x1 = sx(&g, o->t.device_end);
		bool released = false;
		for (size_t k = 0; k < o->nbuffers; k++)
			released |= o->buffers[k].released;
		bool narrow = x1 - x0 < MIN_W && !o->code && !released && open;
		struct burst *b = open ? &open[g.lane_of[o->stream < 1024 ? o->stream : 1023]] : NULL;
		if (b && b->on && narrow && b->entry == entry && x0 <= b->x1 + MIN_W) {
			b->mixed |= o->executable != t->ops[b->last].executable;
			b->last = i;
			b->n++;
			if (x1 > b->x1)
				b->x1 = x1;
			b->device_ns += dt(o->t.device_start, o->t.device_end);
			continue;
		}
		if (b && b->on) {
			svg_burst(f, c, &g, b, b->entry < 0 ? "#7f7f7f" : palette[b->entry]);
			b->on = false;
		}
		if (narrow) {
			*b = (struct burst){ .on = true, .first = i, .last = i, .n = 1, .entry = entry,
					     .x1 = x1 > x0 + MIN_W ? x1 : x0 + MIN_W,
					     .device_ns = dt(o->t.device_start, o->t.device_end) };
			continue;
		}
		svg_op(f, c, &g, o, col);
	}
	for (int i = 0; open && i < nlanes; i++)
		if (open[i].on)
			svg_burst(f, c, &g, &open[i],
				  open[i].entry < 0 ? "#7f7f7f" : palette[open[i].entry]);
	free(open);
	free(L.entry);

	/* Dependency arrows, producer's device end -> consumer's device start. */
	for (size_t i = 0; i < t->nops; i++) {
		const struct devq_trace_op *o = &t->ops[i];
		for (size_t k = 0; k < o->nwaits; k++) {
			if (o->waits[k].kind == DEVQ_TRACE_WAIT_QUEUE)
				continue;
			const struct devq_trace_op *p =
				find_op(t, o->session, o->waits[k].queue, o->waits[k].point);
			if (!p)
				continue;
			bool hz = o->waits[k].kind == DEVQ_TRACE_WAIT_HAZARD;
			int y0 = lane_y(&g, p->stream) + LANE_H / 2, y1 = lane_y(&g, o->stream) + LANE_H / 2;
			fprintf(f, "<line class=\"dep %s\" x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" "
				   "stroke=\"%s\" stroke-width=\"1.2\"%s marker-end=\"url(#%s)\"/>\n",
				hz ? "hazard" : "explicit", sx(&g, p->t.device_end), y0,
				sx(&g, o->t.device_start), y1, hz ? "#c05000" : "#222",
				hz ? " stroke-dasharray=\"4 2\"" : "", hz ? "arrow-h" : "arrow");
		}
	}

	/* Time axis, relative to the first submit. */
	fprintf(f, "<g class=\"axis\"><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000\"/>\n",
		SVG_LEFT, axis_y, SVG_W - SVG_RIGHT, axis_y);
	uint64_t step = tick_step(span, 8);
	for (uint64_t v = 0; v <= span; v += step) {
		char lab[32];
		fmt_time(lab, sizeof(lab), v, step);
		double x = sx(&g, g.t0 + v);
		fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#000\"/>"
			   "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n",
			x, axis_y, x, axis_y + 5, x, axis_y + 18, lab);
	}
	fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">time since the first submit "
		   "(CLOCK_MONOTONIC %.6f s)</text></g>\n",
		(SVG_LEFT + SVG_W - SVG_RIGHT) / 2, axis_y + 36, (double)g.t0 / 1e9);
	fprintf(f, "</svg>\n");
	return 0;
}

/* ---- the command ----------------------------------------------------- */

static int write_out(const struct trace_ctx *c, const char *path, bool svg)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "w") : stdout;
	if (!f) {
		fprintf(stderr, "devctl trace: cannot write %s: %s\n", path, strerror(errno));
		return 4;
	}
	int bad = 0;
	if (svg)
		bad = write_svg(c, f) < 0;
	else
		write_json(c, f);
	bad |= ferror(f);
	long size = ftell(f);
	if (!bad && (c->t->nops > DEFAULT_LAST || size > WARN_BYTES)) {
		fprintf(stderr, "devctl trace: warning: %s holds %zu ops", path, c->t->nops);
		if (size >= 0)
			fprintf(stderr, " in %.1f MB", (double)size / 1e6);
		fprintf(stderr, "; a viewer may be slow and the picture crowded (--last N or "
				"--duration SECONDS narrows it)\n");
	}
	if (f != stdout)
		bad |= fclose(f) != 0;
	else
		bad |= fflush(f) != 0;
	if (bad) {
		fprintf(stderr, "devctl trace: writing %s failed\n", path);
		return 4;
	}
	return 0;
}

static int parse_num(const char *opt, const char *v, double max, double *out)
{
	char *end;
	errno = 0;
	double x = strtod(v, &end);
	if (errno || end == v || *end || !(x >= 0) || x > max) {
		fprintf(stderr, "devctl trace: %s: '%s' is not a number in 0..%.0f\n", opt, v, max);
		return 2;
	}
	*out = x;
	return 0;
}

int devctl_trace_main(const char *sock, int argc, char **argv)
{
	const char *json_path = NULL, *svg_path = NULL;
	struct devq_trace_query qy = { 0 };
	double duration = -1, last = -1;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		bool val = !strcmp(a, "--duration") || !strcmp(a, "--last") || !strcmp(a, "-o") ||
			   !strcmp(a, "--svg") || !strcmp(a, "--output");
		if (val && i + 1 >= argc) {
			fprintf(stderr, "devctl trace: %s needs a value\n", a);
			return 2;
		}
		int r = 0;
		if (!strcmp(a, "--all"))
			qy.all = true;
		else if (!strcmp(a, "--duration"))
			r = parse_num(a, argv[++i], 86400, &duration);
		else if (!strcmp(a, "--last"))
			r = parse_num(a, argv[++i], 1 << 22, &last);
		else if (!strcmp(a, "-o") || !strcmp(a, "--output"))
			json_path = argv[++i];
		else if (!strcmp(a, "--svg"))
			svg_path = argv[++i];
		else {
			fprintf(stderr, "devctl trace: unknown argument '%s'\n", a);
			return 2;
		}
		if (r)
			return r;
	}
	if (!json_path && !svg_path) {
		fprintf(stderr, "devctl trace: say where to write it: -o FILE (JSON) and/or "
				"--svg FILE\n");
		return 2;
	}
	if (duration >= 0 && last > 0) {
		fprintf(stderr, "devctl trace: --duration and --last exclude each other\n");
		return 2;
	}
	bool by_default = duration < 0 && last < 0;
	qy.last = by_default ? DEFAULT_LAST : last > 0 ? (uint32_t)last : 0;
	devq *q = NULL;
	int r = devq_connect(sock, "devctl trace", &q);
	if (r < 0) {
		fprintf(stderr, "devctl: %s%s\n", q ? devq_last_error(q) : strerror(-r),
			devctl_conn_hint(r, q));
		devq_disconnect(q);
		return 3;
	}
	struct trace_ctx c = { .normal_streams = devq_get_info(q)->streams };
	int rc = 3;
	if (devq_exec_list(q, &c.execs, &c.nexecs) < 0)
		goto fail;
	if (duration >= 0) {
		/* The daemon's clock marks the start: only ops it sees complete
		 * after now are taken. */
		struct devq_trace_query now = { .all = qy.all, .no_ops = true };
		if (devq_trace_get(q, &now, &c.t) < 0)
			goto fail;
		qy.since_ns = c.t->now_ns;
		devq_trace_free(c.t);
		c.t = NULL;
		/* Said once the window is open, so a script knows when to start. */
		fprintf(stderr, "devctl trace: recording for %g s\n", duration);
		struct timespec ts = { (time_t)duration,
				       (long)((duration - floor(duration)) * 1e9) };
		while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
			;
	}
	if (devq_trace_get(q, &qy, &c.t) < 0)
		goto fail;
	if (!c.t->capacity)
		fprintf(stderr, "devctl trace: devqd records no ops (started with "
				"--trace-records 0)\n");
	if (c.t->truncated)
		fprintf(stderr, "devctl trace: the oldest ops asked for are missing (devqd's ring "
				"of %u ops overflowed, or more matched than one reply carries)\n",
			c.t->capacity);
	if (by_default && c.t->nops >= DEFAULT_LAST)
		fprintf(stderr, "devctl trace: the newest %d ops (by default; --last 0 takes every "
				"op devqd keeps, up to %u)\n",
			DEFAULT_LAST, c.t->capacity);
	rc = 0;
	if (json_path)
		rc = write_out(&c, json_path, false);
	if (svg_path && write_out(&c, svg_path, true))
		rc = 4;
	if (!rc && strcmp(json_path ? json_path : "", "-") && strcmp(svg_path ? svg_path : "", "-"))
		fprintf(stderr, "devctl trace: %zu ops from %zu sessions\n", c.t->nops,
			c.t->nsessions);
	devq_trace_free(c.t);
	devq_disconnect(q);
	return rc;
fail:
	fprintf(stderr, "devctl trace: %s\n", devq_last_error(q));
	devq_trace_free(c.t);
	devq_disconnect(q);
	return 3;
}
