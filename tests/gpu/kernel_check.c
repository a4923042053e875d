/* SPDX-License-Identifier: Apache-2.0 */
/* kernel_check: runs every kernel of the fatbin devqd carries on a real GPU
 * and compares the results with the CPU implementations (kernels/
 * cpu_kernels.c), on random data, several sizes and offsets, and both the
 * launch dimensions the backend uses (devq_cuda_launch_dims) and odd ones,
 * since every kernel must be correct for any grid.  Prints PASS or FAIL per
 * kernel and a summary line.
 *
 *   kernel_check [--device N] [--fault] [FATBIN]
 *
 * FATBIN defaults to the copy embedded at build time (the bytes devqd
 * loads).  --fault also launches the test-only fault kernel, last, and
 * expects CUDA_ERROR_ILLEGAL_ADDRESS (the context is unusable afterwards).
 *
 * libcuda.so.1 is loaded with dlopen, as devqd does, so the program starts
 * on a machine without a driver and says so.  Exit status: 0 every check
 * passed, 1 a check failed, 2 no usable driver or device (nothing ran),
 * 64 bad usage. */
#include <cuda.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "device/cuda/cuda_drv.h"
#include "cuda_launch.h"
#include "device/cuda/fatbin.h"
#include "fatbin_embed.h"
#include "kernels.h"

#define EXIT_NODEV 2
#define EXIT_USAGE 64

/* ---- the driver, resolved at run time (daemon/device/cuda/cuda_drv.c, as devqd) ---- */

static struct devq_cuda_drv cu;

static const char *err_name(CUresult r)
{
	return devq_cuda_drv_error_name(r);
}

static int load_driver(void)
{
	char err[512];
	int r = devq_cuda_drv_open(&cu, NULL, err, sizeof(err));
	if (r < 0)
		printf("kernel_check: %s; nothing run\n", err);
	return r;
}

/* ---- checks ---- */

static int npass, nfail;
static char why[512]; /* what failed in the current kernel, then where */

/* The first call says what failed; later ones add the circumstances. */
static bool failf(const char *fmt, ...)
{
	size_t n = strlen(why);
	va_list ap;

	if (n && n + 2 < sizeof why) {
		memcpy(why + n, "; ", 3);
		n += 2;
	}
	if (n + 1 < sizeof why) {
		va_start(ap, fmt);
		vsnprintf(why + n, sizeof why - n, fmt, ap);
		va_end(ap);
	}
	return false;
}

#define CK(call)                                                                    \
	do {                                                                        \
		CUresult r_ = (call);                                               \
		if (r_ != CUDA_SUCCESS)                                             \
			return failf("%s: %s (line %d)", #call, err_name(r_), __LINE__); \
	} while (0)

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void fill_random(void *p, size_t bytes)
{
	unsigned char *c = p;
	for (size_t i = 0; i < bytes; i++)
		c[i] = (unsigned char)rnd();
}

/* Floats from random bit patterns, denormals and infinities included
 * (flushing denormals would show), NaN excluded. */
static void fill_floats(float *f, size_t n, bool small)
{
	for (size_t i = 0; i < n; i++) {
		if (small) {
			f[i] = (float)((double)(rnd() >> 11) / 9007199254740992.0 * 200.0 - 100.0);
			continue;
		}
		uint32_t u;
		do
			u = (uint32_t)rnd();
		while ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu));
		memcpy(&f[i], &u, 4);
	}
}

static CUmodule mod;
static unsigned sm_count;

struct dims {
	unsigned grid, block;
};

/* The backend's choice first, then shapes it would never pick. */
static unsigned dims_for(const char *kernel, uint64_t n, struct dims *d)
{
	unsigned g, b;
	if (devq_cuda_launch_dims(kernel, n, sm_count, &g, &b) < 0)
		return 0;
	d[0] = (struct dims){ g, b };
	/* One thread walks the whole range: slow, so only for small n. */
	d[1] = (struct dims){ 1, n > 65537 ? 32u : 1u };
	d[2] = (struct dims){ 3, 33 };
	d[3] = (struct dims){ 2 * sm_count + 1, 1024 };
	return 4;
}

/* A device copy of host bytes, GUARD bytes of known pattern on each side
 * so writes outside the argument's range show up. */
#define GUARD 256

struct dbuf {
	CUdeviceptr base;
	size_t bytes;
};

