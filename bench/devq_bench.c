/* SPDX-License-Identifier: Apache-2.0 */
/* devq benchmarks.  Each subcommand starts its own devqd (or uses --socket),
 * prints a table and writes $DEVQ_BENCH_OUT/<name>.json:
 *
 *   rtt     null-op round trip against a raw Unix-socket ping-pong between
 *           two processes, interleaved rounds, medians and p99
 *   tput    pipelined null ops/s: one sendmsg per op, one op per submit
 *           with coalescing, batches of 8/64/512; raw message stream beside
 *   fit     launch-bound fit T(N) = N L + T_serial for dependent chains and
 *           independent ops, N = 1 .. 100000
 *   scale   1..16 client processes: aggregate ops/s and p99 latency
 *   zcopy   per-op time and socket bytes per op, buffers 4 KiB .. 256 MiB
 *   wc      work conservation: many tenants, few long ops; the short ops'
 *           queued time (handed off -> device start), median and p99
 *   load    N null ops and exit (the workload of bench/callgrind.sh); with
 *           checksum, N checksum ops over two buffers instead
 *   pagecheck  one op, then N checks of its point (strace -c shows the
 *           checks cost no syscall)
 *
 * The null op is `spin ns=0`: validated, ordered and completed like any
 * kernel, with no device work.  --quick shrinks every run to seconds. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "devq.h"

static bool quick;
static const char *socket_opt;
static int rounds_opt;

#define WINDOW 4096 /* null ops in flight per client */

static void die(const char *what, devq *q)
{
	fprintf(stderr, "bench: %s: %s\n", what, q ? devq_last_error(q) : strerror(errno));
	exit(1);
}

/* ---- a devq client ----------------------------------------------------- */

struct cl {
	devq *q;
	const struct devq_exec *spin;
	struct devq_arg ns0;
	/* What cl_run submits: the null op, or (cl_use_checksum) a kernel
	 * with two buffer arguments. */
	const struct devq_exec *exec;
	const struct devq_arg *args;
	unsigned nargs;
	struct devq_arg cks[3];
	struct devq_buffer *cbuf[2];
	unsigned nq;
	uint64_t sub[8]; /* points submitted per queue (queue ids 1..nq) */
};

static void cl_open(struct cl *c, const char *sock, unsigned nq)
{
	memset(c, 0, sizeof(*c));
	if (devq_connect(sock, "bench", &c->q) < 0)
		die("connect", c->q);
	if (devq_exec_lookup(c->q, "spin", &c->spin) < 0)
		die("spin", c->q);
	c->ns0 = (struct devq_arg){ .name = "ns", .type = DEVQ_ARG_U64, .v.u64 = 0 };
	c->exec = c->spin;
	c->args = &c->ns0;
	c->nargs = 1;
	c->nq = nq;
	for (unsigned i = 1; i <= nq; i++)
		if (devq_queue_open(c->q, i) < 0)
			die("queue", c->q);
}

/* cl_run submits checksum over 64 bytes (data: in, out: out; two buffer
 * arguments to validate and order) instead of the null op. */
static void cl_use_checksum(struct cl *c)
{
	if (devq_exec_lookup(c->q, "checksum", &c->exec) < 0 ||
	    devq_buffer_create(c->q, 64, DEVQ_BUFFER_SHARED, &c->cbuf[0]) < 0 ||
	    devq_buffer_create(c->q, 8, DEVQ_BUFFER_SHARED, &c->cbuf[1]) < 0)
		die("checksum", c->q);
	c->cks[0] = (struct devq_arg){ .name = "n", .type = DEVQ_ARG_U64, .v.u64 = 64 };
	c->cks[1] = (struct devq_arg){ .name = "data", .type = DEVQ_ARG_BUFFER,
				       .v.buf = { c->cbuf[0], 0 } };
	c->cks[2] = (struct devq_arg){ .name = "out", .type = DEVQ_ARG_BUFFER,
				       .v.buf = { c->cbuf[1], 0 } };
	c->args = c->cks;
	c->nargs = 3;
}

static void cl_close(struct cl *c)
{
	devq_disconnect(c->q);
}

/* Completion records keep arriving on the socket; take them so the ring
 * (and the daemon's outbound queue) stays small.  One read per call. */
static void cl_drain(struct cl *c)
{
	struct devq_completion x;
	while (devq_next_completion(c->q, &x, 0) == 0)
		if (x.code != DEVQ_OK) {
			fprintf(stderr, "bench: op failed: %s %s\n", devq_code_name(x.code),
				x.message);
			exit(1);
		}
}

static void cl_wait_all(struct cl *c, uint64_t slack)
{
	for (unsigned i = 1; i <= c->nq; i++)
		if (c->sub[i - 1] > slack &&
		    devq_wait(c->q, i, c->sub[i - 1] - slack, -1, NULL) < 0)
			die("wait", c->q);
}

/* n null ops in submit calls of `batch`, over the client's queues
 * round-robin; dep: op i waits on op i-1 (a chain across queues).  Keeps at
 * most WINDOW in flight.  Returns ns from first submit to last completion. */
