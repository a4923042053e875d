/* SPDX-License-Identifier: Apache-2.0 */
/* devctl end to end: the command forms external checks drive, against a
 * real devqd. */
#include <check.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kernels.h"

static struct daemon_proc D;

static void setup(void)
{
	harness_start(&D, (const char *const[]){ "--max-op-ms", "1000", NULL });
}

static void teardown(void)
{
	if (D.pid > 0)
		ck_assert_int_eq(harness_stop(&D), 0);
}

/* Runs devctl with args (a shell fragment); returns its exit status and
 * its stdout in out. */
static int devctl(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int devctl(char *out, size_t n, const char *fmt, ...)
{
	char args[2048], cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s --socket %s %s", harness_bin("devctl"), D.sock, args);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t got = fread(out, 1, n - 1, p);
	out[got] = '\0';
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The number after "key": in a JSON text (enough for devctl's flat output). */
static uint64_t json_u64(const char *js, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "\"%s\":", key);
	const char *p = strstr(js, pat);
	ck_assert_msg(p != NULL, "no %s in %s", key, js);
	return strtoull(p + strlen(pat), NULL, 10);
}

static void json_str_eq(const char *js, const char *key, const char *want)
{
	char pat[128];
	snprintf(pat, sizeof(pat), "\"%s\":\"%s\"", key, want);
	ck_assert_msg(strstr(js, pat) != NULL, "%s is not \"%s\" in %s", key, want, js);
}

START_TEST(test_submit_spin_json)
{
	char out[4096];
	/* Lower bound and the phases' sum on every run; the upper bounds on
	 * the best of three, so a run descheduled on a loaded machine does not
	 * fail it (see test_spin_timing). */
	uint64_t best_dev = UINT64_MAX, best_sub = UINT64_MAX;
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(devctl(out, sizeof(out), "submit spin ns=5000000 --json"), 0);
		json_str_eq(out, "status", "ok");
		ck_assert_ptr_nonnull(strstr(out, "\"point\":[0,1]"));
		uint64_t dev = json_u64(out, "device_ns"), sub = json_u64(out, "submit_ns");
		ck_assert_msg(dev >= 4500000, "device_ns %" PRIu64, dev);
		best_dev = dev < best_dev ? dev : best_dev;
		best_sub = sub < best_sub ? sub : best_sub;
		uint64_t sum = json_u64(out, "submit_ns") + json_u64(out, "queued_ns") +
			       json_u64(out, "device_ns") + json_u64(out, "sync_ns");
		ck_assert_uint_eq(sum, json_u64(out, "total_ns"));
		/* exactly one line, one object */
		ck_assert_ptr_eq(strchr(out, '\n'), out + strlen(out) - 1);
	}
	if (getenv("DEVQ_VALGRIND"))
		printf("SKIP: devctl device_ns within 10%% of 5 ms (valgrind): %" PRIu64 "\n",
		       best_dev);
	else
		ck_assert_msg(best_dev <= 5500000, "device_ns %" PRIu64 " (best of 3)", best_dev);
	if (harness_slow())
		printf("SKIP: devctl submit_ns < 1 ms (sanitizer/valgrind build): %" PRIu64 "\n",
		       best_sub);
	else
		ck_assert_msg(best_sub < 1000000, "submit_ns %" PRIu64 " (best of 3)", best_sub);
}
END_TEST

START_TEST(test_submit_repeat_queue)
{
	char out[16384];
	ck_assert_int_eq(devctl(out, sizeof(out), "submit spin ns=1000 --queue 3 --repeat 5 --json"), 0);
	for (int k = 1; k <= 5; k++) {
		char pt[32];
		snprintf(pt, sizeof(pt), "\"point\":[3,%d]", k);
		ck_assert_msg(strstr(out, pt) != NULL, "missing %s in %s", pt, out);
	}
}
END_TEST

START_TEST(test_list)
{
	char out[8192];
	ck_assert_int_eq(devctl(out, sizeof(out), "list"), 0);
	for (size_t i = 0; i < devq_nkernels; i++) {
		char line[300];
		if (devq_kernels[i].test_only) {
			snprintf(line, sizeof(line), "%s(", devq_kernels[i].name);
			ck_assert_msg(strstr(out, line) == NULL, "list shows test-only %s", line);
			continue;
		}
		snprintf(line, sizeof(line), "%s(%s)\n", devq_kernels[i].name, devq_kernels[i].signature);
		ck_assert_msg(strstr(out, line) != NULL, "list lacks %s", line);
	}
	ck_assert_ptr_nonnull(strstr(out, "saxpy_f32(n:u64, a:f32, x:in f32[n], y:inout f32[n])"));
	ck_assert_int_eq(devctl(out, sizeof(out), "list --json"), 0);
	ck_assert_ptr_nonnull(strstr(out, "\"name\":\"checksum\""));
}
END_TEST

START_TEST(test_files_in_and_out)
{
	char in[128], outf[128], out[4096];
	snprintf(in, sizeof(in), "%s/in.bin", D.dir);
	snprintf(outf, sizeof(outf), "%s/out.bin", D.dir);
	FILE *f = fopen(in, "wb");
	uint8_t data[10000];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)devq_mix64(i);
	fwrite(data, 1, sizeof(data), f);
	fclose(f);
	ck_assert_int_eq(devctl(out, sizeof(out), "submit copy n=10000 src=@%s dst=size:10000 --out dst=%s",
				in, outf), 0);
	f = fopen(outf, "rb");
	ck_assert_ptr_nonnull(f);
	uint8_t back[10001];
	ck_assert_uint_eq(fread(back, 1, sizeof(back), f), sizeof(data));
	fclose(f);
	ck_assert_int_eq(memcmp(back, data, sizeof(data)), 0);

	/* checksum prints its result; n inferred from the file's size */
	uint64_t want = 0;
	for (size_t i = 0; i < sizeof(data); i++)
		want += devq_mix64(((uint64_t)i << 8) | data[i]);
	ck_assert_int_eq(devctl(out, sizeof(out), "submit checksum data=@%s", in), 0);
	char w[64];
	snprintf(w, sizeof(w), "out = %" PRIu64 " ", want);
	ck_assert_msg(strstr(out, w) != NULL, "want %s in %s", w, out);
}
END_TEST

