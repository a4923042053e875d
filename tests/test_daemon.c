/* SPDX-License-Identifier: Apache-2.0 */
/* Integration tests: a real devqd (CPU backend) driven by real client
 * processes through libdevq. */
#include <check.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devq.h"
#include "harness.h"
#include "kernels.h"

static struct daemon_proc D;

static void release(devq *q, struct devq_buffer *b)
{
	ck_assert_int_eq(devq_buffer_release(q, b), 0);
	ck_assert_msg(devq_buffer_wait_released(q, b, 30000) == 0, "%s", devq_last_error(q));
}

static void wait_ok(devq *q, uint32_t queue, uint64_t point, struct devq_completion *c)
{
	ck_assert_msg(devq_wait(q, queue, point, 60000, c) == 0, "%s", devq_last_error(q));
	ck_assert_msg(c->code == DEVQ_OK, "queue %u point %llu: %s: %s", queue,
		      (unsigned long long)point, devq_code_name(c->code), c->message);
	harness_check_monotonic(c);
}

static uint64_t kernel_op(devq *q, uint32_t queue, const char *name, struct devq_arg *args,
			  size_t nargs, const struct devq_wait *waits, size_t nwaits)
{
	struct devq_op op = { .queue = queue, .kind = DEVQ_OP_KERNEL, .exec = exe(q, name),
			      .args = args, .nargs = nargs, .waits = waits, .nwaits = nwaits };
	uint64_t p;
	ck_assert_msg(devq_submit(q, &op, 1, &p) == 0, "%s", devq_last_error(q));
	return p;
}

static uint64_t ref_checksum(const uint8_t *d, size_t n)
{
	uint64_t s = 0;
	for (size_t i = 0; i < n; i++)
		s += devq_mix64(((uint64_t)i << 8) | d[i]);
	return s;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
	rng_state += 0x9e3779b97f4a7c15ull;
	return devq_mix64(rng_state);
}
static void fill_random(void *p, size_t n)
{
	uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)rnd();
}
static void fill_random_f32(float *f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		f[i] = (float)((double)(rnd() >> 11) / 9007199254740992.0 * 200.0 - 100.0);
}

static void setup(void)
{
	harness_start(&D, NULL);
}

static void teardown(void)
{
	if (D.pid > 0)
		ck_assert_int_eq(harness_stop(&D), 0);
}

/* ---- item 2: timing and the buffer lifetime ------------------------- */

START_TEST(test_spin_timing)
{
	devq *q = conn(D.sock, "timing");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	/* The device time is never under the spin (every run); the upper
	 * bounds hold on the best of the runs, so one run descheduled on a
	 * loaded machine does not fail the test while a phase that includes
	 * the wrong interval (always over) still does. */
	uint64_t best_dev = UINT64_MAX, best_sub = UINT64_MAX;
	for (int i = 0; i < 5; i++) {
		struct devq_arg a[] = { a_u64("ns", 5000000) };
		uint64_t p = kernel_op(q, 0, "spin", a, 1, NULL, 0);
		struct devq_completion c;
		wait_ok(q, 0, p, &c);
		struct devq_phases ph;
		devq_timing_phases(&c.t, &ph);
		ck_assert_msg(ph.device >= 4500000, "device_ns %llu under 5 ms - 10%%",
			      (unsigned long long)ph.device);
		if (ph.device < best_dev)
			best_dev = ph.device;
		if (ph.submit < best_sub)
			best_sub = ph.submit;
	}
	if (getenv("DEVQ_VALGRIND")) {
		/* valgrind runs one thread at a time: the worker's end stamp
		 * waits for its turn.  ASan builds keep the bound. */
		printf("SKIP: device_ns within 10%% of 5 ms (valgrind); best %llu ns\n",
		       (unsigned long long)best_dev);
	} else {
		ck_assert_msg(best_dev <= 5500000, "device_ns %llu not within 10%% of 5 ms (best of 5)",
			      (unsigned long long)best_dev);
	}
	if (harness_slow()) {
		printf("SKIP: submit_ns < 1 ms bound (sanitizer/valgrind build); best %llu ns\n",
		       (unsigned long long)best_sub);
	} else {
		ck_assert_msg(best_sub < 1000000, "submit_ns %llu >= 1 ms (best of 5)",
			      (unsigned long long)best_sub);
	}
	devq_disconnect(q);
}
END_TEST

START_TEST(test_release_waits_for_consumers)
{
	devq *q = conn(D.sock, "lifetime");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	ck_assert_int_eq(devq_queue_open(q, 2), 0);
	const size_t n = 65536;
	struct devq_buffer *b = mkbuf(q, n), *out = mkbuf(q, 8);
	fill_random(b->map, n);
	uint8_t *expect = malloc(n);
	for (size_t i = 0; i < n; i++)
		expect[i] = (uint8_t)(((uint8_t *)b->map)[i] + 1);
	struct devq_arg a1[] = { a_u64("ns", 30000000), a_u64("n", n), a_buf("buf", b, 0) };
	uint64_t p1 = kernel_op(q, 1, "spin_buf", a1, 3, NULL, 0);
	/* No explicit wait: the hazard on b orders the reader after the writer. */
	struct devq_arg a2[] = { a_u64("n", n), a_buf("data", b, 0), a_buf("out", out, 0) };
	uint64_t p2 = kernel_op(q, 2, "checksum", a2, 3, NULL, 0);
	/* Asked for at once, while spin_buf is still running. */
	ck_assert_int_eq(devq_buffer_release(q, b), 0);
	ck_assert_msg(devq_buffer_wait_released(q, b, 30000) == 0, "%s", devq_last_error(q));
	uint64_t t_released = harness_now_ns();
	/* The release came after both completions, which arrived first. */
	ck_assert_uint_ge(devq_completed(q, 1), p1);
	ck_assert_uint_ge(devq_completed(q, 2), p2);
	struct devq_completion c1, c2;
	wait_ok(q, 1, p1, &c1);
	wait_ok(q, 2, p2, &c2);
	ck_assert_uint_le(c1.t.device_end, t_released);
	ck_assert_uint_ge(c2.t.device_start, c1.t.device_end);
	ck_assert_uint_le(c1.t.client_received, t_released);
	ck_assert_uint_eq(*(uint64_t *)out->map, ref_checksum(expect, n));
	free(expect);
	release(q, out);
	devq_disconnect(q);
}
END_TEST

