/* SPDX-License-Identifier: Apache-2.0 */
#include "harness.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_DAEMONS 64
static pid_t *live_daemons; /* shared with the forked test children */

static void register_daemon(pid_t pid)
{
	if (!live_daemons)
		return;
	for (int i = 0; i < MAX_DAEMONS; i++) {
		if (!live_daemons[i]) {
			live_daemons[i] = pid;
			break;
		}
	}
}

static void forget_daemon(pid_t pid)
{
	if (!live_daemons)
		return;
	for (int i = 0; i < MAX_DAEMONS; i++)
		if (live_daemons[i] == pid)
			live_daemons[i] = 0;
}

static void kill_leftover_daemons(void)
{
	for (int i = 0; i < MAX_DAEMONS; i++) {
		if (!live_daemons[i])
			continue;
		/* Only if the pid still names a devqd (not a reused pid). */
		char path[64], comm[32] = "";
		snprintf(path, sizeof(path), "/proc/%d/comm", (int)live_daemons[i]);
		FILE *f = fopen(path, "r");
		if (f) {
			if (!fgets(comm, sizeof(comm), f))
				comm[0] = '\0';
			fclose(f);
		}
		if (!strncmp(comm, "devqd", 5))
			kill(live_daemons[i], SIGKILL);
		live_daemons[i] = 0;
	}
}

int harness_main(Suite *s)
{
	live_daemons = mmap(NULL, MAX_DAEMONS * sizeof(pid_t), PROT_READ | PROT_WRITE,
			    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (live_daemons == MAP_FAILED) {
		perror("mmap");
		return EXIT_FAILURE;
	}
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	kill_leftover_daemons();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

uint64_t harness_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *harness_bin(const char *name)
{
	static char buf[4][512];
	static int k;
	const char *b = getenv("DEVQ_BUILD");
	char *out = buf[k++ % 4];
	snprintf(out, sizeof(buf[0]), "%s/%s", b && *b ? b : "build", name);
	return out;
}

const char *harness_which(const char *prog)
{
	static char path[512];
	const char *env = getenv("PATH");
	char dirs[2048];
	snprintf(dirs, sizeof(dirs), "%s:/usr/bin:/bin:/usr/sbin", env ? env : "");
	for (char *save, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		snprintf(path, sizeof(path), "%s/%s", d, prog);
		if (access(path, X_OK) == 0)
			return path;
	}
	return NULL;
}

const char *harness_promtool(void)
{
	static char path[512];
	const char *e = getenv("DEVQ_PROMTOOL");
	if (e && access(e, X_OK) == 0)
		return e;
	/* `make promtool` puts it in the build directory (CI: build/). */
	snprintf(path, sizeof(path), "%s", harness_bin("promtool/usr/bin/promtool"));
	if (access(path, X_OK) == 0)
		return path;
	snprintf(path, sizeof(path), "build/promtool/usr/bin/promtool");
	if (access(path, X_OK) == 0)
		return path;
	return harness_which("promtool");
}

bool harness_slow(void)
{
	const char *s = getenv("DEVQ_SANITIZER");
	return (s && *s && strcmp(s, "0")) || getenv("DEVQ_VALGRIND");
}

const char *harness_backend(void)
{
	const char *b = getenv("DEVQ_TEST_BACKEND");
	return b && *b ? b : "cpu";
}

bool harness_cudasim(void)
{
	const char *d = getenv("DEVQ_CUDASIM_DIR");
	return d && *d && !strcmp(harness_backend(), "cuda");
}

void harness_cudasim_env(void)
{
	/* In a forked child, before exec: the daemon finds the simulator as
	 * its libcuda.so.1, the way it would find a driver. */
	const char *d = getenv("DEVQ_CUDASIM_DIR");
	if (d && *d)
		setenv("LD_LIBRARY_PATH", d, 1);
}

bool harness_cudasim_violations(const char *log, char *out, size_t outlen)
{
	FILE *f = fopen(log, "r");
	if (!f)
		return false;
	char line[512];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		if (!strncmp(line, "cudasim: VIOLATION: ", 20)) {
			snprintf(out, outlen, "%s", line + 20);
			found = true;
		}
	fclose(f);
	return found;
}

bool harness_log_has(const char *log, const char *what)
{
	FILE *f = fopen(log, "r");
	ck_assert_msg(f, "%s", log);
	char line[2048];
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

bool harness_log_wait(const char *log, const char *what, unsigned ms)
{
	for (unsigned t = 0; t <= ms; t += 10) {
		if (harness_log_has(log, what))
			return true;
		usleep(10000);
	}
	return false;
}

static bool can_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok = fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

static void spawn(struct daemon_proc *d, const char *const *extra);

void harness_start(struct daemon_proc *d, const char *const *extra)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/devq-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(d->dir));
	snprintf(d->sock, sizeof(d->sock), "%s/devqd.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/devqd.log", d->dir);
	spawn(d, extra);
}

void harness_restart(struct daemon_proc *d, const char *const *extra)
{
	ck_assert_int_eq(d->pid, 0);
	/* Keep the first daemon's log beside the new one. */
	char old[160];
	snprintf(old, sizeof(old), "%s.1", d->log);
	rename(d->log, old);
	spawn(d, extra);
}

static void spawn(struct daemon_proc *d, const char *const *extra)
{
	const char *argv[32];
	int n = 0;
	const char *bin = harness_bin("devqd");
	if (getenv("DEVQ_VALGRIND")) {
		argv[n++] = "valgrind";
		argv[n++] = "--quiet";
		argv[n++] = "--error-exitcode=99";
		argv[n++] = "--leak-check=full";
		argv[n++] = "--errors-for-leak-kinds=definite,indirect";
	}
	argv[n++] = bin;
	argv[n++] = "--socket";
	argv[n++] = d->sock;
	argv[n++] = "--backend";
	argv[n++] = harness_backend();
	argv[n++] = "-v";
	for (int i = 0; extra && extra[i] && n < 30; i++)
		argv[n++] = extra[i];
	argv[n] = NULL;
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			dup2(fd, 2);
			dup2(fd, 1);
		}
		harness_cudasim_env();
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	d->pid = pid;
	register_daemon(pid);
	for (int i = 0; i < 2000; i++) {
		if (can_connect(d->sock))
			return;
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid)
			ck_abort_msg("devqd exited at start (see %s)", d->log);
		usleep(5000);
	}
	ck_abort_msg("devqd did not start listening on %s", d->sock);
}

