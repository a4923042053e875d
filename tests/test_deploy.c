/* SPDX-License-Identifier: Apache-2.0 */
/* Deployment: devqd under systemd's own tools and protocols.  The notify
 * tests own the $NOTIFY_SOCKET datagram socket, as systemd would; the
 * activation test runs devqd under systemd-socket-activate; the config
 * tests read devqd.conf files; the install test builds a program from a
 * `make install` tree with pkg-config; the metrics test feeds `devctl
 * metrics` to promtool. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <grp.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/config.h"
#include "harness.h"

/* Liveness bounds only: a message that never comes fails the test after
 * this long; nothing here measures speed. */
#define ARRIVAL_MS 30000
/* How long "no more watchdog pings" is watched: at least ten ping intervals
 * of the 200 ms watchdog used below.  Only ever makes a test pass more
 * easily on a slow machine, never fail. */
#define QUIET_MS 1000

/* Runs a shell command; its output (stdout and stderr) goes to out. */
static int sh(char *out, size_t outlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void write_file(const char *path, const char *text);

struct proc {
	pid_t pid;
	char dir[64];
	char sock[128];
	char notify[128];
	char log[128];
	int nfd; /* our end of NOTIFY_SOCKET */
	char seen[16384]; /* every notify message, for failure messages */
	size_t seen_len;
};

static void proc_dir(struct proc *p)
{
	memset(p, 0, sizeof(*p));
	p->nfd = -1;
	snprintf(p->dir, sizeof(p->dir), "/tmp/devq-deploy-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(p->dir));
	snprintf(p->sock, sizeof(p->sock), "%s/devqd.sock", p->dir);
	snprintf(p->notify, sizeof(p->notify), "%s/notify", p->dir);
	snprintf(p->log, sizeof(p->log), "%s/devqd.log", p->dir);
}

/* The datagram socket systemd would own. */
static void notify_listen(struct proc *p)
{
	p->nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(p->nfd, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", p->notify);
	ck_assert_int_eq(bind(p->nfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
}

/* Starts argv (argv[0] a path) with env entries added.  The child dies
 * with this test process, so a failed assertion leaves no daemon behind. */
static void proc_spawn(struct proc *p, const char *const *argv_in, const char *const *env)
{
	/* Under make check-valgrind, devqd (wherever it is in argv) runs in
	 * valgrind, as harness_start does it. */
	const char *argv[48];
	int n = 0;
	for (int i = 0; argv_in[i] && n < 40; i++) {
		size_t len = strlen(argv_in[i]);
		if (getenv("DEVQ_VALGRIND") && len >= 6 && !strcmp(argv_in[i] + len - 6, "/devqd")) {
			argv[n++] = "valgrind";
			argv[n++] = "--quiet";
			argv[n++] = "--error-exitcode=99";
			argv[n++] = "--leak-check=full";
			argv[n++] = "--errors-for-leak-kinds=definite,indirect";
		}
		argv[n++] = argv_in[i];
	}
	argv[n] = NULL;
	p->pid = fork();
	ck_assert_int_ge(p->pid, 0);
	if (p->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		int fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		for (int i = 0; env && env[i]; i++)
			putenv((char *)env[i]);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
}

static int proc_wait(struct proc *p)
{
	int st = 0;
	while (waitpid(p->pid, &st, 0) < 0 && errno == EINTR)
		;
	p->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void proc_kill(struct proc *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		proc_wait(p);
	}
}

static const char *proc_log(const struct proc *p)
{
	static char buf[4096];
	buf[0] = '\0';
	FILE *f = fopen(p->log, "r");
	if (f) {
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		buf[n] = '\0';
		fclose(f);
	}
	return buf;
}

static void proc_cleanup(struct proc *p)
{
	if (p->nfd >= 0)
		close(p->nfd);
	unlink(p->notify);
	unlink(p->log);
	unlink(p->sock);
	rmdir(p->dir);
}

/* One notify datagram into msg; 0 when none came within timeout_ms. */
static int notify_recv(struct proc *p, char *msg, size_t len, int timeout_ms)
{
	struct pollfd pfd = { .fd = p->nfd, .events = POLLIN };
	int r = poll(&pfd, 1, timeout_ms);
	ck_assert_int_ge(r, 0);
	if (r == 0)
		return 0;
	ssize_t n = recv(p->nfd, msg, len - 1, 0);
	ck_assert_int_gt(n, 0);
	msg[n] = '\0';
	int w = snprintf(p->seen + p->seen_len, sizeof(p->seen) - p->seen_len, "[%s]\n", msg);
	if (w > 0 && p->seen_len + (size_t)w < sizeof(p->seen))
		p->seen_len += (size_t)w;
	return 1;
}

/* Waits for a datagram containing want; msg gets it. */
static void notify_expect(struct proc *p, const char *want, char *msg, size_t len)
{
	while (notify_recv(p, msg, len, ARRIVAL_MS))
		if (strstr(msg, want))
			return;
	ck_abort_msg("no '%s' from devqd within %d ms; got:\n%s\nlog:\n%s", want, ARRIVAL_MS,
		     p->seen, proc_log(p));
}

/* Nothing containing unwanted arrives for QUIET_MS. */
static void notify_quiet(struct proc *p, const char *unwanted)
{
	char msg[1024];
	uint64_t end = harness_now_ns() + QUIET_MS * 1000000ull;
	for (;;) {
		uint64_t now = harness_now_ns();
		if (now >= end)
			return;
		if (!notify_recv(p, msg, sizeof(msg), (int)((end - now) / 1000000) + 1))
			return;
		ck_assert_msg(!strstr(msg, unwanted), "'%s' after the fault: %s", unwanted, msg);
	}
}

static void start_notified(struct proc *p, const char *bin, const char *watchdog_usec,
			   const char *const *extra)
{
	proc_dir(p);
	notify_listen(p);
	static char env_notify[160], env_wd[64];
	snprintf(env_notify, sizeof(env_notify), "NOTIFY_SOCKET=%s", p->notify);
	snprintf(env_wd, sizeof(env_wd), "WATCHDOG_USEC=%s", watchdog_usec ? watchdog_usec : "");
	const char *env[] = { env_notify, watchdog_usec ? env_wd : NULL, NULL };
	const char *argv[24];
	int n = 0;
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = p->sock;
	argv[n++] = "--backend";
	argv[n++] = "cpu";
	argv[n++] = "-v";
	for (int i = 0; extra && extra[i] && n < 23; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	proc_spawn(p, argv, env);
}

static uint64_t spin(devq *q, uint32_t queue, uint64_t ns)
{
	struct devq_arg a[] = { a_u64("ns", ns) };
	struct devq_op op = { .queue = queue, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
			      .args = a, .nargs = 1 };
	uint64_t pt;
	ck_assert_msg(devq_submit(q, &op, 1, &pt) == 0, "%s", devq_last_error(q));
	return pt;
}

/* ---- notify ---------------------------------------------------------- */

START_TEST(test_notify_ready_status_stopping)
{
	struct proc p;
	start_notified(&p, harness_bin("devqd"), NULL, NULL);
	char msg[1024];
	notify_expect(&p, "READY=1", msg, sizeof(msg));
	/* READY=1 promises a served socket: connect and say hello at once,
	 * without retrying. */
	devq *q = NULL;
	int r = devq_connect(p.sock, "notify-test", &q);
	ck_assert_msg(r == 0, "READY=1 came before the socket served: %s",
		      q ? devq_last_error(q) : strerror(-r));
	ck_assert_msg(strstr(msg, "STATUS=sessions 0, ops in flight 0"), "READY without STATUS: %s",
		      msg);
	ck_assert_msg(strstr(msg, "backend cpu"), "STATUS names no backend: %s", msg);

	/* STATUS= follows the live counts. */
	notify_expect(&p, "STATUS=sessions 1, ops in flight 0", msg, sizeof(msg));
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_buffer *b = mkbuf(q, 3 << 20);
	/* Long enough that a 1 s STATUS refresh falls inside it, even on a
	 * loaded machine. */
	uint64_t pt = spin(q, 1, 6000ull * 1000 * 1000);
	notify_expect(&p, "STATUS=sessions 1, ops in flight 1, pinned 3.0 MiB", msg, sizeof(msg));
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 1, pt, ARRIVAL_MS, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_OK);
	notify_expect(&p, "STATUS=sessions 1, ops in flight 0, pinned 3.0 MiB", msg, sizeof(msg));
	ck_assert_int_eq(devq_buffer_release(q, b), 0);
	ck_assert_int_eq(devq_buffer_wait_released(q, b, ARRIVAL_MS), 0);
	devq_disconnect(q);
	notify_expect(&p, "STATUS=sessions 0, ops in flight 0, pinned 0.0 MiB", msg, sizeof(msg));

	kill(p.pid, SIGTERM);
	notify_expect(&p, "STOPPING=1", msg, sizeof(msg));
	ck_assert_int_eq(proc_wait(&p), 0);
	proc_cleanup(&p);
}
END_TEST

START_TEST(test_watchdog_pings_stop_when_loop_wedged)
{
	struct proc p;
	/* Pings every 100 ms. */
	const char *hooks[] = { "--test-fault-injection", NULL };
	start_notified(&p, harness_bin("devqd"), "200000", hooks);
	char msg[1024];
	notify_expect(&p, "READY=1", msg, sizeof(msg));
	for (int i = 0; i < 3; i++)
		notify_expect(&p, "WATCHDOG=1", msg, sizeof(msg));
	/* Wedge the loop thread (devqd's test hook); it says so just before
	 * it blocks. */
	kill(p.pid, SIGRTMIN + 1);
	notify_expect(&p, "DEVQ_TEST_FAULT=loop", msg, sizeof(msg));
	notify_quiet(&p, "WATCHDOG=1");
	/* Wedged, not dead: systemd's watchdog is what must act. */
	ck_assert_int_eq(kill(p.pid, 0), 0);
	proc_kill(&p);
	proc_cleanup(&p);
}
END_TEST

START_TEST(test_watchdog_pings_stop_when_completions_wedged)
{
	struct proc p;
	const char *extra[] = { "--test-fault-injection", "--max-op-ms", "100", "--stall-timeout-ms",
				"1000", NULL };
	start_notified(&p, harness_bin("devqd"), "200000", extra);
	char msg[1024];
	notify_expect(&p, "READY=1", msg, sizeof(msg));
	devq *q = conn(p.sock, "watchdog-test");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	/* A healthy op first: pings go on while work completes. */
	uint64_t pt = spin(q, 1, 1000000);
	ck_assert_int_eq(devq_wait(q, 1, pt, ARRIVAL_MS, NULL), 0);
	notify_expect(&p, "WATCHDOG=1", msg, sizeof(msg));
	/* Now the device thread that reports the next completion blocks. */
	kill(p.pid, SIGRTMIN + 2);
	notify_expect(&p, "DEVQ_TEST_FAULT=completions", msg, sizeof(msg));
	spin(q, 1, 1000000);
	notify_expect(&p, "STATUS=device stuck: 1 ops in flight", msg, sizeof(msg));
	notify_quiet(&p, "WATCHDOG=1");
	ck_assert_msg(strstr(proc_log(&p), "device stuck"), "no log line: %s", proc_log(&p));
	devq_disconnect(q);
	proc_kill(&p);
	proc_cleanup(&p);
}
END_TEST

/* Without a watchdog the same check runs each second and feeds Status:
 * devq_device_stalled is 0 while ops complete, 1 once a completion is
 * wedged past the stall bound (max-op-ms 100 + 1 s here). */
START_TEST(test_metrics_device_stalled_without_watchdog)
{
	struct daemon_proc d;
	const char *extra[] = { "--test-fault-injection", "--max-op-ms", "100",
				"--stall-timeout-ms", "1000", NULL };
	harness_start(&d, extra);
	devq *q = conn(d.sock, "stalled");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	uint64_t pt = spin(q, 1, 1000000);
	ck_assert_int_eq(devq_wait(q, 1, pt, ARRIVAL_MS, NULL), 0);
	static char text[65536];
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s --socket %s metrics", harness_bin("devctl"), d.sock);
	ck_assert_int_eq(sh(text, sizeof(text), "%s", cmd), 0);
	ck_assert_ptr_nonnull(strstr(text, "\ndevq_device_stalled 0\n"));
	kill(d.pid, SIGRTMIN + 2); /* the next completion's reporter blocks */
	usleep(300 * 1000);
	spin(q, 1, 1000000);
	bool stalled = false;
	for (int i = 0; i < 100 && !stalled; i++) {
		usleep(100 * 1000);
		ck_assert_int_eq(sh(text, sizeof(text), "%s", cmd), 0);
		stalled = strstr(text, "\ndevq_device_stalled 1\n") != NULL;
	}
	ck_assert_msg(stalled, "devq_device_stalled never 1:\n%.2000s", text);
	devq_disconnect(q);
	kill(d.pid, SIGKILL);
	harness_wait(&d);
}
END_TEST

/* The stall bound is never below max-op-ms + 1 s, whatever
 * stall-timeout-ms says (devqd.conf(5)): with max-op-ms 2000 and
 * stall-timeout-ms 1000, a wedged completion is "stuck" only once 3000 ms
 * have passed, not after 1000.  A lower bound only: the daemon cannot say
 * it earlier however loaded the machine is. */
START_TEST(test_watchdog_stall_floor)
{
	struct proc p;
	const char *extra[] = { "--test-fault-injection", "--max-op-ms", "2000",
				"--stall-timeout-ms", "1000", NULL };
	start_notified(&p, harness_bin("devqd"), "200000", extra);
	char msg[1024];
	notify_expect(&p, "READY=1", msg, sizeof(msg));
	devq *q = conn(p.sock, "stall-floor");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	uint64_t pt = spin(q, 1, 1000000);
	ck_assert_int_eq(devq_wait(q, 1, pt, ARRIVAL_MS, NULL), 0);
	notify_expect(&p, "WATCHDOG=1", msg, sizeof(msg));
	kill(p.pid, SIGRTMIN + 2);
	notify_expect(&p, "DEVQ_TEST_FAULT=completions", msg, sizeof(msg));
	uint64_t t0 = harness_now_ns();
	spin(q, 1, 1000000);
	notify_expect(&p, "STATUS=device stuck", msg, sizeof(msg));
	uint64_t took_ms = (harness_now_ns() - t0) / 1000000;
	/* The idle watchdog tick before the submit (every 100 ms) is where
	 * the daemon counts from. */
	ck_assert_msg(took_ms >= 2900, "stuck after %llu ms, below max-op-ms + 1000",
		      (unsigned long long)took_ms);
	const char *line = strstr(proc_log(&p), "none completed for ");
	unsigned long long n = 0;
	ck_assert_msg(line && sscanf(line, "none completed for %llu ms", &n) == 1, "%s",
		      proc_log(&p));
	ck_assert_uint_ge(n, 3000);
	devq_disconnect(q);
	proc_kill(&p);
	proc_cleanup(&p);
}
END_TEST

/* A square gemm_f32 of side n on queue 1 over three buffers of n*n
 * floats each (made by the caller); its point. */
static uint64_t gemm_submit(devq *q, struct devq_buffer *const bufs[3], uint64_t n)
{
	struct devq_arg ga[] = {
		a_u64("m", n),	    a_u64("n", n),	     a_u64("k", n),
		a_f32("alpha", 1.0f), a_f32("beta", 0.0f),   a_buf("a", bufs[0], 0),
		a_buf("b", bufs[1], 0), a_buf("c", bufs[2], 0),
	};
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "gemm_f32"),
			      .args = ga, .nargs = 8 };
	uint64_t pt;
	ck_assert_msg(devq_submit(q, &op, 1, &pt) == 0, "%s", devq_last_error(q));
	return pt;
}

/* Sliced host ops show progress at every slice: with max-op-ms 10000 and
 * stall-timeout-ms 1000, one legal gemm of several seconds (sized from a
 * 1024^3 one on this machine: about 5 s, inside max-op-ms) keeps the
 * pings coming, never more than 1000 ms apart (the stall timeout alone:
 * no max-op-ms floor for them).  A machine that slows down under the test
 * (sanitizers, other load) may take the gemm past max-op-ms: it is then
 * stopped, deadline_exceeded, after 10 s of pings, which were checked all
 * the same. */
START_TEST(test_watchdog_pings_through_long_gemm)
{
	struct proc p;
	const char *extra[] = { "--max-op-ms", "10000", "--stall-timeout-ms", "1000", NULL };
	start_notified(&p, harness_bin("devqd"), "200000", extra);
	char msg[1024];
	notify_expect(&p, "READY=1", msg, sizeof(msg));
	devq *q = conn(p.sock, "watchdog-gemm");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	const uint64_t cap = 4096;
	struct devq_buffer *bufs[3];
	for (int i = 0; i < 3; i++)
		bufs[i] = mkbuf(q, cap * cap * 4);
	struct devq_completion c;
	uint64_t pt = gemm_submit(q, bufs, 1024);
	ck_assert_int_eq(devq_wait(q, 1, pt, ARRIVAL_MS, &c), 0);
	ck_assert_msg(c.code == DEVQ_OK, "%s", c.message);
	double t1 = (double)(c.t.device_end - c.t.device_start) / 1e9;
	uint64_t n = (uint64_t)(1024.0 * cbrt(5.0 / (t1 > 1e-3 ? t1 : 1e-3)));
	if (n > cap)
		n = cap;
	if (n < 1024)
		n = 1024;
	pt = gemm_submit(q, bufs, n);
	uint64_t last = harness_now_ns(), worst = 0, pings = 0;
	for (;;) {
		int r = devq_wait(q, 1, pt, 0, &c);
		if (r == 0)
			break;
		ck_assert_int_eq(r, -ETIMEDOUT);
		if (notify_recv(&p, msg, sizeof(msg), 50) && strstr(msg, "WATCHDOG=1")) {
			uint64_t now = harness_now_ns();
			if (now - last > worst)
				worst = now - last;
			last = now;
			pings++;
		}
		ck_assert_msg(harness_now_ns() - last < 5000000000ull,
			      "no WATCHDOG=1 for 5 s while a %llu^3 gemm runs; got:\n%s\nlog:\n%s",
			      (unsigned long long)n, p.seen, proc_log(&p));
	}
	ck_assert_msg(c.code == DEVQ_OK || c.code == DEVQ_E_DEADLINE_EXCEEDED, "%llu^3: %s",
		      (unsigned long long)n, c.message);
	ck_assert_msg(worst <= 1000000000ull,
		      "WATCHDOG=1 %llu ms apart while a %llu^3 gemm of %.1f s ran",
		      (unsigned long long)(worst / 1000000), (unsigned long long)n,
		      (double)(c.t.device_end - c.t.device_start) / 1e9);
	ck_assert_uint_ge(pings, 3);
	ck_assert_msg(!strstr(proc_log(&p), "device stuck"), "%s", proc_log(&p));
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(devq_buffer_release(q, bufs[i]), 0);
	devq_disconnect(q);
	kill(p.pid, SIGTERM);
	ck_assert_int_eq(proc_wait(&p), 0);
	proc_cleanup(&p);
}
END_TEST

/* An executable repository in p's directory with tests/host_exes.c's
 * tick (n units of spin_us each, unit hang - 1 asleep for an hour) and
 * burn (units of spin_us of CPU time, cost n); xarg gets devqd's option
 * for it. */
static void tick_repo(struct proc *p, char *xarg, size_t len)
{
	proc_dir(p);
	char repo[96], out[4096];
	snprintf(repo, sizeof(repo), "%s/repo", p->dir);
	ck_assert_int_eq(mkdir(repo, 0755), 0);
	ck_assert_int_eq(chmod(p->dir, 0755), 0);
	const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
	ck_assert_msg(sh(out, sizeof(out), "%s -std=c11 -O2 -Ikernels -shared -fPIC -o %s/h.so "
			 "tests/host_exes.c && chmod 0644 %s/h.so", cc, repo, repo) == 0, "%s", out);
	char path[160];
	snprintf(path, sizeof(path), "%s/tick.exec", repo);
	write_file(path, "signature = n:u64, spin_us:u64, hang:u64, dst:out u32[n]\n"
			 "cpu-host = h.so\ncpu-host-symbol = tick_cpu\n");
	ck_assert_int_eq(chmod(path, 0644), 0);
	snprintf(path, sizeof(path), "%s/burn.exec", repo);
	write_file(path, "signature = n:u64, spin_us:u64, hang:u64, dst:out u32[n]\n"
			 "cpu-host = h.so\ncpu-host-symbol = burn_cpu\ncost = n\n");
	ck_assert_int_eq(chmod(path, 0644), 0);
	snprintf(xarg, len, "--executables=%s", repo);
}

/* A host executable stuck inside one slice (tests/host_exes.c tick_cpu
 * with hang) is caught by the stall timeout alone: with max-op-ms 10000
 * and stall-timeout-ms 1000 the pings stop about 1 s after its last slice
 * (not max-op-ms + 1 s: 11 s). */
START_TEST(test_watchdog_stops_in_stuck_slice)
{
	struct proc p;
	char xarg[128], out[256];
	tick_repo(&p, xarg, sizeof(xarg));
	/* start_notified makes its own directory: keep ours for the repo. */
	struct proc run;
	const char *extra[] = { "--max-op-ms", "10000", "--stall-timeout-ms", "1000", xarg, NULL };
	start_notified(&run, harness_bin("devqd"), "200000", extra);
	char msg[1024];
	notify_expect(&run, "READY=1", msg, sizeof(msg));
	devq *q = conn(run.sock, "watchdog-hang");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_buffer *b = mkbuf(q, 400);
	/* 100 units of 1 ms; the 50th sleeps inside its slice. */
	struct devq_arg a[] = { a_u64("n", 100), a_u64("spin_us", 1000), a_u64("hang", 50),
				a_buf("dst", b, 0) };
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "tick"),
			      .args = a, .nargs = 4 };
	uint64_t pt;
	uint64_t t0 = harness_now_ns();
	ck_assert_msg(devq_submit(q, &op, 1, &pt) == 0, "%s", devq_last_error(q));
	notify_expect(&run, "STATUS=device stuck", msg, sizeof(msg));
	uint64_t took_ms = (harness_now_ns() - t0) / 1000000;
	/* Not before the stall timeout; well before max-op-ms + 1 s, the
	 * bound an op that cannot be stopped gets. */
	ck_assert_msg(took_ms >= 1000 && took_ms < 5000, "stuck said after %llu ms",
		      (unsigned long long)took_ms);
	notify_quiet(&run, "WATCHDOG=1");
	devq_disconnect(q);
	proc_kill(&run);
	proc_cleanup(&run);
	ck_assert_int_eq(sh(out, sizeof(out), "rm -rf %s", p.dir), 0);
}
END_TEST

/* A process busy on one CPU, at normal priority, until it is killed. */
static pid_t hog(int cpu)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		if (sched_setaffinity(0, sizeof(one), &one) < 0)
			_exit(1);
		for (volatile unsigned long i = 0;; i++)
			;
	}
	return pid;
}