/* ---- item 3: results against references ------------------------------ */

struct sized {
	size_t n;   /* elements */
	size_t off; /* elements of offset into each buffer */
};

static const struct sized SIZES[] = {
	{ 1, 0 }, { 1, 3 }, { 7, 1 }, { 4099, 5 }, { 1 << 20, 2 },
};

START_TEST(test_fill_copy_results)
{
	devq *q = conn(D.sock, "results");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	struct sized all[6];
	memcpy(all, SIZES, sizeof(SIZES));
	all[5] = (struct sized){ (64u << 20) / 4, 0 }; /* 64 MiB */
	for (size_t s = 0; s < 6; s++) {
		size_t n = all[s].n, off = all[s].off;
		struct devq_buffer *dst = mkbuf(q, (n + off + 1) * 4);
		fill_random(dst->map, dst->size);
		uint32_t v = (uint32_t)rnd();
		struct devq_arg a[] = { a_u64("n", n), a_u32("value", v), a_buf("dst", dst, off * 4) };
		struct devq_completion c;
		wait_ok(q, 0, kernel_op(q, 0, "fill_u32", a, 3, NULL, 0), &c);
		uint32_t *d = dst->map;
		uint32_t before = d[off + n]; /* not written */
		for (size_t i = 0; i < n; i++)
			if (d[off + i] != v)
				ck_abort_msg("fill_u32 n=%zu: element %zu = %u, want %u", n, i, d[off + i], v);
		ck_assert_uint_eq(d[off + n], before);

		/* copy: bytes, at byte offsets */
		size_t nb = n * 4;
		struct devq_buffer *src = mkbuf(q, nb + 3), *cp = mkbuf(q, nb + 11);
		fill_random(src->map, src->size);
		fill_random(cp->map, cp->size);
		struct devq_arg ca[] = { a_u64("n", nb), a_buf("src", src, 3), a_buf("dst", cp, 11) };
		wait_ok(q, 0, kernel_op(q, 0, "copy", ca, 3, NULL, 0), &c);
		ck_assert_int_eq(memcmp((char *)cp->map + 11, (char *)src->map + 3, nb), 0);
		release(q, src);
		release(q, cp);
		release(q, dst);
	}
	devq_disconnect(q);
}
END_TEST

START_TEST(test_float_results)
{
	devq *q = conn(D.sock, "floats");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	struct sized all[6];
	memcpy(all, SIZES, sizeof(SIZES));
	all[5] = (struct sized){ (64u << 20) / 4, 1 };
	for (size_t s = 0; s < 6; s++) {
		size_t n = all[s].n, off = all[s].off, bytes = (n + off) * 4;
		struct devq_buffer *x = mkbuf(q, bytes), *y = mkbuf(q, bytes), *z = mkbuf(q, bytes);
		struct devq_buffer *out = mkbuf(q, 16);
		float *xf = x->map, *yf = y->map, *zf = z->map;
		fill_random_f32(xf, n + off);
		fill_random_f32(yf, n + off);
		float *y0 = malloc(bytes);
		memcpy(y0, yf, bytes);
		float a = (float)(rnd() % 1000) / 7.0f;
		struct devq_completion c;

		struct devq_arg va[] = { a_u64("n", n), a_buf("a", x, off * 4), a_buf("b", y, off * 4),
					 a_buf("c", z, off * 4) };
		wait_ok(q, 0, kernel_op(q, 0, "vadd_f32", va, 4, NULL, 0), &c);
		for (size_t i = 0; i < n; i++) {
			float want = xf[off + i] + y0[off + i];
			if (memcmp(&zf[off + i], &want, 4))
				ck_abort_msg("vadd_f32 n=%zu: element %zu differs", n, i);
		}

		struct devq_arg sa[] = { a_u64("n", n), a_f32("a", a), a_buf("x", x, off * 4),
					 a_buf("y", y, off * 4) };
		wait_ok(q, 0, kernel_op(q, 0, "saxpy_f32", sa, 4, NULL, 0), &c);
		for (size_t i = 0; i < n; i++) {
			float want = fmaf(a, xf[off + i], y0[off + i]);
			if (memcmp(&yf[off + i], &want, 4))
				ck_abort_msg("saxpy_f32 n=%zu: element %zu = %a, want %a", n, i,
					     (double)yf[off + i], (double)want);
		}

		struct devq_arg ra[] = { a_u64("n", n), a_buf("x", x, off * 4), a_buf("out", out, 4) };
		wait_ok(q, 0, kernel_op(q, 0, "reduce_sum_f32", ra, 3, NULL, 0), &c);
		double ref = 0, mag = 0;
		for (size_t i = 0; i < n; i++) {
			ref += xf[off + i];
			mag += fabs(xf[off + i]);
		}
		float got = ((float *)out->map)[1];
		double bound = (double)n * FLT_EPSILON * mag;
		ck_assert_msg(fabs((double)got - ref) <= bound,
			      "reduce_sum_f32 n=%zu: %.9g vs %.9g (bound %.3g)", n, (double)got, ref,
			      bound);

		/* checksum over the raw bytes of x, at an odd byte offset */
		size_t nb = n * 4 - 1;
		struct devq_arg ka[] = { a_u64("n", nb), a_buf("data", x, 1), a_buf("out", out, 8) };
		wait_ok(q, 0, kernel_op(q, 0, "checksum", ka, 3, NULL, 0), &c);
		ck_assert_uint_eq(((uint64_t *)out->map)[1], ref_checksum((uint8_t *)xf + 1, nb));
		free(y0);
		release(q, x);
		release(q, y);
		release(q, z);
		release(q, out);
	}
	devq_disconnect(q);
}
END_TEST

