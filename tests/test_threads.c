/* SPDX-License-Identifier: Apache-2.0 */
/* devqd's threads, seen from outside as top -H and scripts see them
 * (/proc/PID/task/): each has a name that says what it is, the main thread
 * keeps the process's name "devqd"; which thread runs a short op; and the
 * rule for spinning (base/lock.c, linked in) when confined to one CPU. */
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/lock.h"
#include "base/slice.h"
#include "server/server.h"
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

static bool have_gemm(devq *q, const char *test)
{
	/* gemm_f32's code is the built-in host library (OpenBLAS), which a
	 * tree built without it (make mutate's) lacks. */
	if (!devq_exec_info(q, exe(q, "gemm_f32"))->unavailable)
		return true;
	printf("SKIP %s: gemm_f32 has no code here\n", test);
	return false;
}

/* A 256^3 gemm_f32 on queue 1 (opened here) over b's first 3 MiB, to
 * completion: big enough for the CPU gemm to split it when it has two
 * cores or more.  False, having run nothing, where gemm_f32 has no code
 * (make mutate's tree). */
static bool split_gemm(devq *q, struct devq_buffer *b, const char *test)
{
	if (!have_gemm(q, test))
		return false;
	struct devq_arg ga[] = {
		{ .name = "m", .type = DEVQ_ARG_U64, .v.u64 = 256 },
		{ .name = "n", .type = DEVQ_ARG_U64, .v.u64 = 256 },
		{ .name = "k", .type = DEVQ_ARG_U64, .v.u64 = 256 },
		{ .name = "alpha", .type = DEVQ_ARG_F32, .v.f32 = 1.0f },
		{ .name = "beta", .type = DEVQ_ARG_F32, .v.f32 = 0.0f },
		a_buf("a", b, 0), a_buf("b", b, 1u << 20), a_buf("c", b, 2u << 20),
	};
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_op gop = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "gemm_f32"),
			       .args = ga, .nargs = 8 };
	uint64_t gp;
	struct devq_completion gc;
	ck_assert_msg(devq_submit(q, &gop, 1, &gp) == 0, "%s", devq_last_error(q));
	ck_assert_msg(devq_wait(q, 1, gp, 60000, &gc) == 0, "%s", devq_last_error(q));
	ck_assert_msg(gc.code == DEVQ_OK, "%s", gc.message);
	return true;
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
	 * installed by the buffer worker.  The SIGHUP goes once a session is
	 * served, and the test waits for the rescan's log line: a SIGHUP sent
	 * as the socket begins to accept is test_daemon's case, and once, in
	 * CI under ThreadSanitizer, this test found no pool thread 5 s after
	 * such an early SIGHUP without saying whether the rescan had run. */
	devq *q = conn(D.sock, "names");
	ck_assert_int_eq(kill(D.pid, SIGHUP), 0);
	ck_assert_msg(harness_log_wait(D.log, "executables: rescan took", 30000),
		      "no rescan logged 30 s after SIGHUP (see %s)", D.log);
	struct devq_buffer *b = mkbuf(q, 64u << 20);
	ck_assert_ptr_nonnull(b);
	/* A gemm big enough to be split: with two cores or more, its stream
	 * gets helper threads (devqd-gemm). */
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	bool gemm = split_gemm(q, b, "test_thread_names's gemm helpers");
	if (!gemm) { /* a record for the trace all the same */
		struct devq_arg sa[] = { a_u64("ns", 0) };
		struct devq_op sop = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
				       .args = sa, .nargs = 1 };
		uint64_t sp;
		ck_assert_int_eq(devq_queue_open(q, 1), 0);
		ck_assert_int_eq(devq_submit(q, &sop, 1, &sp), 0);
		ck_assert_int_eq(devq_wait(q, 1, sp, 10000, NULL), 0);
	}
	/* A trace of the gemm's record: the trace builder starts with it. */
	struct devq_trace *tr;
	struct devq_trace_query tq = { 0 };
	ck_assert_msg(devq_trace_get(q, &tq, &tr) == 0, "%s", devq_last_error(q));
	ck_assert_uint_ge(tr->nops, 1);
	devq_trace_free(tr);
	struct task t[64];
	int n = 0;
	for (int i = 0; i < 500; i++) { /* the trace builder may lag its reply */
		n = tasks(D.pid, t, 64);
		if (count_prefix(t, n, "devqd-pool") && count_prefix(t, n, "devqd-buffer") &&
		    count_prefix(t, n, "devqd-trace"))
			break;
		usleep(10000);
	}
	if (ncpu >= 2 && gemm)
		ck_assert_int_ge(count_prefix(t, n, "devqd-gemm"), 1);
	bool cpu_seen[4] = { false }, tsan_seen = false;
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
		/* ThreadSanitizer's runtime starts a thread of its own from
		 * the main one (so named "devqd"); none of devqd's is. */
		if (!strcmp(t[i].comm, "devqd") && getenv("DEVQ_SANITIZER") &&
		    !strcmp(getenv("DEVQ_SANITIZER"), "tsan") && !tsan_seen) {
			tsan_seen = true;
			continue;
		}
		/* devqd-host: threads the built-in host library's BLAS
		 * starts when loaded (none where it runs single-threaded);
		 * devqd-hslots: the host executables' slot keeper;
		 * devqd-gemm: the CPU gemm's helpers; devqd-trace: the trace
		 * builder. */
		ck_assert_msg(!strcmp(t[i].comm, "devqd-pool") || !strcmp(t[i].comm, "devqd-buffer") ||
				      !strcmp(t[i].comm, "devqd-host") || !strcmp(t[i].comm, "devqd-gemm") ||
				      !strcmp(t[i].comm, "devqd-hslots") ||
				      !strcmp(t[i].comm, "devqd-trace"),
			      "thread %d is named '%s'", t[i].tid, t[i].comm);
	}
	/* One worker per stream, high-priority ones included. */
	for (unsigned k = 0; k < 4; k++)
		ck_assert_msg(cpu_seen[k], "no devqd-cpu/%u", k);
	ck_assert_int_eq(count_prefix(t, n, "devqd-buffer"), 1);
	ck_assert_int_eq(count_prefix(t, n, "devqd-hslots"), 1);
	ck_assert_int_ge(count_prefix(t, n, "devqd-pool"), 1);
	ck_assert_int_eq(count_prefix(t, n, "devqd"), n); /* nothing else */
	ck_assert_int_eq(devq_buffer_release(q, b), 0);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&D), 0);
	rmdir(dir);
}
END_TEST