/* Bulk host work runs below every other thread (SCHED_IDLE): devqd on one
 * CPU that two other processes keep busy starves its bulk op, which then
 * finishes no slice for seconds without being stuck: its wait for the
 * CPU moves the stall clock on, and the watchdog pings go on (before, the
 * stall timeout, 1 s, said "device stuck" and the pings stopped: systemd
 * would have killed devqd for other processes' load).  Once the CPU is
 * free the op completes. */
START_TEST(test_watchdog_bulk_starved_is_not_stuck)
{
	if (geteuid() != 0) {
		printf("SKIP test_watchdog_bulk_starved_is_not_stuck: bulk work runs at normal "
		       "priority when devqd cannot return from SCHED_IDLE (not root)\n");
		return;
	}
	cpu_set_t set, one;
	ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
	int cpu = 0;
	while (!CPU_ISSET(cpu, &set))
		cpu++;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	/* devqd inherits this test's one CPU. */
	ck_assert_int_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	struct proc p, run;
	char xarg[128], out[256];
	tick_repo(&p, xarg, sizeof(xarg));
	const char *extra[] = { "--max-op-ms", "10000", "--stall-timeout-ms", "1000", xarg, NULL };
	start_notified(&run, harness_bin("devqd"), "200000", extra);
	char msg[1024];
	notify_expect(&run, "READY=1", msg, sizeof(msg));
	devq *q = conn(run.sock, "starved");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_buffer *b = mkbuf(q, 1600);
	/* 400 units of 5 ms of CPU time: never timed, so bulk. */
	struct devq_arg a[] = { a_u64("n", 400), a_u64("spin_us", 5000), a_u64("hang", 0),
				a_buf("dst", b, 0) };
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "burn"),
			      .args = a, .nargs = 4 };
	uint64_t pt;
	ck_assert_msg(devq_submit(q, &op, 1, &pt) == 0, "%s", devq_last_error(q));
	/* Its first slices alone: from then on its slices are known short,
	 * and the stall timeout alone bounds a silence. */
	usleep(300000);
	pid_t h1 = hog(cpu), h2 = hog(cpu);
	/* 3 s starved: no "stuck", pings all along. */
	uint64_t end = harness_now_ns() + 3000000000ull, last_ping = harness_now_ns(), gap = 0;
	while (harness_now_ns() < end) {
		if (!notify_recv(&run, msg, sizeof(msg), 500))
			continue;
		ck_assert_msg(!strstr(msg, "device stuck"), "starved bulk work deemed stuck: %s\n%s",
			      msg, proc_log(&run));
		if (strstr(msg, "WATCHDOG=1")) {
			uint64_t now = harness_now_ns();
			gap = now - last_ping > gap ? now - last_ping : gap;
			last_ping = now;
		}
	}
	ck_assert_int_eq(kill(h1, SIGKILL), 0);
	ck_assert_int_eq(kill(h2, SIGKILL), 0);
	ck_assert_int_eq(waitpid(h1, NULL, 0), h1);
	ck_assert_int_eq(waitpid(h2, NULL, 0), h2);
	ck_assert_msg(gap < 1000000000ull, "pings %llu ms apart while starved",
		      (unsigned long long)(gap / 1000000));
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 1, pt, 30000, &c), 0);
	ck_assert_msg(c.code == DEVQ_OK, "%s", c.message);
	devq_disconnect(q);
	proc_kill(&run);
	proc_cleanup(&run);
	ck_assert_int_eq(sh(out, sizeof(out), "rm -rf %s", p.dir), 0);
}
END_TEST

