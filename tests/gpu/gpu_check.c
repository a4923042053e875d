/* SPDX-License-Identifier: Apache-2.0 */
/* gpu_check: drives a devqd running on a GPU through libdevq and checks
 * the core contract on real streams.  Run by tests/gpu/run.sh.
 *
 *   gpu_check SOCKET order   cross-queue dependencies (explicit and derived
 *                            from buffer hazards), 4 rounds each, results
 *                            checked; unrelated work overlaps
 *   gpu_check SOCKET seed    5 ms spin: device within 10% of 5 ms, submit in
 *                            µs, the buffer released only after device end
 *   gpu_check SOCKET bench N null-op round trips through devqd (no timing
 *                            events): median and p99 in µs
 *   gpu_check SOCKET sporadic  null ops after idle gaps of 1 and 10 ms
 *                            (200 each): p50 and p99 of the round trip
 *   gpu_check SOCKET graph N batches of 64 null ops, replayable (one CUDA
 *                            graph launch each after the first) and plain:
 *                            µs per kernel, submit to completion
 *   gpu_check SOCKET devbuf  device buffers: FILL, COPY in and out, an
 *                            overlapping COPY inside one buffer (memmove),
 *                            results checked on the host
 *   gpu_check SOCKET roimport  a read-only import: read by a kernel, a write
 *                            to it refused
 *   gpu_check SOCKET prio    a null op on a high-priority queue while 4
 *                            normal queues keep every SM busy with ~1 ms
 *                            fills: at most 2 of them end before it
 *   gpu_check SOCKET cancel  16 queued 200 ms spins of a client that leaves:
 *                            devqd is idle again within 1.5 s (the ops not
 *                            on the device are cancelled)
 *   gpu_check SOCKET deadlock  a replayable batch whose last op waits on a
 *                            rejected op: every op completes
 *   gpu_check SOCKET onegraph  a replayable batch of 64 timed 10 µs spins
 *                            is one graph launch: each op's events bracket
 *                            the whole graph, so its first op lasts the
 *                            64 kernels (split into runs it would last its
 *                            run's)
 *   gpu_check SOCKET stopload  queues 16 spins of 300 ms on 4 queues and
 *                            returns: run.sh then stops devqd, which must
 *                            exit 0 within its grace
 *   gpu_check SOCKET counters  devqd's counters (buffers, mapped bytes, ops
 *                            in flight) on one COUNTERS line, for the leak
 *                            check
 *   gpu_check SOCKET gemm N R  gemm_f32 N^3 on device buffers (A = B = 1,
 *                            so C = N exactly, checked), R times, each
 *                            submit to completion: INFO lines with the
 *                            median device time and wall time; SKIP when
 *                            devqd reports cuBLAS unavailable
 *   gpu_check SOCKET iso     isolation beside heavy work: this session
 *                            submits gemm_f32 m=8, n=k=1024 every 10 ms
 *                            (300 times) alone, then while a second
 *                            session keeps two 4096^3 gemm_f32 in flight;
 *                            client submit to completion, p50/p99 of each
 *                            (BENCH lines; INFO: no bound yet); SKIP when
 *                            devqd reports cuBLAS unavailable
 *   gpu_check - cublas N R   the baseline, no devqd: cublasSgemm N^3 in
 *                            this process on its own stream (cuBLAS found as
 *                            devqd's CUDA host library finds it: $DEVQ_CUBLAS,
 *                            libcublas.so.13 by the dynamic linker,
 *                            /usr/local/cuda/lib64, /usr/local/cuda-13/lib64,
 *                            /usr/lib/x86_64-linux-gnu); SKIP when absent
 *   gpu_check SOCKET fault   the fault kernel: device_lost to every session,
 *                            then reconnect to the restarted daemon (run.sh
 *                            restarts it as systemd would) with shared
 *                            buffers intact
 *
 * Prints "PASS name: detail" / "FAIL name: detail" lines ("SKIP name: why"
 * where the device lacks a feature); exit status 0
 * when every check passed, 1 otherwise, 2 when devqd is not on a GPU. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

#include "devq.h"
#include "kernels.h"

#include <dlfcn.h>
#include <cuda.h>
#include <cublas_v2.h>

static int failures;

static void check(bool ok, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void check(bool ok, const char *name, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("%s %s: ", ok ? "PASS" : "FAIL", name);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	if (!ok)
		failures++;
}

static void die(devq *q, const char *what)
{
	printf("FAIL %s: %s\n", what, q ? devq_last_error(q) : "");
	exit(1);
}

static const struct devq_exec *exe(devq *q, const char *name)
{
	const struct devq_exec *e;
	if (devq_exec_lookup(q, name, &e) < 0)
		die(q, name);
	return e;
}

static struct devq_arg u64(const char *n, uint64_t v)
{
	return (struct devq_arg){ .name = n, .type = DEVQ_ARG_U64, .v.u64 = v };
}

static struct devq_arg buf(const char *n, const struct devq_buffer *b)
{
	return (struct devq_arg){ .name = n, .type = DEVQ_ARG_BUFFER, .v.buf = { b, 0 } };
}

static uint64_t submit(devq *q, uint32_t queue, const char *k, struct devq_arg *a, size_t n,
		       const struct devq_wait *w, size_t nw, bool timed)
{
	struct devq_op op = { .queue = queue, .kind = DEVQ_OP_KERNEL, .exec = exe(q, k),
			      .args = a, .nargs = n, .waits = w, .nwaits = nw,
			      .no_timing = !timed };
	uint64_t p;
	if (devq_submit(q, &op, 1, &p) < 0)
		die(q, "submit");
	return p;
}

static bool wait_ok(devq *q, uint32_t queue, uint64_t p, struct devq_completion *c)
{
	if (devq_wait(q, queue, p, 60000, c) < 0)
		die(q, "wait");
	if (c->code != DEVQ_OK)
		printf("  queue %u point %llu: %s: %s\n", queue, (unsigned long long)p,
		       devq_code_name(c->code), c->message);
	return c->code == DEVQ_OK;
}

static uint64_t ref_checksum(const uint8_t *d, size_t n)
{
	uint64_t s = 0;
	for (size_t i = 0; i < n; i++)
		s += devq_mix64(((uint64_t)i << 8) | d[i]);
	return s;
}

static bool monotonic(const struct devq_timing *t)
{
	return t->client_submit <= t->received && t->received <= t->handoff &&
	       t->handoff <= t->device_start && t->device_start <= t->device_end &&
	       t->device_end <= t->observed && t->observed <= t->client_received;
}

/* ---- order ------------------------------------------------------------ */

