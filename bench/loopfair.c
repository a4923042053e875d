/* SPDX-License-Identifier: Apache-2.0 */
/* loopfair: is devqd's loop shared by tenant?  User A (uid 65534) floods
 * costly requests from several sessions — GetStatus, ListExecutables and a
 * whole-ring TraceRequest with the ring full of A's ops, each reply read at
 * once — while user B (the caller, root) measures the null-op round trip
 * (submit `spin ns=0`, wait for its completion).  Prints B's p50/p99/max
 * alone and under the flood, and A's request rate; writes
 * $DEVQ_BENCH_OUT/loopfair.json.  Needs root (A runs as another uid).
 *
 *   loopfair [--seconds S] [--sessions N] [--nice N] [--quick]
 *
 * --nice runs A's processes at that nice value: on a machine of few cores
 * their decoding of the traces competes with devqd and B for the CPUs, and
 * B then measures the host's scheduler as much as devqd's loop.
 *
 * The daemon is $DEVQ_BUILD/devqd with $DEVQD_ARGS (bench_util.h), plus
 * --allow-users 65534. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "devq.h"
#include "devq.pb-c.h"
#include "frame.h"

#define TENANT_A 65534
#define RING 16384 /* devqd's default trace-records: the ring A fills */

static pid_t main_pid, daemon_pid; /* a failed run stops its devqd */

static void die(const char *what, devq *q)
{
	fprintf(stderr, "loopfair: %s: %s\n", what, q ? devq_last_error(q) : strerror(errno));
	if (getpid() == main_pid && daemon_pid > 0)
		kill(daemon_pid, SIGTERM);
	exit(1);
}

static void become_a(void)
{
	if (setgroups(0, NULL) < 0 || setgid(TENANT_A) < 0 || setuid(TENANT_A) < 0)
		die("setuid 65534", NULL);
}

/* ---- a raw connection: ListExecutables, which libdevq asks only once --- */

struct raw {
	int fd;
	struct devq_tx tx;
	struct devq_rx rx;
};

static void raw_send(struct raw *r, const Devq__ClientMessage *m)
{
	if (devq_tx_push(&r->tx, DEVQ_FRAME_CLIENT, &m->base, NULL, 0) < 0)
		die("raw: push", NULL);
	while (r->tx.bytes) {
		int e = devq_tx_flush(&r->tx, r->fd);
		if (e < 0 && e != -EAGAIN)
			die("raw: send", NULL);
	}
}

/* Reads one frame and drops it (the reply's content is not the point). */
static void raw_reply(struct raw *r)
{
	struct devq_frame f;
	for (;;) {
		int n = devq_rx_next(&r->rx, &f);
		if (n == 1) {
			devq_frame_close_fds(&f);
			return;
		}
		if (n < 0)
			die("raw: frame", NULL);
		ssize_t got = devq_rx_recv(&r->rx, r->fd, 0);
		if (got <= 0)
			die("raw: recv", NULL);
	}
}

static void raw_open(struct raw *r, const char *sock)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	if (strlen(sock) >= sizeof(a.sun_path))
		die("raw: socket path too long", NULL);
	memcpy(a.sun_path, sock, strlen(sock) + 1);
	r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (r->fd < 0 || connect(r->fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("raw: connect", NULL);
	devq_tx_init(&r->tx);
	devq_rx_init(&r->rx, 64u << 20);
	Devq__Hello h = DEVQ__HELLO__INIT;
	h.min_version = 1;
	h.max_version = 1000;
	h.client_name = "loopfair-list";
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
	m.hello = &h;
	raw_send(r, &m);
	raw_reply(r);
}

static void raw_list(struct raw *r)
{
	Devq__ListExecutables le = DEVQ__LIST_EXECUTABLES__INIT;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_LIST_EXECUTABLES;
	m.list_executables = &le;
	raw_send(r, &m);
	raw_reply(r);
}

/* ---- tenant A ----------------------------------------------------------- */

static struct devq_arg ns0 = { .name = "ns", .type = DEVQ_ARG_U64, .v.u64 = 0 };

/* n of A's null ops on q's queue 1, to fill the trace ring. */
static void null_ops(devq *q, unsigned n)
{
	const struct devq_exec *spin;
	if (devq_exec_lookup(q, "spin", &spin) < 0)
		die("fill: spin", q);
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = spin, .args = &ns0,
			      .nargs = 1 };
	uint64_t p = 0;
	for (unsigned i = 0; i < n; i++) {
		if (devq_submit(q, &op, 1, &p) < 0)
			die("fill: submit", q);
		if (i % 1024 == 1023 && devq_wait(q, 1, p, -1, NULL) < 0)
			die("fill: wait", q);
	}
	if (n && devq_wait(q, 1, p, -1, NULL) < 0)
		die("fill: wait", q);
}

static void fill_ring(const char *sock)
{
	devq *q;
	if (devq_connect(sock, "loopfair-fill", &q) < 0 || devq_queue_open(q, 1) < 0)
		die("fill: connect", q);
	null_ops(q, RING);
	devq_disconnect(q);
}

