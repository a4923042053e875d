/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA implementations of the manifest kernels (kernels/manifest.def), with
 * exactly the semantics of kernels/cpu_kernels.c: the same bits for every
 * kernel except reduce_sum_f32, whose error stays far inside the
 * n*FLT_EPSILON*sum|x| budget every backend is held to.
 *
 * Entry points are extern "C" and named "devq_" + the kernel's name in
 * devq_kernels (the manifest plus the test-only "fault"), with its
 * parameters in order (see cuda_launch.h for the launch
 * convention).  Every kernel is correct for any grid and block, so the
 * backend may launch whatever devq_cuda_launch_dims chooses, or anything
 * else.
 *
 * Never build this with -use_fast_math (or -ftz=true, -fmad=false changes
 * nothing here but is not needed): flushing denormals would make saxpy and
 * vadd differ from the CPU results. */
#include <stdint.h>

#include "cuda_launch.h"

typedef unsigned long long u64;

static __device__ __forceinline__ u64 first_index(void)
{
	return (u64)blockIdx.x * blockDim.x + threadIdx.x;
}

static __device__ __forceinline__ u64 grid_stride(void)
{
	return (u64)gridDim.x * blockDim.x;
}

/* Nanoseconds from the GPU's global timer.  Its resolution is 32 ns to
 * about 1 us depending on the GPU, which bounds how precisely spin ends. */
