/* SPDX-License-Identifier: Apache-2.0 */
/* Launch geometry for the CUDA kernels (see cuda_launch.h). */
#include <errno.h>
#include <string.h>

#include "cuda_launch.h"

enum shape {
	SHAPE_ELEMENTWISE, /* one item per thread, grid-stride past the cap */
	SHAPE_COPY,        /* 16-byte vectors per thread */
	SHAPE_ONE_BLOCK,   /* single-block reductions */
	SHAPE_SPIN_BUF,    /* spin per block, then a grid-stride pass */
	SHAPE_SINGLE,      /* one thread */
};

static const struct {
	const char *name;
	enum shape shape;
} table[] = {
	{ "fill_u32", SHAPE_ELEMENTWISE },
	{ "copy", SHAPE_COPY },
	{ "saxpy_f32", SHAPE_ELEMENTWISE },
	{ "vadd_f32", SHAPE_ELEMENTWISE },
	/* Its launch gets n = 0 (no "n" parameter): one block, grid-stride
	 * over rows*cols.  Correct; fast enough for the examples. */
	{ "bias_act_f32", SHAPE_ELEMENTWISE },
	{ "reduce_sum_f32", SHAPE_ONE_BLOCK },
	{ "checksum", SHAPE_ONE_BLOCK },
	{ "spin", SHAPE_SINGLE },
	{ "spin_buf", SHAPE_SPIN_BUF },
	{ "fault", SHAPE_SINGLE },
};

#define BLOCK 256u
/* Eight 256-thread blocks fill an SM's 2048 thread slots; more blocks than
 * that per SM only queue up, and the grid-stride loop covers the rest. */
#define BLOCKS_PER_SM 8u
#define WARP 32u

/* A small op gets one block rounded up to whole warps: the launch cost is
 * the same, and idle warps would only occupy scheduler slots. */
static unsigned block_for(uint64_t items, unsigned max)
{
	if (items >= max)
		return max;
	unsigned b = (unsigned)((items + WARP - 1) / WARP * WARP);
	return b ? b : WARP;
}

static unsigned grid_for(uint64_t items, unsigned block, uint64_t cap)
{
	uint64_t g = (items + block - 1) / block;
	if (g > cap)
		g = cap;
	return g ? (unsigned)g : 1u;
}

int devq_cuda_launch_dims(const char *kernel, uint64_t n, unsigned sm_count,
			  unsigned *grid, unsigned *block)
{
	uint64_t sms = sm_count ? sm_count : 1u;

	if (!kernel)
		return -ENOENT;
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
		if (strcmp(table[i].name, kernel))
			continue;
		switch (table[i].shape) {
		case SHAPE_ELEMENTWISE:
			*block = block_for(n, BLOCK);
			*grid = grid_for(n, *block, sms * BLOCKS_PER_SM);
			break;
		case SHAPE_COPY: {
			uint64_t vecs = n / 16 + (n % 16 != 0);
			*block = block_for(vecs, BLOCK);
			*grid = grid_for(vecs, *block, sms * BLOCKS_PER_SM);
			break;
		}
		case SHAPE_ONE_BLOCK:
			*block = block_for(n, DEVQ_CUDA_MAX_BLOCK);
			*grid = 1;
			break;
		case SHAPE_SPIN_BUF:
			/* At most one block per SM, so every block is resident at
			 * once and all of them spin over the same interval. */
			*block = block_for(n, BLOCK);
			*grid = grid_for(n, *block, sms);
			break;
		case SHAPE_SINGLE:
			*block = 1;
			*grid = 1;
			break;
		}
		return 0;
	}
	return -ENOENT;
}
