/* SPDX-License-Identifier: Apache-2.0 */
/* CPU implementations of the manifest kernels.  Arguments follow the manifest
 * order; buffers arrive as host pointers already offset and bounds-checked by
 * the daemon against devq_sig_extent_bytes. */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_kernels.h"

/* Buffer extents are validated as u64 byte counts; on LP64 they fit size_t. */
static size_t count(const union devq_kval *a)
{
	return (size_t)a->u64;
}

int devq_cpu_fill_u32(const union devq_kval *args, const struct devq_kctx *ctx)
{
	size_t n = count(&args[0]);
	uint32_t v = args[1].u32, *dst = args[2].ptr;

	(void)ctx;
	for (size_t i = 0; i < n; i++)
		dst[i] = v;
	return 0;
}

int devq_cpu_copy(const union devq_kval *args, const struct devq_kctx *ctx)
{
	(void)ctx;
	/* memmove: a client may pass overlapping ranges of one allocation. */
	if (count(&args[0]))
		memmove(args[2].ptr, args[1].ptr, count(&args[0]));
	return 0;
}

/* ---- Run-time CPU dispatch ----
 *
 * The build targets baseline x86-64, which has neither FMA nor AVX: there
 * fmaf is a libm call per element and a reduction into one double adds one
 * element per add latency, both well below memory speed.  The streaming
 * kernels therefore come twice: a portable variant and, on x86-64, one
 * compiled for AVX2+FMA, picked once at start from what the CPU (and its
 * OS) supports.  Both give the same bits for every input: fmaf and the FMA
 * instruction are both correctly rounded, and the reduction adds the same
 * elements into the same lanes in the same order in both.  (An output that
 * overlaps an input at a shift is the exception: which inputs are read
 * before being overwritten depends on the vector width, as such an overlap
 * races on a GPU.  The very same range, y = x, gives the same bits.)
 * tests/test_kernels runs each kernel under every variant this CPU has and
 * compares them. */
static atomic_int cpu_isa = DEVQ_CPU_ISA_BASELINE;

#if defined(__x86_64__)
#define HAVE_AVX2_VARIANT 1
#define AVX2_FMA __attribute__((target("avx2,fma")))
#endif

bool devq_cpu_isa_supported(enum devq_cpu_isa isa)
{
	switch (isa) {
	case DEVQ_CPU_ISA_BASELINE:
		return true;
	case DEVQ_CPU_ISA_AVX2:
#ifdef HAVE_AVX2_VARIANT
		/* libgcc's check includes the OS saving the YMM state (XGETBV). */
		__builtin_cpu_init();
		return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
		return false;
#endif
	}
	return false;
}

const char *devq_cpu_isa_name(enum devq_cpu_isa isa)
{
	return isa == DEVQ_CPU_ISA_AVX2 ? "avx2" : "baseline";
}

enum devq_cpu_isa devq_cpu_isa(void)
{
	return (enum devq_cpu_isa)atomic_load_explicit(&cpu_isa, memory_order_relaxed);
}

int devq_cpu_isa_set(enum devq_cpu_isa isa)
{
	if (!devq_cpu_isa_supported(isa))
		return -ENOTSUP;
	atomic_store_explicit(&cpu_isa, (int)isa, memory_order_relaxed);
	return 0;
}

enum devq_cpu_isa devq_cpu_isa_choose(const char *want)
{
	if (want && strcmp(want, "baseline") == 0)
		return DEVQ_CPU_ISA_BASELINE;
	return devq_cpu_isa_supported(DEVQ_CPU_ISA_AVX2) ? DEVQ_CPU_ISA_AVX2
							 : DEVQ_CPU_ISA_BASELINE;
}

/* Chosen before main, so every worker sees one variant all its life. */
__attribute__((constructor)) static void cpu_isa_init(void)
{
	atomic_store_explicit(&cpu_isa, (int)devq_cpu_isa_choose(getenv("DEVQ_CPU_ISA")),
			      memory_order_relaxed);
}

static bool use_avx2(void)
{
	return atomic_load_explicit(&cpu_isa, memory_order_relaxed) == DEVQ_CPU_ISA_AVX2;
}

/* fmaf is correctly rounded by definition, so whether it is a libm call or
 * the FMA instruction, scalar or vector, the result is bit-identical to a
 * GPU's fmaf.  That holds only without -ffast-math (which could split it
 * into a multiply and an add), which this file must never get. */
static void saxpy_baseline(size_t n, float a, const float *x, float *y)
{
	for (size_t i = 0; i < n; i++)
		y[i] = fmaf(a, x[i], y[i]);
}

static void vadd_baseline(size_t n, const float *a, const float *b, float *c)
{
	for (size_t i = 0; i < n; i++)
		c[i] = a[i] + b[i];
}

