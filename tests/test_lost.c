/* SPDX-License-Identifier: Apache-2.0 */
/* Device loss, driven on the CPU backend by the test-only fault kernel: every
 * op in flight fails with device_lost, every session is told who had work on
 * the device, devqd exits 69, and a client carries on against a restarted
 * daemon with devq_reconnect. */
#include <check.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devq.h"
#include "harness.h"
#include "kernels.h"
#include "server/notice.h"

/* daemon/server/culprit.h's DEVQ_CULPRIT_MAX (that header needs the
 * daemon's config). */
#define DEVQ_CULPRIT_MAX_TEST 256

static struct daemon_proc D;
static const char *const FAULTS[] = { "--test-fault-injection", NULL };

static bool log_has(const char *what)
{
	return harness_log_has(D.log, what);
}

static uint64_t submit_kernel(devq *q, uint32_t queue, const struct devq_exec *e,
			      struct devq_arg *args, size_t nargs)
{
	struct devq_op op = { .queue = queue, .kind = DEVQ_OP_KERNEL, .exec = e, .args = args,
			      .nargs = nargs };
	uint64_t p;
	ck_assert_msg(devq_submit(q, &op, 1, &p) == 0, "%s", devq_last_error(q));
	return p;
}

/* The device_lost notice; errors received before the daemon closed the
 * connection stay readable after it. */
static void lost_notice(devq *q, struct devq_error *e)
{
	for (int i = 0; i < 1000; i++) {
		if (devq_next_error(q, e) == 1) {
			ck_assert_msg(e->code == DEVQ_E_DEVICE_LOST, "%s: %s",
				      devq_code_name(e->code), e->message);
			ck_assert_str_eq(e->request, "device");
			return;
		}
		if (devq_poll(q) < 0 && devq_next_error(q, e) != 1)
			ck_abort_msg("no device_lost notice before the connection closed: %s",
				     devq_last_error(q));
		usleep(5000);
	}
	ck_abort_msg("no device_lost notice within 5 s");
}

static void assert_lost(devq *q, uint32_t queue, uint64_t point)
{
	struct devq_completion c;
	ck_assert_msg(devq_wait(q, queue, point, 30000, &c) == 0, "%s", devq_last_error(q));
	ck_assert_msg(c.code == DEVQ_E_DEVICE_LOST, "queue %u point %llu: %s: %s", queue,
		      (unsigned long long)point, devq_code_name(c.code), c.message);
	/* The CPU backend names the fault kernel; CUDA names the driver's
	 * error and the lost context. */
	ck_assert_msg(strstr(c.message, "fault") || strstr(c.message, "context is lost"), "%s",
		      c.message);
	harness_check_monotonic(&c);
}

START_TEST(test_fault_hidden_without_flag)
{
	harness_start(&D, NULL);
	devq *q = conn(D.sock, "nofault");
	const struct devq_exec *e;
	ck_assert_int_lt(devq_exec_lookup(q, "fault", &e), 0);
	/* Not even by its handle. */
	const struct devq_kernel *k = devq_kernel_find("fault");
	ck_assert_ptr_nonnull(k);
	struct devq_exec fake = { .id = (uint32_t)(k - devq_kernels) };
	snprintf(fake.name, sizeof(fake.name), "fault");
	snprintf(fake.signature, sizeof(fake.signature), "%s", k->signature);
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	struct devq_arg a[] = { a_u64("ns", 1000) };
	uint64_t p = submit_kernel(q, 0, &fake, a, 1);
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 0, p, 30000, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_E_NOT_FOUND);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&D), 0);
}
END_TEST

/* Only one session had work: the notice names it exactly, and the idle
 * session is told it had none. */