static void order(devq *q, bool explicit_wait)
{
	const char *name = explicit_wait ? "cross-queue explicit wait" : "cross-queue hazard";
	const size_t n = 8u << 20;
	struct devq_buffer *b, *out;
	if (devq_buffer_create(q, n, DEVQ_BUFFER_SHARED, &b) < 0 ||
	    devq_buffer_create(q, 8, DEVQ_BUFFER_SHARED, &out) < 0)
		die(q, "buffer");
	uint8_t *expect = malloc(n);
	for (size_t i = 0; i < n; i++)
		expect[i] = ((uint8_t *)b->map)[i] = (uint8_t)devq_mix64(i);
	bool ok = true, overlap = true;
	for (int round = 0; round < 4; round++) {
		struct devq_arg pa[] = { u64("ns", 20000000), u64("n", n), buf("buf", b) };
		uint64_t pp = submit(q, 1, "spin_buf", pa, 3, NULL, 0, true);
		struct devq_wait w = { .queue = 1, .point = pp };
		struct devq_arg ca[] = { u64("n", n), buf("data", b), buf("out", out) };
		uint64_t pc = submit(q, 2, "checksum", ca, 3, explicit_wait ? &w : NULL,
				     explicit_wait ? 1 : 0, true);
		struct devq_arg ua[] = { u64("ns", 1000000) };
		uint64_t pu = submit(q, 3, "spin", ua, 1, NULL, 0, true);
		struct devq_completion cp, cc, cu;
		ok &= wait_ok(q, 1, pp, &cp) & wait_ok(q, 2, pc, &cc) & wait_ok(q, 3, pu, &cu);
		for (size_t i = 0; i < n; i++)
			expect[i]++;
		uint64_t want = ref_checksum(expect, n), got = *(uint64_t *)out->map;
		if (got != want) {
			printf("  round %d: checksum %016llx, expected %016llx\n", round,
			       (unsigned long long)got, (unsigned long long)want);
			ok = false;
		}
		ok &= cc.t.device_start >= cp.t.device_end;
		ok &= monotonic(&cp.t) && monotonic(&cc.t) && monotonic(&cu.t);
		overlap &= cu.t.device_end < cp.t.device_end;
	}
	check(ok, name, "4 rounds, consumer saw the producer's final data, timestamps in order");
	check(overlap, "unrelated queue overlaps", "a 1 ms op on queue 3 ended before the 20 ms "
					       "producer each round");
	free(expect);
	devq_buffer_release(q, b);
	devq_buffer_release(q, out);
}

/* ---- seed ------------------------------------------------------------- */

static void seed(devq *q)
{
	bool ok = true;
	uint64_t dev[5], sub[5];
	for (int i = 0; i < 5; i++) {
		struct devq_arg a[] = { u64("ns", 5000000) };
		uint64_t p = submit(q, 0, "spin", a, 1, NULL, 0, true);
		struct devq_completion c;
		ok &= wait_ok(q, 0, p, &c) && monotonic(&c.t);
		struct devq_phases ph;
		devq_timing_phases(&c.t, &ph);
		dev[i] = ph.device;
		sub[i] = ph.submit;
		ok &= ph.device >= 4500000 && ph.device <= 5500000 && ph.submit < 1000000;
	}
	check(ok, "seed 5 ms spin", "device %.3f %.3f %.3f %.3f %.3f ms; submit %.1f %.1f %.1f %.1f "
				    "%.1f µs",
	      dev[0] / 1e6, dev[1] / 1e6, dev[2] / 1e6, dev[3] / 1e6, dev[4] / 1e6, sub[0] / 1e3,
	      sub[1] / 1e3, sub[2] / 1e3, sub[3] / 1e3, sub[4] / 1e3);

	/* The lifetime contract: release asked at once, granted after the end. */
	struct devq_buffer *b;
	if (devq_buffer_create(q, 1 << 20, DEVQ_BUFFER_SHARED, &b) < 0)
		die(q, "buffer");
	struct devq_arg a[] = { u64("ns", 5000000), u64("n", 1 << 20), buf("buf", b) };
	uint64_t p = submit(q, 0, "spin_buf", a, 3, NULL, 0, true);
	devq_buffer_release(q, b);
	if (devq_buffer_wait_released(q, b, 30000) < 0)
		die(q, "wait released");
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	uint64_t released = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	struct devq_completion c;
	bool ok2 = wait_ok(q, 0, p, &c) && c.t.device_end <= released &&
		   c.t.client_received <= released;
	check(ok2, "buffer released after device end", "device end %llu ns before the release "
						       "reached the client",
	      (unsigned long long)(released - c.t.device_end));
}

/* ---- bench ------------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void bench(devq *q, int n)
{
	uint64_t *rt = malloc((size_t)n * sizeof(*rt));
	for (int i = -100; i < n; i++) { /* 100 warm-up round trips */
		struct devq_arg a[] = { u64("ns", 0) };
		uint64_t p = submit(q, 0, "spin", a, 1, NULL, 0, false);
		struct devq_completion c;
		if (!wait_ok(q, 0, p, &c))
			die(q, "bench op failed");
		if (i >= 0)
			rt[i] = c.t.client_received - c.t.client_submit;
	}
	qsort(rt, (size_t)n, sizeof(*rt), cmp_u64);
	printf("BENCH devqd_roundtrip_us median %.2f p99 %.2f n %d\n", rt[n / 2] / 1e3,
	       rt[(size_t)n * 99 / 100] / 1e3, n);
	free(rt);
}

/* Sporadic ops: a null op and its wait after an idle gap (1 ms, 10 ms;
 * 200 each), timed by the client as native_bench times a launch and a
 * synchronize after the same gaps.  Every wake-up on devqd's path (the
 * loop's, the completion thread's, the client's) is paid here, where a
 * tight loop hides them. */
static void sporadic(devq *q)
{
	enum { N = 200 };
	static const unsigned gaps_us[] = { 1000, 10000 };
	uint64_t rt[N];
	for (size_t g = 0; g < sizeof(gaps_us) / sizeof(gaps_us[0]); g++) {
		for (int i = -10; i < N; i++) {
			struct timespec gap = { 0, (long)gaps_us[g] * 1000 };
			nanosleep(&gap, NULL);
			struct devq_arg a[] = { u64("ns", 0) };
			uint64_t p = submit(q, 0, "spin", a, 1, NULL, 0, false);
			struct devq_completion c;
			if (!wait_ok(q, 0, p, &c))
				die(q, "sporadic op failed");
			if (i >= 0)
				rt[i] = c.t.client_received - c.t.client_submit;
		}
		qsort(rt, N, sizeof(*rt), cmp_u64);
		printf("BENCH devqd_sporadic_%uus median %.2f p99 %.2f n %d\n", gaps_us[g],
		       rt[N / 2] / 1e3, rt[N * 99 / 100] / 1e3, N);
	}
}

