/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA backend's logic that needs no GPU: loading the driver (none,
 * the toolkit's stub, a library that is not a driver), backend choice and
 * its messages in a real devqd, and the arithmetic that maps device event
 * times onto CLOCK_MONOTONIC, with its error bound. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/cuda/cuda_time.h"
#include "device/cuda/graph_cache.h"
#include "devq.h"
#include "harness.h"
#include "kernels.h"
#ifdef DEVQ_HAVE_CUDA
#include "device/cuda/cuda_drv.h"
#endif

#define STUB "/usr/local/cuda/lib64/stubs/libcuda.so"

/* ---- calibration arithmetic ------------------------------------------ */

START_TEST(test_cal_basic)
{
	struct devq_cal c;
	devq_cuda_time_update(&c, NULL, 1000000, 1004000, 0);
	ck_assert(c.valid);
	ck_assert_uint_eq(c.host_ns, 1002000);
	ck_assert_uint_eq(c.half_ns, 2000);
	ck_assert(c.rate == 1.0);
	ck_assert_uint_eq(devq_cuda_time_map(&c, 1.5f), 1002000 + 1500000);
	ck_assert_uint_eq(devq_cuda_time_map(&c, -0.5f), 1002000 - 500000);
	ck_assert_uint_eq(devq_cuda_time_map(&c, -5.0f), 0); /* before the epoch */
	/* The bound: half bracket + timer resolution + float + rate terms. */
	uint64_t e = devq_cuda_time_error_ns(&c, 0.0f);
	ck_assert_uint_eq(e, 2000 + DEVQ_CAL_RESOLUTION_NS);
	ck_assert_uint_gt(devq_cuda_time_error_ns(&c, 1000.0f), e + 1000000000.0 * DEVQ_CAL_RATE_ERR);
	ck_assert(!devq_cuda_time_stale(&c, 1002000 + DEVQ_CAL_PERIOD_NS - 1));
	ck_assert(devq_cuda_time_stale(&c, 1002000 + DEVQ_CAL_PERIOD_NS));
	struct devq_cal none = { 0 };
	ck_assert(devq_cuda_time_stale(&none, 5));
	ck_assert_uint_eq(devq_cuda_time_map(&none, 1.0f), 0);
}
END_TEST

START_TEST(test_cal_rate)
{
	struct devq_cal a, b, c;
	devq_cuda_time_update(&a, NULL, 10000000000ull, 10000002000ull, 0);
	/* One host second later the device timer says 999.9 ms: it runs
	 * 100 ppm slow, and the mapping stretches device time to match. */
	devq_cuda_time_update(&b, &a, 11000000000ull, 11000002000ull, 999.9);
	ck_assert(fabs(b.rate - 1e9 / 999.9e6) < 1e-9);
	uint64_t t = devq_cuda_time_map(&b, 500.0f);
	ck_assert(llabs((long long)(t - (b.host_ns + 500050005))) < 100);
	/* A "rate" 1% off is bracket noise over a short span: kept as before. */
	devq_cuda_time_update(&c, &b, 11001000000ull, 11001002000ull, 1.01 * 1.0);
	ck_assert(c.rate == b.rate);
	/* Reversed bracket reads are put in order. */
	devq_cuda_time_update(&c, NULL, 500, 100, 0);
	ck_assert_uint_eq(c.host_ns, 300);
}
END_TEST

/* A simulated GPU timer: an offset from the host clock and a rate that
 * differs by up to 300 ppm and changes by at most 5 ppm per second (NTP
 * slewing the host clock), events read back as float milliseconds with
 * 0.5 µs resolution, calibrations every second with jittered brackets.
 * Every mapped time must lie within the documented bound of the truth. */

START_TEST(test_cal_error_bound)
{
	uint64_t seed = 42;
	struct devq_cal cal = { 0 }, prev;
	double cal_dev = 0, prev_dev = 0, worst = 0;
	double host = 5e9, dev = 123456789.0, dev_at = host; /* dev clock at host dev_at */
	for (int sec = 0; sec < 120; sec++) {
		double drift = 300.0 * sin(sec / 60.0) * 1e-6;
		seed = devq_mix64(seed);
		double width = 2000 + (double)(seed % 8000); /* 2..10 µs bracket */
		seed = devq_mix64(seed);
		double at = (double)(seed % 1000) / 1000.0 * width; /* stamp inside it */
		uint64_t t0 = (uint64_t)host, t1 = (uint64_t)(host + width);
		double stamp_host = host + at;
		prev = cal;
		prev_dev = cal_dev;
		dev += (stamp_host - dev_at) * (1.0 + drift);
		dev_at = stamp_host;
		cal_dev = dev;
		double dms = prev.valid ? (cal_dev - prev_dev) / 1e6 : 0;
		devq_cuda_time_update(&cal, &prev, t0, t1, (float)dms);
		for (int i = 0; i < 200; i++) {
			seed = devq_mix64(seed);
			double ev_host = stamp_host + (double)(seed % 1000000000ull);
			/* event timer resolution: 0.5 µs */
			double ev_dev = floor((cal_dev + (ev_host - stamp_host) * (1.0 + drift)) /
					      500.0) * 500.0;
			float ms = (float)((ev_dev - cal_dev) / 1e6);
			uint64_t mapped = devq_cuda_time_map(&cal, ms);
			double err = fabs((double)mapped - ev_host);
			if (err > worst)
				worst = err;
			if (sec > 0) /* the first second has no rate yet */
				ck_assert_msg(err <= (double)devq_cuda_time_error_ns(&cal, ms),
					      "second %d: error %.0f ns > bound %llu ns", sec, err,
					      (unsigned long long)devq_cuda_time_error_ns(&cal, ms));
		}
		host += 1e9;
	}
	printf("calibration: worst error %.0f ns over 120 s of up to 300 ppm drift\n", worst);
}
END_TEST

