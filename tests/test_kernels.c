/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for the kernel manifest, the signature parser and the CPU kernels.
 * References are computed here independently of kernels/, on random data. */
#include <check.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "kernels.h"

static const size_t sizes[] = { 0, 1, 7, 1000 };
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))
#define GUARD 4 /* extra elements past n that a kernel must not touch */

static uint64_t rng_state = 0x243f6a8885a308d3ULL;

/* xorshift64: deliberately not devq_mix64, so data and reference stay
 * independent of the code under test. */
static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static float rndf(void)
{
	return (float)((double)(rnd() >> 11) / (double)(1ULL << 53) * 200.0 - 100.0);
}

static const struct devq_kernel *kernel(const char *name)
{
	const struct devq_kernel *k = devq_kernel_find(name);
	ck_assert_ptr_nonnull(k);
	ck_assert(k->cpu != NULL);
	return k;
}

/* The streaming kernels' tests run once per variant (cpu_kernels.h): loop
 * index i is size i % NSIZES under variant i / NSIZES.  False when this CPU
 * lacks the variant (the test then has nothing to run). */
#define NISA 2
static bool use_isa(int i)
{
	enum devq_cpu_isa isa = (enum devq_cpu_isa)(i / NSIZES);

	if (!devq_cpu_isa_supported(isa)) {
		ck_assert_int_eq(devq_cpu_isa_set(isa), -ENOTSUP);
		fprintf(stderr, "test_kernels: this CPU has no %s variant\n", devq_cpu_isa_name(isa));
		return false;
	}
	ck_assert_int_eq(devq_cpu_isa_set(isa), 0);
	ck_assert_int_eq(devq_cpu_isa(), isa);
	return true;
}

static int run(const char *name, union devq_kval *args)
{
	struct devq_kctx ctx = { .start_ns = devq_now_ns() };
	return kernel(name)->cpu(args, &ctx);
}

/* ---- manifest and parser ---- */

START_TEST(manifest_all_parse)
{
	char err[128];
	struct devq_sig sig;

	ck_assert_uint_ge(devq_nkernels, 8);
	for (size_t i = 0; i < devq_nkernels; i++) {
		const struct devq_kernel *k = &devq_kernels[i];
		int rc = devq_sig_parse(k->signature, &sig, err, sizeof err);
		ck_assert_msg(rc == 0, "%s: %s", k->name, err);
		ck_assert_ptr_eq(devq_kernel_find(k->name), k);
		/* Compiled in, or a host built-in whose code devqd loads
		 * (kernels/host/): one or the other. */
		ck_assert_msg((k->cpu != NULL) != k->host, "%s", k->name);
	}
	ck_assert_ptr_null(devq_kernel_find("nope"));
	ck_assert_ptr_null(devq_kernel_find(NULL));
}
END_TEST

START_TEST(parse_saxpy)
{
	char err[128];
	struct devq_sig s;

	ck_assert_int_eq(devq_sig_parse(kernel("saxpy_f32")->signature, &s, err, sizeof err), 0);
	ck_assert_uint_eq(s.nparams, 4);
	ck_assert_str_eq(s.p[0].name, "n");
	ck_assert_int_eq(s.p[0].type, DEVQ_T_U64);
	ck_assert_int_eq(s.p[0].access, DEVQ_ACC_SCALAR);
	ck_assert_str_eq(s.p[1].name, "a");
	ck_assert_int_eq(s.p[1].type, DEVQ_T_F32);
	ck_assert_int_eq(s.p[1].access, DEVQ_ACC_SCALAR);
	ck_assert_str_eq(s.p[2].name, "x");
	ck_assert_int_eq(s.p[2].type, DEVQ_T_F32);
	ck_assert_int_eq(s.p[2].access, DEVQ_ACC_IN);
	ck_assert_uint_eq(s.p[2].ndims, 1);
	ck_assert_int_eq(s.p[2].dim_param[0], 0);
	ck_assert_str_eq(s.p[3].name, "y");
	ck_assert_int_eq(s.p[3].access, DEVQ_ACC_INOUT);
	ck_assert_uint_eq(s.p[3].ndims, 1);
	ck_assert_int_eq(s.p[3].dim_param[0], 0);
	ck_assert_int_eq(devq_sig_find(&s, "y"), 3);
	ck_assert_int_eq(devq_sig_find(&s, "z"), -1);
}
END_TEST

START_TEST(parse_reduce)
{
	char err[128];
	struct devq_sig s;
	union devq_kval args[3] = { { .u64 = 10 } };
	uint64_t bytes;

	ck_assert_int_eq(devq_sig_parse(kernel("reduce_sum_f32")->signature, &s, err, sizeof err), 0);
	ck_assert_uint_eq(s.nparams, 3);
	ck_assert_int_eq(s.p[1].access, DEVQ_ACC_IN);
	ck_assert_uint_eq(s.p[1].ndims, 1);
	ck_assert_int_eq(s.p[1].dim_param[0], 0);
	ck_assert_str_eq(s.p[2].name, "out");
	ck_assert_int_eq(s.p[2].type, DEVQ_T_F32);
	ck_assert_int_eq(s.p[2].access, DEVQ_ACC_OUT);
	ck_assert_uint_eq(s.p[2].ndims, 1);
	ck_assert_int_eq(s.p[2].dim_param[0], -1);
	ck_assert_uint_eq(s.p[2].dim_lit[0], 1);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 1, args, &bytes), 0);
	ck_assert_uint_eq(bytes, 40);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 2, args, &bytes), 0);
	ck_assert_uint_eq(bytes, 4);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 0, args, &bytes), -EINVAL);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 3, args, &bytes), -EINVAL);
}
END_TEST

