/* SPDX-License-Identifier: Apache-2.0 */
/* The driver simulator's handling of repository images, checked directly
 * against its API (test_cudasim_self in `make check-cuda-sim`): entries and
 * their parameters read from a cubin and from PTX, an image without code
 * for the device refused, and cuModuleUnload under a pending launch
 * reported as a violation (the rule test_repo_cuda relies on to show that
 * devqd unloads a replaced image only after its last op).
 *
 * Usage: test_cudasim_self FATBIN SM80_FATBIN PTX SLOW_SO (run with the
 * simulator as libcuda.so.1); prints a Check-style summary line. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int pass, fail;

#define CHECK(cond, ...)                                      \
	do {                                                  \
		if (cond) {                                   \
			pass++;                               \
		} else {                                      \
			fail++;                               \
			printf("FAIL: line %d: ", __LINE__);  \
			printf(__VA_ARGS__);                  \
			printf("\n");                         \
		}                                             \
	} while (0)

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = malloc(1 << 22);
	size_t n = buf ? fread(buf, 1, (1 << 22) - 1, f) : 0;
	fclose(f);
	if (buf)
		buf[n] = '\0';
	return buf;
}

static size_t count_lines(const char *path)
{
	char *t = slurp(path);
	size_t n = 0;
	for (char *p = t; p && *p; p++)
		n += *p == '\n';
	free(t);
	return n;
}

/* Parameters 0..2 of scale_u32(u64 n, u32 k, u32 *x) and no fourth. */
static void check_params(CUfunction f, const char *what)
{
	static const size_t off[] = { 0, 8, 16 }, size[] = { 8, 4, 8 };
	for (size_t i = 0; i < 3; i++) {
		size_t o = 99, s = 99;
		CUresult r = cuFuncGetParamInfo(f, i, &o, &s);
		CHECK(r == CUDA_SUCCESS && o == off[i] && s == size[i],
		      "%s: parameter %zu: r %d, offset %zu, size %zu", what, i, (int)r, o, s);
	}
	size_t o, s;
	CHECK(cuFuncGetParamInfo(f, 3, &o, &s) == CUDA_ERROR_INVALID_VALUE, "%s: no parameter 3",
	      what);
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s FATBIN SM80_FATBIN PTX SLOW_SO\n", argv[0]);
		return 2;
	}
	char report[] = "/tmp/cudasim-self-XXXXXX";
	int fd = mkstemp(report);
	if (fd < 0 || close(fd) < 0)
		return 2;
	char cpu[512];
	snprintf(cpu, sizeof(cpu), "scale_u32=%s", argv[4]);
	setenv("DEVQ_CUDASIM_CPU", cpu, 1);
	setenv("DEVQ_CUDASIM_REPORT", report, 1); /* the violation below is expected */
	setenv("DEVQ_CUDASIM_ARCH", "90", 1);
	char *fat = slurp(argv[1]), *fat80 = slurp(argv[2]), *ptx = slurp(argv[3]);
	if (!fat || !fat80 || !ptx) {
		fprintf(stderr, "cannot read the images\n");
		return 2;
	}
	CUdevice dev;
	CUcontext ctx;
	CUmodule m, m2;
	CUfunction f;
	CUstream s;
	CHECK(cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
		      cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS &&
		      cuCtxSetCurrent(ctx) == CUDA_SUCCESS,
	      "context");

	/* sm_90: the fatbin's sm_90 cubin; its entry and parameters. */
	CHECK(cuModuleLoadData(&m, fat) == CUDA_SUCCESS, "load the fatbin");
	CHECK(cuModuleGetFunction(&f, m, "nosuch") == CUDA_ERROR_NOT_FOUND, "no entry nosuch");
	CHECK(cuModuleGetFunction(&f, m, "scale_u") == CUDA_ERROR_NOT_FOUND, "no entry scale_u");
	CHECK(cuModuleGetFunction(&f, m, "scale_u32") == CUDA_SUCCESS, "entry scale_u32 (cubin)");
	check_params(f, "cubin");
	/* PTX, as text: the same entry, the same layout. */
	CHECK(cuModuleLoadData(&m2, ptx) == CUDA_SUCCESS, "load the PTX");
	CUfunction g;
	CHECK(cuModuleGetFunction(&g, m2, "scale_u32") == CUDA_SUCCESS, "entry scale_u32 (PTX)");
	check_params(g, "PTX");
	CHECK(cuModuleUnload(m2) == CUDA_SUCCESS, "unload the PTX module");
	/* PTX layout: an explicit parameter alignment, a pointer whose
	 * ".align" is its pointee's, an array. */
	static const char lay[] = ".version 9.0\n.target sm_80\n.address_size 64\n"
				  ".visible .entry lay(\n\t.param .u32 lay_param_0,\n"
				  "\t.param .u64 .ptr .global .align 1 lay_param_1,\n"
				  "\t.param .align 8 .b8 lay_param_2[12],\n\t.param .u16 lay_param_3\n)\n"
				  "{\n\tret;\n}\n";
	CHECK(cuModuleLoadData(&m2, lay) == CUDA_SUCCESS &&
		      cuModuleGetFunction(&g, m2, "lay") == CUDA_SUCCESS,
	      "load the layout PTX");
	static const size_t loff[] = { 0, 8, 16, 28 }, lsize[] = { 4, 8, 12, 2 };
	for (size_t i = 0; i < 4; i++) {
		size_t o = 99, sz = 99;
		CHECK(cuFuncGetParamInfo(g, i, &o, &sz) == CUDA_SUCCESS && o == loff[i] &&
			      sz == lsize[i],
		      "layout PTX: parameter %zu at %zu, %zu bytes", i, o, sz);
	}
	CHECK(cuModuleUnload(m2) == CUDA_SUCCESS, "unload the layout PTX");
	/* No code for sm_90 in an sm_80-only fatbin. */
	CHECK(cuModuleLoadData(&m2, fat80) == CUDA_ERROR_NO_BINARY_FOR_GPU, "sm_80 only on sm_90");

	/* A launch of the (slow) stand-in, then the module unloaded under it. */
	CHECK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0) == CUDA_SUCCESS, "stream");
	unsigned x[4] = { 1, 2, 3, 4 };
	CHECK(cuMemHostRegister(x, sizeof(x), CU_MEMHOSTREGISTER_DEVICEMAP) == CUDA_SUCCESS,
	      "register");
	CUdeviceptr dx;
	CHECK(cuMemHostGetDevicePointer(&dx, x, 0) == CUDA_SUCCESS, "device pointer");
	unsigned long long n = 4;
	unsigned k = 3;
	void *params[] = { &n, &k, &dx };
	CHECK(cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, s, params, NULL) == CUDA_SUCCESS, "launch");
	printf("a cuModuleUnload under a pending launch: the VIOLATION line that follows is "
	       "expected\n");
	fflush(stdout);
	size_t before = count_lines(report);
	CHECK(cuModuleUnload(m) == CUDA_SUCCESS, "unload");
	char *rep = slurp(report);
	CHECK(count_lines(report) == before + 1 && rep &&
		      strstr(rep, "VIOLATION: cuModuleUnload: the module of entry scale_u32 still "
				  "has 1 launch(es) queued or running"),
	      "the unload under a pending launch is a violation: %s", rep ? rep : "(none)");
	free(rep);
	/* The launch still completes with the stand-in's code. */
	CHECK(cuCtxSynchronize() == CUDA_SUCCESS && x[0] == 3 && x[3] == 12,
	      "the launch completed: %u %u %u %u", x[0], x[1], x[2], x[3]);
	CHECK(cuMemHostUnregister(x) == CUDA_SUCCESS && cuStreamDestroy(s) == CUDA_SUCCESS &&
		      cuDevicePrimaryCtxRelease(dev) == CUDA_SUCCESS,
	      "release");
	CHECK(count_lines(report) == 1, "exactly the one expected violation");
	unlink(report);
	free(fat);
	free(fat80);
	free(ptx);
	int total = pass + fail;
	printf("%d%%: Checks: %d, Failures: %d, Errors: 0\n", total ? pass * 100 / total : 0, total,
	       fail);
	return fail != 0;
}