/* The reduction's lanes: element i goes into lane i % RLANES (the tail, too,
 * as i - start), each lane a double summed in element order, and the lanes
 * are folded pairwise in a fixed order.  Several independent accumulators
 * let the adds overlap (one accumulator is bound by the add's latency, not
 * by memory); doubles keep the error near n*DBL_EPSILON, far inside the
 * n*FLT_EPSILON budget every backend is held to. */
#define RLANES 16

static double fold_lanes(double *acc)
{
	for (unsigned w = RLANES / 2; w; w /= 2)
		for (unsigned j = 0; j < w; j++)
			acc[j] += acc[j + w];
	return acc[0];
}

static double reduce_baseline(size_t n, const float *x)
{
	double acc[RLANES] = { 0 };
	size_t i = 0;

	for (; i + RLANES <= n; i += RLANES)
		for (unsigned j = 0; j < RLANES; j++)
			acc[j] += x[i + j];
	for (unsigned j = 0; i < n; i++, j++)
		acc[j] += x[i];
	return fold_lanes(acc);
}

/* Stores that bypass the cache pay off only when the output is far larger
 * than the caches (it is not read back soon, and skipping the line reads
 * for ownership saves a third of vadd's traffic); below this the plain
 * stores leave it in cache for whatever reads it next. */
#define STREAM_MIN_BYTES (32u << 20)

#ifdef HAVE_AVX2_VARIANT
#include <immintrin.h>

AVX2_FMA static void saxpy_avx2(size_t n, float a, const float *x, float *y)
{
	const __m256 va = _mm256_set1_ps(a);
	size_t i = 0;

	for (; i + 32 <= n; i += 32) {
		__m256 y0 = _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i));
		__m256 y1 = _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8));
		__m256 y2 = _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16));
		__m256 y3 = _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24));
		_mm256_storeu_ps(y + i, y0);
		_mm256_storeu_ps(y + i + 8, y1);
		_mm256_storeu_ps(y + i + 16, y2);
		_mm256_storeu_ps(y + i + 24, y3);
	}
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
	for (; i < n; i++) /* with "fma" enabled, fmaf is one instruction */
		y[i] = fmaf(a, x[i], y[i]);
}

AVX2_FMA static void vadd_avx2(size_t n, const float *a, const float *b, float *c)
{
	size_t i = 0;

	if (n * sizeof *c >= STREAM_MIN_BYTES) {
		/* Streaming stores need 32-byte aligned addresses: plain ones
		 * up to the first, then whole vectors streamed. */
		for (; i < n && ((uintptr_t)(c + i) & 31); i++)
			c[i] = a[i] + b[i];
		for (; i + 8 <= n; i += 8)
			_mm256_stream_ps(c + i, _mm256_add_ps(_mm256_loadu_ps(a + i),
							      _mm256_loadu_ps(b + i)));
		/* Orders the streamed stores before the completion is
		 * published (they are weakly ordered). */
		_mm_sfence();
	}
	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(c + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
	for (; i < n; i++)
		c[i] = a[i] + b[i];
}

AVX2_FMA static double reduce_avx2(size_t n, const float *x)
{
	/* RLANES = 16: lanes 0-3 in s0, 4-7 in s1, 8-11 in s2, 12-15 in s3. */
	__m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
	double acc[RLANES];
	size_t i = 0;

	for (; i + RLANES <= n; i += RLANES) {
		s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm_loadu_ps(x + i)));
		s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)));
		s2 = _mm256_add_pd(s2, _mm256_cvtps_pd(_mm_loadu_ps(x + i + 8)));
		s3 = _mm256_add_pd(s3, _mm256_cvtps_pd(_mm_loadu_ps(x + i + 12)));
	}
	_mm256_storeu_pd(acc, s0);
	_mm256_storeu_pd(acc + 4, s1);
	_mm256_storeu_pd(acc + 8, s2);
	_mm256_storeu_pd(acc + 12, s3);
	for (unsigned j = 0; i < n; i++, j++)
		acc[j] += x[i];
	return fold_lanes(acc);
}
#else
static void saxpy_avx2(size_t n, float a, const float *x, float *y)
{
	saxpy_baseline(n, a, x, y);
}

static void vadd_avx2(size_t n, const float *a, const float *b, float *c)
{
	vadd_baseline(n, a, b, c);
}

static double reduce_avx2(size_t n, const float *x)
{
	return reduce_baseline(n, x);
}
#endif

int devq_cpu_saxpy_f32(const union devq_kval *args, const struct devq_kctx *ctx)
{
	size_t n = count(&args[0]);

	(void)ctx;
	(use_avx2() ? saxpy_avx2 : saxpy_baseline)(n, args[1].f32, args[2].ptr, args[3].ptr);
	return 0;
}