/* The CPU gemm's helpers are kept off the CPU of the worker that split
 * the gemm: woken onto that CPU, a helper shared it with the worker for
 * milliseconds before the scheduler moved one of them, and a third of lone
 * 1024^3 gemms took 17-21 ms instead of 11-12 (bench/RESULTS.md).  Each
 * helper may use every CPU the daemon may, but one. */
START_TEST(test_gemm_helpers_apart)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	cpu_set_t all;
	ck_assert_int_eq(sched_getaffinity(0, sizeof(all), &all), 0);
	if (ncpu < 2 || CPU_COUNT(&all) < 2)
		return; /* one CPU: the gemm is not split (test_spin_rule_one_cpu's case) */
	harness_start(&D, NULL);
	devq *q = conn(D.sock, "apart");
	struct devq_buffer *b = mkbuf(q, 3u << 20);
	ck_assert_ptr_nonnull(b);
	if (!split_gemm(q, b, "test_gemm_helpers_apart")) {
		devq_disconnect(q);
		ck_assert_int_eq(harness_stop(&D), 0);
		return;
	}
	cpu_set_t daemon_cpus;
	ck_assert_int_eq(sched_getaffinity(D.pid, sizeof(daemon_cpus), &daemon_cpus), 0);
	struct task t[64];
	int n = tasks(D.pid, t, 64), helpers = 0;
	for (int i = 0; i < n; i++) {
		if (strcmp(t[i].comm, "devqd-gemm"))
			continue;
		cpu_set_t h, both;
		ck_assert_int_eq(sched_getaffinity(t[i].tid, sizeof(h), &h), 0);
		CPU_AND(&both, &h, &daemon_cpus);
		ck_assert_msg(CPU_EQUAL(&both, &h) && CPU_COUNT(&h) == CPU_COUNT(&daemon_cpus) - 1,
			      "helper %d may use %d of the daemon's %d CPUs", t[i].tid,
			      CPU_COUNT(&h), CPU_COUNT(&daemon_cpus));
		helpers++;
	}
	ck_assert_int_ge(helpers, 1);
	ck_assert_int_eq(devq_buffer_release(q, b), 0);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&D), 0);
}
END_TEST