static uint64_t cl_run(struct cl *c, uint64_t n, unsigned batch, bool dep)
{
	struct devq_op *ops = calloc(batch, sizeof(*ops));
	struct devq_wait *w = calloc(batch, sizeof(*w));
	if (!ops || !w)
		die("out of memory", NULL);
	uint64_t t0 = bu_now_ns(), done = 0, inflight_base = 0;
	unsigned rr = 0;
	uint32_t prevq = 0;
	uint64_t prevp = 0;
	while (done < n) {
		unsigned k = n - done < batch ? (unsigned)(n - done) : batch;
		for (unsigned i = 0; i < k; i++) {
			uint32_t qid = 1 + rr;
			rr = (rr + 1) % c->nq;
			ops[i] = (struct devq_op){ .queue = qid, .kind = DEVQ_OP_KERNEL,
						   .exec = c->exec, .args = c->args,
						   .nargs = c->nargs };
			uint64_t pt = ++c->sub[qid - 1];
			if (dep && prevq && prevq != qid) {
				w[i] = (struct devq_wait){ prevq, prevp };
				ops[i].waits = &w[i];
				ops[i].nwaits = 1;
			}
			prevq = qid;
			prevp = pt;
		}
		if (devq_submit(c->q, ops, k, NULL) < 0)
			die("submit", c->q);
		done += k;
		if (done - inflight_base >= WINDOW) {
			cl_wait_all(c, WINDOW / 2 / c->nq);
			cl_drain(c);
			inflight_base = done - WINDOW / 2;
		}
	}
	cl_wait_all(c, 0);
	uint64_t t1 = bu_now_ns();
	cl_drain(c);
	free(ops);
	free(w);
	return t1 - t0;
}

/* ---- rtt --------------------------------------------------------------- */

/* Raw baseline: a child echoes one byte; the samples are write+read. */
struct pingpong {
	int fd;
	pid_t pid;
};

static void pp_start(struct pingpong *p)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair", NULL);
	fflush(NULL);
	p->pid = fork();
	if (p->pid == 0) {
		close(sv[0]);
		char b;
		while (read(sv[1], &b, 1) == 1)
			if (write(sv[1], &b, 1) != 1)
				break;
		_exit(0);
	}
	close(sv[1]);
	p->fd = sv[0];
}

static void pp_stop(struct pingpong *p)
{
	close(p->fd);
	waitpid(p->pid, NULL, 0);
}

static uint64_t pp_once(struct pingpong *p)
{
	char b = 'x';
	uint64_t t = bu_now_ns();
	if (write(p->fd, &b, 1) != 1 || read(p->fd, &b, 1) != 1)
		die("ping-pong", NULL);
	return bu_now_ns() - t;
}

/* One null op, submit to completion seen.  record: wait for the completion
 * record on the socket (devq_wait with out), else for the point only. */
static uint64_t devq_once(struct cl *c, bool record)
{
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = c->spin,
			      .args = &c->ns0, .nargs = 1 };
	struct devq_completion x;
	uint64_t t = bu_now_ns(), p;
	if (devq_submit(c->q, &op, 1, &p) < 0 || devq_wait(c->q, 1, p, -1, record ? &x : NULL) < 0)
		die("round trip", c->q);
	uint64_t dt = bu_now_ns() - t;
	c->sub[0] = p;
	return dt;
}

static int bench_rtt(const char *sock)
{
	int rounds = rounds_opt ? rounds_opt : quick ? 10 : 20;
	int per = quick ? 300 : 2000;
	struct pingpong pp;
	pp_start(&pp);
	/* Side by side: the completion page with the hint-driven wake-up, a
	 * second daemon that wakes on every publication, and a client
	 * without a page (completions through the socket only). */
	struct bu_daemon d2 = { 0 };
	setenv("DEVQD_CPAGE_WAKE", "always", 1);
	int r2 = bu_daemon_start(&d2);
	unsetenv("DEVQD_CPAGE_WAKE");
	if (r2 < 0)
		die("second devqd", NULL);
	struct cl c, ca, cs, cr;
	cl_open(&c, sock, 1);
	cl_open(&ca, d2.sock, 1);
	setenv("DEVQ_NO_CPAGE", "1", 1);
	cl_open(&cs, sock, 1);
	unsetenv("DEVQ_NO_CPAGE");
	/* The record through the socket although the page is there: the
	 * path before the record ring. */
	setenv("DEVQ_NO_CRING", "1", 1);
	cl_open(&cr, sock, 1);
	unsetenv("DEVQ_NO_CRING");
	enum { BASE, REC, RECSOCK, PAGE, ALWAYS, SOCK, NK };
	static const char *const names[NK] = { "socket ping-pong", "devq (completion record)",
					       "devq (record, no ring)", "devq (wait on point)",
					       "devq (point, always wake)", "devq (no page: socket)" };
	struct cl *cls[NK] = { NULL, &c, &cr, &c, &ca, &cs };
	bool want_rec[NK] = { false, true, true, false, false, true };
	uint64_t *all[NK];
	double *med[NK];
	for (int k = 0; k < NK; k++) {
		all[k] = calloc((size_t)rounds * per, sizeof(uint64_t));
		med[k] = calloc((size_t)rounds, sizeof(double));
		if (!all[k] || !med[k])
			die("out of memory", NULL);
	}
	uint64_t *tmp = calloc(per, sizeof(uint64_t));
	/* Warm up both paths (page faults, daemon allocations). */
	for (int i = 0; i < 200; i++) {
		pp_once(&pp);
		for (int k = REC; k < NK; k++)
			devq_once(cls[k], true);
	}
	for (int k = REC; k < NK; k++)
		cl_drain(cls[k]);
	for (int r = 0; r < rounds; r++) {
		for (int k = 0; k < NK; k++) {
			for (int i = 0; i < per; i++)
				tmp[i] = k == BASE ? pp_once(&pp) : devq_once(cls[k], want_rec[k]);
			if (k != BASE)
				cl_drain(cls[k]);
			memcpy(all[k] + (size_t)r * per, tmp, per * sizeof(uint64_t));
			bu_sort(tmp, per);
			med[k][r] = (double)bu_quantile(tmp, per, 0.5);
		}
	}
	pp_stop(&pp);
	cl_close(&c);
	cl_close(&ca);
	cl_close(&cs);
	cl_close(&cr);
	bu_daemon_stop(&d2);

	struct bu_json j;
	bu_json_open(&j, "rtt");
	bu_json_host(&j);
	bu_json_key_num(&j, "rounds", rounds);
	bu_json_key_num(&j, "per_round", per);
	bu_print_host();
	printf("## round trip of a null op: %d interleaved rounds of %d\n", rounds, per);
	printf("%-28s %12s %12s %12s %10s\n", "path", "median us", "p99 us", "min-round us",
	       "ratio");
	double mb = 0;
	bu_json_begin_array(&j, "rows");
	for (int k = 0; k < NK; k++) {
		size_t n = (size_t)rounds * per;
		bu_sort(all[k], n);
		double p99 = (double)bu_quantile(all[k], n, 0.99);
		double lo = med[k][0];
		for (int r = 1; r < rounds; r++)
			lo = med[k][r] < lo ? med[k][r] : lo;
		double m = bu_median_d(med[k], rounds);
		if (k == BASE)
			mb = m;
		printf("%-28s %12.2f %12.2f %12.2f %10.2f\n", names[k], m / 1e3, p99 / 1e3,
		       lo / 1e3, m / mb);
		bu_json_begin_obj(&j);
		bu_json_key_str(&j, "path", names[k]);
		bu_json_key_num(&j, "median_of_round_medians_ns", m);
		bu_json_key_num(&j, "p99_ns", p99);
		bu_json_key_num(&j, "ratio_to_pingpong", m / mb);
		bu_json_end_obj(&j);
	}
	bu_json_end_array(&j);
	bu_json_close(&j);
	for (int k = 0; k < NK; k++) {
		free(all[k]);
		free(med[k]);
	}
	free(tmp);
	return 0;
}

