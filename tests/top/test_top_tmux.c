/* SPDX-License-Identifier: Apache-2.0 */
/* devctl top in a real terminal: tmux runs it against a real devqd while a
 * client keeps the device busy; the test reads the screen with
 * capture-pane, presses q, and checks that top exits cleanly.  tmux is a
 * Debian package (make deps installs it); without it the test says SKIP. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness.h"

static char tmux_sock[64];

/* Runs a tmux command line on the test's own server; output into buf. */
static int tmux(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int tmux(char *buf, size_t n, const char *fmt, ...)
{
	char args[1024], cmd[1200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "tmux -L %s -f /dev/null %s 2>&1", tmux_sock, args);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t got = 0;
	if (buf && n) {
		got = fread(buf, 1, n - 1, p);
		buf[got] = '\0';
	} else {
		char sink[4096];
		while (fread(sink, 1, sizeof(sink), p) > 0)
			;
	}
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A client that keeps two queues busy with short spins until killed. */
static void load(const char *sock)
{
	devq *q = NULL;
	if (devq_connect(sock, "tmux-load", &q) < 0)
		_exit(10);
	const struct devq_exec *spin;
	if (devq_exec_lookup(q, "spin", &spin) < 0 || devq_queue_open(q, 1) < 0 ||
	    devq_queue_open(q, 2) < 0)
		_exit(11);
	struct devq_arg a = { .name = "ns", .type = DEVQ_ARG_U64, .v.u64 = 2000000 };
	for (uint64_t k = 1;; k++) {
		struct devq_op ops[2] = {
			{ .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = spin, .args = &a, .nargs = 1 },
			{ .queue = 2, .kind = DEVQ_OP_KERNEL, .exec = spin, .args = &a, .nargs = 1 },
		};
		if (devq_submit(q, ops, 2, NULL) < 0)
			_exit(12);
		/* Keep a few in flight so the queues show depth. */
		if (k > 4 && devq_wait(q, 1, k - 4, 60000, NULL) < 0)
			_exit(13);
	}
}

START_TEST(top_in_tmux_shows_load_and_quits_on_q)
{
	if (system("command -v tmux >/dev/null 2>&1") != 0) {
		fprintf(stderr, "SKIP: tmux is not installed (apt-get install tmux)\n");
		return;
	}
	struct daemon_proc d;
	harness_start(&d, NULL);
	snprintf(tmux_sock, sizeof(tmux_sock), "devq-top-%d", (int)getpid());
	pid_t lp = fork();
	ck_assert_int_ge(lp, 0);
	if (lp == 0)
		load(d.sock);

	char status[160], cmd[600];
	snprintf(status, sizeof(status), "%s/top.status", d.dir);
	/* The pane's shell records top's exit status, then the pane closes. */
	snprintf(cmd, sizeof(cmd), "new-session -d -s top -x 132 -y 45 \"%s --socket %s top; "
				   "echo \\$? > %s\"",
		 harness_bin("devctl"), d.sock, status);
	ck_assert_int_eq(tmux(NULL, 0, "%s", cmd), 0);

	/* Wait (bounded, not timed) for a frame that shows the load client. */
	static char screen[16384];
	bool shown = false;
	for (int i = 0; i < 600 && !shown; i++) {
		usleep(100000);
		tmux(screen, sizeof(screen), "capture-pane -p -t top");
		shown = strstr(screen, "tmux-load") && strstr(screen, "PHASE") &&
			strstr(screen, "device busy");
	}
	ck_assert_msg(shown, "top never showed the load client; screen:\n%s", screen);
	char row[64];
	snprintf(row, sizeof(row), " %8d ", (int)lp);
	ck_assert_msg(strstr(screen, row), "no row with the load client's pid %d:\n%s", (int)lp,
		      screen);
	ck_assert_msg(strstr(screen, "q quits"), "no hint how to quit:\n%s", screen);
	ck_assert_msg(strstr(screen, "SESSION") && strstr(screen, "QUEUE") &&
			      strstr(screen, "DEPTH"),
		      "tables missing:\n%s", screen);

	ck_assert_int_eq(tmux(NULL, 0, "send-keys -t top q"), 0);
	bool gone = false;
	for (int i = 0; i < 300 && !gone; i++) {
		usleep(100000);
		gone = tmux(NULL, 0, "has-session -t top") != 0;
	}
	if (!gone)
		tmux(NULL, 0, "kill-server");
	kill(lp, SIGKILL);
	waitpid(lp, NULL, 0);
	ck_assert_msg(gone, "devctl top did not exit on q");
	FILE *f = fopen(status, "r");
	ck_assert_ptr_nonnull(f);
	int code = -1;
	ck_assert_int_eq(fscanf(f, "%d", &code), 1);
	fclose(f);
	ck_assert_int_eq(code, 0);
	unlink(status);
	tmux(NULL, 0, "kill-server");
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A client with more queues than an 80x24 terminal has rows, each holding
 * long spins, until killed. */
static void many_queues(const char *sock)
{
	devq *q = NULL;
	if (devq_connect(sock, "tmux-many", &q) < 0)
		_exit(10);
	const struct devq_exec *spin;
	if (devq_exec_lookup(q, "spin", &spin) < 0)
		_exit(11);
	struct devq_arg a = DEVQ_U64("ns", 2000000000ull);
	for (uint32_t i = 0; i < 40; i++) {
		struct devq_op op = { .queue = i, .kind = DEVQ_OP_KERNEL, .exec = spin, .args = &a,
				      .nargs = 1 };
		if (devq_queue_open(q, i) < 0 || devq_submit(q, &op, 1, NULL) < 0)
			_exit(12);
	}
	devq_flush(q);
	for (;;)
		pause();
}

/* Issue 17 item 8: in 80x24 the header stays on top and no line wraps; when
 * devqd goes away top says so where it can still be read, and exits 3. */
START_TEST(top_fits_80x24_and_says_why_it_stopped)
{
	if (system("command -v tmux >/dev/null 2>&1") != 0) {
		fprintf(stderr, "SKIP: tmux is not installed (apt-get install tmux)\n");
		return;
	}
	struct daemon_proc d;
	harness_start(&d, NULL);
	snprintf(tmux_sock, sizeof(tmux_sock), "devq-top80-%d", (int)getpid());
	pid_t lp = fork();
	ck_assert_int_ge(lp, 0);
	if (lp == 0)
		many_queues(d.sock);
	char status[160], cmd[600];
	snprintf(status, sizeof(status), "%s/top.status", d.dir);
	snprintf(cmd, sizeof(cmd), "new-session -d -s top -x 80 -y 24 \"%s --socket %s top; "
				   "echo \\$? > %s; sleep 60\"",
		 harness_bin("devctl"), d.sock, status);
	ck_assert_int_eq(tmux(NULL, 0, "%s", cmd), 0);
	static char screen[16384];
	bool shown = false;
	for (int i = 0; i < 600 && !shown; i++) {
		usleep(100000);
		tmux(screen, sizeof(screen), "capture-pane -p -t top");
		shown = strstr(screen, "tmux-many") && strstr(screen, "q quits");
	}
	ck_assert_msg(shown, "top never showed the client; screen:\n%s", screen);
	ck_assert_msg(!strncmp(screen, "devq top", 8), "the header is not on top:\n%s", screen);
	const char *l2 = strchr(screen, '\n');
	ck_assert_msg(l2 && !strncmp(l2 + 1, "ops/s", 5), "the first line wrapped:\n%s", screen);
	int lines = 0;
	for (const char *x = screen; *x;) {
		const char *e = strchr(x, '\n');
		size_t n = e ? (size_t)(e - x) : strlen(x);
		ck_assert_msg(n < 80, "a line of %zu columns:\n%s", n, screen);
		lines++;
		x = e ? e + 1 : x + n;
	}
	ck_assert_msg(lines <= 24, "%d lines", lines);

	kill(d.pid, SIGKILL);
	harness_wait(&d);
	FILE *f = NULL;
	for (int i = 0; i < 100 && !f; i++) {
		usleep(100000);
		f = fopen(status, "r");
	}
	usleep(200000);
	tmux(screen, sizeof(screen), "capture-pane -p -t top");
	tmux(NULL, 0, "kill-server");
	kill(lp, SIGKILL);
	waitpid(lp, NULL, 0);
	ck_assert_msg(f != NULL, "top did not exit when devqd went away:\n%s", screen);
	int code = -1;
	ck_assert_int_eq(fscanf(f, "%d", &code), 1);
	fclose(f);
	ck_assert_int_eq(code, 3);
	ck_assert_msg(strstr(screen, "devctl top: ") && strstr(screen, "devqd went away"),
		      "no reason left on the screen:\n%s", screen);
}
END_TEST

/* Issue 17: a submit that waits longer than a second shows a progress line
 * on a terminal (against the time the op asks for), cleared when the op
 * completes; nothing when stderr is not a terminal. */
START_TEST(submit_progress_on_a_terminal)
{
	if (system("command -v tmux >/dev/null 2>&1") != 0) {
		fprintf(stderr, "SKIP: tmux is not installed (apt-get install tmux)\n");
		return;
	}
	struct daemon_proc d;
	harness_start(&d, NULL);
	snprintf(tmux_sock, sizeof(tmux_sock), "devq-prog-%d", (int)getpid());
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "new-session -d -s sub -x 100 -y 10 \"%s --socket %s submit "
				   "spin ns=2500000000; sleep 60\"",
		 harness_bin("devctl"), d.sock);
	ck_assert_int_eq(tmux(NULL, 0, "%s", cmd), 0);
	static char screen[16384];
	bool waiting = false, done = false;
	for (int i = 0; i < 100 && !waiting; i++) {
		usleep(100000);
		tmux(screen, sizeof(screen), "capture-pane -p -t sub");
		waiting = strstr(screen, "waiting: 0 of 1 ops complete") != NULL;
	}
	ck_assert_msg(waiting, "no progress line:\n%s", screen);
	ck_assert_msg(strstr(screen, "of about 2.5 s"), "no expected time:\n%s", screen);
	for (int i = 0; i < 100 && !done; i++) {
		usleep(100000);
		tmux(screen, sizeof(screen), "capture-pane -p -t sub");
		done = strstr(screen, "spin queue 0 point 1: ok") != NULL;
	}
	tmux(NULL, 0, "kill-server");
	ck_assert_msg(done && !strstr(screen, "waiting"), "not cleared:\n%s", screen);
	char out[256];
	snprintf(out, sizeof(out), "%s/err.txt", d.dir);
	snprintf(cmd, sizeof(cmd), "%s --socket %s submit spin ns=1500000000 >/dev/null 2>%s",
		 harness_bin("devctl"), d.sock, out);
	ck_assert_int_eq(system(cmd), 0);
	FILE *f = fopen(out, "r");
	ck_assert_ptr_nonnull(f);
	char buf[512];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	ck_assert_msg(n == 0, "not a terminal, yet: %s", buf);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("top");
	TCase *tc = tcase_create("top");
	tcase_set_timeout(tc, 180);
	tcase_add_test(tc, top_in_tmux_shows_load_and_quits_on_q);
	tcase_add_test(tc, top_fits_80x24_and_says_why_it_stopped);
	tcase_add_test(tc, submit_progress_on_a_terminal);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
