/* SPDX-License-Identifier: Apache-2.0 */
/* Queue priorities: a queue opened with priority 1 runs on the daemon's
 * high-priority streams, so its op does not wait behind a flood of normal
 * work (on the CPU backend the workers take those streams first; on CUDA,
 * streams of the greatest priority).  Counted in ops from completion
 * order, not measured in time.  High priority is a grant (priority-users,
 * priority-groups): the clients refused or granted run as uid 65534. */
#include <check.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* ---- the grant ------------------------------------------------------- */

#define NOBODY 65534
#define SUPP_GID 4242 /* a supplementary group of the client; need not exist */
#define MAX_IDS 64    /* DEVQ_POLICY_MAX_IDS, documented in devqd.conf(5) */

/* The tests that run a client as another uid need root to setuid. */
static bool can_switch_uid(const char *test)
{
	if (geteuid() == 0)
		return true;
	fprintf(stderr, "SKIP: %s needs root to run a client as uid %d\n", test, NOBODY);
	return false;
}

/* What a high-priority open of a client as uid 65534 (primary group 65534,
 * supplementary group SUPP_GID when supp) got: the refusal's code, 0 when
 * none came, or -1 when the client could not even connect. */
struct outcome {
	int code;
	char message[400];
};

static struct outcome high_open_as_nobody(const struct daemon_proc *d, bool supp)
{
	/* The test directory is 0700 and the socket 0660: let uid 65534 reach
	 * the daemon (devqd's policy then decides, here --allow-users). */
	ck_assert_int_eq(chmod(d->dir, 0755), 0);
	ck_assert_int_eq(chmod(d->sock, 0666), 0);
	int out[2];
	ck_assert_int_eq(pipe(out), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		gid_t g = SUPP_GID;
		if (setgroups(supp ? 1 : 0, &g) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
			_exit(90);
		struct outcome o = { .code = -1 };
		devq *q = NULL;
		if (devq_connect(d->sock, "grant", &q) == 0) {
			struct devq_error e;
			int r = open_error(q, 1, 1, &e);
			o.code = r == 1 ? (int)e.code : 0;
			if (r == 1)
				snprintf(o.message, sizeof(o.message), "%s", e.message);
		} else if (q) {
			snprintf(o.message, sizeof(o.message), "connect: %s", devq_last_error(q));
		}
		if (q)
			devq_disconnect(q);
		_exit(write(out[1], &o, sizeof(o)) == sizeof(o) ? 0 : 91);
	}
	close(out[1]);
	struct outcome o;
	ck_assert_int_eq(read(out[0], &o, sizeof(o)), sizeof(o));
	close(out[0]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client exit %d",
		      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	fprintf(stderr, "uid %d%s: high-priority open: code %d %s\n", NOBODY,
		supp ? " (supplementary group 4242)" : "", o.code, o.message);
	return o;
}

static void start_granting(const char *key, const char *list)
{
	const char *extra[] = { "--allow-users", "65534", key, list, NULL };
	harness_start(&D, extra);
}

/* Without a grant a user's high-priority open is refused, naming the
 * settings; its normal queues are not.  admin-group (see everything,
 * trace everything) grants nothing here. */
START_TEST(test_high_priority_refused_without_grant)
{
	if (!can_switch_uid("test_high_priority_refused_without_grant"))
		return;
	const char *extra[] = { "--allow-users", "65534", "--admin-group", "nogroup", NULL };
	harness_start(&D, extra);
	struct outcome o = high_open_as_nobody(&D, true);
	ck_assert_int_eq(o.code, DEVQ_E_PERMISSION_DENIED);
	ck_assert_msg(strstr(o.message, "priority-users") && strstr(o.message, "priority-groups") &&
			      strstr(o.message, "uid 65534"),
		      "%s", o.message);
	/* Root still gets high-priority queues, and normal ones. */
	devq *q = conn(D.sock, "root");
	struct devq_error e;
	ck_assert_int_eq(open_error(q, 1, 1, &e), 0);
	ck_assert_int_eq(open_error(q, 2, 0, &e), 0);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&D), 0);