/* ---- tput -------------------------------------------------------------- */

/* Raw baseline: one write per message of a null op's frame size, a child
 * reading everything; messages/s. */
static double stream_baseline(uint64_t n, size_t msg)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair", NULL);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		char buf[65536];
		uint64_t got = 0;
		ssize_t r;
		while (got < n * msg && (r = read(sv[1], buf, sizeof(buf))) > 0)
			got += (uint64_t)r;
		char ok = 1;
		if (write(sv[1], &ok, 1) != 1)
			_exit(1);
		_exit(0);
	}
	close(sv[1]);
	char buf[256] = { 0 };
	uint64_t t = bu_now_ns();
	for (uint64_t i = 0; i < n; i++)
		if (write(sv[0], buf, msg) != (ssize_t)msg)
			die("stream", NULL);
	char ok;
	if (read(sv[0], &ok, 1) != 1)
		die("stream end", NULL);
	uint64_t dt = bu_now_ns() - t;
	close(sv[0]);
	waitpid(pid, NULL, 0);
	return (double)n * 1e9 / (double)dt;
}

static int bench_tput(const char *sock)
{
	int rounds = rounds_opt ? rounds_opt : quick ? 3 : 10;
	uint64_t n = quick ? 20000 : 200000;
	struct {
		const char *name;
		unsigned batch;
		size_t coalesce;
	} modes[] = {
		{ "1 op/submit, 1 sendmsg/op", 1, 0 },
		{ "1 op/submit, coalesced 64 KiB", 1, 65536 },
		{ "batch 8", 8, 0 },
		{ "batch 64", 64, 0 },
		{ "batch 512", 512, 0 },
	};
	enum { NM = sizeof(modes) / sizeof(modes[0]) };
	double rate[NM + 1][64];
	double bytes_per_op[NM] = { 0 }, flushes_per_op[NM] = { 0 };
	if (rounds > 64)
		rounds = 64;
	for (int r = 0; r < rounds; r++) {
		rate[NM][r] = stream_baseline(n, 48);
		for (int m = 0; m < NM; m++) {
			struct cl c;
			cl_open(&c, sock, 1);
			devq_set_coalescing(c.q, modes[m].coalesce);
			cl_run(&c, 2000, modes[m].batch, false); /* warm-up */
			struct devq_io_stats s0, s1;
			devq_get_io_stats(c.q, &s0);
			uint64_t dt = cl_run(&c, n, modes[m].batch, false);
			devq_get_io_stats(c.q, &s1);
			rate[m][r] = (double)n * 1e9 / (double)dt;
			bytes_per_op[m] = (double)(s1.bytes_sent - s0.bytes_sent) / (double)n;
			flushes_per_op[m] = (double)(s1.flushes - s0.flushes) / (double)n;
			cl_close(&c);
		}
	}
	struct bu_json j;
	bu_json_open(&j, "tput");
	bu_json_host(&j);
	bu_json_key_num(&j, "rounds", rounds);
	bu_json_key_num(&j, "ops_per_round", (double)n);
	bu_print_host();
	printf("## pipelined null ops, one client, one queue: median of %d rounds of %llu ops\n",
	       rounds, (unsigned long long)n);
	printf("%-34s %14s %14s %12s %12s\n", "mode", "ops/s", "min ops/s", "B sent/op",
	       "writes/op");
	bu_json_begin_array(&j, "rows");
	for (int m = 0; m <= NM; m++) {
		double lo = rate[m][0];
		for (int r = 1; r < rounds; r++)
			lo = rate[m][r] < lo ? rate[m][r] : lo;
		double med = bu_median_d(rate[m], rounds);
		const char *name = m < NM ? modes[m].name : "raw stream, 1 write/48 B msg";
		printf("%-34s %14.0f %14.0f %12.1f %12.3f\n", name, med, lo,
		       m < NM ? bytes_per_op[m] : 48.0, m < NM ? flushes_per_op[m] : 1.0);
		bu_json_begin_obj(&j);
		bu_json_key_str(&j, "mode", name);
		bu_json_key_num(&j, "median_ops_per_s", med);
		bu_json_key_num(&j, "min_ops_per_s", lo);
		if (m < NM) {
			bu_json_key_num(&j, "batch", modes[m].batch);
			bu_json_key_num(&j, "coalesce_bytes", (double)modes[m].coalesce);
			bu_json_key_num(&j, "bytes_sent_per_op", bytes_per_op[m]);
			bu_json_key_num(&j, "writes_per_op", flushes_per_op[m]);
		}
		bu_json_end_obj(&j);
	}
	bu_json_end_array(&j);
	bu_json_close(&j);
	/* The throughput target's ratio: batches of 64 against the raw stream
	 * of the same rounds. */
	double b64 = bu_median_d(rate[3], rounds), raw = bu_median_d(rate[NM], rounds);
	printf("batch 64 / raw stream: %.2fx\n", raw > 0 ? b64 / raw : 0);
	return 0;
}