/* devqd's worker threads (devqd-cpu/N) at SCHED_IDLE now. */
static int workers_idle(pid_t pid)
{
	char path[320], line[128];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *dir = opendir(path);
	ck_assert_msg(dir, "%s", path);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/comm", (int)pid, e->d_name);
		FILE *f = fopen(path, "r");
		bool worker = f && fgets(line, sizeof(line), f) && !strncmp(line, "devqd-cpu", 9);
		if (f)
			fclose(f);
		snprintf(path, sizeof(path), "/proc/%d/task/%s/sched", (int)pid, e->d_name);
		if (!worker || !(f = fopen(path, "r")))
			continue;
		long long policy = -1;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "policy : %lld", &policy) == 1)
				break;
		fclose(f);
		n += policy == SCHED_IDLE;
	}
	closedir(dir);
	return n;
}

/* Whether burn of n units (cost n, expected n us at the pinned rate) ran
 * as bulk work: its worker seen at SCHED_IDLE while it ran. */
static bool ran_as_bulk(devq *q, pid_t pid, struct devq_buffer *b, uint64_t n)
{
	struct devq_arg a[] = { a_u64("n", n), a_u64("spin_us", 100), a_u64("hang", 0),
				a_buf("dst", b, 0) };
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "burn"),
			      .args = a, .nargs = 4 };
	uint64_t pt;
	ck_assert_msg(devq_submit(q, &op, 1, &pt) == 0, "%s", devq_last_error(q));
	bool idle = false;
	while (devq_completed(q, 1) < pt) {
		idle |= workers_idle(pid) > 0;
		devq_poll(q);
	}
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 1, pt, 30000, &c), 0);
	ck_assert_msg(c.code == DEVQ_OK, "%s", c.message);
	return idle;
}

/* The line between short and bulk host ops is slice-us of expected time:
 * at rate.burn = 10^6/s an op of cost n is expected to take n us, so with
 * slice-us 2000 one of 2000 units is short (its worker stays at normal
 * priority) and one of 2001 is bulk (SCHED_IDLE); each runs about 200 ms
 * (units of 100 us of CPU). */
START_TEST(test_bulk_at_slice_us_and_past)
{
	if (geteuid() != 0) {
		printf("SKIP test_bulk_at_slice_us_and_past: not root (no SCHED_IDLE to return "
		       "from)\n");
		return;
	}
	struct proc p, run;
	char xarg[128], out[256];
	tick_repo(&p, xarg, sizeof(xarg));
	const char *extra[] = { "--slice-us", "2000", "--rate", "burn=1000000/s", xarg, NULL };
	start_notified(&run, harness_bin("devqd"), NULL, extra);
	char msg[1024];
	notify_expect(&run, "READY=1", msg, sizeof(msg));
	devq *q = conn(run.sock, "class");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_buffer *b = mkbuf(q, 4 * 2001);
	/* Timed once: an op never timed counts as bulk whatever its cost. */
	ran_as_bulk(q, run.pid, b, 10);
	ck_assert_msg(!ran_as_bulk(q, run.pid, b, 2000), "2000 us expected: ran as bulk");
	ck_assert_msg(ran_as_bulk(q, run.pid, b, 2001), "2001 us expected: not run as bulk");
	devq_disconnect(q);
	proc_kill(&run);
	proc_cleanup(&run);
	ck_assert_int_eq(sh(out, sizeof(out), "rm -rf %s", p.dir), 0);
}
END_TEST

START_TEST(test_no_watchdog_without_watchdog_usec)
{
	struct proc p;
	start_notified(&p, harness_bin("devqd"), NULL, NULL);
	char msg[1024];
	notify_expect(&p, "READY=1", msg, sizeof(msg));
	notify_quiet(&p, "WATCHDOG=1");
	kill(p.pid, SIGTERM);
	notify_expect(&p, "STOPPING=1", msg, sizeof(msg));
	ck_assert_int_eq(proc_wait(&p), 0);
	proc_cleanup(&p);
}
END_TEST

/* ---- logging ---------------------------------------------------------- */

#define JOURNAL_SOCKET "/run/systemd/journal/socket"

/* Plays journald's reader: drains the journal socket into got[] while the
 * test drives the daemon, as journald would (a datagram socket holds only
 * net.unix.max_dgram_qlen messages, 10 by default outside systemd: a test
 * that read only afterwards would block the daemon's logging, and with it
 * the replies the test waits for).  Runs until told to stop and idle. */
struct jreader {
	int fd;
	atomic_bool stop;
	char got[65536];
};

static void *jreader_run(void *arg)
{
	struct jreader *j = arg;
	size_t used = 0;
	for (;;) {
		struct pollfd pfd = { .fd = j->fd, .events = POLLIN };
		int r = poll(&pfd, 1, 200);
		if (r == 0 && atomic_load(&j->stop))
			break;
		if (r != 1)
			continue;
		char m[4096];
		ssize_t n = recv(j->fd, m, sizeof(m), 0);
		if (n <= 0)
			break;
		/* Messages separated by '|'; what does not fit is dropped. */
		if (used + (size_t)n + 2 < sizeof(j->got)) {
			memcpy(j->got + used, m, (size_t)n);
			used += (size_t)n;
			j->got[used++] = '|';
			j->got[used] = '\0';
		}
	}
	return NULL;
}

/* Under systemd (stderr is the stream $JOURNAL_STREAM names) a session's
 * events reach the journal with structured fields.  The test plays
 * journald: it binds the journal's socket, which needs a host where no
 * journald runs (a CI container); elsewhere it skips, visibly. */