/* Voluntary context switches of the CPU backend's workers, summed, once
 * every worker is asleep (none is awake to take an op at once, which is
 * the case the loop runs a short op itself in). */
static unsigned long long workers_asleep_vcsw(void)
{
	struct task t[64];
	for (int tries = 0; tries < 500; tries++) {
		int n = tasks(D.pid, t, 64);
		unsigned long long sum = 0;
		bool asleep = true;
		for (int i = 0; i < n; i++)
			if (!strncmp(t[i].comm, "devqd-cpu/", 10)) {
				asleep &= t[i].state == 'S';
				sum += t[i].vcsw;
			}
		if (asleep)
			return sum;
		usleep(2000);
	}
	ck_abort_msg("the workers never all slept");
	return 0;
}

#define HERE_NS 10000 /* DEVQ_FAIR_HERE_NS */

static struct devq_arg u64arg(const char *n, uint64_t v)
{
	return (struct devq_arg){ .name = n, .type = DEVQ_ARG_U64, .v.u64 = v };
}

/* n sporadic ops (2 ms apart, each waited for): the workers' voluntary
 * context switches meanwhile. */
static unsigned long long sporadic(devq *q, const struct devq_op *op, int n)
{
	unsigned long long v0 = workers_asleep_vcsw();
	for (int i = 0; i < n; i++) {
		uint64_t p;
		struct devq_completion c;
		ck_assert_msg(devq_submit(q, op, 1, &p) == 0, "%s", devq_last_error(q));
		ck_assert_msg(devq_wait(q, 1, p, 30000, &c) == 0, "%s", devq_last_error(q));
		ck_assert_msg(c.code == DEVQ_OK, "%s", c.message);
		usleep(2000);
	}
	return workers_asleep_vcsw() - v0;
}

/* A lone op on an idle stream whose expected time is at most
 * DEVQ_FAIR_HERE_NS runs on the loop thread: no worker wakes for it.  One
 * past the bound goes to a worker, as do the ops of an executable whose
 * runs there took far longer than expected, until it earned trust back. */
START_TEST(test_short_op_runs_on_loop)
{
	const char *args[] = { "--streams", "2", "--priority-streams", "0", NULL };
	harness_start(&D, args);
	devq *q = conn(D.sock, "here");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	const struct devq_exec *spin = exe(q, "spin");
	struct devq_arg at = u64arg("ns", HERE_NS), past = u64arg("ns", HERE_NS + 1);
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = spin, .nargs = 1 };
	op.args = &at;
	unsigned long long here = sporadic(q, &op, 20);
	op.args = &past;
	unsigned long long worker = sporadic(q, &op, 20);
	/* Each op handed to a sleeping worker wakes it and it sleeps again.
	 * Where the op is run is timing (an op that seems to overrun by 4x
	 * counts against its executable): under sanitizers and valgrind only
	 * the results and the ops past the bound are judged. */
	bool slow = harness_slow();
	if (slow)
		printf("SKIP: ops at the bound on the loop (sanitizer/valgrind build): %llu\n", here);
	else
		ck_assert_msg(here == 0, "workers switched %llu times for ops at the bound", here);
	ck_assert_msg(worker >= 20, "workers switched %llu times for 20 ops past the bound",
		      worker);

	/* spin_buf declares ns = 0 but then walks its buffer: 16 MiB take
	 * milliseconds, far past 4 x DEVQ_FAIR_HERE_NS.  Three such runs on
	 * the loop, and its ops go to workers until sixteen of them took no
	 * longer than the bound (DEVQ_FAIR_HERE_STRIKE, _DISTRUST). */
	struct devq_buffer *b = mkbuf(q, 16u << 20);
	struct devq_arg ab[] = { u64arg("ns", 0), u64arg("n", 16u << 20), a_buf("buf", b, 0) };
	struct devq_op sb = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin_buf"),
			      .args = ab, .nargs = 3 };
	ck_assert_int_eq(sporadic(q, &sb, 3), 0);
	ab[1] = u64arg("n", 16);
	/* Short ones now, until one runs on the loop again: not before 16 ran
	 * on workers (more where a preempted worker made one look long). */
	int on_workers = 0;
	while (sporadic(q, &sb, 1) != 0 && on_workers < 64)
		on_workers++;
	if (slow) {
		printf("SKIP: trust regained (sanitizer/valgrind build): %d on workers\n",
		       on_workers);
	} else {
		ck_assert_int_lt(on_workers, 64);
		ck_assert_int_ge(on_workers, 16);
	}
	/* Every byte was incremented by the long ops, the first 16 by all. */
	const uint8_t *m = b->map;
	ck_assert_int_eq(m[0], (3 + on_workers + 1) & 0xff);
	ck_assert_int_eq(m[16], 3);
	ck_assert_int_eq(m[(16u << 20) - 1], 3);
	/* The plain spin kernel is still trusted. */
	op.args = &at;
	unsigned long long again = sporadic(q, &op, 5);
	if (!slow)
		ck_assert_int_eq(again, 0);
	ck_assert_int_eq(devq_buffer_release(q, b), 0);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&D), 0);
}
END_TEST

