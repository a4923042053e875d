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