START_TEST(test_journal_fields)
{
	struct stat st;
	struct sockaddr_un sa = { .sun_family = AF_UNIX, .sun_path = JOURNAL_SOCKET };
	if (lstat(JOURNAL_SOCKET, &st) == 0 && S_ISSOCK(st.st_mode)) {
		/* Left by an earlier run that failed: nobody receives on it. */
		int probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (connect(probe, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno == ECONNREFUSED)
			unlink(JOURNAL_SOCKET);
		close(probe);
	}
	if (lstat(JOURNAL_SOCKET, &st) == 0 || geteuid() != 0) {
		fprintf(stderr, "SKIP test_journal_fields: %s\n",
			geteuid() ? "needs root to bind " JOURNAL_SOCKET
				  : JOURNAL_SOCKET " exists (a journald runs here)");
		return;
	}
	bool made_dir = mkdir("/run/systemd/journal", 0755) == 0;
	int jfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(jfd, 0);
	ck_assert_msg(bind(jfd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bind: %s",
		      strerror(errno));
	static struct jreader jr;
	jr.fd = jfd;
	atomic_store(&jr.stop, false);
	jr.got[0] = '\0';
	pthread_t jt;
	ck_assert_int_eq(pthread_create(&jt, NULL, jreader_run, &jr), 0);

	struct proc p;
	proc_dir(&p);
	int lfd = open(p.log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(lfd, 0);
	ck_assert_int_eq(fstat(lfd, &st), 0);
	close(lfd);
	static char env[96];
	snprintf(env, sizeof(env), "JOURNAL_STREAM=%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	const char *envs[] = { env, NULL };
	/* A uid refused after device losses: its startup line names it in
	 * DEVQ_CLIENT_UID, as its refusals do, so that one journalctl match
	 * finds both. */
	char state_dir[] = "/tmp/devq-jstate-XXXXXX", state_file[64];
	ck_assert_ptr_nonnull(mkdtemp(state_dir));
	snprintf(state_file, sizeof(state_file), "%s/lost-uids.devqd", state_dir);
	FILE *sf = fopen(state_file, "w");
	ck_assert_ptr_nonnull(sf);
	fprintf(sf, "devqd lost-uids 1\n4242 5 %lld\n", (long long)time(NULL));
	ck_assert_int_eq(fclose(sf), 0);
	const char *argv[] = { harness_bin("devqd"), "--socket", p.sock, "--backend", "cpu", "-vv",
			       "--max-queues", "1", "--state-dir", state_dir, NULL };
	proc_spawn(&p, argv, envs);
	devq *q = NULL;
	for (int i = 0; i < ARRIVAL_MS / 10 && !q; i++) {
		if (devq_connect(p.sock, "journal", &q) < 0) {
			devq_disconnect(q);
			q = NULL;
			usleep(10000);
		}
	}
	ck_assert_msg(q != NULL, "devqd did not serve:\n%s", proc_log(&p));
	/* One queue too many: an Error about queue 77. */
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	ck_assert_int_eq(devq_queue_open(q, 77), 0);
	/* And an op that fails (-vv logs each failed op): point 1 of queue 1. */
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 1, spin(q, 1, 3600ull * 1000 * 1000 * 1000), ARRIVAL_MS, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_E_OUT_OF_RANGE);
	struct devq_status *s;
	ck_assert_int_eq(devq_get_status(q, &s), 0);
	devq_status_free(s);
	uint64_t sid = devq_get_info(q)->session;
	devq_disconnect(q);

	char want_session[64], want_uid[64];
	snprintf(want_session, sizeof(want_session), "DEVQ_SESSION=%llu\n", (unsigned long long)sid);
	snprintf(want_uid, sizeof(want_uid), "DEVQ_CLIENT_UID=%u\n", (unsigned)getuid());
	/* The daemon has logged the disconnect by the time it frees the
	 * session; stop the reader once nothing more arrives. */
	usleep(300 * 1000);
	atomic_store(&jr.stop, true);
	ck_assert_int_eq(pthread_join(jt, NULL), 0);
	bool found = false, found_op = false, found_refused = false;
	char *got = jr.got;
	for (char *m = got, *next; *m; m = next + 1) {
		next = strchr(m, '|');
		if (!next)
			break;
		*next = '\0';
		found = found || (strstr(m, "DEVQ_QUEUE=77\n") && strstr(m, want_session) &&
				  strstr(m, want_uid) && strstr(m, "DEVQ_CODE=5\n") &&
				  strstr(m, "PRIORITY=6\n") &&
				  strstr(m, "SYSLOG_IDENTIFIER=devqd\n") && strstr(m, "MESSAGE=session "));
		found_op = found_op || (strstr(m, "DEVQ_QUEUE=1\n") && strstr(m, "DEVQ_POINT=1\n") &&
					strstr(m, "DEVQ_CODE=3\n") && strstr(m, want_session) &&
					strstr(m, "PRIORITY=7\n"));
		found_refused = found_refused ||
				(strstr(m, "MESSAGE=uid 4242 refused until") &&
				 strstr(m, "DEVQ_CLIENT_UID=4242\n") && strstr(m, "PRIORITY=5\n") &&
				 !strstr(m, "DEVQ_SESSION="));
		*next = '|';
	}
	kill(p.pid, SIGTERM);
	int code = proc_wait(&p);
	close(jfd);
	unlink(JOURNAL_SOCKET);
	if (made_dir)
		rmdir("/run/systemd/journal");
	ck_assert_msg(found, "no journal entry with the session's fields; got: %.3000s", got);
	ck_assert_msg(found_op, "no journal entry for the failed op; got: %.3000s", got);
	ck_assert_msg(found_refused, "no startup line for uid 4242 with its uid field; got: %.3000s",
		      got);
	ck_assert_int_eq(unlink(state_file), 0);
	ck_assert_int_eq(rmdir(state_dir), 0);
	ck_assert_int_eq(code, 0);
	/* What went to the journal is not also on stderr. */
	ck_assert_msg(!strstr(proc_log(&p), "open_queue"), "%s", proc_log(&p));
	proc_cleanup(&p);
}
END_TEST

/* Without systemd: readable lines on stderr, and -v decides how many. */
/* devqd started with stdin, stdout and stderr closed (as a careless
 * launcher may): the numbers 0-2 are /dev/null before anything else is
 * opened, so no socket or client memfd takes one of them and no log line
 * lands in a client's buffer. */
START_TEST(test_closed_std_fds_become_dev_null)
{
	struct proc p;
	proc_dir(&p);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(0);
		close(1);
		close(2);
		execl(harness_bin("devqd"), "devqd", "--socket", p.sock, "--backend", "cpu", "-v",
		      (char *)NULL);
		_exit(127);
	}
	p.pid = pid;
	devq *q = NULL;
	for (int i = 0; i < ARRIVAL_MS / 10 && !q; i++) {
		if (devq_connect(p.sock, "stdfds", &q) < 0) {
			devq_disconnect(q);
			q = NULL;
			usleep(10000);
		}
	}
	ck_assert_ptr_nonnull(q);
	struct devq_buffer *b;
	ck_assert_int_eq(devq_buffer_create(q, 4096, DEVQ_BUFFER_SHARED, &b), 0);
	for (int fd = 0; fd <= 2; fd++) {
		char link[64], target[256];
		snprintf(link, sizeof(link), "/proc/%d/fd/%d", (int)pid, fd);
		ssize_t n = readlink(link, target, sizeof(target) - 1);
		ck_assert_msg(n > 0, "devqd has no fd %d", fd);
		target[n] = '\0';
		ck_assert_msg(!strcmp(target, "/dev/null"), "devqd's fd %d is %s", fd, target);
	}
	devq_buffer_release(q, b);
	devq_disconnect(q);
	kill(pid, SIGTERM);
	ck_assert_int_eq(proc_wait(&p), 0);
	proc_cleanup(&p);
}
END_TEST

START_TEST(test_stderr_levels)
{
	for (int v = 0; v < 2; v++) {
		struct proc p;
		proc_dir(&p);
		const char *argv[] = { harness_bin("devqd"), "--socket", p.sock, "--backend", "cpu",
				       "--max-queues", "1", v ? "-v" : NULL, NULL };
		proc_spawn(&p, argv, NULL);
		devq *q = NULL;
		for (int i = 0; i < ARRIVAL_MS / 10 && !q; i++) {
			if (devq_connect(p.sock, "levels", &q) < 0) {
				devq_disconnect(q);
				q = NULL;
				usleep(10000);
			}
		}
		ck_assert_ptr_nonnull(q);
		ck_assert_int_eq(devq_queue_open(q, 1), 0);
		ck_assert_int_eq(devq_queue_open(q, 77), 0);
		struct devq_status *s;
		ck_assert_int_eq(devq_get_status(q, &s), 0);
		devq_status_free(s);
		uint64_t sid = devq_get_info(q)->session;
		devq_disconnect(q);
		kill(p.pid, SIGTERM);
		ck_assert_int_eq(proc_wait(&p), 0);
		char want[96];
		snprintf(want, sizeof(want), "devqd: info: session %llu: open_queue: ",
			 (unsigned long long)sid);
		if (v)
			ck_assert_msg(strstr(proc_log(&p), want), "-v: no '%s' in:\n%s", want,
				      proc_log(&p));
		else
			ck_assert_msg(!strstr(proc_log(&p), "info:"), "info lines without -v:\n%s",
				      proc_log(&p));
		proc_cleanup(&p);
	}
}
END_TEST

/* SIGHUP: RELOADING=1, then READY=1; the limits read at use time follow
 * the file, a flag still beats the file, a key that needs a restart says
 * so, and a broken file changes nothing. */
START_TEST(test_reload_on_sighup)
{
	struct proc p;
	char conf[160];
	proc_dir(&p);
	notify_listen(&p);
	snprintf(conf, sizeof(conf), "%s/devqd.conf", p.dir);
	write_file(conf, "max-op-ms = 250\nmax-queues = 1\nstreams = 2\n");
	static char env_notify[160];
	snprintf(env_notify, sizeof(env_notify), "NOTIFY_SOCKET=%s", p.notify);
	const char *env[] = { env_notify, NULL };
	const char *argv[] = { harness_bin("devqd"), "--config", conf,	 "--socket",
			       p.sock,		     "--backend", "cpu", "--max-buffer-mb",
			       "1",		     "-v",	  NULL };
	proc_spawn(&p, argv, env);
	char msg[1024];
	notify_expect(&p, "READY=1", msg, sizeof(msg));
	devq *q = conn(p.sock, "before");
	ck_assert_uint_eq(devq_get_info(q)->max_op_ns, 250ull * 1000000);
	devq_disconnect(q);

	write_file(conf, "max-op-ms = 500\nmax-queues = 2\nstreams = 3\nmax-buffer-mb = 8\n");
	kill(p.pid, SIGHUP);
	notify_expect(&p, "RELOADING=1", msg, sizeof(msg));
	ck_assert_msg(strstr(msg, "MONOTONIC_USEC="), "%s", msg);
	notify_expect(&p, "READY=1", msg, sizeof(msg));
	q = conn(p.sock, "after");
	ck_assert_uint_eq(devq_get_info(q)->max_op_ns, 500ull * 1000000);
	ck_assert_uint_eq(devq_get_info(q)->streams, 2); /* needs a restart */
	/* max-queues 2 now applies... */
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	ck_assert_int_eq(devq_queue_open(q, 2), 0);
	struct devq_status *st;
	ck_assert_int_eq(devq_get_status(q, &st), 0);
	devq_status_free(st);
	struct devq_error e;
	ck_assert_int_eq(devq_next_error(q, &e), 0);
	/* ...but --max-buffer-mb 1 on the command line beats the file's 8. */
	struct devq_buffer *b = NULL;
	ck_assert_int_lt(devq_buffer_create(q, 2 << 20, DEVQ_BUFFER_SHARED, &b), 0);
	devq_disconnect(q);
	ck_assert_msg(strstr(proc_log(&p), "streams changed in") &&
			      strstr(proc_log(&p), "takes effect when devqd restarts"),
		      "%s", proc_log(&p));

	/* A mistake in the file: nothing changes, and the status says why. */
	write_file(conf, "max-op-ms = 900\nmax-queues = zero\n");
	kill(p.pid, SIGHUP);
	notify_expect(&p, "RELOADING=1", msg, sizeof(msg));
	notify_expect(&p, "READY=1", msg, sizeof(msg));
	ck_assert_msg(strstr(msg, "reload failed: ") && strstr(msg, "devqd.conf:2: max-queues"),
		      "%s", msg);
	q = conn(p.sock, "broken");
	ck_assert_uint_eq(devq_get_info(q)->max_op_ns, 500ull * 1000000);
	devq_disconnect(q);

	kill(p.pid, SIGTERM);
	notify_expect(&p, "STOPPING=1", msg, sizeof(msg));
	ck_assert_int_eq(proc_wait(&p), 0);
	unlink(conf);
	proc_cleanup(&p);
}
END_TEST

/* ---- socket activation ----------------------------------------------- */

START_TEST(test_socket_activation)
{
	const char *sa = harness_which("systemd-socket-activate");
	if (!sa) {
		fprintf(stderr, "SKIP test_socket_activation: systemd-socket-activate not "
				"found (apt-get install systemd)\n");
		return;
	}
	struct proc p;
	proc_dir(&p);
	char listen_arg[160];
	snprintf(listen_arg, sizeof(listen_arg), "--listen=%s", p.sock);
	char sa_path[512];
	snprintf(sa_path, sizeof(sa_path), "%s", sa);
	/* No --socket: the only socket devqd has is the inherited one. */
	const char *argv[] = { sa_path, listen_arg, harness_bin("devqd"), "--backend", "cpu", "-v",
			       NULL };
	proc_spawn(&p, argv, NULL);
	/* systemd-socket-activate binds, then execs devqd in place. */
	devq *q = NULL;
	for (int i = 0; i < ARRIVAL_MS / 10; i++) {
		struct stat st;
		if (stat(p.sock, &st) == 0 && devq_connect(p.sock, "activated", &q) == 0)
			break;
		if (q)
			devq_disconnect(q);
		q = NULL;
		usleep(10000);
	}
	ck_assert_msg(q != NULL, "could not connect through the inherited socket; log:\n%s",
		      proc_log(&p));
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_buffer *b = mkbuf(q, 4096);
	memset(b->map, 7, 4096);
	struct devq_buffer *out = mkbuf(q, 8);
	struct devq_arg a[] = { a_u64("n", 4096), a_buf("data", b, 0), a_buf("out", out, 0) };
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "checksum"),
			      .args = a, .nargs = 3 };
	uint64_t pt;
	ck_assert_int_eq(devq_submit(q, &op, 1, &pt), 0);
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 1, pt, ARRIVAL_MS, &c), 0);
	ck_assert_msg(c.code == DEVQ_OK, "%s", c.message);
	ck_assert_uint_ne(*(uint64_t *)out->map, 0);
	devq_disconnect(q);
	ck_assert_msg(strstr(proc_log(&p), "(from systemd); backend"),
		      "devqd did not take the inherited socket:\n%s", proc_log(&p));
	kill(p.pid, SIGTERM);
	ck_assert_int_eq(proc_wait(&p), 0);
	/* The socket belongs to the manager: it stays for the next start. */
	struct stat st;
	ck_assert_int_eq(stat(p.sock, &st), 0);
	proc_cleanup(&p);
}
END_TEST