/* ---- fit --------------------------------------------------------------- */

static int bench_fit(const char *sock)
{
	static const uint64_t ns_full[] = { 1, 10, 100, 1000, 10000, 100000 };
	static const uint64_t ns_quick[] = { 1, 10, 100, 1000, 10000 };
	const uint64_t *ns = quick ? ns_quick : ns_full;
	size_t nn = quick ? 5 : 6;
	int reps = rounds_opt ? rounds_opt : quick ? 3 : 5;
	struct {
		const char *name;
		unsigned nq;
		bool dep;
	} kinds[] = {
		{ "dependent chain (2 queues, each op waits on the previous)", 2, true },
		{ "independent (4 queues, no waits)", 4, false },
	};
	struct bu_json j;
	bu_json_open(&j, "fit");
	bu_json_host(&j);
	bu_json_key_num(&j, "batch", 64);
	bu_print_host();
	printf("## launch-bound fit, batches of 64: T(N) = N * L_launch + T_serial (median of %d)\n",
	       reps);
	bu_json_begin_array(&j, "series");
	for (int k = 0; k < 2; k++) {
		double x[8], y[8];
		printf("%s\n%10s %14s %12s\n", kinds[k].name, "N", "T us", "T/N us");
		bu_json_begin_obj(&j);
		bu_json_key_str(&j, "kind", kinds[k].name);
		bu_json_begin_array(&j, "points");
		for (size_t i = 0; i < nn; i++) {
			double t[16];
			for (int r = 0; r < reps && r < 16; r++) {
				struct cl c;
				cl_open(&c, sock, kinds[k].nq);
				cl_run(&c, 64, 64, kinds[k].dep); /* warm-up */
				t[r] = (double)cl_run(&c, ns[i], 64, kinds[k].dep);
				cl_close(&c);
			}
			x[i] = (double)ns[i];
			y[i] = bu_median_d(t, reps < 16 ? reps : 16);
			printf("%10llu %14.1f %12.3f\n", (unsigned long long)ns[i], y[i] / 1e3,
			       y[i] / 1e3 / x[i]);
			bu_json_begin_obj(&j);
			bu_json_key_num(&j, "n", x[i]);
			bu_json_key_num(&j, "t_ns", y[i]);
			bu_json_end_obj(&j);
		}
		bu_json_end_array(&j);
		struct bu_fit f;
		bu_linfit(x, y, nn, &f);
		printf("  L_launch = %.3f us/op   T_serial = %.1f us   r2 = %.5f   max relative "
		       "residual = %.1f%%\n",
		       f.b / 1e3, f.a / 1e3, f.r2, 100 * f.max_rel_resid);
		bu_json_key_num(&j, "l_launch_ns", f.b);
		bu_json_key_num(&j, "t_serial_ns", f.a);
		bu_json_key_num(&j, "r2", f.r2);
		bu_json_key_num(&j, "max_rel_residual", f.max_rel_resid);
		bu_json_end_obj(&j);
	}
	bu_json_end_array(&j);
	bu_json_close(&j);
	return 0;
}

/* ---- scale ------------------------------------------------------------- */

/* Small, so latency is the system's, not a queue the client built. */
#define SCALE_WINDOW 64

struct scale_slot {
	uint64_t t0, t1, ops;
};

