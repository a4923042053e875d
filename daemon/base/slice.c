/* SPDX-License-Identifier: Apache-2.0 */
#include "base/slice.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The kernel's struct sched_attr (include/uapi/linux/sched/types.h),
 * through its second version: glibc before 2.41 has no wrapper. */
struct slice_attr {
	uint32_t size;
	uint32_t sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime;
	uint64_t sched_deadline;
	uint64_t sched_period;
	uint32_t sched_util_min;
	uint32_t sched_util_max;
};

int devq_slice_set(uint64_t ns)
{
	struct slice_attr a;
	memset(&a, 0, sizeof(a));
	if (syscall(SYS_sched_getattr, 0, &a, sizeof(a), 0) < 0)
		return -errno;
	if (a.sched_policy != SCHED_OTHER)
		return 1;
	a.size = sizeof(a);
	a.sched_flags = 0; /* not SCHED_FLAG_KEEP_*: nice is passed as read */
	a.sched_runtime = ns;
	if (syscall(SYS_sched_setattr, 0, &a, 0) < 0)
		return -errno;
	/* Kernels before custom slices (6.12) take the call and ignore the
	 * field; before EEVDF (6.6) there is no se.slice to read. */
	return devq_slice_get() == ns ? 0 : -EINVAL;
}

uint64_t devq_slice_get(void)
{
	FILE *f = fopen("/proc/thread-self/sched", "re");
	if (!f)
		return 0;
	char line[256];
	unsigned long long v = 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "se.slice : %llu", &v) == 1)
			break;
	fclose(f);
	return v;
}