/* One of A's sessions: costly requests, each reply read at once, until
 * told to stop; writes how many it made.  The first (refill) also puts
 * back A's ops that B's pushed out of the ring, so that the traces stay
 * whole-ring. */
static void flood(const char *sock, int stop_fd, int out_fd, bool refill)
{
	devq *q;
	if (devq_connect(sock, "loopfair-flood", &q) < 0 || devq_queue_open(q, 1) < 0)
		die("flood: connect", q);
	struct raw r;
	raw_open(&r, sock);
	struct devq_trace_query whole = { 0 };
	uint64_t n[4] = { 0 }; /* status, list, trace; ops the traces carried */
	for (;;) {
		char c;
		ssize_t k = read(stop_fd, &c, 1);
		if (k == 0 || (k < 0 && errno != EAGAIN)) /* EOF: stop */
			break;
		struct devq_status *st;
		if (devq_get_status(q, &st) < 0)
			die("flood: status", q);
		devq_status_free(st);
		n[0]++;
		raw_list(&r);
		n[1]++;
		struct devq_trace *t;
		if (devq_trace_get(q, &whole, &t) < 0)
			die("flood: trace", q);
		n[3] += t->nops;
		if (refill && t->nops < RING - RING / 16)
			null_ops(q, RING - (unsigned)t->nops);
		devq_trace_free(t);
		n[2]++;
	}
	if (write(out_fd, n, sizeof(n)) != sizeof(n))
		die("flood: report", NULL);
	devq_disconnect(q);
}

/* ---- tenant B ----------------------------------------------------------- */

/* Where the slowest round trips' time went, by the completion's own
 * timestamps: to the daemon's receipt (the loop not yet reading B's
 * socket), inside the daemon (receipt to completion observed), and from
 * there to B holding the completion (publication, wake-up, B scheduled).
 * Means over the round trips at or above the p99. */
struct lat {
	uint64_t p50, p99, max, n;
	double tail_n, tail_to_receipt, tail_in_daemon, tail_to_client;
};

static struct lat round_trips(devq *q, const struct devq_exec *spin, uint64_t ns)
{
	size_t cap = 1 << 20, n = 0;
	uint64_t *v = malloc(cap * sizeof(*v));
	struct devq_timing *tm = malloc(cap * sizeof(*tm));
	if (!v || !tm)
		die("out of memory", NULL);
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = spin, .args = &ns0,
			      .nargs = 1 };
	uint64_t end = bu_now_ns() + ns;
	while (n < cap && bu_now_ns() < end) {
		uint64_t t0 = bu_now_ns(), p;
		struct devq_completion c;
		if (devq_submit(q, &op, 1, &p) < 0 || devq_flush(q) < 0 ||
		    devq_wait(q, 1, p, -1, &c) < 0)
			die("B: null op", q);
		tm[n] = c.t;
		v[n++] = bu_now_ns() - t0;
		usleep(200); /* a client with work of its own between ops */
	}
	uint64_t *sorted = malloc(n * sizeof(*sorted));
	if (!sorted)
		die("out of memory", NULL);
	memcpy(sorted, v, n * sizeof(*v));
	bu_sort(sorted, n);
	struct lat l = { bu_quantile(sorted, n, 0.5), bu_quantile(sorted, n, 0.99), sorted[n - 1],
			 n, 0, 0, 0, 0 };
	for (size_t i = 0; i < n; i++) {
		const struct devq_timing *t = &tm[i];
		if (v[i] < l.p99)
			continue;
		l.tail_n++;
		l.tail_to_receipt += (double)(t->received - t->client_submit);
		l.tail_in_daemon += (double)(t->observed - t->received);
		l.tail_to_client += (double)(t->client_received - t->observed);
	}
	if (l.tail_n) {
		l.tail_to_receipt /= l.tail_n;
		l.tail_in_daemon /= l.tail_n;
		l.tail_to_client /= l.tail_n;
	}
	free(sorted);
	free(tm);
	free(v);
	return l;
}