START_TEST(parse_whitespace_and_empty)
{
	char err[128];
	struct devq_sig s;

	ck_assert_int_eq(devq_sig_parse("", &s, err, sizeof err), 0);
	ck_assert_uint_eq(s.nparams, 0);
	ck_assert_int_eq(devq_sig_parse(" \t\n", &s, err, sizeof err), 0);
	ck_assert_uint_eq(s.nparams, 0);
	ck_assert_int_eq(devq_sig_parse(" n : u64 ,x : inout\ti64 [ n ] , y:out f64[ 16 ] ",
					&s, err, sizeof err), 0);
	ck_assert_uint_eq(s.nparams, 3);
	ck_assert_int_eq(s.p[1].type, DEVQ_T_I64);
	ck_assert_int_eq(s.p[1].access, DEVQ_ACC_INOUT);
	ck_assert_uint_eq(s.p[1].ndims, 1);
	ck_assert_int_eq(s.p[1].dim_param[0], 0);
	ck_assert_uint_eq(s.p[2].ndims, 1);
	ck_assert_int_eq(s.p[2].dim_param[0], -1);
	ck_assert_uint_eq(s.p[2].dim_lit[0], 16);
	/* exactly DEVQ_MAX_NAME-1 characters and DEVQ_MAX_PARAMS params are fine */
	ck_assert_int_eq(devq_sig_parse("abcdefghijklmnopqrstuvwxyz_1234:u8", &s, err, sizeof err), 0);
	ck_assert_uint_eq(DEVQ_MAX_PARAMS, 16);
	ck_assert_int_eq(devq_sig_parse("a:u8,b:u8,c:u8,d:u8,e:u8,f:u8,g:u8,h:u8,"
					"i:u8,j:u8,k:u8,l:u8,m:u8,n:u64,o:u8,x:out u8[n]",
					&s, err, sizeof err), 0);
	ck_assert_uint_eq(s.nparams, 16);
	ck_assert_uint_eq(s.p[15].ndims, 1);
	ck_assert_int_eq(s.p[15].dim_param[0], 13);
}
END_TEST

static const struct {
	const char *sig, *needle;
} bad[] = {
	{ "n:f16", "unknown type 'f16'" },
	{ "n:u64, n:u32", "duplicate" },
	{ "a:u8,b:u8,c:u8,d:u8,e:u8,f:u8,g:u8,h:u8,i:u8,j:u8,k:u8,l:u8,m:u8,n:u8,o:u8,p:u8,q:u8",
	  "parameter 17: too many parameters (max 16)" },
	{ "abcdefghijklmnopqrstuvwxyz_12345:u8", "longer than" },
	{ "1x:u64", "invalid name '1x'" },
	{ "a-b:u64", "invalid name 'a-b'" },
	{ "x:in u8[m]", "not an earlier parameter" },
	{ "n:u32, x:in u8[n]", "not a u64 scalar" },
	{ "n:in u64[4], x:in u8[n]", "not a u64 scalar" },
	{ "x:in u8[n], n:u64", "not an earlier parameter" },
	{ "n:u64, x:in u8[x]", "not an earlier parameter" },
	{ "n:u64[4]", "scalar has a shape" },
	{ "x:out u8", "no shape" },
	{ "x:in u8[0]", "positive" },
	{ "x:in u8[-1]", "invalid shape" },
	{ "x:in u8[99999999999999999999999]", "too large" },
	{ "x:in u8[4", "expected ',' or ']'" },
	{ "x:in u8[]", "expected a dimension, found ']'" },
	{ "m:u64, x:in u8[m,]", "expected a dimension, found ']'" },
	{ "m:u64, x:in u8[m k]", "expected ',' or ']', found 'k]'" },
	{ "m:u64, x:in u8[m,0]", "positive" },
	{ "m:u64, x:in u8[m,q]", "shape 'q' is not an earlier parameter" },
	{ "m:u64, x:in u8[m, x]", "shape 'x' is not an earlier parameter" },
	{ "m:u64, k:u32, x:in u8[m,k]", "shape 'k' is not a u64 scalar" },
	{ "m:u64, x:in u8[m,m,m,m,m]", "parameter 2 (x): shape has more than 4 dimensions" },
	{ "n u64", "expected ':'" },
	{ "n:u64,", "trailing" },
	{ ",n:u64", "parameter name" },
	{ "n:u64 m:u64", "expected ','" },
	{ "x:in", "expected a type" },
	{ "x:rw u8[4]", "unknown type 'rw'" },
};

START_TEST(parse_rejects)
{
	char err[160];
	struct devq_sig s = { .nparams = 77 };

	int rc = devq_sig_parse(bad[_i].sig, &s, err, sizeof err);
	ck_assert_msg(rc == -EINVAL, "'%s' accepted", bad[_i].sig);
	ck_assert_msg(strncmp(err, "parameter ", 10) == 0 && strstr(err, bad[_i].needle),
		      "'%s': message '%s' lacks '%s'", bad[_i].sig, err, bad[_i].needle);
	ck_assert_uint_eq(s.nparams, 77); /* untouched on failure */
	/* a tiny or absent buffer must not be overrun */
	ck_assert_int_eq(devq_sig_parse(bad[_i].sig, &s, err, 4), -EINVAL);
	ck_assert_uint_eq(strlen(err), 3);
	ck_assert_int_eq(devq_sig_parse(bad[_i].sig, &s, NULL, 0), -EINVAL);
}
END_TEST