START_TEST(test_dependent_pair_two_queues)
{
	char out[4096];
	int rc = devctl(out, sizeof(out),
			"submit spin_buf ns=20000000 buf=size:4096 --queue 1 :: "
			"checksum data=%%buf --queue 2 --wait 1:1 --json");
	ck_assert_msg(rc == 0, "rc %d: %s", rc, out);
	ck_assert_ptr_nonnull(strstr(out, "\"point\":[1,1]"));
	ck_assert_ptr_nonnull(strstr(out, "\"point\":[2,1]"));
	/* The consumer waited: its queued phase covers the producer's 20 ms. */
	const char *c = strstr(out, "\"point\":[2,1]");
	const char *line = c;
	while (line > out && line[-1] != '\n')
		line--;
	ck_assert_uint_ge(json_u64(line, "queued_ns"), 15000000);
}
END_TEST

START_TEST(test_failures_exit_status)
{
	char out[4096];
	/* y too small for n inferred from x: out_of_range naming y, exit 1 */
	ck_assert_int_eq(devctl(out, sizeof(out),
				"submit saxpy_f32 a=2 x=size:400 y=size:100 --json"), 1);
	json_str_eq(out, "status", "out_of_range");
	ck_assert_ptr_nonnull(strstr(out, "argument 'y'"));
	/* over the admin maximum op duration (1000 ms here) */
	ck_assert_int_eq(devctl(out, sizeof(out), "submit spin ns=2000000000 --json"), 1);
	json_str_eq(out, "status", "out_of_range");
	ck_assert_ptr_nonnull(strstr(out, "maximum op duration"));
	/* usage errors: exit 2 */
	ck_assert_int_eq(devctl(out, sizeof(out), "submit no_such_kernel 2>/dev/null"), 2);
	ck_assert_int_eq(devctl(out, sizeof(out), "submit spin nss=5 2>/dev/null"), 2);
	ck_assert_int_eq(devctl(out, sizeof(out), "submit spin ns=-1 2>/dev/null"), 2);
	ck_assert_int_eq(devctl(out, sizeof(out), "frobnicate 2>/dev/null"), 2);
	/* no daemon there: exit 3 */
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s --socket %s/nothing submit spin ns=1 2>/dev/null",
		 harness_bin("devctl"), D.dir);
	int st = system(cmd);
	ck_assert_int_eq(WEXITSTATUS(st), 3);
}
END_TEST

