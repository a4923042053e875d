/* SPDX-License-Identifier: Apache-2.0 */
/* The CPU code of the example repository executable scale_u32: multiply
 * every element of x by k.  Built as a shared object against <devq/kernel.h>
 * (see Makefile here): devqd calls it with the arguments of its signature,
 * "n:u64, k:u32, x:inout u32[n]", in that order, x already a host pointer
 * to n elements. */
#include <devq/kernel.h>

int scale_u32(const union devq_kval *args, const struct devq_kctx *ctx)
{
	(void)ctx;
	uint64_t n = args[0].u64;
	uint32_t k = args[1].u32;
	uint32_t *x = args[2].ptr;
	for (uint64_t i = 0; i < n; i++)
		x[i] *= k;
	return 0;
}