/* devqd's spinning rule (base/lock.h): no spin while the process may
 * run on one CPU only, read again within a second of a change; and the
 * lock still excludes when every contended take sleeps at once. */
struct counter {
	struct devq_lock l;
	unsigned long n;
};

static void *bump(void *arg)
{
	struct counter *c = arg;
	for (int i = 0; i < 200000; i++) {
		devq_lock_take(&c->l);
		c->n++;
		devq_lock_give(&c->l);
	}
	return NULL;
}

START_TEST(test_spin_rule_one_cpu)
{
	cpu_set_t all, one;
	ck_assert_int_eq(sched_getaffinity(0, sizeof(all), &all), 0);
	if (CPU_COUNT(&all) < 2) {
		printf("SKIP: this process may use one CPU only\n");
		return;
	}
	ck_assert(devq_spin_ok());
	CPU_ZERO(&one);
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &all)) {
			CPU_SET(i, &one);
			break;
		}
	ck_assert_int_eq(sched_setaffinity(0, sizeof(one), &one), 0);
	usleep(1100000); /* the verdict is at most a second old */
	ck_assert(!devq_spin_ok());
	struct counter c = { .l = DEVQ_LOCK_INIT, .n = 0 };
	pthread_t t[3];
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, bump, &c), 0);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	ck_assert_uint_eq(c.n, 600000);
	ck_assert_int_eq(sched_setaffinity(0, sizeof(all), &all), 0);
	usleep(1100000);
	ck_assert(devq_spin_ok());
}
END_TEST

/* A field of /proc/PID/task/TID/sched ("se.slice", "policy"); -1 when
 * the kernel does not show it. */
static long long sched_field(pid_t pid, pid_t tid, const char *name)
{
	char path[96], line[256], fmt[64];
	snprintf(path, sizeof(path), "/proc/%d/task/%d/sched", (int)pid, (int)tid);
	snprintf(fmt, sizeof(fmt), "%s : %%lld", name);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	long long v = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, fmt, &v) == 1)
			break;
	fclose(f);
	return v;
}

static void *try_slice(void *arg)
{
	*(int *)arg = devq_slice_set(DEVQ_LOOP_SLICE_NS);
	return NULL;
}

/* The loop thread runs with the shortest time slice (where the kernel has
 * slices of their own: Linux 6.12), and the trace builder at SCHED_IDLE:
 * what lets another tenant's request take a CPU from a trace flood
 * (requests/tracereq.c, server.c's devq_server_run). */
START_TEST(test_loop_slice_and_idle_builder)
{
	harness_start(&D, NULL);
	devq *q = conn(D.sock, "sched");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_arg sa[] = { { .name = "ns", .type = DEVQ_ARG_U64, .v.u64 = 0 } };
	struct devq_op sop = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
			       .args = sa, .nargs = 1 };
	uint64_t p;
	struct devq_completion c;
	ck_assert_int_eq(devq_submit(q, &sop, 1, &p), 0);
	ck_assert_int_eq(devq_wait(q, 1, p, 10000, &c), 0);
	struct devq_trace *tr;
	struct devq_trace_query tq = { 0 };
	ck_assert_msg(devq_trace_get(q, &tq, &tr) == 0, "%s", devq_last_error(q));
	devq_trace_free(tr);
	struct task t[64];
	int n = tasks(D.pid, t, 64), builder = -1;
	for (int i = 0; i < n; i++)
		if (!strcmp(t[i].comm, "devqd-trace"))
			builder = i;
	ck_assert_msg(builder >= 0, "no devqd-trace thread after a trace");
	long long policy = sched_field(D.pid, t[builder].tid, "policy");
	ck_assert_msg(policy == SCHED_IDLE, "devqd-trace's policy is %lld, not SCHED_IDLE (%d)",
		      policy, SCHED_IDLE);
	pthread_t th;
	int here = 0;
	ck_assert_int_eq(pthread_create(&th, NULL, try_slice, &here), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	long long slice = sched_field(D.pid, D.pid, "se.slice");
	if (here == -EINVAL) {
		fprintf(stderr, "loop slice: this kernel has no slices of their own (se.slice %lld); "
			"not checked\n", slice);
	} else {
		ck_assert_int_eq(here, 0);
		ck_assert_msg(slice == (long long)DEVQ_LOOP_SLICE_NS,
			      "devqd's loop thread has a slice of %lld ns, not %llu", slice,
			      DEVQ_LOOP_SLICE_NS);
	}
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&D), 0);
}
END_TEST