/* An op after a failed one on its queue fails dependency_failed, with
 * devctl's way past it; with --reset it runs.  devqd names the queue and
 * its first failed point whether op 1's failure was known when op 2 came
 * or learnt when op 2 was due (here: the same frame, so the latter); an
 * op of another queue that waits on it explicitly gets the cause. */
START_TEST(test_failed_queue_reset)
{
	char out[4096];
	ck_assert_int_eq(devctl(out, sizeof(out), "submit spin ns=2000000000 :: spin ns=1"), 1);
	ck_assert_msg(strstr(out, "spin queue 0 point 2: dependency_failed: queue 0 failed at point 1 "
				  "(an earlier point); reset it") &&
			      strstr(out, "(devctl: --reset on an op runs it although an earlier "
					  "op on its queue failed)"),
		      "%s", out);
	ck_assert_int_eq(devctl(out, sizeof(out),
				"submit spin ns=2000000000 :: spin ns=1 --queue 1 --wait 0:1"), 1);
	ck_assert_msg(strstr(out, "spin queue 1 point 1: dependency_failed: ") &&
			      !strstr(out, "queue 1 failed at") &&
			      (strstr(out, "an op it waits on failed: argument 'ns'") ||
			       strstr(out, "waits on queue 0 point 1, which failed")),
		      "%s", out);
	ck_assert_int_eq(devctl(out, sizeof(out),
				"submit spin ns=2000000000 :: spin ns=1 --reset"), 1);
	ck_assert_msg(strstr(out, "spin queue 0 point 2: ok"), "%s", out);
}
END_TEST

/* The "out" result of the checksum line in devctl's --json output. */
static uint64_t checksum_out(const char *out)
{
	const char *c = strstr(out, "{\"exec\":\"checksum\"");
	ck_assert_msg(c != NULL, "no checksum line in %s", out);
	json_str_eq(c, "status", "ok");
	const char *r = strstr(c, "\"out\":[");
	ck_assert_msg(r != NULL, "no checksum result in %s", c);
	return strtoull(r + 7, NULL, 10);
}

/* --deadline-ms: 5 ms behind 50 ms of work, the fill never runs (the
 * checksum after it, ordered by the buffer, sees zeros) and its queue's
 * next op fails with it; 500 ms behind the same work, it runs. */
START_TEST(test_submit_deadline)
{
	char out[8192];
	ck_assert_int_eq(devctl(out, sizeof(out), "submit checksum data=size:64 --json"), 0);
	uint64_t zeros = checksum_out(out);
	int rc = devctl(out, sizeof(out),
			"submit spin ns=50000000 :: fill_u32 n=16 value=7 dst=size:64 "
			"--deadline-ms 5 :: spin ns=1 :: checksum data=%%dst --queue 1 --json");
	ck_assert_msg(rc == 1, "rc %d: %s", rc, out);
	const char *f = strstr(out, "{\"exec\":\"fill_u32\"");
	ck_assert_msg(f != NULL, "%s", out);
	json_str_eq(f, "status", "deadline_exceeded");
	ck_assert_msg(strstr(f, "deadline of 5000 us"), "%s", f);
	/* The op after it on its queue: the line of point (0, 3). */
	const char *p3 = strstr(out, "\"point\":[0,3]");
	ck_assert_msg(p3 != NULL, "%s", out);
	while (p3 > out && p3[-1] != '\n')
		p3--;
	char line[1024];
	snprintf(line, sizeof(line), "%.*s", (int)strcspn(p3, "\n"), p3);
	json_str_eq(line, "status", "dependency_failed");
	ck_assert_uint_eq(checksum_out(out), zeros);
	rc = devctl(out, sizeof(out),
		    "submit spin ns=50000000 :: fill_u32 n=16 value=7 dst=size:64 "
		    "--deadline-ms 500 :: checksum data=%%dst --queue 1 --json");
	ck_assert_msg(rc == 0, "rc %d: %s", rc, out);
	ck_assert_uint_ne(checksum_out(out), zeros);
	/* Usage: a whole number of milliseconds, at least 1. */
	ck_assert_int_eq(devctl(out, sizeof(out), "submit spin ns=1 --deadline-ms 0 2>/dev/null"),
			 2);
	ck_assert_int_eq(devctl(out, sizeof(out), "submit spin ns=1 --deadline-ms 1.5 2>/dev/null"),
			 2);
	ck_assert_int_eq(devctl(out, sizeof(out), "submit spin ns=1 --deadline-ms 2>/dev/null"), 2);
}
END_TEST

