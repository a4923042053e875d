/* SPDX-License-Identifier: Apache-2.0 */
/* The loop thread is shared by tenant: while one user asks for
 * whole-ring traces of the largest ring devqd keeps (131072 ops, each reply
 * tens of milliseconds of building), another user's null ops are answered
 * between the steps of those replies, not after them.
 *
 * The bound is relative, so that a loaded machine moves both sides: of the
 * other user's round trips, at most one per three traces the flood made may
 * reach a quarter of the flooding user's fastest whole-ring trace (before
 * the replies were built in steps, a null op that arrived during one waited
 * for all of its building, about half of the round trip, the rest being
 * the client's decoding: nearly one such wait per trace).  A miss is
 * measured once more, with a new flood: a stalled VM misses now and then,
 * null ops that wait behind whole traces miss every time.  Timing decides,
 * so under sanitizers and valgrind the figures are printed, not judged.
 * The absolute target (p99 <= 5 ms) is bench/loopfair's. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devq.h"
#include "harness.h"

#define NOBODY 65534
#define RING 131072u /* DEVQ_TRACE_MAX_REPLY_OPS: the longest reply */
/* One: more processes decoding such traces take the two vCPUs of a CI
 * machine from devqd and the bystander, which then measures the scheduler
 * (bench/loopfair floods from six sessions). */
#define FLOODERS 1
/* Null ops allowed to wait a quarter of a trace or more, per trace the
 * flood made: a loaded machine stalls devqd's thread now and then (none in
 * four runs at load 7-8 on two vCPUs); waiting behind whole traces made
 * 0.8 or more per trace. */
#define OVER_PER_TRACE 3 /* at most one per three traces */

static struct daemon_proc D;

static void become_nobody(void)
{
	if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
		_exit(90);
}

static const struct devq_arg ns0 = { .name = "ns", .type = DEVQ_ARG_U64, .v.u64 = 0 };

/* As uid 65534: RING null ops, so that its traces carry the whole ring. */
static int fill_ring(void)
{
	devq *q;
	const struct devq_exec *spin;
	if (devq_connect(D.sock, "fill", &q) < 0 || devq_exec_lookup(q, "spin", &spin) < 0 ||
	    devq_queue_open(q, 1) < 0)
		return 1;
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = spin, .args = &ns0,
			      .nargs = 1 };
	uint64_t p = 0;
	for (unsigned i = 0; i < RING; i++) {
		if (devq_submit(q, &op, 1, &p) < 0)
			return 2;
		if (i % 2048 == 2047 && devq_wait(q, 1, p, -1, NULL) < 0)
			return 3;
	}
	if (devq_wait(q, 1, p, -1, NULL) < 0)
		return 3;
	devq_disconnect(q);
	return 0;
}

/* As uid 65534: whole-ring traces until stop_fd reaches EOF; writes how
 * many and the fastest round trip. */