START_TEST(test_lost_exact_attribution)
{
	harness_start(&D, FAULTS);
	devq *idle = conn(D.sock, "idle");
	devq *bad = conn(D.sock, "faulty");
	uint64_t bad_session = devq_get_info(bad)->session;
	ck_assert_int_eq(devq_queue_open(bad, 0), 0);
	struct devq_arg a[] = { a_u64("ns", 1000000) };
	uint64_t p = submit_kernel(bad, 0, exe(bad, "fault"), a, 1);
	assert_lost(bad, 0, p);

	char who[64];
	snprintf(who, sizeof(who), "session %llu (pid %d", (unsigned long long)bad_session,
		 (int)getpid());
	struct devq_error e;
	lost_notice(bad, &e);
	ck_assert_msg(strstr(e.message, "your work faulted the device"), "%s", e.message);
	ck_assert_msg(strstr(e.message, who) && strstr(e.message, "the only session"), "%s",
		      e.message);
	lost_notice(idle, &e);
	ck_assert_msg(strstr(e.message, "you had no work on the device"), "%s", e.message);
	ck_assert_msg(strstr(e.message, who), "%s", e.message);

	ck_assert_int_eq(harness_wait(&D), 69);
	devq_disconnect(idle);
	devq_disconnect(bad);
}
END_TEST

/* Work of two sessions in flight: both fail, both are named; after a
 * restart the bystander reconnects, finds its shared buffer intact and
 * re-imported, its device buffer gone, and its queue starting again. */
START_TEST(test_lost_reconnect)
{
	harness_start(&D, FAULTS);
	devq *a = conn(D.sock, "bystander");
	devq *b = conn(D.sock, "faulty");
	const size_t n = 65536;
	struct devq_buffer *data = mkbuf(a, n), *dev;
	for (size_t i = 0; i < n; i++)
		((uint8_t *)data->map)[i] = (uint8_t)devq_mix64(i);
	uint8_t *copy = malloc(n);
	memcpy(copy, data->map, n);
	ck_assert_int_eq(devq_buffer_create(a, 4096, DEVQ_BUFFER_DEVICE, &dev), 0);
	ck_assert_int_eq(devq_queue_open(a, 0), 0);
	ck_assert_int_eq(devq_queue_open(b, 0), 0);

	struct devq_arg spin[] = { a_u64("ns", 300000000) };
	uint64_t pa = submit_kernel(a, 0, exe(a, "spin"), spin, 1);
	ck_assert_int_eq(devq_flush(a), 0);
	usleep(20000); /* a's spin is running */
	struct devq_arg f[] = { a_u64("ns", 1000000) };
	uint64_t pb = submit_kernel(b, 0, exe(b, "fault"), f, 1);
	assert_lost(b, 0, pb);
	assert_lost(a, 0, pa);
	struct devq_error e;
	lost_notice(a, &e);
	ck_assert_msg(strstr(e.message, "2 sessions had work on the device"), "%s", e.message);
	ck_assert_msg(strstr(e.message, "your work in flight fails"), "%s", e.message);
	ck_assert_int_eq(harness_wait(&D), 69);
	devq_disconnect(b);

	harness_restart(&D, FAULTS);
	ck_assert_msg(devq_reconnect(a, 10000) == 0, "%s", devq_last_error(a));
	ck_assert(!data->lost);
	ck_assert(dev->lost);
	ck_assert_int_eq(memcmp(data->map, copy, n), 0);

	/* The re-imported buffer is the same memory: the daemon reads what the
	 * client wrote before the loss. */
	struct devq_buffer *out = mkbuf(a, 8);
	struct devq_arg ck[] = { a_u64("n", n), a_buf("data", data, 0), a_buf("out", out, 0) };
	uint64_t p = submit_kernel(a, 0, exe(a, "checksum"), ck, 3);
	ck_assert_uint_eq(p, 1); /* the timeline restarted */
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(a, 0, p, 30000, &c), 0);
	ck_assert_msg(c.code == DEVQ_OK, "%s", c.message);
	uint64_t s = 0;
	for (size_t i = 0; i < n; i++)
		s += devq_mix64(((uint64_t)i << 8) | copy[i]);
	ck_assert_uint_eq(*(uint64_t *)out->map, s);

	/* The lost device buffer is unknown to the new daemon. */
	struct devq_arg fill[] = { a_u64("n", 16), a_u32("value", 7), a_buf("dst", dev, 0) };
	p = submit_kernel(a, 0, exe(a, "fill_u32"), fill, 3);
	ck_assert_int_eq(devq_wait(a, 0, p, 30000, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_E_NOT_FOUND);

	struct devq_status *st;
	ck_assert_int_eq(devq_get_status(a, &st), 0);
	ck_assert_uint_eq(st->buffers, 2); /* data (re-imported) and out */
	devq_status_free(st);
	free(copy);
	devq_disconnect(a);
	ck_assert_int_eq(harness_stop(&D), 0);
}
END_TEST