START_TEST(test_builtin_copy_fill_device)
{
	devq *q = conn(D.sock, "builtins");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	struct devq_buffer *dev, *host = mkbuf(q, 4096), *back = mkbuf(q, 4096);
	ck_assert_int_eq(devq_buffer_create(q, 8192, DEVQ_BUFFER_DEVICE, &dev), 0);
	ck_assert_ptr_null(dev->map);
	fill_random(host->map, 4096);
	struct devq_op ops[3] = {
		{ .queue = 0, .kind = DEVQ_OP_FILL, .dst = dev, .dst_offset = 0, .size = 8192,
		  .pattern = 0xdeadbeef },
		{ .queue = 0, .kind = DEVQ_OP_COPY, .src = host, .src_offset = 96, .dst = dev,
		  .dst_offset = 4000, .size = 1000 },
		{ .queue = 0, .kind = DEVQ_OP_COPY, .src = dev, .src_offset = 3996, .dst = back,
		  .dst_offset = 0, .size = 1008 },
	};
	uint64_t p[3];
	ck_assert_int_eq(devq_submit(q, ops, 3, p), 0);
	ck_assert_uint_eq(p[2], p[0] + 2);
	struct devq_completion c;
	for (int i = 0; i < 3; i++)
		wait_ok(q, 0, p[i], &c);
	const uint8_t *r = back->map;
	const uint8_t pat[4] = { 0xef, 0xbe, 0xad, 0xde };
	ck_assert_int_eq(memcmp(r, pat, 4), 0);
	ck_assert_int_eq(memcmp(r + 4, (uint8_t *)host->map + 96, 1000), 0);
	ck_assert_int_eq(memcmp(r + 1004, pat, 4), 0);
	release(q, dev);
	release(q, host);
	release(q, back);
	devq_disconnect(q);
}
END_TEST

/* A large device buffer (allocated and zeroed by the buffer worker, freed
 * by it at release) starts zeroed at both ends and works like a small one. */
START_TEST(test_large_device_buffer)
{
	devq *q = conn(D.sock, "large-device");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	const uint64_t size = 64u << 20;
	struct devq_buffer *dev, *back = mkbuf(q, 8192);
	ck_assert_int_eq(devq_buffer_create(q, size, DEVQ_BUFFER_DEVICE, &dev), 0);
	fill_random(back->map, 8192);
	struct devq_op ops[3] = {
		{ .queue = 0, .kind = DEVQ_OP_COPY, .src = dev, .src_offset = 0, .dst = back,
		  .dst_offset = 0, .size = 4096 },
		{ .queue = 0, .kind = DEVQ_OP_COPY, .src = dev, .src_offset = size - 4096,
		  .dst = back, .dst_offset = 4096, .size = 4096 },
	};
	uint64_t p[3];
	struct devq_completion c;
	ck_assert_int_eq(devq_submit(q, ops, 2, p), 0);
	wait_ok(q, 0, p[1], &c);
	static const uint8_t zero[8192];
	ck_assert_int_eq(memcmp(back->map, zero, 8192), 0);
	ops[0] = (struct devq_op){ .queue = 0, .kind = DEVQ_OP_FILL, .dst = dev,
				   .dst_offset = size - 4096, .size = 4096, .pattern = 0xdeadbeef };
	ops[2] = ops[1];
	ops[1] = (struct devq_op){ .queue = 0, .kind = DEVQ_OP_FILL, .dst = back,
				   .dst_offset = 0, .size = 8192, .pattern = 0 };
	ck_assert_int_eq(devq_submit(q, ops, 3, p), 0);
	wait_ok(q, 0, p[2], &c);
	const uint32_t *w = (const uint32_t *)back->map;
	for (size_t i = 0; i < 2048; i++)
		ck_assert_uint_eq(w[i], i < 1024 ? 0 : 0xdeadbeef);
	release(q, dev);
	release(q, back);
	devq_disconnect(q);
}
END_TEST

/* ---- item 4: two queues ---------------------------------------------- */