	/* The missing streams are said first: no grant makes them appear. */
	const char *none[] = { "--allow-users", "65534", "--priority-streams", "0", NULL };
	harness_start(&D, none);
	o = high_open_as_nobody(&D, false);
	ck_assert_int_eq(o.code, DEVQ_E_FAILED_PRECONDITION);
	ck_assert_msg(strstr(o.message, "no high-priority streams"), "%s", o.message);
	ck_assert_int_eq(harness_stop(&D), 0);
}
END_TEST

/* A user named in priority-users, and a member of a group in
 * priority-groups (primary or supplementary), are granted. */
START_TEST(test_high_priority_granted)
{
	if (!can_switch_uid("test_high_priority_granted"))
		return;
	start_granting("--priority-users", "nobody");
	ck_assert_int_eq(high_open_as_nobody(&D, false).code, 0);
	ck_assert_int_eq(harness_stop(&D), 0);

	start_granting("--priority-groups", "nogroup"); /* primary, gid 65534 */
	ck_assert_int_eq(high_open_as_nobody(&D, false).code, 0);
	ck_assert_int_eq(harness_stop(&D), 0);

	start_granting("--priority-groups", "4242"); /* supplementary */
	ck_assert_int_eq(high_open_as_nobody(&D, true).code, 0);
	ck_assert_int_eq(high_open_as_nobody(&D, false).code, DEVQ_E_PERMISSION_DENIED);
	ck_assert_int_eq(harness_stop(&D), 0);
}
END_TEST

/* Among high-priority tenants the same fairness: root keeps 8
 * high-priority queues busy with 100 ms ops; a granted user's 1 ms
 * high-priority op then waits only for the op running on the (single)
 * high-priority stream when it arrived: none of root's ops starts between
 * its receipt and its start.  Order from the device's own stamps. */
START_TEST(test_high_priority_fair_between_tenants)
{
	if (!can_switch_uid("test_high_priority_fair_between_tenants"))
		return;
	const char *extra[] = { "--allow-users", "65534", "--priority-users", "nobody",
				"--priority-streams", "1", NULL };
	harness_start(&D, extra);
	ck_assert_int_eq(chmod(D.dir, 0755), 0);
	ck_assert_int_eq(chmod(D.sock, 0666), 0);
	devq *a = conn(D.sock, "root-high");
	enum { QS = 8, PER = 2 };
	for (uint32_t i = 1; i <= QS; i++)
		ck_assert_int_eq(devq_queue_open_priority(a, i, 1), 0);
	for (int k = 0; k < PER; k++)
		for (uint32_t i = 1; i <= QS; i++)
			spin(a, i, 100000000);
	ck_assert_int_eq(devq_flush(a), 0);
	usleep(150000); /* the first has run a while */
	int out[2];
	ck_assert_int_eq(pipe(out), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
			_exit(90);
		devq *q = NULL;
		struct devq_completion c = { 0 };
		if (devq_connect(D.sock, "granted-high", &q) < 0 ||
		    devq_queue_open_priority(q, 1, 1) < 0)
			_exit(91);
		uint64_t p = spin(q, 1, 1000000);
		if (devq_wait(q, 1, p, 60000, &c) < 0 || c.code)
			_exit(92);
		devq_disconnect(q);
		_exit(write(out[1], &c, sizeof(c)) == sizeof(c) ? 0 : 93);
	}
	close(out[1]);
	struct devq_completion b;
	ck_assert_int_eq(read(out[0], &b, sizeof(b)), sizeof(b));
	close(out[0]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	unsigned between = 0, running = 0;
	for (int n = 0; n < QS * PER; n++) {
		struct devq_completion c;
		ck_assert_msg(devq_next_completion(a, &c, 60000) == 0, "%s", devq_last_error(a));
		ck_assert_int_eq(c.code, DEVQ_OK);
		if (c.t.device_start > b.t.received && c.t.device_start < b.t.device_start)
			between++;
		if (c.t.device_start <= b.t.received && c.t.device_end > b.t.received)
			running++;
	}
	fprintf(stderr, "granted high-priority op: waited %.1f ms; root's ops running at its "
		"arrival %u, started while it waited %u\n",
		(b.t.device_start - b.t.received) / 1e6, running, between);
	ck_assert_uint_eq(running, 1);
	ck_assert_uint_eq(between, 0);
	devq_disconnect(a);
	ck_assert_int_eq(harness_stop(&D), 0);
}
END_TEST

/* "1000,1001,...,last": n ids, the last one `last`. */
static void id_list(char *buf, size_t size, unsigned n, unsigned last)
{
	size_t len = 0;
	for (unsigned i = 0; i < n; i++)
		len += (size_t)snprintf(buf + len, size - len, "%s%u", i ? "," : "",
					i + 1 == n ? last : 20000 + i);
	ck_assert_uint_lt(len, size);
}

/* What devqd says (and its exit status) when started with key = list on a
 * socket nobody else uses: it must refuse before listening. */
static int devqd_start_refused(const char *key, const char *list, char *out, size_t n)
{
	char dir[] = "/tmp/devq-grant-XXXXXX", cmd[2048];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd), "%s --backend cpu --socket %s/s.sock %s %s 2>&1",
		 harness_bin("devqd"), dir, key, list);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t got = fread(out, 1, n - 1, p);
	out[got] = '\0';
	int st = pclose(p);
	rmdir(dir);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Each list holds at most MAX_IDS entries: at the limit the last one is
 * granted; one past it devqd refuses to start, and --check-config says so. */
