/* SPDX-License-Identifier: Apache-2.0 */
/* Private: prototypes of the CPU kernels, generated from the manifest so a
 * missing implementation is a link error rather than a silent gap. */
#ifndef DEVQ_CPU_KERNELS_H
#define DEVQ_CPU_KERNELS_H

#include "kernels.h"

#define DEVQ_KERNEL(name, sig) \
	int devq_cpu_##name(const union devq_kval *args, const struct devq_kctx *ctx);
#include "manifest.def"
#undef DEVQ_KERNEL
int devq_cpu_fault(const union devq_kval *args, const struct devq_kctx *ctx);

#endif