START_TEST(parse_error_names_param)
{
	char err[160];
	struct devq_sig s;

	ck_assert_int_eq(devq_sig_parse("n:u64, a:u32, x:in f16[n]", &s, err, sizeof err), -EINVAL);
	ck_assert_str_eq(err, "parameter 3 (x): unknown type 'f16'");
}
END_TEST

/* The duration parameter: a u64 scalar named ns, wherever it stands;
 * another type or a buffer of that name is not one. */
START_TEST(parse_duration)
{
	char err[128];
	struct devq_sig s;
	ck_assert_int_eq(devq_sig_parse("ns:u64", &s, err, sizeof err), 0);
	ck_assert_int_eq(s.duration, 0);
	ck_assert_int_eq(devq_sig_parse("n:u64, ns:u64, buf:inout u8[n]", &s, err, sizeof err), 0);
	ck_assert_int_eq(s.duration, 1);
	ck_assert_int_eq(devq_sig_parse("ns:u32", &s, err, sizeof err), 0);
	ck_assert_int_eq(s.duration, -1);
	ck_assert_int_eq(devq_sig_parse("n:u64, ns:in u64[n]", &s, err, sizeof err), 0);
	ck_assert_int_eq(s.duration, -1);
	ck_assert_int_eq(devq_sig_parse("n:u64", &s, err, sizeof err), 0);
	ck_assert_int_eq(s.duration, -1);
}
END_TEST

START_TEST(parse_matrix)
{
	char err[128];
	struct devq_sig s;
	union devq_kval args[8] = { { .u64 = 3 }, { .u64 = 5 }, { .u64 = 7 } };
	uint64_t bytes;

	ck_assert_int_eq(devq_sig_parse("m:u64, n:u64, k:u64, alpha:f32, beta:f32, a:in f32[m,k], "
					"b:in f32[k,n], c:inout f32[m,n]", &s, err, sizeof err), 0);
	ck_assert_uint_eq(s.nparams, 8);
	ck_assert_uint_eq(s.p[5].ndims, 2);
	ck_assert_int_eq(s.p[5].dim_param[0], 0);
	ck_assert_int_eq(s.p[5].dim_param[1], 2);
	ck_assert_uint_eq(s.p[6].ndims, 2);
	ck_assert_int_eq(s.p[6].dim_param[0], 2);
	ck_assert_int_eq(s.p[6].dim_param[1], 1);
	ck_assert_int_eq(s.p[7].access, DEVQ_ACC_INOUT);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 5, args, &bytes), 0);
	ck_assert_uint_eq(bytes, 3 * 7 * 4);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 6, args, &bytes), 0);
	ck_assert_uint_eq(bytes, 7 * 5 * 4);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 7, args, &bytes), 0);
	ck_assert_uint_eq(bytes, 3 * 5 * 4);
	/* literals and names mixed, whitespace anywhere, DEVQ_MAX_DIMS dims */
	ck_assert_int_eq(devq_sig_parse(" n : u64 , x : out f64 [ 2 , n ,3 ] , y:in u8[n,n,n,n]",
					&s, err, sizeof err), 0);
	ck_assert_uint_eq(s.nparams, 3);
	ck_assert_uint_eq(s.p[1].ndims, 3);
	ck_assert_int_eq(s.p[1].dim_param[0], -1);
	ck_assert_uint_eq(s.p[1].dim_lit[0], 2);
	ck_assert_int_eq(s.p[1].dim_param[1], 0);
	ck_assert_int_eq(s.p[1].dim_param[2], -1);
	ck_assert_uint_eq(s.p[1].dim_lit[2], 3);
	ck_assert_uint_eq(s.p[2].ndims, DEVQ_MAX_DIMS);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 1, args, &bytes), 0);
	ck_assert_uint_eq(bytes, 2 * 3 * 3 * 8);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 2, args, &bytes), 0);
	ck_assert_uint_eq(bytes, 81);
}
END_TEST

/* The product of the dims at 2^64 - 1 (= 4294967295 * 4294967297) and one
 * past it, with the element size in the product too, and a zero dim beside
 * an overflowing pair (an empty buffer, in either order). */
START_TEST(matrix_extent_overflow)
{
	char err[128];
	struct devq_sig s;
	union devq_kval args[4] = { { .u64 = 4294967295u }, { .u64 = 4294967297u } };
	uint64_t bytes = 0;

	ck_assert_int_eq(devq_sig_parse("m:u64, n:u64, x:in u8[m,n], y:in u16x[1]", &s, err, sizeof err), -EINVAL);
	ck_assert_int_eq(devq_sig_parse("m:u64, n:u64, x:in u8[m,n], y:in f32[n,m]", &s, err, sizeof err), 0);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 2, args, &bytes), 0);
	ck_assert_uint_eq(bytes, UINT64_MAX);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 3, args, &bytes), -EOVERFLOW);
	args[1].u64++;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 2, args, &bytes), -EOVERFLOW);
	/* f32: 2^31 * (2^31 - 1) elements fit in bytes, 2^31 * 2^31 do not */
	args[0].u64 = 1ull << 31;
	args[1].u64 = (1ull << 31) - 1;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 3, args, &bytes), 0);
	ck_assert_uint_eq(bytes, (1ull << 31) * ((1ull << 31) - 1) * 4);
	args[1].u64 = 1ull << 31;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 3, args, &bytes), -EOVERFLOW);
	ck_assert_int_eq(devq_sig_parse("m:u64, n:u64, z:u64, x:in f64[m,n,z], y:in f64[z,m,n]",
					&s, err, sizeof err), 0);
	args[0].u64 = args[1].u64 = UINT64_MAX;
	args[2].u64 = 0;
	bytes = 1;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 3, args, &bytes), 0);
	ck_assert_uint_eq(bytes, 0);
	bytes = 1;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 4, args, &bytes), 0);
	ck_assert_uint_eq(bytes, 0);
	args[2].u64 = 1;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 3, args, &bytes), -EOVERFLOW);
}
END_TEST