static __device__ __forceinline__ u64 global_ns(void)
{
	u64 t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Unsigned difference, so a huge ns cannot overflow a deadline. */
static __device__ void spin_for(u64 ns)
{
	u64 t0 = global_ns();
	while (global_ns() - t0 < ns)
		;
}

/* The same arithmetic as devq_mix64 in kernels/sig.c. */
static __device__ __forceinline__ u64 mix64(u64 z)
{
	z ^= z >> 30;
	z *= 0xbf58476d1ce4e5b9ULL;
	z ^= z >> 27;
	z *= 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return z;
}

/* Sums one value per thread of the block into the result of thread 0.  A
 * shared-memory tree rather than warp shuffles, so a block of any size
 * (not only whole warps) is summed correctly. */
template <typename T>
static __device__ T block_sum(T v, T *sh)
{
	unsigned t = threadIdx.x, nb = blockDim.x, w = 1;

	sh[t] = v;
	__syncthreads();
	while (w < nb)
		w <<= 1;
	for (w >>= 1; w > 0; w >>= 1) {
		if (t < w && t + w < nb)
			sh[t] += sh[t + w];
		__syncthreads();
	}
	return sh[0];
}

extern "C" __global__ void devq_fill_u32(u64 n, unsigned value, unsigned *dst)
{
	for (u64 i = first_index(); i < n; i += grid_stride())
		dst[i] = value;
}

/* ---- copy ---- */

/* Disjoint ranges: 16-byte vectors when source and destination share their
 * alignment (the usual case: both at buffer offsets that are multiples of
 * 16), bytes otherwise.  Both passes are coalesced. */
static __device__ void copy_disjoint(u64 n, const unsigned char *src, unsigned char *dst)
{
	uintptr_t s = (uintptr_t)src, d = (uintptr_t)dst;
	u64 first = first_index(), stride = grid_stride();

	if (((s ^ d) & 15) != 0) {
		for (u64 i = first; i < n; i += stride)
			dst[i] = src[i];
		return;
	}
	u64 head = (16 - (s & 15)) & 15;
	if (head > n)
		head = n;
	u64 nvec = (n - head) / 16, tail = head + nvec * 16;
	const uint4 *vs = (const uint4 *)(src + head);
	uint4 *vd = (uint4 *)(dst + head);

	for (u64 i = first; i < head; i += stride)
		dst[i] = src[i];
	for (u64 i = first; i < nvec; i += stride)
		vd[i] = vs[i];
	for (u64 i = tail + first; i < n; i += stride)
		dst[i] = src[i];
}

#define COPY_ITEMS 16 /* bytes each thread holds per window */

/* Overlapping ranges (memmove).  One block walks the range in windows of
 * blockDim*COPY_ITEMS bytes, in the direction that reads a window before
 * anything is written over it: each window is loaded whole into registers,
 * the block synchronises, and only then is it stored.  A store of window k
 * lands strictly on the far side of the addresses later windows read (the
 * distance between src and dst is at least one byte in that direction), so
 * one barrier per window suffices.  Other blocks have nothing to do: blocks
 * cannot synchronise with each other inside one launch. */
static __device__ void copy_overlapping(u64 n, const unsigned char *src, unsigned char *dst)
{
	u64 nb = blockDim.x, t = threadIdx.x, win = nb * COPY_ITEMS;
	unsigned char r[COPY_ITEMS];
	bool forward = (uintptr_t)dst < (uintptr_t)src;
	u64 lo = 0, hi = n;

	for (;;) {
		if (forward)
			hi = n - lo > win ? lo + win : n;
		else
			lo = hi > win ? hi - win : 0;
#pragma unroll
		for (int k = 0; k < COPY_ITEMS; k++) {
			u64 j = lo + (u64)k * nb + t;
			if (j < hi)
				r[k] = src[j];
		}
		__syncthreads();
#pragma unroll
		for (int k = 0; k < COPY_ITEMS; k++) {
			u64 j = lo + (u64)k * nb + t;
			if (j < hi)
				dst[j] = r[k];
		}
		if (forward ? hi == n : lo == 0)
			break;
		if (forward)
			lo = hi;
		else
			hi = lo;
	}
}

extern "C" __global__ void devq_copy(u64 n, const unsigned char *src, unsigned char *dst)
{
	uintptr_t s = (uintptr_t)src, d = (uintptr_t)dst;

	if (n == 0 || s == d)
		return;
	if (d < s + n && s < d + n) {
		if (blockIdx.x == 0)
			copy_overlapping(n, src, dst);
		return;
	}
	copy_disjoint(n, src, dst);
}

/* ---- arithmetic ---- */

/* __fmaf_rn is one correctly rounded fused multiply-add, like the CPU's
 * fmaf, so the results are bit-identical. */
extern "C" __global__ void devq_saxpy_f32(u64 n, float a, const float *x, float *y)
{
	for (u64 i = first_index(); i < n; i += grid_stride())
		y[i] = __fmaf_rn(a, x[i], y[i]);
}

/* The same as the CPU's: one add, then the activation (1 ReLU, any
 * other value identity). */
extern "C" __global__ void devq_bias_act_f32(u64 rows, u64 cols, unsigned act, const float *bias,
					     float *x)
{
	u64 n = rows * cols;
	for (u64 i = first_index(); i < n; i += grid_stride()) {
		float v = __fadd_rn(x[i], bias[i % cols]);
		x[i] = act == 1 && v < 0.0f ? 0.0f : v;
	}
}

extern "C" __global__ void devq_vadd_f32(u64 n, const float *a, const float *b, float *c)
{
	for (u64 i = first_index(); i < n; i += grid_stride())
		c[i] = __fadd_rn(a[i], b[i]);
}

/* ---- reductions ----
 *
 * The output must be written by the op itself, in one launch, even for
 * n == 0, and nothing else (no scratch buffer, no zeroed output) can be
 * assumed.  Cross-block schemes need either a zeroed accumulator or scratch
 * that concurrent launches on other streams would share, so these run in one
 * block: block 0 covers the whole range with a block-stride loop and any
 * other block returns at once.  The price is one SM's bandwidth; the gain is
 * a result that is deterministic for a given block size. */

/* Double accumulators, as on the CPU: the error is near n*DBL_EPSILON plus
 * the final rounding to float, far inside the n*FLT_EPSILON budget.  Four
 * accumulators keep four loads in flight per thread. */
/* Launched with up to DEVQ_CUDA_MAX_BLOCK threads: the bound keeps the
 * register use low enough for that block size. */
extern "C" __global__ void __launch_bounds__(DEVQ_CUDA_MAX_BLOCK)
devq_reduce_sum_f32(u64 n, const float *x, float *out)
{
	__shared__ double sh[DEVQ_CUDA_MAX_BLOCK];
	u64 nb = blockDim.x, i = threadIdx.x;
	double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;

	if (blockIdx.x != 0)
		return;
	for (; i + 3 * nb < n; i += 4 * nb) {
		s0 += (double)x[i];
		s1 += (double)x[i + nb];
		s2 += (double)x[i + 2 * nb];
		s3 += (double)x[i + 3 * nb];
	}
	for (; i < n; i += nb)
		s0 += (double)x[i];
	double s = block_sum<double>((s0 + s1) + (s2 + s3), sh);
	if (threadIdx.x == 0)
		out[0] = (float)s;
}

/* Sum modulo 2^64 of mix64((i << 8) | data[i]): order-independent, so the
 * split between threads does not change the result. */
extern "C" __global__ void __launch_bounds__(DEVQ_CUDA_MAX_BLOCK)
devq_checksum(u64 n, const unsigned char *data, u64 *out)
{
	__shared__ u64 sh[DEVQ_CUDA_MAX_BLOCK];
	u64 s = 0;

	if (blockIdx.x != 0)
		return;
	for (u64 i = threadIdx.x; i < n; i += blockDim.x)
		s += mix64((i << 8) | data[i]);
	s = block_sum<u64>(s, sh);
	if (threadIdx.x == 0)
		out[0] = s;
}

/* ---- timing ops ---- */

/* Busy-waits ns nanoseconds from when the thread starts.  Launched 1x1; a
 * larger launch only spins more threads over the same interval. */
extern "C" __global__ void devq_spin(u64 ns)
{
	spin_for(ns);
}

/* One thread per block spins, then the block joins a grid-stride pass that
 * increments every byte once.  The launch dims keep every block resident
 * at once, so the whole op takes about ns plus the pass. */
extern "C" __global__ void devq_spin_buf(u64 ns, u64 n, unsigned char *buf)
{
	if (threadIdx.x == 0)
		spin_for(ns);
	__syncthreads();
	for (u64 i = first_index(); i < n; i += grid_stride())
		buf[i] = (unsigned char)(buf[i] + 1);
}

/* ---- fault injection ---- */

/* The test-only "fault" kernel (kernels/manifest.c; devqd hides it unless
 * started with --test-fault-injection): after ns nanoseconds, a store to
 * address 8, inside the unmapped first page of every context's address
 * space.  The launch fails with CUDA_ERROR_ILLEGAL_ADDRESS, the sticky error
 * the daemon's device-loss path handles.  Inline PTX, because a store
 * through a null C++ pointer is undefined and the compiler may drop it. */
extern "C" __global__ void devq_fault(u64 ns)
{
	if (first_index() != 0)
		return;
	spin_for(ns);
	asm volatile("st.global.u32 [%0], %1;" ::"l"(8ULL), "r"(0xdead) : "memory");
}