int harness_stop(struct daemon_proc *d)
{
	if (d->pid <= 0)
		return -1;
	kill(d->pid, SIGTERM);
	return harness_wait(d);
}

int harness_wait(struct daemon_proc *d)
{
	if (d->pid <= 0)
		return -1;
	int st = 0;
	while (waitpid(d->pid, &st, 0) < 0 && errno == EINTR)
		;
	forget_daemon(d->pid);
	d->pid = 0;
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	if (code != 0) {
		/* Show the daemon's own account of what went wrong. */
		char cmd[256];
		snprintf(cmd, sizeof(cmd), "tail -n 30 %s >&2", d->log);
		if (system(cmd) < 0)
			perror("system");
	}
	/* The CUDA simulator's rule violations fail the test that caused them. */
	char viol[512];
	if (harness_cudasim_violations(d->log, viol, sizeof(viol)))
		ck_abort_msg("the CUDA simulator reports a rule violation (log %s): %s", d->log, viol);
	if (code == 0) {
		unlink(d->log);
		unlink(d->sock);
		rmdir(d->dir);
	}
	return code;
}

long harness_cpu_ticks(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')');
	ck_assert_ptr_nonnull(p);
	unsigned long ut = 0, st = 0;
	/* after ')': state ppid pgrp session tty tpgid flags minflt cminflt
	 * majflt cmajflt utime stime */
	ck_assert_int_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
				&ut, &st), 2);
	return (long)(ut + st);
}

int harness_fd_count(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *dir = opendir(path);
	if (!dir)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dir)))
		if (e->d_name[0] != '.')
			n++;
	closedir(dir);
	return n;
}

devq *conn(const char *sock, const char *name)
{
	devq *q = NULL;
	int r = devq_connect(sock, name, &q);
	ck_assert_msg(r == 0, "connect: %s", q ? devq_last_error(q) : strerror(-r));
	return q;
}

const struct devq_exec *exe(devq *q, const char *name)
{
	const struct devq_exec *e;
	ck_assert_msg(devq_exec_lookup(q, name, &e) == 0, "%s", devq_last_error(q));
	return e;
}

struct devq_buffer *mkbuf(devq *q, uint64_t size)
{
	struct devq_buffer *b;
	ck_assert_msg(devq_buffer_create(q, size, DEVQ_BUFFER_SHARED, &b) == 0, "%s",
		      devq_last_error(q));
	return b;
}

struct devq_arg a_u64(const char *n, uint64_t v)
{
	return (struct devq_arg){ .name = n, .type = DEVQ_ARG_U64, .v.u64 = v };
}

struct devq_arg a_u32(const char *n, uint32_t v)
{
	return (struct devq_arg){ .name = n, .type = DEVQ_ARG_U32, .v.u32 = v };
}

struct devq_arg a_f32(const char *n, float v)
{
	return (struct devq_arg){ .name = n, .type = DEVQ_ARG_F32, .v.f32 = v };
}

struct devq_arg a_buf(const char *n, const struct devq_buffer *b, uint64_t off)
{
	return (struct devq_arg){ .name = n, .type = DEVQ_ARG_BUFFER, .v.buf = { b, off } };
}

void harness_check_monotonic(const struct devq_completion *c)
{
	const struct devq_timing *t = &c->t;
	ck_assert_msg(t->client_submit <= t->received && t->received <= t->handoff &&
			      t->handoff <= t->device_start && t->device_start <= t->device_end &&
			      t->device_end <= t->observed && t->observed <= t->client_received,
		      "queue %u point %llu: timestamps out of order: %llu %llu %llu %llu %llu %llu %llu",
		      c->queue, (unsigned long long)c->point, (unsigned long long)t->client_submit,
		      (unsigned long long)t->received, (unsigned long long)t->handoff,
		      (unsigned long long)t->device_start, (unsigned long long)t->device_end,
		      (unsigned long long)t->observed, (unsigned long long)t->client_received);
}