START_TEST(extent_overflow)
{
	char err[128];
	struct devq_sig s;
	union devq_kval args[2] = { { .u64 = 1ULL << 61 } };
	uint64_t bytes = 0;

	ck_assert_int_eq(devq_sig_parse("n:u64, x:in u64[n]", &s, err, sizeof err), 0);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 1, args, &bytes), -EOVERFLOW);
	args[0].u64 = (1ULL << 61) - 1;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 1, args, &bytes), 0);
	ck_assert_uint_eq(bytes, UINT64_MAX - 7);
	args[0].u64 = UINT64_MAX;
	ck_assert_int_eq(devq_sig_parse("n:u64, x:in u8[n]", &s, err, sizeof err), 0);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 1, args, &bytes), 0);
	ck_assert_uint_eq(bytes, UINT64_MAX);
	ck_assert_int_eq(devq_sig_parse("x:in f64[4611686018427387904]", &s, err, sizeof err), 0);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 0, args, &bytes), -EOVERFLOW);
}
END_TEST

START_TEST(type_helpers)
{
	static const char *names[] = { "u8", "u32", "u64", "i32", "i64", "f32", "f64" };
	static const size_t size[] = { 1, 4, 8, 4, 8, 4, 8 };
	enum devq_type t;

	for (int i = 0; i < 7; i++) {
		ck_assert_int_eq(devq_type_parse(names[i], strlen(names[i]), &t), 0);
		ck_assert_int_eq(t, DEVQ_T_U8 + i);
		ck_assert_str_eq(devq_type_name(t), names[i]);
		ck_assert_uint_eq(devq_type_size(t), size[i]);
	}
	ck_assert_int_eq(devq_type_parse("u64x", 3, &t), 0); /* length-bounded */
	ck_assert_int_eq(t, DEVQ_T_U64);
	ck_assert_int_eq(devq_type_parse("f16", 3, &t), -EINVAL);
	ck_assert_int_eq(devq_type_parse("u6", 2, &t), -EINVAL);
	ck_assert_uint_eq(devq_type_size((enum devq_type)0), 0);
	ck_assert_str_eq(devq_access_name(DEVQ_ACC_IN), "in");
	ck_assert_str_eq(devq_access_name(DEVQ_ACC_OUT), "out");
	ck_assert_str_eq(devq_access_name(DEVQ_ACC_INOUT), "inout");
	ck_assert_uint_eq(devq_mix64(1), 0x5692161d100b05e5ULL);
}
END_TEST

/* The parser and type helpers at their edges: types and accesses one past
 * the table, every whitespace character, the first and last character of
 * each class a name may hold and the ones just outside, names of 31
 * characters and 32, the largest literal and one more, the 16th parameter
 * named in its message, and buffers for the message of 0 and 8 bytes. */