START_TEST(test_grant_list_bounds)
{
	if (!can_switch_uid("test_grant_list_bounds"))
		return;
	static char list[4096], out[4096];
	static const struct {
		const char *key;
		unsigned last;
		bool supp;
	} lists[] = { { "--priority-users", NOBODY, false },
		      { "--priority-groups", SUPP_GID, true } };
	for (size_t i = 0; i < 2; i++) {
		id_list(list, sizeof(list), MAX_IDS, lists[i].last);
		start_granting(lists[i].key, list);
		ck_assert_int_eq(high_open_as_nobody(&D, lists[i].supp).code, 0);
		ck_assert_int_eq(harness_stop(&D), 0);

		char cmd[4300];
		snprintf(cmd, sizeof(cmd), "%s --check-config -c /dev/null %s %s >/dev/null 2>&1",
			 harness_bin("devqd"), lists[i].key, list);
		int st = system(cmd);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "--check-config at %d: %d",
			      MAX_IDS, st);

		id_list(list, sizeof(list), MAX_IDS + 1, lists[i].last);
		snprintf(cmd, sizeof(cmd), "%s --check-config -c /dev/null %s %s 2>&1",
			 harness_bin("devqd"), lists[i].key, list);
		int rc = devqd_start_refused(lists[i].key, list, out, sizeof(out));
		fprintf(stderr, "%s with %d entries: exit %d: %s", lists[i].key, MAX_IDS + 1, rc,
			out);
		ck_assert_int_eq(rc, 2);
		ck_assert_msg(strstr(out, lists[i].key + 2) && strstr(out, "more than 64 entries"),
			      "%s", out);
		FILE *p = popen(cmd, "r");
		ck_assert_ptr_nonnull(p);
		size_t got = fread(out, 1, sizeof(out) - 1, p);
		out[got] = '\0';
		st = pclose(p);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 2 &&
				      strstr(out, "more than 64 entries"),
			      "--check-config at %d: %d: %s", MAX_IDS + 1, st, out);
	}
	/* An unknown name is refused at start as well. */
	int rc = devqd_start_refused("--priority-users", "no-such-user-devq", out, sizeof(out));
	ck_assert_msg(rc == 2 && strstr(out, "priority-users: no user named 'no-such-user-devq'"),
		      "exit %d: %s", rc, out);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("priority");
	TCase *tc = tcase_create("priority");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_high_priority_not_behind_flood);
	tcase_add_test(tc, test_priority_refusals);
	tcase_add_test(tc, test_high_priority_refused_without_grant);
	tcase_add_test(tc, test_high_priority_granted);
	tcase_add_test(tc, test_high_priority_fair_between_tenants);
	tcase_add_test(tc, test_grant_list_bounds);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
