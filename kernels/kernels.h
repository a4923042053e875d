/* SPDX-License-Identifier: Apache-2.0 */
/* devq kernels: the manifest (names + typed signatures), the signature parser and
 * the CPU implementations.  The manifest (kernels/manifest.def) is the single
 * source of names and signatures for every backend and for clients. */
#ifndef DEVQ_KERNELS_H
#define DEVQ_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Parameters of one signature.  16: a fused linear layer (dims, scales,
 * input, weights, bias, output, ...) needs more than gemm's 8. */
#define DEVQ_MAX_PARAMS 16
#define DEVQ_MAX_NAME 32
/* Dimensions of one buffer's shape: matrices, and batches of them. */
#define DEVQ_MAX_DIMS 4

enum devq_type {
	DEVQ_T_U8 = 1,
	DEVQ_T_U32,
	DEVQ_T_U64,
	DEVQ_T_I32,
	DEVQ_T_I64,
	DEVQ_T_F32,
	DEVQ_T_F64,
};

/* Access of a buffer parameter; DEVQ_ACC_SCALAR marks a by-value parameter. */
enum devq_access {
	DEVQ_ACC_SCALAR = 0,
	DEVQ_ACC_IN = 1,
	DEVQ_ACC_OUT = 2,
	DEVQ_ACC_INOUT = 3, /* IN | OUT */
};

struct devq_param {
	char name[DEVQ_MAX_NAME];
	enum devq_type type;
	enum devq_access access;
	/* A buffer's shape: ndims dimensions, row-major and contiguous.  Dim d
	 * is the value of scalar parameter dim_param[d] when that is >= 0,
	 * else the literal dim_lit[d]; the extent in elements is their
	 * product (devq_sig_extent_bytes). */
	unsigned ndims;
	int dim_param[DEVQ_MAX_DIMS];
	uint64_t dim_lit[DEVQ_MAX_DIMS];
};

struct devq_sig {
	unsigned nparams;
	struct devq_param p[DEVQ_MAX_PARAMS];
	/* The parameter that declares the op's duration: a u64 scalar named
	 * ns (the daemon bounds it by max-op-ms and takes it as the op's
	 * expected device time), or -1.  Found once, at parse time. */
	int duration;
};

/* union devq_kval, struct devq_kctx, devq_cpu_fn: the ABI a CPU kernel is
 * written against, installed as <devq/kernel.h>. */
#include "devq/kernel.h"

struct devq_kernel {
	const char *name;
	const char *signature;
	/* The manifest's cost expression (daemon/core/cost.h), or NULL. */
	const char *cost;
	devq_cpu_fn cpu;
	/* Hidden unless devqd runs with --test-fault-injection. */
	bool test_only;
	/* Loaded from an executable repository (daemon/core/repo.c), not
	 * compiled in: a backend finds its device code in dev, which its
	 * load_image hook returned (NULL: none for this backend). */
	bool repository;
	void *dev;
	/* A host executable (<devq/kernel.h>): the code a CPU and a CUDA
	 * backend call, or NULL.  For a built-in marked host, found in the
	 * built-in host library at start. */
	bool host;
	const struct devq_host_exe *cpu_host, *cuda_host;
};

extern struct devq_kernel devq_kernels[];
extern const size_t devq_nkernels;

const struct devq_kernel *devq_kernel_find(const char *name);

/* The manifest's order, to name an entry of devq_kernels. */
enum devq_kernel_index {
#define DEVQ_KERNEL(kname, sig, c) DEVQ_KI_##kname,
#define DEVQ_HOST_KERNEL(kname, sig, c) DEVQ_KI_##kname,
#include "manifest.def"
#undef DEVQ_HOST_KERNEL
#undef DEVQ_KERNEL
};

/* The argument rules of bias_act_f32, the one built-in with any
 * (devq_kernel_refuses). */
bool devq_kernel_refuses_bias_act(const union devq_kval *args, char *err, size_t n);

/* Whether built-in k refuses these argument values although its
 * signature's types allow them (what a signature cannot say: an
 * activation bias_act_f32 does not know): true with why in err.  args as
 * validated, its scalars filled in.  Inline: every op is validated, and
 * for all but one kernel the answer is one comparison. */
static inline bool devq_kernel_refuses(const struct devq_kernel *k, const union devq_kval *args,
				       char *err, size_t n)
{
	return k == &devq_kernels[DEVQ_KI_bias_act_f32] && devq_kernel_refuses_bias_act(args, err, n);
}

/* Parses "n:u64, a:f32, x:in f32[n]" into sig.  On failure returns -EINVAL
 * and writes a message into err. */
int devq_sig_parse(const char *text, struct devq_sig *sig, char *err, size_t errlen);

/* Index of the parameter called name, or -1. */
int devq_sig_find(const struct devq_sig *sig, const char *name);

/* Byte extent of buffer parameter i given the scalar arguments: the product
 * of its dims times its element size; -EOVERFLOW when that does not fit in
 * 64 bits. */
int devq_sig_extent_bytes(const struct devq_sig *sig, unsigned i,
			  const union devq_kval *args, uint64_t *bytes);

size_t devq_type_size(enum devq_type t);
const char *devq_type_name(enum devq_type t);
int devq_type_parse(const char *s, size_t len, enum devq_type *t);
const char *devq_access_name(enum devq_access a);

uint64_t devq_mix64(uint64_t z);
/* CLOCK_MONOTONIC in ns.  Inline: the daemon reads it a few times per op
 * (hand-over, start, end, observed), where a call cost as much as the
 * read's own arithmetic. */
static inline uint64_t devq_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
