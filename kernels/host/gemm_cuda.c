/* SPDX-License-Identifier: Apache-2.0 */
/* libdevq-host-cuda.so: the CUDA backend's built-in host executables
 * (manifest.def's DEVQ_HOST_KERNEL), on the ABI of <devq/kernel.h>:
 * gemm_f32 and gemm_f32_nt on cuBLAS.
 *
 * cuBLAS is not linked: it is dlopened on the first gemm (from a stream's
 * init, on the backend's housekeeping thread), so devqd starts and runs
 * everything else on a machine without it.  Where it is looked for, in
 * order (devqd(8), "BUILT-IN EXECUTABLES"):
 *   $DEVQ_CUBLAS (a path to the library file), then libcublas.so.13 as the
 *   dynamic linker finds it (LD_LIBRARY_PATH, ld.so.cache), then
 *   /usr/local/cuda/lib64, /usr/local/cuda-13/lib64,
 *   /usr/lib/x86_64-linux-gnu.
 * Each stream gets its own cublasHandle_t (the per-stream slot), bound to
 * that stream, in the default math mode: FP32 stays FP32 (no TF32, which
 * cuBLAS uses for sgemm only when asked to).
 *
 * Row-major C = alpha*A*op(B) + beta*C is, seen column-major, C^T =
 * alpha*op(B)^T*A^T + beta*C^T: one cublasSgemm with the operands swapped
 * and nothing copied. */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>

#include "devq/kernel.h"
#include "gemm_exes.h"

typedef cublasStatus_t (*create_fn)(cublasHandle_t *);
typedef cublasStatus_t (*destroy_fn)(cublasHandle_t);
typedef cublasStatus_t (*set_stream_fn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*set_math_fn)(cublasHandle_t, cublasMath_t);
typedef cublasStatus_t (*sgemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
				   int, const float *, const float *, int, const float *, int,
				   const float *, float *, int);

static struct {
	pthread_once_t once;
	void *dl;
	char why[200];
	create_fn create;
	destroy_fn destroy;
	set_stream_fn set_stream;
	set_math_fn set_math;
	sgemm_fn sgemm;
} cb = { .once = PTHREAD_ONCE_INIT };

static void *try_open(const char *path)
{
	return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static void load(void)
{
	/* cuBLAS's runtime reaches the driver through cuGetExportTable, which
	 * only a real driver has: on anything else (the CUDA driver simulator
	 * of devq's tests) cuBLAS cannot run, and saying so beats the
	 * runtime's own failure deep inside cublasCreate. */
	void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	bool real = drv && dlsym(drv, "cuGetExportTable");
	if (drv)
		dlclose(drv);
	if (!real) {
		snprintf(cb.why, sizeof(cb.why),
			 "cuBLAS unavailable: this process's libcuda.so.1 has no cuGetExportTable, "
			 "which cuBLAS needs (not NVIDIA's driver)");
		return;
	}
	const char *env = getenv("DEVQ_CUBLAS");
	static const char *const paths[] = {
		"libcublas.so.13",
		"/usr/local/cuda/lib64/libcublas.so.13",
		"/usr/local/cuda-13/lib64/libcublas.so.13",
		"/usr/lib/x86_64-linux-gnu/libcublas.so.13",
	};
	if (env && *env)
		cb.dl = try_open(env);
	for (size_t i = 0; !cb.dl && i < sizeof(paths) / sizeof(paths[0]); i++)
		cb.dl = try_open(paths[i]);
	if (!cb.dl) {
		snprintf(cb.why, sizeof(cb.why),
			 "cuBLAS unavailable: libcublas.so.13 not found (DEVQ_CUBLAS, the dynamic "
			 "linker's path, /usr/local/cuda/lib64, /usr/local/cuda-13/lib64)");
		return;
	}
	cb.create = (create_fn)dlsym(cb.dl, "cublasCreate_v2");
	cb.destroy = (destroy_fn)dlsym(cb.dl, "cublasDestroy_v2");
	cb.set_stream = (set_stream_fn)dlsym(cb.dl, "cublasSetStream_v2");
	cb.set_math = (set_math_fn)dlsym(cb.dl, "cublasSetMathMode");
	cb.sgemm = (sgemm_fn)dlsym(cb.dl, "cublasSgemm_v2");
	if (!cb.create || !cb.destroy || !cb.set_stream || !cb.set_math || !cb.sgemm) {
		snprintf(cb.why, sizeof(cb.why), "cuBLAS unavailable: libcublas.so.13 lacks a call");
		cb.create = NULL;
	}
}

static int gemm_init(void *stream, void **slot, char *err, size_t errlen)
{
	pthread_once(&cb.once, load);
	if (!cb.create) {
		snprintf(err, errlen, "%s", cb.why);
		return -ENOSYS;
	}
	cublasHandle_t h;
	cublasStatus_t s = cb.create(&h);
	if (s != CUBLAS_STATUS_SUCCESS) {
		snprintf(err, errlen, "cublasCreate: status %d", (int)s);
		return -EIO;
	}
	if ((s = cb.set_stream(h, (cudaStream_t)stream)) != CUBLAS_STATUS_SUCCESS ||
	    (s = cb.set_math(h, CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS) {
		cb.destroy(h);
		snprintf(err, errlen, "cublasSetStream/SetMathMode: status %d", (int)s);
		return -EIO;
	}
	*slot = h;
	return 0;
}

static void gemm_fini(void *stream, void *slot)
{
	(void)stream;
	cb.destroy((cublasHandle_t)slot);
}

static int ld(uint64_t v)
{
	return v ? (int)v : 1;
}

static int gemm_run(const union devq_kval *a, const struct devq_host_call *call, bool nt)
{
	static const char *const dim[3] = { "m", "n", "k" };
	for (int i = 0; i < 3; i++)
		if (a[i].u64 > INT_MAX) {
			snprintf(call->err, call->errlen,
				 "%s = %llu: more than cuBLAS takes (%d)", dim[i],
				 (unsigned long long)a[i].u64, INT_MAX);
			return -EOVERFLOW;
		}
	int m = (int)a[0].u64, n = (int)a[1].u64, k = (int)a[2].u64;
	if (!m || !n)
		return 0;
	float alpha = a[3].f32, beta = a[4].f32;
	const float *A = (const float *)(uintptr_t)a[5].u64, *B = (const float *)(uintptr_t)a[6].u64;
	float *C = (float *)(uintptr_t)a[7].u64;
	cublasStatus_t s = cb.sgemm((cublasHandle_t)call->slot, nt ? CUBLAS_OP_T : CUBLAS_OP_N,
				    CUBLAS_OP_N, n, m, k, &alpha, B, nt ? ld(k) : ld(n), A, ld(k),
				    &beta, C, ld(n));
	if (s != CUBLAS_STATUS_SUCCESS) {
		snprintf(call->err, call->errlen, "cublasSgemm: status %d", (int)s);
		return -EIO;
	}
	return 0;
}

DEVQ_GEMM_EXES(gemm_run, gemm_init, gemm_fini);