static void producer_consumer(bool explicit_wait)
{
	devq *q = conn(D.sock, explicit_wait ? "explicit" : "hazard");
	for (uint32_t i = 1; i <= 3; i++)
		ck_assert_int_eq(devq_queue_open(q, i), 0);
	const size_t n = 1 << 16;
	struct devq_buffer *b = mkbuf(q, n), *out = mkbuf(q, 8), *other = mkbuf(q, 4096);
	uint8_t *expect = malloc(n);
	for (int round = 0; round < 4; round++) {
		fill_random(b->map, n);
		for (size_t i = 0; i < n; i++)
			expect[i] = (uint8_t)(((uint8_t *)b->map)[i] + 1);
		struct devq_arg pa[] = { a_u64("ns", 40000000), a_u64("n", n), a_buf("buf", b, 0) };
		uint64_t pp = kernel_op(q, 1, "spin_buf", pa, 3, NULL, 0);
		struct devq_wait w = { 1, pp };
		struct devq_arg ca[] = { a_u64("n", n), a_buf("data", b, 0), a_buf("out", out, 0) };
		uint64_t pc = kernel_op(q, 2, "checksum", ca, 3, &w, explicit_wait ? 1 : 0);
		struct devq_arg oa[] = { a_u64("n", 1024), a_u32("value", 7), a_buf("dst", other, 0) };
		uint64_t po = kernel_op(q, 3, "fill_u32", oa, 3, NULL, 0);
		struct devq_completion cp, cc, co;
		wait_ok(q, 1, pp, &cp);
		wait_ok(q, 2, pc, &cc);
		wait_ok(q, 3, po, &co);
		ck_assert_uint_eq(*(uint64_t *)out->map, ref_checksum(expect, n));
		ck_assert_uint_ge(cc.t.device_start, cp.t.device_end);
		/* Overlap is real: the unrelated op ran while the producer did. */
		ck_assert_msg(co.t.device_end < cp.t.device_end,
			      "unrelated op ended at %llu, after the producer (%llu)",
			      (unsigned long long)co.t.device_end, (unsigned long long)cp.t.device_end);
	}
	free(expect);
	release(q, b);
	release(q, out);
	release(q, other);
	devq_disconnect(q);
}

START_TEST(test_two_queues_explicit)
{
	producer_consumer(true);
}
END_TEST

START_TEST(test_two_queues_hazard)
{
	producer_consumer(false);
}
END_TEST

/* ---- item 5: eight clients ------------------------------------------- */

#define CLIENT_ROUNDS 500

/* One client process: 1,000 ops, each checksum waiting on a fill on
 * another queue; every result and every completion accounted for. */
static int client_main(int id)
{
	devq *q = NULL;
	if (devq_connect(D.sock, "worker", &q) < 0)
		return 10;
	const struct devq_exec *fill, *sum;
	if (devq_exec_lookup(q, "fill_u32", &fill) || devq_exec_lookup(q, "checksum", &sum) ||
	    devq_queue_open(q, 1) || devq_queue_open(q, 2))
		return 11;
	struct devq_buffer *a, *out;
	const size_t words = 256 + (size_t)id;
	if (devq_buffer_create(q, words * 4, DEVQ_BUFFER_SHARED, &a) ||
	    devq_buffer_create(q, CLIENT_ROUNDS * 8, DEVQ_BUFFER_SHARED, &out))
		return 12;
	for (int i = 0; i < CLIENT_ROUNDS; i++) {
		struct devq_arg fa[] = { a_u64("n", words), a_u32("value", (uint32_t)(id * 100000 + i)),
					 a_buf("dst", a, 0) };
		struct devq_arg ca[] = { a_u64("n", words * 4), a_buf("data", a, 0),
					 a_buf("out", out, (uint64_t)i * 8) };
		struct devq_wait w = { 1, (uint64_t)i + 1 };
		struct devq_op ops[2] = {
			{ .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = fill, .args = fa, .nargs = 3 },
			{ .queue = 2, .kind = DEVQ_OP_KERNEL, .exec = sum, .args = ca, .nargs = 3,
			  .waits = &w, .nwaits = 1 },
		};
		if (devq_submit(q, ops, 2, NULL))
			return 13;
	}
	static uint8_t seen[3][CLIENT_ROUNDS + 1];
	for (int k = 0; k < 2 * CLIENT_ROUNDS; k++) {
		struct devq_completion c;
		if (devq_next_completion(q, &c, 60000))
			return 14;
		if (c.code != DEVQ_OK || c.queue < 1 || c.queue > 2 || c.point < 1 ||
		    c.point > CLIENT_ROUNDS || seen[c.queue][c.point]++)
			return 15;
		const struct devq_timing *t = &c.t;
		if (!(t->client_submit <= t->received && t->received <= t->handoff &&
		      t->handoff <= t->device_start && t->device_start <= t->device_end &&
		      t->device_end <= t->observed && t->observed <= t->client_received))
			return 16;
	}
	struct devq_completion extra;
	if (devq_next_completion(q, &extra, 200) != -ETIMEDOUT)
		return 17; /* a duplicate or stray completion */
	uint8_t *ref = malloc(words * 4);
	for (int i = 0; i < CLIENT_ROUNDS; i++) {
		uint32_t v = (uint32_t)(id * 100000 + i);
		for (size_t j = 0; j < words; j++)
			memcpy(ref + j * 4, &v, 4);
		if (((uint64_t *)out->map)[i] != ref_checksum(ref, words * 4))
			return 18;
	}
	free(ref);
	if (devq_buffer_release(q, a) || devq_buffer_release(q, out) ||
	    devq_buffer_wait_released(q, a, 30000) || devq_buffer_wait_released(q, out, 30000))
		return 19;
	devq_disconnect(q);
	return 0;
}

static void wait_idle(devq *q, struct devq_status **out)
{
	/* Disconnect cleanup is asynchronous: allow it a moment. */
	for (int i = 0; i < 500; i++) {
		struct devq_status *s;
		ck_assert_int_eq(devq_get_status(q, &s), 0);
		if ((s->buffers == 0 && s->ops_in_flight == 0 && s->nsessions == 1) || i == 499) {
			*out = s;
			return;
		}
		devq_status_free(s);
		usleep(10000);
	}
}

