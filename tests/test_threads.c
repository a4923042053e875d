/* SPDX-License-Identifier: Apache-2.0 */
/* devqd's threads, seen from outside as top -H and scripts see them
 * (/proc/PID/task/): each has a name that says what it is, the main thread
 * keeps the process's name "devqd"; and which thread runs a short op. */
#include <check.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "devq.h"
#include "harness.h"

static struct daemon_proc D;

struct task {
	int tid;
	char comm[32];
	char state;
	unsigned long long vcsw; /* voluntary context switches */
};

/* The daemon's threads now; how many (at most max). */
static int tasks(pid_t pid, struct task *t, int max)
{
	char path[96];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *dir = opendir(path);
	ck_assert_msg(dir, "%s", path);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(dir)) && n < max) {
		if (e->d_name[0] == '.')
			continue;
		struct task *k = &t[n];
		memset(k, 0, sizeof(*k));
		k->tid = atoi(e->d_name);
		snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, k->tid);
		FILE *f = fopen(path, "r");
		if (!f)
			continue; /* ended meanwhile */
		char line[256];
		while (fgets(line, sizeof(line), f)) {
			if (!strncmp(line, "Name:\t", 6)) {
				snprintf(k->comm, sizeof(k->comm), "%.30s", line + 6);
				k->comm[strcspn(k->comm, "\n")] = '\0';
			} else if (!strncmp(line, "State:\t", 7)) {
				k->state = line[7];
			} else if (!strncmp(line, "voluntary_ctxt_switches:", 24)) {
				k->vcsw = strtoull(line + 24, NULL, 10);
			}
		}
		fclose(f);
		n++;
	}
	closedir(dir);
	return n;
}

static int count_prefix(const struct task *t, int n, const char *prefix)
{
	int c = 0;
	for (int i = 0; i < n; i++)
		c += !strncmp(t[i].comm, prefix, strlen(prefix));
	return c;
}

START_TEST(test_thread_names)
{
	char dir[128];
	snprintf(dir, sizeof(dir), "/tmp/devq-threads-%d", (int)getpid());
	ck_assert_int_eq(mkdir(dir, 0700) == 0 || errno == EEXIST, 1);
	char xarg[160];
	snprintf(xarg, sizeof(xarg), "--executables=%s", dir);
	const char *args[] = { "--streams", "3", "--priority-streams", "1", xarg, NULL };
	harness_start(&D, args);
	/* A rescan starts libuv's thread pool; a buffer of 64 MiB or more is
	 * installed by the buffer worker. */
	ck_assert_int_eq(kill(D.pid, SIGHUP), 0);
	devq *q = conn(D.sock, "names");
	struct devq_buffer *b = mkbuf(q, 64u << 20);
	ck_assert_ptr_nonnull(b);
	struct task t[64];
	int n = 0;
	for (int i = 0; i < 500; i++) { /* the pool starts with the rescan */
		n = tasks(D.pid, t, 64);
		if (count_prefix(t, n, "devqd-pool") && count_prefix(t, n, "devqd-buffer"))
			break;
		usleep(10000);
	}
	bool cpu_seen[4] = { false };
	for (int i = 0; i < n; i++) {
		ck_assert_msg(strlen(t[i].comm) <= 15, "%s", t[i].comm);
		if (t[i].tid == D.pid) {
			ck_assert_str_eq(t[i].comm, "devqd");
			continue;
		}
		unsigned k;
		char end;
		if (sscanf(t[i].comm, "devqd-cpu/%u%c", &k, &end) == 1) {
			ck_assert_msg(k < 4 && !cpu_seen[k], "worker %s twice or out of range",
				      t[i].comm);
			cpu_seen[k] = true;
			continue;
		}
		ck_assert_msg(!strcmp(t[i].comm, "devqd-pool") || !strcmp(t[i].comm, "devqd-buffer"),
			      "thread %d is named '%s'", t[i].tid, t[i].comm);
	}
	/* One worker per stream, high-priority ones included. */
	for (unsigned k = 0; k < 4; k++)
		ck_assert_msg(cpu_seen[k], "no devqd-cpu/%u", k);
	ck_assert_int_eq(count_prefix(t, n, "devqd-buffer"), 1);
	ck_assert_int_ge(count_prefix(t, n, "devqd-pool"), 1);
	ck_assert_int_eq(count_prefix(t, n, "devqd"), n); /* nothing else */
	ck_assert_int_eq(devq_buffer_release(q, b), 0);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&D), 0);
	rmdir(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("threads");
	TCase *tc = tcase_create("threads");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_thread_names);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