/* ---- replayable runs: the graph cache ------------------------------- */

static void run_of(struct devq_graph_op *ops, unsigned n, uint64_t base)
{
	for (unsigned i = 0; i < n; i++) {
		memset(&ops[i], 0, sizeof(ops[i]));
		ops[i].kernel = i % 3;
		ops[i].grid = 4;
		ops[i].block = 256;
		ops[i].nargs = 3;
		ops[i].args[0] = 4096;
		ops[i].args[1] = base + i * 64; /* device addresses */
		ops[i].args[2] = base + 0x100000 + i * 64;
	}
}

static int destroyed;
static void count_destroy(void *g, void *ud)
{
	(void)g;
	(void)ud;
	destroyed++;
}

START_TEST(test_graph_cache_exact_match)
{
	struct devq_graph_cache c = { 0 };
	struct devq_graph_op a[64], b[64];
	run_of(a, 64, 0x7f0000000000ull);
	void *ev;
	ck_assert_ptr_null(devq_graph_cache_find(&c, 0, a, 64));
	ck_assert_int_eq(devq_graph_cache_insert(&c, 0, a, 64, (void *)0x1, &ev), 0);
	ck_assert_ptr_null(ev);
	memcpy(b, a, sizeof(a));
	ck_assert_ptr_eq(devq_graph_cache_find(&c, 0, b, 64), (void *)0x1);
	/* Any difference is another run: one argument (another buffer), the
	 * launch shape, the kernel, the length. */
	b[63].args[2] += 64;
	ck_assert_ptr_null(devq_graph_cache_find(&c, 0, b, 64));
	memcpy(b, a, sizeof(a));
	b[10].grid = 8;
	ck_assert_ptr_null(devq_graph_cache_find(&c, 0, b, 64));
	memcpy(b, a, sizeof(a));
	b[0].kernel = 7;
	ck_assert_ptr_null(devq_graph_cache_find(&c, 0, b, 64));
	ck_assert_ptr_null(devq_graph_cache_find(&c, 0, a, 63));
	/* Arguments past nargs are not part of the run. */
	memcpy(b, a, sizeof(a));
	b[5].args[6] = 12345;
	ck_assert_ptr_eq(devq_graph_cache_find(&c, 0, b, 64), (void *)0x1);
	ck_assert_uint_eq(c.hits, 2);
	destroyed = 0;
	devq_graph_cache_clear(&c, count_destroy, NULL);
	ck_assert_int_eq(destroyed, 1);
	ck_assert_ptr_null(devq_graph_cache_find(&c, 0, a, 64));
}
END_TEST

START_TEST(test_graph_cache_lru)
{
	struct devq_graph_cache c = { 0 };
	struct devq_graph_op ops[8];
	void *ev;
	for (uintptr_t i = 1; i <= DEVQ_GRAPH_CACHE_SIZE; i++) {
		run_of(ops, 8, i << 32);
		ck_assert_int_eq(devq_graph_cache_insert(&c, 0, ops, 8, (void *)i, &ev), 0);
		ck_assert_ptr_null(ev);
	}
	/* Use run 1 again: run 2 is now the least recently used. */
	run_of(ops, 8, 1ull << 32);
	ck_assert_ptr_eq(devq_graph_cache_find(&c, 0, ops, 8), (void *)1);
	run_of(ops, 8, 99ull << 32);
	ck_assert_int_eq(devq_graph_cache_insert(&c, 0, ops, 8, (void *)99, &ev), 0);
	ck_assert_ptr_eq(ev, (void *)2);
	run_of(ops, 8, 2ull << 32);
	ck_assert_ptr_null(devq_graph_cache_find(&c, 0, ops, 8));
	run_of(ops, 8, 1ull << 32);
	ck_assert_ptr_eq(devq_graph_cache_find(&c, 0, ops, 8), (void *)1);
	destroyed = 0;
	devq_graph_cache_clear(&c, count_destroy, NULL);
	ck_assert_int_eq(destroyed, DEVQ_GRAPH_CACHE_SIZE);
}
END_TEST