int main(int argc, char **argv)
{
	double seconds = 5;
	unsigned sessions = 6;
	int niceness = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--sessions") && i + 1 < argc)
			sessions = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--nice") && i + 1 < argc)
			niceness = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--quick"))
			seconds = 1;
		else {
			fprintf(stderr, "usage: loopfair [--seconds S] [--sessions N] [--nice N] "
					"[--quick]\n");
			return 2;
		}
	}
	if (geteuid() != 0) {
		fprintf(stderr, "loopfair: needs root (tenant A runs as uid %d)\n", TENANT_A);
		return 2;
	}
	if (sessions < 1 || sessions > 64 || seconds <= 0) {
		fprintf(stderr, "loopfair: 1..64 sessions, seconds > 0\n");
		return 2;
	}
	char args[1024];
	const char *ea = getenv("DEVQD_ARGS");
	snprintf(args, sizeof(args), "%s%s--allow-users %d", ea ? ea : "", ea ? " " : "",
		 TENANT_A);
	setenv("DEVQD_ARGS", args, 1);
	signal(SIGPIPE, SIG_IGN);
	struct bu_daemon d;
	main_pid = getpid();
	if (bu_daemon_start(&d) < 0)
		die("start devqd", NULL);
	daemon_pid = d.pid;
	if (chmod(d.dir, 0755) < 0 || chmod(d.sock, 0666) < 0)
		die("chmod", NULL);

	int st;

	devq *q;
	const struct devq_exec *spin;
	if (devq_connect(d.sock, "loopfair-B", &q) < 0 || devq_exec_lookup(q, "spin", &spin) < 0 ||
	    devq_queue_open(q, 1) < 0)
		die("B: connect", q);
	uint64_t span = (uint64_t)(seconds * 1e9);
	struct lat alone = round_trips(q, spin, span / 2);
	/* After B's own ops, which would push A's out of the ring. */
	pid_t filler = fork();
	if (filler == 0) {
		become_a();
		fill_ring(d.sock);
		_exit(0);
	}
	if (filler < 0 || waitpid(filler, &st, 0) != filler || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0)
		die("filling the ring", NULL);

	int stop[2], out[2];
	if (pipe(stop) < 0 || pipe(out) < 0)
		die("pipe", NULL);
	pid_t *kids = calloc(sessions, sizeof(*kids));
	for (unsigned i = 0; i < sessions; i++) {
		kids[i] = fork();
		if (kids[i] == 0) {
			close(stop[1]);
			if (fcntl(stop[0], F_SETFL, O_NONBLOCK) < 0)
				die("fcntl", NULL);
			errno = 0;
			if (niceness && nice(niceness) == -1 && errno)
				die("nice", NULL);
			become_a();
			flood(d.sock, stop[0], out[1], i == 0);
			_exit(0);
		}
	}
	close(stop[0]);
	usleep(300000); /* every flood session under way */
	uint64_t t0 = bu_now_ns();
	struct lat loaded = round_trips(q, spin, span);
	double took = (bu_now_ns() - t0) / 1e9;
	close(stop[1]); /* EOF: the floods stop */
	uint64_t total[4] = { 0 };
	for (unsigned i = 0; i < sessions; i++) {
		uint64_t n[4];
		if (read(out[0], n, sizeof(n)) != sizeof(n))
			die("flood report", NULL);
		for (int k = 0; k < 4; k++)
			total[k] += n[k];
	}
	for (unsigned i = 0; i < sessions; i++)
		waitpid(kids[i], &st, 0);
	devq_disconnect(q);
	int rc = bu_daemon_stop(&d);

	bu_print_host();
	printf("loopfair: tenant A (uid %d, nice %d): %u sessions of status + list + whole-ring "
	       "trace (%u ops); tenant B: null-op round trips\n",
	       TENANT_A, niceness, sessions, RING);
	printf("  B alone:      n=%-6llu p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms\n",
	       (unsigned long long)alone.n, alone.p50 / 1e6, alone.p99 / 1e6, alone.max / 1e6);
	printf("  B under A:    n=%-6llu p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms\n",
	       (unsigned long long)loaded.n, loaded.p50 / 1e6, loaded.p99 / 1e6, loaded.max / 1e6);
	printf("  B's slowest 1 %% (%.0f): %.3f ms to the daemon's receipt, %.3f ms in it, "
	       "%.3f ms from completion to B\n",
	       loaded.tail_n, loaded.tail_to_receipt / 1e6, loaded.tail_in_daemon / 1e6,
	       loaded.tail_to_client / 1e6);
	printf("  A's requests: %.0f status/s, %.0f list/s, %.0f trace/s (%.0f ops each)\n",
	       total[0] / took, total[1] / took, total[2] / took,
	       total[2] ? (double)total[3] / total[2] : 0.0);
	struct bu_json j;
	if (bu_json_open(&j, "loopfair") == 0) {
		bu_json_host(&j);
		bu_json_key_num(&j, "sessions", sessions);
		bu_json_key_num(&j, "nice", niceness);
		bu_json_key_num(&j, "alone_p50_ns", (double)alone.p50);
		bu_json_key_num(&j, "alone_p99_ns", (double)alone.p99);
		bu_json_key_num(&j, "loaded_p50_ns", (double)loaded.p50);
		bu_json_key_num(&j, "loaded_p99_ns", (double)loaded.p99);
		bu_json_key_num(&j, "loaded_max_ns", (double)loaded.max);
		bu_json_key_num(&j, "tail_to_receipt_ns", loaded.tail_to_receipt);
		bu_json_key_num(&j, "tail_in_daemon_ns", loaded.tail_in_daemon);
		bu_json_key_num(&j, "tail_to_client_ns", loaded.tail_to_client);
		bu_json_key_num(&j, "status_per_s", total[0] / took);
		bu_json_key_num(&j, "list_per_s", total[1] / took);
		bu_json_key_num(&j, "trace_per_s", total[2] / took);
		bu_json_key_num(&j, "ops_per_trace", total[2] ? (double)total[3] / total[2] : 0);
		bu_json_close(&j);
	}
	return rc == 0 ? 0 : 1;
}
