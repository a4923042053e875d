/* SPDX-License-Identifier: Apache-2.0 */
/* The completion record ring, against a real devqd: records (status,
 * message, timing) come from shared memory with no socket read; a client
 * that stops reading for more completions than the ring holds still gets
 * every record, in order, exactly once (the overflow goes on the socket);
 * the ring is used again once the client caught up; and clients or daemons
 * without a ring work as before.  The daemon's ring is made small
 * (DEVQD_CRING_ENTRIES) so the bounds are quick to reach.  No timed
 * assertions. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

#define RING 64 /* DEVQD_CRING_ENTRIES of the test daemons */

static struct devq_op spin_op(const struct devq_exec *e, const struct devq_arg *a, uint32_t queue)
{
	return (struct devq_op){ .queue = queue, .kind = DEVQ_OP_KERNEL, .exec = e, .args = a,
				 .nargs = 1 };
}

/* A daemon whose ring holds entries records, with extra arguments (may
 * be NULL). */
static void start_with(struct daemon_proc *d, const char *entries, const char *const *extra)
{
	setenv("DEVQD_CRING_ENTRIES", entries, 1);
	harness_start(d, extra);
	unsetenv("DEVQD_CRING_ENTRIES");
}

static void start(struct daemon_proc *d, const char *entries)
{
	start_with(d, entries, NULL);
}

/* Waits without reading anything (no record taken, no socket read) until
 * the page says point of queue completed. */