/* Without systemd devqd binds --socket itself: a stale socket file (no
 * one listening) is replaced, a live daemon's socket and a file that is not
 * a socket are left alone and devqd refuses to start. */
START_TEST(test_own_socket_stale_live_and_foreign)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	char out[4096];
	int rc = sh(out, sizeof(out), "%s --socket %s --backend cpu", harness_bin("devqd"), d.sock);
	ck_assert_msg(rc == 1 && strstr(out, "another daemon is serving this socket"), "exit %d: %s",
		      rc, out);
	devq *q = conn(d.sock, "still-served");
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);

	struct proc p;
	proc_dir(&p);
	/* A stale socket: bound, then its owner gone. */
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", p.sock);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	const char *argv[] = { harness_bin("devqd"), "--socket", p.sock, "--backend", "cpu", NULL };
	proc_spawn(&p, argv, NULL);
	q = NULL;
	for (int i = 0; i < ARRIVAL_MS / 10 && !q; i++) {
		if (devq_connect(p.sock, "stale", &q) < 0) {
			devq_disconnect(q);
			q = NULL;
			usleep(10000);
		}
	}
	ck_assert_msg(q != NULL, "devqd did not replace a stale socket:\n%s", proc_log(&p));
	devq_disconnect(q);
	kill(p.pid, SIGTERM);
	ck_assert_int_eq(proc_wait(&p), 0);

	/* A regular file where the socket should be. */
	int ffd = open(p.sock, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(ffd, 0);
	close(ffd);
	rc = sh(out, sizeof(out), "%s --socket %s --backend cpu", harness_bin("devqd"), p.sock);
	ck_assert_msg(rc == 1 && strstr(out, "exists and is not a socket"), "exit %d: %s", rc, out);
	struct stat st;
	ck_assert_int_eq(stat(p.sock, &st), 0);
	ck_assert(S_ISREG(st.st_mode));
	proc_cleanup(&p);
}
END_TEST

/* ---- config ---------------------------------------------------------- */

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_config_file_and_override)
{
	char dir[] = "/tmp/devq-conf-XXXXXX", path[128];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/devqd.conf", dir);
	write_file(path, "# limits for this host\n"
			 "max-op-ms = 250\n"
			 "\n"
			 "  streams=2  \n"
			 "; another comment style\n"
			 "max-queues = 1\n");
	struct daemon_proc d;
	const char *extra[] = { "--config", path, NULL };
	harness_start(&d, extra);
	devq *q = conn(d.sock, "config");
	const struct devq_info *info = devq_get_info(q);
	ck_assert_uint_eq(info->max_op_ns, 250ull * 1000000);
	ck_assert_uint_eq(info->streams, 2);
	/* max-queues = 1: the second queue is refused. */
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	ck_assert_int_eq(devq_queue_open(q, 2), 0);
	/* The refusal comes asynchronously; a status round trip brings it. */
	struct devq_status *st;
	ck_assert_int_eq(devq_get_status(q, &st), 0);
	devq_status_free(st);
	struct devq_error e;
	ck_assert_int_eq(devq_next_error(q, &e), 1);
	ck_assert_int_eq(e.code, DEVQ_E_RESOURCE_EXHAUSTED);
	ck_assert_int_eq(e.queue, 2);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);

	/* A flag overrides the file. */
	const char *extra2[] = { "--config", path, "--max-op-ms", "700", NULL };
	harness_start(&d, extra2);
	q = conn(d.sock, "config");
	ck_assert_uint_eq(devq_get_info(q)->max_op_ns, 700ull * 1000000);
	ck_assert_uint_eq(devq_get_info(q)->streams, 2);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
	unlink(path);
	rmdir(dir);
}
END_TEST

/* Runs devqd --config on text; returns its exit status, stderr in err. */
static int devqd_with_config(const char *text, char *err, size_t errlen, char *path,
			     size_t pathlen)
{
	char dir[] = "/tmp/devq-conf-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, pathlen, "%s/bad.conf", dir);
	write_file(path, text);
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s --config %s --socket %s/s.sock --backend cpu 2>&1",
		 harness_bin("devqd"), path, dir);
	FILE *f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	size_t n = fread(err, 1, errlen - 1, f);
	err[n] = '\0';
	int st = pclose(f);
	unlink(path);
	rmdir(dir);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

START_TEST(test_config_errors_name_file_and_line)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
		{ "streams = 2\nbogus = 1\n", ":2: unknown key 'bogus'" },
		{ "streams = 0\n", ":1: streams: '0' is not a number in 1..256" },
		{ "\n\nmax-op-ms = 12x\n", ":3: max-op-ms: '12x' is not a number" },
		{ "backend = gpu\n", ":1: backend: 'gpu' is not one of auto|cpu|cuda" },
		{ "streams\n", ":1: expected 'key = value'" },
		{ "streams = 1\nstreams = 2\n", ":2: streams given twice (first at line 1)" },
		{ "socket =\n", ":1: socket: empty value" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[1024], path[128];
		int code = devqd_with_config(cases[i].text, err, sizeof(err), path, sizeof(path));
		ck_assert_msg(code == 2, "case %zu: exit %d (%s)", i, code, err);
		char want[256];
		snprintf(want, sizeof(want), "%s%s", path, cases[i].want);
		ck_assert_msg(strstr(err, want), "case %zu: wanted '%s' in '%s'", i, want, err);
	}
	/* -c in a cluster of short options, and -cFILE, name the file too. */
	static const char *const forms[] = { "-vc %s", "-c%s", "-s /tmp/x -c %s", "--config=%s" };
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		char d2[] = "/tmp/devq-conf-XXXXXX", p2[128], arg[200], out2[1024];
		ck_assert_ptr_nonnull(mkdtemp(d2));
		snprintf(p2, sizeof(p2), "%s/f.conf", d2);
		write_file(p2, "bogus = 1\n");
		snprintf(arg, sizeof(arg), forms[i], p2);
		int code = sh(out2, sizeof(out2), "%s %s", harness_bin("devqd"), arg);
		ck_assert_msg(code == 2 && strstr(out2, ":1: unknown key 'bogus'"), "%s: exit %d: %s",
			      forms[i], code, out2);
		unlink(p2);
		rmdir(d2);
	}
	/* --check-config: the same verdict without starting (exit 2 and the
	 * error, or 0), and an unknown allow-groups entry is caught too. */
	static const struct {
		const char *text, *want;
		int code;
	} checks[] = {
		{ "bogus = 1\n", ":1: unknown key 'bogus'", 2 },
		{ "allow-groups = no-such-group-devq\n", "no group named 'no-such-group-devq'", 2 },
		{ "max-queues = 8\nallow-users = root\n", "configuration OK", 0 },
	};
	for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
		char d3[] = "/tmp/devq-conf-XXXXXX", p3[128], out3[1024];
		ck_assert_ptr_nonnull(mkdtemp(d3));
		snprintf(p3, sizeof(p3), "%s/f.conf", d3);
		write_file(p3, checks[i].text);
		int code = sh(out3, sizeof(out3), "%s --check-config -c %s --socket %s/none.sock",
			      harness_bin("devqd"), p3, d3);
		ck_assert_msg(code == checks[i].code && strstr(out3, checks[i].want),
			      "--check-config '%s': exit %d: %s", checks[i].text, code, out3);
		unlink(p3);
		rmdir(d3);
	}
	/* An explicit file that is missing is an error too. */
	char cmd[256], err[512];
	snprintf(cmd, sizeof(cmd), "%s --config /nonexistent/devqd.conf 2>&1",
		 harness_bin("devqd"));
	FILE *f = popen(cmd, "r");
	size_t n = fread(err, 1, sizeof(err) - 1, f);
	err[n] = '\0';
	int st = pclose(f);
	ck_assert_int_eq(WEXITSTATUS(st), 2);
	ck_assert_msg(strstr(err, "/nonexistent/devqd.conf: No such file"), "%s", err);
}
END_TEST

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	static char buf[4][65536];
	static int k;
	char *b = buf[k++ % 4];
	size_t n = fread(b, 1, sizeof(buf[0]) - 1, f);
	b[n] = '\0';
	fclose(f);
	return b;
}

/* Every key of devqd's table is documented in devqd.conf(5) and listed in
 * the installed example (as "#key = value" or in words), no example line
 * is a "#key =" without a value (uncommented, devqd would stop on it), and
 * the example, uncommented, is accepted. */
START_TEST(test_config_keys_documented)
{
	const char *man = slurp("man/devqd.conf.5"), *example = slurp("packaging/devqd.conf");
	size_t nkeys = 0;
	for (const char *k; (k = devq_config_key_name(nkeys)); nkeys++) {
		char roff[96], line[96];
		size_t j = 0;
		for (const char *c = k; *c && j < sizeof(roff) - 3; c++) {
			if (*c == '-')
				roff[j++] = '\\';
			roff[j++] = *c;
		}
		roff[j] = '\0';
		char want[128];
		snprintf(want, sizeof(want), ".BI %s \"", roff);
		char want2[128];
		snprintf(want2, sizeof(want2), ", \" %s \" = ", roff);
		ck_assert_msg(strstr(man, want) || strstr(man, want2) ||
				      (snprintf(want, sizeof(want), ".BR %s \" = \"", roff), strstr(man, want)),
			      "key %s is not documented in man/devqd.conf.5", k);
		snprintf(line, sizeof(line), "\n#%s = ", k);
		bool named = false; /* in words: k, not part of a longer name */
		for (const char *w = example; !named && (w = strstr(w, k)); w++)
			named = w > example && !isalnum((unsigned char)w[-1]) && w[-1] != '-' &&
				!isalnum((unsigned char)w[strlen(k)]) && w[strlen(k)] != '-';
		ck_assert_msg(strstr(example, line) || named,
			      "key %s is missing from packaging/devqd.conf", k);
		for (const char *l = example; (l = strstr(l, "\n#")); l++) {
			size_t n = strlen(k);
			const char *v = l + 2 + n;
			if (strncmp(l + 2, k, n) || strspn(v, " ") == 0 || v[strspn(v, " ")] != '=')
				continue;
			v += strspn(v, " ") + 1;
			v += strspn(v, " \t");
			ck_assert_msg(*v != '\n' && *v,
				      "packaging/devqd.conf: '#%s =' has no value: say the default "
				      "in words (uncommented, devqd stops on an empty value)",
				      k);
		}
	}
	ck_assert_uint_ge(nkeys, 9);

	char dir[] = "/tmp/devq-conf-XXXXXX", path[128];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/all.conf", dir);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	int set = 0;
	for (const char *l = example; *l;) {
		const char *e = strchr(l, '\n');
		size_t n = e ? (size_t)(e - l) : strlen(l);
		char key[64], value[256];
		char one[512];
		snprintf(one, sizeof(one), "%.*s", (int)n, l);
		/* An explicit allow-groups must name a group that exists; the
		 * default only warns when devq is missing (no package here). */
		if (sscanf(one, "#%63[a-z-] = %255s", key, value) == 2 &&
		    (strcmp(key, "allow-groups") || getgrnam(value))) {
			fprintf(f, "%s = %s\n", key, value);
			set++;
		}
		l += n + (e ? 1 : 0);
	}
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_ge(set, 18);
	struct daemon_proc d;
	const char *extra[] = { "--config", path, NULL };
	harness_start(&d, extra);
	devq *q = conn(d.sock, "defaults");
	/* The example's values are the defaults. */
	ck_assert_uint_eq(devq_get_info(q)->max_op_ns, 10000ull * 1000000);
	ck_assert_uint_eq(devq_get_info(q)->streams, 4);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
	unlink(path);
	rmdir(dir);
}
END_TEST

