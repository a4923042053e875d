/* SPDX-License-Identifier: Apache-2.0 */
/* Versions of scale_u32 for tests/repo.sh's reloads, built as shared
 * objects with -DSLOW (multiply by k after 1.5 s: an op that is still
 * running when the next version is loaded) or -DADD (add k instead). */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include <devq/kernel.h>

int scale_u32(const union devq_kval *args, const struct devq_kctx *ctx)
{
	(void)ctx;
	uint64_t n = args[0].u64;
	uint32_t k = args[1].u32;
	uint32_t *x = args[2].ptr;
#ifdef SLOW
	struct timespec ts = { 1, 500 * 1000 * 1000 };
	while (nanosleep(&ts, &ts) != 0)
		;
#endif
	for (uint64_t i = 0; i < n; i++) {
#ifdef ADD
		x[i] += k;
#else
		x[i] *= k;
#endif
	}
	return 0;
}

/* The signature limit end to end (tests/repo.sh): 15 u64 scalars and an
 * output, the 16 parameters a signature may have.  Each scalar is weighted
 * by its position, so a dropped or misplaced argument changes the sum. */
int sum16(const union devq_kval *args, const struct devq_kctx *ctx)
{
	uint64_t s = 0;

	(void)ctx;
	for (unsigned i = 0; i < 15; i++)
		s += args[i].u64 * (i + 1);
	*(uint64_t *)args[15].ptr = s;
	return 0;
}

/* A matrix signature end to end (python/tests/test_matrix.py):
 * m:u64, n:u64, a:in f32[m,n], t:out f32[n,m].  Row-major and contiguous,
 * so a[i][j] is a[i * n + j]: a transpose shows any other layout. */
int transpose_f32(const union devq_kval *args, const struct devq_kctx *ctx)
{
	uint64_t m = args[0].u64, n = args[1].u64;
	const float *a = args[2].ptr;
	float *t = args[3].ptr;

	(void)ctx;
	for (uint64_t i = 0; i < m; i++)
		for (uint64_t j = 0; j < n; j++)
			t[j * m + i] = a[i * n + j];
	return 0;
}