static void wait_unread(devq *q, uint32_t queue, uint64_t point)
{
	for (int i = 0; devq_completed(q, queue) < point; i++) {
		ck_assert_int_lt(i, 60000);
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}

/* Records of points first..last of queue, in order, each once, then none. */
static void expect_records(devq *q, uint32_t queue, uint64_t first, uint64_t last)
{
	for (uint64_t p = first; p <= last; p++) {
		struct devq_completion c;
		ck_assert_int_eq(devq_next_completion(q, &c, 60000), 0);
		ck_assert_uint_eq(c.queue, queue);
		ck_assert_uint_eq(c.point, p);
		ck_assert_int_eq(c.code, DEVQ_OK);
		harness_check_monotonic(&c);
	}
	struct devq_completion c;
	ck_assert_int_eq(devq_next_completion(q, &c, 0), -ETIMEDOUT);
}

/* A daemon with a 64-entry ring, and a client of it with a completion
 * page and queue 1 open; *e: the spin kernel. */
static devq *ring_client(struct daemon_proc *d, const char *name, const struct devq_exec **e)
{
	start(d, "64");
	devq *q = conn(d->sock, name);
	ck_assert(devq_has_completion_page(q));
	*e = exe(q, "spin");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	return q;
}

/* Records, failures included, come from memory: no socket read at all. */
START_TEST(records_from_memory)
{
	struct daemon_proc d;
	const struct devq_exec *e;
	devq *q = ring_client(&d, "ring", &e);
	struct devq_arg ns = a_u64("ns", 0), bad = a_u64("nope", 1);
	struct devq_op o = spin_op(e, &ns, 1);
	uint64_t pt;
	struct devq_completion c;
	/* The first wait may read the socket (the queue's slot not yet open). */
	ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
	ck_assert_int_eq(devq_wait(q, 1, pt, 60000, &c), 0);
	struct devq_io_stats s0, s1;
	devq_get_io_stats(q, &s0);
	for (int i = 0; i < 3 * RING; i++) {
		ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
		ck_assert_int_eq(devq_wait(q, 1, pt, 60000, &c), 0);
		ck_assert_uint_eq(c.point, pt);
		ck_assert_int_eq(c.code, DEVQ_OK);
		ck_assert_str_eq(c.message, "");
		harness_check_monotonic(&c);
		ck_assert_uint_ge(c.t.observed, c.t.device_end);
	}
	/* A failed op's record carries its code and whole message. */
	struct devq_op f = spin_op(e, &bad, 1);
	ck_assert_int_eq(devq_submit(q, &f, 1, &pt), 0);
	ck_assert_int_eq(devq_wait(q, 1, pt, 60000, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_E_INVALID_ARGUMENT);
	ck_assert_msg(strstr(c.message, "nope"), "message: %s", c.message);
	devq_get_io_stats(q, &s1);
	ck_assert_uint_eq(s1.recv_calls, s0.recv_calls);
	ck_assert_uint_eq(s1.bytes_received, s0.bytes_received);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* n ops (the first a 30 ms spin holding the rest back, so none completes
 * before the submit returns), completed while the client reads nothing;
 * then every record, in order, once.  Returns the socket reads it took. */
static uint64_t unread_round(devq *q, const struct devq_exec *e, uint64_t n, uint64_t base)
{
	struct devq_arg slow = a_u64("ns", 30000000), ns = a_u64("ns", 0);
	struct devq_op *ops = calloc(n, sizeof(*ops));
	ck_assert_ptr_nonnull(ops);
	ops[0] = spin_op(e, &slow, 1);
	for (uint64_t i = 1; i < n; i++)
		ops[i] = spin_op(e, &ns, 1);
	uint64_t last = 0;
	ck_assert_int_eq(devq_submit(q, ops, n, NULL), 0);
	last = base + n;
	free(ops);
	wait_unread(q, 1, last);
	struct devq_io_stats s0, s1;
	devq_get_io_stats(q, &s0);
	expect_records(q, 1, base + 1, last);
	devq_get_io_stats(q, &s1);
	return s1.recv_calls - s0.recv_calls;
}

/* Exactly the ring's size of unread records: all in memory, no socket
 * read.  One past: the last one comes on the socket, in its place. */
START_TEST(unread_at_ring_size_and_one_past)
{
	struct daemon_proc d;
	start(&d, "64");
	devq *q = conn(d.sock, "bound");
	const struct devq_exec *e = exe(q, "spin");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	/* Open the slot (the wait reads the page afterwards). */
	struct devq_arg ns = a_u64("ns", 0);
	struct devq_op o = spin_op(e, &ns, 1);
	uint64_t pt;
	struct devq_completion c;
	ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
	ck_assert_int_eq(devq_wait(q, 1, pt, 60000, &c), 0);
	uint64_t base = 1;

	ck_assert_uint_eq(unread_round(q, e, RING, base), 0);
	base += RING;
	ck_assert_uint_gt(unread_round(q, e, RING + 1, base), 0);
	base += RING + 1;
	/* Back to the ring once the socket's records were read. */
	ck_assert_uint_eq(unread_round(q, e, RING, base), 0);
	base += RING;
	/* Far past: every record still, in order, once. */
	ck_assert_uint_gt(unread_round(q, e, 5 * RING + 3, base), 0);
	base += 5 * RING + 3;
	ck_assert_uint_eq(unread_round(q, e, RING - 1, base), 0);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A client that only waits on points (the ring fills as it waits) and
 * reads the records at the end: every one, in order. */
START_TEST(point_waiter_reads_all_later)
{
	struct daemon_proc d;
	start(&d, "64");
	devq *q = conn(d.sock, "points");
	const struct devq_exec *e = exe(q, "spin");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_arg ns = a_u64("ns", 0);
	struct devq_op ops[16];
	for (int i = 0; i < 16; i++)
		ops[i] = spin_op(e, &ns, 1);
	uint64_t pts[16];
	for (int r = 0; r < 40; r++) {
		ck_assert_int_eq(devq_submit(q, ops, 16, pts), 0);
		if (r % 5 == 4)
			ck_assert_int_eq(devq_wait(q, 1, pts[15], 60000, NULL), 0);
	}
	ck_assert_int_eq(devq_wait(q, 1, 640, 60000, NULL), 0);
	expect_records(q, 1, 1, 640);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A queue beyond the page's slots (the page has min(max-queues, 1024);
 * max-queues 1025 leaves queue 1025 without one) still wakes a client
 * that polls the completion eventfd, when its record goes to the ring. */
START_TEST(slotless_queue_wakes_eventfd)
{
	struct daemon_proc d;
	const char *extra[] = { "--max-queues", "1025", NULL };
	start_with(&d, "64", extra);
	devq *q = conn(d.sock, "slotless");
	ck_assert(devq_has_completion_page(q));
	const struct devq_exec *e = exe(q, "spin");
	for (uint32_t id = 1; id <= 1025; id++)
		ck_assert_int_eq(devq_queue_open(q, id), 0);
	int efd = devq_completion_fd(q);
	ck_assert_int_ge(efd, 0);
	struct devq_arg ns = a_u64("ns", 0);
	struct devq_op o = spin_op(e, &ns, 1025);
	uint64_t pt;
	ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
	ck_assert_int_eq(devq_flush(q), 0);
	struct pollfd p = { .fd = efd, .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, 30000), 1);
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 1025, pt, 60000, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_OK);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A thread waiting in devq_next_completion for a long op sleeps through
 * it: the daemon wakes the page for what comes on the socket too, so the
 * wait needs no short slices to look at the socket.  With 1 ms slices a
 * 200 ms op woke it ~190 times (four clients waiting on gemms so took 11 %
 * of two CPUs); now the 50 ms slice that notices a dead daemon bounds it. */
START_TEST(next_completion_sleeps_through_long_op)
{
	struct daemon_proc d;
	const struct devq_exec *e;
	devq *q = ring_client(&d, "sleeper", &e);
	struct devq_arg ns = a_u64("ns", 200000000);
	struct devq_op o = spin_op(e, &ns, 1);
	for (int i = 0; i < 2; i++) {
		uint64_t pt;
		struct devq_io_stats s0, s1;
		ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
		devq_get_io_stats(q, &s0);
		struct devq_completion c;
		ck_assert_int_eq(devq_next_completion(q, &c, 60000), 0);
		devq_get_io_stats(q, &s1);
		ck_assert_uint_eq(c.point, pt);
		ck_assert_int_eq(c.code, DEVQ_OK);
		ck_assert_uint_ge(c.t.device_end - c.t.device_start, 200000000);
		ck_assert_msg(s1.futex_waits - s0.futex_waits <= 10,
			      "devq_next_completion slept %llu times during a 200 ms op",
			      (unsigned long long)(s1.futex_waits - s0.futex_waits));
	}
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* No ring on either side: a client that does not arm it (DEVQ_NO_CRING),
 * and a daemon that makes none, both deliver every record. */
START_TEST(without_a_ring)
{
	const char *modes[][2] = { { "64", "1" }, { "0", NULL } };
	for (int m = 0; m < 2; m++) {
		struct daemon_proc d;
		start(&d, modes[m][0]);
		if (modes[m][1])
			setenv("DEVQ_NO_CRING", modes[m][1], 1);
		devq *q = conn(d.sock, "plain");
		unsetenv("DEVQ_NO_CRING");
		ck_assert(devq_has_completion_page(q));
		const struct devq_exec *e = exe(q, "spin");
		ck_assert_int_eq(devq_queue_open(q, 1), 0);
		struct devq_arg ns = a_u64("ns", 0);
		struct devq_op o = spin_op(e, &ns, 1);
		uint64_t pt;
		struct devq_completion c;
		struct devq_io_stats s0, s1;
		devq_get_io_stats(q, &s0);
		for (int i = 0; i < 2 * RING; i++) {
			ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
			ck_assert_int_eq(devq_wait(q, 1, pt, 60000, &c), 0);
			ck_assert_uint_eq(c.point, pt);
			ck_assert_int_eq(c.code, DEVQ_OK);
		}
		devq_get_io_stats(q, &s1);
		ck_assert_uint_gt(s1.recv_calls, s0.recv_calls); /* the socket carried them */
		uint64_t base = pt;
		ck_assert_uint_gt(unread_round(q, e, RING + 1, base), 0);
		devq_disconnect(q);
		ck_assert_int_eq(harness_stop(&d), 0);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cring");
	TCase *tc = tcase_create("ring");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, records_from_memory);
	tcase_add_test(tc, unread_at_ring_size_and_one_past);
	tcase_add_test(tc, point_waiter_reads_all_later);
	tcase_add_test(tc, without_a_ring);
	tcase_add_test(tc, next_completion_sleeps_through_long_op);
	tcase_add_test(tc, slotless_queue_wakes_eventfd);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