/* The effective settings devqd prints for args (shell words), after a
 * '\n' so that every line can be looked for as "\nkey = value\n". */
static int print_config(char *out, size_t n, const char *args)
{
	out[0] = '\n';
	return sh(out + 1, n - 1, "%s --print-config %s", harness_bin("devqd"), args);
}

/* A value in devqd.conf's syntax for every key: the test must grow with
 * the table (a key without a row here fails). */
static const char *sample_value(const char *key)
{
	static const struct {
		const char *key, *value;
	} v[] = {
		{ "socket", "/tmp/devq-flags.sock" },
		{ "backend", "cpu" },
		{ "device", "3" },
		{ "streams", "7" },
		{ "priority-streams", "2" },
		{ "max-op-ms", "1234" },
		{ "max-buffer-mb", "77" },
		{ "max-queues", "9" },
		{ "verbose", "2" },
		{ "stall-timeout-ms", "5000" },
		{ "slice-us", "500" },
		{ "trace-records", "100" },
		{ "admin-group", "root" },
		{ "allow-users", "root,0" },
		{ "allow-groups", "root" },
		{ "priority-users", "root" },
		{ "priority-groups", "root" },
		{ "fair-k", "5" },
		{ "fair-shares", "root:3,0:2" },
		{ "fair-window-us", "20" },
		{ "quota-session-ops", "11" },
		{ "quota-user-ops", "12" },
		{ "quota-session-buffers", "13" },
		{ "quota-user-buffers", "14" },
		{ "quota-session-pinned-mb", "15" },
		{ "quota-user-pinned-mb", "16" },
		{ "quota-session-device-mb", "17" },
		{ "quota-user-device-mb", "18" },
		{ "quota-user-queues", "19" },
		{ "quota-user-sessions", "20" },
		{ "quota-session-fds", "600" },
		{ "quota-outbound-kb", "21" },
		{ "lost-refuse-after", "4" },
		{ "lost-refuse-s", "0" },
		{ "state-dir", "/tmp/devq-flags-state" },
		{ "control-groups", "root" },
		{ "observer-groups", "root" },
		{ "tenants-dir", "/tmp/devq-flags.tenants" },
		{ "grant-exclusive", "no" },
		{ "executables", "/tmp/devq-flags-a:/tmp/devq-flags-b" },
		{ "rate", "gemm_f32=2000/s,copy=7/s" },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		if (!strcmp(v[i].key, key))
			return v[i].value;
	return NULL;
}

/* Every devqd.conf key is also the flag --KEY VALUE, VALUE written as in
 * the file (--verbose 2, --executables a:b): every key set by flags gives
 * the settings the same lines give from a file, and neither is the
 * default. */
START_TEST(test_config_keys_are_flags)
{
	char dir[] = "/tmp/devq-flags-XXXXXX", path[128];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/all.conf", dir);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	static char flags[4000];
	size_t fl = 0;
	const char *k;
	for (size_t i = 0; (k = devq_config_key_name(i)); i++) {
		const char *v = sample_value(k);
		ck_assert_msg(v != NULL, "key %s: give it a sample value in this test", k);
		fprintf(f, "%s = %s\n", k, v);
		fl += (size_t)snprintf(flags + fl, sizeof(flags) - fl, " --%s '%s'", k, v);
		ck_assert_uint_lt(fl, sizeof(flags));
	}
	ck_assert_int_eq(fclose(f), 0);

	static char from_file[8192], from_flags[8192], defaults[8192], args[4200];
	snprintf(args, sizeof(args), "-c %s", path);
	ck_assert_int_eq(print_config(from_file, sizeof(from_file), args), 0);
	snprintf(args, sizeof(args), "-c /dev/null%s", flags);
	int rc = print_config(from_flags, sizeof(from_flags), args);
	ck_assert_msg(rc == 0, "devqd%s: exit %d: %s", flags, rc, from_flags);
	ck_assert_str_eq(from_flags, from_file);
	ck_assert_int_eq(print_config(defaults, sizeof(defaults), "-c /dev/null"), 0);
	for (size_t i = 0; (k = devq_config_key_name(i)); i++) {
		char line[256];
		snprintf(line, sizeof(line), "\n%s = %s\n", k, sample_value(k));
		ck_assert_msg(strstr(from_flags, line), "--%s %s: not in effect:\n%s", k,
			      sample_value(k), from_flags);
		ck_assert_msg(!strstr(defaults, line), "%s: the sample is the default", k);
	}
	/* The flag --verbose N and -v: N replaces the file's, -v adds one. */
	snprintf(args, sizeof(args), "-c %s -v --verbose 1", path);
	ck_assert_int_eq(print_config(from_flags, sizeof(from_flags), args), 0);
	ck_assert_ptr_nonnull(strstr(from_flags, "\nverbose = 1\n"));
	/* --executables adds up, as the file's list reads. */
	ck_assert_int_eq(print_config(from_flags, sizeof(from_flags),
				      "-c /dev/null --executables /a:/b --executables /c"),
			 0);
	ck_assert_ptr_nonnull(strstr(from_flags, "\nexecutables = /a:/b:/c\n"));
	ck_assert_int_eq(print_config(from_flags, sizeof(from_flags),
				      "-c /dev/null --executables ''"),
			 2);
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* The rate key's family: rate.NAME lines, each executable once, at most
 * DEVQ_CONFIG_RATES_MAX (64), --rate NAME=UNITS/s adding or replacing, and
 * --print-config giving them as one canonical rate line. */
START_TEST(test_config_rates)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
		{ "rate.gemm_f32 = 0/s\n", ":1: rate.gemm_f32: '0/s' is not UNITS/s" },
		{ "rate.gemm_f32 = 5/m\n", ":1: rate.gemm_f32: '5/m' is not UNITS/s" },
		{ "rate.gemm_f32 = 18446744073709551616\n", ":1: rate.gemm_f32: '18446744073709551616'" },
		{ "rate.Gemm = 5\n", ":1: rate.Gemm: 'Gemm' is not an executable's name" },
		{ "rate.a = 1/s\nrate.a = 2/s\n", ":2: rate.a given twice (first at line 1)" },
		{ "rate.a = 1\nrate = b=2/s, a=3/s\n", ":2: rate.a given twice (first at line 1)" },
		{ "rate = a=1/s,b\n", ":1: rate: 'b' is not NAME=UNITS/s" },
		{ "rate = a=1/s,\n", ":1: rate: '' is not NAME=UNITS/s" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char err[1024], path[128];
		int code = devqd_with_config(cases[i].text, err, sizeof(err), path, sizeof(path));
		ck_assert_msg(code == 2, "case %zu: exit %d (%s)", i, code, err);
		char want[256];
		snprintf(want, sizeof(want), "%s%s", path, cases[i].want);
		ck_assert_msg(strstr(err, want), "case %zu: wanted '%s' in '%s'", i, want, err);
	}
	char dir[] = "/tmp/devq-conf-XXXXXX", path[128], args[256];
	static char out[16384];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/rates.conf", dir);
	write_file(path, "rate.gemm_f32 = 18446744073709551615/s\nrate.copy = 7\n");
	snprintf(args, sizeof(args), "-c %s", path);
	ck_assert_int_eq(print_config(out, sizeof(out), args), 0);
	ck_assert_msg(strstr(out, "\nrate = gemm_f32=18446744073709551615/s,copy=7/s\n"), "%s", out);
	snprintf(args, sizeof(args), "-c %s --rate copy=9/s --rate ' spin = 1 '", path);
	ck_assert_int_eq(print_config(out, sizeof(out), args), 0);
	ck_assert_msg(strstr(out, "\nrate = gemm_f32=18446744073709551615/s,copy=9/s,spin=1/s\n"),
		      "%s", out);
	ck_assert_int_eq(print_config(out, sizeof(out), "-c /dev/null"), 0);
	ck_assert_msg(strstr(out, "\n# rate is not set\n"), "%s", out);
	/* 64 executables' rates, and a 65th. */
	static char text[65 * 32];
	size_t o = 0;
	for (int i = 0; i < 64; i++)
		o += (size_t)snprintf(text + o, sizeof(text) - o, "rate.e%d = %d\n", i, i + 1);
	write_file(path, text);
	snprintf(args, sizeof(args), "-c %s", path);
	ck_assert_int_eq(print_config(out, sizeof(out), args), 0);
	ck_assert_msg(strstr(out, ",e63=64/s\n"), "%s", out);
	snprintf(args, sizeof(args), "-c %s --rate e63=65", path); /* replaces: still 64 */
	ck_assert_int_eq(print_config(out, sizeof(out), args), 0);
	ck_assert_msg(strstr(out, ",e63=65/s\n"), "%s", out);
	snprintf(args, sizeof(args), "-c %s --rate e64=65", path);
	ck_assert_int_eq(print_config(out, sizeof(out), args), 2);
	ck_assert_msg(strstr(out, "--rate: more than 64 executables' rates"), "%s", out);
	snprintf(text + o, sizeof(text) - o, "rate.e64 = 65\n");
	write_file(path, text);
	snprintf(args, sizeof(args), "-c %s", path);
	ck_assert_int_eq(print_config(out, sizeof(out), args), 2);
	ck_assert_msg(strstr(out, ":65: rate.e64: more than 64 executables' rates"), "%s", out);
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* The "Default:" of key's entry in devqd.conf(5), its first word, troff
 * removed; "" when the entry has none or documents several keys. */
static void man_default(const char *man, const char *key, char *out, size_t n)
{
	char roff[96], want[128];
	size_t j = 0;
	for (const char *c = key; *c && j < sizeof(roff) - 3; c++) {
		if (*c == '-')
			roff[j++] = '\\';
		roff[j++] = *c;
	}
	roff[j] = '\0';
	out[0] = '\0';
	snprintf(want, sizeof(want), "\n.BI %s \"", roff);
	const char *e = strstr(man, want);
	if (!e) {
		snprintf(want, sizeof(want), "\n.BR %s \" = \"", roff);
		e = strstr(man, want);
	}
	if (!e || strchr(e + 1, '\n') == NULL)
		return;
	const char *eol = strchr(e + 1, '\n');
	if (memmem(e, (size_t)(eol - e), "\\fR, ", 5))
		return; /* several keys, several defaults */
	const char *end = eol;
	while ((end = strstr(end, "\n.")) && strncmp(end, "\n.TP", 4) && strncmp(end, "\n.SS", 4) &&
	       strncmp(end, "\n.SH", 4))
		end++;
	const char *d = memmem(e, (size_t)((end ? end : e + strlen(e)) - e), "Default:", 8);
	if (!d)
		return;
	d += 8;
	/* Skip white space and one font macro (".BR auto ." on its own line). */
	d += strspn(d, " \n");
	if (*d == '.') {
		d += strcspn(d, " ");
		d += strspn(d, " ");
	}
	j = 0;
	for (; *d && !strchr(" \n", *d) && j < n - 1; d++)
		if (*d != '\\')
			out[j++] = *d;
	while (j && strchr(".,;", out[j - 1]))
		j--;
	out[j] = '\0';
}

/* The defaults devqd.conf(5) and the installed example give are those
 * devqd runs with (its --print-config without a file): every
 * "#key = value" of the example, every single-key "Default: VALUE" of the
 * manual whose value is a number or a word the key takes. */
START_TEST(test_config_documented_defaults_are_real)
{
	static char defaults[8192];
	ck_assert_int_eq(print_config(defaults, sizeof(defaults), "-c /dev/null"), 0);
	const char *man = slurp("man/devqd.conf.5"), *example = slurp("packaging/devqd.conf");
	int checked = 0;
	for (const char *l = example; *l;) {
		const char *e = strchr(l, '\n');
		size_t n = e ? (size_t)(e - l) : strlen(l);
		char key[64], value[256], want[400];
		char one[512];
		snprintf(one, sizeof(one), "%.*s", (int)n, l);
		if (sscanf(one, "#%63[a-z-] = %255s", key, value) == 2) {
			snprintf(want, sizeof(want), "\n%s = %s\n", key, value);
			ck_assert_msg(strstr(defaults, want),
				      "packaging/devqd.conf: '#%s = %s' is not the default:\n%s", key,
				      value, defaults);
			checked++;
		}
		l += n + (e ? 1 : 0);
	}
	ck_assert_int_ge(checked, 20);

	int man_checked = 0;
	const char *k;
	for (size_t i = 0; (k = devq_config_key_name(i)); i++) {
		char doc[128], want[256];
		man_default(man, k, doc, sizeof(doc));
		/* Words that are no value: "none", "the", "half", "every"... */
		if (!doc[0] || !(isdigit((unsigned char)doc[0]) || doc[0] == '/' ||
				 !strcmp(doc, "auto") || !strcmp(doc, "yes") || !strcmp(doc, "no")))
			continue;
		snprintf(want, sizeof(want), "\n%s = %s\n", k, doc);
		char times[160];
		snprintf(times, sizeof(times), "Default: %s times", doc);
		if (strstr(man, times) && !strstr(defaults, want))
			continue; /* "Default: 4 times max-queues": a formula */
		ck_assert_msg(strstr(defaults, want) != NULL,
			      "man/devqd.conf.5: %s's default '%s' is not the real one:\n%s", k, doc,
			      defaults);
		man_checked++;
	}
	ck_assert_int_ge(man_checked, 15);
}
END_TEST

/* Every key SIGHUP applies is in the reload lists of devqd.conf(5) and of
 * the installed example's header. */
START_TEST(test_reload_lists_complete)
{
	const char *man = slurp("man/devqd.conf.5"), *example = slurp("packaging/devqd.conf");
	const char *from = strstr(man, "\n.SH RELOAD"), *to = strstr(man, "\n.SH KEYS");
	ck_assert_ptr_nonnull(from);
	ck_assert_ptr_nonnull(to);
	const char *head_end = strstr(example, "\n\n");
	ck_assert_ptr_nonnull(head_end);
	int n = 0;
	const char *k;
	for (size_t i = 0; (k = devq_config_key_name(i)); i++) {
		if (!devq_config_key_reloadable(k))
			continue;
		char bare[96];
		size_t j = 0;
		for (const char *c = k; *c && j < sizeof(bare) - 3; c++) {
			if (*c == '-')
				bare[j++] = '\\';
			bare[j++] = *c;
		}
		bare[j] = '\0';
		ck_assert_msg(memmem(from, (size_t)(to - from), bare, strlen(bare)),
			      "reload: %s is not in devqd.conf(5)'s RELOAD", k);
		ck_assert_msg(memmem(example, (size_t)(head_end - example), k, strlen(k)),
			      "reload: %s is not in packaging/devqd.conf's list", k);
		n++;
	}
	ck_assert_int_ge(n, 8);
}
END_TEST

/* A bad option is named in one line with where to look, not buried under
 * the whole help. */
START_TEST(test_bad_option_one_line)
{
	static const char *const bad[] = { "--bogus", "-Z", "stray", "--streams" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char out[4096];
		int rc = sh(out, sizeof(out), "%s %s", harness_bin("devqd"), bad[i]);
		ck_assert_int_eq(rc, 2);
		int lines = 0;
		for (const char *p = out; (p = strchr(p, '\n')); p++)
			lines++;
		ck_assert_msg(lines == 2, "devqd %s: %d lines:\n%.300s", bad[i], lines, out);
		ck_assert_msg(strstr(out, "\nTry 'devqd --help' for more information.\n"),
			      "devqd %s:\n%s", bad[i], out);
	}
}
END_TEST

/* Every long option devqd --help lists is in devqd(8), and every devctl
 * command `devctl help` lists is in devctl(1). */
START_TEST(test_man_pages_cover_the_help)
{
	static char help[16384];
	int rc = sh(help, sizeof(help), "%s --help", harness_bin("devqd"));
	ck_assert_int_eq(rc, 0);
	const char *man = slurp("man/devqd.8");
	int n = 0;
	for (const char *p = help; (p = strstr(p, "--")); p += 2) {
		char opt[64], roff[140];
		if (sscanf(p + 2, "%63[a-z0-9-]", opt) != 1)
			continue;
		size_t j = 0;
		roff[j++] = '\\';
		roff[j++] = '-';
		roff[j++] = '\\';
		roff[j++] = '-';
		for (const char *c = opt; *c && j < sizeof(roff) - 3; c++) {
			if (*c == '-')
				roff[j++] = '\\';
			roff[j++] = *c;
		}
		roff[j] = '\0';
		/* --quota-* options are listed by name in one entry. */
		ck_assert_msg(strstr(man, roff), "devqd --%s is not in man/devqd.8", opt);
		n++;
	}
	ck_assert_int_ge(n, 15);

	rc = sh(help, sizeof(help), "%s help", harness_bin("devctl"));
	ck_assert_int_eq(rc, 0);
	man = slurp("man/devctl.1");
	n = 0;
	for (const char *l = help; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		char cmd[32], want[64];
		/* Commands are the lines indented by exactly two spaces. */
		if (l[0] != ' ' || l[1] != ' ' || l[2] == ' ' || sscanf(l + 2, "%31[a-z]", cmd) != 1)
			continue;
		snprintf(want, sizeof(want), ".B %s", cmd);
		ck_assert_msg(strstr(man, want), "devctl %s is not in man/devctl.1", cmd);
		n++;
	}
	ck_assert_int_ge(n, 6);
}
END_TEST

/* ---- install tree ----------------------------------------------------- */

static int sh(char *out, size_t outlen, const char *fmt, ...)
{
	char body[4000], cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(body, sizeof(body), fmt, ap);
	va_end(ap);
	/* Every part of a compound command reports into out. */
	snprintf(cmd, sizeof(cmd), "{ %s; } 2>&1", body);
	FILE *f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	size_t n = 0, r;
	char sink[1024];
	while ((r = fread(n < outlen - 1 ? out + n : sink, 1,
			  n < outlen - 1 ? outlen - 1 - n : sizeof(sink), f)) > 0)
		if (n < outlen - 1)
			n += r;
	out[n] = '\0';
	int st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void assert_file(const char *root, const char *rel, mode_t type)
{
	char path[512];
	struct stat st;
	snprintf(path, sizeof(path), "%s%s", root, rel);
	ck_assert_msg(lstat(path, &st) == 0, "%s not installed", rel);
	ck_assert_msg((st.st_mode & S_IFMT) == type, "%s: wrong file type", rel);
}

START_TEST(test_install_tree_pkgconfig_client)
{
	char root[] = "/tmp/devq-destdir-XXXXXX", out[8192];
	ck_assert_ptr_nonnull(mkdtemp(root));
	const char *build = getenv("DEVQ_BUILD") ? getenv("DEVQ_BUILD") : "build";
	int rc = sh(out, sizeof(out), "make -s --no-print-directory BUILD=%s install DESTDIR=%s PREFIX=/usr",
		    build, root);
	ck_assert_msg(rc == 0, "make install failed:\n%s", out);

	/* FHS places. */
	static const char *const files[] = {
		"/usr/sbin/devqd", "/usr/bin/devctl", "/usr/lib/libdevq.so." DEVQ_VERSION,
		"/usr/lib/libdevq.a", "/usr/include/devq.h", "/usr/lib/pkgconfig/devq.pc",
		"/usr/lib/systemd/system/devqd.service", "/usr/lib/systemd/system/devqd.socket",
		"/usr/lib/systemd/system/devqd@.service", "/usr/lib/systemd/system/devqd@.socket",
		"/usr/lib/sysusers.d/devq.conf", "/etc/devqd/devqd.conf",
		"/usr/share/man/man8/devqd.8", "/usr/share/man/man1/devctl.1",
		"/usr/share/man/man5/devqd.conf.5", "/usr/share/man/man3/libdevq.3",
		"/usr/share/bash-completion/completions/devctl",
	};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		assert_file(root, files[i], S_IFREG);
	assert_file(root, "/usr/lib/libdevq.so.0", S_IFLNK);
	assert_file(root, "/usr/lib/libdevq.so", S_IFLNK);
	char path[512], link[256];
	snprintf(path, sizeof(path), "%s/usr/lib/libdevq.so", root);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	ck_assert_int_gt(n, 0);
	link[n] = '\0';
	ck_assert_str_eq(link, "libdevq.so.0");
	rc = sh(out, sizeof(out), "readelf -d %s/usr/lib/libdevq.so." DEVQ_VERSION " | grep SONAME", root);
	ck_assert_msg(rc == 0 && strstr(out, "[libdevq.so.0]"), "SONAME: %s", out);

	/* A client built from that tree with pkg-config... */
	char flags[1024];
	rc = sh(flags, sizeof(flags),
		"PKG_CONFIG_SYSROOT_DIR=%s PKG_CONFIG_PATH=%s/usr/lib/pkgconfig "
		"pkg-config --cflags --libs devq",
		root, root);
	ck_assert_msg(rc == 0, "pkg-config: %s", flags);
	flags[strcspn(flags, "\n")] = '\0';
	ck_assert_msg(strstr(flags, root), "pkg-config points outside the tree: %s", flags);
	/* A sanitizer build installs an instrumented library: the program
	 * must carry the same runtime. */
	const char *san = getenv("DEVQ_SANITIZER");
	const char *sanflags = !san ? ""
			       : !strcmp(san, "1")    ? "-fsanitize=address,undefined"
			       : !strcmp(san, "tsan") ? "-fsanitize=thread"
						      : "";
	rc = sh(out, sizeof(out), "cc -std=c11 -Wall -Wextra -Werror %s tests/deploy/hello_devq.c %s -o %s/hello",
		sanflags, flags, root);
	ck_assert_msg(rc == 0, "building against the installed tree failed (%s):\n%s", flags, out);
	rc = sh(out, sizeof(out), "readelf -d %s/hello | grep NEEDED", root);
	ck_assert_msg(strstr(out, "[libdevq.so.0]"), "hello does not use the shared library: %s", out);

	/* ...runs against the installed daemon with the installed config. */
	struct proc p;
	proc_dir(&p);
	char conf[512], bin[512];
	snprintf(conf, sizeof(conf), "%s/etc/devqd/devqd.conf", root);
	snprintf(bin, sizeof(bin), "%s/usr/sbin/devqd", root);
	const char *argv[] = { bin, "--config", conf, "--socket", p.sock, "--backend", "cpu", NULL };
	proc_spawn(&p, argv, NULL);
	devq *q = NULL;
	for (int i = 0; i < ARRIVAL_MS / 10 && !q; i++) {
		if (devq_connect(p.sock, "install-test", &q) < 0) {
			devq_disconnect(q);
			q = NULL;
			usleep(10000);
		}
	}
	ck_assert_msg(q != NULL, "the installed devqd did not serve:\n%s", proc_log(&p));
	rc = sh(out, sizeof(out), "DEVQ_SOCKET=%s LD_LIBRARY_PATH=%s/usr/lib %s/hello", p.sock, root,
		root);
	ck_assert_msg(rc == 0, "hello: %s", out);
	/* Its answer matches the same checksum asked for here. */
	struct devq_buffer *data = mkbuf(q, 4096), *sum = mkbuf(q, 8);
	for (int i = 0; i < 4096; i++)
		((unsigned char *)data->map)[i] = (unsigned char)(i * 7);
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_arg a[] = { a_u64("n", 4096), a_buf("data", data, 0), a_buf("out", sum, 0) };
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "checksum"),
			      .args = a, .nargs = 3 };
	uint64_t pt;
	ck_assert_int_eq(devq_submit(q, &op, 1, &pt), 0);
	ck_assert_int_eq(devq_wait(q, 1, pt, ARRIVAL_MS, NULL), 0);
	char want[64];
	snprintf(want, sizeof(want), "ok %llu\n", (unsigned long long)*(uint64_t *)sum->map);
	ck_assert_str_eq(out, want);
	devq_disconnect(q);
	kill(p.pid, SIGTERM);
	ck_assert_int_eq(proc_wait(&p), 0);
	proc_cleanup(&p);

	/* The man pages format without warnings. */
	for (size_t i = 10; i < 14; i++) {
		rc = sh(out, sizeof(out), "LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l %s%s >/dev/null",
			root, files[i]);
		ck_assert_msg(rc == 0 && !out[0], "%s: %s", files[i], out);
	}

	/* systemd-analyze verify on the installed units.  The tree lacks
	 * what any host has: systemd's own units (sysinit.target...) and
	 * /bin/kill (ExecReload=; devqd depends on procps), so they are
	 * copied in.  verify only warns about some mistakes: any output
	 * fails. */
	if (!harness_which("systemd-analyze")) {
		fprintf(stderr, "SKIP systemd-analyze verify: not found (apt-get install systemd)\n");
	} else {
		rc = sh(out, sizeof(out),
			"mkdir -p %s/lib/systemd %s/bin && cp -a /lib/systemd/system %s/lib/systemd/ && "
			"cp -p /bin/kill /bin/sh %s/bin/ && "
			"cd / && MANPATH=%s/usr/share/man systemd-analyze verify --root=%s "
			"devqd.service devqd.socket devqd@0.service devqd@0.socket",
			root, root, root, root, root, root);
		ck_assert_msg(rc == 0 && !out[0], "systemd-analyze verify:\n%s", out);
	}
	rc = sh(out, sizeof(out), "rm -rf %s", root);
	ck_assert_int_eq(rc, 0);
}
END_TEST

/* ---- metrics ---------------------------------------------------------- */


static char *scrape_args(const char *sock, const char *args, char *buf, size_t len)
{
	int rc = sh(buf, len, "%s --socket %s metrics %s", harness_bin("devctl"), sock, args);
	ck_assert_msg(rc == 0, "devctl metrics: exit %d: %s", rc, buf);
	return buf;
}

/* The default scrape: no per-session or per-queue family (bounded series). */
static char *scrape(const char *sock, char *buf, size_t len)
{
	return scrape_args(sock, "", buf, len);
}

/* The value of one series, e.g. devq_op_errors_total{code="out_of_range"}. */
static double series(const char *text, const char *name)
{
	size_t n = strlen(name);
	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		if (!strncmp(l, name, n) && l[n] == ' ')
			return strtod(l + n + 1, NULL);
	}
	ck_abort_msg("no series %s in:\n%.3000s", name, text);
	return 0;
}