/* A long CPU op running on another stream when the device is lost does
 * not hold the restart: devqd exits within its grace period (1 s) instead
 * of when the op would have ended (8 s), and every session is told first. */
START_TEST(test_lost_does_not_wait_for_running_op)
{
	harness_start(&D, FAULTS);
	devq *a = conn(D.sock, "long-op");
	devq *b = conn(D.sock, "faulty");
	ck_assert_int_eq(devq_queue_open(a, 0), 0);
	ck_assert_int_eq(devq_queue_open(b, 0), 0);
	struct devq_arg spin[] = { a_u64("ns", 8000000000ull) };
	submit_kernel(a, 0, exe(a, "spin"), spin, 1);
	ck_assert_int_eq(devq_flush(a), 0);
	usleep(50000); /* a's spin is running */
	struct devq_arg f[] = { a_u64("ns", 1000000) };
	uint64_t pb = submit_kernel(b, 0, exe(b, "fault"), f, 1);
	assert_lost(b, 0, pb);
	uint64_t t0 = harness_now_ns();
	ck_assert_int_eq(harness_wait(&D), 69);
	double s = (double)(harness_now_ns() - t0) / 1e9;
	fprintf(stderr, "device lost with an 8 s op running: devqd exited after %.2f s\n", s);
	ck_assert_msg(s < (harness_slow() ? 5.0 : 3.0),
		      "devqd took %.2f s to exit after the device was lost", s);
	struct devq_error e;
	lost_notice(a, &e);
	ck_assert_msg(strstr(e.message, "your work in flight fails"), "%s", e.message);
	devq_disconnect(a);
	devq_disconnect(b);
}
END_TEST

#define ADVICE "device lost, devqd restarts: reconnect and re-import shared buffers"
/* What a non-admin with work in flight is told of its part, whether or not
 * other sessions had work: nothing more, so that being told it tells
 * nothing of them. */
#define BUSY_ROLE "your work was in flight when the device faulted: it fails"

/* The cut of a notice to what a client keeps, at exactly the limit and one
 * past it, and never inside a UTF-8 character. */
START_TEST(test_notice_fit_limit)
{
	char m[DEVQ_NOTICE_KEPT + 8], want[DEVQ_NOTICE_KEPT + 8];
	memset(m, 'a', DEVQ_NOTICE_KEPT);
	m[DEVQ_NOTICE_KEPT] = '\0';
	ck_assert_uint_eq(devq_notice_fit(m, DEVQ_NOTICE_KEPT), DEVQ_NOTICE_KEPT);
	ck_assert_uint_eq(strlen(m), DEVQ_NOTICE_KEPT);
	ck_assert_int_eq(m[DEVQ_NOTICE_KEPT - 1], 'a'); /* whole: no "..." */

	memset(m, 'a', DEVQ_NOTICE_KEPT + 1);
	m[DEVQ_NOTICE_KEPT + 1] = '\0';
	ck_assert_uint_eq(devq_notice_fit(m, DEVQ_NOTICE_KEPT), DEVQ_NOTICE_KEPT);
	memset(want, 'a', DEVQ_NOTICE_KEPT - 3);
	memcpy(want + DEVQ_NOTICE_KEPT - 3, "...", 4);
	ck_assert_str_eq(m, want);

	/* A two-byte character across the cut goes whole. */
	memset(m, 'a', DEVQ_NOTICE_KEPT + 4);
	m[DEVQ_NOTICE_KEPT - 4] = (char)0xc3;
	m[DEVQ_NOTICE_KEPT - 3] = (char)0xa9;
	m[DEVQ_NOTICE_KEPT + 4] = '\0';
	ck_assert_uint_eq(devq_notice_fit(m, DEVQ_NOTICE_KEPT), DEVQ_NOTICE_KEPT - 1);
	ck_assert_int_eq(m[DEVQ_NOTICE_KEPT - 5], 'a');
	ck_assert_str_eq(m + DEVQ_NOTICE_KEPT - 4, "...");
}
END_TEST

/* Many busy sessions with long names make an admin's notice longer than
 * a client keeps: it starts with the advice and says that it was cut
 * (before, libdevq cut it silently at 255 bytes, and a notice built with
 * the advice last lost the advice: "... reconnect and r"). */