static bool dbuf_make(struct dbuf *b, const void *data, size_t bytes)
{
	unsigned char *h = malloc(bytes + 2 * GUARD);
	if (!h)
		return failf("out of memory");
	memset(h, 0xa5, GUARD);
	memcpy(h + GUARD, data, bytes);
	memset(h + GUARD + bytes, 0x5a, GUARD);
	CUdeviceptr p = 0;
	CUresult r = cu.cuMemAlloc(&p, bytes + 2 * GUARD);
	if (r == CUDA_SUCCESS) {
		b->base = p;
		b->bytes = bytes;
		r = cu.cuMemcpyHtoD(p, h, bytes + 2 * GUARD);
	}
	free(h);
	if (r != CUDA_SUCCESS)
		return failf("device copy of %zu bytes: %s", bytes, err_name(r));
	return true;
}

static CUdeviceptr dbuf_ptr(const struct dbuf *b)
{
	return b->base + GUARD;
}

/* Reads the range back and checks both guards. */
static bool dbuf_read(struct dbuf *b, void *out)
{
	unsigned char *h = malloc(b->bytes + 2 * GUARD);
	if (!h)
		return failf("out of memory");
	CUresult r = cu.cuMemcpyDtoH(h, b->base, b->bytes + 2 * GUARD);
	bool ok = r == CUDA_SUCCESS;
	if (!ok)
		failf("reading back: %s", err_name(r));
	for (size_t i = 0; ok && i < GUARD; i++)
		if (h[i] != 0xa5 || h[GUARD + b->bytes + i] != 0x5a)
			ok = failf("wrote outside its range (guard byte %zu)", i);
	if (ok)
		memcpy(out, h + GUARD, b->bytes);
	free(h);
	return ok;
}

static void dbuf_free(struct dbuf *b)
{
	if (b->base)
		cu.cuMemFree(b->base);
	b->base = 0;
}

static bool launch(const char *name, union devq_kval *args, unsigned nargs, struct dims d,
		   float *ms)
{
	char fname[64];
	CUfunction f;
	CUevent e0 = NULL, e1 = NULL;
	void *params[DEVQ_MAX_PARAMS];

	snprintf(fname, sizeof fname, "%s%s", DEVQ_CUDA_PREFIX, name);
	CK(cu.cuModuleGetFunction(&f, mod, fname));
	for (unsigned i = 0; i < nargs; i++)
		params[i] = &args[i];
	CUresult r = cu.cuEventCreate(&e0, CU_EVENT_DEFAULT);
	if (r == CUDA_SUCCESS)
		r = cu.cuEventCreate(&e1, CU_EVENT_DEFAULT);
	if (r == CUDA_SUCCESS)
		r = cu.cuEventRecord(e0, NULL);
	if (r == CUDA_SUCCESS)
		r = cu.cuLaunchKernel(f, d.grid, 1, 1, d.block, 1, 1, 0, NULL,
				      nargs ? params : NULL, NULL);
	if (r == CUDA_SUCCESS)
		r = cu.cuEventRecord(e1, NULL);
	if (r == CUDA_SUCCESS)
		r = cu.cuEventSynchronize(e1);
	if (r == CUDA_SUCCESS && ms)
		r = cu.cuEventElapsedTime(ms, e0, e1);
	if (e0)
		cu.cuEventDestroy(e0);
	if (e1)
		cu.cuEventDestroy(e1);
	if (r != CUDA_SUCCESS)
		return failf("%s grid %u block %u: %s", fname, d.grid, d.block, err_name(r));
	return true;
}

static const size_t sizes[] = { 0, 1, 7, 1000, 65537, (1u << 22) + 3 };
#define NSIZES (sizeof sizes / sizeof sizes[0])

static bool same_bits(const void *a, const void *b, size_t bytes, bool floats, size_t n,
		      const char *what)
{
	if (!floats) {
		if (memcmp(a, b, bytes))
			return failf("%s differs from the CPU result", what);
		return true;
	}
	const float *x = a, *y = b;
	for (size_t i = 0; i < n; i++) {
		uint32_t u, v;
		memcpy(&u, &x[i], 4);
		memcpy(&v, &y[i], 4);
		if (u != v && !(isnan(x[i]) && isnan(y[i])))
			return failf("%s[%zu]: GPU %a, CPU %a", what, i, (double)x[i],
				     (double)y[i]);
	}
	return true;
}

