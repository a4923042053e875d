/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA driver, loaded at run time.  devqd links no libcuda: it dlopens
 * libcuda.so.1 and resolves every entry point through cuGetProcAddress_v2
 * at one fixed CUDA version, DEVQ_CUDA_API_VERSION, so one binary starts on
 * hosts with and without a driver, and a build with a newer toolkit still
 * asks a 13.0 driver only for what it has. */
#ifndef DEVQ_CUDA_DRV_H
#define DEVQ_CUDA_DRV_H

#include <stddef.h>

#include <cuda.h>

/* X-macro of every driver call devqd makes.  The names are cuda.h's, which
 * map some of them to versioned symbols (cuMemAlloc -> cuMemAlloc_v2); the
 * member types follow, and cuGetProcAddress is asked for the plain name at
 * DEVQ_CUDA_API_VERSION, which yields the version cuda.h of that toolkit
 * maps it to. */

/* The driver API devq is written against: CUDA 13.0.  Every entry point is
 * resolved at this version, whatever toolkit compiled devq, so the
 * driver's answer does not move with the build machine; a driver older than
 * it is refused by name.  The typedefs still come from the toolkit's cuda.h:
 * one newer than 13.0 may declare a changed signature for a call, which is
 * why `make gpu-bundle` refuses any toolkit but 13.0 unless told
 * (CUDA_TOOLKIT_ANY=1; see mk/cuda.mk). */
#define DEVQ_CUDA_API_VERSION 13000
_Static_assert(CUDA_VERSION >= DEVQ_CUDA_API_VERSION,
	       "devq needs the CUDA 13.0 toolkit's cuda.h (or newer) to build its CUDA backend");
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
	/* Optional, NULL where the driver lacks it: only the metrics' UUID
	 * label (Status.uuid) needs it, which is no reason to refuse a GPU. */
	__typeof__(&cuDeviceGetUuid) cuDeviceGetUuid;
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

/* "CUDA_ERROR_ILLEGAL_ADDRESS (700)" and the like, or "CUDA error N" for a
 * code the table lacks.  Our own table: the stub library and old drivers do
 * not all answer cuGetErrorName.  The text lives in a per-thread buffer,
 * valid until the thread's next call. */
const char *devq_cuda_drv_error_name(CUresult r);
/* Whether r leaves the context unusable (the process must restart). */
int devq_cuda_drv_error_is_sticky(CUresult r);

/* The oldest driver branch that supports DEVQ_CUDA_API_VERSION. */
#define DEVQ_CUDA_MIN_DRIVER_BRANCH 580

#endif
