/* SPDX-License-Identifier: Apache-2.0 */
/* native_bench: the baseline for devqd's round trip on a GPU.  In one
 * process, straight on the driver API with the primary context's default
 * scheduling (as devqd): launch the null kernel (spin with ns = 0), record
 * an event, synchronize on it; N times.  Reported twice: with a
 * blocking-sync event (a sleeping wait, which is what devqd's completion
 * threads use) and with a default event (the driver may spin: the floor).
 * Then the native way to run a batch: 64 launches and one synchronize, in
 * µs per kernel, the baseline for devqd's replayable (CUDA graph) batches.
 * Last, sporadic launches: the null kernel and a blocking synchronize
 * after an idle gap of 1 ms and of 10 ms (200 each), the baseline for
 * `gpu_check SOCKET sporadic`.  Run by tests/gpu/run.sh beside
 * `gpu_check SOCKET bench N`.
 *
 *   native_bench [N] [DEVICE]
 *
 * Exit status 0, or 2 when there is no usable driver or device. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "device/cuda/cuda_drv.h"
#include "cuda_launch.h"
#include "fatbin_embed.h"

static struct devq_cuda_drv d;

static uint64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

#define CHECK(call)                                                                   \
	do {                                                                          \
		CUresult r_ = (call);                                                 \
		if (r_ != CUDA_SUCCESS) {                                             \
			printf("FAIL native_bench: %s: %s\n", #call,                  \
			       devq_cuda_drv_error_name(r_));                             \
			return 2;                                                     \
		}                                                                     \
	} while (0)

static int run(CUfunction fn, CUstream s, unsigned flags, int n, const char *label)
{
	CUevent ev;
	CHECK(d.cuEventCreate(&ev, flags | CU_EVENT_DISABLE_TIMING));
	uint64_t ns = 0;
	void *params[] = { &ns };
	uint64_t *rt = malloc((size_t)n * sizeof(*rt));
	for (int i = -100; i < n; i++) {
		uint64_t t0 = now();
		CHECK(d.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
		CHECK(d.cuEventRecord(ev, s));
		CHECK(d.cuEventSynchronize(ev));
		if (i >= 0)
			rt[i] = now() - t0;
	}
	qsort(rt, (size_t)n, sizeof(*rt), cmp);
	printf("BENCH %s median %.2f p99 %.2f n %d\n", label, rt[n / 2] / 1e3,
	       rt[(size_t)n * 99 / 100] / 1e3, n);
	free(rt);
	d.cuEventDestroy(ev);
	return 0;
}

/* The native way to run 64 kernels: 64 cuLaunchKernel calls, one event,
 * one synchronize; µs per kernel over nb batches. */
static int batch_loop(CUfunction fn, CUstream s, int nb)
{
	CUevent ev;
	CHECK(d.cuEventCreate(&ev, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING));
	uint64_t ns = 0;
	void *params[] = { &ns };
	uint64_t t0 = 0;
	for (int r = -5; r < nb; r++) {
		if (r == 0)
			t0 = now();
		for (int i = 0; i < 64; i++)
			CHECK(d.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
		CHECK(d.cuEventRecord(ev, s));
		CHECK(d.cuEventSynchronize(ev));
	}
	printf("BENCH native_batch64_us_per_kernel %.3f batches %d\n",
	       (now() - t0) / 1e3 / (nb * 64.0), nb);
	d.cuEventDestroy(ev);
	return 0;
}

/* Launch and synchronize after an idle gap: what a client that submits
 * now and then (an inference request every few milliseconds) pays. */
static int sporadic(CUfunction fn, CUstream s, unsigned gap_us, int n)
{
	CUevent ev;
	CHECK(d.cuEventCreate(&ev, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING));
	uint64_t ns = 0;
	void *params[] = { &ns };
	uint64_t *rt = malloc((size_t)n * sizeof(*rt));
	for (int i = -10; i < n; i++) {
		struct timespec gap = { 0, (long)gap_us * 1000 };
		nanosleep(&gap, NULL);
		uint64_t t0 = now();
		CHECK(d.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
		CHECK(d.cuEventRecord(ev, s));
		CHECK(d.cuEventSynchronize(ev));
		if (i >= 0)
			rt[i] = now() - t0;
	}
	qsort(rt, (size_t)n, sizeof(*rt), cmp);
	printf("BENCH native_sporadic_%uus median %.2f p99 %.2f n %d\n", gap_us, rt[n / 2] / 1e3,
	       rt[(size_t)n * 99 / 100] / 1e3, n);
	free(rt);
	d.cuEventDestroy(ev);
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 2000, dev = argc > 2 ? atoi(argv[2]) : 0;
	if (n < 1)
		n = 2000;
	char err[512];
	if (devq_cuda_drv_open(&d, NULL, err, sizeof(err)) < 0) {
		printf("FAIL native_bench: %s\n", err);
		return 2;
	}
	CUdevice cd;
	CUcontext ctx;
	CUmodule m;
	CUfunction fn;
	CUstream s;
	CHECK(d.cuInit(0));
	CHECK(d.cuDeviceGet(&cd, dev));
	CHECK(d.cuDevicePrimaryCtxRetain(&ctx, cd));
	CHECK(d.cuCtxSetCurrent(ctx));
	CHECK(d.cuModuleLoadData(&m, devq_fatbin_data));
	CHECK(d.cuModuleGetFunction(&fn, m, DEVQ_CUDA_PREFIX "spin"));
	CHECK(d.cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0));
	int r = run(fn, s, CU_EVENT_BLOCKING_SYNC, n, "native_roundtrip_us");
	if (!r)
		r = run(fn, s, CU_EVENT_DEFAULT, n, "native_spin_roundtrip_us");
	if (!r)
		r = batch_loop(fn, s, 200);
	if (!r)
		r = sporadic(fn, s, 1000, 200);
	if (!r)
		r = sporadic(fn, s, 10000, 200);
	d.cuStreamDestroy(s);
	d.cuModuleUnload(m);
	d.cuDevicePrimaryCtxRelease(cd);
	devq_cuda_drv_close(&d);
	return r;
}
