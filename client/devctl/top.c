/* SPDX-License-Identifier: Apache-2.0 */
/* devctl top: a live view of devqd, one frame per interval.  Each frame
 * compares two samples of the daemon's recorder (devq_trace_get): counters
 * give rates and busy time, the ops completed in between give the phase
 * percentiles.  Plain ANSI escapes only, so it works over ssh in any
 * terminal; without a terminal (or with --once) frames are plain text. */
#include "devctl/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "devctl/util.h"
#include "devq.h"

static volatile sig_atomic_t top_stop;

static void on_signal(int sig)
{
	(void)sig;
	top_stop = 1;
}

struct top {
	devq *q;
	bool all, tty;
	uint64_t self;
	struct devq_trace *prev, *cur;
	/* The tenants (status) at each sample: shares and waits over the
	 * interval.  NULL where the status failed: no tenant lines. */
	struct devq_status *sprev, *scur;
	FILE *out;
	char err[400]; /* why sampling failed, said once the screen is restored */
};

/* Writes a frame drawn into text to stdout, fitted to the terminal: each
 * line cut to its width (escape sequences take no room) and no more lines
 * than it has rows, the last kept for the "(q quits)" hint, so nothing
 * wraps or scrolls the header away. */
static void emit_fitted(const char *text, size_t len)
{
	struct winsize ws;
	unsigned cols = 80, rows = 24;
	if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col && ws.ws_row) {
		cols = ws.ws_col;
		rows = ws.ws_row;
	}
	const char *hint = strstr(text, "\x1b[J");
	size_t body = hint ? (size_t)(hint - text) : len;
	unsigned row = 0;
	size_t i = 0;
	while (i < body && row + 1 < rows) {
		unsigned vis = 0;
		bool cut = false;
		for (; i < body && text[i] != '\n'; i++) {
			if (text[i] == '\x1b') {
				/* CSI: ESC [ params final-byte */
				size_t j = i + 1;
				if (j < body && text[j] == '[')
					for (j++; j < body && !(text[j] >= 0x40 && text[j] <= 0x7e); j++)
						;
				fwrite(text + i, 1, j + 1 - i, stdout);
				i = j;
				continue;
			}
			if (vis + 1 >= cols) {
				cut = true;
				continue;
			}
			fputc(text[i], stdout);
			vis++;
		}
		if (cut)
			fputs("\x1b[0m\x1b[K", stdout);
		if (i < body) {
			fputc('\n', stdout);
			i++;
		}
		row++;
	}
	if (hint)
		fwrite(hint, 1, len - (size_t)(hint - text), stdout);
	fflush(stdout);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static const struct devq_trace_session *prev_session(const struct devq_trace *t, uint64_t id)
{
	for (size_t i = 0; t && i < t->nsessions; i++)
		if (t->sessions[i].id == id)
			return &t->sessions[i];
	return NULL;
}

/* Phase p of op o: 0 submit, 1 queued, 2 device, 3 sync (daemon side). */
static uint64_t phase(const struct devq_trace_op *o, int p)
{
	const struct devq_timing *t = &o->t;
	switch (p) {
	case 0: return t->handoff - t->client_submit;
	case 1: return t->device_start - t->handoff;
	case 2: return t->device_end - t->device_start;
	default: return t->observed - t->device_end;
	}
}

static void line_end(struct top *tp)
{
	/* Erase what a longer line of the previous frame left there. */
	fputs(tp->tty ? "\x1b[K\n" : "\n", tp->out);
}

static const struct devq_tenant_info *prev_tenant(const struct devq_status *s, const char *name)
{
	for (size_t i = 0; s && i < s->ntenants; i++)
		if (!strcmp(s->tenants[i].name, name))
			return &s->tenants[i];
	return NULL;
}

/* A line per tenant (your own, or every one for an admin): its weight,
 * its part of the device time used in the interval, ops waiting for room
 * and their expected time, and its ops' average wait (device start minus
 * receipt) in the interval. */