/* The loop thread's voluntary context switches (its wake-ups). */
static unsigned long long loop_vcsw(void)
{
	struct task t[64];
	int n = tasks(D.pid, t, 64);
	for (int i = 0; i < n; i++)
		if (t[i].tid == D.pid)
			return t[i].vcsw;
	ck_abort_msg("no loop thread");
	return 0;
}

/* While one op longer than a millisecond runs, the loop sleeps: its lazy
 * poll for completions published in the page parks after one empty
 * period, and the completion wakes it (server.c, on_lazy).  It used to
 * tick every millisecond until the op ended: about 200 wake-ups for this
 * 200 ms op, taken from the CPUs the op runs on. */
START_TEST(test_loop_sleeps_through_long_op)
{
	const char *args[] = { "--streams", "2", "--priority-streams", "0", NULL };
	harness_start(&D, args);
	devq *q = conn(D.sock, "long");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_arg ns = u64arg("ns", 200000000);
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
			      .args = &ns, .nargs = 1 };
	for (int i = 0; i < 3; i++) {
		unsigned long long v0 = loop_vcsw();
		uint64_t p;
		struct devq_completion c;
		ck_assert_msg(devq_submit(q, &op, 1, &p) == 0, "%s", devq_last_error(q));
		ck_assert_msg(devq_wait(q, 1, p, 30000, &c) == 0, "%s", devq_last_error(q));
		ck_assert_msg(c.code == DEVQ_OK, "%s", c.message);
		usleep(20000); /* the completion collected */
		unsigned long long v = loop_vcsw() - v0;
		/* Its submit, a poll or two, its completion; the margin is for
		 * the harness's and the kernel's own. */
		ck_assert_msg(v <= 20, "the loop woke %llu times during a 200 ms op", v);
	}
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&D), 0);
}
END_TEST

/* ---- bulk host work below latency work, cores in the fair order -------- */

/* A gemm_f32 of m x n x k over b (a at 0, then b, then c) on queue; its
 * point. */
static uint64_t gemm_on(devq *q, uint32_t queue, struct devq_buffer *b, uint64_t m, uint64_t n,
			uint64_t k)
{
	struct devq_arg ga[] = { a_u64("m", m),	     a_u64("n", n),
				 a_u64("k", k),	     a_f32("alpha", 1.0f),
				 a_f32("beta", 0.0f), a_buf("a", b, 0),
				 a_buf("b", b, 4 * m * k), a_buf("c", b, 4 * (m * k + k * n)) };
	struct devq_op op = { .queue = queue, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "gemm_f32"),
			      .args = ga, .nargs = 8 };
	uint64_t p = 0;
	ck_assert_msg(devq_submit(q, &op, 1, &p) == 0, "%s", devq_last_error(q));
	return p;
}

static uint64_t gemm_bytes(uint64_t m, uint64_t n, uint64_t k)
{
	return 4 * (m * k + k * n + m * n);
}

static double mono_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A tenant in a child process: as uid, keeps one dim^3 gemm (dim 0: one
 * burn of tests/host_exes.c, 20 units of 1 ms of CPU time) in flight on
 * each of queues 1..nq; writes a byte to ready once the first are in,
 * stops when stop becomes readable or after secs (0: no limit), and
 * writes to ready how many completed after skip seconds.  Exits 0, or
 * 10 + a step that failed. */
