/* SPDX-License-Identifier: Apache-2.0 */
/* Device images of repository executables (core/repo.h) for the CUDA
 * backend: loading one (fatbin, cubin or PTX) into the backend's context,
 * finding and checking its entry, launching it, unloading it.  Kept apart
 * from backend_cuda.c, which only calls these from its load_image,
 * unload_image, has_kernel and launch paths.
 *
 * Launch convention of a repository entry: `extern "C" __global__`, its
 * parameters in signature order (scalars by value, buffers as device
 * pointers already offset); launched with blocks of DEVQ_EXE_CUDA_BLOCK
 * threads and enough blocks for one thread per element of the u64
 * parameter named n (one block when there is none): the kernel checks its
 * index against n. */
#ifndef DEVQ_EXE_CUDA_H
#define DEVQ_EXE_CUDA_H

#include <stddef.h>

#include <cuda.h>

#include "device/cuda/cuda_drv.h"
#include "kernels.h"

#define DEVQ_EXE_CUDA_BLOCK 256u
#define DEVQ_EXE_CUDA_MAX_IMAGE (64u << 20) /* bytes of one device image */

/* Any thread: makes ctx current, reads path, checks that it has code for
 * the device (SASS of its compute capability or PTX it can JIT), loads it
 * and finds entry, whose parameter count and sizes must match sig where
 * the driver reports them (cuFuncGetParamInfo, drivers of CUDA 12.4 on).
 * 0 with *out, or a negative errno with the reason in err. */
int devq_exe_cuda_load(const struct devq_cuda_drv *drv, CUcontext ctx, CUdevice dev,
		       const char *path, const char *entry, const struct devq_sig *sig, void **out,
		       char *err, size_t errlen);
/* Loop thread, after the last op that used it completed. */
void devq_exe_cuda_unload(const struct devq_cuda_drv *drv, CUcontext ctx, void *img);
/* Launches img's entry on s with op arguments args (the backend's lock
 * held, as for its own kernels). */
CUresult devq_exe_cuda_launch(const struct devq_cuda_drv *drv, void *img, CUstream s,
			      const union devq_kval *args);

#endif
