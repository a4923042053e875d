/* SPDX-License-Identifier: Apache-2.0 */
/* Fairness between tenants, measured: two tenants (root and uid 65534,
 * each in a process of its own, one thread driving all its sessions) keep spin ops in
 * flight against one devqd for a few seconds, and the device's own
 * start/end stamps of every op say what each tenant got.
 *
 *   sessions  A: 4 sessions x 16 queues of 20 ms ops; B: 4 ops of 5 ms in
 *             flight on 2 queues.  B's share of the device's time (fair:
 *             50 %), and how much longer than the longest op running when
 *             it arrived each of B's ops waited (device start - receipt).
 *   weights   A (share 1) and B (share 3, fair-shares 65534:3), each 16
 *             queues of 1 ms ops: B's part of the device time they used.
 *   many      A: 1 session of 16 queues; B: 256 sessions of one queue
 *             (its session quota), 1 ms ops: A's part (fair: 50 %).
 *   shapeQ    (Q = 4, 8 or 16) A (share 1) and B (share 3), each 16 ops
 *             of 2 ms in flight over Q in-order queues (16/Q deep): how
 *             busy the 4 streams were while both had work, and B's device
 *             time over A's (fair: 3).  Placement decides these: a queue
 *             with ops in flight cannot simply move to a free stream.
 *
 * usage: fair_bench [--check] [--seconds S]
 *                   [sessions|weights|many|shape4|shape8|shape16|shapes]...
 * (default: sessions weights many shape4; shapes: the three shapes).
 * The devqd is $DEVQ_BUILD/devqd (bench_util.h), started per scenario
 * with --allow-users 65534 and its socket opened to all.  --check exits 1 when a figure misses a generous bound (make
 * check-slow); the targets themselves are in bench/RESULTS.md.  Runs as
 * root (it switches uid). */
#include <errno.h>
#include <inttypes.h>
#include <grp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "devq.h"

#define NOBODY 65534
#define MAXREC 400000
#define STREAMS 4

struct rec {
	uint64_t recv, start, end;
};

/* One tenant's run, in memory shared with the process that runs it. */
struct tenant {
	/* what to run */
	uid_t uid;
	unsigned sessions, queues, depth;
	uint64_t ns;
	/* Each new op to the session's next queue in turn rather than to the
	 * queue of the op that completed: the depth per queue then varies
	 * and queues drain and refill, as a client spreading work does. */
	bool spread;
	/* results */
	atomic_ulong n;
	int failed;
	char why[200];
	struct rec r[MAXREC];
};

static void fail(struct tenant *t, const char *what, devq *q)
{
	if (!t->failed) {
		t->failed = 1;
		snprintf(t->why, sizeof(t->why), "%s: %s", what, q ? devq_last_error(q) : "");
	}
}

static int submit_spin(struct tenant *t, devq *q, const struct devq_exec *spin, uint32_t queue)
{
	struct devq_arg ns = DEVQ_U64("ns", t->ns);
	struct devq_op op = { .queue = queue, .kind = DEVQ_OP_KERNEL, .exec = spin, .args = &ns,
			      .nargs = 1 };
	if (devq_submit(q, &op, 1, NULL) < 0) {
		fail(t, "submit", q);
		return -1;
	}
	return 0;
}

/* The tenant's process: one thread drives all of its sessions (poll on
 * their sockets), so that both tenants' clients get the same share of the
 * host's CPU whatever their number of sessions; the daemon, not the
 * client, is what is measured. */