/* The same run on two streams is two entries: launches of one CUgraphExec
 * serialise on the device, so a shared one would make two streams' identical
 * batches wait for each other. */
START_TEST(test_graph_cache_per_stream)
{
	struct devq_graph_cache c = { 0 };
	struct devq_graph_op ops[16];
	void *ev;
	run_of(ops, 16, 0x7f0000000000ull);
	ck_assert_int_eq(devq_graph_cache_insert(&c, 0, ops, 16, (void *)0x1, &ev), 0);
	ck_assert_ptr_null(devq_graph_cache_find(&c, 1, ops, 16));
	ck_assert_int_eq(devq_graph_cache_insert(&c, 1, ops, 16, (void *)0x2, &ev), 0);
	ck_assert_ptr_null(ev);
	ck_assert_ptr_eq(devq_graph_cache_find(&c, 0, ops, 16), (void *)0x1);
	ck_assert_ptr_eq(devq_graph_cache_find(&c, 1, ops, 16), (void *)0x2);
	destroyed = 0;
	devq_graph_cache_clear(&c, count_destroy, NULL);
	ck_assert_int_eq(destroyed, 2);
}
END_TEST

/* ---- the driver loader ------------------------------------------------ */

#ifdef DEVQ_HAVE_CUDA
START_TEST(test_drv_missing)
{
	struct devq_cuda_drv drv;
	char err[512];
	ck_assert_int_eq(devq_cuda_drv_open(&drv, "/nonexistent/libcuda.so.1", err, sizeof(err)),
			 -ENOENT);
	ck_assert_msg(strstr(err, "no NVIDIA driver"), "%s", err);
	/* A library that is no driver at all. */
	ck_assert_int_eq(devq_cuda_drv_open(&drv, "libm.so.6", err, sizeof(err)), -ENOSYS);
	ck_assert_msg(strstr(err, "cuGetProcAddress_v2"), "%s", err);
}
END_TEST

START_TEST(test_drv_stub)
{
	if (access(STUB, R_OK) != 0) {
		printf("SKIP: the toolkit's stub %s is not here\n", STUB);
		return;
	}
	struct devq_cuda_drv drv;
	char err[512];
	ck_assert_int_eq(devq_cuda_drv_open(&drv, STUB, err, sizeof(err)), -ENODEV);
	ck_assert_msg(strstr(err, "CUDA_ERROR_STUB_LIBRARY"), "%s", err);
}
END_TEST

START_TEST(test_error_names)
{
	ck_assert_str_eq(devq_cuda_drv_error_name(CUDA_ERROR_ILLEGAL_ADDRESS),
			 "CUDA_ERROR_ILLEGAL_ADDRESS (700)");
	ck_assert_str_eq(devq_cuda_drv_error_name(CUDA_ERROR_STUB_LIBRARY),
			 "CUDA_ERROR_STUB_LIBRARY (34)");
	/* A code the table does not know still names its number. */
	ck_assert_str_eq(devq_cuda_drv_error_name((CUresult)12345), "CUDA error 12345");
	ck_assert(devq_cuda_drv_error_is_sticky(CUDA_ERROR_ILLEGAL_ADDRESS));
	ck_assert(devq_cuda_drv_error_is_sticky(CUDA_ERROR_LAUNCH_FAILED));
	ck_assert(!devq_cuda_drv_error_is_sticky(CUDA_ERROR_OUT_OF_MEMORY));
	ck_assert(!devq_cuda_drv_error_is_sticky(CUDA_ERROR_INVALID_VALUE));
}
END_TEST
#endif

/* ---- backend choice in a real devqd ----------------------------------- */

/* Runs devqd with args until it exits (it must, within 10 s); returns its
 * exit status with stderr in out. */