static void gemm_tenant(const char *sock, uid_t uid, unsigned nq, uint64_t dim, double secs,
			double skip, int ready, int stop)
{
	if (setuid(uid) < 0) /* gid 0 stays: --allow-groups root admits it */
		_exit(10);
	devq *q = NULL;
	if (devq_connect(sock, "bulk", &q) < 0)
		_exit(11);
	/* A buffer per queue: ops of one buffer are ordered as hazards (a
	 * buffer a kernel writes), and would not run side by side. */
	struct devq_buffer *c[8];
	for (unsigned i = 0; i < nq; i++)
		if (nq > 8 || devq_buffer_create(q, dim ? 8 * dim * dim : 4096, DEVQ_BUFFER_SHARED,
						 &c[i]) < 0)
			_exit(12);
	uint64_t pt[8];
	for (unsigned i = 1; i <= nq; i++) {
		if (devq_queue_open(q, i) < 0)
			_exit(13);
		pt[i - 1] = 0;
	}
	double t0 = mono_s();
	long done = 0;
	char one = 1;
	for (bool first = true;; first = false) {
		for (unsigned i = 1; i <= nq; i++) {
			if (pt[i - 1]) {
				struct devq_completion cp;
				if (devq_wait(q, i, pt[i - 1], 120000, &cp) < 0 || cp.code != DEVQ_OK)
					_exit(14);
				if (mono_s() - t0 >= skip)
					done++;
			}
			struct devq_arg ga[] = { a_u64("m", dim), a_u64("n", dim), a_u64("k", dim),
						 a_f32("alpha", 1.0f), a_f32("beta", 0.0f),
						 a_buf("a", c[i - 1], 0), a_buf("b", c[i - 1], 0),
						 a_buf("c", c[i - 1], 4 * dim * dim) };
			struct devq_arg ba[] = { a_u64("n", 20), a_u64("spin_us", 1000),
						 a_u64("hang", 0), a_buf("dst", c[i - 1], 0) };
			struct devq_op op = { .queue = i, .kind = DEVQ_OP_KERNEL,
					      .args = dim ? ga : ba, .nargs = dim ? 8 : 4 };
			if (devq_exec_lookup(q, dim ? "gemm_f32" : "burn", &op.exec) < 0 ||
			    devq_submit(q, &op, 1, &pt[i - 1]) < 0)
				_exit(15);
		}
		if (first && write(ready, &one, 1) != 1)
			_exit(16);
		if (secs > 0 && mono_s() - t0 >= secs)
			break;
		if (stop >= 0) { /* -1: no stop pipe (FD_SET of it is undefined) */
			struct timespec z = { 0 };
			fd_set fs;
			FD_ZERO(&fs);
			FD_SET(stop, &fs);
			if (pselect(stop + 1, &fs, NULL, NULL, &z, NULL) > 0)
				break;
		}
	}
	for (unsigned i = 1; i <= nq; i++) {
		struct devq_completion cp;
		if (devq_wait(q, i, pt[i - 1], 120000, &cp) < 0)
			_exit(17);
	}
	if (write(ready, &done, sizeof(done)) != sizeof(done))
		_exit(18);
	devq_disconnect(q);
	_exit(0);
}

static pid_t fork_tenant(uid_t uid, unsigned nq, uint64_t dim, double secs, double skip,
			 int ready[2], int stop[2])
{
	ck_assert_int_eq(pipe(ready), 0);
	if (stop)
		ck_assert_int_eq(pipe(stop), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(ready[0]);
		if (stop)
			close(stop[1]);
		gemm_tenant(D.sock, uid, nq, dim, secs, skip, ready[1], stop ? stop[0] : -1);
	}
	close(ready[1]);
	if (stop)
		close(stop[0]);
	char c;
	if (read(ready[0], &c, 1) != 1) {
		int st = 0;
		waitpid(pid, &st, 0);
		ck_abort_msg("tenant uid %u ended before its ops were in: exit %d", (unsigned)uid,
			     WIFEXITED(st) ? WEXITSTATUS(st) : -st);
	}
	return pid;
}

static long tenant_end(pid_t pid, int ready)
{
	long done = -1;
	ssize_t n = read(ready, &done, sizeof(done));
	close(ready);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	/* Its exit status says which step failed (gemm_tenant). */
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0 && n == (ssize_t)sizeof(done),
		      "tenant: status %d (exit %d), count read %zd", st,
		      WIFEXITED(st) ? WEXITSTATUS(st) : -1, n);
	return done;
}

