/* SPDX-License-Identifier: Apache-2.0 */
/* Run-time loading of the CUDA driver: see cuda_drv.h. */
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "device/cuda/cuda_drv.h"

typedef CUresult (*gpa_fn)(const char *symbol, void **pfn, int cuda_version, cuuint64_t flags,
			   CUdriverProcAddressQueryResult *status);

static const char *known_name(CUresult r)
{
	switch (r) {
#define N(x) case x: return #x;
	N(CUDA_SUCCESS)
	N(CUDA_ERROR_INVALID_VALUE)
	N(CUDA_ERROR_OUT_OF_MEMORY)
	N(CUDA_ERROR_NOT_INITIALIZED)
	N(CUDA_ERROR_DEINITIALIZED)
	N(CUDA_ERROR_STUB_LIBRARY)
	N(CUDA_ERROR_DEVICE_UNAVAILABLE)
	N(CUDA_ERROR_NO_DEVICE)
	N(CUDA_ERROR_INVALID_DEVICE)
	N(CUDA_ERROR_DEVICE_NOT_LICENSED)
	N(CUDA_ERROR_INVALID_IMAGE)
	N(CUDA_ERROR_INVALID_CONTEXT)
	N(CUDA_ERROR_NO_BINARY_FOR_GPU)
	N(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
	N(CUDA_ERROR_INVALID_PTX)
	N(CUDA_ERROR_JIT_COMPILER_NOT_FOUND)
	N(CUDA_ERROR_INVALID_HANDLE)
	N(CUDA_ERROR_NOT_FOUND)
	N(CUDA_ERROR_NOT_READY)
	N(CUDA_ERROR_ILLEGAL_ADDRESS)
	N(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
	N(CUDA_ERROR_LAUNCH_TIMEOUT)
	N(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
	N(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
	N(CUDA_ERROR_HARDWARE_STACK_ERROR)
	N(CUDA_ERROR_ILLEGAL_INSTRUCTION)
	N(CUDA_ERROR_MISALIGNED_ADDRESS)
	N(CUDA_ERROR_INVALID_ADDRESS_SPACE)
	N(CUDA_ERROR_INVALID_PC)
	N(CUDA_ERROR_LAUNCH_FAILED)
	N(CUDA_ERROR_NOT_PERMITTED)
	N(CUDA_ERROR_NOT_SUPPORTED)
	N(CUDA_ERROR_SYSTEM_NOT_READY)
	N(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
	N(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)
	N(CUDA_ERROR_ECC_UNCORRECTABLE)
	N(CUDA_ERROR_NVLINK_UNCORRECTABLE)
	N(CUDA_ERROR_CONTEXT_IS_DESTROYED)
	N(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE)
	N(CUDA_ERROR_CONTAINED)
	N(CUDA_ERROR_ASSERT)
	N(CUDA_ERROR_TENSOR_MEMORY_LEAK)
	N(CUDA_ERROR_MPS_CLIENT_TERMINATED)
	N(CUDA_ERROR_EXTERNAL_DEVICE)
	N(CUDA_ERROR_UNKNOWN)
#undef N
	default:
		return NULL;
	}
}

/* The number always goes with the name: a code newer than this table (or
 * one a driver invents) is then still one that NVIDIA's documentation and
 * a search can answer. */
const char *devq_cuda_drv_error_name(CUresult r)
{
	static _Thread_local char buf[64];
	const char *n = known_name(r);
	if (n)
		snprintf(buf, sizeof(buf), "%s (%d)", n, (int)r);
	else
		snprintf(buf, sizeof(buf), "CUDA error %d", (int)r);
	return buf;
}

/* The errors after which the CUDA documentation says the context, and the
 * process, cannot continue. */
int devq_cuda_drv_error_is_sticky(CUresult r)
{
	switch (r) {
	case CUDA_ERROR_ILLEGAL_ADDRESS:
	case CUDA_ERROR_HARDWARE_STACK_ERROR:
	case CUDA_ERROR_ILLEGAL_INSTRUCTION:
	case CUDA_ERROR_MISALIGNED_ADDRESS:
	case CUDA_ERROR_INVALID_ADDRESS_SPACE:
	case CUDA_ERROR_INVALID_PC:
	case CUDA_ERROR_LAUNCH_FAILED:
	case CUDA_ERROR_LAUNCH_TIMEOUT:
	case CUDA_ERROR_ECC_UNCORRECTABLE:
	case CUDA_ERROR_NVLINK_UNCORRECTABLE:
	case CUDA_ERROR_CONTEXT_IS_DESTROYED:
	case CUDA_ERROR_DEINITIALIZED:
	/* Error containment (Hopper and newer) stopped the context after an
	 * uncorrectable error; a device-side assert; a kernel that left tensor
	 * memory allocated; the MPS server ended the client; an external
	 * device (e.g. a peer over NVLink) failed. */
	case CUDA_ERROR_CONTAINED:
	case CUDA_ERROR_ASSERT:
	case CUDA_ERROR_TENSOR_MEMORY_LEAK:
	case CUDA_ERROR_MPS_CLIENT_TERMINATED:
	case CUDA_ERROR_EXTERNAL_DEVICE:
	/* A GPU that fell off the bus answers these; nothing recovers it
	 * short of a new process (and often a reset). */
	case CUDA_ERROR_DEVICE_UNAVAILABLE:
	case CUDA_ERROR_UNKNOWN:
		return 1;
	default:
		return 0;
	}
}

void devq_cuda_drv_close(struct devq_cuda_drv *drv)
{
	if (drv->lib)
		dlclose(drv->lib);
	memset(drv, 0, sizeof(*drv));
}

static int resolve(gpa_fn gpa, const char *name, void **out, char *err, size_t errlen)
{
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
	CUresult r = gpa(name, out, DEVQ_CUDA_API_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st);
	if (r == CUDA_ERROR_STUB_LIBRARY) {
		snprintf(err, errlen,
			 "libcuda.so.1 is the CUDA toolkit's stub library (CUDA_ERROR_STUB_LIBRARY), "
			 "not an NVIDIA driver: install the driver (%d or newer) or drop the stub "
			 "from the library path",
			 DEVQ_CUDA_MIN_DRIVER_BRANCH);
		return -ENODEV;
	}
	if (r != CUDA_SUCCESS || !*out || st != CU_GET_PROC_ADDRESS_SUCCESS) {
		snprintf(err, errlen,
			 "the NVIDIA driver has no %s for CUDA %d.%d (%s): driver %d or newer "
			 "is needed",
			 name, DEVQ_CUDA_API_VERSION / 1000, DEVQ_CUDA_API_VERSION % 1000 / 10,
			 r != CUDA_SUCCESS ? devq_cuda_drv_error_name(r)
			 : st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "version not sufficient"
									     : "symbol not found",
			 DEVQ_CUDA_MIN_DRIVER_BRANCH);
		return -ENOSYS;
	}
	return 0;
}

int devq_cuda_drv_open(struct devq_cuda_drv *drv, const char *lib, char *err, size_t errlen)
{
	memset(drv, 0, sizeof(*drv));
	if (!lib)
		lib = "libcuda.so.1";
	/* Never unmapped, even by dlclose: after cuInit the driver runs
	 * threads of its own, which would be left executing unmapped code (a
	 * crash at exit, or a fault's exit 69 turned into a SIGSEGV). */
	drv->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!drv->lib) {
		snprintf(err, errlen, "no NVIDIA driver: cannot load %s (%s)", lib, dlerror());
		return -ENOENT;
	}
	/* The plain cuGetProcAddress symbol keeps the pre-12.0 ABI (no status
	 * argument); _v2 is the one whose signature cuda.h now declares. */
	gpa_fn gpa = (gpa_fn)(uintptr_t)dlsym(drv->lib, "cuGetProcAddress_v2");
	if (!gpa) {
		snprintf(err, errlen,
			 "%s has no cuGetProcAddress_v2: the NVIDIA driver is too old for CUDA %d.%d "
			 "(driver %d or newer is needed)",
			 lib, DEVQ_CUDA_API_VERSION / 1000, DEVQ_CUDA_API_VERSION % 1000 / 10,
			 DEVQ_CUDA_MIN_DRIVER_BRANCH);
		devq_cuda_drv_close(drv);
		return -ENOSYS;
	}
	/* The version first, so an old driver is named as such rather than by
	 * whichever call it lacks: cuGetProcAddress at a version newer than the
	 * driver's fails for every name, so this one comes from dlsym (its ABI
	 * has never changed). */
	int r = 0;
	drv->cuDriverGetVersion =
		(__typeof__(drv->cuDriverGetVersion))(uintptr_t)dlsym(drv->lib, "cuDriverGetVersion");
	if (!drv->cuDriverGetVersion) {
		snprintf(err, errlen, "%s has no cuDriverGetVersion: not an NVIDIA driver", lib);
		devq_cuda_drv_close(drv);
		return -ENOSYS;
	}
	CUresult cr = drv->cuDriverGetVersion(&drv->driver_version);
	if (cr == CUDA_ERROR_STUB_LIBRARY) {
		r = resolve(gpa, "cuInit", (void **)&drv->cuInit, err, errlen); /* names the stub */
		devq_cuda_drv_close(drv);
		return r < 0 ? r : -ENODEV;
	}
	if (cr != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuDriverGetVersion: %s", devq_cuda_drv_error_name(cr));
		devq_cuda_drv_close(drv);
		return cr == CUDA_ERROR_STUB_LIBRARY ? -ENODEV : -EIO;
	}
	if (drv->driver_version < DEVQ_CUDA_API_VERSION) {
		/* Say which side is newer: "too old" alone reads as a fault of
		 * the driver when it is devqd that asks for more. */
		snprintf(err, errlen,
			 "the NVIDIA driver supports CUDA %d.%d, but devqd uses the newer CUDA %d.%d "
			 "driver API: install a driver that supports CUDA %d.%d (branch %d or newer)",
			 drv->driver_version / 1000, drv->driver_version % 1000 / 10,
			 DEVQ_CUDA_API_VERSION / 1000, DEVQ_CUDA_API_VERSION % 1000 / 10,
			 DEVQ_CUDA_API_VERSION / 1000, DEVQ_CUDA_API_VERSION % 1000 / 10,
			 DEVQ_CUDA_MIN_DRIVER_BRANCH);
		devq_cuda_drv_close(drv);
		return -EPROTO;
	}
#define DEVQ_CUDA_RESOLVE(name)                                                      \
	if (r == 0)                                                                  \
		r = resolve(gpa, #name, (void **)&drv->name, err, errlen);
	DEVQ_CUDA_CALLS(DEVQ_CUDA_RESOLVE)
#undef DEVQ_CUDA_RESOLVE
	if (r < 0) {
		devq_cuda_drv_close(drv);
		return r;
	}
	char why[256];
	if (resolve(gpa, "cuDeviceGetUuid", (void **)&drv->cuDeviceGetUuid, why, sizeof(why)) < 0)
		drv->cuDeviceGetUuid = NULL;
	return 0;
}