/* Elementwise kernels: fill_u32, saxpy_f32, vadd_f32.  The GPU result is
 * compared with the CPU kernel run on the same inputs. */
static bool check_elementwise(const struct devq_kernel *k)
{
	bool is_fill = !strcmp(k->name, "fill_u32"), is_saxpy = !strcmp(k->name, "saxpy_f32");
	bool ok = true;

	for (size_t s = 0; s < NSIZES && ok; s++) {
		size_t n = sizes[s], bytes = n * 4;
		struct dims d[4];
		unsigned nd = dims_for(k->name, n, d);
		for (unsigned di = 0; di < nd && ok; di++) {
			float *in1 = malloc(bytes + 4), *in2 = malloc(bytes + 4),
			      *want = malloc(bytes + 4), *got = malloc(bytes + 4);
			struct dbuf b1 = { 0 }, b2 = { 0 }, b3 = { 0 };
			union devq_kval args[4] = { 0 }, host[4] = { 0 };
			struct devq_kctx ctx = { 0 };
			ok = in1 && in2 && want && got;
			if (ok) {
				fill_floats(in1, n, false);
				fill_floats(in2, n, false);
				fill_random(want, bytes);
			}
			args[0].u64 = host[0].u64 = n;
			if (ok && is_fill) {
				host[1].u32 = args[1].u32 = (uint32_t)rnd();
				host[2].ptr = want;
				ok = dbuf_make(&b1, want, bytes);
				args[2].u64 = dbuf_ptr(&b1);
			} else if (ok && is_saxpy) {
				float a; /* finite, so the products are not all inf or NaN */
				fill_floats(&a, 1, true);
				host[1].f32 = args[1].f32 = a;
				memcpy(want, in2, bytes);
				host[2].ptr = in1;
				host[3].ptr = want;
				ok = dbuf_make(&b1, in1, bytes) && dbuf_make(&b2, in2, bytes);
				args[2].u64 = dbuf_ptr(&b1);
				args[3].u64 = dbuf_ptr(&b2);
			} else if (ok) {
				host[1].ptr = in1;
				host[2].ptr = in2;
				host[3].ptr = want;
				ok = dbuf_make(&b1, in1, bytes) && dbuf_make(&b2, in2, bytes) &&
				     dbuf_make(&b3, want, bytes);
				args[1].u64 = dbuf_ptr(&b1);
				args[2].u64 = dbuf_ptr(&b2);
				args[3].u64 = dbuf_ptr(&b3);
			}
			if (ok)
				ok = launch(k->name, args, 4, d[di], NULL);
			if (ok) {
				k->cpu(host, &ctx);
				struct dbuf *out = is_fill ? &b1 : is_saxpy ? &b2 : &b3;
				ok = dbuf_read(out, got) &&
				     same_bits(got, want, bytes, !is_fill, n, k->name);
				if (!ok)
					failf("n %zu grid %u block %u", n, d[di].grid,
					      d[di].block);
			}
			dbuf_free(&b1);
			dbuf_free(&b2);
			dbuf_free(&b3);
			free(in1);
			free(in2);
			free(want);
			free(got);
		}
	}
	return ok;
}

/* bias_act_f32: rows x cols with a bias per column, ReLU and identity, on
 * the backend's launch (n = 0: one block) and wider grids; bit for bit
 * against the CPU kernel. */