START_TEST(test_lost_notice_fits)
{
	/* A stream each: every spin runs when the fault does. */
	const char *args[] = { "--test-fault-injection", "--streams", "16", NULL };
	harness_start(&D, args);
	enum { N = 8 }; /* more names than the daemon's list of them holds */
	devq *q[N];
	struct devq_arg spin[] = { a_u64("ns", 300000000) };
	for (int i = 0; i < N; i++) {
		char name[64];
		snprintf(name, sizeof(name), "a-session-name-long-enough-to-fill-the-notice-%d", i);
		q[i] = conn(D.sock, name);
		ck_assert_int_eq(devq_queue_open(q[i], 0), 0);
		if (i < N - 1) {
			submit_kernel(q[i], 0, exe(q[i], "spin"), spin, 1);
			ck_assert_int_eq(devq_flush(q[i]), 0);
		}
	}
	usleep(20000); /* the spins are running */
	struct devq_arg f[] = { a_u64("ns", 1000000) };
	uint64_t p = submit_kernel(q[N - 1], 0, exe(q[N - 1], "fault"), f, 1);
	assert_lost(q[N - 1], 0, p);
	for (int i = 0; i < N; i++) {
		struct devq_error e;
		lost_notice(q[i], &e);
		size_t n = strlen(e.message);
		fprintf(stderr, "notice %d (%zu bytes): %s\n", i, n, e.message);
		ck_assert_msg(strncmp(e.message, ADVICE, strlen(ADVICE)) == 0, "%s", e.message);
		ck_assert_uint_le(n, DEVQ_NOTICE_KEPT);
		ck_assert_msg(n < DEVQ_NOTICE_KEPT - 3 || strcmp(e.message + n - 3, "...") == 0,
			      "cut without saying so: %s", e.message);
	}
	/* Every busy session counted, past those the list could name. */
	ck_assert_msg(log_has("8 sessions had work on the device"), "sessions miscounted");
	ck_assert_int_eq(harness_wait(&D), 69);
	for (int i = 0; i < N; i++)
		devq_disconnect(q[i]);
}
END_TEST

/* A non-admin uid is told the device was lost, whether its work ran and
 * what to do, first and whole, and nothing of the other sessions (issue
 * 14 #7: the notice named every busy session's pid, uid and name). */
START_TEST(test_lost_notice_hides_others)
{
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: test_lost_notice_hides_others needs root to setuid\n");
		return;
	}
	const char *args[] = { "--test-fault-injection", "--allow-users", "65534", NULL };
	harness_start(&D, args);
	ck_assert_int_eq(chmod(D.dir, 0755), 0);
	ck_assert_int_eq(chmod(D.sock, 0666), 0);
	int ready[2], out[2];
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(out), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			_exit(90);
		devq *q = NULL;
		if (devq_connect(D.sock, "nobody-bystander", &q) != 0 || devq_queue_open(q, 0) != 0)
			_exit(1);
		struct devq_arg a = a_u64("ns", 2000000000ull);
		struct devq_op op = { .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
				      .args = &a, .nargs = 1 };
		uint64_t p;
		if (devq_submit(q, &op, 1, &p) != 0 || devq_flush(q) != 0)
			_exit(2);
		if (write(ready[1], "r", 1) != 1)
			_exit(3);
		struct devq_error e;
		for (int i = 0; i < 2000; i++) {
			if (devq_next_error(q, &e) == 1) {
				size_t n = strlen(e.message) + 1;
				if (write(out[1], e.message, n) != (ssize_t)n)
					_exit(4);
				_exit(0);
			}
			if (devq_poll(q) < 0 && devq_next_error(q, &e) != 1)
				_exit(5);
			usleep(5000);
		}
		_exit(6);
	}
	char c;
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	usleep(20000); /* its spin is running */
	devq *bad = conn(D.sock, "root-secret-name");
	ck_assert_int_eq(devq_queue_open(bad, 0), 0);
	struct devq_arg f[] = { a_u64("ns", 1000000) };
	uint64_t pb = submit_kernel(bad, 0, exe(bad, "fault"), f, 1);
	assert_lost(bad, 0, pb);
	char msg[512] = "";
	ssize_t n = read(out[0], msg, sizeof(msg) - 1);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "bystander exit %d",
		      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	ck_assert_int_gt(n, 0);
	fprintf(stderr, "uid 65534 was told (%zu bytes): %s\n", strlen(msg), msg);
	ck_assert_msg(strncmp(msg, ADVICE, strlen(ADVICE)) == 0, "%s", msg);
	ck_assert_msg(strstr(msg, BUSY_ROLE), "%s", msg);
	char pidstr[32];
	snprintf(pidstr, sizeof(pidstr), "pid %d", (int)getpid());
	ck_assert_msg(!strstr(msg, pidstr), "%s", msg);
	ck_assert_msg(!strstr(msg, "root-secret-name"), "%s", msg);
	ck_assert_msg(!strstr(msg, "uid 0"), "%s", msg);
	ck_assert_msg(!strstr(msg, "session"), "%s", msg);
	/* Root, an admin, is still told who had work. */
	struct devq_error e;
	lost_notice(bad, &e);
	ck_assert_msg(strncmp(e.message, ADVICE, strlen(ADVICE)) == 0, "%s", e.message);
	ck_assert_msg(strstr(e.message, "2 sessions had work on the device"), "%s", e.message);
	ck_assert_int_eq(harness_wait(&D), 69);
	devq_disconnect(bad);
	close(ready[0]);
	close(ready[1]);
	close(out[0]);
	close(out[1]);
}
END_TEST