START_TEST(sig_edges)
{
	char err[160];
	struct devq_sig s;

	ck_assert_str_eq(devq_type_name((enum devq_type)0), "?");
	ck_assert_str_eq(devq_type_name((enum devq_type)(DEVQ_T_F64 + 1)), "?");
	ck_assert_uint_eq(devq_type_size((enum devq_type)(DEVQ_T_F64 + 1)), 0);
	ck_assert_str_eq(devq_access_name((enum devq_access)(DEVQ_ACC_INOUT + 1)), "?");

	ck_assert_int_eq(devq_sig_parse(" \ta\n:\ru32\v,\fb:u64", &s, err, sizeof err), 0);
	ck_assert_uint_eq(s.nparams, 2);
	ck_assert_int_eq(devq_sig_parse("A:u32, Z:u32, a:u32, z:u32, _0:u32, x9:u32", &s, err,
					sizeof err),
			 0);
	ck_assert_uint_eq(s.nparams, 6);
	static const char *bad_names[] = { "a@b:u32", "a`b:u32", "a{b:u32", "a/b:u32", "ab@:u32",
					   "9a:u32" };
	for (unsigned i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
		ck_assert_int_eq(devq_sig_parse(bad_names[i], &s, err, sizeof err), -EINVAL);
		ck_assert_msg(strstr(err, "invalid name"), "'%s': %s", bad_names[i], err);
	}

	char text[256], n31[32], n32[33];
	memset(n31, 'n', 31);
	n31[31] = '\0';
	memset(n32, 'n', 32);
	n32[32] = '\0';
	snprintf(text, sizeof text, "%s: u64, x: in u8[%s]", n31, n31);
	ck_assert_msg(devq_sig_parse(text, &s, err, sizeof err) == 0, "%s", err);
	ck_assert_str_eq(s.p[0].name, n31);
	ck_assert_int_eq(s.p[1].dim_param[0], 0);
	snprintf(text, sizeof text, "%s: u64", n32);
	ck_assert_int_eq(devq_sig_parse(text, &s, err, sizeof err), -EINVAL);
	ck_assert_msg(strstr(err, "longer than 31"), "%s", err);
	snprintf(text, sizeof text, "x: in u8[%s]", n32);
	ck_assert_int_eq(devq_sig_parse(text, &s, err, sizeof err), -EINVAL);

	ck_assert_int_eq(devq_sig_parse("x: in u8[18446744073709551615]", &s, err, sizeof err), 0);
	ck_assert_uint_eq(s.p[0].dim_lit[0], UINT64_MAX);
	ck_assert_int_eq(devq_sig_parse("x: in u8[18446744073709551616]", &s, err, sizeof err),
			 -EINVAL);
	ck_assert_msg(strstr(err, "too large"), "%s", err);

	size_t n = 0;
	for (int i = 0; i < DEVQ_MAX_PARAMS - 1; i++)
		n += (size_t)snprintf(text + n, sizeof text - n, "p%d:u32,", i);
	snprintf(text + n, sizeof text - n, "p%d:f16", DEVQ_MAX_PARAMS - 1);
	ck_assert_int_eq(devq_sig_parse(text, &s, err, sizeof err), -EINVAL);
	ck_assert_str_eq(err, "parameter 16 (p15): unknown type 'f16'");

	/* All 16 parameters used, the last of them the duration. */
	n = 0;
	for (int i = 0; i < DEVQ_MAX_PARAMS - 1; i++)
		n += (size_t)snprintf(text + n, sizeof text - n, "p%d:u32,", i);
	snprintf(text + n, sizeof text - n, "ns:u64");
	ck_assert_msg(devq_sig_parse(text, &s, err, sizeof err) == 0, "%s", err);
	ck_assert_uint_eq(s.nparams, DEVQ_MAX_PARAMS);
	ck_assert_int_eq(s.duration, DEVQ_MAX_PARAMS - 1);

	char buf[64];
	memset(buf, 'Z', sizeof buf);
	ck_assert_int_eq(devq_sig_parse("x:f16", &s, buf, 8), -EINVAL);
	ck_assert_str_eq(buf, "paramet");
	for (size_t i = 8; i < sizeof buf; i++)
		ck_assert_msg(buf[i] == 'Z', "byte %zu of a buffer of 8 written", i);
	memset(buf, 'Z', sizeof buf);
	ck_assert_int_eq(devq_sig_parse("x:f16", &s, buf, 0), -EINVAL);
	ck_assert_int_eq(buf[0], 'Z');
	ck_assert_int_eq(devq_sig_parse(NULL, &s, err, sizeof err), -EINVAL);
}
END_TEST

/* devq_sig_extent_bytes refuses what the parser never makes, should a
 * signature come from elsewhere: no type, no dims, more than
 * DEVQ_MAX_DIMS, a dim naming no parameter, an index past the last. */
START_TEST(extent_refuses_malformed)
{
	struct devq_sig s;
	memset(&s, 0, sizeof s);
	s.nparams = 2;
	s.p[0].access = DEVQ_ACC_SCALAR;
	s.p[0].type = DEVQ_T_U64;
	s.p[1].access = DEVQ_ACC_IN;
	s.p[1].type = DEVQ_T_U8;
	s.p[1].ndims = 1;
	s.p[1].dim_param[0] = -1;
	s.p[1].dim_lit[0] = 8;
	union devq_kval args[DEVQ_MAX_PARAMS] = { { .u64 = 4 } };
	uint64_t bytes = 77;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 1, args, &bytes), 0);
	ck_assert_uint_eq(bytes, 8);
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 2, args, &bytes), -EINVAL);
	s.p[1].type = (enum devq_type)0;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 1, args, &bytes), -EINVAL);
	s.p[1].type = DEVQ_T_U8;
	s.p[1].ndims = 0;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 1, args, &bytes), -EINVAL);
	s.p[1].ndims = DEVQ_MAX_DIMS + 1;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 1, args, &bytes), -EINVAL);
	s.p[1].ndims = 1;
	s.p[1].dim_param[0] = 2;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 1, args, &bytes), -EINVAL);
	s.p[1].dim_param[0] = 0;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, 1, args, &bytes), 0);
	ck_assert_uint_eq(bytes, 4);
	/* A full table: the index one past it. */
	s.nparams = DEVQ_MAX_PARAMS;
	ck_assert_int_eq(devq_sig_extent_bytes(&s, DEVQ_MAX_PARAMS, args, &bytes), -EINVAL);
}
END_TEST

/* ---- CPU kernels ---- */

START_TEST(k_fill_u32)
{
	size_t n = sizes[_i];
	uint32_t *dst = malloc((n + GUARD) * sizeof *dst), v = (uint32_t)rnd();

	for (size_t i = 0; i < n + GUARD; i++)
		dst[i] = ~v;
	union devq_kval a[] = { { .u64 = n }, { .u32 = v }, { .ptr = dst } };
	ck_assert_int_eq(run("fill_u32", a), 0);
	for (size_t i = 0; i < n + GUARD; i++)
		ck_assert_uint_eq(dst[i], i < n ? v : ~v);
	free(dst);
}
END_TEST

START_TEST(k_copy)
{
	size_t n = sizes[_i];
	uint8_t *src = malloc(n + GUARD), *dst = malloc(n + GUARD);

	for (size_t i = 0; i < n + GUARD; i++) {
		src[i] = (uint8_t)rnd();
		dst[i] = (uint8_t)~src[i];
	}
	union devq_kval a[] = { { .u64 = n }, { .ptr = src }, { .ptr = dst } };
	ck_assert_int_eq(run("copy", a), 0);
	for (size_t i = 0; i < n + GUARD; i++)
		ck_assert_uint_eq(dst[i], i < n ? src[i] : (uint8_t)~src[i]);
	/* overlapping, shifted forward by one */
	if (n > 1) {
		memcpy(dst, src, n + GUARD);
		union devq_kval o[] = { { .u64 = n - 1 }, { .ptr = dst }, { .ptr = dst + 1 } };
		ck_assert_int_eq(run("copy", o), 0);
		ck_assert_mem_eq(dst + 1, src, n - 1);
	}
	free(src);
	free(dst);
}
END_TEST