/* ---- place ------------------------------------------------------------ */

/* Work-conserving placement on CUDA streams: this session's queues 0..3
 * hold every stream's count, queue 0 runs a 300 ms spin; a second session
 * opens a queue (bound, by count, to the busy stream) and submits a null
 * op, which must start within 1 ms on an idle stream. */
static void place(devq *q, const char *sock)
{
	devq *b;
	if (devq_connect(sock, "gpu_check-place", &b) < 0)
		die(b, "connect");
	if (devq_queue_open(b, 0) < 0)
		die(b, "queue");
	exe(b, "spin");
	struct devq_arg lng[] = { u64("ns", 300000000) };
	uint64_t pl = submit(q, 0, "spin", lng, 1, NULL, 0, true);
	if (devq_flush(q) < 0)
		die(q, "flush");
	usleep(20000); /* the long op runs */
	struct devq_arg nul[] = { u64("ns", 0) };
	uint64_t ps = submit(b, 0, "spin", nul, 1, NULL, 0, true);
	struct devq_completion cs, cl;
	bool ok = wait_ok(b, 0, ps, &cs) && wait_ok(q, 0, pl, &cl);
	uint64_t queued = cs.t.device_start - cs.t.handoff;
	ok &= monotonic(&cs.t) && queued < 1000000 && cs.t.device_end < cl.t.device_end;
	check(ok, "placement", "a null op of another session queued %.1f µs beside a 300 ms op "
			       "(bound: 1 ms)",
	      queued / 1e3);
	printf("BENCH place_queued_us %.1f\n", queued / 1e3);
	devq_disconnect(b);
}

/* ---- graph ------------------------------------------------------------ */

static double batches(devq *q, int nb, bool replayable)
{
	enum { B = 64 };
	const struct devq_exec *e = exe(q, "spin");
	struct devq_arg a[] = { u64("ns", 0) };
	struct devq_op ops[B];
	for (int i = 0; i < B; i++)
		ops[i] = (struct devq_op){ .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = e, .args = a,
					   .nargs = 1, .no_timing = true };
	struct timespec t0, t1;
	uint64_t pts[B];
	for (int r = -5; r < nb; r++) { /* 5 warm-up batches (the capture) */
		if (r == 0)
			clock_gettime(CLOCK_MONOTONIC, &t0);
		if ((replayable ? devq_submit_replayable(q, ops, B, pts) : devq_submit(q, ops, B, pts)) < 0)
			die(q, "submit batch");
		struct devq_completion c;
		if (devq_wait(q, 0, pts[B - 1], 60000, &c) < 0 || c.code != DEVQ_OK)
			die(q, "batch");
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double us = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3;
	return us / (nb * (double)B);
}

static void graph(devq *q, int nb)
{
	double plain = batches(q, nb, false), replay = batches(q, nb, true);
	printf("BENCH devqd_batch64_us_per_kernel plain %.3f replayable %.3f batches %d\n", plain,
	       replay, nb);
}

/* ---- device buffers, imports, priorities, cancellation ------------------ */

static uint64_t xfer(devq *q, uint32_t queue, enum devq_op_kind kind,
		     const struct devq_buffer *src, uint64_t so, const struct devq_buffer *dst,
		     uint64_t dof, uint64_t size, uint32_t pattern)
{
	struct devq_op op = { .queue = queue, .kind = kind, .src = src, .dst = dst,
			      .src_offset = so, .dst_offset = dof, .size = size,
			      .pattern = pattern };
	uint64_t p;
	if (devq_submit(q, &op, 1, &p) < 0)
		die(q, "submit copy/fill");
	return p;
}

static void devbuf(devq *q)
{
	const size_t n = 1 << 20;
	struct devq_buffer *d, *h;
	if (devq_buffer_create(q, n, DEVQ_BUFFER_DEVICE, &d) < 0 ||
	    devq_buffer_create(q, n, DEVQ_BUFFER_SHARED, &h) < 0)
		die(q, "buffers");
	struct devq_completion c;
	uint8_t *m = h->map;
	/* FILL on the device, COPY out. */
	xfer(q, 0, DEVQ_OP_FILL, NULL, 0, d, 0, n, 0xa5a5a5a5u);
	uint64_t p = xfer(q, 0, DEVQ_OP_COPY, d, 0, h, 0, n, 0);
	bool ok = wait_ok(q, 0, p, &c);
	for (size_t i = 0; i < n && ok; i++)
		ok = m[i] == 0xa5;
	check(ok, "device FILL then COPY out", "1 MiB of 0xa5 back on the host");
	/* COPY in, overlapping COPY inside the device buffer, COPY out. */
	for (size_t i = 0; i < n; i++)
		m[i] = (uint8_t)devq_mix64(i);
	uint8_t *want = malloc(n);
	memcpy(want, m, n);
	memmove(want + 1000, want, 64 * 1024);
	xfer(q, 0, DEVQ_OP_COPY, h, 0, d, 0, n, 0);
	p = xfer(q, 0, DEVQ_OP_COPY, d, 0, d, 1000, 64 * 1024, 0);
	ok = wait_ok(q, 0, p, &c); /* the host buffer was read: now it may change */
	memset(m, 0, n);
	p = xfer(q, 0, DEVQ_OP_COPY, d, 0, h, 0, n, 0);
	ok = ok && wait_ok(q, 0, p, &c) && !memcmp(m, want, n);
	check(ok, "overlapping COPY in a device buffer", "64 KiB moved by 1000 bytes, as memmove");
	/* The same across queues: the hazard orders them. */
	xfer(q, 1, DEVQ_OP_FILL, NULL, 0, d, 4096, 8192, 0x01020304u);
	p = xfer(q, 2, DEVQ_OP_COPY, d, 4096, h, 0, 8192, 0);
	ok = wait_ok(q, 2, p, &c);
	for (size_t i = 0; i < 8192 && ok; i++)
		ok = m[i] == (uint8_t)(0x04 - i % 4);
	check(ok, "FILL and COPY across queues", "the copy saw the fill (buffer hazard)");
	free(want);
	devq_buffer_release(q, d);
	devq_buffer_release(q, h);
	devq_buffer_wait_released(q, d, 30000);
	devq_buffer_wait_released(q, h, 30000);
}

static void roimport(devq *q)
{
	const size_t n = 1 << 20;
	int fd = memfd_create("gpu_check", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)n) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0)
		die(NULL, "memfd");
	uint8_t *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		die(NULL, "mmap");
	for (size_t i = 0; i < n; i++)
		m[i] = (uint8_t)devq_mix64(i * 7);
	struct devq_buffer *ro, *out;
	int r = devq_buffer_import(q, fd, n, DEVQ_IMPORT_READ_ONLY, &ro);
	if (r == -EOPNOTSUPP) {
		/* Devices without read-only host registration refuse it by
		 * design: a missing feature, not a fault of devqd. */
		printf("SKIP read-only import: the device lacks read-only host registration (%s)\n",
		       devq_last_error(q));
		return;
	}
	if (r < 0) {
		check(false, "read-only import", "refused: %s", devq_last_error(q));
		return;
	}
	if (devq_buffer_create(q, 8, DEVQ_BUFFER_SHARED, &out) < 0)
		die(q, "buffer");
	struct devq_arg ca[] = { u64("n", n), buf("data", ro), buf("out", out) };
	uint64_t p = submit(q, 0, "checksum", ca, 3, NULL, 0, true);
	struct devq_completion c;
	bool ok = wait_ok(q, 0, p, &c) && *(uint64_t *)out->map == ref_checksum(m, n);
	check(ok, "read-only import read by a kernel", "checksum matches");
	struct devq_arg fa[] = { u64("n", 16), { .name = "value", .type = DEVQ_ARG_U32,
						 .v.u32 = 1 }, buf("dst", ro) };
	p = submit(q, 0, "fill_u32", fa, 3, NULL, 0, true);
	devq_wait(q, 0, p, 60000, &c);
	check(c.code != DEVQ_OK && m[0] == (uint8_t)devq_mix64(0), "read-only import not written",
	      "%s", devq_code_name(c.code));
	devq_buffer_release(q, ro);
	devq_buffer_release(q, out);
	munmap(m, n);
	close(fd);
}