static int bench_scale(const char *sock)
{
	static const unsigned procs[] = { 1, 2, 4, 8, 16 };
	uint64_t per = quick ? 5000 : 40000;
	unsigned batch = 8;
	struct bu_json j;
	bu_json_open(&j, "scale");
	bu_json_host(&j);
	bu_json_key_num(&j, "ops_per_client", (double)per);
	bu_json_key_num(&j, "batch", batch);
	bu_print_host();
	printf("## multi-client scaling: each client %llu null ops in batches of %u\n",
	       (unsigned long long)per, batch);
	printf("%8s %14s %14s %14s\n", "clients", "agg ops/s", "p50 lat us", "p99 lat us");
	bu_json_begin_array(&j, "rows");
	for (size_t pi = 0; pi < sizeof(procs) / sizeof(procs[0]); pi++) {
		unsigned np = procs[pi];
		size_t nlat = (size_t)np * per;
		size_t bytes = sizeof(struct scale_slot) * np + nlat * sizeof(uint64_t);
		void *shm = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				 -1, 0);
		if (shm == MAP_FAILED)
			die("mmap", NULL);
		struct scale_slot *slot = shm;
		uint64_t *lat = (uint64_t *)(slot + np);
		int go[2];
		if (pipe(go) < 0)
			die("pipe", NULL);
		pid_t *pids = calloc(np, sizeof(*pids));
		fflush(NULL);
		for (unsigned p = 0; p < np; p++) {
			pids[p] = fork();
			if (pids[p] == 0) {
				close(go[1]);
				struct cl c;
				cl_open(&c, sock, 1);
				char b;
				if (read(go[0], &b, 1) != 1)
					_exit(1);
				struct devq_op ops[8];
				for (unsigned i = 0; i < batch; i++)
					ops[i] = (struct devq_op){ .queue = 1, .kind = DEVQ_OP_KERNEL,
								   .exec = c.spin, .args = &c.ns0,
								   .nargs = 1 };
				uint64_t *mine = lat + (size_t)p * per, got = 0, sub = 0;
				slot[p].t0 = bu_now_ns();
				while (got < per) {
					if (sub < per && sub - got < SCALE_WINDOW) {
						if (devq_submit(c.q, ops, batch, NULL) < 0)
							die("submit", c.q);
						sub += batch;
						continue;
					}
					struct devq_completion x;
					if (devq_next_completion(c.q, &x, -1) < 0)
						die("completion", c.q);
					mine[got++] = x.t.client_received - x.t.client_submit;
				}
				slot[p].t1 = bu_now_ns();
				slot[p].ops = got;
				cl_close(&c);
				_exit(0);
			}
		}
		close(go[0]);
		usleep(200000); /* every client connected and parked on the pipe */
		char gobuf[16] = { 0 };
		if (write(go[1], gobuf, np) != (ssize_t)np)
			die("go", NULL);
		close(go[1]);
		for (unsigned p = 0; p < np; p++)
			waitpid(pids[p], NULL, 0);
		uint64_t t0 = UINT64_MAX, t1 = 0, ops = 0;
		for (unsigned p = 0; p < np; p++) {
			t0 = slot[p].t0 < t0 ? slot[p].t0 : t0;
			t1 = slot[p].t1 > t1 ? slot[p].t1 : t1;
			ops += slot[p].ops;
		}
		bu_sort(lat, nlat);
		double agg = t1 > t0 ? (double)ops * 1e9 / (double)(t1 - t0) : 0;
		double p50 = (double)bu_quantile(lat, nlat, 0.5), p99 = (double)bu_quantile(lat, nlat, 0.99);
		printf("%8u %14.0f %14.1f %14.1f\n", np, agg, p50 / 1e3, p99 / 1e3);
		bu_json_begin_obj(&j);
		bu_json_key_num(&j, "clients", np);
		bu_json_key_num(&j, "agg_ops_per_s", agg);
		bu_json_key_num(&j, "p50_latency_ns", p50);
		bu_json_key_num(&j, "p99_latency_ns", p99);
		bu_json_key_num(&j, "ops", (double)ops);
		bu_json_end_obj(&j);
		free(pids);
		munmap(shm, bytes);
	}
	bu_json_end_array(&j);
	bu_json_close(&j);
	return 0;
}

/* ---- wc: work conservation ---------------------------------------------- */

#define WC_LONG 2       /* tenants running long ops back to back */
#define WC_SHORT 10     /* tenants submitting short ops one at a time */
#define WC_LONG_NS 50000000ull
#define WC_MAX_SHORT 8192 /* short ops recorded per tenant */

struct wc_slot {
	uint64_t n;
	uint64_t queued[WC_MAX_SHORT]; /* handed off -> device start, ns */
};

/* One tenant: its own session and queue 1; long ones keep a WC_LONG_NS op
 * running until the deadline, short ones submit a null op, wait for its
 * completion record and think 1-3 ms, until the deadline. */
static void wc_tenant(const char *sock, bool lng, uint64_t deadline, struct wc_slot *out,
		      int ready, int go, unsigned seed)
{
	struct cl c;
	cl_open(&c, sock, 1);
	char b = 0;
	if (write(ready, &b, 1) != 1 || read(go, &b, 1) != 1)
		_exit(1);
	struct devq_arg a = { .name = "ns", .type = DEVQ_ARG_U64, .v.u64 = lng ? WC_LONG_NS : 0 };
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = c.spin, .args = &a,
			      .nargs = 1 };
	while (bu_now_ns() < deadline) {
		uint64_t p;
		if (devq_submit(c.q, &op, 1, &p) < 0)
			die("submit", c.q);
		struct devq_completion x;
		if (devq_wait(c.q, 1, p, -1, &x) < 0 || x.code != DEVQ_OK)
			die("wait", c.q);
		if (out->n < WC_MAX_SHORT)
			out->queued[out->n++] = x.t.device_start - x.t.handoff;
		if (!lng)
			usleep(1000 + (rand_r(&seed) % 2000));
	}
	cl_close(&c);
	_exit(0);
}