static void draw_tenants(struct top *tp)
{
	const struct devq_status *a = tp->sprev, *b = tp->scur;
	FILE *f = tp->out;
	if (!b || !b->ntenants)
		return;
	uint64_t total = 0;
	for (size_t i = 0; i < b->ntenants; i++) {
		const struct devq_tenant_info *p = prev_tenant(a, b->tenants[i].name);
		total += b->tenants[i].device_ns - (p ? p->device_ns : 0);
	}
	fprintf(f, "%s%-16s %6s %7s %8s %10s %10s%s", tp->tty ? "\x1b[7m" : "", "TENANT", "WEIGHT",
		"SHARE", "WAITING", "QUEUED", "WAIT", tp->tty ? "\x1b[0m" : "");
	line_end(tp);
	for (size_t i = 0; i < b->ntenants; i++) {
		const struct devq_tenant_info *t = &b->tenants[i], *p = prev_tenant(a, t->name);
		uint64_t dev = t->device_ns - (p ? p->device_ns : 0);
		uint64_t w = t->wait_ns - (p ? p->wait_ns : 0), nw = t->waits - (p ? p->waits : 0);
		char queued[24], wait[24] = "-";
		devctl_fmt_ns(queued, sizeof(queued), t->queued_ns, 2);
		if (nw)
			devctl_fmt_ns(wait, sizeof(wait), w / nw, 2);
		fprintf(f, "%-16.16s %6u %6.1f%% %8" PRIu64 " %10s %10s", t->name, t->weight,
			total ? 100.0 * (double)dev / (double)total : 0.0, t->ops_waiting, queued,
			wait);
		line_end(tp);
	}
	line_end(tp);
}

static void draw(struct top *tp)
{
	const struct devq_trace *a = tp->prev, *b = tp->cur;
	FILE *f = tp->out;
	double dt = (double)(b->now_ns - a->now_ns) / 1e9;
	if (dt <= 0)
		dt = 1e-9;
	if (tp->tty)
		fputs("\x1b[H", f);

	/* Rates from the sessions of both samples; a new one counts from 0. */
	uint64_t done = 0, inflight = 0, failed = 0;
	for (size_t i = 0; i < b->nsessions; i++) {
		const struct devq_trace_session *s = &b->sessions[i];
		const struct devq_trace_session *p = prev_session(a, s->id);
		if (s->id == tp->self || !s->connected)
			continue;
		done += s->ops_completed - (p ? p->ops_completed : 0);
		failed += s->ops_failed - (p ? p->ops_failed : 0);
		inflight += s->ops_in_flight;
	}
	fprintf(f, "%sdevq top%s  backend %s (%s), %u streams, %s sessions", tp->tty ? "\x1b[1m" : "",
		tp->tty ? "\x1b[0m" : "", b->backend, b->device, b->streams,
		tp->all ? "all" : "your");
	line_end(tp);
	fprintf(f, "ops/s %.0f   in flight %" PRIu64 "   errors/s %.0f   interval %.2f s",
		(double)done / dt, inflight, (double)failed / dt, dt);
	line_end(tp);

	/* Device time in the interval over the interval.  The daemon's
	 * per-stream counters grow by an op's whole device time when it
	 * completes, so an op that ran for several intervals would count
	 * them all in the one where it ended (399 %): the part of each op
	 * completed in this interval that lay before it is taken off again
	 * (it belonged to earlier frames).  A stream that still has ops
	 * of a session in view (queue depth > 0 at the end of the
	 * interval) counts as busy from its last completion in the
	 * interval (or the interval's start) to its end: an op running for
	 * seconds shows 100 % meanwhile, not 0 %.  (An op handed to a
	 * stream but waiting there on another stream counts as busy too.) */
	uint64_t busy = 0, t_a = a->now_ns, t_b = b->now_ns;
	char per[512] = "";
	size_t pl = 0;
	for (uint32_t i = 0; i < b->streams; i++) {
		uint64_t d = b->stream_busy_ns[i] - a->stream_busy_ns[i], last_end = t_a;
		for (size_t k = 0; k < b->nops; k++) {
			const struct devq_trace_op *o = &b->ops[k];
			if (o->stream != i || o->t.device_end <= o->t.device_start)
				continue;
			if (o->t.device_end > last_end)
				last_end = o->t.device_end < t_b ? o->t.device_end : t_b;
			if (o->t.device_start >= t_a)
				continue;
			uint64_t before = (o->t.device_end < t_a ? o->t.device_end : t_a) -
					  o->t.device_start;
			d = d > before ? d - before : 0;
		}
		uint64_t depth = 0;
		for (size_t k = 0; k < b->nsessions; k++)
			for (size_t j = 0; j < b->sessions[k].nqueues; j++)
				if (b->sessions[k].queues[j].stream == i)
					depth += b->sessions[k].queues[j].submitted -
						 b->sessions[k].queues[j].completed;
		if (depth)
			d += t_b - last_end;
		if (d > t_b - t_a)
			d = t_b - t_a;
		busy += d;
		if (pl < sizeof(per) - 32)
			pl += (size_t)snprintf(per + pl, sizeof(per) - pl, "  s%u %3.0f%%", i,
					       100.0 * (double)d / 1e9 / dt);
	}
	fprintf(f, "device busy %3.0f%% |%s",
		b->streams ? 100.0 * (double)busy / 1e9 / dt / b->streams : 0.0, per);
	line_end(tp);
	line_end(tp);

	/* Phase percentiles over the ops completed since the last frame. */
	size_t n = 0;
	uint64_t *v = b->nops ? malloc(b->nops * sizeof(*v)) : NULL;
	fprintf(f, "%-8s %12s %12s   (%zu ops completed in the interval%s)", "PHASE", "P50", "P99",
		b->nops, b->capacity ? "" : "; devqd records no ops");
	line_end(tp);
	static const char *const names[] = { "submit", "queued", "device", "sync" };
	for (int p = 0; p < 4; p++) {
		char p50[24] = "-", p99[24] = "-";
		n = 0;
		for (size_t i = 0; v && i < b->nops; i++)
			if (b->ops[i].session != tp->self)
				v[n++] = phase(&b->ops[i], p);
		if (n) {
			qsort(v, n, sizeof(*v), cmp_u64);
			devctl_fmt_ns(p50, sizeof(p50), v[(n - 1) * 50 / 100], 2);
			devctl_fmt_ns(p99, sizeof(p99), v[(n - 1) * 99 / 100], 2);
		}
		fprintf(f, "%-8s %12s %12s", names[p], p50, p99);
		line_end(tp);
	}
	free(v);
	line_end(tp);

	draw_tenants(tp);

	fprintf(f, "%s%8s %8s %6s %-16s %8s %9s %11s %7s%s", tp->tty ? "\x1b[7m" : "", "SESSION",
		"PID", "UID", "NAME", "OPS/S", "INFLIGHT", "PINNED MiB", "ERRORS",
		tp->tty ? "\x1b[0m" : "");
	line_end(tp);
	for (size_t i = 0; i < b->nsessions; i++) {
		const struct devq_trace_session *s = &b->sessions[i];
		if (s->id == tp->self || !s->connected)
			continue;
		const struct devq_trace_session *p = prev_session(a, s->id);
		uint64_t base = p ? p->ops_completed : 0;
		fprintf(f, "%8" PRIu64 " %8u %6u %-16.16s %8.0f %9" PRIu64 " %11.1f %7" PRIu64, s->id,
			s->pid, s->uid, s->name, (double)(s->ops_completed - base) / dt,
			s->ops_in_flight, (double)s->bytes_mapped / 1048576.0, s->ops_failed);
		line_end(tp);
	}
	line_end(tp);
	fprintf(f, "%s%8s %8s %8s %8s %12s%s", tp->tty ? "\x1b[7m" : "", "SESSION", "QUEUE",
		"STREAM", "DEPTH", "SUBMITTED", tp->tty ? "\x1b[0m" : "");
	line_end(tp);
	for (size_t i = 0; i < b->nsessions; i++) {
		const struct devq_trace_session *s = &b->sessions[i];
		if (s->id == tp->self || !s->connected)
			continue;
		for (size_t k = 0; k < s->nqueues; k++) {
			const struct devq_trace_queue *x = &s->queues[k];
			fprintf(f, "%8" PRIu64 " %8u %8u %8" PRIu64 " %12" PRIu64, s->id, x->id,
				x->stream, x->submitted - x->completed, x->submitted);
			line_end(tp);
		}
	}
	if (tp->tty)
		fputs("\x1b[J(q quits)", f);
	fflush(f);
}

