/* SPDX-License-Identifier: Apache-2.0 */
/* Sporadic clients: one null op, devq_wait on its point, then idle for a
 * gap (0, 1 ms, 10 ms), the first OPS ops of a fresh connection, against
 * floors measured the same way after the same gaps: two processes pinned
 * to the client's CPU and the daemon's, handing a word back and forth with
 * futex wait/wake (two sleeping hand-offs), with a one-byte socket echo,
 * and spinning on a shared word.  devq and the floors alternate in chunks
 * of CHUNK ops (interleaved: they see the same moments of machine noise);
 * percentiles are pooled per run.  Also: the daemon's voluntary context
 * switches per op (summed over the status files of /proc/PID/task/, over the devq chunks
 * only) and the daemon's CPU over 10 s of idling after the runs.  Where a
 * devq op's time goes, from its completion's stamps (median per run and
 * gap): client submit -> devqd read it (the socket, and the wake-up of
 * devqd's loop), read -> handed to the backend (decode, validate, order,
 * fairness), handed over -> start, the op itself, end -> the client saw it.
 *
 *   sporadic [--runs R] [--ops N] [--daemon-cpu C --client-cpu C] [--tag T]
 *
 * With --daemon-cpu the daemon is started confined to that CPU (as taskset
 * -c C would) and the client runs on --client-cpu.  The floors are pinned
 * to the same two CPUs (default 1 and 0) in either case.  JSON:
 * $DEVQ_BENCH_OUT/sporadic-TAG.json.  bench/sporadic.sh runs both modes. */
#include <dirent.h>
#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "devq.h"

#define CHUNK 50
#define NGAPS 3
#define NSER 4 /* devq, futex, socket, spin */
static const uint64_t gaps_ns[NGAPS] = { 0, 1000000, 10000000 };
static const char *const ser_name[NSER] = { "devq", "futex", "socket", "spin" };
#define NPH 5
static const char *const ph_name[NPH] = { "to_read", "read_to_handoff", "handoff_to_start",
					  "device", "end_to_client" };

/* The phases of one devq op from its completion's stamps; a stamp that
 * runs backwards (none should) counts as 0. */
static void phases(const struct devq_timing *t, uint64_t out[NPH])
{
	const uint64_t st[NPH + 1] = { t->client_submit, t->received,   t->handoff,
				       t->device_start,  t->device_end, t->client_received };
	for (int k = 0; k < NPH; k++)
		out[k] = st[k + 1] > st[k] ? st[k + 1] - st[k] : 0;
}

static int client_cpu = 0, floor_cpu = 1;

static void pin(int cpu)
{
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(0, sizeof(s), &s) < 0)
		perror("sched_setaffinity");
}

static void idle_for(uint64_t ns)
{
	if (!ns)
		return;
	struct timespec ts = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

static long futex(atomic_uint *w, int op, unsigned v)
{
	return syscall(SYS_futex, w, op, v, NULL, NULL, 0);
}

/* One floor chunk: a child pinned to floor_cpu answers n hand-offs; each
 * sample is one round trip after gap.  kind 1 futex, 2 socket, 3 spin. */
static void floor_chunk(int kind, int n, uint64_t gap, uint64_t *out)
{
	atomic_uint *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int sv[2] = { -1, -1 };
	if (w == MAP_FAILED || (kind == 2 && socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)) {
		perror("floor");
		exit(1);
	}
	atomic_store(w, 0);
	pid_t pid = fork();
	if (pid == 0) {
		pin(floor_cpu);
		for (unsigned i = 0; i < (unsigned)n; i++) {
			unsigned want = 2 * i + 1;
			if (kind == 2) {
				char c;
				if (read(sv[1], &c, 1) != 1 || write(sv[1], &c, 1) != 1)
					_exit(1);
				continue;
			}
			while (atomic_load(w) != want)
				if (kind == 1)
					futex(w, FUTEX_WAIT, want - 1);
			atomic_store(w, want + 1);
			if (kind == 1)
				futex(w, FUTEX_WAKE, 1);
		}
		_exit(0);
	}
	/* Both sides pinned, whether devq's client is or not. */
	cpu_set_t mine;
	sched_getaffinity(0, sizeof(mine), &mine);
	pin(client_cpu);
	idle_for(1000000); /* the child settles (and sleeps) */
	for (int i = 0; i < n; i++) {
		idle_for(gap);
		unsigned v = 2 * (unsigned)i;
		uint64_t t0 = bu_now_ns();
		if (kind == 2) {
			char c = 1;
			if (write(sv[0], &c, 1) != 1 || read(sv[0], &c, 1) != 1)
				exit(1);
		} else {
			atomic_store(w, v + 1);
			if (kind == 1)
				futex(w, FUTEX_WAKE, 1);
			while (atomic_load(w) != v + 2)
				if (kind == 1)
					futex(w, FUTEX_WAIT, v + 1);
		}
		out[i] = bu_now_ns() - t0;
	}
	waitpid(pid, NULL, 0);
	sched_setaffinity(0, sizeof(mine), &mine);
	if (sv[0] >= 0) {
		close(sv[0]);
		close(sv[1]);
	}
	munmap(w, 4096);
}

/* Voluntary context switches of every thread of pid, summed. */
static unsigned long long daemon_vcsw(pid_t pid)
{
	char path[64], line[256];
	unsigned long long sum = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *dir = opendir(path);
	if (!dir)
		return 0;
	struct dirent *e;
	while ((e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		char p2[128];
		snprintf(p2, sizeof(p2), "%s/%.20s/status", path, e->d_name);
		FILE *f = fopen(p2, "r");
		if (!f)
			continue;
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "voluntary_ctxt_switches:", 24))
				sum += strtoull(line + 24, NULL, 10);
		fclose(f);
	}
	closedir(dir);
	return sum;
}