/* A high-priority queue with every SM busy.  A one-thread op on an idle SM
 * starts at once whatever its priority, so the normal work here fills the
 * device: fill_u32 launches 8 blocks of 256 threads per SM (every thread
 * slot), each fill sized to last about 1 ms, 10 of them queued on each of
 * 4 normal queues (4 streams).  Then another session's high-priority queue
 * submits a null op.  With stream priorities the block scheduler starts it
 * as soon as one fill's blocks leave, so at most a couple of normal fills
 * end while it waits; on a stream of normal priority it waits its turn
 * behind the fills launched before it.  The wait counted is the device's:
 * from the op's start event (recorded as soon as its idle stream reaches
 * it) to its end, so the host's launch latency, which says nothing of
 * stream priorities and grows with CPU load, is not counted. */
static void prio(devq *q, const char *sock)
{
	enum { QUEUES = 4, PER = 10, BOUND = 2 };
	devq *h;
	if (devq_connect(sock, "gpu_check prio", &h) < 0 || devq_queue_open_priority(h, 0, 1) < 0) {
		check(false, "high-priority queue", "%s", devq_last_error(h));
		return;
	}
	/* How many bytes one fill covers in about 1 ms on this device. */
	uint64_t cal = 64u << 20, bytes;
	struct devq_buffer *d[QUEUES];
	if (devq_buffer_create(q, cal, DEVQ_BUFFER_DEVICE, &d[0]) < 0)
		die(q, "device buffer");
	uint64_t dev = UINT64_MAX;
	for (int i = 0; i < 3; i++) {
		struct devq_arg a[] = { u64("n", cal / 4),
					{ .name = "value", .type = DEVQ_ARG_U32, .v.u32 = 1 },
					buf("dst", d[0]) };
		uint64_t p = submit(q, 0, "fill_u32", a, 3, NULL, 0, true);
		struct devq_completion c;
		if (!wait_ok(q, 0, p, &c))
			die(q, "fill");
		if (c.t.device_end - c.t.device_start < dev)
			dev = c.t.device_end - c.t.device_start;
	}
	devq_buffer_release(q, d[0]);
	devq_buffer_wait_released(q, d[0], 30000);
	bytes = dev ? (uint64_t)((double)cal * 1e6 / (double)dev) : cal;
	if (bytes < (16u << 20)) /* 4 Mi threads: 8 blocks of 256 on up to 2048 SMs */
		bytes = 16u << 20;
	if (bytes > (1u << 30))
		bytes = 1u << 30;
	bytes &= ~(uint64_t)4095;
	for (int k = 0; k < QUEUES; k++)
		if (devq_buffer_create(q, bytes, DEVQ_BUFFER_DEVICE, &d[k]) < 0)
			die(q, "device buffer");
	uint64_t pts[QUEUES][PER];
	for (int i = 0; i < PER; i++)
		for (int k = 0; k < QUEUES; k++) {
			struct devq_arg a[] = { u64("n", bytes / 4),
						{ .name = "value", .type = DEVQ_ARG_U32,
						  .v.u32 = (uint32_t)i },
						buf("dst", d[k]) };
			pts[k][i] = submit(q, (uint32_t)k, "fill_u32", a, 3, NULL, 0, true);
		}
	devq_flush(q);
	usleep(3000); /* the device is full */
	struct devq_arg a[] = { u64("ns", 0) };
	uint64_t p = submit(h, 0, "spin", a, 1, NULL, 0, true);
	struct devq_completion hc, c;
	bool ok = wait_ok(h, 0, p, &hc);
	/* Fills that ended while the high-priority op waited on the device
	 * (its start event to its end) went before it. */
	unsigned before = 0, total = 0;
	for (int k = 0; k < QUEUES; k++)
		for (int i = 0; i < PER; i++) {
			ok &= wait_ok(q, (uint32_t)k, pts[k][i], &c);
			total++;
			before += c.t.device_end > hc.t.device_start && c.t.device_end < hc.t.device_end;
		}
	check(ok && before <= BOUND, "high-priority queue",
	      "%u of %u device-filling ops of %.0f MiB (~1 ms each, 4 normal streams) ended while "
	      "its null op waited %.0f µs on the device (%.0f µs from hand-off; bound: %d)",
	      before, total, bytes / 1048576.0, (hc.t.device_end - hc.t.device_start) / 1e3,
	      (hc.t.device_end - hc.t.handoff) / 1e3, BOUND);
	printf("BENCH prio_wait_us %.1f overtaken %u\n",
	       (hc.t.device_end - hc.t.device_start) / 1e3, before);
	for (int k = 0; k < QUEUES; k++)
		devq_buffer_release(q, d[k]);
	devq_disconnect(h);
}

