/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA driver, loaded at run time.  devqd links no libcuda: it dlopens
 * libcuda.so.1 and resolves every entry point through cuGetProcAddress_v2
 * for the CUDA version this file was compiled against, so the typedefs in
 * cuda.h and the driver's ABI agree and one binary starts on hosts with and
 * without a driver. */
#ifndef DEVQ_CUDA_DRV_H
#define DEVQ_CUDA_DRV_H

#include <stddef.h>

#include <cuda.h>

/* X-macro of every driver call devqd makes.  The names are cuda.h's, which
 * map some of them to versioned symbols (cuMemAlloc -> cuMemAlloc_v2); the
 * member types follow, and cuGetProcAddress is asked for the plain name at
 * CUDA_VERSION, which yields that same version. */
#define DEVQ_CUDA_CALLS(X)              \
	X(cuInit)                       \
	X(cuDriverGetVersion)           \
	X(cuDeviceGetCount)             \
	X(cuDeviceGet)                  \
	X(cuDeviceGetName)              \
	X(cuDeviceGetAttribute)         \
	X(cuDeviceTotalMem)             \
	X(cuDevicePrimaryCtxRetain)     \
	X(cuDevicePrimaryCtxRelease)    \
	X(cuCtxSetCurrent)              \
	X(cuCtxGetStreamPriorityRange)  \
	X(cuModuleLoadData)             \
	X(cuModuleUnload)               \
	X(cuModuleGetFunction)          \
	X(cuStreamCreateWithPriority)   \
	X(cuStreamDestroy)              \
	X(cuStreamWaitEvent)            \
	X(cuEventCreate)                \
	X(cuEventDestroy)               \
	X(cuEventRecord)                \
	X(cuEventSynchronize)           \
	X(cuEventElapsedTime)           \
	X(cuLaunchKernel)               \
	X(cuMemAlloc)                   \
	X(cuMemFree)                    \
	X(cuMemcpyHtoD)                 \
	X(cuMemcpyDtoH)                 \
	X(cuCtxSynchronize)             \
	X(cuMemAllocAsync)              \
	X(cuMemFreeAsync)               \
	X(cuMemGetInfo)                 \
	X(cuMemHostRegister)            \
	X(cuMemHostUnregister)          \
	X(cuMemHostGetDevicePointer)    \
	X(cuMemcpyAsync)                \
	X(cuMemsetD32Async)             \
	X(cuMemsetD8Async)              \
	X(cuStreamBeginCapture)         \
	X(cuStreamEndCapture)           \
	X(cuGraphInstantiateWithFlags)  \
	X(cuGraphLaunch)                \
	X(cuGraphExecDestroy)           \
	X(cuGraphDestroy)

struct devq_cuda_drv {
	void *lib; /* dlopen handle */
	int driver_version; /* e.g. 13000 for CUDA 13.0 */
#define DEVQ_CUDA_MEMBER(name) __typeof__(&name) name;
	DEVQ_CUDA_CALLS(DEVQ_CUDA_MEMBER)
#undef DEVQ_CUDA_MEMBER
};

/* Loads the driver and resolves every call; does not call cuInit.
 * lib: the library to open (NULL: "libcuda.so.1").  Returns 0, or
 *   -ENOENT   no driver library,
 *   -ENOSYS   a library without cuGetProcAddress_v2 or without a call we need,
 *   -ENODEV   the toolkit's stub library (CUDA_ERROR_STUB_LIBRARY),
 *   -EPROTO   a driver older than this build's CUDA version,
 * always with a sentence for an operator in err. */
int devq_cuda_drv_open(struct devq_cuda_drv *drv, const char *lib, char *err, size_t errlen);
void devq_cuda_drv_close(struct devq_cuda_drv *drv);

/* "CUDA_ERROR_ILLEGAL_ADDRESS" and the like.  Our own table: the stub
 * library and old drivers do not all answer cuGetErrorName. */
const char *devq_cuda_drv_error_name(CUresult r);
/* Whether r leaves the context unusable (the process must restart). */
int devq_cuda_drv_error_is_sticky(CUresult r);

/* The oldest driver branch that runs code built with this CUDA version. */
#define DEVQ_CUDA_MIN_DRIVER_BRANCH 580

#endif