static bool check_bias_act(const struct devq_kernel *k)
{
	static const uint64_t shapes[][2] = { { 1, 1 }, { 7, 13 }, { 64, 4096 }, { 3, 100003 } };
	bool ok = true;
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0] && ok; s++) {
		uint64_t rows = shapes[s][0], cols = shapes[s][1];
		size_t n = rows * cols, bytes = n * 4;
		struct dims d[4];
		unsigned nd = dims_for(k->name, 0, d);
		for (unsigned act = 0; act < 2 && ok; act++)
			for (unsigned di = 0; di < nd && ok; di++) {
				float *bias = malloc(cols * 4), *want = malloc(bytes), *got = malloc(bytes);
				struct dbuf bb = { 0 }, bx = { 0 };
				ok = bias && want && got;
				if (ok) {
					fill_floats(bias, cols, true);
					fill_floats(want, n, true);
					ok = dbuf_make(&bb, bias, cols * 4) && dbuf_make(&bx, want, bytes);
				}
				union devq_kval args[5] = { { .u64 = rows }, { .u64 = cols }, { .u32 = act } };
				union devq_kval host[5] = { { .u64 = rows }, { .u64 = cols }, { .u32 = act } };
				args[3].u64 = dbuf_ptr(&bb);
				args[4].u64 = dbuf_ptr(&bx);
				host[3].ptr = bias;
				host[4].ptr = want;
				struct devq_kctx ctx = { 0 };
				if (ok)
					ok = launch(k->name, args, 5, d[di], NULL);
				if (ok) {
					k->cpu(host, &ctx);
					ok = dbuf_read(&bx, got) && same_bits(got, want, bytes, true, n, k->name);
					if (!ok)
						failf("%llux%llu act %u grid %u block %u",
						      (unsigned long long)rows, (unsigned long long)cols,
						      act, d[di].grid, d[di].block);
				}
				dbuf_free(&bb);
				dbuf_free(&bx);
				free(bias);
				free(want);
				free(got);
			}
	}
	return ok;
}

/* copy: disjoint ranges at offsets that do and do not share 16-byte
 * alignment, and overlapping ranges in both directions at distances below,
 * at and above one vector and one window. */
static bool copy_case(size_t n, size_t total, size_t src_off, size_t dst_off, bool same,
		      struct dims d)
{
	unsigned char *init = malloc(total + 1), *init2 = malloc(total + 1),
		      *got = malloc(total + 1);
	struct dbuf a = { 0 }, b = { 0 };
	union devq_kval args[3] = { 0 }, host[3] = { 0 };
	struct devq_kctx ctx = { 0 };
	bool ok = init && init2 && got;

	if (ok) {
		fill_random(init, total);
		fill_random(init2, total);
		ok = dbuf_make(&a, init, total) && (same || dbuf_make(&b, init2, total));
	}
	if (ok) {
		args[0].u64 = host[0].u64 = n;
		args[1].u64 = dbuf_ptr(&a) + src_off;
		args[2].u64 = (same ? dbuf_ptr(&a) : dbuf_ptr(&b)) + dst_off;
		host[1].ptr = init + src_off;
		host[2].ptr = (same ? init : init2) + dst_off;
		ok = launch("copy", args, 3, d, NULL);
	}
	if (ok) {
		devq_cpu_copy(host, &ctx);
		ok = dbuf_read(same ? &a : &b, got) &&
		     same_bits(got, same ? init : init2, total, false, 0, "copy");
		if (!ok)
			failf("n %zu src +%zu dst +%zu %s grid %u block %u", n, src_off, dst_off,
			      same ? "overlapping" : "disjoint", d.grid, d.block);
	}
	dbuf_free(&a);
	dbuf_free(&b);
	free(init);
	free(init2);
	free(got);
	return ok;
}

static bool check_copy(const struct devq_kernel *k)
{
	static const long dist[] = { 1, 3, 15, 16, 17, 4095, 4096, 4097, 70000 };
	bool ok = true;
	(void)k;

	for (size_t s = 0; s < NSIZES && ok; s++) {
		size_t n = sizes[s];
		struct dims d[4];
		unsigned nd = dims_for("copy", n, d);
		for (unsigned di = 0; di < nd && ok; di++) {
			ok = copy_case(n, n + 32, 0, 0, false, d[di]) &&
			     copy_case(n, n + 32, 5, 21, false, d[di]) &&
			     copy_case(n, n + 32, 3, 8, false, d[di]);
			for (size_t j = 0; j < sizeof dist / sizeof dist[0] && ok && n; j++) {
				size_t dd = (size_t)dist[j];
				ok = copy_case(n, n + dd, 0, dd, true, d[di]) &&
				     copy_case(n, n + dd, dd, 0, true, d[di]);
			}
			/* Source and destination the same range: nothing changes. */
			if (ok)
				ok = copy_case(n, n + 8, 4, 4, true, d[di]);
		}
	}
	return ok;
}

/* reduce_sum_f32: within n*FLT_EPSILON*sum|x| of the exact sum (computed
 * here in long double), like the CPU; out[0] written even for n == 0. */