static void cancel(devq *q, const char *sock)
{
	devq *g;
	if (devq_connect(sock, "gpu_check gone", &g) < 0 || devq_queue_open(g, 0) < 0)
		die(g, "connect");
	for (int i = 0; i < 16; i++) {
		struct devq_arg a[] = { u64("ns", 200000000) };
		submit(g, 0, "spin", a, 1, NULL, 0, true);
	}
	devq_flush(g);
	usleep(100000);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	devq_disconnect(g);
	uint64_t inflight = 1;
	double ms = 0;
	while (inflight && ms < 10000) {
		struct devq_status *st;
		if (devq_get_status(q, &st) < 0)
			die(q, "status");
		inflight = st->ops_in_flight;
		devq_status_free(st);
		usleep(10000);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
	}
	check(ms < 1500, "cancel on disconnect", "idle %.0f ms after a client left 16 queued "
						 "200 ms spins (not 3200)", ms);
}

static void deadlock(devq *q)
{
	const struct devq_exec *e = exe(q, "spin");
	struct devq_arg huge[] = { u64("ns", 1000000000000ull) }, small[] = { u64("ns", 1000) };
	struct devq_wait w = { .queue = 1, .point = 0 };
	struct devq_op ops[4] = {
		{ .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = e, .args = huge, .nargs = 1 },
		{ .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = e, .args = small, .nargs = 1 },
		{ .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = e, .args = small, .nargs = 1 },
		{ .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = e, .args = small, .nargs = 1,
		  .waits = &w, .nwaits = 1 },
	};
	/* The wait names the rejected op: the first on queue 1 of this
	 * connection (gpu_check runs one mode per connection). */
	w.point = 1;
	uint64_t p[4];
	if (devq_submit_replayable(q, ops, 4, p) < 0)
		die(q, "submit");
	struct devq_completion c;
	bool ok = true;
	for (int i = 0; i < 4; i++) {
		int r = devq_wait(q, ops[i].queue, p[i], 10000, &c);
		ok &= r == 0 && (i == 0 ? c.code != DEVQ_OK
				 : i == 3 ? c.code == DEVQ_E_DEPENDENCY_FAILED
					  : c.code == DEVQ_OK);
	}
	check(ok, "replayable batch with a failed wait", "every op completed (no deadlock)");
}

static void onegraph(devq *q)
{
	/* 64 spins of 10 µs: 640 µs declared, within the default 1 ms of
	 * fair-window-us, so the fair scheduler hands the batch over whole (a
	 * batch longer than the window is split where the window ends, by
	 * design: fair.h). */
	enum { B = 64, SPIN_NS = 10000 };
	const struct devq_exec *e = exe(q, "spin");
	struct devq_arg a[] = { u64("ns", SPIN_NS) };
	struct devq_op ops[B];
	for (int i = 0; i < B; i++)
		ops[i] = (struct devq_op){ .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = e, .args = a,
					   .nargs = 1 };
	bool ok = true;
	uint64_t shortest = UINT64_MAX;
	for (int r = 0; r < 3; r++) {
		uint64_t p[B];
		if (devq_submit_replayable(q, ops, B, p) < 0)
			die(q, "submit");
		for (int i = 0; i < B; i++) {
			struct devq_completion c;
			ok &= wait_ok(q, 0, p[i], &c);
			uint64_t d = c.t.device_end - c.t.device_start;
			if (i == 0 && d < shortest)
				shortest = d;
		}
	}
	/* One graph: the first op's start and end events bracket all 64
	 * kernels.  Split into runs of k ops, it would last k kernels. */
	check(ok && shortest >= B * SPIN_NS * 9 / 10, "replayable batch of 64 is one graph launch",
	      "its first op lasted %.0f µs (64 kernels of %d µs: %d)", shortest / 1e3,
	      SPIN_NS / 1000, B * SPIN_NS / 1000);
}

static void stopload(devq *q)
{
	for (uint32_t k = 0; k < 4; k++)
		for (int i = 0; i < 4; i++) {
			struct devq_arg a[] = { u64("ns", 300000000) };
			submit(q, k, "spin", a, 1, NULL, 0, true);
		}
	devq_flush(q);
	usleep(100000);
	printf("stopload: 16 spins of 300 ms queued on 4 queues\n");
	fflush(stdout);
	/* run.sh stops devqd now; this process leaves without waiting. */
	_exit(0);
}

/* ---- counters ---------------------------------------------------------- */

/* devqd's own count of what it holds, for run.sh's leak check: buffers
 * and mapped bytes of every session (this one holds none), ops in flight. */
static void counters(devq *q)
{
	struct devq_status *st;
	if (devq_get_status(q, &st) < 0)
		die(q, "status");
	printf("COUNTERS buffers %u bytes_mapped %llu ops_in_flight %llu sessions %zu\n",
	       st->buffers, (unsigned long long)st->bytes_mapped,
	       (unsigned long long)st->ops_in_flight, st->nsessions);
	devq_status_free(st);
}

/* ---- fault ------------------------------------------------------------ */