/* How many of devqd's threads named prefix* run at policy now. */
static int threads_at(const char *prefix, int policy)
{
	struct task t[128];
	int n = tasks(D.pid, t, 128), c = 0;
	for (int i = 0; i < n; i++)
		if (!strncmp(t[i].comm, prefix, strlen(prefix)) &&
		    sched_field(D.pid, t[i].tid, "policy") == policy)
			c++;
	return c;
}


/* Receipt to device start of one gemm of root's, to completion. */
static uint64_t start_delay_ms(devq *q, uint32_t queue, struct devq_buffer *b, uint64_t m,
			       uint64_t n, uint64_t k)
{
	uint64_t p = gemm_on(q, queue, b, m, n, k);
	struct devq_completion c;
	ck_assert_msg(devq_wait(q, queue, p, 120000, &c) == 0, "%s", devq_last_error(q));
	ck_assert_msg(c.code == DEVQ_OK, "%s", c.message);
	return (c.t.device_start - c.t.received) / 1000000;
}

/* Bulk host work (an op expected to take longer than slice-us) runs at
 * SCHED_IDLE, and short and high-priority ops take no core token: beside
 * another user's 2048^3 gemm, root's short gemm (8 x 512 x 512) on a
 * normal stream and its 64^3 gemm on the idle high-priority stream start
 * at once (on 1a7a6b9 each waited for a whole gemm, seconds; the figures
 * are bench/iso.py's).  The bulk op's worker and helpers run at SCHED_IDLE
 * meanwhile, the worker at normal priority again after. */
START_TEST(test_bulk_below_short_ops)
{
	if (geteuid() != 0) {
		printf("SKIP test_bulk_below_short_ops: needs root to run another user\n");
		return;
	}
	const char *args[] = { "--streams", "4", "--priority-streams", "1", "--allow-users",
			       "nobody", NULL };
	harness_start(&D, args);
	ck_assert_int_eq(chmod(D.dir, 0755), 0);
	ck_assert_int_eq(chmod(D.sock, 0666), 0);
	devq *q = conn(D.sock, "short");
	if (!have_gemm(q, "test_bulk_below_short_ops")) {
		devq_disconnect(q);
		ck_assert_int_eq(harness_stop(&D), 0);
		return;
	}
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	ck_assert_int_eq(devq_queue_open_priority(q, 2, 1), 0);
	struct devq_buffer *b = mkbuf(q, gemm_bytes(8, 512, 512));
	/* Timed once each, alone: their estimates are known, short. */
	for (int i = 0; i < 3; i++) {
		start_delay_ms(q, 1, b, 8, 512, 512);
		start_delay_ms(q, 2, b, 64, 64, 64);
	}
	int ready[2], stop[2];
	pid_t pid = fork_tenant(65534, 1, 2048, 0, 0, ready, stop);
	/* A worker at SCHED_IDLE: the bulk gemm runs (devqd runs as root
	 * here, which may return a thread from it). */
	bool demoted = false;
	for (int i = 0; i < 1000 && !demoted; i++) {
		demoted = threads_at("devqd-cpu", SCHED_IDLE) > 0;
		if (!demoted)
			usleep(10000);
	}
	ck_assert_msg(demoted, "no devqd-cpu thread at SCHED_IDLE while a bulk gemm runs");
	uint64_t worst_normal = 0, worst_high = 0;
	for (int i = 0; i < 20; i++) {
		uint64_t d = start_delay_ms(q, 1, b, 8, 512, 512);
		worst_normal = d > worst_normal ? d : worst_normal;
		d = start_delay_ms(q, 2, b, 64, 64, 64);
		worst_high = d > worst_high ? d : worst_high;
	}
	bool beside = threads_at("devqd-cpu", SCHED_IDLE) > 0;
	/* Alone, the bulk op has every core: its helpers run at SCHED_IDLE
	 * too (one CPU: it has none). */
	cpu_set_t set;
	ck_assert_int_eq(sched_getaffinity(D.pid, sizeof(set), &set), 0);
	int helpers_idle = threads_at("devqd-gemm", SCHED_IDLE);
	ck_assert_int_eq(write(stop[1], "x", 1), 1);
	close(stop[1]);
	tenant_end(pid, ready[0]);
	/* Generous: a stall of the machine is not the daemon's; a wait for
	 * the other user's gemm is seconds. */
	ck_assert_msg(worst_normal < 500, "a short gemm waited %llu ms for its start",
		      (unsigned long long)worst_normal);
	ck_assert_msg(worst_high < 500, "a high-priority gemm waited %llu ms for its start",
		      (unsigned long long)worst_high);
	ck_assert_msg(beside, "the bulk gemm ended before root's ops did: not beside");
	if (CPU_COUNT(&set) > 1)
		ck_assert_msg(helpers_idle > 0, "no devqd-gemm helper at SCHED_IDLE beside bulk work");
	/* The workers back at normal priority (a helper is switched back by
	 * the next short call of its stream, before it is woken). */
	int idle = 1;
	for (int i = 0; i < 500 && idle; i++) {
		idle = threads_at("devqd-cpu", SCHED_IDLE);
		if (idle)
			usleep(10000);
	}
	ck_assert_msg(!idle, "%d workers still at SCHED_IDLE after the bulk work", idle);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&D), 0);
}
END_TEST

