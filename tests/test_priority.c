/* SPDX-License-Identifier: Apache-2.0 */
/* Queue priorities: a queue opened with priority 1 runs on the daemon's
 * high-priority streams, so its op does not wait behind a flood of normal
 * work (on the CPU backend the workers take those streams first; on CUDA,
 * streams of the greatest priority).  Counted in ops from completion
 * order, not measured in time. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "devq.h"
#include "harness.h"

static struct daemon_proc D;

#define FLOOD 40

static uint64_t spin(devq *q, uint32_t queue, uint64_t ns)
{
	struct devq_arg a[] = { a_u64("ns", ns) };
	struct devq_op op = { .queue = queue, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
			      .args = a, .nargs = 1 };
	uint64_t p;
	ck_assert_msg(devq_submit(q, &op, 1, &p) == 0, "%s", devq_last_error(q));
	return p;
}

/* Floods queue 0 (the only normal stream) with FLOOD 5 ms ops, then submits
 * one 1 ms op on queue 9 opened with `priority`; returns how many flood ops
 * completed after its submit and before it (*already: those done before its
 * submit). */
static unsigned flood_then_one(int priority, unsigned *already)
{
	devq *q = conn(D.sock, "priority");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	for (int i = 0; i < FLOOD; i++)
		spin(q, 0, 5000000);
	ck_assert_int_eq(devq_queue_open_priority(q, 9, priority), 0);
	/* Flood ops already done when the op is submitted (a slow build, or a
	 * backend that starts the flood at once) were not ahead of it. */
	uint64_t done_already = devq_completed(q, 0);
	spin(q, 9, 1000000);
	ck_assert_int_eq(devq_flush(q), 0);
	unsigned before = 0;
	for (int seen = 0; seen < FLOOD + 1; seen++) {
		struct devq_completion c;
		ck_assert_msg(devq_next_completion(q, &c, 30000) == 0, "%s", devq_last_error(q));
		ck_assert_msg(c.code == DEVQ_OK, "%s", c.message);
		if (c.queue == 9)
			break;
		before++;
	}
	devq_disconnect(q);
	*already = (unsigned)(done_already < before ? done_already : before);
	return before - *already;
}

START_TEST(test_high_priority_not_behind_flood)
{
	const char *const extra[] = { "--streams", "1", "--priority-streams", "1", NULL };
	harness_start(&D, extra);
	devq *q = conn(D.sock, "info");
	ck_assert_uint_eq(devq_get_info(q)->streams, 1);
	devq_disconnect(q);
	unsigned done_h, done_n;
	unsigned high = flood_then_one(1, &done_h);
	/* A normal queue shares the one normal stream: behind the whole flood. */
	unsigned normal = flood_then_one(0, &done_n);
	printf("flood ops completed before the 1 ms op: high priority %u, normal %u (of %d)\n",
	       high, normal, FLOOD);
	ck_assert_uint_le(high, 2);
	ck_assert_uint_eq(normal + done_n, FLOOD);
	ck_assert_int_eq(harness_stop(&D), 0);
}
END_TEST

static int open_error(devq *q, uint32_t id, int priority, struct devq_error *e)
{
	ck_assert_int_eq(devq_queue_open_priority(q, id, priority), 0);
	/* A round trip makes sure the asynchronous error, if any, has come. */
	struct devq_status *st;
	ck_assert_int_eq(devq_get_status(q, &st), 0);
	devq_status_free(st);
	return devq_next_error(q, e);
}

START_TEST(test_priority_refusals)
{
	const char *const extra[] = { "--priority-streams", "0", NULL };
	harness_start(&D, extra);
	devq *q = conn(D.sock, "refusals");
	struct devq_error e;
	ck_assert_int_eq(open_error(q, 1, 1, &e), 1);
	ck_assert_int_eq(e.code, DEVQ_E_FAILED_PRECONDITION);
	ck_assert_msg(strstr(e.message, "no high-priority streams"), "%s", e.message);
	ck_assert_int_eq(open_error(q, 2, 7, &e), 1);
	ck_assert_int_eq(e.code, DEVQ_E_INVALID_ARGUMENT);
	ck_assert_msg(strstr(e.message, "priority 7"), "%s", e.message);
	ck_assert_int_eq(open_error(q, 3, 0, &e), 0);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&D), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("priority");
	TCase *tc = tcase_create("priority");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_high_priority_not_behind_flood);
	tcase_add_test(tc, test_priority_refusals);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