static void tenant_main(struct tenant *t, const char *sock, int go_fd, uint64_t seconds)
{
	if (t->uid && (setgroups(0, NULL) < 0 || setgid(t->uid) < 0 || setuid(t->uid) < 0)) {
		fail(t, "setuid", NULL);
		_exit(1);
	}
	devq **q = calloc(t->sessions, sizeof(*q));
	const struct devq_exec **spin = calloc(t->sessions, sizeof(*spin));
	struct pollfd *pfd = calloc(t->sessions, sizeof(*pfd));
	uint64_t *inflight = calloc(t->sessions, sizeof(*inflight));
	unsigned *turn = calloc(t->sessions, sizeof(*turn));
	if (!q || !spin || !pfd || !inflight || !turn)
		_exit(1);
	for (unsigned s = 0; s < t->sessions; s++) {
		int ok = devq_connect(sock, "fair-bench", &q[s]) == 0;
		for (unsigned i = 1; ok && i <= t->queues; i++)
			ok = devq_queue_open(q[s], i) == 0;
		ok = ok && devq_exec_lookup(q[s], "spin", &spin[s]) == 0;
		if (!ok) {
			fail(t, "connect/open", q[s]);
			_exit(1);
		}
		pfd[s] = (struct pollfd){ .fd = devq_fd(q[s]), .events = POLLIN };
	}
	char c;
	if (read(go_fd, &c, 1) != 1)
		_exit(1);
	uint64_t deadline = bu_now_ns() + seconds * 1000000000ull, total = 0;
	for (unsigned s = 0; s < t->sessions; s++)
		for (unsigned i = 1; i <= t->queues; i++)
			for (unsigned k = 0; k < t->depth; k++) {
				if (submit_spin(t, q[s], spin[s], i) < 0)
					_exit(1);
				inflight[s]++;
				total++;
			}
	while (total && !t->failed) {
		if (poll(pfd, t->sessions, 30000) <= 0) {
			fail(t, "poll: no completion for 30 s", NULL);
			break;
		}
		for (unsigned s = 0; s < t->sessions && !t->failed; s++) {
			if (!pfd[s].revents)
				continue;
			struct devq_completion cc;
			while (inflight[s] && devq_next_completion(q[s], &cc, 0) == 0) {
				inflight[s]--;
				total--;
				if (cc.code) {
					fail(t, "op failed", q[s]);
					break;
				}
				unsigned long k = atomic_fetch_add(&t->n, 1);
				if (k < MAXREC)
					t->r[k] = (struct rec){ cc.t.received, cc.t.device_start,
								cc.t.device_end };
				if (bu_now_ns() < deadline) {
					uint32_t next = t->spread ? 1 + turn[s]++ % t->queues
								  : cc.queue;
					if (submit_spin(t, q[s], spin[s], next) < 0)
						break;
					inflight[s]++;
					total++;
				}
			}
		}
	}
	for (unsigned s = 0; s < t->sessions; s++)
		devq_disconnect(q[s]);
	_exit(t->failed ? 1 : 0);
}

/* Device time of t's ops inside [t0, t1]. */
static uint64_t busy(const struct tenant *t, uint64_t t0, uint64_t t1)
{
	uint64_t sum = 0, n = atomic_load(&t->n);
	for (uint64_t i = 0; i < n && i < MAXREC; i++) {
		uint64_t a = t->r[i].start > t0 ? t->r[i].start : t0;
		uint64_t b = t->r[i].end < t1 ? t->r[i].end : t1;
		if (b > a)
			sum += b - a;
	}
	return sum;
}

/* The earliest device start and the latest device end of t's ops. */
static void span_of(const struct tenant *t, uint64_t *first, uint64_t *last)
{
	uint64_t n = atomic_load(&t->n);
	*first = UINT64_MAX;
	*last = 0;
	for (uint64_t i = 0; i < n && i < MAXREC; i++) {
		if (t->r[i].start < *first)
			*first = t->r[i].start;
		if (t->r[i].end > *last)
			*last = t->r[i].end;
	}
}

/* The longest op of a or b running at time x. */
static uint64_t longest_running(const struct tenant *a, const struct tenant *b, uint64_t x)
{
	uint64_t m = 0;
	const struct tenant *ts[2] = { a, b };
	for (int k = 0; k < 2; k++) {
		uint64_t n = atomic_load(&ts[k]->n);
		for (uint64_t i = 0; i < n && i < MAXREC; i++) {
			const struct rec *r = &ts[k]->r[i];
			if (r->start <= x && x < r->end && r->end - r->start > m)
				m = r->end - r->start;
		}
	}
	return m;
}

static int run_pair(struct tenant *a, struct tenant *b, const char *daemon_args, uint64_t seconds)
{
	setenv("DEVQD_ARGS", daemon_args, 1);
	struct bu_daemon d;
	if (bu_daemon_start(&d) < 0) {
		fprintf(stderr, "fair_bench: devqd did not start\n");
		return -1;
	}
	/* Both tenants may connect: uid 65534 is in --allow-users. */
	if (chmod(d.dir, 0755) < 0 || chmod(d.sock, 0666) < 0) {
		perror("fair_bench: chmod");
		bu_daemon_stop(&d);
		return -1;
	}
	int go[2];
	if (pipe(go) < 0)
		return -1;
	pid_t pid[2];
	struct tenant *ts[2] = { a, b };
	for (int k = 0; k < 2; k++) {
		pid[k] = fork();
		if (pid[k] == 0) {
			close(go[1]);
			tenant_main(ts[k], d.sock, go[0], seconds);
		}
	}
	close(go[0]);
	if (write(go[1], "gg", 2) != 2)
		return -1;
	close(go[1]);
	int bad = 0;
	for (int k = 0; k < 2; k++) {
		int st;
		waitpid(pid[k], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			fprintf(stderr, "fair_bench: tenant uid %u failed: %s\n", (unsigned)ts[k]->uid,
				ts[k]->why);
			bad = 1;
		}
	}
	bu_daemon_stop(&d);
	return bad ? -1 : 0;
}