static bool check_reduce(const struct devq_kernel *k)
{
	bool ok = true;

	for (size_t s = 0; s < NSIZES && ok; s++) {
		size_t n = sizes[s];
		struct dims d[4];
		unsigned nd = dims_for(k->name, n, d);
		float *x = malloc(n * 4 + 4);
		ok = x != NULL;
		if (ok)
			fill_floats(x, n, true);
		long double exact = 0, mag = 0;
		for (size_t i = 0; ok && i < n; i++) {
			exact += x[i];
			mag += fabsl((long double)x[i]);
		}
		for (unsigned di = 0; di < nd && ok; di++) {
			struct dbuf bx = { 0 }, bo = { 0 };
			float poison = NAN, got = 0;
			union devq_kval args[3] = { 0 };
			ok = dbuf_make(&bx, x, n * 4) && dbuf_make(&bo, &poison, 4);
			if (ok) {
				args[0].u64 = n;
				args[1].u64 = dbuf_ptr(&bx);
				args[2].u64 = dbuf_ptr(&bo);
				ok = launch(k->name, args, 3, d[di], NULL) && dbuf_read(&bo, &got);
			}
			long double bound = (long double)n * FLT_EPSILON * mag;
			if (ok && !(fabsl((long double)got - exact) <= bound))
				ok = failf("n %zu grid %u block %u: %a, exact %La, bound %La", n,
					   d[di].grid, d[di].block, (double)got, exact, bound);
			dbuf_free(&bx);
			dbuf_free(&bo);
		}
		free(x);
	}
	return ok;
}

static bool check_checksum(const struct devq_kernel *k)
{
	bool ok = true;

	for (size_t s = 0; s < NSIZES && ok; s++) {
		size_t n = sizes[s];
		struct dims d[4];
		unsigned nd = dims_for(k->name, n, d);
		unsigned char *data = malloc(n + 1);
		uint64_t want = 0;
		union devq_kval host[3] = { { .u64 = n }, { .ptr = data }, { .ptr = &want } };
		struct devq_kctx ctx = { 0 };
		ok = data != NULL;
		if (ok) {
			fill_random(data, n);
			k->cpu(host, &ctx);
		}
		for (unsigned di = 0; di < nd && ok; di++) {
			struct dbuf bd = { 0 }, bo = { 0 };
			uint64_t poison = rnd(), got = 0;
			union devq_kval args[3] = { 0 };
			ok = dbuf_make(&bd, data, n) && dbuf_make(&bo, &poison, 8);
			if (ok) {
				args[0].u64 = n;
				args[1].u64 = dbuf_ptr(&bd);
				args[2].u64 = dbuf_ptr(&bo);
				ok = launch(k->name, args, 3, d[di], NULL) && dbuf_read(&bo, &got);
			}
			if (ok && got != want)
				ok = failf("n %zu grid %u block %u: 0x%016llx, CPU 0x%016llx", n,
					   d[di].grid, d[di].block, (unsigned long long)got,
					   (unsigned long long)want);
			dbuf_free(&bd);
			dbuf_free(&bo);
		}
		free(data);
	}
	return ok;
}

/* spin and spin_buf: at least ns pass between the events around the launch
 * (the globaltimer ticks at 1 us at worst), and spin_buf increments every
 * byte once, like the CPU kernel. */
#define SPIN_NS 2000000u
#define TIMER_TICK_NS 1000u

static bool check_spin(const struct devq_kernel *k)
{
	bool is_buf = !strcmp(k->name, "spin_buf"), ok = true;
	float ms = 0;

	for (size_t s = 0; s < (is_buf ? NSIZES : 1) && ok; s++) {
		size_t n = sizes[s];
		struct dims d[4];
		unsigned nd = dims_for(k->name, n, d);
		for (unsigned di = 0; di < nd && ok; di++) {
			unsigned char *want = malloc(n + 1), *got = malloc(n + 1);
			struct dbuf b = { 0 };
			union devq_kval args[3] = { { .u64 = SPIN_NS }, { .u64 = n }, { 0 } };
			/* ns 0: the CPU kernel only increments. */
			union devq_kval host[3] = { { .u64 = 0 }, { .u64 = n }, { .ptr = want } };
			struct devq_kctx ctx = { 0 };
			ok = want && got;
			if (ok) {
				fill_random(want, n);
				ok = dbuf_make(&b, want, n);
			}
			args[2].u64 = dbuf_ptr(&b);
			if (ok)
				ok = launch(k->name, args, is_buf ? 3 : 1, d[di], &ms);
			if (ok && (double)ms * 1e6 < SPIN_NS - TIMER_TICK_NS)
				ok = failf("grid %u block %u: %.3f ms, asked for %.3f ms",
					   d[di].grid, d[di].block, (double)ms, SPIN_NS / 1e6);
			if (ok && is_buf) {
				k->cpu(host, &ctx);
				ok = dbuf_read(&b, got) && same_bits(got, want, n, false, 0, k->name);
				if (!ok)
					failf("n %zu grid %u block %u", n, d[di].grid, d[di].block);
			}
			dbuf_free(&b);
			free(want);
			free(got);
		}
	}
	if (ok)
		printf("  %s: %.3f ms for %.3f ms asked (last launch)\n", k->name, (double)ms,
		       SPIN_NS / 1e6);
	return ok;
}

