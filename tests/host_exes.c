/* SPDX-License-Identifier: Apache-2.0 */
/* Test host executables (<devq/kernel.h>, the host ABI), for tests/host.sh
 * on the CPU backend and under the CUDA driver simulator:
 *   fill_cpu   n:u64, value:u32, dst:out u32[n]  writes value + its slot's
 *              generation on the worker (the generation tells old code
 *              from new across a reload: TAG, set with -DTAG=)
 *   fill_cuda  the same enqueued with cuMemsetD32Async on the op's stream
 *   slow_cpu   fill_cpu after sleeping ns (an op in flight during a reload)
 *   bad_abi    abi 99: refused at load
 *   no_run     no run function: refused at load
 *   crash_cpu  dereferences NULL: takes devqd down (tests/deploy)
 *   tick_cpu   n:u64, spin_us:u64, hang:u64, dst:out u32[n]  (abi 2) n
 *              units, unit u busy for spin_us and then dst[u] = u + 1;
 *              unit hang - 1 (when hang > 0) sleeps for an hour first:
 *              a host executable stuck inside one slice (test_deploy's
 *              watchdog)
 *   burn_cpu   tick_cpu's units, each spin_us of the thread's own CPU time
 *              (not wall time): a unit starved of CPU does not end
 *   half_units abi 2 with units but no run_units: refused at load
 * init and fini append "init|fini TAG fill|slow main=0|1" to $DEVQ_TEST_HOSTLOG,
 * main=1 when on the process's first thread (devqd's loop): the test
 * checks that never happens, and that every init gets its fini.  A run of
 * fill_cpu on that thread appends "run-on-loop TAG fill main=1". */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devq/kernel.h"

#ifndef TAG
#define TAG 1
#endif

struct slot {
	unsigned tag;
	void *stream;
	const char *who;
};

static void note(const char *what, const char *who)
{
	const char *path = getenv("DEVQ_TEST_HOSTLOG");
	if (!path)
		return;
	FILE *f = fopen(path, "a");
	if (!f)
		return;
	fprintf(f, "%s %d %s main=%d\n", what, TAG, who, gettid() == getpid());
	fclose(f);
}