START_TEST(test_status_after)
{
	char out[8192];
	ck_assert_int_eq(devctl(out, sizeof(out), "submit fill_u32 n=1000 value=7 dst=size:4000 --repeat 3"), 0);
	ck_assert_int_eq(devctl(out, sizeof(out), "status --json"), 0);
	ck_assert_uint_eq(json_u64(out, "buffers"), 0);
	ck_assert_uint_eq(json_u64(out, "ops_in_flight"), 0);
	ck_assert_uint_eq(json_u64(out, "ops_completed"), 3);
	json_str_eq(out, "backend", harness_backend());
	ck_assert_int_eq(devctl(out, sizeof(out), "status"), 0);
	ck_assert_ptr_nonnull(strstr(out, "ops in flight:  0"));
	/* The same stream count as top and trace: the high-priority one too. */
	ck_assert_msg(strstr(out, " streams + 1 high-priority\n"), "%s", out);
}
END_TEST

/* Item 1 of issue 17: a queue the daemon refuses to open must not leave
 * devctl waiting.  Each runs a daemon of its own, configured to refuse. */
static double run_timed(char *out, size_t n, int *rc, const char *args)
{
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "timeout 5 %s --socket %s %s 2>&1", harness_bin("devctl"),
		 D.sock, args);
	uint64_t t0 = harness_now_ns();
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t got = fread(out, 1, n - 1, p);
	out[got] = '\0';
	int st = pclose(p);
	*rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
	return (double)(harness_now_ns() - t0) / 1e9;
}

START_TEST(test_refused_priority_queue_fails_fast)
{
	harness_start(&D, (const char *const[]){ "--priority-streams", "0", NULL });
	char out[4096];
	int rc;
	double s = run_timed(out, sizeof(out), &rc,
			     "submit spin ns=1000 --priority high");
	ck_assert_msg(rc == 1, "rc %d: %s", rc, out);
	ck_assert_msg(s < (harness_slow() ? 4.0 : 1.0), "took %.2f s", s);
	ck_assert_msg(strstr(out, "spin queue 0 point 1: failed_precondition") != NULL, "%s", out);
	ck_assert_int_eq(harness_stop(&D), 0);
	D.pid = 0;
}
END_TEST

START_TEST(test_refused_max_queues_fails_fast)
{
	harness_start(&D, (const char *const[]){ "--max-queues", "1", NULL });
	char out[4096];
	int rc;
	double s = run_timed(out, sizeof(out), &rc,
			     "submit spin ns=1000 --queue 0 :: spin ns=1000 --queue 1 --json");
	ck_assert_msg(rc == 1, "rc %d: %s", rc, out);
	ck_assert_msg(s < (harness_slow() ? 4.0 : 1.0), "took %.2f s", s);
	ck_assert_msg(strstr(out, "\"status\":\"ok\"") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "\"status\":\"resource_exhausted\"") != NULL, "%s", out);
	ck_assert_msg(strstr(out, "\"point\":[1,1]") != NULL, "%s", out);
	ck_assert_int_eq(harness_stop(&D), 0);
	D.pid = 0;
}
END_TEST

/* ---- issue 17: truthful output, exit codes ---------------------------- */

/* Item 3: each line names the executable of its own op, with ops sharing
 * a queue. */