START_TEST(k_saxpy)
{
	if (!use_isa(_i))
		return;
	size_t n = sizes[_i % NSIZES];
	float *x = malloc((n + GUARD) * sizeof *x), *y = malloc((n + GUARD) * sizeof *y);
	float *ref = malloc((n + GUARD) * sizeof *ref), a = rndf();

	for (size_t i = 0; i < n + GUARD; i++) {
		x[i] = rndf();
		y[i] = ref[i] = rndf();
		if (i < n)
			ref[i] = fmaf(a, x[i], ref[i]);
	}
	union devq_kval args[] = { { .u64 = n }, { .f32 = a }, { .ptr = x }, { .ptr = y } };
	ck_assert_int_eq(run("saxpy_f32", args), 0);
	ck_assert_mem_eq(y, ref, (n + GUARD) * sizeof *y); /* bit-exact */
	free(x);
	free(y);
	free(ref);
}
END_TEST

START_TEST(k_vadd)
{
	if (!use_isa(_i))
		return;
	size_t n = sizes[_i % NSIZES];
	float *a = malloc((n + GUARD) * sizeof *a), *b = malloc((n + GUARD) * sizeof *b);
	float *c = malloc((n + GUARD) * sizeof *c);

	for (size_t i = 0; i < n + GUARD; i++) {
		a[i] = rndf();
		b[i] = rndf();
		c[i] = -1.0f;
	}
	union devq_kval args[] = { { .u64 = n }, { .ptr = a }, { .ptr = b }, { .ptr = c } };
	ck_assert_int_eq(run("vadd_f32", args), 0);
	for (size_t i = 0; i < n + GUARD; i++) {
		volatile float want = i < n ? a[i] + b[i] : -1.0f;
		ck_assert_msg(c[i] == want, "c[%zu] = %a, want %a", i, (double)c[i], (double)want);
	}
	free(a);
	free(b);
	free(c);
}
END_TEST

START_TEST(k_reduce)
{
	if (!use_isa(_i))
		return;
	size_t n = sizes[_i % NSIZES];
	float *x = malloc((n + 1) * sizeof *x), out[2] = { -1.0f, -7.0f };
	double ref = 0.0, abs = 0.0;

	for (size_t i = 0; i < n; i++)
		x[i] = rndf();
	for (size_t i = n; i-- > 0;) { /* reverse order: any order is allowed */
		ref += x[i];
		abs += fabs(x[i]);
	}
	union devq_kval args[] = { { .u64 = n }, { .ptr = x }, { .ptr = out } };
	ck_assert_int_eq(run("reduce_sum_f32", args), 0);
	ck_assert_msg(fabs(out[0] - ref) <= (double)n * FLT_EPSILON * abs,
		      "n=%zu sum %.9g ref %.9g", n, (double)out[0], ref);
	if (n == 0)
		ck_assert(out[0] == 0.0f && !signbit(out[0]));
	ck_assert(out[1] == -7.0f);
	free(x);
}
END_TEST

/* Data for comparing variants.  TAME: rndf().  WIDE: finite values over
 * most of the exponent range, so that even double sums round and a change
 * in the order of the reduction's adds shows in its result.  WILD: WIDE
 * with infinities, NaNs, signed zeros, subnormals and the largest values
 * mixed in, for overflow, underflow and NaN propagation.  CANCEL: pairs
 * v, -v + small with v near 2^60..2^90, so that the large parts cancel
 * between reduction lanes and what is left is the rounding of the lanes'
 * double sums: a result that changes with the order of the adds (the final
 * rounding to float hides that on the other kinds). */
enum data { TAME, WIDE, WILD, CANCEL };

static float datf(enum data d)
{
	static const float special[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN,
					 FLT_MIN, -FLT_MIN, 1e-45f, FLT_MAX, -FLT_MAX };
	uint64_t r = rnd();

	if (d == TAME || d == CANCEL)
		return rndf();
	if (d == WILD && r % 64 == 0)
		return special[(r >> 8) % (sizeof special / sizeof special[0])];
	/* sign, exponent over most of the range, random mantissa */
	return ldexpf(rndf() / 100.0f, (int)((r >> 16) % 200) - 100);
}

/* Every variant against the baseline, bit for bit, for the sizes and
 * misalignments around the vector widths (8 floats, unrolled 32, 16
 * reduction lanes), and once above the size where vadd streams its stores
 * (32 MiB in cpu_kernels.c): the dispatched code must be invisible. */