static int init_as(const char *who, void *stream, void **slot, char *err, size_t errlen)
{
	struct slot *s = malloc(sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->tag = TAG;
	s->stream = stream;
	s->who = who;
	*slot = s;
	note("init", who);
	return 0;
}

static int t_init(void *stream, void **slot, char *err, size_t errlen)
{
	return init_as("fill", stream, slot, err, errlen);
}

static int slow_init(void *stream, void **slot, char *err, size_t errlen)
{
	return init_as("slow", stream, slot, err, errlen);
}

static void t_fini(void *stream, void *slot)
{
	struct slot *s = slot;
	note(s->stream == stream ? "fini" : "fini-wrong-stream", s->who);
	free(s);
}

static int fill_cpu_run(const union devq_kval *a, const struct devq_host_call *call)
{
	const struct slot *s = call->slot;
	if (call->stream || call->threads < 1) {
		snprintf(call->err, call->errlen, "bad call: stream %p threads %u", call->stream,
			 call->threads);
		return -EINVAL;
	}
	if (gettid() == getpid())
		note("run-on-loop", s->who);
	uint32_t *d = a[2].ptr;
	for (uint64_t i = 0; i < a[0].u64; i++)
		d[i] = a[1].u32 + s->tag;
	return 0;
}

static int slow_cpu_run(const union devq_kval *a, const struct devq_host_call *call)
{
	struct timespec ts = { (time_t)(a[0].u64 / 1000000000u), (long)(a[0].u64 % 1000000000u) };
	nanosleep(&ts, NULL);
	return fill_cpu_run(a + 1, call);
}

typedef int (*memset_fn)(unsigned long long, unsigned, size_t, void *);

static int fill_cuda_run(const union devq_kval *a, const struct devq_host_call *call)
{
	const struct slot *s = call->slot;
	/* The driver devqd loaded, found as any library in the process would. */
	void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	memset_fn f = drv ? (memset_fn)dlsym(drv, "cuMemsetD32Async") : NULL;
	if (drv)
		dlclose(drv);
	if (!f) {
		snprintf(call->err, call->errlen, "no libcuda.so.1 loaded");
		return -ENOSYS;
	}
	if (!call->stream || call->stream != s->stream) {
		snprintf(call->err, call->errlen, "called with stream %p, init had %p", call->stream,
			 s->stream);
		return -EINVAL;
	}
	int r = f(a[2].u64, a[1].u32 + s->tag, a[0].u64, call->stream);
	if (r) {
		snprintf(call->err, call->errlen, "cuMemsetD32Async: CUresult %d", r);
		return -EIO;
	}
	return 0;
}

static int crash_run(const union devq_kval *a, const struct devq_host_call *call)
{
	(void)call;
	volatile int *p = a[0].u64 == 12345 ? NULL : (int *)a;
	return *p * 0;
}

static uint64_t tick_units(const union devq_kval *a)
{
	return a[0].u64;
}

/* CLOCK_MONOTONIC (tick: wall time) or CLOCK_THREAD_CPUTIME_ID (burn:
 * the thread's own CPU time), in us. */
static uint64_t clock_us(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Units [first, last) of tick or burn: each spin_us on clock, then
 * dst[u] = u + 1; unit hang - 1 (hang > 0) first sleeps for an hour. */
static int spin_units(const union devq_kval *a, clockid_t clock, uint64_t first, uint64_t last)
{
	uint32_t *d = a[3].ptr;
	for (uint64_t u = first; u < last; u++) {
		if (a[2].u64 && u == a[2].u64 - 1) {
			struct timespec hour = { 3600, 0 };
			nanosleep(&hour, NULL);
		}
		uint64_t t0 = clock_us(clock);
		while (clock_us(clock) - t0 < a[1].u64)
			;
		d[u] = (uint32_t)u + 1;
	}
	return 0;
}

static int tick_run_units(const union devq_kval *a, const struct devq_host_call *call,
			  uint64_t first, uint64_t last)
{
	(void)call;
	return spin_units(a, CLOCK_MONOTONIC, first, last);
}

static int burn_run_units(const union devq_kval *a, const struct devq_host_call *call,
			  uint64_t first, uint64_t last)
{
	(void)call;
	return spin_units(a, CLOCK_THREAD_CPUTIME_ID, first, last);
}

static int burn_run(const union devq_kval *a, const struct devq_host_call *call)
{
	return burn_run_units(a, call, 0, a[0].u64);
}

const struct devq_host_exe burn_cpu = { .abi = DEVQ_HOST_ABI, .run = burn_run,
					.units = tick_units, .run_units = burn_run_units };

static int tick_run(const union devq_kval *a, const struct devq_host_call *call)
{
	return tick_run_units(a, call, 0, a[0].u64);
}

const struct devq_host_exe tick_cpu = { .abi = DEVQ_HOST_ABI, .run = tick_run,
					.units = tick_units, .run_units = tick_run_units,
					.cost = "n*spin_us" };
const struct devq_host_exe half_units = { .abi = DEVQ_HOST_ABI, .run = tick_run,
					  .units = tick_units };
/* fill_cpu and slow_cpu as a library built against version 1 of the
 * header exports them: the structure ends at run (devqd must read no
 * further). */
struct host_exe_v1 {
	uint32_t abi, reserved;
	int (*init)(void *stream, void **slot, char *err, size_t errlen);
	void (*fini)(void *stream, void *slot);
	int (*run)(const union devq_kval *args, const struct devq_host_call *call);
};
const struct host_exe_v1 fill_cpu = { .abi = 1, .init = t_init, .fini = t_fini,
				      .run = fill_cpu_run };
const struct host_exe_v1 slow_cpu = { .abi = 1, .init = slow_init, .fini = t_fini,
				      .run = slow_cpu_run };
const struct devq_host_exe fill_cuda = { .abi = DEVQ_HOST_ABI, .init = t_init, .fini = t_fini,
					 .run = fill_cuda_run };
const struct devq_host_exe bad_abi = { .abi = 99, .run = fill_cpu_run };
const struct devq_host_exe no_run = { .abi = DEVQ_HOST_ABI };
const struct devq_host_exe crash_cpu = { .abi = DEVQ_HOST_ABI, .run = crash_run };
