/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the fatbin reader (daemon/device/cuda/fatbin.c), the image choice per compute
 * capability, the CUDA launch geometry (kernels/cuda_launch.c) and, in a
 * build with CUDA, the fatbin nvcc made and devqd carries: these machines
 * have no cuobjdump, so the container's own image headers show what it
 * holds.  Synthetic containers are written here byte by byte from the
 * layout in fatbin.h, so the parser is checked against an independent
 * encoder, not against itself. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_launch.h"
#include "device/cuda/fatbin.h"
#include "kernels.h"
#ifdef DEVQ_HAVE_CUDA
#include "fatbin_embed.h"
#endif

/* ---- a synthetic container ---- */

struct spec {
	unsigned kind, arch, hsize;
	uint64_t flags;
	size_t payload; /* bytes */
};

#define F64 (DEVQ_FATBIN_F_64BIT | 0x10) /* 64-bit, Linux: what nvcc writes */

struct blob {
	unsigned char *p;
	size_t len;
	size_t img_at[40]; /* offset of each image header */
};

static void put(unsigned char *p, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static size_t pad8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

static struct blob make(const struct spec *s, unsigned n)
{
	struct blob b = { 0 };
	size_t len = 16;

	for (unsigned i = 0; i < n; i++)
		len += (s[i].hsize ? s[i].hsize : 64) + pad8(s[i].payload);
	b.p = calloc(1, len);
	ck_assert_ptr_nonnull(b.p);
	b.len = len;
	put(b.p, DEVQ_FATBIN_MAGIC, 4);
	put(b.p + 4, 1, 2);
	put(b.p + 6, 16, 2);
	put(b.p + 8, len - 16, 8);
	size_t at = 16;
	for (unsigned i = 0; i < n; i++) {
		unsigned hs = s[i].hsize ? s[i].hsize : 64;
		unsigned char *h = b.p + at;
		b.img_at[i] = at;
		put(h, s[i].kind, 2);
		put(h + 2, 0x101, 2);
		put(h + 4, hs, 4);
		put(h + 8, pad8(s[i].payload), 8);
		put(h + 24, s[i].kind == DEVQ_FATBIN_PTX ? 0 : 8, 2);
		put(h + 26, s[i].kind == DEVQ_FATBIN_PTX ? 9 : 1, 2);
		put(h + 28, s[i].arch, 4);
		put(h + 40, s[i].flags, 8);
		unsigned char *pl = h + hs;
		if (s[i].kind == DEVQ_FATBIN_SASS && s[i].payload >= 4)
			memcpy(pl, "\x7f" "ELF", 4);
		else
			memset(pl, '\n', s[i].payload);
		at += hs + pad8(s[i].payload);
	}
	return b;
}

/* What the build asks nvcc for: sm_80 and sm_90 SASS, compute_90 PTX. */
static const struct spec like_build[] = {
	{ DEVQ_FATBIN_SASS, 80, 64, F64, 100 },
	{ DEVQ_FATBIN_PTX, 90, 80, F64, 37 },
	{ DEVQ_FATBIN_SASS, 90, 64, F64, 120 },
};
#define NLIKE 3u

/* Parses a heap copy of exactly len bytes, so ASan and valgrind see any
 * read past the end. */
static int parse_exact(const unsigned char *p, size_t len, struct devq_fatbin *fb, char *err,
		       size_t errlen)
{
	unsigned char *c = malloc(len ? len : 1);
	ck_assert_ptr_nonnull(c);
	if (len)
		memcpy(c, p, len);
	int rc = devq_fatbin_parse(c, len, fb, err, errlen);
	free(c);
	return rc;
}

static void expect_reject(const struct blob *b, const char *needle)
{
	struct devq_fatbin fb;
	char err[256];

	int rc = parse_exact(b->p, b->len, &fb, err, sizeof err);
	ck_assert_int_lt(rc, 0);
	ck_assert_msg(strstr(err, needle), "error '%s' does not say '%s'", err, needle);
}

START_TEST(parse_synthetic)
{
	struct blob b = make(like_build, NLIKE);
	struct devq_fatbin fb;
	char err[256];

	ck_assert_int_eq(parse_exact(b.p, b.len, &fb, err, sizeof err), 0);
	ck_assert_str_eq(err, "");
	ck_assert_uint_eq(fb.nimages, NLIKE);
	ck_assert_uint_eq(fb.size, b.len);
	for (unsigned i = 0; i < NLIKE; i++) {
		ck_assert_uint_eq(fb.img[i].kind, like_build[i].kind);
		ck_assert_uint_eq(fb.img[i].arch, like_build[i].arch);
		ck_assert_uint_eq(fb.img[i].flags, like_build[i].flags);
		ck_assert_uint_eq(fb.img[i].offset, b.img_at[i] + like_build[i].hsize);
		ck_assert_uint_eq(fb.img[i].size, pad8(like_build[i].payload));
		ck_assert(!fb.img[i].compressed);
	}
	ck_assert_uint_eq(fb.img[1].version_major, 9);
	char name[48];
	devq_fatbin_image_name(&fb.img[0], name, sizeof name);
	ck_assert_str_eq(name, "sm_80 SASS");
	devq_fatbin_image_name(&fb.img[1], name, sizeof name);
	ck_assert_str_eq(name, "compute_90 PTX");
	free(b.p);
}
END_TEST

/* Every proper prefix announces more than it holds. */
START_TEST(parse_truncated)
{
	struct blob b = make(like_build, NLIKE);
	struct devq_fatbin fb;
	char err[256];

	for (size_t len = 0; len < b.len; len++) {
		err[0] = '\0';
		ck_assert_int_lt(parse_exact(b.p, len, &fb, err, sizeof err), 0);
		ck_assert_msg(strstr(err, "truncated"), "length %zu: '%s'", len, err);
	}
	free(b.p);
}
END_TEST

START_TEST(parse_bad_header)
{
	struct blob b = make(like_build, NLIKE);

	b.p[0] ^= 1;
	expect_reject(&b, "not a fatbin: magic 0xba55ed51");
	b.p[0] ^= 1;
	put(b.p + 4, 2, 2);
	expect_reject(&b, "version 2");
	put(b.p + 4, 1, 2);
	put(b.p + 6, 8, 2);
	expect_reject(&b, "header size 8");
	put(b.p + 6, 16, 2);
	put(b.p + 8, b.len - 16 - 64, 8); /* announces less than is there */
	expect_reject(&b, "64 bytes after the end");
	put(b.p + 8, 0, 8);
	b.len = 16;
	expect_reject(&b, "no images");
	free(b.p);
}
END_TEST

START_TEST(parse_bad_images)
{
	struct blob b = make(like_build, NLIKE);
	unsigned char *h1 = b.p + b.img_at[1];

	put(h1 + 4, 32, 4);
	expect_reject(&b, "image 1 at offset");
	expect_reject(&b, "header size 32");
	put(h1 + 4, 80, 4);
	put(h1 + 8, b.len, 8); /* payload past the end */
	expect_reject(&b, "runs past the end");
	put(h1 + 8, UINT64_MAX, 8); /* and no wrap-around */
	expect_reject(&b, "runs past the end");
	put(h1 + 8, 40, 8);
	put(h1 + 4, 0xffffffffu, 4);
	expect_reject(&b, "header size 4294967295");
	put(h1 + 4, 80, 4);
	put(h1 + 28, 0, 4);
	expect_reject(&b, "architecture 0");
	put(h1 + 28, 90, 4);
	/* Compressed, but the compressed size is 0 or larger than the payload. */
	put(h1 + 40, F64 | DEVQ_FATBIN_F_ZSTD, 8);
	expect_reject(&b, "compressed size 0");
	put(h1 + 16, 41, 4);
	expect_reject(&b, "compressed size 41");
	put(h1 + 16, 37, 4);
	struct devq_fatbin fb;
	char err[256];
	ck_assert_int_eq(parse_exact(b.p, b.len, &fb, err, sizeof err), 0);
	ck_assert(fb.img[1].compressed);
	/* SASS stored plain must be an ELF file. */
	b.p[b.img_at[2] + 64] = 0;
	expect_reject(&b, "image 2 (sm_90 SASS) at offset");
	free(b.p);
}
END_TEST

START_TEST(parse_too_many_images)
{
	struct spec s[DEVQ_FATBIN_MAX_IMAGES + 1];
	struct devq_fatbin fb;
	char err[256];

	for (unsigned i = 0; i < DEVQ_FATBIN_MAX_IMAGES + 1; i++)
		s[i] = (struct spec){ DEVQ_FATBIN_PTX, 80, 64, F64, 8 };
	struct blob b = make(s, DEVQ_FATBIN_MAX_IMAGES);
	ck_assert_int_eq(parse_exact(b.p, b.len, &fb, err, sizeof err), 0);
	ck_assert_uint_eq(fb.nimages, DEVQ_FATBIN_MAX_IMAGES);
	free(b.p);
	b = make(s, DEVQ_FATBIN_MAX_IMAGES + 1);
	ck_assert_int_eq(parse_exact(b.p, b.len, &fb, err, sizeof err), -E2BIG);
	ck_assert_msg(strstr(err, "more than 32 images"), "%s", err);
	free(b.p);
}
END_TEST

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Random corruption: whatever the parser accepts must lie inside the
 * bytes it was given, and nothing it rejects may go unexplained. */
START_TEST(parse_corrupted)
{
	struct blob b = make(like_build, NLIKE);
	unsigned char *m = malloc(b.len);
	struct devq_fatbin fb;
	char err[256];

	ck_assert_ptr_nonnull(m);
	for (int round = 0; round < 3000; round++) {
		memcpy(m, b.p, b.len);
		int flips = 1 + (int)(rnd() % 4);
		for (int f = 0; f < flips; f++) {
			/* Mostly in the headers, where the lengths live. */
			size_t at = rnd() % 2 ? rnd() % b.len : b.img_at[rnd() % NLIKE] + rnd() % 64;
			m[at % b.len] = (unsigned char)rnd();
		}
		err[0] = '\0';
		int rc = parse_exact(m, b.len, &fb, err, sizeof err);
		if (rc < 0) {
			ck_assert_msg(err[0], "round %d: rejected without a message", round);
			continue;
		}
		ck_assert_uint_le(fb.size, b.len);
		for (unsigned i = 0; i < fb.nimages; i++)
			ck_assert_uint_le(fb.img[i].offset + fb.img[i].size, b.len);
	}
	free(m);
	free(b.p);
}
END_TEST

/* ---- image choice ---- */

struct want {
	unsigned major, minor;
	int image; /* index in like_build, -1 none */
	const char *reason;
};

static const struct want wants[] = {
	{ 8, 0, 0, "runs the sm_80 SASS image" },
	{ 8, 6, 0, "runs the sm_80 SASS image" },
	{ 8, 9, 0, "runs the sm_80 SASS image" },
	{ 9, 0, 2, "runs the sm_90 SASS image" },
	{ 10, 0, 1, "compiles the compute_90 PTX image" },
	{ 12, 0, 1, "no SASS it can run (the module has sm_80, sm_90)" },
	{ 7, 5, -1, "compute capability 7.5: no SASS it can run (the module has sm_80, "
		    "sm_90) and no PTX for 7.5 or lower (the module has compute_90)" },
};

static void check_pick(const struct devq_fatbin *fb, const struct want *w, int image)
{
	struct devq_fatbin_pick pick;
	int rc = devq_fatbin_select(fb, w->major, w->minor, &pick);

	ck_assert_int_eq(pick.image, image);
	ck_assert_int_eq(rc, image >= 0 ? image : -ENOEXEC);
	ck_assert(pick.jit == (image >= 0 && fb->img[image].kind == DEVQ_FATBIN_PTX));
	ck_assert_msg(strstr(pick.reason, w->reason), "%u.%u: '%s' does not say '%s'", w->major,
		      w->minor, pick.reason, w->reason);
}

START_TEST(select_like_build)
{
	struct blob b = make(like_build, NLIKE);
	struct devq_fatbin fb;

	ck_assert_int_eq(devq_fatbin_parse(b.p, b.len, &fb, NULL, 0), 0);
	check_pick(&fb, &wants[_i], wants[_i].image);
	free(b.p);
}
END_TEST

START_TEST(select_rules)
{
	const struct spec s[] = {
		{ DEVQ_FATBIN_SASS, 80, 64, F64, 8 },
		{ DEVQ_FATBIN_SASS, 86, 64, F64, 8 },
		{ DEVQ_FATBIN_SASS, 87, 64, F64 | DEVQ_FATBIN_F_ARCH_SPECIFIC, 8 },
		{ DEVQ_FATBIN_SASS, 89, 64, 0x10, 8 }, /* 32-bit: never for devqd */
		{ DEVQ_FATBIN_PTX, 75, 64, F64, 8 },
		{ DEVQ_FATBIN_PTX, 70, 64, F64, 8 },
	};
	struct blob b = make(s, sizeof s / sizeof s[0]);
	struct devq_fatbin fb;
	struct devq_fatbin_pick pick;

	ck_assert_int_eq(devq_fatbin_parse(b.p, b.len, &fb, NULL, 0), 0);
	/* The highest SASS of the major that is not above the device. */
	ck_assert_int_eq(devq_fatbin_select(&fb, 8, 0, &pick), 0);
	ck_assert_int_eq(devq_fatbin_select(&fb, 8, 6, &pick), 1);
	/* Arch-specific sm_87a runs on 8.7 only; the 32-bit sm_89 never. */
	ck_assert_int_eq(devq_fatbin_select(&fb, 8, 7, &pick), 2);
	ck_assert_int_eq(devq_fatbin_select(&fb, 8, 9, &pick), 1);
	/* No SASS of the major: the highest PTX not above the device. */
	ck_assert_int_eq(devq_fatbin_select(&fb, 7, 5, &pick), 4);
	ck_assert(pick.jit);
	ck_assert_int_eq(devq_fatbin_select(&fb, 9, 0, &pick), 4);
	ck_assert_int_eq(devq_fatbin_select(&fb, 7, 2, &pick), 5);
	ck_assert_int_eq(devq_fatbin_select(&fb, 6, 1, &pick), -ENOEXEC);
	ck_assert_msg(strstr(pick.reason, "the module has sm_80, sm_86, sm_87a, sm_89"), "%s",
		      pick.reason);
	ck_assert_msg(strstr(pick.reason, "the module has compute_75, compute_70"), "%s",
		      pick.reason);
	free(b.p);
}
END_TEST

/* ---- the fatbin this build made ---- */

#ifdef DEVQ_HAVE_CUDA
static void load_file(unsigned char **data, size_t *len)
{
	const char *build = getenv("DEVQ_BUILD");
	char path[512];

	snprintf(path, sizeof path, "%s/kernels/devq_kernels.fatbin", build ? build : "build");
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f, "cannot open %s", path);
	ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
	long n = ftell(f);
	ck_assert_int_gt(n, 0);
	rewind(f);
	*data = malloc((size_t)n);
	ck_assert_ptr_nonnull(*data);
	ck_assert_uint_eq(fread(*data, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
}

static void parse_embedded(struct devq_fatbin *fb)
{
	char err[256];
	int rc = devq_fatbin_parse(devq_fatbin_data, devq_fatbin_size, fb, err, sizeof err);
	ck_assert_msg(rc == 0, "embedded fatbin: %s", err);
}

START_TEST(real_embedded_is_the_build)
{
	unsigned char *data;
	size_t len;

	load_file(&data, &len);
	ck_assert_uint_eq(devq_fatbin_size, len);
	ck_assert_int_eq(memcmp(devq_fatbin_data, data, len), 0);
	ck_assert_uint_eq((uintptr_t)devq_fatbin_data % 16, 0);
	free(data);
}
END_TEST

static int find_image(const struct devq_fatbin *fb, unsigned kind, unsigned arch)
{
	int found = -1;
	for (unsigned i = 0; i < fb->nimages; i++) {
		if (fb->img[i].kind == kind && fb->img[i].arch == arch) {
			ck_assert_msg(found < 0, "two images of kind %u for %u", kind, arch);
			found = (int)i;
		}
	}
	return found;
}

START_TEST(real_holds_sass_and_ptx)
{
	struct devq_fatbin fb;

	parse_embedded(&fb);
	ck_assert_uint_eq(fb.nimages, 3);
	ck_assert_int_ge(find_image(&fb, DEVQ_FATBIN_SASS, 80), 0);
	ck_assert_int_ge(find_image(&fb, DEVQ_FATBIN_SASS, 90), 0);
	ck_assert_int_ge(find_image(&fb, DEVQ_FATBIN_PTX, 90), 0);
	for (unsigned i = 0; i < fb.nimages; i++) {
		ck_assert(fb.img[i].flags & DEVQ_FATBIN_F_64BIT);
		ck_assert(!(fb.img[i].flags & DEVQ_FATBIN_F_ARCH_SPECIFIC));
		ck_assert(!(fb.img[i].flags & DEVQ_FATBIN_F_DEBUG));
		ck_assert(!fb.img[i].compressed);
	}
}
END_TEST

/* Every kernel of the table compiled to device code (the manifest but its
 * host built-ins, and the test-only fault) is
 * defined in every image: a .entry in the PTX, a symbol in each SASS ELF's
 * string table. */
START_TEST(real_every_kernel_in_every_image)
{
	struct devq_fatbin fb;
	char want[64];

	parse_embedded(&fb);
	ck_assert_ptr_nonnull(devq_kernel_find("fault"));
	for (size_t k = 0; k < devq_nkernels; k++) {
		const char *name = devq_kernels[k].name;
		if (devq_kernels[k].host) /* its code is a host library's */
			continue;
		for (unsigned i = 0; i < fb.nimages; i++) {
			const struct devq_fatbin_image *img = &fb.img[i];
			const unsigned char *p = devq_fatbin_data + img->offset;
			size_t n;
			if (img->kind == DEVQ_FATBIN_PTX)
				n = (size_t)snprintf(want, sizeof want, ".entry %s%s(",
						     DEVQ_CUDA_PREFIX, name);
			else /* with the NUL that ends it in the string table */
				n = (size_t)snprintf(want, sizeof want, "%s%s",
						     DEVQ_CUDA_PREFIX, name) + 1;
			ck_assert_msg(memmem(p, img->size, want, n), "image %u (arch %u) lacks %s",
				      i, img->arch, want);
		}
	}
}
END_TEST

START_TEST(real_select)
{
	struct devq_fatbin fb;
	struct blob b = make(like_build, NLIKE);
	struct devq_fatbin like;

	parse_embedded(&fb);
	ck_assert_int_eq(devq_fatbin_parse(b.p, b.len, &like, NULL, 0), 0);
	const struct want *w = &wants[_i];
	int image = -1;
	if (w->image >= 0)
		image = find_image(&fb, like.img[w->image].kind, like.img[w->image].arch);
	ck_assert(w->image < 0 || image >= 0);
	check_pick(&fb, w, image);
	free(b.p);
}
END_TEST

/* Cut the real container at every length up to 256 bytes, then at every
 * 61st: each one is rejected as truncated. */
START_TEST(real_truncated)
{
	struct devq_fatbin fb;
	char err[256];

	for (size_t len = 0; len < devq_fatbin_size; len += len < 256 ? 1 : 61) {
		err[0] = '\0';
		ck_assert_int_lt(parse_exact(devq_fatbin_data, len, &fb, err, sizeof err), 0);
		ck_assert_msg(strstr(err, "truncated"), "length %zu: '%s'", len, err);
	}
}
END_TEST
#endif

/* ---- launch geometry ---- */

START_TEST(launch_every_kernel)
{
	static const uint64_t ns[] = { 0, 1, 31, 33, 255, 256, 257, 4096, 1u << 20,
				       (uint64_t)1 << 40, UINT64_MAX };
	static const unsigned sms[] = { 0, 1, 108, 132 };

	/* Every kernel the daemon can be asked to launch has dimensions
	 * (host built-ins launch nothing themselves). */
	for (size_t k = 0; k < devq_nkernels; k++) {
		if (devq_kernels[k].host)
			continue;
		for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
			for (size_t s = 0; s < sizeof sms / sizeof sms[0]; s++) {
				unsigned g = 0, b = 0;
				ck_assert_int_eq(devq_cuda_launch_dims(devq_kernels[k].name, ns[a],
								       sms[s], &g, &b),
						 0);
				ck_assert_uint_ge(g, 1);
				ck_assert_uint_le(g, 132u * 8u);
				ck_assert_uint_ge(b, 1);
				ck_assert_uint_le(b, DEVQ_CUDA_MAX_BLOCK);
				ck_assert(b == 1 || b % 32 == 0);
			}
		}
	}
}
END_TEST

START_TEST(launch_shapes)
{
	unsigned g = 7, b = 7;

	ck_assert_int_eq(devq_cuda_launch_dims("nope", 10, 4, &g, &b), -ENOENT);
	ck_assert_int_eq(devq_cuda_launch_dims(NULL, 10, 4, &g, &b), -ENOENT);
	ck_assert_uint_eq(g, 7);
	ck_assert_uint_eq(b, 7);
	/* spin and fault: one thread. */
	ck_assert_int_eq(devq_cuda_launch_dims("spin", 1000, 132, &g, &b), 0);
	ck_assert_uint_eq(g * b, 1);
	ck_assert_int_eq(devq_cuda_launch_dims("fault", 1000, 132, &g, &b), 0);
	ck_assert_uint_eq(g * b, 1);
	/* A tiny op: one block of one warp. */
	ck_assert_int_eq(devq_cuda_launch_dims("fill_u32", 1, 132, &g, &b), 0);
	ck_assert_uint_eq(g, 1);
	ck_assert_uint_eq(b, 32);
	/* Enough threads for every element until the cap. */
	ck_assert_int_eq(devq_cuda_launch_dims("vadd_f32", 100000, 132, &g, &b), 0);
	ck_assert_uint_ge((uint64_t)g * b, 100000);
	ck_assert_int_eq(devq_cuda_launch_dims("saxpy_f32", 1u << 30, 132, &g, &b), 0);
	ck_assert_uint_eq(g, 132 * 8);
	ck_assert_uint_eq(b, 256);
	/* copy counts 16-byte vectors. */
	ck_assert_int_eq(devq_cuda_launch_dims("copy", 16 * 256 * 3, 132, &g, &b), 0);
	ck_assert_uint_eq(g, 3);
	/* The reductions run in one block of at most DEVQ_CUDA_MAX_BLOCK. */
	ck_assert_int_eq(devq_cuda_launch_dims("reduce_sum_f32", 1u << 30, 132, &g, &b), 0);
	ck_assert_uint_eq(g, 1);
	ck_assert_uint_eq(b, DEVQ_CUDA_MAX_BLOCK);
	ck_assert_int_eq(devq_cuda_launch_dims("checksum", 0, 132, &g, &b), 0);
	ck_assert_uint_eq(g, 1);
	/* spin_buf: at most one block per SM, all resident together. */
	ck_assert_int_eq(devq_cuda_launch_dims("spin_buf", 1u << 30, 132, &g, &b), 0);
	ck_assert_uint_eq(g, 132);
	ck_assert_int_eq(devq_cuda_launch_dims("spin_buf", 1u << 30, 0, &g, &b), 0);
	ck_assert_uint_eq(g, 1);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("fatbin");
	TCase *p = tcase_create("parse");
	TCase *c = tcase_create("select");
	TCase *l = tcase_create("launch");

	tcase_add_test(p, parse_synthetic);
	tcase_add_test(p, parse_truncated);
	tcase_add_test(p, parse_bad_header);
	tcase_add_test(p, parse_bad_images);
	tcase_add_test(p, parse_too_many_images);
	tcase_add_test(p, parse_corrupted);
	tcase_set_timeout(p, 60); /* valgrind */
	suite_add_tcase(s, p);
	tcase_add_loop_test(c, select_like_build, 0, (int)(sizeof wants / sizeof wants[0]));
	tcase_add_test(c, select_rules);
	suite_add_tcase(s, c);
	tcase_add_test(l, launch_every_kernel);
	tcase_add_test(l, launch_shapes);
	suite_add_tcase(s, l);
#ifdef DEVQ_HAVE_CUDA
	TCase *r = tcase_create("built");
	tcase_add_test(r, real_embedded_is_the_build);
	tcase_add_test(r, real_holds_sass_and_ptx);
	tcase_add_test(r, real_every_kernel_in_every_image);
	tcase_add_loop_test(r, real_select, 0, (int)(sizeof wants / sizeof wants[0]));
	tcase_add_test(r, real_truncated);
	tcase_set_timeout(r, 60);
	suite_add_tcase(s, r);
#else
	printf("SKIP: the nvcc-built fatbin is not checked: devq was built without CUDA "
	       "(CUDA=0, or no nvcc)\n");
#endif
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