static int sample(struct top *tp)
{
	struct devq_trace_query qy = { .all = tp->all };
	/* Only the ops completed since the previous sample: the percentiles. */
	if (tp->prev)
		qy.since_ns = tp->prev->now_ns;
	else
		qy.no_ops = true;
	int r = devq_trace_get(tp->q, &qy, &tp->cur);
	if (r == 0 && devq_get_status(tp->q, &tp->scur) < 0)
		tp->scur = NULL;
	if (r == -EACCES && tp->all) {
		/* Not an admin: fall back to this user's sessions. */
		tp->all = false;
		qy.all = false;
		r = devq_trace_get(tp->q, &qy, &tp->cur);
	}
	if (r < 0)
		snprintf(tp->err, sizeof(tp->err), "devctl top: %s%s", devq_last_error(tp->q),
			 r == -ECONNRESET || r == -EPIPE ? " (devqd went away)" : "");
	return r;
}

/* Waits up to ms for a key; returns true when q was pressed. */
static bool wait_key(struct top *tp, int ms, bool keys)
{
	uint64_t left = (uint64_t)ms;
	while (left > 0 && !top_stop) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		struct pollfd p = { .fd = 0, .events = POLLIN };
		int r = poll(&p, keys ? 1 : 0, (int)left);
		if (r > 0) {
			char ch[16];
			ssize_t n = read(0, ch, sizeof(ch));
			if (n <= 0)
				keys = false; /* stdin closed: keep refreshing */
			for (ssize_t i = 0; i < n; i++)
				if (ch[i] == 'q' || ch[i] == 'Q')
					return true;
		}
		(void)tp;
		clock_gettime(CLOCK_MONOTONIC, &b);
		uint64_t el = (uint64_t)(b.tv_sec - a.tv_sec) * 1000 +
			      (uint64_t)((b.tv_nsec - a.tv_nsec) / 1000000);
		left = el >= left ? 0 : left - el;
	}
	return top_stop != 0;
}