/* 20 gemm_f32 256^3 ops on one queue, each waited for: the ones that ran
 * and completed, 0 where gemm_f32 is not served (no host library). */
static int gemm_calls(const struct bu_daemon *d)
{
	const uint64_t n = 256;
	devq *q;
	const struct devq_exec *g;
	struct devq_buffer *b[3] = { NULL };
	int done = 0;
	if (devq_connect(d->sock, "sporadic-gemm", &q) < 0)
		return 0;
	if (devq_exec_lookup(q, "gemm_f32", &g) < 0 || devq_queue_open(q, 1) < 0)
		goto out;
	for (int i = 0; i < 3; i++)
		if (devq_buffer_create(q, n * n * 4, DEVQ_BUFFER_SHARED, &b[i]) < 0)
			goto out;
	struct devq_arg a[] = {
		{ .name = "m", .type = DEVQ_ARG_U64, .v.u64 = n },
		{ .name = "n", .type = DEVQ_ARG_U64, .v.u64 = n },
		{ .name = "k", .type = DEVQ_ARG_U64, .v.u64 = n },
		{ .name = "alpha", .type = DEVQ_ARG_F32, .v.f32 = 1.0f },
		{ .name = "beta", .type = DEVQ_ARG_F32, .v.f32 = 0.0f },
		{ .name = "a", .type = DEVQ_ARG_BUFFER, .v.buf = { b[0], 0 } },
		{ .name = "b", .type = DEVQ_ARG_BUFFER, .v.buf = { b[1], 0 } },
		{ .name = "c", .type = DEVQ_ARG_BUFFER, .v.buf = { b[2], 0 } },
	};
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = g, .args = a,
			      .nargs = 8 };
	for (int i = 0; i < 20; i++) {
		uint64_t p;
		struct devq_completion c;
		if (devq_submit(q, &op, 1, &p) < 0 || devq_wait(q, 1, p, 60000, &c) < 0 ||
		    c.code != DEVQ_OK)
			break;
		done++;
	}
out:
	for (int i = 0; i < 3; i++)
		if (b[i])
			devq_buffer_release(q, b[i]);
	devq_disconnect(q);
	return done;
}

/* utime + stime of pid (all threads), in clock ticks. */
static unsigned long long daemon_ticks(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	unsigned long long ut = 0, st = 0;
	if (p)
		sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st);
	return ut + st;
}