START_TEST(test_labels_per_op)
{
	char out[4096];
	int rc = devctl(out, sizeof(out), "submit spin ns=1000 :: fill_u32 value=3 dst=size:16 "
					  ":: spin ns=1000 --repeat 2");
	ck_assert_msg(rc == 0, "rc %d: %s", rc, out);
	ck_assert_msg(strstr(out, "spin queue 0 point 1: ok"), "%s", out);
	ck_assert_msg(strstr(out, "fill_u32 queue 0 point 2: ok"), "%s", out);
	ck_assert_msg(strstr(out, "spin queue 0 point 3: ok"), "%s", out);
	ck_assert_msg(strstr(out, "spin queue 0 point 4: ok"), "%s", out);
	/* --json names it too, with the results of small output buffers. */
	rc = devctl(out, sizeof(out), "submit spin ns=1000 :: checksum data=size:64 --json");
	ck_assert_msg(rc == 0, "rc %d: %s", rc, out);
	ck_assert_msg(strstr(out, "{\"exec\":\"spin\",\"status\":\"ok\""), "%s", out);
	ck_assert_msg(strstr(out, "{\"exec\":\"checksum\",\"status\":\"ok\""), "%s", out);
	ck_assert_msg(strstr(out, "\"results\":{\"out\":["), "%s", out);
}
END_TEST

/* Item 4: a failed op writes no --out file and shows no buffer values; an
 * --out that cannot be written is refused before anything runs. */
START_TEST(test_failed_op_writes_nothing)
{
	char out[4096], path[256];
	snprintf(path, sizeof(path), "%s/y.bin", D.dir);
	int rc = devctl(out, sizeof(out),
			"submit saxpy_f32 a=2 x=size:400 y=size:100 --out y=%s 2>/dev/null", path);
	ck_assert_msg(rc == 1, "rc %d: %s", rc, out);
	ck_assert_msg(access(path, F_OK) != 0, "%s was written", path);
	ck_assert_msg(strstr(out, "y =") == NULL, "values shown: %s", out);

	uint64_t t0 = harness_now_ns();
	rc = devctl(out, sizeof(out),
		    "submit spin_buf ns=900000000 buf=size:64 --out buf=%s/no/such/dir/f 2>&1", D.dir);
	ck_assert_msg(rc == 4, "rc %d: %s", rc, out);
	ck_assert_msg(harness_now_ns() - t0 < 800000000ull, "the op ran first");
	ck_assert_msg(strstr(out, "cannot write"), "%s", out);
	rc = devctl(out, sizeof(out), "submit spin_buf ns=1000 buf=size:64 --out buf=%s 2>&1", D.dir);
	ck_assert_msg(rc == 4, "a directory: rc %d: %s", rc, out);
}
END_TEST

/* Item 6: exit codes as devctl(1) says: a buffer the daemon refuses is 1
 * (the request failed), an output file that cannot be written 4. */
START_TEST(test_exit_codes)
{
	char out[4096];
	int rc = devctl(out, sizeof(out), "submit checksum data=size:1099511627776 2>&1");
	ck_assert_msg(rc == 1, "rc %d: %s", rc, out);
	rc = devctl(out, sizeof(out), "trace --last 5 -o %s/no/such/dir/t.json 2>&1", D.dir);
	ck_assert_msg(rc == 4, "rc %d: %s", rc, out);
	/* A buffer that is not a whole number of its elements: usage. */
	rc = devctl(out, sizeof(out), "submit fill_u32 value=3 dst=size:17 2>&1");
	ck_assert_msg(rc == 2, "rc %d: %s", rc, out);
	ck_assert_msg(strstr(out, "17 bytes"), "%s", out);
}
END_TEST

/* Item 8: data=@- reads standard input (a pipe), --out NAME=- writes the
 * buffer to standard output alone. */
START_TEST(test_stdin_stdout)
{
	char out[4096];
	int rc = devctl(out, sizeof(out), "submit checksum data=@- < /dev/null 2>&1");
	ck_assert_msg(rc == 2 && strstr(out, "empty"), "rc %d: %s", rc, out);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "printf 'abcdefgh' | %s --socket %s submit copy src=@- "
		 "dst=size:8 --out dst=- 2>/dev/null", harness_bin("devctl"), D.sock);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t got = fread(out, 1, sizeof(out) - 1, p);
	out[got] = '\0';
	ck_assert_int_eq(WEXITSTATUS(pclose(p)), 0);
	ck_assert_str_eq(out, "abcdefgh");
}
END_TEST

/* Item 8 (and 5's errors): help per command, hints, did-you-mean, errors as
 * JSON with --json, argv left as given, Ctrl-C said and acted on. */
