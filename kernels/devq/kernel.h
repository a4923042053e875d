/* SPDX-License-Identifier: Apache-2.0 */
/* <devq/kernel.h>: the ABI of a devq CPU kernel, built-in or loaded from an
 * executable repository (devqd(8), "EXECUTABLE REPOSITORY").
 *
 *   int NAME(const union devq_kval *args, const struct devq_kctx *ctx);
 *
 * args holds one value per parameter of the executable's signature, in
 * signature order: scalars by value in the member of their type, buffers as
 * host pointers (ptr) already offset to the argument's first element and
 * checked to hold the extent the signature gives.  The kernel returns 0, or
 * a negative errno when it failed (the op then completes as failed, with
 * that errno's text).  It runs on one of the daemon's device-stream
 * threads: it must not keep pointers past its return, nor block for longer
 * than the op should take.
 *
 * Build a repository kernel with `pkg-config --cflags devq-kernel`, as a
 * shared object (-shared -fPIC). */
#ifndef DEVQ_KERNEL_ABI_H
#define DEVQ_KERNEL_ABI_H

#include <stdint.h>

/* One argument as a kernel sees it: scalars by value, buffers as a host
 * pointer already offset to the argument's first element. */
union devq_kval {
	uint64_t u64;
	int64_t i64;
	uint32_t u32;
	int32_t i32;
	float f32;
	double f64;
	void *ptr;
};

struct devq_kctx {
	uint64_t start_ns; /* CLOCK_MONOTONIC when the device queue started the op */
};

/* Returns 0, or a negative errno when the kernel itself failed.
 * -ENOTRECOVERABLE means the device itself is lost (a sticky fault). */
typedef int (*devq_cpu_fn)(const union devq_kval *args, const struct devq_kctx *ctx);

#endif
