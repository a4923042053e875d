/* SPDX-License-Identifier: Apache-2.0 */
/* Launch geometry for the CUDA kernels in kernels/cuda_kernels.cu.  Pure C,
 * no CUDA headers, so the backend and the tests can share it.
 *
 * Launch convention (what every devq_* kernel expects):
 *   cuLaunchKernel(fn, grid,1,1, block,1,1, 0, stream, params, NULL) with
 *   params[i] = &args[i], args being the op's union devq_kval array in
 *   manifest order.  The kernels read u64 as unsigned long long, u32 as
 *   unsigned int, f32 as float and buffers as device pointers already offset
 *   to the argument's first element, so the union's leading bytes are what
 *   each parameter needs on a little-endian host.
 *
 * Every kernel is correct for any grid and block; the dimensions chosen here
 * only make it fast. */
#ifndef DEVQ_CUDA_LAUNCH_H
#define DEVQ_CUDA_LAUNCH_H

#include <stdint.h>

/* Entry point of manifest kernel NAME in the module: "devq_" NAME. */
#define DEVQ_CUDA_PREFIX "devq_"

/* Largest block any devq kernel is launched with; the single-block
 * reductions size their shared memory for it. */
#define DEVQ_CUDA_MAX_BLOCK 1024u

/* Chooses grid and block (x dimensions; y and z are 1) for kernel `kernel`
 * of the kernel table (devq_kernels: the manifest plus the test-only
 * "fault"), by name without the prefix.  n is the value of the kernel's "n"
 * argument (its element count; ignored by spin and fault); sm_count is the
 * device's
 * multiprocessor count (0 is treated as 1).  Returns 0, or -ENOENT for a
 * name that is not a devq kernel (grid and block are then left alone). */
int devq_cuda_launch_dims(const char *kernel, uint64_t n, unsigned sm_count,
			  unsigned *grid, unsigned *block);

#endif