int devq_cpu_vadd_f32(const union devq_kval *args, const struct devq_kctx *ctx)
{
	size_t n = count(&args[0]);

	(void)ctx;
	(use_avx2() ? vadd_avx2 : vadd_baseline)(n, args[1].ptr, args[2].ptr, args[3].ptr);
	return 0;
}

int devq_cpu_reduce_sum_f32(const union devq_kval *args, const struct devq_kctx *ctx)
{
	size_t n = count(&args[0]);
	float *out = args[2].ptr;

	(void)ctx;
	out[0] = (float)(use_avx2() ? reduce_avx2 : reduce_baseline)(n, args[1].ptr);
	return 0;
}

/* Mixing the index in makes the sum order-independent yet sensitive to
 * misplaced bytes, so backends can split the work however they like. */
int devq_cpu_checksum(const union devq_kval *args, const struct devq_kctx *ctx)
{
	size_t n = count(&args[0]);
	const uint8_t *data = args[1].ptr;
	uint64_t *out = args[2].ptr, s = 0;

	(void)ctx;
	for (size_t i = 0; i < n; i++)
		s += devq_mix64(((uint64_t)i << 8) | data[i]);
	out[0] = s;
	return 0;
}

/* x[i,j] = act(x[i,j] + bias[j]), act 1 ReLU, any other identity (as on
 * CUDA); the shape's product was checked by
 * validation, so rows*cols does not overflow.
 *
 * ReLU without a branch: on activations whose signs are random a
 * compare-and-branch per element mispredicts half the time, 7 times slower
 * than clearing a negative value's bits with a mask (1.5 ms against 0.2 ms
 * for 64 x 4096; bench/RESULTS.md, "PyTorch MLP through devq.torch").  The
 * result is the same: a negative sum is +0.0, NaN and -0.0 stay as they
 * are (v < 0 is false for both). */
int devq_cpu_bias_act_f32(const union devq_kval *args, const struct devq_kctx *ctx)
{
	uint64_t rows = args[0].u64, cols = args[1].u64;
	uint32_t act = args[2].u32;
	const float *bias = args[3].ptr;
	float *x = args[4].ptr;

	(void)ctx;
	for (uint64_t i = 0; i < rows; i++) {
		float *row = x + i * cols;
		if (act != 1) {
			for (uint64_t j = 0; j < cols; j++)
				row[j] += bias[j];
			continue;
		}
		for (uint64_t j = 0; j < cols; j++) {
			float v = row[j] + bias[j];
			uint32_t u;
			memcpy(&u, &v, sizeof(u));
			u &= (uint32_t)(v < 0.0f) - 1u; /* all ones unless negative */
			memcpy(&row[j], &u, sizeof(u));
		}
	}
	return 0;
}

/* Wake this long before the deadline: timer slack and scheduling latency are
 * typically tens of microseconds, so the last stretch is polled. */
#define SPIN_TAIL_NS 50000u

/* Sleeping for the bulk keeps a spin op from stealing a whole core from the
 * daemon on small (2-core) machines; the short busy-poll tail makes the end
 * time accurate, which is what the op exists to model. */
static void spin_until(uint64_t deadline, const struct devq_kctx *ctx)
{
	/* A deadline at the start (a null op: spin 0) has passed already;
	 * no clock to read. */
	if (deadline <= ctx->start_ns)
		return;
	uint64_t now = devq_now_ns();

	if (deadline > now + SPIN_TAIL_NS) {
		uint64_t wake = deadline - SPIN_TAIL_NS;
		struct timespec ts = {
			.tv_sec = (time_t)(wake / 1000000000u),
			.tv_nsec = (long)(wake % 1000000000u),
		};
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
	}
	while (devq_now_ns() < deadline)
		;
}

/* Measured from when the queue started the op, not from the call, so queue
 * overhead does not stretch the op. */
static uint64_t deadline_of(const struct devq_kctx *ctx, uint64_t ns)
{
	uint64_t d = ctx->start_ns + ns;
	return d < ns ? UINT64_MAX : d;
}

int devq_cpu_spin(const union devq_kval *args, const struct devq_kctx *ctx)
{
	spin_until(deadline_of(ctx, args[0].u64), ctx);
	return 0;
}

int devq_cpu_spin_buf(const union devq_kval *args, const struct devq_kctx *ctx)
{
	size_t n = count(&args[1]);
	uint8_t *buf = args[2].ptr;

	spin_until(deadline_of(ctx, args[0].u64), ctx);
	for (size_t i = 0; i < n; i++)
		buf[i]++;
	return 0;
}

int devq_cpu_fault(const union devq_kval *args, const struct devq_kctx *ctx)
{
	spin_until(deadline_of(ctx, args[0].u64), ctx);
	return -ENOTRECOVERABLE;
}