static int run_devqd(const char *const *args, char *out, size_t outlen)
{
	char log[] = "/tmp/devq-cuda-XXXXXX";
	int fd = mkstemp(log);
	ck_assert_int_ge(fd, 0);
	const char *argv[16];
	int n = 0;
	argv[n++] = harness_bin("devqd");
	for (int i = 0; args[i] && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(fd, 2);
		dup2(fd, 1);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st = 0;
	for (int i = 0; i < 1000; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			break;
		usleep(10000);
		if (i == 999) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			ck_abort_msg("devqd %s did not exit", args[0]);
		}
	}
	ssize_t r = pread(fd, out, outlen - 1, 0);
	out[r > 0 ? r : 0] = '\0';
	close(fd);
	unlink(log);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *read_log(const struct daemon_proc *d, char *buf, size_t len)
{
	FILE *f = fopen(d->log, "r");
	ck_assert_ptr_nonnull(f);
	size_t n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

START_TEST(test_backend_cuda_no_driver)
{
	setenv("DEVQ_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
	char out[4096];
	const char *args[] = { "--backend", "cuda", "--socket", "/tmp/devq-cuda-none.sock", NULL };
	int st = run_devqd(args, out, sizeof(out));
	ck_assert_msg(st != 0, "devqd --backend cuda exited 0 without a GPU");
	ck_assert_msg(strstr(out, "backend cuda:"), "%s", out);
#ifdef DEVQ_HAVE_CUDA
	ck_assert_msg(strstr(out, "no NVIDIA driver") && strstr(out, "libcuda.so.1"), "%s", out);
#else
	ck_assert_msg(strstr(out, "built without the CUDA backend"), "%s", out);
#endif
	ck_assert_int_ne(access("/tmp/devq-cuda-none.sock", F_OK), 0);
}
END_TEST

START_TEST(test_backend_auto_falls_back)
{
	setenv("DEVQ_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
	struct daemon_proc d;
	const char *const extra[] = { "--backend", "auto", NULL };
	harness_start(&d, extra);
	devq *q = conn(d.sock, "auto");
	ck_assert_str_eq(devq_get_info(q)->backend, "cpu");
	/* It works: a real op on the fallback backend. */
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	struct devq_arg a[] = { a_u64("ns", 1000) };
	struct devq_op op = { .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
			      .args = a, .nargs = 1 };
	uint64_t p;
	ck_assert_int_eq(devq_submit(q, &op, 1, &p), 0);
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 0, p, 30000, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_OK);
	devq_disconnect(q);
	char log[8192];
	read_log(&d, log, sizeof(log));
	ck_assert_int_eq(harness_stop(&d), 0);
	ck_assert_msg(strstr(log, "backend auto:") && strstr(log, "using the CPU backend"), "%s",
		      log);
#ifdef DEVQ_HAVE_CUDA
	ck_assert_msg(strstr(log, "no NVIDIA driver"), "%s", log);
#endif
}
END_TEST

#ifdef DEVQ_HAVE_CUDA
/* The toolkit's stub placed as libcuda.so.1 on the library path: it loads,
 * then answers CUDA_ERROR_STUB_LIBRARY. */
START_TEST(test_backend_stub_driver)
{
	if (access(STUB, R_OK) != 0) {
		printf("SKIP: the toolkit's stub %s is not here\n", STUB);
		return;
	}
	char dir[] = "/tmp/devq-stub-XXXXXX", link[128];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(link, sizeof(link), "%s/libcuda.so.1", dir);
	ck_assert_int_eq(symlink(STUB, link), 0);
	unsetenv("DEVQ_CUDA_LIBRARY");
	setenv("LD_LIBRARY_PATH", dir, 1);
	char out[4096];
	const char *args[] = { "--backend", "cuda", "--socket", "/tmp/devq-cuda-stub.sock", NULL };
	int st = run_devqd(args, out, sizeof(out));
	ck_assert_int_ne(st, 0);
	ck_assert_msg(strstr(out, "CUDA_ERROR_STUB_LIBRARY") && strstr(out, "stub"), "%s", out);

	/* auto falls back, naming the same cause. */
	struct daemon_proc d;
	const char *const extra[] = { "--backend", "auto", NULL };
	harness_start(&d, extra);
	char log[8192];
	read_log(&d, log, sizeof(log));
	ck_assert_int_eq(harness_stop(&d), 0);
	ck_assert_msg(strstr(log, "CUDA_ERROR_STUB_LIBRARY") && strstr(log, "using the CPU backend"),
		      "%s", log);
	unsetenv("LD_LIBRARY_PATH");
	unlink(link);
	rmdir(dir);
}
END_TEST
#endif

int main(void)
{
	Suite *s = suite_create("cuda");
	TCase *tc = tcase_create("cuda");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_cal_basic);
	tcase_add_test(tc, test_cal_rate);
	tcase_add_test(tc, test_cal_error_bound);
	tcase_add_test(tc, test_graph_cache_exact_match);
	tcase_add_test(tc, test_graph_cache_lru);
	tcase_add_test(tc, test_graph_cache_per_stream);
#ifdef DEVQ_HAVE_CUDA
	tcase_add_test(tc, test_drv_missing);
	tcase_add_test(tc, test_drv_stub);
	tcase_add_test(tc, test_error_names);
	tcase_add_test(tc, test_backend_stub_driver);
#endif
	tcase_add_test(tc, test_backend_cuda_no_driver);
	tcase_add_test(tc, test_backend_auto_falls_back);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