START_TEST(test_help_hints_interrupt)
{
	char out[8192];
	ck_assert_int_eq(devctl(out, sizeof(out), "submit --help"), 0);
	ck_assert_ptr_nonnull(strstr(out, "submit EXEC"));
	ck_assert_int_eq(devctl(out, sizeof(out), "top --help"), 0);
	ck_assert_ptr_nonnull(strstr(out, "top [--once]"));
	int rc = devctl(out, sizeof(out), "submit sax a=2 2>&1");
	ck_assert_msg(rc == 2 && strstr(out, "did you mean saxpy_f32?"), "rc %d: %s", rc, out);
	rc = devctl(out, sizeof(out), "submit spin nss=1 --json 2>&1 >/dev/null");
	ck_assert_msg(rc == 2 && !strncmp(out, "{\"error\":\"spin has no argument 'nss'", 35),
		      "rc %d: %s", rc, out);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "%s --socket %s/nothing list 2>&1", harness_bin("devctl"), D.dir);
	FILE *p = popen(cmd, "r");
	size_t got = fread(out, 1, sizeof(out) - 1, p);
	out[got] = '\0';
	ck_assert_int_eq(WEXITSTATUS(pclose(p)), 3);
	ck_assert_msg(strstr(out, "is devqd running?"), "%s", out);
	/* No permission on the socket: the hint names what grants it (the
	 * socket's group), not a devqd flag that does not exist. */
	snprintf(cmd, sizeof(cmd),
		 "setpriv --reuid=65534 --regid=65534 --clear-groups %s --socket %s list 2>&1",
		 harness_bin("devctl"), D.sock);
	p = popen(cmd, "r");
	got = fread(out, 1, sizeof(out) - 1, p);
	out[got] = '\0';
	ck_assert_int_eq(WEXITSTATUS(pclose(p)), 3);
	ck_assert_msg(strstr(out, "usermod -aG devq") && !strstr(out, "--socket-group"), "%s", out);
	ck_assert_msg(!strstr(strstr(out, "usermod") + 1, "usermod"), "the hint twice: %s", out);
	rc = devctl(out, sizeof(out),
		    "submit spin ns=900000000 2>&1 & p=$!; sleep 0.3; tr '\\0' ' ' < /proc/$p/cmdline; "
		    "echo; kill -INT $p; wait $p; echo rc=$?");
	ck_assert_msg(strstr(out, "ns=900000000"), "argv edited: %s", out);
	ck_assert_msg(strstr(out, "interrupted with 1 of 1 ops not complete"), "%s", out);
	ck_assert_msg(strstr(out, "rc=130"), "%s", out);
}
END_TEST

/* Item 8: messages a person can read: a bad --last names its range as a
 * count, a buffer preview cut at 8 values says so. */
START_TEST(test_small_messages)
{
	char out[4096];
	int rc = devctl(out, sizeof(out), "trace --last abc -o - 2>&1");
	ck_assert_msg(rc == 2 && strstr(out, "'abc' is not a number in 0..4194304"), "rc %d: %s",
		      rc, out);
	rc = devctl(out, sizeof(out), "submit fill_u32 value=3 dst=size:40");
	ck_assert_msg(rc == 0 && strstr(out, "dst = 3 3 3 3 3 3 3 3 ...\n"), "rc %d: %s", rc, out);
}
END_TEST