START_TEST(test_eight_clients)
{
	pid_t pids[8];
	for (int i = 0; i < 8; i++) {
		pids[i] = fork();
		ck_assert_int_ge(pids[i], 0);
		if (pids[i] == 0)
			_exit(client_main(i));
	}
	for (int i = 0; i < 8; i++) {
		int st;
		ck_assert_int_eq(waitpid(pids[i], &st, 0), pids[i]);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client %d failed with %d", i,
			      WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st));
	}
	devq *q = conn(D.sock, "observer");
	struct devq_status *s;
	wait_idle(q, &s);
	ck_assert_uint_eq(s->buffers, 0);
	ck_assert_uint_eq(s->ops_in_flight, 0);
	ck_assert_uint_eq(s->ops_completed, 8 * 2 * CLIENT_ROUNDS);
	ck_assert_uint_eq(s->ops_failed, 0);
	devq_status_free(s);
	devq_disconnect(q);
}
END_TEST

/* ---- item 6: a client killed mid-flight ------------------------------ */

START_TEST(test_killed_client)
{
	devq *obs = conn(D.sock, "observer");
	/* The baseline once the harness's start-up probe connection is gone:
	 * a session holds its socket and, where the kernel has them, a pidfd. */
	struct devq_status *s0;
	wait_idle(obs, &s0);
	ck_assert_uint_eq(s0->nsessions, 1);
	devq_status_free(s0);
	int base_fds = harness_fd_count(D.pid);
	ck_assert_int_gt(base_fds, 0);
	int sync[2];
	ck_assert_int_eq(pipe(sync), 0);
	pid_t victim = fork();
	ck_assert_int_ge(victim, 0);
	if (victim == 0) {
		devq *q;
		if (devq_connect(D.sock, "victim", &q))
			_exit(1);
		const struct devq_exec *e;
		struct devq_buffer *b[4];
		devq_exec_lookup(q, "spin_buf", &e);
		devq_queue_open(q, 0);
		devq_queue_open(q, 1);
		for (int i = 0; i < 4; i++)
			if (devq_buffer_create(q, 1 << 20, DEVQ_BUFFER_SHARED, &b[i]))
				_exit(2);
		for (int i = 0; i < 20; i++) {
			struct devq_arg a[] = { a_u64("ns", 20000000), a_u64("n", 1 << 20),
						a_buf("buf", b[i % 4], 0) };
			struct devq_op op = { .queue = (uint32_t)(i % 2), .kind = DEVQ_OP_KERNEL,
					      .exec = e, .args = a, .nargs = 3 };
			devq_submit(q, &op, 1, NULL);
		}
		if (write(sync[1], "x", 1) != 1)
			_exit(3);
		pause();
		_exit(0);
	}
	close(sync[1]);
	char ch;
	ck_assert_int_eq(read(sync[0], &ch, 1), 1);
	close(sync[0]);
	/* Let the first ops start, then kill it with its buffers in use. */
	usleep(30000);
	kill(victim, SIGKILL);
	waitpid(victim, NULL, 0);

	/* Another client is served meanwhile, correctly. */
	devq *q = conn(D.sock, "bystander");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	struct devq_buffer *b = mkbuf(q, 4096);
	struct devq_arg a[] = { a_u64("n", 1024), a_u32("value", 42), a_buf("dst", b, 0) };
	struct devq_completion c;
	wait_ok(q, 0, kernel_op(q, 0, "fill_u32", a, 3, NULL, 0), &c);
	ck_assert_uint_eq(((uint32_t *)b->map)[1023], 42);
	release(q, b);
	devq_disconnect(q);

	struct devq_status *s;
	wait_idle(obs, &s);
	ck_assert_uint_eq(s->buffers, 0);
	ck_assert_uint_eq(s->ops_in_flight, 0);
	ck_assert_uint_eq(s->nsessions, 1);
	devq_status_free(s);
	/* Back to the baseline (valgrind's own fds may drop below it). */
	int fds = -1;
	for (int i = 0; i < 200 && (fds < 0 || fds > base_fds); i++, usleep(10000))
		fds = harness_fd_count(D.pid);
	ck_assert_int_le(fds, base_fds);
	if (!getenv("DEVQ_VALGRIND"))
		ck_assert_int_eq(fds, base_fds);
	devq_disconnect(obs);
}
END_TEST


/* ---- SIGTERM with work in flight ------------------------------------- */

/* A client may connect and stop (or reload) the daemon as soon as the socket
 * accepts: the signal waits for its handler, the stop is orderly (exit 0),
 * never death by SIGTERM's default action (143).  The test hook holds the
 * window between listen() and the handlers open for 500 ms. */
START_TEST(test_sigterm_at_startup)
{
	setenv("DEVQD_TEST_START_PAUSE_MS", "500", 1);
	struct daemon_proc d;
	const char *const extra[] = { "--test-fault-injection", NULL };
	harness_start(&d, extra);
	unsetenv("DEVQD_TEST_START_PAUSE_MS");
	kill(d.pid, SIGHUP); /* a reload then, too, must not end it, nor be lost */
	ck_assert_msg(harness_log_wait(d.log, "reload: done", 30000),
		      "no reload logged 30 s after a SIGHUP at startup (see %s)", d.log);
	int st = harness_stop(&d);
	ck_assert_msg(st == 0, "devqd signalled as its socket began to accept: exit %d", st);
}
END_TEST