static void fault(devq *q, const char *sock)
{
	devq *bystander;
	if (devq_connect(sock, "gpu_check bystander", &bystander) < 0)
		die(bystander, "connect");
	struct devq_buffer *b;
	if (devq_buffer_create(bystander, 1 << 20, DEVQ_BUFFER_SHARED, &b) < 0)
		die(bystander, "buffer");
	for (size_t i = 0; i < (1 << 20); i++)
		((uint8_t *)b->map)[i] = (uint8_t)devq_mix64(i);
	uint64_t want = ref_checksum(b->map, 1 << 20);

	struct devq_arg a[] = { u64("ns", 1000000) };
	uint64_t p = submit(q, 0, "fault", a, 1, NULL, 0, true);
	struct timespec t0, t1;
	struct devq_completion c;
	if (devq_wait(q, 0, p, 30000, &c) < 0)
		die(q, "wait for the fault");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	check(c.code == DEVQ_E_DEVICE_LOST, "fault reported", "%s: %s", devq_code_name(c.code),
	      c.message);
	struct devq_error e;
	bool told = false;
	for (int i = 0; i < 500 && !told; i++) {
		devq_poll(bystander);
		told = devq_next_error(bystander, &e) == 1;
		if (!told)
			usleep(2000);
	}
	check(told && e.code == DEVQ_E_DEVICE_LOST, "bystander told", "%s",
	      told ? e.message : "no notice");

	/* run.sh restarts devqd on exit status 69, as systemd would. */
	int r = devq_reconnect(bystander, 10000);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
	check(r == 0, "reconnect after device loss", "back in %.0f ms%s%s", ms, r ? ": " : "",
	      r ? devq_last_error(bystander) : "");
	if (r == 0) {
		struct devq_buffer *out;
		if (devq_buffer_create(bystander, 8, DEVQ_BUFFER_SHARED, &out) < 0 ||
		    devq_queue_open(bystander, 0) < 0)
			die(bystander, "after reconnect");
		struct devq_arg ca[] = { u64("n", 1 << 20), buf("data", b), buf("out", out) };
		uint64_t pc = submit(bystander, 0, "checksum", ca, 3, NULL, 0, true);
		bool ok = wait_ok(bystander, 0, pc, &c) && *(uint64_t *)out->map == want;
		check(ok, "shared buffer survives", "checksum on the fresh daemon matches");
	}
	devq_disconnect(bystander);
}

static double median_ms(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return v[n / 2] / 1e6;
}

/* gemm_f32 N^3 through devqd on device buffers; copies excluded. */
static void gemm_devq(devq *q, uint64_t n, int reps)
{
	struct devq_buffer *a, *b, *c, *h;
	if (devq_buffer_create(q, n * n * 4, DEVQ_BUFFER_DEVICE, &a) < 0 ||
	    devq_buffer_create(q, n * n * 4, DEVQ_BUFFER_DEVICE, &b) < 0 ||
	    devq_buffer_create(q, n * n * 4, DEVQ_BUFFER_DEVICE, &c) < 0 ||
	    devq_buffer_create(q, 4096, DEVQ_BUFFER_SHARED, &h) < 0)
		die(q, "buffers");
	struct devq_completion cc;
	xfer(q, 0, DEVQ_OP_FILL, NULL, 0, a, 0, n * n * 4, 0x3f800000u); /* 1.0f */
	uint64_t p = xfer(q, 0, DEVQ_OP_FILL, NULL, 0, b, 0, n * n * 4, 0x3f800000u);
	if (!wait_ok(q, 0, p, &cc))
		die(q, "fill");
	struct devq_arg args[] = {
		u64("m", n), u64("n", n), u64("k", n),
		{ .name = "alpha", .type = DEVQ_ARG_F32, .v.f32 = 1.0f },
		{ .name = "beta", .type = DEVQ_ARG_F32, .v.f32 = 0.0f },
		buf("a", a), buf("b", b), buf("c", c),
	};
	/* The first: the stream's cuBLAS handle is made (off devqd's loop). */
	p = submit(q, 0, "gemm_f32", args, 8, NULL, 0, true);
	if (devq_wait(q, 0, p, 60000, &cc) < 0)
		die(q, "wait");
	if (cc.code != DEVQ_OK && strstr(cc.message, "cuBLAS unavailable")) {
		printf("SKIP gemm: %s\n", cc.message);
		goto out;
	}
	check(cc.code == DEVQ_OK, "gemm_f32 runs", "%s", cc.code == DEVQ_OK ? "first call ok" : cc.message);
	if (cc.code != DEVQ_OK)
		goto out;
	uint64_t *dev = calloc((size_t)reps, sizeof(*dev)), *wall = calloc((size_t)reps, sizeof(*wall));
	bool ok = dev && wall;
	for (int i = 0; i < reps && ok; i++) {
		uint64_t t0 = devq_now_ns();
		p = submit(q, 0, "gemm_f32", args, 8, NULL, 0, true);
		ok = wait_ok(q, 0, p, &cc);
		wall[i] = devq_now_ns() - t0;
		dev[i] = cc.t.device_end - cc.t.device_start;
	}
	p = xfer(q, 0, DEVQ_OP_COPY, c, (n * n - 1) * 4, h, 0, 4, 0);
	ok = ok && wait_ok(q, 0, p, &cc);
	float last = ok ? *(float *)h->map : -1.0f;
	check(ok && last == (float)n, "gemm_f32 result", ok ? "C = N in the last element" : "failed");
	if (ok)
		printf("INFO gemm: devq %llu^3 median device %.3f ms, submit to completion %.3f ms "
		       "(%.0f GFLOP/s)\nGEMM %.6f %.6f\n", (unsigned long long)n,
		       median_ms(dev, (size_t)reps), median_ms(wall, (size_t)reps),
		       2.0 * (double)n * n * n / (median_ms(dev, (size_t)reps) * 1e6),
		       median_ms(dev, (size_t)reps), median_ms(wall, (size_t)reps));
	free(dev);
	free(wall);
out:
	devq_buffer_release(q, a);
	devq_buffer_release(q, b);
	devq_buffer_release(q, c);
	devq_buffer_release(q, h);
	devq_buffer_wait_released(q, h, 30000);
}

/* cuBLAS in this process, the baseline of gemm_devq.  Returns the exit
 * status. */
static int gemm_cublas(uint64_t n, int reps)
{
	void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!drv || !dlsym(drv, "cuGetExportTable")) {
		printf("SKIP cublas: %s\n", drv ? "libcuda.so.1 is not NVIDIA's driver (no "
						    "cuGetExportTable: the simulator?)"
						  : "no libcuda.so.1");
		return 0;
	}
	const char *env = getenv("DEVQ_CUBLAS");
	const char *paths[] = { env && *env ? env : "libcublas.so.13",
				"libcublas.so.13",
				"/usr/local/cuda/lib64/libcublas.so.13",
				"/usr/local/cuda-13/lib64/libcublas.so.13",
				"/usr/lib/x86_64-linux-gnu/libcublas.so.13" };
	void *bl = NULL;
	const char *found = NULL;
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]) && !bl; i++)
		if ((bl = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL)))
			found = paths[i];
	if (!bl) {
		printf("SKIP cublas: libcublas.so.13 not found ($DEVQ_CUBLAS, the dynamic linker's "
		       "path, /usr/local/cuda/lib64, /usr/local/cuda-13/lib64, "
		       "/usr/lib/x86_64-linux-gnu)\n");
		return 0;
	}