int devctl_top_main(const char *sock, int argc, char **argv)
{
	bool once = false, all_flag = false;
	double interval = 1.0;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--once")) {
			once = true;
		} else if (!strcmp(argv[i], "--all")) {
			all_flag = true;
		} else if (!strcmp(argv[i], "--interval") && i + 1 < argc) {
			char *end;
			interval = strtod(argv[++i], &end);
			if (*end || end == argv[i] || !(interval >= 0.1 && interval <= 3600)) {
				fprintf(stderr, "devctl top: --interval: '%s' is not a number of seconds "
						"in 0.1..3600\n",
					argv[i]);
				return 2;
			}
		} else {
			fprintf(stderr, "devctl top: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	struct top tp = { .out = stdout };
	/* Root sees everything by default; others ask, and fall back. */
	tp.all = all_flag || geteuid() == 0;
	int r = devq_connect(sock, "devctl top", &tp.q);
	if (r < 0) {
		fprintf(stderr, "devctl: %s%s\n", tp.q ? devq_last_error(tp.q) : strerror(-r),
			devctl_conn_hint(r, tp.q));
		devq_disconnect(tp.q);
		return 3;
	}
	tp.self = devq_get_info(tp.q)->session;
	if (all_flag) {
		/* Asked for explicitly: a refusal is an error, not a fallback. */
		struct devq_trace *t;
		struct devq_trace_query qy = { .all = true, .no_ops = true };
		if (devq_trace_get(tp.q, &qy, &t) < 0) {
			fprintf(stderr, "devctl top: %s\n", devq_last_error(tp.q));
			devq_disconnect(tp.q);
			return 3;
		}
		devq_trace_free(t);
	}
	tp.tty = !once && isatty(1);
	bool keys = !once && isatty(0);
	struct termios saved;
	if (keys && tcgetattr(0, &saved) == 0) {
		struct termios raw = saved;
		raw.c_lflag &= (tcflag_t) ~(ICANON | ECHO);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		tcsetattr(0, TCSANOW, &raw);
	} else {
		keys = false;
	}
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	if (tp.tty)
		fputs("\x1b[?1049h\x1b[?25l\x1b[2J", stdout); /* alternate screen, no cursor */

	int rc = 0;
	if (sample(&tp) < 0) {
		rc = 3;
		goto out;
	}
	tp.prev = tp.cur;
	tp.cur = NULL;
	tp.sprev = tp.scur;
	tp.scur = NULL;
	for (;;) {
		if (wait_key(&tp, (int)(interval * 1000), keys))
			break;
		if (sample(&tp) < 0) {
			rc = 3;
			break;
		}
		if (tp.tty) {
			/* Drawn into memory, then fitted to the terminal. */
			char *text = NULL;
			size_t len = 0;
			tp.out = open_memstream(&text, &len);
			if (tp.out) {
				draw(&tp);
				fclose(tp.out);
				emit_fitted(text, len);
			}
			free(text);
			tp.out = stdout;
		} else {
			draw(&tp);
		}
		devq_trace_free(tp.prev);
		tp.prev = tp.cur;
		tp.cur = NULL;
		devq_status_free(tp.sprev);
		tp.sprev = tp.scur;
		tp.scur = NULL;
		if (once)
			break;
		if (!tp.tty)
			fputs("\n", stdout);
	}
out:
	if (tp.tty)
		fputs("\x1b[?25h\x1b[?1049l", stdout);
	fflush(stdout);
	/* After the screen is back, or the alternate screen would take the
	 * reason with it. */
	if (tp.err[0])
		fprintf(stderr, "%s\n", tp.err);
	if (keys)
		tcsetattr(0, TCSANOW, &saved);
	devq_trace_free(tp.prev);
	devq_trace_free(tp.cur);
	devq_status_free(tp.sprev);
	devq_status_free(tp.scur);
	devq_disconnect(tp.q);
	return rc;
}