/* The value of the line that starts with prefix and holds part, which
 * ends its labels ("...} value"). */
static double line_value(const char *text, const char *prefix, const char *part)
{
	size_t n = strlen(prefix), m = strlen(part);
	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		const char *e = strchr(l, '\n');
		const char *p = strstr(l, part);
		if (!strncmp(l, prefix, n) && p && (!e || p < e) && p[m] == ' ')
			return strtod(p + m + 1, NULL);
	}
	ck_abort_msg("no line %s...%s in:\n%.3000s", prefix, part, text);
	return 0;
}

static void promtool_check(const char *tool, const char *text)
{
	char path[] = "/tmp/devq-metrics-XXXXXX", out[4096];
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	int rc = sh(out, sizeof(out), "%s check metrics < %s", tool, path);
	ck_assert_msg(rc == 0 && !out[0], "promtool check metrics: exit %d:\n%.2000s\non:\n%.2000s",
		      rc, out, text);
	unlink(path);
}

START_TEST(test_metrics_promtool_and_counters_move)
{
	const char *tool = harness_promtool();
	if (!tool)
		fprintf(stderr, "SKIP promtool check: promtool not found (make promtool, or "
				"DEVQ_PROMTOOL=PATH); counters are still checked\n");
	struct daemon_proc d;
	harness_start(&d, NULL);
	static char before[65536], after[65536];
	scrape(d.sock, before, sizeof(before));
	if (tool)
		promtool_check(tool, before);

	/* Quotes and backslashes must be escaped in label values (devqd itself
	 * turns control characters into '?'). */
	devq *q = conn(d.sock, "metrics \"test\" \\ x\n");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_buffer *pinned = mkbuf(q, 1 << 20);
	ck_assert_ptr_nonnull(pinned->map);
	uint64_t pt = 0;
	for (int i = 0; i < 3; i++)
		pt = spin(q, 1, 2000000);
	ck_assert_int_eq(devq_wait(q, 1, pt, ARRIVAL_MS, NULL), 0);
	/* One op over the admin maximum fails with out_of_range. */
	pt = spin(q, 1, 3600ull * 1000 * 1000 * 1000);
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 1, pt, ARRIVAL_MS, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_E_OUT_OF_RANGE);
	char name[256];
	ck_assert_int_eq(devq_queue_reset(q, 1), 0);
	/* And one still running when the next scrape is taken. */
	uint64_t long_pt = spin(q, 1, 5000ull * 1000 * 1000);
	static char bounded[65536];
	scrape(d.sock, bounded, sizeof(bounded));
	scrape_args(d.sock, "--sessions", after, sizeof(after));
	if (tool) {
		promtool_check(tool, after);
		promtool_check(tool, bounded);
	}
	/* The default leaves every per-connection family out; --sessions has
	 * them.  Both carry the tenant's latency, labelled to join the GPU's
	 * own series (gpu, UUID). */
	ck_assert_msg(!strstr(bounded, "devq_session_") && !strstr(bounded, "devq_queue_depth"),
		      "per-session families without --sessions:\n%.3000s", bounded);
	ck_assert_ptr_nonnull(strstr(after, "devq_session_ops_completed_total{"));
	snprintf(name, sizeof(name), "tenant=\"uid:%u\",phase=\"device\"}", (unsigned)getuid());
	ck_assert_double_eq(line_value(bounded, "devq_tenant_op_seconds_count{gpu=\"0\",UUID=\"", name),
			    4);
	ck_assert_double_eq(series(bounded, "devq_sessions"), 1);

	ck_assert_double_eq(series(after, "devq_ops_completed_total") -
				    series(before, "devq_ops_completed_total"),
			    4);
	ck_assert_double_eq(series(after, "devq_op_errors_total{code=\"out_of_range\"}") -
				    series(before, "devq_op_errors_total{code=\"out_of_range\"}"),
			    1);
	snprintf(name, sizeof(name), "devq_user_ops_completed_total{uid=\"%u\"}", (unsigned)getuid());
	ck_assert_double_eq(series(after, name), 4);
	/* Three spins of 2 ms each ran on the device: at least 6 ms of busy
	 * time (a lower bound by construction, not a speed check). */
	ck_assert_double_ge(series(after, "devq_device_busy_seconds_total") -
				    series(before, "devq_device_busy_seconds_total"),
			    0.006);
	ck_assert_double_eq(series(after, "devq_phase_seconds_count{phase=\"device\"}") -
				    series(before, "devq_phase_seconds_count{phase=\"device\"}"),
			    4);
	ck_assert_double_ge(series(after, "devq_phase_seconds_bucket{phase=\"device\",le=\"+Inf\"}"),
			    4);
	ck_assert_double_ge(series(after, "devq_pinned_bytes"), 1 << 20);
	ck_assert_double_eq(series(after, "devq_sessions"), 1);
	/* This session's series, with its awkward name escaped. */
	uint64_t sid = devq_get_info(q)->session;
	snprintf(name, sizeof(name),
		 "devq_session_ops_completed_total{session=\"%llu\",pid=\"%d\",uid=\"%u\","
		 "name=\"metrics \\\"test\\\" \\\\ x?\"}",
		 (unsigned long long)sid, (int)getpid(), (unsigned)getuid());
	ck_assert_double_eq(series(after, name), 4);
	snprintf(name, sizeof(name),
		 "devq_session_pinned_bytes{session=\"%llu\",pid=\"%d\",uid=\"%u\","
		 "name=\"metrics \\\"test\\\" \\\\ x?\"}",
		 (unsigned long long)sid, (int)getpid(), (unsigned)getuid());
	ck_assert_double_eq(series(after, name), 1 << 20);
	snprintf(name, sizeof(name), "devq_queue_depth{session=\"%llu\",queue=\"1\",stream=",
		 (unsigned long long)sid);
	const char *qd = strstr(after, name);
	ck_assert_msg(qd, "no queue depth for queue 1:\n%.3000s", after);
	devq_poll(q);
	if (devq_completed(q, 1) < long_pt)
		ck_assert_msg(strstr(qd, "} 1\n") == strchr(qd, '}'), "queue depth: %.80s", qd);
	else
		fprintf(stderr, "note: the 5 s op completed before the scrape; depth not checked\n");
	ck_assert_int_eq(devq_wait(q, 1, long_pt, ARRIVAL_MS, NULL), 0);

	/* devctl status --json carries the same numbers. */
	static char json[65536];
	int rc = sh(json, sizeof(json), "%s --socket %s status --json", harness_bin("devctl"), d.sock);
	ck_assert_int_eq(rc, 0);
	ck_assert_msg(strstr(json, "\"out_of_range\":1"), "%.3000s", json);
	ck_assert_msg(strstr(json, "\"phases\":[{\"phase\":\"submit\""), "%.3000s", json);
	ck_assert_msg(strstr(json, "\"queue_depths\":[{\"queue\":1,"), "%.3000s", json);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("deploy");
	TCase *tc = tcase_create("deploy");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_notify_ready_status_stopping);
	tcase_add_test(tc, test_watchdog_pings_stop_when_loop_wedged);
	tcase_add_test(tc, test_watchdog_pings_stop_when_completions_wedged);
	tcase_add_test(tc, test_watchdog_stall_floor);
	tcase_add_test(tc, test_metrics_device_stalled_without_watchdog);
	tcase_add_test(tc, test_no_watchdog_without_watchdog_usec);
	tcase_add_test(tc, test_watchdog_pings_through_long_gemm);
	tcase_add_test(tc, test_watchdog_stops_in_stuck_slice);
	tcase_add_test(tc, test_watchdog_bulk_starved_is_not_stuck);
	tcase_add_test(tc, test_bulk_at_slice_us_and_past);
	tcase_add_test(tc, test_reload_on_sighup);
	tcase_add_test(tc, test_journal_fields);
	tcase_add_test(tc, test_stderr_levels);
	tcase_add_test(tc, test_closed_std_fds_become_dev_null);
	tcase_add_test(tc, test_socket_activation);
	tcase_add_test(tc, test_own_socket_stale_live_and_foreign);
	tcase_add_test(tc, test_config_file_and_override);
	tcase_add_test(tc, test_config_errors_name_file_and_line);
	tcase_add_test(tc, test_config_keys_documented);
	tcase_add_test(tc, test_config_keys_are_flags);
	tcase_add_test(tc, test_config_rates);
	tcase_add_test(tc, test_config_documented_defaults_are_real);
	tcase_add_test(tc, test_reload_lists_complete);
	tcase_add_test(tc, test_bad_option_one_line);
	tcase_add_test(tc, test_man_pages_cover_the_help);
	tcase_add_test(tc, test_install_tree_pkgconfig_client);
	tcase_add_test(tc, test_metrics_promtool_and_counters_move);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