#define SYM(h, name) __typeof__(&name) p_##name = (__typeof__(&name))dlsym(h, #name)
	SYM(drv, cuInit);
	SYM(drv, cuDeviceGet);
	SYM(drv, cuDevicePrimaryCtxRetain);
	SYM(drv, cuCtxSetCurrent);
	SYM(drv, cuStreamCreate);
	SYM(drv, cuEventCreate);
	SYM(drv, cuEventRecord);
	SYM(drv, cuEventSynchronize);
	SYM(drv, cuEventElapsedTime);
	CUresult (*p_alloc)(CUdeviceptr *, size_t) = (CUresult(*)(CUdeviceptr *, size_t))dlsym(drv, "cuMemAlloc_v2");
	CUresult (*p_memset)(CUdeviceptr, unsigned, size_t) =
		(CUresult(*)(CUdeviceptr, unsigned, size_t))dlsym(drv, "cuMemsetD32_v2");
	SYM(bl, cublasCreate_v2);
	SYM(bl, cublasSetStream_v2);
	SYM(bl, cublasSgemm_v2);
#undef SYM
	if (!p_cuInit || !p_cuDeviceGet || !p_cuDevicePrimaryCtxRetain || !p_cuCtxSetCurrent ||
	    !p_cuStreamCreate || !p_cuEventCreate || !p_cuEventRecord || !p_cuEventSynchronize ||
	    !p_cuEventElapsedTime || !p_alloc || !p_memset || !p_cublasCreate_v2 ||
	    !p_cublasSetStream_v2 || !p_cublasSgemm_v2) {
		printf("FAIL cublas: a driver or cuBLAS call is missing\n");
		return 1;
	}
	CUdevice dev;
	CUcontext ctx;
	CUstream s;
	CUdeviceptr a, b, c;
	CUevent e0, e1;
	cublasHandle_t h;
	if (p_cuInit(0) || p_cuDeviceGet(&dev, 0) || p_cuDevicePrimaryCtxRetain(&ctx, dev) ||
	    p_cuCtxSetCurrent(ctx) || p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) ||
	    p_alloc(&a, n * n * 4) || p_alloc(&b, n * n * 4) || p_alloc(&c, n * n * 4) ||
	    p_memset(a, 0x3f800000u, n * n) || p_memset(b, 0x3f800000u, n * n) ||
	    p_cuEventCreate(&e0, CU_EVENT_DEFAULT) || p_cuEventCreate(&e1, CU_EVENT_BLOCKING_SYNC) ||
	    p_cublasCreate_v2(&h) || p_cublasSetStream_v2(h, (cudaStream_t)s)) {
		printf("FAIL cublas: setting up the baseline failed\n");
		return 1;
	}
	const float alpha = 1.0f, beta = 0.0f;
	uint64_t *dv = calloc((size_t)reps + 1, sizeof(*dv)), *wl = calloc((size_t)reps + 1, sizeof(*wl));
	if (!dv || !wl)
		return 1;
	for (int i = 0; i <= reps; i++) { /* the first warms up */
		uint64_t t0 = devq_now_ns();
		float ms = 0;
		if (p_cuEventRecord(e0, s) ||
		    p_cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)n, (int)n, (int)n, &alpha,
				     (const float *)b, (int)n, (const float *)a, (int)n, &beta,
				     (float *)c, (int)n) ||
		    p_cuEventRecord(e1, s) || p_cuEventSynchronize(e1) ||
		    p_cuEventElapsedTime(&ms, e0, e1)) {
			printf("FAIL cublas: cublasSgemm failed\n");
			return 1;
		}
		wl[i] = devq_now_ns() - t0;
		dv[i] = (uint64_t)(ms * 1e6);
	}
	double dm = median_ms(dv + 1, (size_t)reps), wm = median_ms(wl + 1, (size_t)reps);
	printf("INFO cublas: in-process %llu^3 median device %.3f ms, call to sync %.3f ms "
	       "(%.0f GFLOP/s), %s\nCUBLAS %.6f %.6f\n", (unsigned long long)n, dm, wm,
	       2.0 * (double)n * n * n / (dm * 1e6), found, dm, wm);
	return 0;
}

/* ---- iso ------------------------------------------------------------ */

struct iso_flood {
	const char *sock;
	atomic_bool stop, ready;
	unsigned long long gemms;
	char err[200];
};

/* Tenant B: two 4096^3 gemms in flight (queues 0 and 1) until stopped. */
static void *iso_flood(void *arg)
{
	struct iso_flood *f = arg;
	enum { N = 4096 };
	devq *b;
	struct devq_buffer *x, *y, *z[2];
	if (devq_connect(f->sock, "gpu_check-iso-flood", &b) < 0 || devq_queue_open(b, 0) < 0 ||
	    devq_queue_open(b, 1) < 0 ||
	    devq_buffer_create(b, (uint64_t)N * N * 4, DEVQ_BUFFER_DEVICE, &x) < 0 ||
	    devq_buffer_create(b, (uint64_t)N * N * 4, DEVQ_BUFFER_DEVICE, &y) < 0 ||
	    devq_buffer_create(b, (uint64_t)N * N * 4, DEVQ_BUFFER_DEVICE, &z[0]) < 0 ||
	    devq_buffer_create(b, (uint64_t)N * N * 4, DEVQ_BUFFER_DEVICE, &z[1]) < 0) {
		snprintf(f->err, sizeof(f->err), "flood set-up: %s", devq_last_error(b));
		atomic_store(&f->ready, true);
		return NULL;
	}
	uint64_t pt[2] = { 0, 0 };
	for (uint32_t k = 0; !atomic_load(&f->stop); k++) {
		uint32_t qi = k % 2;
		struct devq_completion c;
		if (pt[qi] && devq_wait(b, qi, pt[qi], 60000, &c) < 0) {
			snprintf(f->err, sizeof(f->err), "flood wait: %s", devq_last_error(b));
			break;
		}
		if (pt[qi] && c.code != DEVQ_OK) {
			snprintf(f->err, sizeof(f->err), "flood gemm: %s", c.message);
			break;
		}
		if (pt[qi])
			f->gemms++;
		struct devq_arg a[] = {
			u64("m", N), u64("n", N), u64("k", N),
			{ .name = "alpha", .type = DEVQ_ARG_F32, .v.f32 = 1.0f },
			{ .name = "beta", .type = DEVQ_ARG_F32, .v.f32 = 0.0f },
			buf("a", x), buf("b", y), buf("c", z[qi]),
		};
		pt[qi] = submit(b, qi, "gemm_f32", a, 8, NULL, 0, false);
		if (devq_flush(b) < 0)
			break;
		if (k == 1)
			atomic_store(&f->ready, true);
	}
	atomic_store(&f->ready, true);
	devq_disconnect(b); /* what is in flight is cancelled or finishes */
	return NULL;
}