/* Cores go to waiting bulk slices in the fair order: root (weight 1) and
 * nobody (weight 3) each keep two burns (tests/host_exes.c: 20 units of
 * 1 ms of CPU time, never timed at first and then expected 20 ms: bulk)
 * in flight on their own streams, more bulk ops than cores; over 3 s
 * nobody's complete about three times as often as root's (first come,
 * first served: alike, 142 and 142).  At least 1.5 times: 2.9 alone,
 * 1.9 while another process loaded the machine (bulk work yields to it).
 * Only where the ops outnumber the cores (two: then each free core has
 * two slices to choose from, one per tenant). */
START_TEST(test_cores_in_fair_order)
{
	cpu_set_t set;
	ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
	if (CPU_COUNT(&set) > 2) {
		printf("SKIP test_cores_in_fair_order: %d CPUs, not fewer than the 4 ops\n",
		       CPU_COUNT(&set));
		return;
	}
	if (geteuid() != 0) {
		printf("SKIP test_cores_in_fair_order: needs root to run another user\n");
		return;
	}
	char repo[64], cmd[512], xarg[96];
	snprintf(repo, sizeof(repo), "/tmp/devq-threads-burn-%d", (int)getpid());
	const char *cc = getenv("CC") && *getenv("CC") ? getenv("CC") : "cc";
	snprintf(cmd, sizeof(cmd),
		 "mkdir -p %s && %s -std=c11 -O2 -Ikernels -shared -fPIC -o %s/h.so "
		 "tests/host_exes.c && printf 'signature = n:u64, spin_us:u64, hang:u64, "
		 "dst:out u32[n]\\ncpu-host = h.so\\ncpu-host-symbol = burn_cpu\\n' > %s/burn.exec",
		 repo, cc, repo, repo);
	ck_assert_msg(system(cmd) == 0, "%s", cmd);
	snprintf(xarg, sizeof(xarg), "--executables=%s", repo);
	const char *args[] = { "--streams", "8", "--fair-shares", "root:1,nobody:3",
			       "--allow-users", "nobody", xarg, NULL };
	harness_start(&D, args);
	ck_assert_int_eq(chmod(D.dir, 0755), 0);
	ck_assert_int_eq(chmod(D.sock, 0666), 0);
	int r1[2], r2[2];
	pid_t a = fork_tenant(0, 2, 0, 4.0, 1.0, r1, NULL);
	pid_t b = fork_tenant(65534, 2, 0, 4.0, 1.0, r2, NULL);
	long root = tenant_end(a, r1[0]), nobody = tenant_end(b, r2[0]);
	printf("cores in fair order: gemms in 3 s, root (weight 1) %ld, nobody (weight 3) %ld\n",
	       root, nobody);
	ck_assert_msg(root > 0 && 2 * nobody >= 3 * root && nobody <= 5 * root,
		      "gemms completed in 3 s: root (weight 1) %ld, nobody (weight 3) %ld", root,
		      nobody);
	ck_assert_int_eq(harness_stop(&D), 0);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", repo);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("threads");
	TCase *tc = tcase_create("threads");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_thread_names);
	tcase_add_test(tc, test_short_op_runs_on_loop);
	tcase_add_test(tc, test_spin_rule_one_cpu);
	tcase_add_test(tc, test_loop_slice_and_idle_builder);
	tcase_add_test(tc, test_loop_sleeps_through_long_op);
	tcase_add_test(tc, test_gemm_helpers_apart);
	tcase_add_test(tc, test_bulk_below_short_ops);
	tcase_add_test(tc, test_cores_in_fair_order);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