/* Many tenants, few long ops: WC_LONG tenants keep WC_LONG_NS ops running
 * while WC_SHORT tenants submit null ops; reports the short ops' queued
 * time (handed off -> device start).  Tenants connect one after another, so
 * the queues' placement at open is the same every run; with the default 4
 * normal streams two of them stay idle for the short ops. */
static int bench_wc(const char *sock)
{
	unsigned nt = WC_LONG + WC_SHORT;
	uint64_t dur = quick ? 1000000000ull : 5000000000ull;
	size_t bytes = sizeof(struct wc_slot) * nt;
	struct wc_slot *slot = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				    -1, 0);
	if (slot == MAP_FAILED)
		die("mmap", NULL);
	int go[2], ready[2];
	if (pipe(go) < 0 || pipe(ready) < 0)
		die("pipe", NULL);
	pid_t pids[WC_LONG + WC_SHORT];
	uint64_t deadline = 0;
	fflush(NULL);
	for (unsigned t = 0; t < nt; t++) {
		/* The deadline is fixed once all have connected: a generous
		 * start-up allowance below keeps it after the go. */
		if (t == 0)
			deadline = bu_now_ns() + 2000000000ull + dur;
		pids[t] = fork();
		if (pids[t] < 0)
			die("fork", NULL);
		if (pids[t] == 0) {
			close(go[1]);
			close(ready[0]);
			wc_tenant(sock, t < WC_LONG, deadline, &slot[t], ready[1], go[0], 7 + t);
		}
		char b;
		if (read(ready[0], &b, 1) != 1) /* connected: the next one opens after it */
			die("tenant", NULL);
	}
	close(go[0]);
	close(ready[1]);
	uint64_t t_go = bu_now_ns();
	char gobuf[WC_LONG + WC_SHORT] = { 0 };
	if (write(go[1], gobuf, nt) != (ssize_t)nt)
		die("go", NULL);
	close(go[1]);
	close(ready[0]);
	for (unsigned t = 0; t < nt; t++)
		waitpid(pids[t], NULL, 0);
	uint64_t wall = bu_now_ns() - t_go;
	size_t n = 0, nlong = 0;
	for (unsigned t = 0; t < nt; t++)
		if (t < WC_LONG)
			nlong += slot[t].n;
		else
			n += slot[t].n;
	uint64_t *q = calloc(n ? n : 1, sizeof(*q));
	if (!q)
		die("out of memory", NULL);
	size_t k = 0, over1ms = 0;
	for (unsigned t = WC_LONG; t < nt; t++)
		for (uint64_t i = 0; i < slot[t].n; i++) {
			q[k] = slot[t].queued[i];
			over1ms += q[k] >= 1000000;
			k++;
		}
	bu_sort(q, n);
	double p50 = n ? (double)bu_quantile(q, n, 0.5) : 0, p99 = n ? (double)bu_quantile(q, n, 0.99) : 0,
	       mx = n ? (double)q[n - 1] : 0;
	bu_print_host();
	printf("## work conservation: %u tenants with %.0f ms ops back to back, %u with null ops "
	       "(think 1-3 ms), %.1f s\n",
	       WC_LONG, WC_LONG_NS / 1e6, WC_SHORT, wall / 1e9);
	printf("  short ops %zu   queued p50 %.1f us   p99 %.1f us   max %.1f us   >= 1 ms: %.1f%%"
	       "   long ops %zu\n",
	       n, p50 / 1e3, p99 / 1e3, mx / 1e3, n ? 100.0 * over1ms / n : 0, nlong);
	struct bu_json j;
	bu_json_open(&j, "wc");
	bu_json_host(&j);
	bu_json_key_num(&j, "long_tenants", WC_LONG);
	bu_json_key_num(&j, "short_tenants", WC_SHORT);
	bu_json_key_num(&j, "long_op_ns", (double)WC_LONG_NS);
	bu_json_key_num(&j, "short_ops", (double)n);
	bu_json_key_num(&j, "long_ops", (double)nlong);
	bu_json_key_num(&j, "queued_p50_ns", p50);
	bu_json_key_num(&j, "queued_p99_ns", p99);
	bu_json_key_num(&j, "queued_max_ns", mx);
	bu_json_key_num(&j, "queued_over_1ms_frac", n ? (double)over1ms / n : 0);
	bu_json_close(&j);
	free(q);
	munmap(slot, bytes);
	return 0;
}

/* ---- zcopy ------------------------------------------------------------- */

/* Ops that name a buffer but touch 4 bytes of it: any per-op copy or
 * mapping of the buffer would make their cost grow with its size.  Offset 0
 * keeps the frames the same size for every buffer (varints). */