START_TEST(test_sigterm_in_flight)
{
	devq *q = conn(D.sock, "stopping");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	struct devq_buffer *b = mkbuf(q, 4096);
	uint64_t last = 0;
	for (int i = 0; i < 6; i++) {
		struct devq_arg a[] = { a_u64("ns", 100000000), a_u64("n", 4096), a_buf("buf", b, 0) };
		last = kernel_op(q, 0, "spin_buf", a, 3, NULL, 0);
	}
	struct devq_completion c;
	/* Once the first op has completed, stop the daemon mid-queue. */
	while (devq_completed(q, 0) < 1)
		ck_assert_int_eq(devq_wait(q, 0, 1, 60000, NULL), 0);
	uint64_t t0 = harness_now_ns();
	kill(D.pid, SIGTERM);
	/* Every op completes: run to its end or cancelled before it started. */
	int ok = 0, cancelled = 0;
	for (uint64_t p = 1; p <= last; p++) {
		ck_assert_msg(devq_wait(q, 0, p, 60000, &c) == 0, "%s", devq_last_error(q));
		harness_check_monotonic(&c);
		ck_assert_msg(c.code == DEVQ_OK || c.code == DEVQ_E_CANCELLED, "point %llu: %s",
			      (unsigned long long)p, devq_code_name(c.code));
		ok += c.code == DEVQ_OK;
		cancelled += c.code == DEVQ_E_CANCELLED;
	}
	ck_assert_int_ge(ok, 1);
	ck_assert_int_ge(cancelled, 1);
	/* The bytes show exactly the ops that ran. */
	for (size_t i = 0; i < 4096; i++)
		ck_assert_uint_eq(((uint8_t *)b->map)[i], (uint8_t)ok);
	/* Then it exits 0, having freed everything (the ASan build checks). */
	ck_assert_int_eq(harness_wait(&D), 0);
	if (!harness_slow())
		ck_assert_uint_lt(harness_now_ns() - t0, 2000000000ull);
	devq_disconnect(q);
}
END_TEST

/* ---- issue 17 item 1: no wait outlives a refused queue --------------- */

/* Ops on a queue whose open the daemon refused complete as failed, with the
 * refusal's code and message, at their points and in order: devq_wait
 * returns within a second, whether the ops went out before the refusal
 * arrived or after. */
static void refused_queue_case(const char *const *args, uint32_t qid, int priority, int code)
{
	harness_start(&D, args);
	devq *q = conn(D.sock, "refused");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	ck_assert_int_eq(devq_queue_open_priority(q, qid, priority), 0);
	struct devq_arg a[] = { a_u64("ns", 1000) };
	uint64_t ok = kernel_op(q, 0, "spin", a, 1, NULL, 0);
	uint64_t p1 = kernel_op(q, qid, "spin", a, 1, NULL, 0);
	uint64_t p2 = kernel_op(q, qid, "spin", a, 1, NULL, 0);
	ck_assert_uint_eq(p1, 1);
	ck_assert_uint_eq(p2, 2);
	uint64_t t0 = harness_now_ns();
	struct devq_completion c;
	ck_assert_msg(devq_wait(q, qid, p1, 1000, &c) == 0, "%s", devq_last_error(q));
	ck_assert_int_eq(c.code, code);
	ck_assert_uint_eq(c.point, 1);
	ck_assert_msg(strstr(c.message, "not open") || strstr(c.message, "open"), "%s", c.message);
	/* Without a completion record wanted (the completion-page path). */
	ck_assert_msg(devq_wait(q, qid, p2, 1000, NULL) == 0, "%s", devq_last_error(q));
	ck_assert_msg(harness_now_ns() - t0 < 1000000000ull, "took %llu ns",
		      (unsigned long long)(harness_now_ns() - t0));
	/* Once the refusal is known, a later op fails at once. */
	uint64_t p3 = kernel_op(q, qid, "spin", a, 1, NULL, 0);
	ck_assert_uint_eq(devq_completed(q, qid), 3);
	ck_assert_int_eq(devq_wait(q, qid, p3, 0, &c), 0);
	ck_assert_int_eq(c.code, code);
	/* An op of another queue waiting on a refused point fails too. */
	struct devq_wait w = { qid, p3 };
	uint64_t dep = kernel_op(q, 0, "spin", a, 1, &w, 1);
	ck_assert_int_eq(devq_wait(q, 0, dep, 1000, &c), 0);
	ck_assert_int_ne(c.code, DEVQ_OK);
	wait_ok(q, 0, ok, &c);
	/* The refusal itself is an error of open_queue; the ops' own
	 * not_found echoes are not repeated as errors. */
	struct devq_error e;
	int nerr = 0;
	while (devq_next_error(q, &e) == 1) {
		ck_assert_str_eq(e.request, "open_queue");
		ck_assert_int_eq(e.code, code);
		nerr++;
	}
	ck_assert_int_eq(nerr, 1);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&D), 0);
	D.pid = 0;
}

START_TEST(test_refused_queue_max_queues)
{
	refused_queue_case((const char *const[]){ "--max-queues", "1", NULL }, 1, 0,
			   DEVQ_E_RESOURCE_EXHAUSTED);
}
END_TEST

START_TEST(test_refused_queue_no_priority_streams)
{
	refused_queue_case((const char *const[]){ "--priority-streams", "0", NULL }, 5, 1,
			   DEVQ_E_FAILED_PRECONDITION);
}
END_TEST

/* Queue 0 is not opened for the client: submitting on it without
 * devq_queue_open fails at once, with a message that says what to do. */
