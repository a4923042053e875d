/* SPDX-License-Identifier: Apache-2.0 */
/* The kernel table, expanded from manifest.def so names, signatures and CPU
 * entry points cannot drift apart. */
#include <stdio.h>
#include <string.h>

#include "cpu_kernels.h"

/* Not const: a host built-in's code (cpu_host, cuda_host) is filled in at
 * start, before any thread but main's runs (devq_repo_builtins). */
struct devq_kernel devq_kernels[] = {
#define DEVQ_KERNEL(kname, sig, c) { .name = #kname, .signature = sig, .cost = c, .cpu = devq_cpu_##kname },
#define DEVQ_HOST_KERNEL(kname, sig, c) { .name = #kname, .signature = sig, .cost = c, .host = true },
#include "manifest.def"
#undef DEVQ_HOST_KERNEL
#undef DEVQ_KERNEL
	/* After ns nanoseconds, a sticky device fault: the CUDA version writes
	 * to an illegal address, the CPU one marks its backend lost.  It
	 * exists so tests can drive the device-lost path; devqd hides it
	 * unless started with --test-fault-injection. */
	{ .name = "fault", .signature = "ns:u64", .cpu = devq_cpu_fault, .test_only = true },
};

const size_t devq_nkernels = sizeof devq_kernels / sizeof devq_kernels[0];

bool devq_kernel_refuses_bias_act(const union devq_kval *args, char *err, size_t n)
{
	/* act selects the activation: a value no version knows is a
	 * client's mistake, not an identity to apply silently. */
	if (args[2].u32 > 1) {
		snprintf(err, n, "argument 'act': %u is not an activation: 0 (none) or 1 (ReLU)",
			 args[2].u32);
		return true;
	}
	return false;
}

/* Linear search: the table is a handful of entries and looked up per submit
 * at most, so a hash would cost more than it saves. */
const struct devq_kernel *devq_kernel_find(const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < devq_nkernels; i++)
		if (strcmp(devq_kernels[i].name, name) == 0)
			return &devq_kernels[i];
	return NULL;
}