static void iso_sample(devq *q, const struct devq_arg *args, uint64_t *rt, int n)
{
	for (int i = -10; i < n; i++) {
		struct timespec gap = { 0, 10 * 1000 * 1000 };
		nanosleep(&gap, NULL);
		uint64_t p = submit(q, 0, "gemm_f32", (struct devq_arg *)args, 8, NULL, 0, false);
		struct devq_completion c;
		if (!wait_ok(q, 0, p, &c))
			die(q, "iso: L's gemm failed");
		if (i >= 0)
			rt[i] = c.t.client_received - c.t.client_submit;
	}
	qsort(rt, (size_t)n, sizeof(*rt), cmp_u64);
}

/* Tenant L's tail alone and beside a cuBLAS gemm flood of another
 * session: what the CPU backend's bench/iso.sh measures, on the device. */
static void iso(devq *q, const char *sock)
{
	enum { N = 300 };
	struct devq_buffer *a, *b, *c;
	if (devq_buffer_create(q, 8 * 1024 * 4, DEVQ_BUFFER_DEVICE, &a) < 0 ||
	    devq_buffer_create(q, 1024 * 1024 * 4, DEVQ_BUFFER_DEVICE, &b) < 0 ||
	    devq_buffer_create(q, 8 * 1024 * 4, DEVQ_BUFFER_DEVICE, &c) < 0)
		die(q, "iso buffers");
	struct devq_arg args[] = {
		u64("m", 8), u64("n", 1024), u64("k", 1024),
		{ .name = "alpha", .type = DEVQ_ARG_F32, .v.f32 = 1.0f },
		{ .name = "beta", .type = DEVQ_ARG_F32, .v.f32 = 0.0f },
		buf("a", a), buf("b", b), buf("c", c),
	};
	struct devq_completion cc;
	uint64_t p = submit(q, 0, "gemm_f32", args, 8, NULL, 0, true);
	if (devq_wait(q, 0, p, 60000, &cc) < 0)
		die(q, "wait");
	if (cc.code != DEVQ_OK && strstr(cc.message, "cuBLAS unavailable")) {
		printf("SKIP iso: %s\n", cc.message);
		return;
	}
	static uint64_t alone[N], beside[N];
	iso_sample(q, args, alone, N);
	struct iso_flood f = { .sock = sock };
	pthread_t t;
	if (pthread_create(&t, NULL, iso_flood, &f))
		die(q, "iso: thread");
	while (!atomic_load(&f.ready))
		usleep(1000);
	if (!f.err[0])
		iso_sample(q, args, beside, N);
	atomic_store(&f.stop, true);
	pthread_join(t, NULL);
	check(!f.err[0], "iso", "%s", f.err[0] ? f.err : "L sampled alone and beside the flood");
	if (f.err[0])
		return;
	printf("BENCH iso_alone_us p50 %.1f p99 %.1f n %d\n", alone[N / 2] / 1e3,
	       alone[N * 99 / 100] / 1e3, N);
	printf("BENCH iso_beside_us p50 %.1f p99 %.1f n %d flood_gemms %llu\n", beside[N / 2] / 1e3,
	       beside[N * 99 / 100] / 1e3, N, f.gemms);
}

int main(int argc, char **argv)
{
	/* The baseline runs without devqd (before it starts: a GPU in
	 * EXCLUSIVE_PROCESS mode takes one context at a time). */
	if (argc >= 3 && !strcmp(argv[2], "cublas"))
		return gemm_cublas(argc > 3 ? strtoull(argv[3], NULL, 10) : 4096,
				   argc > 4 ? atoi(argv[4]) : 10);
	if (argc < 3) {
		fprintf(stderr, "usage: gpu_check SOCKET order|seed|bench N|graph N|devbuf|roimport|"
				"prio|cancel|deadlock|onegraph|stopload|place|counters|fault|gemm N R|iso\n"
				"       gpu_check - cublas N R\n");
		return 64;
	}
	devq *q;
	if (devq_connect(argv[1], "gpu_check", &q) < 0)
		die(q, "connect");
	const struct devq_info *in = devq_get_info(q);
	printf("devqd %s, backend %s, device %s\n", in->daemon_version, in->backend, in->device);
	if (strcmp(in->backend, "cuda")) {
		printf("FAIL backend: devqd is not on the GPU (backend %s)\n", in->backend);
		return 2;
	}
	for (uint32_t i = 0; i < 4; i++)
		if (devq_queue_open(q, i) < 0)
			die(q, "queue");
	if (!strcmp(argv[2], "order")) {
		order(q, true);
		order(q, false);
	} else if (!strcmp(argv[2], "seed")) {
		seed(q);
	} else if (!strcmp(argv[2], "bench")) {
		bench(q, argc > 3 ? atoi(argv[3]) : 2000);
	} else if (!strcmp(argv[2], "sporadic")) {
		sporadic(q);
	} else if (!strcmp(argv[2], "graph")) {
		graph(q, argc > 3 ? atoi(argv[3]) : 200);
	} else if (!strcmp(argv[2], "devbuf")) {
		devbuf(q);
	} else if (!strcmp(argv[2], "roimport")) {
		roimport(q);
	} else if (!strcmp(argv[2], "prio")) {
		prio(q, argv[1]);
	} else if (!strcmp(argv[2], "cancel")) {
		cancel(q, argv[1]);
	} else if (!strcmp(argv[2], "deadlock")) {
		deadlock(q);
	} else if (!strcmp(argv[2], "onegraph")) {
		onegraph(q);
	} else if (!strcmp(argv[2], "stopload")) {
		stopload(q);
	} else if (!strcmp(argv[2], "place")) {
		place(q, argv[1]);
	} else if (!strcmp(argv[2], "counters")) {
		counters(q);
	} else if (!strcmp(argv[2], "fault")) {
		fault(q, argv[1]);
	} else if (!strcmp(argv[2], "iso")) {
		iso(q, argv[1]);
	} else if (!strcmp(argv[2], "gemm")) {
		gemm_devq(q, argc > 3 ? strtoull(argv[3], NULL, 10) : 4096, argc > 4 ? atoi(argv[4]) : 10);
	} else {
		fprintf(stderr, "gpu_check: unknown mode %s\n", argv[2]);
		return 64;
	}
	devq_disconnect(q);
	return failures ? 1 : 0;
}