START_TEST(test_unopened_queue_is_refused)
{
	harness_start(&D, NULL);
	devq *q = conn(D.sock, "unopened");
	struct devq_arg a[] = { a_u64("ns", 1000) };
	struct devq_op op = { .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
			      .args = a, .nargs = 1 };
	ck_assert_int_eq(devq_submit(q, &op, 1, NULL), -ENOENT);
	ck_assert_msg(strstr(devq_last_error(q), "devq_queue_open"), "%s", devq_last_error(q));
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&D), 0);
	D.pid = 0;
}
END_TEST

/* ---- client deadlines (devq_submit_ex) -------------------------------- */

/* One op: fill_u32 of n elements of dst with value on queue, with the
 * deadline us (0: none) and the given waits; its point. */
static uint64_t fill_deadline(devq *q, uint32_t queue, struct devq_buffer *dst, uint32_t value,
			      uint64_t us, const struct devq_wait *w, size_t nw)
{
	struct devq_arg a[] = { a_u64("n", dst->size / 4), a_u32("value", value),
				a_buf("dst", dst, 0) };
	struct devq_op op = { .queue = queue, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "fill_u32"),
			      .args = a, .nargs = 3, .waits = w, .nwaits = nw };
	struct devq_op_ext x = { .size = sizeof(x), .deadline_us = us };
	uint64_t p;
	ck_assert_msg(devq_submit_ex(q, &op, 1, &p, &x) == 0, "%s", devq_last_error(q));
	return p;
}

static bool all_equal(const struct devq_buffer *b, uint32_t v)
{
	const uint32_t *d = b->map;
	for (size_t i = 0; i < b->size / 4; i++)
		if (d[i] != v)
			return false;
	return true;
}

/* The deadline_exceeded count of this uid's tenant (devq_status). */
static uint64_t my_deadline_exceeded(devq *q)
{
	struct devq_status *st;
	ck_assert_int_eq(devq_get_status(q, &st), 0);
	uint64_t n = UINT64_MAX;
	for (size_t i = 0; i < st->ntenants; i++)
		if (st->tenants[i].uid == (uint32_t)getuid())
			n = st->tenant_extra[i].deadline_exceeded;
	devq_status_free(st);
	ck_assert_msg(n != UINT64_MAX, "no tenant row for uid %u", (unsigned)getuid());
	return n;
}

/* An op with a 5 ms deadline queued behind 50 ms of work: it completes
 * deadline_exceeded, naming the client's deadline, and never ran (its
 * buffer keeps its bytes).  Its queue fails after it, an op on another
 * queue waiting on it gets dependency_failed and runs nothing either, and
 * the tenant's count says so. */
START_TEST(test_deadline_passed_never_runs)
{
	devq *q = conn(D.sock, "deadline");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	uint64_t before = my_deadline_exceeded(q);
	struct devq_buffer *b = mkbuf(q, 4096), *after = mkbuf(q, 4096), *other = mkbuf(q, 4096);
	memset(b->map, 0xab, b->size);
	memset(after->map, 0xcd, after->size);
	memset(other->map, 0xef, other->size);
	struct devq_arg sa[] = { a_u64("ns", 50000000) };
	uint64_t ps = kernel_op(q, 0, "spin", sa, 1, NULL, 0);
	uint64_t pd = fill_deadline(q, 0, b, 7, 5000, NULL, 0);
	uint64_t pa = fill_deadline(q, 0, after, 8, 0, NULL, 0);
	struct devq_wait w = { 0, pd };
	uint64_t po = fill_deadline(q, 1, other, 9, 0, &w, 1);
	struct devq_completion c;
	wait_ok(q, 0, ps, &c);
	ck_assert_int_eq(devq_wait(q, 0, pd, 60000, &c), 0);
	ck_assert_msg(c.code == DEVQ_E_DEADLINE_EXCEEDED, "%s: %s", devq_code_name(c.code),
		      c.message);
	ck_assert_msg(strstr(c.message, "deadline of 5000 us"), "message: %s", c.message);
	ck_assert_int_eq(devq_wait(q, 0, pa, 60000, &c), 0);
	ck_assert_msg(c.code == DEVQ_E_DEPENDENCY_FAILED, "%s: %s", devq_code_name(c.code),
		      c.message);
	ck_assert_int_eq(devq_wait(q, 1, po, 60000, &c), 0);
	ck_assert_msg(c.code == DEVQ_E_DEPENDENCY_FAILED, "%s: %s", devq_code_name(c.code),
		      c.message);
	ck_assert_msg(strstr(c.message, "deadline"), "the root cause is named: %s", c.message);
	ck_assert_msg(all_equal(b, 0xabababab), "the op past its deadline ran");
	ck_assert_msg(all_equal(after, 0xcdcdcdcd), "the op after it ran");
	ck_assert_msg(all_equal(other, 0xefefefef), "the op waiting on it ran");
	ck_assert_uint_eq(my_deadline_exceeded(q), before + 1);
	/* Reset, the queue runs again; a deadline of 500 ms behind the same
	 * 50 ms is met. */
	ck_assert_int_eq(devq_queue_reset(q, 0), 0);
	ps = kernel_op(q, 0, "spin", sa, 1, NULL, 0);
	pd = fill_deadline(q, 0, b, 7, 500000, NULL, 0);
	wait_ok(q, 0, ps, &c);
	wait_ok(q, 0, pd, &c);
	ck_assert_msg(all_equal(b, 7), "the op within its deadline did not run");
	ck_assert_uint_eq(my_deadline_exceeded(q), before + 1);
	release(q, b);
	release(q, after);
	release(q, other);
	devq_disconnect(q);
}
END_TEST