static void isa_agree(size_t n, size_t off, enum data d)
{
	float *x = malloc((n + off + GUARD) * sizeof *x), *y0 = malloc((n + off + GUARD) * sizeof *x);
	float *y1 = malloc((n + off + GUARD) * sizeof *x), *c0 = malloc((n + off + GUARD) * sizeof *x);
	float *c1 = malloc((n + off + GUARD) * sizeof *x), a = datf(d), s0[2], s1[2];

	ck_assert(x && y0 && y1 && c0 && c1);
	for (size_t i = 0; i < n + off + GUARD; i++) {
		x[i] = datf(d);
		if (d == CANCEL)
			x[i] = i % 2 ? rndf() - x[i - 1] : ldexpf(x[i] / 100.0f, 60 + (int)(rnd() % 31));
		y0[i] = y1[i] = datf(d);
		c0[i] = c1[i] = -1.0f;
	}
	s0[1] = s1[1] = -7.0f;
	for (int isa = DEVQ_CPU_ISA_BASELINE; isa <= DEVQ_CPU_ISA_AVX2; isa++) {
		if (devq_cpu_isa_set((enum devq_cpu_isa)isa) != 0)
			continue;
		bool base = isa == DEVQ_CPU_ISA_BASELINE;
		union devq_kval sx[] = { { .u64 = n }, { .f32 = a }, { .ptr = x + off },
					 { .ptr = (base ? y0 : y1) + off } };
		union devq_kval va[] = { { .u64 = n }, { .ptr = x + off }, { .ptr = (base ? y0 : y1) + off },
					 { .ptr = (base ? c0 : c1) + off } };
		union devq_kval rs[] = { { .u64 = n }, { .ptr = x + off }, { .ptr = base ? s0 : s1 } };
		ck_assert_int_eq(run("saxpy_f32", sx), 0);
		ck_assert_int_eq(run("vadd_f32", va), 0);
		ck_assert_int_eq(run("reduce_sum_f32", rs), 0);
		if (base)
			continue;
		ck_assert_msg(memcmp(y0, y1, (n + off + GUARD) * sizeof *x) == 0,
			      "saxpy_f32 %s differs from baseline, n=%zu off=%zu", devq_cpu_isa_name(isa), n, off);
		ck_assert_msg(memcmp(c0, c1, (n + off + GUARD) * sizeof *x) == 0,
			      "vadd_f32 %s differs from baseline, n=%zu off=%zu", devq_cpu_isa_name(isa), n, off);
		ck_assert_msg(memcmp(s0, s1, sizeof s0) == 0,
			      "reduce_sum_f32 %s %a, baseline %a, n=%zu off=%zu", devq_cpu_isa_name(isa),
			      (double)s1[0], (double)s0[0], n, off);
	}
	free(x);
	free(y0);
	free(y1);
	free(c0);
	free(c1);
}

START_TEST(k_isa_agree)
{
	static const size_t more[] = { 63, 64, 65, 1000, 4099 };

	if (!devq_cpu_isa_supported(DEVQ_CPU_ISA_AVX2))
		fprintf(stderr, "test_kernels: only the baseline variant on this CPU\n");
	for (size_t off = 0; off < 4; off++) {
		for (enum data d = TAME; d <= CANCEL; d++) {
			for (size_t n = 0; n <= 40; n++)
				isa_agree(n, off, d);
			for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
				isa_agree(more[i], off, d);
		}
	}
	isa_agree((33u << 20) / sizeof(float) + 5, 1, WIDE);
}
END_TEST

/* An output that is the very same range as an input (y = x, c = a) is
 * computed element by element under every variant: the reference is the
 * scalar formula on the old values. */
START_TEST(k_isa_aliased)
{
	static const size_t ns[] = { 37, 1000, (33u << 20) / sizeof(float) + 5 };

	for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
		size_t n = ns[k];
		float *x = malloc(n * sizeof *x), *b = malloc(n * sizeof *b);
		float *r1 = malloc(n * sizeof *x), *r2 = malloc(n * sizeof *x), a = rndf();

		ck_assert(x && b && r1 && r2);
		for (int isa = DEVQ_CPU_ISA_BASELINE; isa <= DEVQ_CPU_ISA_AVX2; isa++) {
			if (devq_cpu_isa_set((enum devq_cpu_isa)isa) != 0)
				continue;
			for (size_t i = 0; i < n; i++) {
				x[i] = datf(WIDE);
				b[i] = datf(WIDE);
				r1[i] = fmaf(a, x[i], x[i]);
				r2[i] = r1[i] + b[i];
			}
			union devq_kval sx[] = { { .u64 = n }, { .f32 = a }, { .ptr = x }, { .ptr = x } };
			ck_assert_int_eq(run("saxpy_f32", sx), 0);
			ck_assert_msg(memcmp(x, r1, n * sizeof *x) == 0, "saxpy_f32 y = x, %s, n=%zu",
				      devq_cpu_isa_name(isa), n);
			union devq_kval va[] = { { .u64 = n }, { .ptr = x }, { .ptr = b }, { .ptr = x } };
			ck_assert_int_eq(run("vadd_f32", va), 0);
			ck_assert_msg(memcmp(x, r2, n * sizeof *x) == 0, "vadd_f32 c = a, %s, n=%zu",
				      devq_cpu_isa_name(isa), n);
		}
		free(x);
		free(b);
		free(r1);
		free(r2);
	}
}
END_TEST

START_TEST(k_isa_choose)
{
	enum devq_cpu_isa best = devq_cpu_isa_supported(DEVQ_CPU_ISA_AVX2) ? DEVQ_CPU_ISA_AVX2
									   : DEVQ_CPU_ISA_BASELINE;

	ck_assert(devq_cpu_isa_supported(DEVQ_CPU_ISA_BASELINE));
	ck_assert_int_eq(devq_cpu_isa_choose(NULL), best);
	ck_assert_int_eq(devq_cpu_isa_choose("baseline"), DEVQ_CPU_ISA_BASELINE);
	ck_assert_int_eq(devq_cpu_isa_choose("avx2"), best);
	ck_assert_int_eq(devq_cpu_isa_choose("avx512"), best);
	ck_assert_int_eq(devq_cpu_isa_choose(""), best);
	/* what the constructor picked, from this process's environment */
	ck_assert_int_eq(devq_cpu_isa(), devq_cpu_isa_choose(getenv("DEVQ_CPU_ISA")));
	ck_assert_str_eq(devq_cpu_isa_name(DEVQ_CPU_ISA_BASELINE), "baseline");
	ck_assert_str_eq(devq_cpu_isa_name(DEVQ_CPU_ISA_AVX2), "avx2");
}
END_TEST