static int bench_zcopy(const char *sock)
{
	static const uint64_t sizes[] = { 4096, 65536, 1 << 20, 16 << 20, 256ull << 20 };
	uint64_t n = quick ? 5000 : 50000;
	int rtn = quick ? 200 : 1000;
	struct bu_json j;
	bu_json_open(&j, "zcopy");
	bu_json_host(&j);
	bu_print_host();
	printf("## zero copy: fill of 4 bytes into buffers of each size\n");
	printf("%12s %14s %14s %12s %12s\n", "buffer", "pipelined us", "round trip us",
	       "B sent/op", "B recv/op");
	bu_json_begin_array(&j, "rows");
	double base = 0;
	for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		struct cl c;
		cl_open(&c, sock, 1);
		struct devq_buffer *b;
		if (devq_buffer_create(c.q, sizes[si], DEVQ_BUFFER_SHARED, &b) < 0)
			die("buffer", c.q);
		struct devq_op op[64];
		for (int i = 0; i < 64; i++)
			op[i] = (struct devq_op){ .queue = 1, .kind = DEVQ_OP_FILL, .dst = b,
						  .dst_offset = 0, .size = 4,
						  .pattern = 0xd0d0d0d0u };
		struct devq_io_stats s0, s1;
		devq_get_io_stats(c.q, &s0);
		uint64_t t = bu_now_ns(), done = 0, p = 0, pts[64];
		while (done < n) {
			if (devq_submit(c.q, op, 64, pts) < 0)
				die("submit", c.q);
			p = pts[63];
			done += 64;
			if (done % WINDOW == 0) {
				if (devq_wait(c.q, 1, p - WINDOW / 2, -1, NULL) < 0)
					die("wait", c.q);
				cl_drain(&c);
			}
		}
		if (devq_wait(c.q, 1, p, -1, NULL) < 0)
			die("wait", c.q);
		double per_op = (double)(bu_now_ns() - t) / (double)done;
		cl_drain(&c);
		devq_get_io_stats(c.q, &s1);
		uint64_t *rt = calloc(rtn, sizeof(*rt));
		for (int i = 0; i < rtn; i++) {
			uint64_t t2 = bu_now_ns();
			if (devq_submit(c.q, op, 1, &p) < 0 || devq_wait(c.q, 1, p, -1, NULL) < 0)
				die("round trip", c.q);
			rt[i] = bu_now_ns() - t2;
		}
		bu_sort(rt, rtn);
		double rtm = (double)bu_quantile(rt, rtn, 0.5);
		free(rt);
		uint32_t word;
		memcpy(&word, b->map, 4);
		if (word != 0xd0d0d0d0u) {
			fprintf(stderr, "bench: fill did not reach the buffer\n");
			exit(1);
		}
		double sent = (double)(s1.bytes_sent - s0.bytes_sent) / (double)done;
		double recv = (double)(s1.bytes_received - s0.bytes_received) / (double)done;
		if (si == 0)
			base = per_op;
		printf("%12llu %14.3f %14.2f %12.1f %12.1f\n", (unsigned long long)sizes[si],
		       per_op / 1e3, rtm / 1e3, sent, recv);
		bu_json_begin_obj(&j);
		bu_json_key_num(&j, "buffer_bytes", (double)sizes[si]);
		bu_json_key_num(&j, "pipelined_ns_per_op", per_op);
		bu_json_key_num(&j, "ratio_to_4k", per_op / base);
		bu_json_key_num(&j, "round_trip_median_ns", rtm);
		bu_json_key_num(&j, "bytes_sent_per_op", sent);
		bu_json_key_num(&j, "bytes_received_per_op", recv);
		bu_json_end_obj(&j);
		devq_buffer_release(c.q, b);
		devq_buffer_wait_released(c.q, b, -1);
		cl_close(&c);
	}
	bu_json_end_array(&j);
	bu_json_close(&j);
	return 0;
}

/* ---- load (callgrind workload) ---------------------------------------- */

static int bench_load(const char *sock, uint64_t n, unsigned batch, unsigned nq, bool checksum)
{
	struct cl c;
	cl_open(&c, sock, nq < 1 ? 1 : nq > 8 ? 8 : nq);
	if (checksum)
		cl_use_checksum(&c);
	uint64_t t = cl_run(&c, n, batch, false);
	/* bench/py_bench.py reads this line. */
	printf("load: %llu %s ops in batches of %u, %.2f us each, %.0f ops/s\n",
	       (unsigned long long)n, checksum ? "checksum" : "null", batch,
	       n ? (double)t / 1e3 / (double)n : 0.0,
	       t ? (double)n * 1e9 / (double)t : 0.0);
	cl_close(&c);
	return 0;
}

/* ---- rttload (the round trip's path, for strace -c or callgrind) ------ */

/* record: wait for each op's completion record (status and timing, as a
 * binding that reports them must), not only for its point. */
static int bench_rttload(const char *sock, uint64_t n, bool fill, uint64_t bytes, bool record)
{
	struct cl c;
	cl_open(&c, sock, 1);
	struct devq_buffer *b = NULL;
	if (fill && devq_buffer_create(c.q, bytes, DEVQ_BUFFER_SHARED, &b) < 0)
		die("buffer", c.q);
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_FILL, .dst = b, .size = 4,
			      .pattern = 0xd0d0d0d0u };
	uint64_t t = bu_now_ns(), p;
	for (uint64_t i = 0; i < n; i++) {
		if (!fill)
			devq_once(&c, record);
		else if (devq_submit(c.q, &op, 1, &p) < 0 || devq_wait(c.q, 1, p, -1, NULL) < 0)
			die("round trip", c.q);
	}
	t = bu_now_ns() - t;
	printf("rttload: %llu round trips, %.2f us each\n", (unsigned long long)n,
	       n ? (double)t / 1e3 / (double)n : 0.0);
	cl_close(&c);
	return 0;
}

/* ---- pagecheck (the no-syscall claim, for strace -c) ------------------ */

