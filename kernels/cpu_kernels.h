/* SPDX-License-Identifier: Apache-2.0 */
/* Private: prototypes of the CPU kernels, generated from the manifest so a
 * missing implementation is a link error rather than a silent gap. */
#ifndef DEVQ_CPU_KERNELS_H
#define DEVQ_CPU_KERNELS_H

#include "kernels.h"

#define DEVQ_KERNEL(name, sig, cost) \
	int devq_cpu_##name(const union devq_kval *args, const struct devq_kctx *ctx);
#define DEVQ_HOST_KERNEL(name, sig, cost)
#include "manifest.def"
#undef DEVQ_HOST_KERNEL
#undef DEVQ_KERNEL
int devq_cpu_fault(const union devq_kval *args, const struct devq_kctx *ctx);

/* Which variant of the streaming kernels (saxpy_f32, vadd_f32,
 * reduce_sum_f32) runs: chosen at start from the CPU and $DEVQ_CPU_ISA
 * (cpu_kernels.c says how).  Every variant gives the same bits. */
enum devq_cpu_isa {
	DEVQ_CPU_ISA_BASELINE, /* portable C; fmaf from libm */
	DEVQ_CPU_ISA_AVX2,     /* x86-64 with AVX2 and FMA */
};

bool devq_cpu_isa_supported(enum devq_cpu_isa isa);
/* The variant to run given $DEVQ_CPU_ISA (want, may be NULL): the best this
 * CPU has, unless want is "baseline" (to measure the portable code, or to
 * rule the SIMD code out).  Any other value is ignored: the CPU backend's
 * device string (devctl status) says which variant runs. */
enum devq_cpu_isa devq_cpu_isa_choose(const char *want);
enum devq_cpu_isa devq_cpu_isa(void);
const char *devq_cpu_isa_name(enum devq_cpu_isa isa);
/* Switches variant (tests compare them); -ENOTSUP when this CPU lacks it. */
int devq_cpu_isa_set(enum devq_cpu_isa isa);

#endif