static int flood(int stop_fd, int out_fd)
{
	devq *q;
	if (devq_connect(D.sock, "flood", &q) < 0) {
		fprintf(stderr, "flood: connect: %s\n", q ? devq_last_error(q) : "");
		return 1;
	}
	struct devq_trace_query whole = { 0 };
	uint64_t res[2] = { 0, UINT64_MAX };
	for (;;) {
		char c;
		ssize_t k = read(stop_fd, &c, 1);
		if (k == 0 || (k < 0 && errno != EAGAIN))
			break;
		uint64_t t0 = harness_now_ns();
		struct devq_trace *t;
		if (devq_trace_get(q, &whole, &t) < 0) {
			fprintf(stderr, "flood: trace: %s\n", devq_last_error(q));
			return 2;
		}
		uint64_t dt = harness_now_ns() - t0;
		size_t nops = t->nops;
		/* The bystander's ops push the oldest of ours out of the
		 * ring while a reply is built: nearly all of it remains. */
		bool whole_ring = nops >= RING * 3 / 4 && nops <= RING;
		devq_trace_free(t);
		if (!whole_ring) {
			fprintf(stderr, "flood: a trace of %zu ops, not nearly %u\n", nops, RING);
			return 3;
		}
		res[0]++;
		if (dt < res[1])
			res[1] = dt;
	}
	devq_disconnect(q);
	return write(out_fd, res, sizeof(res)) == sizeof(res) ? 0 : 4;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* One flood of whole-ring traces from FLOODERS sessions of uid 65534 for
 * 3 s, with q's null ops between: whether few enough of them waited a
 * quarter of a trace (why: the figures). */
static bool flood_and_measure(devq *q, char *why, size_t whylen)
{
	int stop[2], out[2];
	ck_assert_int_eq(pipe(stop), 0);
	ck_assert_int_eq(pipe(out), 0);
	pid_t kids[FLOODERS];
	for (int i = 0; i < FLOODERS; i++) {
		kids[i] = fork();
		ck_assert_int_ge(kids[i], 0);
		if (kids[i] == 0) {
			close(stop[1]);
			if (fcntl(stop[0], F_SETFL, O_NONBLOCK) < 0)
				_exit(91);
			become_nobody();
			_exit(flood(stop[0], out[1]));
		}
	}
	close(stop[0]);
	close(out[1]);

	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
			      .args = &ns0, .nargs = 1 };
	usleep(200000); /* the traces under way */
	static uint64_t lat[100000];
	size_t n = 0;
	uint64_t end = harness_now_ns() + 3000000000ull;
	while (n < sizeof(lat) / sizeof(lat[0]) && harness_now_ns() < end) {
		uint64_t t0 = harness_now_ns(), p;
		ck_assert_int_eq(devq_submit(q, &op, 1, &p), 0);
		ck_assert_int_eq(devq_flush(q), 0);
		ck_assert_int_eq(devq_wait(q, 1, p, 60000, NULL), 0);
		lat[n++] = harness_now_ns() - t0;
		usleep(500);
	}
	close(stop[1]);
	uint64_t traces = 0, fastest = UINT64_MAX;
	for (int i = 0; i < FLOODERS; i++) {
		uint64_t res[2];
		ck_assert_int_eq(read(out[0], res, sizeof(res)), sizeof(res));
		traces += res[0];
		if (res[1] < fastest)
			fastest = res[1];
	}
	ck_assert_int_eq(close(out[0]), 0);
	for (int i = 0; i < FLOODERS; i++) {
		int st;
		ck_assert_int_eq(waitpid(kids[i], &st, 0), kids[i]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "flood: exit %d",
			      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	qsort(lat, n, sizeof(lat[0]), cmp_u64);
	uint64_t p99 = lat[n * 99 / 100];
	size_t over = 0;
	for (size_t i = 0; i < n; i++)
		over += lat[i] >= fastest / 4;
	fprintf(stderr,
		"loop share: %zu null ops, p50 %.3f ms, p99 %.3f ms, max %.3f ms, %zu of them at "
		"least a quarter of the fastest of %llu whole-ring traces of %u ops (%.1f ms)\n",
		n, lat[n / 2] / 1e6, p99 / 1e6, lat[n - 1] / 1e6, over, (unsigned long long)traces,
		RING, fastest / 1e6);
	ck_assert_msg(traces >= 3, "the flood made only %llu traces",
		      (unsigned long long)traces);
	snprintf(why, whylen,
		 "%zu null ops waited a quarter of a trace (%.1f ms) or more beside %llu traces, "
		 "the longest %.3f ms",
		 over, fastest / 4e6, (unsigned long long)traces, lat[n - 1] / 1e6);
	return over * OVER_PER_TRACE <= traces;
}

START_TEST(null_ops_between_trace_steps)
{
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: null_ops_between_trace_steps needs root to run a client as "
				"uid %d\n",
			NOBODY);
		return;
	}
	const char *extra[] = { "--allow-users", "65534", "--trace-records", "131072", NULL };
	harness_start(&D, extra);
	ck_assert_int_eq(chmod(D.dir, 0755), 0);
	ck_assert_int_eq(chmod(D.sock, 0666), 0);
	pid_t filler = fork();
	ck_assert_int_ge(filler, 0);
	if (filler == 0) {
		become_nobody();
		_exit(fill_ring());
	}
	int st;
	ck_assert_int_eq(waitpid(filler, &st, 0), filler);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "filling the ring: exit %d",
		      WIFEXITED(st) ? WEXITSTATUS(st) : -1);

	devq *q = conn(D.sock, "bystander");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	char why[256], first[256];
	bool ok = flood_and_measure(q, first, sizeof(first));
	/* Once more when the bound was missed: the machine stalls devqd's
	 * thread now and then (once, 10 null ops in 4 133 beside 23 traces,
	 * in a clean clone's make check), while null ops that wait behind
	 * whole traces miss it in every measurement (0.8 or more per trace). */
	if (!ok && !harness_slow()) {
		fprintf(stderr, "loop share: missed once (%s); measuring again\n", first);
		ok = flood_and_measure(q, why, sizeof(why));
	}
	if (harness_slow())
		fprintf(stderr, "SKIP: the bound on the round trip (sanitizer run)\n");
	else
		ck_assert_msg(ok, "missed twice: %s; then %s", first, why);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&D), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("loopshare");
	TCase *tc = tcase_create("loopshare");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, null_ops_between_trace_steps);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