static struct tenant *tenant_new(uid_t uid, unsigned sessions, unsigned queues, unsigned depth,
				 uint64_t ns)
{
	struct tenant *t = mmap(NULL, sizeof(*t), PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (t == MAP_FAILED)
		return NULL;
	memset(t, 0, sizeof(*t));
	t->uid = uid;
	t->sessions = sessions;
	t->queues = queues;
	t->depth = depth;
	t->ns = ns;
	return t;
}

static bool check_mode;
static int misses;

static void verdict(const char *what, bool ok)
{
	if (!ok) {
		misses++;
		printf("  %s: MISSED\n", what);
	}
}

static int scenario(const char *name, uint64_t seconds, struct bu_json *j)
{
	struct tenant *a, *b;
	const char *args = "--allow-users 65534 --streams 4";
	if (!strcmp(name, "sessions")) {
		a = tenant_new(0, 4, 16, 2, 20000000);
		b = tenant_new(NOBODY, 1, 2, 2, 5000000);
	} else if (!strcmp(name, "weights")) {
		a = tenant_new(0, 1, 16, 2, 1000000);
		b = tenant_new(NOBODY, 1, 16, 2, 1000000);
		args = "--allow-users 65534 --streams 4 --fair-shares 65534:3";
	} else if (!strcmp(name, "many")) {
		a = tenant_new(0, 1, 16, 2, 1000000);
		b = tenant_new(NOBODY, 256, 1, 2, 1000000);
	} else if (!strcmp(name, "shape4") || !strcmp(name, "shape8") ||
		   !strcmp(name, "shape16")) {
		unsigned nq = (unsigned)strtoul(name + 5, NULL, 10);
		a = tenant_new(0, 1, nq, 16 / nq, 2000000);
		b = tenant_new(NOBODY, 1, nq, 16 / nq, 2000000);
		if (a && b)
			a->spread = b->spread = true;
		args = "--allow-users 65534 --streams 4 --fair-shares 65534:3";
	} else {
		fprintf(stderr, "fair_bench: unknown scenario '%s'\n", name);
		return 2;
	}
	if (!a || !b || run_pair(a, b, args, seconds) < 0)
		return 1;
	/* While both ran: from the later first start (plus a warm-up) to the
	 * earlier last end. */
	uint64_t fa, la, fb, lb;
	span_of(a, &fa, &la);
	span_of(b, &fb, &lb);
	uint64_t t0 = (fa > fb ? fa : fb) + 300000000ull;
	uint64_t t1 = la < lb ? la : lb;
	if (t1 <= t0 + 500000000ull) {
		fprintf(stderr, "fair_bench: %s: the tenants overlapped for too short a time\n", name);
		return 1;
	}
	double span = (double)(t1 - t0);
	double da = (double)busy(a, t0, t1), db = (double)busy(b, t0, t1);
	bu_json_begin_obj(j);
	bu_json_key_str(j, "scenario", name);
	bu_json_key_num(j, "window_s", span / 1e9);
	bu_json_key_num(j, "a_device_s", da / 1e9);
	bu_json_key_num(j, "b_device_s", db / 1e9);
	if (!strcmp(name, "sessions")) {
		/* B's share of the device's time (4 streams), and its ops'
		 * waits beyond the longest op running when each arrived. */
		double share = db / (span * STREAMS);
		uint64_t n = atomic_load(&b->n), worst = 0, nwait = 0;
		uint64_t *w = calloc(n ? n : 1, sizeof(*w));
		int64_t worst_excess = INT64_MIN;
		for (uint64_t i = 0; i < n && i < MAXREC; i++) {
			const struct rec *r = &b->r[i];
			if (r->recv < t0 || r->recv > t1)
				continue;
			uint64_t wait = r->start > r->recv ? r->start - r->recv : 0;
			int64_t ex = (int64_t)wait - (int64_t)longest_running(a, b, r->recv);
			if (ex > worst_excess)
				worst_excess = ex;
			if (wait > worst)
				worst = wait;
			w[nwait++] = wait;
		}
		bu_sort(w, nwait);
		printf("sessions: B (1 session, 2 queues, 4 x 5 ms in flight) against A (4 sessions x "
		       "16 queues of 20 ms), %.1f s:\n  B's share of the device %.1f %% (target >= "
		       "40 %%, fair 50 %%); B's ops: %" PRIu64 ", wait p50 %.2f ms, p99 %.2f ms, max "
		       "%.2f ms; longest wait beyond the longest op running at its arrival: %+.2f "
		       "ms (target <= 2 ms)\n",
		       span / 1e9, 100 * share, nwait, bu_quantile(w, nwait, 0.5) / 1e6,
		       bu_quantile(w, nwait, 0.99) / 1e6, worst / 1e6, worst_excess / 1e6);
		bu_json_key_num(j, "b_share", share);
		bu_json_key_num(j, "b_wait_p99_ms", bu_quantile(w, nwait, 0.99) / 1e6);
		bu_json_key_num(j, "b_wait_excess_max_ms", worst_excess / 1e6);
		free(w);
		if (check_mode) {
			verdict("B's share >= 30 %", share >= 0.30);
			verdict("B's wait beyond the running op <= 20 ms", worst_excess <= 20000000);
		}
	} else if (!strcmp(name, "weights")) {
		double pb = db / (da + db);
		printf("weights: B (share 3) against A (share 1), 16 queues of 1 ms ops each, %.1f "
		       "s:\n  B's part of the device time they used %.1f %% (target 75 %% +- 7)\n",
		       span / 1e9, 100 * pb);
		bu_json_key_num(j, "b_part", pb);
		if (check_mode)
			verdict("B's part within 75 % +- 15", pb >= 0.60 && pb <= 0.90);
	} else if (!strncmp(name, "shape", 5)) {
		double use = (da + db) / (span * STREAMS), ratio = da > 0 ? db / da : 0;
		printf("%s: B (share 3) and A (share 1), each 16 x 2 ms ops in flight on %u "
		       "queues x %u, %.1f s:\n  streams busy %.1f %% (target >= 95 %%), B:A device "
		       "time %.2f (target 3 +- 0.3)\n",
		       name, a->queues, a->depth, span / 1e9, 100 * use, ratio);
		bu_json_key_num(j, "busy", use);
		bu_json_key_num(j, "ratio", ratio);
		if (check_mode) {
			verdict("streams busy >= 85 %", use >= 0.85);
			verdict("B:A within 3 +- 0.75", ratio >= 2.25 && ratio <= 3.75);
		}
	} else {
		double pa = da / (da + db);
		printf("many: A (1 session) against B (256 sessions), 1 ms ops, %.1f s:\n  A's part "
		       "of the device time they used %.1f %% (target 50 %% +- 5)\n",
		       span / 1e9, 100 * pa);
		bu_json_key_num(j, "a_part", pa);
		if (check_mode)
			verdict("A's part within 50 % +- 15", pa >= 0.35 && pa <= 0.65);
	}
	bu_json_end_obj(j);
	munmap(a, sizeof(*a));
	munmap(b, sizeof(*b));
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t seconds = 4;
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--check"))
			check_mode = true;
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: fair_bench [--check] [--seconds S] "
					"[sessions|weights|many|shape4|shape8|shape16|shapes]...\n");
			return 2;
		}
	}
	if (getuid() != 0) {
		fprintf(stderr, "fair_bench: needs root (it runs one tenant as uid %d)\n", NOBODY);
		return 2;
	}
	/* 256 sessions of one user: their sockets and pidfds in devqd (whose
	 * per-user fd budget is a quarter of its RLIMIT_NOFILE) and here. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 8192) {
		rl.rlim_cur = rl.rlim_max < 8192 ? rl.rlim_max : 8192;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	const char *all[] = { "sessions", "weights", "many", "shape4" };
	const char *shapes[] = { "shape4", "shape8", "shape16" };
	const char **names = i < argc ? (const char **)&argv[i] : all;
	int n = i < argc ? argc - i : 4;
	if (n == 1 && !strcmp(names[0], "shapes")) {
		names = shapes;
		n = 3;
	}
	struct bu_json j;
	bu_json_open(&j, "fair");
	bu_json_host(&j);
	bu_json_begin_array(&j, "scenarios");
	bu_print_host();
	int rc = 0;
	for (int k = 0; k < n && !rc; k++)
		rc = scenario(names[k], seconds, &j);
	bu_json_end_array(&j);
	bu_json_close(&j);
	if (!rc && misses)
		rc = 1;
	return rc;
}