/* One op, then n checks of its completed point.  Run under `strace -c -f`
 * with two values of n: the syscall counts must not differ. */
static int bench_pagecheck(const char *sock, uint64_t n)
{
	struct cl c;
	cl_open(&c, sock, 1);
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = c.spin,
			      .args = &c.ns0, .nargs = 1 };
	uint64_t p;
	struct devq_completion x;
	/* The first wait takes the record: the page slot is surely open. */
	if (devq_submit(c.q, &op, 1, &p) < 0 || devq_wait(c.q, 1, p, -1, &x) < 0 ||
	    devq_submit(c.q, &op, 1, &p) < 0 || devq_wait(c.q, 1, p, -1, NULL) < 0)
		die("op", c.q);
	struct devq_io_stats s0, s1;
	devq_get_io_stats(c.q, &s0);
	uint64_t ok = 0;
	for (uint64_t i = 0; i < n; i++) {
		if (devq_wait(c.q, 1, p, -1, NULL) < 0)
			die("wait", c.q);
		ok += devq_point_state(c.q, 1, p) == DEVQ_POINT_OK;
	}
	devq_get_io_stats(c.q, &s1);
	printf("pagecheck: %llu checks, %llu ok; socket reads %llu, writes %llu, futex waits %llu, "
	       "page hits %llu\n",
	       (unsigned long long)n, (unsigned long long)ok,
	       (unsigned long long)(s1.recv_calls - s0.recv_calls),
	       (unsigned long long)(s1.flushes - s0.flushes),
	       (unsigned long long)(s1.futex_waits - s0.futex_waits),
	       (unsigned long long)(s1.page_hits - s0.page_hits));
	cl_close(&c);
	return ok == n ? 0 : 1;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: devq_bench [--quick] [--rounds N] [--socket PATH] "
		"rtt|tput|fit|scale|zcopy|wc|all\n"
		"       devq_bench --socket PATH load N BATCH [QUEUES] [checksum]  (null ops, or\n"
		"                  checksum: a kernel with two buffer arguments)\n"
		"       devq_bench --socket PATH pagecheck N   (run under strace -c)\n"
		"       devq_bench --socket PATH rttload N [fill [BYTES] | record]  (null-op or fill round\n"
		"                  trips; record: wait for the completion record, not the point)\n"
		"Starts $DEVQ_BUILD/devqd (plus $DEVQD_ARGS) unless --socket is given; writes\n"
		"JSON into $DEVQ_BENCH_OUT (default .).\n");
}

int main(int argc, char **argv)
{
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--socket") && i + 1 < argc)
			socket_opt = argv[++i];
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds_opt = atoi(argv[++i]);
		else {
			usage();
			return 2;
		}
	}
	if (i >= argc) {
		usage();
		return 2;
	}
	const char *what = argv[i];
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(what, "load")) {
		if (!socket_opt || i + 2 >= argc) {
			usage();
			return 2;
		}
		bool cks = !strcmp(argv[argc - 1], "checksum");
		int last = cks ? argc - 1 : argc;
		return bench_load(socket_opt, strtoull(argv[i + 1], NULL, 10),
				  (unsigned)atoi(argv[i + 2]),
				  i + 3 < last ? (unsigned)atoi(argv[i + 3]) : 1, cks);
	}
	if (!strcmp(what, "rttload")) {
		if (!socket_opt || i + 1 >= argc) {
			usage();
			return 2;
		}
		return bench_rttload(socket_opt, strtoull(argv[i + 1], NULL, 10),
				     i + 2 < argc && !strcmp(argv[i + 2], "fill"),
				     i + 3 < argc ? strtoull(argv[i + 3], NULL, 10) : 4096,
				     i + 2 < argc && !strcmp(argv[i + 2], "record"));
	}
	if (!strcmp(what, "pagecheck")) {
		if (!socket_opt || i + 1 >= argc) {
			usage();
			return 2;
		}
		return bench_pagecheck(socket_opt, strtoull(argv[i + 1], NULL, 10));
	}
	struct bu_daemon d = { 0 };
	const char *sock = socket_opt;
	if (!sock) {
		int r = bu_daemon_start(&d);
		if (r < 0) {
			fprintf(stderr, "bench: cannot start devqd: %s\n", strerror(-r));
			return 1;
		}
		sock = d.sock;
	}
	int rc = 0;
	bool all = !strcmp(what, "all");
	bool known = all;
	struct {
		const char *name;
		int (*fn)(const char *);
	} tab[] = { { "rtt", bench_rtt },     { "tput", bench_tput },   { "fit", bench_fit },
		    { "scale", bench_scale }, { "zcopy", bench_zcopy }, { "wc", bench_wc } };
	/* Names run in the order given; "all" runs every one. */
	for (int a = i; a < argc && !rc; a++) {
		bool found = false;
		for (size_t k = 0; k < sizeof(tab) / sizeof(tab[0]); k++) {
			if (all || !strcmp(argv[a], tab[k].name)) {
				found = known = true;
				rc |= tab[k].fn(sock);
				printf("\n");
				fflush(stdout);
			}
		}
		if (!found) {
			fprintf(stderr, "bench: unknown benchmark '%s'\n", argv[a]);
			usage();
			rc = 2;
		}
		if (all)
			break;
	}
	(void)known;
	if (d.pid > 0 && bu_daemon_stop(&d) != 0) {
		fprintf(stderr, "bench: devqd did not exit cleanly\n");
		rc = 1;
	}
	return rc;
}