int main(int argc, char **argv)
{
	int runs = 5, nops = 300, daemon_cpu = -1;
	const char *tag = "run";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			runs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--ops") && i + 1 < argc)
			nops = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--daemon-cpu") && i + 1 < argc)
			daemon_cpu = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--client-cpu") && i + 1 < argc)
			client_cpu = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--tag") && i + 1 < argc)
			tag = argv[++i];
		else {
			fprintf(stderr, "usage: sporadic [--runs R] [--ops N] [--daemon-cpu C "
					"--client-cpu C] [--tag T]\n");
			return 2;
		}
	}
	if (nops < CHUNK || runs < 1)
		return 2;
	nops -= nops % CHUNK;
	if (daemon_cpu >= 0)
		floor_cpu = daemon_cpu;
	/* The daemon inherits the affinity it is started with. */
	if (daemon_cpu >= 0)
		pin(daemon_cpu);
	struct bu_daemon d;
	if (bu_daemon_start(&d) < 0) {
		fprintf(stderr, "cannot start devqd\n");
		return 1;
	}
	if (daemon_cpu >= 0)
		pin(client_cpu);
	bu_print_host();
	printf("sporadic (%s): devqd %s, client %s; %d runs, first %d ops of a connection per "
	       "gap, chunks of %d interleaved with the floors (pinned to CPUs %d and %d)\n",
	       tag, daemon_cpu >= 0 ? "confined to one CPU" : "unconfined",
	       daemon_cpu >= 0 ? "pinned" : "unpinned", runs, nops, CHUNK, client_cpu, floor_cpu);
	struct bu_json j;
	char jname[64];
	snprintf(jname, sizeof(jname), "sporadic-%s", tag);
	bool json = bu_json_open(&j, jname) == 0;
	if (json) {
		bu_json_host(&j);
		bu_json_key_str(&j, "mode", daemon_cpu >= 0 ? "confined" : "unconfined");
		bu_json_key_num(&j, "ops", nops);
		bu_json_begin_array(&j, "results");
	}
	uint64_t *s[NSER];
	uint64_t *ph[NPH];
	for (int k = 0; k < NSER; k++)
		s[k] = calloc((size_t)nops, sizeof(uint64_t));
	for (int k = 0; k < NPH; k++)
		ph[k] = calloc((size_t)nops, sizeof(uint64_t));
	for (int k = 0; k < NSER || k < NPH; k++)
		if ((k < NSER && !s[k]) || (k < NPH && !ph[k])) {
			fprintf(stderr, "sporadic: out of memory\n");
			return 1;
		}
	int meet[NGAPS] = { 0 };
	double csw_sum[NGAPS] = { 0 };
	printf("%-4s %-6s %9s %9s %9s %9s %9s %9s %9s %9s %8s %8s %7s\n", "run", "gap", "devq p50",
	       "p99", "futex p50", "p99", "sock p50", "p99", "spin p50", "p99", "p50/fx", "p99/fx",
	       "csw/op");
	for (int r = 0; r < runs; r++) {
		for (int g = 0; g < NGAPS; g++) {
			devq *q;
			const struct devq_exec *spin;
			if (devq_connect(d.sock, "sporadic", &q) < 0 ||
			    devq_exec_lookup(q, "spin", &spin) < 0 || devq_queue_open(q, 1) < 0) {
				fprintf(stderr, "connect failed\n");
				return 1;
			}
			struct devq_arg a = { .name = "ns", .type = DEVQ_ARG_U64, .v.u64 = 0 };
			struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = spin,
					      .args = &a, .nargs = 1 };
			unsigned long long csw = 0;
			for (int c = 0; c < nops / CHUNK; c++) {
				/* The order turns each chunk, so no series always
				 * follows the same one. */
				for (int kk = 0; kk < NSER; kk++) {
					int k = (kk + c) % NSER;
					uint64_t *out = s[k] + c * CHUNK;
					if (k) {
						floor_chunk(k, CHUNK, gaps_ns[g], out);
						continue;
					}
					idle_for(1000000);
					unsigned long long c0 = daemon_vcsw(d.pid);
					for (int i = 0; i < CHUNK; i++) {
						idle_for(gaps_ns[g]);
						uint64_t p, t0 = bu_now_ns(), one[NPH];
						struct devq_completion cm;
						if (devq_submit(q, &op, 1, &p) < 0 ||
						    devq_wait(q, 1, p, -1, &cm) < 0) {
							fprintf(stderr, "op: %s\n", devq_last_error(q));
							return 1;
						}
						out[i] = bu_now_ns() - t0;
						phases(&cm.t, one);
						for (int k = 0; k < NPH; k++)
							ph[k][c * CHUNK + i] = one[k];
					}
					csw += daemon_vcsw(d.pid) - c0;
				}
			}
			devq_disconnect(q);
			uint64_t p50[NSER], p99[NSER];
			for (int k = 0; k < NSER; k++) {
				bu_sort(s[k], (size_t)nops);
				p50[k] = bu_quantile(s[k], (size_t)nops, 0.50);
				p99[k] = bu_quantile(s[k], (size_t)nops, 0.99);
			}
			uint64_t ph50[NPH];
			for (int k = 0; k < NPH; k++) {
				bu_sort(ph[k], (size_t)nops);
				ph50[k] = bu_quantile(ph[k], (size_t)nops, 0.50);
			}
			double r50 = (double)p50[0] / (double)p50[1];
			double r99 = (double)p99[0] / (double)p99[1];
			double cpo = (double)csw / nops;
			csw_sum[g] += cpo;
			meet[g] += r50 <= 1.2 && r99 <= 1.5;
			printf("%-4d %-6s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %8.2f %8.2f "
			       "%7.2f\n",
			       r + 1, g == 0 ? "0" : g == 1 ? "1ms" : "10ms", p50[0] / 1e3,
			       p99[0] / 1e3, p50[1] / 1e3, p99[1] / 1e3, p50[2] / 1e3, p99[2] / 1e3,
			       p50[3] / 1e3, p99[3] / 1e3, r50, r99, cpo);
			printf("     devq p50 by phase (us): to read %.1f, read to handoff %.1f, "
			       "handoff to start %.1f, op %.1f, end to client %.1f\n",
			       ph50[0] / 1e3, ph50[1] / 1e3, ph50[2] / 1e3, ph50[3] / 1e3,
			       ph50[4] / 1e3);
			fflush(stdout);
			if (json) {
				bu_json_begin_obj(&j);
				bu_json_key_num(&j, "run", r + 1);
				bu_json_key_num(&j, "gap_us", (double)gaps_ns[g] / 1e3);
				for (int k = 0; k < NSER; k++) {
					char key[32];
					snprintf(key, sizeof(key), "%s_p50_us", ser_name[k]);
					bu_json_key_num(&j, key, p50[k] / 1e3);
					snprintf(key, sizeof(key), "%s_p99_us", ser_name[k]);
					bu_json_key_num(&j, key, p99[k] / 1e3);
				}
				bu_json_key_num(&j, "p50_over_futex", r50);
				bu_json_key_num(&j, "p99_over_futex", r99);
				bu_json_key_num(&j, "daemon_vcsw_per_op", cpo);
				for (int k = 0; k < NPH; k++) {
					char key[48];
					snprintf(key, sizeof(key), "devq_%s_p50_us", ph_name[k]);
					bu_json_key_num(&j, key, ph50[k] / 1e3);
				}
				bu_json_end_obj(&j);
			}
		}
	}
	/* Idle: nothing connected, 10 s, after gemm calls (host executables
	 * on OpenBLAS: neither its threads nor devq's gemm helpers may spin
	 * on after them). */
	int gemms = gemm_calls(&d);
	idle_for(500000000);
	unsigned long long t0 = daemon_ticks(d.pid), v0 = daemon_vcsw(d.pid);
	uint64_t w0 = bu_now_ns();
	idle_for(10000000000ull);
	double secs = (double)(bu_now_ns() - w0) / 1e9;
	double idle_pct = (double)(daemon_ticks(d.pid) - t0) / (double)sysconf(_SC_CLK_TCK) / secs * 100;
	unsigned long long idle_csw = daemon_vcsw(d.pid) - v0;
	printf("runs meeting p50 <= 1.2x and p99 <= 1.5x the futex floor: gap 0: %d/%d, 1ms: %d/%d, "
	       "10ms: %d/%d\n",
	       meet[0], runs, meet[1], runs, meet[2], runs);
	printf("daemon voluntary context switches per op (mean of runs): gap 0: %.2f, 1ms: %.2f, "
	       "10ms: %.2f\n",
	       csw_sum[0] / runs, csw_sum[1] / runs, csw_sum[2] / runs);
	printf("idle daemon over %.1f s, after %d gemm_f32 calls: %.2f %% of one core, %llu "
	       "voluntary context switches\n",
	       secs, gemms, idle_pct, idle_csw);
	if (json) {
		bu_json_end_array(&j);
		for (int g = 0; g < NGAPS; g++) {
			char key[48];
			snprintf(key, sizeof(key), "runs_meeting_gap%d", g);
			bu_json_key_num(&j, key, meet[g]);
			snprintf(key, sizeof(key), "vcsw_per_op_gap%d", g);
			bu_json_key_num(&j, key, csw_sum[g] / runs);
		}
		bu_json_key_num(&j, "idle_after_gemm_calls", gemms);
		bu_json_key_num(&j, "idle_cpu_pct", idle_pct);
		bu_json_key_num(&j, "idle_vcsw", (double)idle_csw);
		bu_json_close(&j);
	}
	for (int k = 0; k < NSER; k++)
		free(s[k]);
	for (int k = 0; k < NPH; k++)
		free(ph[k]);
	return bu_daemon_stop(&d) == 0 ? 0 : 1;
}