/* ---- uids whose work keeps losing the device ---------------------------- */

/* Runs, as uid, a client that connects and, with fault, faults the device
 * and waits for its notice.  Returns devq_connect's result (after a
 * fault: 0 when the notice came); msg gets the refusal or the notice. */
static int as_uid(uid_t uid, bool fault, char *msg, size_t len)
{
	int out[2];
	ck_assert_int_eq(pipe(out), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(out[0]);
		if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
			_exit(90);
		devq *q = NULL;
		int r = devq_connect(D.sock, "tenant", &q);
		char m[512] = "";
		snprintf(m, sizeof(m), "%s", q ? devq_last_error(q) : "");
		if (r == 0 && fault) {
			struct devq_arg a = a_u64("ns", 1000000);
			struct devq_op op = { .queue = 0, .kind = DEVQ_OP_KERNEL,
					      .exec = exe(q, "fault"), .args = &a, .nargs = 1 };
			uint64_t p;
			struct devq_error e;
			r = 1;
			if (devq_queue_open(q, 0) == 0 && devq_submit(q, &op, 1, &p) == 0 &&
			    devq_flush(q) == 0) {
				for (int i = 0; i < 2000 && r; i++) {
					if (devq_next_error(q, &e) == 1 &&
					    e.code == DEVQ_E_DEVICE_LOST) {
						snprintf(m, sizeof(m), "%s", e.message);
						r = 0;
					} else if (devq_poll(q) < 0 &&
						   devq_next_error(q, &e) != 1) {
						break;
					} else {
						usleep(5000);
					}
				}
			}
		}
		size_t n = strlen(m) + 1;
		if (write(out[1], &r, sizeof(r)) != sizeof(r) || write(out[1], m, n) != (ssize_t)n)
			_exit(91);
		if (q)
			devq_disconnect(q);
		_exit(0);
	}
	close(out[1]);
	int r = -999;
	ck_assert_int_eq(read(out[0], &r, sizeof(r)), sizeof(r));
	ssize_t n = read(out[0], msg, len - 1);
	msg[n > 0 ? n : 0] = '\0';
	close(out[0]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client as uid %u: exit %d",
		      (unsigned)uid, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return r;
}

/* Runs devctl ARGS against the daemon, as root (uid 0) or another uid,
 * and returns its exit status, stdout and stderr in out. */
static int devctl_as(uid_t uid, const char *args, char *out, size_t n)
{
	char cmd[1024], ids[96] = "";
	if (uid)
		snprintf(ids, sizeof(ids), "setpriv --reuid=%u --regid=%u --clear-groups ",
			 (unsigned)uid, (unsigned)uid);
	snprintf(cmd, sizeof(cmd), "%s%s --socket %s %s 2>&1", ids, harness_bin("devctl"), D.sock,
		 args);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t got = fread(out, 1, n - 1, p);
	out[got] = '\0';
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* What uid's session sees of the refused uids in Status: how many, and
 * the first's uid, losses and end. */
struct seen {
	int r;
	size_t n;
	struct devq_refused_user first;
};

static struct seen refused_seen_by(uid_t uid)
{
	int out[2];
	ck_assert_int_eq(pipe(out), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(out[0]);
		if (uid && (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0))
			_exit(90);
		struct seen v = { .r = -1 };
		devq *q = NULL;
		struct devq_status *s;
		if (devq_connect(D.sock, "status-reader", &q) == 0 && devq_get_status(q, &s) == 0) {
			v.r = 0;
			v.n = s->nrefused;
			if (s->nrefused)
				v.first = s->refused[0];
			devq_status_free(s);
		}
		devq_disconnect(q);
		_exit(write(out[1], &v, sizeof(v)) == sizeof(v) ? 0 : 91);
	}
	close(out[1]);
	struct seen v = { .r = -999 };
	ck_assert_int_eq(read(out[0], &v, sizeof(v)), sizeof(v));
	close(out[0]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status reader as uid %u: exit %d",
		      (unsigned)uid, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	return v;
}

static char state_dir[64];
static char state_file[128];

static void start_open(const char *const *args, bool restart)
{
	if (restart)
		harness_restart(&D, args);
	else
		harness_start(&D, args);
	ck_assert_int_eq(chmod(D.dir, 0755), 0);
	ck_assert_int_eq(chmod(D.sock, 0666), 0);
}

static void state_setup(void)
{
	snprintf(state_dir, sizeof(state_dir), "/tmp/devq-state-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(state_dir));
	snprintf(state_file, sizeof(state_file), "%s/lost-uids.devqd", state_dir);
}

static void state_teardown(void)
{
	unlink(state_file);
	ck_assert_int_eq(rmdir(state_dir), 0);
}

/* Two device losses caused by uid 65534 (lost-refuse-after 2): after the
 * restart that uid is refused with a message that says why and until when;
 * another uid and root are served; the journal says it at start. */
START_TEST(test_lost_refuses_culprit_uid)
{
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: test_lost_refuses_culprit_uid needs root to setuid\n");
		return;
	}
	state_setup();
	const char *args[] = { "--test-fault-injection", "--allow-users", "65534,65533",
			       "--state-dir", state_dir, "--lost-refuse-after", "2",
			       "--lost-refuse-s", "600", NULL };
	char msg[512];
	for (int i = 0; i < 2; i++) {
		start_open(args, i > 0);
		ck_assert_int_eq(as_uid(65534, false, msg, sizeof(msg)), 0); /* not refused yet */
		ck_assert_msg(as_uid(65534, true, msg, sizeof(msg)) == 0, "%s", msg);
		fprintf(stderr, "loss %d, uid 65534 was told: %s\n", i + 1, msg);
		/* The only busy session, told the same as one of several:
		 * before, "your work faulted the device" told a non-admin that
		 * no other session had work. */
		ck_assert_msg(strstr(msg, BUSY_ROLE) && !strstr(msg, "your work faulted"), "%s",
			      msg);
		ck_assert_uint_le(strlen(msg), 255);
		if (i == 1)
			ck_assert_msg(strstr(msg, "uid 65534 is refused for 600 s (2 device losses)"),
				      "%s", msg);
		else
			ck_assert_msg(!strstr(msg, "refused"), "%s", msg);
		ck_assert_int_eq(harness_wait(&D), 69);
	}
	ck_assert_msg(log_has("uid 65534 refused for 600 s: its work lost the device 2 times"),
		      "no refusal line at the second loss");

	start_open(args, true);
	int r = as_uid(65534, false, msg, sizeof(msg));
	fprintf(stderr, "after the restart, uid 65534: r=%d: %s\n", r, msg);
	ck_assert_int_eq(r, -EACCES);
	ck_assert_msg(strstr(msg, "uid 65534 is refused until") &&
			      strstr(msg, "lost the device 2 times"),
		      "%s", msg);
	ck_assert_int_eq(as_uid(65533, false, msg, sizeof(msg)), 0);
	devq *root = conn(D.sock, "admin");
	devq_disconnect(root);
	ck_assert_msg(log_has("uid 65534 refused until"), "no startup line naming uid 65534");
	ck_assert_msg(log_has("refused: uid 65534 is refused until"), "no refusal line");

	/* Status shows the refusal to an admin (root), with its count and its
	 * end; another uid sees nothing of it (before, only the journal and
	 * the systemd status line named refused uids). */
	long long now = (long long)time(NULL);
	struct seen v = refused_seen_by(0);
	ck_assert_int_eq(v.r, 0);
	ck_assert_uint_eq(v.n, 1);
	ck_assert_uint_eq(v.first.uid, 65534);
	ck_assert_uint_eq(v.first.losses, 2);
	ck_assert_msg(v.first.until_s > now + 500 && v.first.until_s <= now + 600,
		      "until %lld, now %lld", (long long)v.first.until_s, now);
	v = refused_seen_by(65533);
	ck_assert_int_eq(v.r, 0);
	ck_assert_uint_eq(v.n, 0);
	char out[8192];
	ck_assert_int_eq(devctl_as(0, "status", out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "refused:        uid 65534 until ") &&
			      strstr(out, "UTC (2 device losses)"),
		      "devctl status as root:\n%s", out);
	ck_assert_int_eq(devctl_as(0, "status --json", out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "\"refused_uids\":[{\"uid\":65534,\"losses\":2,\"until_s\":"),
		      "devctl status --json as root:\n%s", out);
	ck_assert_int_eq(devctl_as(65533, "status", out, sizeof(out)), 0);
	ck_assert_msg(!strstr(out, "65534") && !strstr(out, "refused"),
		      "devctl status as uid 65533:\n%s", out);
	ck_assert_int_eq(devctl_as(65533, "status --json", out, sizeof(out)), 0);
	ck_assert_msg(strstr(out, "\"refused_uids\":[]") && !strstr(out, "65534"),
		      "devctl status --json as uid 65533:\n%s", out);
	ck_assert_int_eq(harness_stop(&D), 0);
	state_teardown();
}
END_TEST

static void write_state(const char *text)
{
	FILE *f = fopen(state_file, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_ge(fputs(text, f), 0);
	ck_assert_int_eq(fclose(f), 0);
}

/* A state file of n uids, all refused now, uid 65534 the last. */
static void write_full_state(unsigned n)
{
	FILE *f = fopen(state_file, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "devqd lost-uids 1\n");
	long long now = (long long)time(NULL);
	for (unsigned i = 1; i < n; i++)
		fprintf(f, "%u 5 %lld\n", 20000 + i, now);
	fprintf(f, "65534 5 %lld\n", now);
	ck_assert_int_eq(fclose(f), 0);
}

/* A corrupt state file is logged and ignored, never a failed start; the
 * file's uids are read up to DEVQ_CULPRIT_MAX, exactly, and not one past;
 * lost-refuse-s 0 refuses nobody. */
START_TEST(test_lost_state_file)
{
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: test_lost_state_file needs root to setuid\n");
		return;
	}
	state_setup();
	const char *args[] = { "--allow-users", "65534", "--state-dir", state_dir, NULL };
	char msg[512];

	write_state("devqd lost-uids 1\n65534 5 notanumber\n");
	start_open(args, false);
	ck_assert_int_eq(as_uid(65534, false, msg, sizeof(msg)), 0);
	ck_assert_msg(log_has("line 2: not 'UID LOSSES SECONDS'; ignoring the file"),
		      "corrupt file not logged");
	ck_assert_int_eq(harness_stop(&D), 0);

	write_state("\x7f" "ELF garbage\n");
	start_open(args, false);
	ck_assert_int_eq(as_uid(65534, false, msg, sizeof(msg)), 0);
	ck_assert_int_eq(harness_stop(&D), 0);

	write_full_state(DEVQ_CULPRIT_MAX_TEST);
	start_open(args, false);
	ck_assert_int_eq(as_uid(65534, false, msg, sizeof(msg)), -EACCES);
	ck_assert_msg(strstr(msg, "lost the device 5 times"), "%s", msg);
	ck_assert_int_eq(harness_stop(&D), 0);

	write_full_state(DEVQ_CULPRIT_MAX_TEST + 1);
	start_open(args, false);
	ck_assert_int_eq(as_uid(65534, false, msg, sizeof(msg)), 0);
	ck_assert_msg(log_has("1 uids past the first 256 ignored"), "no line for the uid past the limit");
	ck_assert_int_eq(harness_stop(&D), 0);

	write_full_state(2);
	const char *off[] = { "--allow-users", "65534", "--state-dir", state_dir,
			      "--lost-refuse-s", "0", NULL };
	start_open(off, false);
	ck_assert_int_eq(as_uid(65534, false, msg, sizeof(msg)), 0);
	ck_assert_int_eq(harness_stop(&D), 0);
	state_teardown();
}
END_TEST

/* A loss when the record already holds DEVQ_CULPRIT_MAX uids: the one whose
 * last loss is oldest goes, the file stays at the limit. */
START_TEST(test_lost_record_full)
{
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: test_lost_record_full needs root to setuid\n");
		return;
	}
	state_setup();
	FILE *f = fopen(state_file, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "devqd lost-uids 1\n");
	long long now = (long long)time(NULL);
	for (unsigned i = 1; i <= DEVQ_CULPRIT_MAX_TEST; i++)
		fprintf(f, "%u 1 %lld\n", 20000 + i, now - (i == 7 ? 500 : 100));
	ck_assert_int_eq(fclose(f), 0);
	const char *args[] = { "--test-fault-injection", "--allow-users", "65534", "--state-dir",
			       state_dir, "--lost-refuse-after", "1", NULL };
	char msg[512];
	start_open(args, false);
	ck_assert_msg(as_uid(65534, true, msg, sizeof(msg)) == 0, "%s", msg);
	ck_assert_int_eq(harness_wait(&D), 69);
	f = fopen(state_file, "r");
	ck_assert_ptr_nonnull(f);
	char line[128];
	unsigned lines = 0;
	bool has_new = false, has_oldest = false;
	while (fgets(line, sizeof(line), f)) {
		lines++;
		has_new |= strncmp(line, "65534 1 ", 8) == 0;
		has_oldest |= strncmp(line, "20007 ", 6) == 0;
	}
	fclose(f);
	ck_assert_uint_eq(lines, 1 + DEVQ_CULPRIT_MAX_TEST);
	ck_assert(has_new);
	ck_assert(!has_oldest);
	start_open(args, true);
	ck_assert_int_eq(as_uid(65534, false, msg, sizeof(msg)), -EACCES);
	ck_assert_int_eq(harness_stop(&D), 0);
	state_teardown();
}
END_TEST

/* The keys' bounds, at exactly the limit and one past (devqd.conf(5)). */
START_TEST(test_lost_refuse_bounds)
{
	static const struct {
		const char *flags;
		int code;
	} cases[] = {
		{ "--lost-refuse-after 1", 0 },	       { "--lost-refuse-after 0", 2 },
		{ "--lost-refuse-after 1000", 0 },     { "--lost-refuse-after 1001", 2 },
		{ "--lost-refuse-s 0", 0 },	       { "--lost-refuse-s 2592000", 0 },
		{ "--lost-refuse-s 2592001", 2 },      { "--state-dir /nonexistent", 0 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char cmd[512];
		snprintf(cmd, sizeof(cmd), "%s --check-config -c /dev/null %s >/dev/null 2>&1",
			 harness_bin("devqd"), cases[i].flags);
		int st = system(cmd);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == cases[i].code,
			      "devqd --check-config %s: exit %d, want %d", cases[i].flags,
			      WIFEXITED(st) ? WEXITSTATUS(st) : -1, cases[i].code);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lost");
	TCase *tc = tcase_create("lost");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_fault_hidden_without_flag);
	tcase_add_test(tc, test_lost_exact_attribution);
	tcase_add_test(tc, test_lost_reconnect);
	tcase_add_test(tc, test_lost_does_not_wait_for_running_op);
	tcase_add_test(tc, test_notice_fit_limit);
	tcase_add_test(tc, test_lost_notice_fits);
	tcase_add_test(tc, test_lost_refuses_culprit_uid);
	tcase_add_test(tc, test_lost_state_file);
	tcase_add_test(tc, test_lost_refuse_bounds);
	tcase_add_test(tc, test_lost_record_full);
	tcase_add_test(tc, test_lost_notice_hides_others);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