/* An op handed to the device at once, on a stream of its own, whose wait
 * on another queue's 50 ms holds it past its 5 ms deadline: the check
 * where the device starts it (the CPU backend's worker, after its waits)
 * fails it, and it never runs.  On the CUDA backend the hand-over to the
 * stream is the start (the device runs what is issued without asking
 * again): there the op runs, and whatever its code, it ran exactly when
 * it completed OK. */
START_TEST(test_deadline_passed_at_start)
{
	bool cuda = !strcmp(harness_backend(), "cuda");
	devq *q = conn(D.sock, "deadline-start");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_buffer *b = mkbuf(q, 4096);
	memset(b->map, 0xab, b->size);
	struct devq_arg sa[] = { a_u64("ns", 50000000) };
	uint64_t ps = kernel_op(q, 0, "spin", sa, 1, NULL, 0);
	struct devq_wait w = { 0, ps };
	uint64_t pd = fill_deadline(q, 1, b, 7, 5000, &w, 1);
	struct devq_completion c;
	wait_ok(q, 0, ps, &c);
	ck_assert_int_eq(devq_wait(q, 1, pd, 60000, &c), 0);
	if (cuda) {
		ck_assert_msg(c.code == DEVQ_OK || c.code == DEVQ_E_DEADLINE_EXCEEDED, "%s: %s",
			      devq_code_name(c.code), c.message);
		ck_assert_msg(all_equal(b, c.code == DEVQ_OK ? 7 : 0xabababab),
			      "%s, yet the buffer says otherwise", devq_code_name(c.code));
		release(q, b);
		devq_disconnect(q);
		return;
	}
	ck_assert_msg(c.code == DEVQ_E_DEADLINE_EXCEEDED, "%s: %s", devq_code_name(c.code),
		      c.message);
	ck_assert_msg(all_equal(b, 0xabababab), "the op past its deadline ran");
	release(q, b);
	devq_disconnect(q);
}
END_TEST

/* devq_submit_ex's struct checks: a size it cannot be, a reserved member,
 * a later version's option this library does not know: -EINVAL, nothing
 * sent (the next op takes point 1).  A later version's larger struct with
 * its new members unset is taken, read at its own stride. */
START_TEST(test_submit_ex_struct_versions)
{
	devq *q = conn(D.sock, "deadline-ext");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	struct devq_arg a[] = { a_u64("ns", 0) };
	struct devq_op ops[2] = {
		{ .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"), .args = a, .nargs = 1 },
		{ .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"), .args = a, .nargs = 1 },
	};
	struct {
		struct devq_op_ext e;
		uint64_t later;
	} wide[2] = { { { 24, 0, 1000000 }, 0 }, { { 24, 0, 2000000 }, 0 } };
	uint64_t p[2];
	struct devq_op_ext x[2] = { { 8, 0, 0 }, { 8, 0, 0 } };
	ck_assert_int_eq(devq_submit_ex(q, ops, 2, p, x), -EINVAL); /* too small */
	x[0].size = x[1].size = 20;
	ck_assert_int_eq(devq_submit_ex(q, ops, 2, p, x), -EINVAL); /* not a multiple of 8 */
	x[0].size = x[1].size = sizeof(x[0]);
	x[1].reserved = 1;
	ck_assert_int_eq(devq_submit_ex(q, ops, 2, p, x), -EINVAL);
	x[1].reserved = 0;
	x[1].size = 24;
	ck_assert_int_eq(devq_submit_ex(q, ops, 2, p, x), -EINVAL); /* sizes differ */
	wide[1].later = 1;
	ck_assert_int_eq(devq_submit_ex(q, ops, 2, p, &wide[0].e), -EINVAL);
	ck_assert_msg(strstr(devq_last_error(q), "does not know"), "%s", devq_last_error(q));
	wide[1].later = 0;
	ck_assert_int_eq(devq_submit_ex(q, ops, 2, p, &wide[0].e), 0);
	ck_assert_uint_eq(p[0], 1);
	ck_assert_uint_eq(p[1], 2);
	struct devq_completion c;
	wait_ok(q, 0, 1, &c);
	wait_ok(q, 0, 2, &c);
	/* NULL: devq_submit. */
	ck_assert_int_eq(devq_submit_ex(q, ops, 1, p, NULL), 0);
	wait_ok(q, 0, p[0], &c);
	devq_disconnect(q);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("daemon");
	TCase *t = tcase_create("core");
	tcase_set_timeout(t, harness_slow() ? 600 : 120);
	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, test_spin_timing);
	tcase_add_test(t, test_release_waits_for_consumers);
	tcase_add_test(t, test_fill_copy_results);
	tcase_add_test(t, test_float_results);
	tcase_add_test(t, test_builtin_copy_fill_device);
	tcase_add_test(t, test_large_device_buffer);
	tcase_add_test(t, test_two_queues_explicit);
	tcase_add_test(t, test_two_queues_hazard);
	tcase_add_test(t, test_eight_clients);
	tcase_add_test(t, test_killed_client);
	tcase_add_test(t, test_sigterm_in_flight);
	tcase_add_test(t, test_sigterm_at_startup);
	tcase_add_test(t, test_deadline_passed_never_runs);
	tcase_add_test(t, test_deadline_passed_at_start);
	tcase_add_test(t, test_submit_ex_struct_versions);
	suite_add_tcase(s, t);
	TCase *own = tcase_create("own_daemon");
	tcase_set_timeout(own, harness_slow() ? 300 : 60);
	tcase_add_test(own, test_refused_queue_max_queues);
	tcase_add_test(own, test_refused_queue_no_priority_streams);
	tcase_add_test(own, test_unopened_queue_is_refused);
	suite_add_tcase(s, own);
	return s;
}

int main(void)
{
	return harness_main(suite());
}