static const struct {
	const char *name;
	bool (*check)(const struct devq_kernel *k);
} checks[] = {
	{ "fill_u32", check_elementwise }, { "copy", check_copy },
	{ "saxpy_f32", check_elementwise }, { "vadd_f32", check_elementwise },
	{ "reduce_sum_f32", check_reduce }, { "checksum", check_checksum },
	{ "spin", check_spin }, { "spin_buf", check_spin },
	{ "bias_act_f32", check_bias_act },
};

static void report(const char *name, bool ok)
{
	if (ok) {
		npass++;
		printf("PASS %s\n", name);
	} else {
		nfail++;
		printf("FAIL %s: %s\n", name, why);
	}
	why[0] = '\0';
}

static bool check_fault(void)
{
	CUresult r;
	CUfunction f;

	union devq_kval ns = { .u64 = 1000 };
	void *params[1] = { &ns };

	CK(cu.cuModuleGetFunction(&f, mod, DEVQ_CUDA_PREFIX "fault"));
	r = cu.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL);
	if (r == CUDA_SUCCESS)
		r = cu.cuCtxSynchronize();
	if (r != CUDA_ERROR_ILLEGAL_ADDRESS)
		return failf("expected CUDA_ERROR_ILLEGAL_ADDRESS, got %s", err_name(r));
	return true;
}

/* ---- main ---- */

static int usage(void)
{
	fprintf(stderr, "usage: kernel_check [--device N] [--fault] [FATBIN]\n"
			"       kernel_check --probe     load the driver, cuInit, count devices\n"
			"       kernel_check --meminfo   the device's free memory (cuMemGetInfo)\n");
	return EXIT_USAGE;
}

static unsigned char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	unsigned char *data = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (data = malloc((size_t)n)) && fread(data, 1, (size_t)n, f) == (size_t)n) {
		*len = (size_t)n;
	} else {
		free(data);
		data = NULL;
	}
	fclose(f);
	return data;
}

