#include "harness.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

bool harness_slow(void)
{
	const char *s = getenv("DEVQ_SANITIZER");
	return (s && *s && strcmp(s, "0")) || getenv("DEVQ_VALGRIND");
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

void harness_start(struct daemon_proc *d, const char *const *extra)
{
	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "/tmp/devq-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(d->dir));
	snprintf(d->sock, sizeof(d->sock), "%s/devqd.sock", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/devqd.log", d->dir);
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
	argv[n++] = "cpu";
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
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	d->pid = pid;
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
	int st = 0;
	while (waitpid(d->pid, &st, 0) < 0 && errno == EINTR)
		;
	d->pid = 0;
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	if (code != 0) {
		/* Show the daemon's own account of what went wrong. */
		char cmd[256];
		snprintf(cmd, sizeof(cmd), "tail -n 30 %s >&2", d->log);
		if (system(cmd) < 0)
			perror("system");
	} else {
		unlink(d->log);
		unlink(d->sock);
		rmdir(d->dir);
	}
	return code;
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
