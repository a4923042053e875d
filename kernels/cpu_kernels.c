/* SPDX-License-Identifier: Apache-2.0 */
/* CPU implementations of the manifest kernels.  Arguments follow the manifest
 * order; buffers arrive as host pointers already offset and bounds-checked by
 * the daemon against devq_sig_extent_bytes. */
#include <errno.h>
#include <math.h>
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

/* fmaf is correctly rounded by definition, so whether gcc emits vfmadd or a
 * libm call, scalar or vector, the result is bit-identical to a GPU's fmaf.
 * That holds only without -ffast-math, which this file must never get. */
int devq_cpu_saxpy_f32(const union devq_kval *args, const struct devq_kctx *ctx)
{
	size_t n = count(&args[0]);
	float a = args[1].f32;
	const float *x = args[2].ptr;
	float *y = args[3].ptr;

	(void)ctx;
	for (size_t i = 0; i < n; i++)
		y[i] = fmaf(a, x[i], y[i]);
	return 0;
}

int devq_cpu_vadd_f32(const union devq_kval *args, const struct devq_kctx *ctx)
{
	size_t n = count(&args[0]);
	const float *a = args[1].ptr, *b = args[2].ptr;
	float *c = args[3].ptr;

	(void)ctx;
	for (size_t i = 0; i < n; i++)
		c[i] = a[i] + b[i];
	return 0;
}

/* A double accumulator keeps the error near n*DBL_EPSILON, far inside the
 * n*FLT_EPSILON budget every backend is held to, without pairwise bookkeeping. */
int devq_cpu_reduce_sum_f32(const union devq_kval *args, const struct devq_kctx *ctx)
{
	size_t n = count(&args[0]);
	const float *x = args[1].ptr;
	float *out = args[2].ptr;
	double s = 0.0;

	(void)ctx;
	for (size_t i = 0; i < n; i++)
		s += x[i];
	out[0] = (float)s;
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