/* Reference mixer written out again here so a typo in devq_mix64 shows. */
static uint64_t ref_mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

START_TEST(k_checksum)
{
	size_t n = sizes[_i];
	uint8_t *d = malloc(n + 1);
	uint64_t out[2] = { 1, 2 }, ref = 0;

	for (size_t i = 0; i < n; i++) {
		d[i] = (uint8_t)rnd();
		ref += ref_mix((uint64_t)i << 8 | d[i]);
	}
	union devq_kval args[] = { { .u64 = n }, { .ptr = d }, { .ptr = out } };
	ck_assert_int_eq(run("checksum", args), 0);
	ck_assert_uint_eq(out[0], ref);
	ck_assert_uint_eq(out[1], 2);
	free(d);
}
END_TEST

START_TEST(k_checksum_known)
{
	/* computed by hand (Python, arbitrary precision then mod 2^64) */
	uint8_t d[3] = { 0x01, 0xff, 0x7a };
	uint64_t out = 0;
	union devq_kval args[] = { { .u64 = 3 }, { .ptr = d }, { .ptr = &out } };

	ck_assert_int_eq(run("checksum", args), 0);
	ck_assert_uint_eq(out, 0x71928ebc2c0ef196ULL);
}
END_TEST

START_TEST(k_spin)
{
	union devq_kval a[] = { { .u64 = 2000000 } };
	/* Never shorter than asked, on every run; not much longer on the best
	 * of five, so a thread descheduled on a loaded machine does not fail
	 * it while a spin that overshoots every time still does. */
	uint64_t best = UINT64_MAX, t0;
	for (int i = 0; i < 5; i++) {
		t0 = devq_now_ns();
		ck_assert_int_eq(run("spin", a), 0);
		uint64_t dt = devq_now_ns() - t0;
		ck_assert_msg(dt >= 2000000, "spin(2ms) took %llu ns", (unsigned long long)dt);
		if (dt < best)
			best = dt;
	}
	ck_assert_msg(best <= 4000000, "spin(2ms) took %llu ns at best of 5",
		      (unsigned long long)best);
	/* a deadline already in the past returns at once */
	struct devq_kctx past = { .start_ns = devq_now_ns() - 10000000 };
	t0 = devq_now_ns();
	ck_assert_int_eq(kernel("spin")->cpu(a, &past), 0);
	ck_assert_uint_lt(devq_now_ns() - t0, 1000000);
}
END_TEST

START_TEST(k_spin_buf)
{
	size_t n = sizes[_i];
	uint8_t *buf = malloc(n + GUARD), *ref = malloc(n + GUARD);

	for (size_t i = 0; i < n + GUARD; i++)
		buf[i] = ref[i] = (uint8_t)(i == 0 ? 0xff : rnd()); /* 0xff wraps */
	for (size_t i = 0; i < n; i++)
		ref[i]++;
	union devq_kval a[] = { { .u64 = 100000 }, { .u64 = n }, { .ptr = buf } };
	uint64_t t0 = devq_now_ns();
	ck_assert_int_eq(run("spin_buf", a), 0);
	ck_assert_uint_ge(devq_now_ns() - t0, 100000);
	ck_assert_mem_eq(buf, ref, n + GUARD);
	free(buf);
	free(ref);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("kernels");
	TCase *p = tcase_create("parser");
	TCase *k = tcase_create("cpu");

	tcase_add_test(p, manifest_all_parse);
	tcase_add_test(p, parse_saxpy);
	tcase_add_test(p, parse_duration);
	tcase_add_test(p, parse_reduce);
	tcase_add_test(p, parse_whitespace_and_empty);
	tcase_add_loop_test(p, parse_rejects, 0, (int)(sizeof bad / sizeof bad[0]));
	tcase_add_test(p, parse_error_names_param);
	tcase_add_test(p, extent_overflow);
	tcase_add_test(p, parse_matrix);
	tcase_add_test(p, matrix_extent_overflow);
	tcase_add_test(p, type_helpers);
	tcase_add_test(p, sig_edges);
	tcase_add_test(p, extent_refuses_malformed);
	suite_add_tcase(s, p);

	tcase_add_loop_test(k, k_fill_u32, 0, NSIZES);
	tcase_add_loop_test(k, k_copy, 0, NSIZES);
	tcase_add_loop_test(k, k_saxpy, 0, NSIZES * NISA);
	tcase_add_loop_test(k, k_vadd, 0, NSIZES * NISA);
	tcase_add_loop_test(k, k_reduce, 0, NSIZES * NISA);
	tcase_add_loop_test(k, k_checksum, 0, NSIZES);
	tcase_add_test(k, k_isa_agree);
	tcase_add_test(k, k_isa_aliased);
	tcase_add_test(k, k_isa_choose);
	tcase_add_test(k, k_checksum_known);
	tcase_add_test(k, k_spin);
	tcase_add_loop_test(k, k_spin_buf, 0, NSIZES);
	tcase_set_timeout(k, 30); /* valgrind */
	suite_add_tcase(s, k);
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