int main(int argc, char **argv)
{
	int ordinal = 0;
	bool fault = false, probe = false, meminfo = false;
	const char *path = NULL;
	const unsigned char *image = devq_fatbin_data;
	unsigned char *owned = NULL;
	size_t len = devq_fatbin_size;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--device") && i + 1 < argc) {
			char *end;
			long v = strtol(argv[++i], &end, 10);
			if (*end || v < 0 || v > 1024)
				return usage();
			ordinal = (int)v;
		} else if (!strcmp(argv[i], "--fault")) {
			fault = true;
		} else if (!strcmp(argv[i], "--probe")) {
			probe = true;
		} else if (!strcmp(argv[i], "--meminfo")) {
			meminfo = true;
		} else if (argv[i][0] == '-' || path) {
			return usage();
		} else {
			path = argv[i];
		}
	}
	if (path) {
		owned = read_file(path, &len);
		if (!owned) {
			fprintf(stderr, "kernel_check: cannot read %s\n", path);
			return EXIT_USAGE;
		}
		image = owned;
	}

	struct devq_fatbin fb;
	char err[256];
	if (devq_fatbin_parse(image, len, &fb, err, sizeof err) < 0) {
		printf("FAIL fatbin %s: %s\n", path ? path : "(embedded)", err);
		free(owned);
		return EXIT_FAILURE;
	}
	printf("fatbin %s: %zu bytes:", path ? path : "(embedded)", len);
	for (unsigned i = 0; i < fb.nimages; i++) {
		char name[48];
		devq_fatbin_image_name(&fb.img[i], name, sizeof name);
		printf("%s %s", i ? "," : "", name);
	}
	printf("\n");

	if (load_driver() < 0) {
		free(owned);
		return EXIT_NODEV;
	}
	CUresult r = cu.cuInit(0);
	if (r != CUDA_SUCCESS) {
		printf("kernel_check: cuInit: %s%s; nothing run\n", err_name(r),
		       r == CUDA_ERROR_STUB_LIBRARY
			       ? " (libcuda.so.1 is the toolkit's stub library, not a driver)"
		       : r == CUDA_ERROR_NO_DEVICE ? " (no GPU)"
						   : "");
		free(owned);
		return EXIT_NODEV;
	}

	int drv = 0, count = 0, major = 0, minor = 0, sms = 0;
	CUdevice dev;
	char dname[128] = "";
	cu.cuDriverGetVersion(&drv);
	cu.cuDeviceGetCount(&count);
	if (ordinal >= count || (r = cu.cuDeviceGet(&dev, ordinal)) != CUDA_SUCCESS) {
		printf("kernel_check: no device %d (%d devices)\n", ordinal, count);
		free(owned);
		return EXIT_NODEV;
	}
	if (probe) {
		/* The driver really loaded (its own libraries too) and answers. */
		printf("probe: libcuda.so.1 loaded, driver CUDA %d.%d, %d device(s)\n", drv / 1000,
		       drv % 1000 / 10, count);
		free(owned);
		return EXIT_SUCCESS;
	}
	if (meminfo) {
		CUcontext mctx = NULL;
		size_t fr = 0, total = 0;
		r = cu.cuDevicePrimaryCtxRetain(&mctx, dev);
		if (r == CUDA_SUCCESS)
			r = cu.cuCtxSetCurrent(mctx);
		if (r == CUDA_SUCCESS)
			r = cu.cuMemGetInfo(&fr, &total);
		if (mctx)
			cu.cuDevicePrimaryCtxRelease(dev);
		free(owned);
		if (r != CUDA_SUCCESS) {
			printf("meminfo: %s\n", err_name(r));
			return EXIT_FAILURE;
		}
		printf("MEMINFO free %zu total %zu\n", fr, total);
		return EXIT_SUCCESS;
	}
	cu.cuDeviceGetName(dname, sizeof dname, dev);
	cu.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
	cu.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
	cu.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
	sm_count = (unsigned)sms;
	printf("device %d: %s, compute capability %d.%d, %d SMs, driver CUDA %d.%d\n", ordinal,
	       dname, major, minor, sms, drv / 1000, drv % 1000 / 10);

	struct devq_fatbin_pick pick;
	bool runs = devq_fatbin_select(&fb, (unsigned)major, (unsigned)minor, &pick) >= 0;
	printf("%s fatbin selection: %s\n", runs ? "PASS" : "FAIL", pick.reason);
	if (runs)
		npass++;
	else
		nfail++;

	CUcontext ctx = NULL;
	if (runs && (r = cu.cuDevicePrimaryCtxRetain(&ctx, dev)) == CUDA_SUCCESS)
		r = cu.cuCtxSetCurrent(ctx);
	if (runs && r == CUDA_SUCCESS)
		r = cu.cuModuleLoadData(&mod, image);
	if (runs && r != CUDA_SUCCESS) {
		printf("FAIL module load: %s\n", err_name(r));
		nfail++;
		runs = false;
	}
	for (size_t i = 0; runs && i < devq_nkernels; i++) {
		const struct devq_kernel *k = &devq_kernels[i];
		bool ok = false;
		if (k->test_only)
			continue; /* fault: only with --fault, as it ends the context */
		if (k->host)
			continue; /* no device code of its own: gpu_check gemm runs it */
		for (size_t c = 0; c < sizeof checks / sizeof checks[0]; c++)
			if (!strcmp(checks[c].name, k->name))
				ok = checks[c].check(k);
		if (!ok && !why[0])
			failf("kernel_check has no check for it");
		report(k->name, ok);
	}
	if (runs && fault) {
		report("fault", check_fault());
	} else if (runs) {
		if (mod)
			cu.cuModuleUnload(mod);
	}
	if (ctx)
		cu.cuDevicePrimaryCtxRelease(dev);
	free(owned);
	printf("kernel_check: %d passed, %d failed\n", npass, nfail);
	return nfail ? EXIT_FAILURE : EXIT_SUCCESS;
}