/* Runs a shell command; its exit status, and its stdout in out. */
static int shell(char *out, size_t n, const char *cmd)
{
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t got = fread(out, 1, n - 1, p);
	out[got] = '\0';
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void bind_socket(const char *path)
{
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	close(fd);
}

/* devctl cdi generate: the spec containers get devqd's sockets from. */
START_TEST(test_cdi_generate)
{
	static char out[16384];
	char cmd[1024], want[1024];
	/* --socket: that one socket is gpu0, and all. */
	ck_assert_int_eq(devctl(out, sizeof(out), "cdi generate --output -"), 0);
	ck_assert_ptr_nonnull(strstr(out, "cdiVersion: \"0.5.0\"\nkind: \"devq.dev/gpu\"\n"));
	snprintf(want, sizeof(want),
		 "  - name: \"gpu0\"\n    containerEdits:\n      env:\n        - \"DEVQ_SOCKET=%s\"\n",
		 D.sock);
	ck_assert_msg(strstr(out, want) != NULL, "%s", out);
	snprintf(want, sizeof(want), "        - hostPath: \"%s\"\n          containerPath: \"%s\"\n",
		 D.sock, D.sock);
	ck_assert_msg(strstr(out, want) != NULL, "%s", out);
	ck_assert_ptr_nonnull(strstr(out, "  - name: \"all\"\n"));
	ck_assert_ptr_null(strstr(out, "gpu1"));

	/* --socket-dir: devqd@N's sockets by N; a file that is no socket, or
	 * a name that is not gpuN.sock, is not a GPU. */
	char dir[] = "/tmp/devq-cdi-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd), "%s cdi generate --socket-dir %s -o -", harness_bin("devctl"), dir);
	ck_assert_int_eq(shell(out, sizeof(out), cmd), 0);
	snprintf(want, sizeof(want), "\"DEVQ_SOCKET=%s/devqd.sock\"", dir);
	ck_assert_msg(strstr(out, want) != NULL, "no instances: devqd.service's socket: %s", out);
	char p[512];
	snprintf(p, sizeof(p), "%s/gpu2.sock", dir);
	bind_socket(p);
	snprintf(p, sizeof(p), "%s/gpu0.sock", dir);
	bind_socket(p);
	snprintf(p, sizeof(p), "%s/gpux.sock", dir);
	bind_socket(p);
	snprintf(p, sizeof(p), "%s/gpu1.sock", dir);
	FILE *f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "%s cdi generate --socket-dir %s --output %s/etc/cdi/devq.yaml",
		 harness_bin("devctl"), dir, dir);
	ck_assert_int_eq(shell(out, sizeof(out), cmd), 0);
	snprintf(p, sizeof(p), "%s/etc/cdi/devq.yaml", dir);
	struct stat st;
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0644);
	f = fopen(p, "r");
	ck_assert_ptr_nonnull(f);
	size_t got = fread(out, 1, sizeof(out) - 1, f);
	out[got] = '\0';
	fclose(f);
	ck_assert_msg(strstr(out, "name: \"gpu0\"") && strstr(out, "name: \"gpu2\"") &&
			      !strstr(out, "gpu1") && !strstr(out, "gpux") &&
			      strstr(out, "gpu0\"") < strstr(out, "gpu2\""),
		      "%s", out);
	snprintf(want, sizeof(want), "\"DEVQ_SOCKETS=%s/gpu0.sock,%s/gpu2.sock\"", dir, dir);
	ck_assert_msg(strstr(out, want) != NULL, "%s", out);

	/* Usage errors: exit status 2. */
	ck_assert_int_eq(devctl(out, sizeof(out), "cdi generate --bogus 2>/dev/null"), 2);
	ck_assert_int_eq(devctl(out, sizeof(out), "cdi generate --output 2>/dev/null"), 2);
	ck_assert_int_eq(devctl(out, sizeof(out), "cdi frob 2>/dev/null"), 2);
	ck_assert_int_eq(devctl(out, sizeof(out), "cdi 2>/dev/null"), 2);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("devctl");
	TCase *t = tcase_create("devctl");
	tcase_set_timeout(t, harness_slow() ? 300 : 60);
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, test_submit_spin_json);
	tcase_add_test(t, test_submit_repeat_queue);
	tcase_add_test(t, test_list);
	tcase_add_test(t, test_files_in_and_out);
	tcase_add_test(t, test_dependent_pair_two_queues);
	tcase_add_test(t, test_failures_exit_status);
	tcase_add_test(t, test_failed_queue_reset);
	tcase_add_test(t, test_status_after);
	tcase_add_test(t, test_submit_deadline);
	tcase_add_test(t, test_labels_per_op);
	tcase_add_test(t, test_failed_op_writes_nothing);
	tcase_add_test(t, test_exit_codes);
	tcase_add_test(t, test_stdin_stdout);
	tcase_add_test(t, test_help_hints_interrupt);
	tcase_add_test(t, test_small_messages);
	tcase_add_test(t, test_cdi_generate);
	suite_add_tcase(s, t);
	TCase *own = tcase_create("own_daemon");
	tcase_set_timeout(own, harness_slow() ? 300 : 60);
	tcase_add_test(own, test_refused_priority_queue_fails_fast);
	tcase_add_test(own, test_refused_max_queues_fails_fast);
	suite_add_tcase(s, own);
	return s;
}

int main(void)
{
	return harness_main(suite());
}
