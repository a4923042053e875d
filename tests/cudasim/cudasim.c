/* SPDX-License-Identifier: Apache-2.0 */
/* cudasim: a TEST INSTRUMENT, not a driver.  It is built as libcuda.so.1 in
 * BUILD/tests/cudasim/ and loaded by devqd (LD_LIBRARY_PATH) so the CUDA
 * backend runs on machines without a GPU, and it checks that the backend
 * keeps CUDA's rules.  `make check-cuda-sim` runs the integration suites
 * against it.  Nothing in it is shipped.
 *
 * What it simulates (the driver API devqd resolves, daemon/device/cuda/
 * cuda_drv.h, plus cuLaunchHostFunc):
 *  - one device whose compute capability comes from DEVQ_CUDASIM_ARCH
 *    ("80", "90" (default), "100": sm_100 runs the compute_90 PTX);
 *  - streams: one thread each, executing commands strictly in order;
 *  - events with CUDA's generations: cuEventRecord starts a new record;
 *    cuStreamWaitEvent and cuEventSynchronize take the latest record at the
 *    time of the call (a later record does not affect them); an event never
 *    recorded is complete.  Timing events carry a device clock that runs
 *    50 ppm fast against CLOCK_MONOTONIC from a large offset, read with
 *    0.5 us resolution; the host learns of a completion DEVQ_CUDASIM_NOTIFY_US
 *    (default 300) after the device timestamp, as an interrupt would;
 *  - the primary context (retain/release counted) and a per-thread current
 *    context;
 *  - host registration (READ_ONLY, DEVICEMAP; device pointer = host
 *    pointer), device memory (cuMemAlloc and the stream-ordered allocator);
 *  - cuMemcpyAsync, cuMemsetD32Async/D8Async, cuMemcpyHtoD/DtoH;
 *  - modules: cuModuleLoadData takes a fatbin (and picks the image the
 *    device would run, as devq_fatbin_select says), a cubin (for the
 *    device's major version, a minor no higher) or NUL-terminated PTX (for
 *    an architecture no higher than the device's: "JIT-compiled"), and
 *    copies the image it keeps.  A devq_NAME function exists when the
 *    manifest has NAME and the image names it; cuLaunchKernel runs the
 *    kernel's CPU implementation (kernels/cpu_kernels.c) on the stream's
 *    thread.  Any other name is an entry of a repository image (the
 *    executable repository, daemon/core/repo.c): it exists when the cubin
 *    has a function symbol marked as an entry by that name, or the PTX an
 *    ".entry NAME(", and cuFuncGetParamInfo answers its parameters' offsets
 *    and sizes as the image declares them (the cubin's .nv.info.NAME
 *    EIATTR_KPARAM_INFO attributes, the PTX's .param list);
 *  - the CPU stand-in of a repository entry: the simulator cannot run
 *    device code, and devqd passes it nothing else, so the test names the
 *    CPU code itself: DEVQ_CUDASIM_CPU="ENTRY=PATH.so[:SYMBOL],..." (SYMBOL
 *    defaults to ENTRY; the ABI of <devq/kernel.h>).  PATH is opened when
 *    the module's entry is looked up (a module loaded after PATH was
 *    replaced runs the new code) and closed when the module is unloaded and
 *    its last launch is done.  Launching an entry with no stand-in executes
 *    nothing and is a violation;
 *  - graphs: stream capture of kernels, copies, fills and event records,
 *    instantiate, launch (launches of one exec serialise), destroy;
 *  - host functions (cuLaunchHostFunc) on the stream's thread;
 *  - faults: DEVQ_CUDASIM_FAULT="N:CODE" makes the Nth kernel execution
 *    fail with CUresult CODE (e.g. 226, CUDA_ERROR_CONTAINED); the test-only
 *    "fault" kernel fails with CUDA_ERROR_ILLEGAL_ADDRESS.  The error is
 *    sticky: every later call returns it.
 *
 * Rules enforced.  Each breach is a VIOLATION: a line "cudasim: VIOLATION:
 * ..." on stderr and in the file DEVQ_CUDASIM_REPORT names (appended), which
 * the test harness and `make check-cuda-sim` turn into failures:
 *  - a call before cuInit, or needing a context without a current one (or
 *    with one whose primary context has been released);
 *  - a handle that is not live (destroyed or never created);
 *  - re-recording an event whose previous record has not completed;
 *    elapsed time on an event created with CU_EVENT_DISABLE_TIMING, or on a
 *    record not yet complete;
 *  - kernels, copies or fills touching memory that is not allocated or
 *    registered (at the time they execute), writing READ_ONLY registrations;
 *    overlapping cuMemcpyAsync ranges; a misaligned cuMemsetD32Async;
 *  - cuModuleUnload of a module one of whose entries still has a launch
 *    queued or running on a stream (devqd must unload a replaced
 *    repository image only after its last op);
 *  - registering memory twice, unregistering what is not registered,
 *    freeing what is not allocated, releasing the primary context more often
 *    than retained;
 *  - a host function (or a stream callback) calling CUDA;
 *  - capture errors: a non-capturable call on a capturing stream, ending a
 *    capture that was not begun;
 *  - at exit, once the primary context has been released (and no sticky
 *    fault ended it): streams, events,
 *    modules, graphs, registrations or allocations not released;
 *  - unloading the library (dlclose) after cuInit: the real driver keeps
 *    threads of its own (here: one service thread) whose code would vanish.
 *
 * Not modelled: more than one device or context, the legacy default
 * stream's implicit synchronisation (it is one more stream here), the
 * per-thread default stream, stream priorities and SM occupancy unless
 * DEVQ_CUDASIM_OCCUPANCY is set (below), concurrent kernels sharing SMs
 * (one stream runs one command at a time, streams run in parallel as
 * threads), event-record nodes' interplay with later host
 * records (a node records and completes at once), unified memory,
 * asynchronous error reporting other than the sticky faults above, real
 * timings of copies, and PTX compilation (a PTX image stands for its SASS);
 * compressed fatbin images (refused: build with -Xfatbin -compress=false);
 * the memory a repository entry touches (its stand-in gets the pointers
 * unchecked: the simulator does not know the executable's signature);
 * launches of a repository entry inside a graph (devqd never captures them)
 * in the unload check; cuFuncGetParamInfo on the project's own kernels
 * (CUDA_ERROR_NOT_SUPPORTED).
 *
 * DEVQ_CUDASIM_STATS=FILE: at exit, counts of kernel launches, graph
 * launches and captures, the most kernel launches one stream held queued
 * or running at once, and of the images modules loaded ("module_image
 * sm_90 SASS 2", "compute_90 PTX", "sm_90 cubin", "sm_90 PTX" for a bare
 * PTX image) (tests read them).
 * DEVQ_CUDASIM_DRIVER_VERSION: what cuDriverGetVersion answers.
 * DEVQ_CUDASIM_PRIORITY_RANGE=LEAST:GREATEST: what
 * cuCtxGetStreamPriorityRange answers (default 0:-5); "0:0" is a device
 * whose every stream has the same priority, so a high-priority queue lands
 * on a stream no higher than a normal one.
 * DEVQ_CUDASIM_OCCUPANCY=1: SM occupancy and stream priorities are
 * modelled.  A kernel launch of at least 8 x 2048 threads (the simulated
 * device's 8 SMs full) runs alone; smaller ones run side by side, but not
 * beside such a kernel.  Kernels waiting to start (one per stream, at its
 * head) start highest stream priority first, then in launch order, as a
 * GPU's block scheduler takes pending work: with every SM busy, a kernel of
 * a high-priority stream starts before the normal ones launched earlier.
 * DEVQ_CUDASIM_REGISTER_NS: nanoseconds per MiB that cuMemHostRegister and
 * cuMemHostUnregister take (default 0), as pinning and unpinning GiBs take
 * seconds on a real driver; the calling thread sleeps, other threads' calls
 * go on meanwhile. */
#include <cuda.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device/cuda/fatbin.h"
#include "kernels.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- violations ------------------------------------------------------- */

static atomic_uint violations;

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&violations, 1);
	char line[600];
	int n = snprintf(line, sizeof(line), "cudasim: VIOLATION: %s\n", msg);
	if (n > (int)sizeof(line) - 1)
		n = (int)sizeof(line) - 1;
	if (write(2, line, (size_t)n) < 0) {
		/* nowhere else to say it */
	}
	const char *path = getenv("DEVQ_CUDASIM_REPORT");
	if (path && *path) {
		int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd >= 0) {
			if (write(fd, line, (size_t)n) < 0) {
				/* the stderr line stands */
			}
			close(fd);
		}
	}
}

/* ---- state -------------------------------------------------------------- */

enum { MAGIC_STREAM = 0x5354524d, MAGIC_EVENT = 0x4556454e, MAGIC_GRAPH = 0x47524150,
       MAGIC_EXEC = 0x45584543, MAGIC_MODULE = 0x4d4f4455, MAGIC_FUNC = 0x46554e43,
       MAGIC_DEAD = 0xdeadbeef };

enum cmd_kind { C_KERNEL, C_COPY, C_SET32, C_SET8, C_RECORD, C_WAIT, C_FREE, C_HOSTFN, C_GRAPH };

struct CUevent_st {
	unsigned magic;
	unsigned flags;
	uint64_t rec_gen, done_gen; /* records issued, records completed */
	uint64_t visible_ns;        /* when the host may see done_gen */
	double t_ms;                /* device time of the latest completed record */
	struct CUevent_st *next_all;
};

struct cmd {
	struct cmd *next;
	enum cmd_kind kind;
	const struct devq_kernel *k;   /* C_KERNEL: a built-in kernel, or */
	struct CUfunc_st *ent;         /* an entry of a loaded image (k NULL) */
	union devq_kval args[DEVQ_MAX_PARAMS];
	uint64_t dst, src, n;          /* C_COPY, C_SET*, C_FREE */
	uint32_t value;
	struct CUevent_st *ev;         /* C_RECORD, C_WAIT */
	uint64_t gen;
	CUhostFn fn;                   /* C_HOSTFN */
	void *ud;
	struct CUgraphExec_st *exec;   /* C_GRAPH */
	uint64_t threads;              /* C_KERNEL: threads of the launch */
	uint64_t seq;                  /* C_KERNEL, C_GRAPH: launch order */
};

struct CUstream_st {
	unsigned magic;
	int priority;
	pthread_t thread;
	pthread_cond_t cv;
	struct cmd *head, *tail;
	bool busy, dying;
	unsigned kernels; /* kernel launches queued or running */
	struct CUgraph_st *capture; /* capturing into */
	/* DEVQ_CUDASIM_OCCUPANCY: the kernel at this stream's head waits for
	 * the device (gate_enter). */
	bool gate_waiting, gate_full;
	uint64_t gate_seq, graph_seq;
	struct CUstream_st *next_all;
};

struct CUgraph_st {
	unsigned magic;
	struct cmd *head, *tail;
	unsigned n;
	struct CUgraph_st *next_all;
};

struct CUgraphExec_st {
	unsigned magic;
	struct cmd *head;
	pthread_mutex_t run; /* launches of one exec serialise */
	unsigned pending;    /* launches queued, not finished */
	struct CUgraphExec_st *next_all;
};

struct CUmod_st {
	unsigned magic;
	const unsigned char *image; /* the payload chosen for the device (a copy) */
	size_t image_len;
	bool ptx;                   /* image is PTX text, else an ELF cubin */
	unsigned pending;           /* launches of its entries queued or running */
	struct CUfunc_st *fns;      /* entries looked up (repository images) */
	struct CUmod_st *next_all;
};

/* An entry of a module that is not one of the project's kernels (an image
 * of the executable repository): its parameters as the image declares
 * them, and the CPU code that stands in for it (DEVQ_CUDASIM_CPU). */
struct CUfunc_st {
	unsigned magic;
	struct CUmod_st *mod;
	char name[128];
	unsigned nparams;
	size_t off[DEVQ_MAX_PARAMS + 1], size[DEVQ_MAX_PARAMS + 1];
	bool params_known;
	devq_cpu_fn cpu; /* NULL: no stand-in, a launch executes nothing */
	void *dl;
	int dl_fd;
	struct CUfunc_st *next;
};

struct region {
	uint64_t base, len;
	bool device, read_only, devicemap, freeing;
	struct region *next;
};

struct CUctx_st {
	int retained;
};

static pthread_mutex_t G = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t progress = PTHREAD_COND_INITIALIZER; /* any command done */
static bool inited;
static struct CUctx_st primary;
static bool ever_retained;
static __thread struct CUctx_st *current;
static __thread bool in_host_fn;
static CUresult sticky; /* CUDA_SUCCESS until a fault */
static struct CUstream_st *streams;
static struct CUevent_st *events;
static struct CUgraph_st *graphs;
static struct CUgraphExec_st *execs;
static struct CUmod_st *modules;
static struct region *regions;
static uint64_t dev_used;
static unsigned arch = 90;
static uint64_t notify_ns = 300000;
static uint64_t register_ns_per_mib;
static uint64_t clock_offset_ns = 123456789012345ull;
static unsigned long fault_at, launches, graph_launches, captures, max_kernels_queued;
static uint64_t launch_seq;                /* cuLaunchKernel and cuGraphLaunch calls */
static bool occupancy;                     /* DEVQ_CUDASIM_OCCUPANCY */
static int prio_least = 0, prio_greatest = -5; /* DEVQ_CUDASIM_PRIORITY_RANGE */
static unsigned gate_running;              /* kernels past the gate, running */
static bool gate_full_running;             /* one of them fills every SM */
static CUresult fault_code;
static struct {
	char name[48]; /* "sm_90 SASS", "compute_90 PTX", "sm_80 cubin", "sm_90 PTX" */
	unsigned long n;
} images_loaded[16]; /* for DEVQ_CUDASIM_STATS */

static void count_image(const char *name)
{
	for (size_t i = 0; i < sizeof(images_loaded) / sizeof(images_loaded[0]); i++)
		if (!images_loaded[i].n || !strcmp(images_loaded[i].name, name)) {
			snprintf(images_loaded[i].name, sizeof(images_loaded[i].name), "%s", name);
			images_loaded[i].n++;
			return;
		}
}
static pthread_t service;
static bool service_started, service_stop;
static pthread_cond_t service_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t *exiting; /* locked by an exit handler outside this library */

#define DEV_TOTAL (80ull << 30)

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The device clock: 50 ppm fast, from an offset, 0.5 us resolution. */
static double device_ms(void)
{
	uint64_t t = mono_ns();
	double ns = (double)t * (1.0 + 50e-6) + (double)clock_offset_ns;
	return (double)(uint64_t)(ns / 500.0) * 500.0 / 1e6;
}

/* ---- call checks (G held) ---------------------------------------------- */

#define ENTER(name, needs_ctx)                                                   \
	pthread_mutex_lock(&G);                                                  \
	do {                                                                     \
		CUresult e_ = enter(name, needs_ctx);                            \
		if (e_ != CUDA_SUCCESS) {                                        \
			pthread_mutex_unlock(&G);                                \
			return e_;                                               \
		}                                                                \
	} while (0)
#define ENTER_LOCKED(name, needs_ctx)                                            \
	do {                                                                     \
		CUresult e_ = enter(name, needs_ctx);                            \
		if (e_ != CUDA_SUCCESS) {                                        \
			pthread_mutex_unlock(&G);                                \
			return e_;                                               \
		}                                                                \
	} while (0)
#define RET(r)                                      \
	do {                                        \
		CUresult r__ = (r);                 \
		pthread_mutex_unlock(&G);           \
		return r__;                         \
	} while (0)

static CUresult enter(const char *name, bool needs_ctx)
{
	if (in_host_fn) {
		violation("%s called from a host function", name);
		return CUDA_ERROR_NOT_PERMITTED;
	}
	if (!inited) {
		violation("%s before cuInit", name);
		return CUDA_ERROR_NOT_INITIALIZED;
	}
	if (needs_ctx && !current) {
		violation("%s on a thread without a current context", name);
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	if (needs_ctx && current->retained <= 0) {
		violation("%s with a released primary context current", name);
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	}
	if (sticky != CUDA_SUCCESS)
		return sticky;
	return CUDA_SUCCESS;
}

static bool live(const void *h, unsigned magic, const char *call, const char *what)
{
	if (h && *(const unsigned *)h == magic)
		return true;
	violation("%s: %s %p is not live", call, what, h);
	return false;
}

static struct region *find_region(uint64_t p, uint64_t len)
{
	for (struct region *r = regions; r; r = r->next)
		if (p >= r->base && p - r->base <= r->len && len <= r->len - (p - r->base))
			return r;
	return NULL;
}

/* Whether [p, p+len) may be used by the device now. */
static bool check_mem(const char *what, uint64_t p, uint64_t len, bool write)
{
	if (!len)
		return true;
	struct region *r = find_region(p, len);
	if (!r || r->freeing || (!r->device && !r->devicemap)) {
		violation("%s: [%#llx, +%llu) is not allocated or registered (freed, unregistered or "
			  "out of bounds)",
			  what, (unsigned long long)p, (unsigned long long)len);
		return false;
	}
	if (write && r->read_only) {
		violation("%s: writes READ_ONLY registered memory at %#llx", what,
			  (unsigned long long)p);
		return false;
	}
	return true;
}

/* ---- stream threads ------------------------------------------------------ */

static void complete_event(struct CUevent_st *e)
{
	e->t_ms = device_ms();
	e->done_gen++;
	e->visible_ns = mono_ns() + notify_ns;
}

static void fault(CUresult code, const char *why)
{
	if (sticky == CUDA_SUCCESS) {
		sticky = code;
		fprintf(stderr, "cudasim: sticky fault %d (%s)\n", (int)code, why);
	}
}

static void run_entry(const struct cmd *c)
{
	struct CUfunc_st *f = c->ent;
	launches++;
	if (fault_at && launches == fault_at) {
		fault(fault_code, "DEVQ_CUDASIM_FAULT");
		return;
	}
	if (!f->cpu) {
		violation("cuLaunchKernel: entry %s of a loaded image has no CPU stand-in "
			  "(DEVQ_CUDASIM_CPU): the simulator cannot execute it",
			  f->name);
		return;
	}
	pthread_mutex_unlock(&G);
	struct devq_kctx kc = { .start_ns = mono_ns() };
	int r = f->cpu(c->args, &kc);
	pthread_mutex_lock(&G);
	if (r < 0)
		fault(CUDA_ERROR_LAUNCH_FAILED, "a kernel failed");
}

/* ---- occupancy (DEVQ_CUDASIM_OCCUPANCY) ---- */

/* The device's 8 SMs of 2048 thread slots each: a launch of at least that
 * many threads fills every SM. */
#define SIM_SMS 8
#define SIM_FULL_THREADS (SIM_SMS * 2048ull)

static struct CUstream_st *default_stream;

/* G held: whether stream o has a kernel pending for the device, and its
 * launch order: one waiting at the gate, or one its thread has not reached
 * yet (only event records, which take no time, before it).  A GPU's block
 * scheduler sees a launched kernel at once; a stream thread here may take
 * milliseconds to wake on a loaded host, and its kernel must not lose its
 * place meanwhile. */
static bool pending_kernel(const struct CUstream_st *o, uint64_t *seq)
{
	if (o->gate_waiting) {
		*seq = o->gate_seq;
		return true;
	}
	if (o->busy)
		return false; /* running a kernel, or something else */
	for (const struct cmd *c = o->head; c; c = c->next) {
		if (c->kind == C_RECORD)
			continue;
		*seq = c->seq;
		return c->kind == C_KERNEL || c->kind == C_GRAPH;
	}
	return false;
}

/* G held: no other stream's kernel pending for the device goes before
 * s's: a higher stream priority (a lower number) first, then launch order,
 * as a GPU's block scheduler takes pending work. */
static bool waits_before(const struct CUstream_st *o, const struct CUstream_st *s)
{
	uint64_t seq;
	return o && o != s && pending_kernel(o, &seq) &&
	       (o->priority < s->priority || (o->priority == s->priority && seq < s->gate_seq));
}

static bool gate_first(const struct CUstream_st *s)
{
	for (const struct CUstream_st *o = streams; o; o = o->next_all)
		if (waits_before(o, s))
			return false;
	return !waits_before(default_stream, s);
}

/* G held: waits until kernel c of stream s may start.  A kernel that fills
 * every SM runs alone; smaller ones share the device but not with such a
 * kernel.  False when a sticky fault ended the wait. */
static bool gate_enter(struct CUstream_st *s, const struct cmd *c)
{
	if (!occupancy)
		return true;
	s->gate_waiting = true;
	s->gate_seq = c->seq ? c->seq : s->graph_seq;
	s->gate_full = c->threads >= SIM_FULL_THREADS;
	while (sticky == CUDA_SUCCESS &&
	       !(gate_first(s) && !gate_full_running && (!s->gate_full || !gate_running)))
		pthread_cond_wait(&progress, &G);
	s->gate_waiting = false;
	if (sticky != CUDA_SUCCESS) {
		pthread_cond_broadcast(&progress);
		return false;
	}
	gate_running++;
	gate_full_running |= s->gate_full;
	pthread_cond_broadcast(&progress); /* the next in order may start too */
	return true;
}

static void gate_leave(const struct CUstream_st *s)
{
	if (!occupancy)
		return;
	gate_running--;
	if (s->gate_full)
		gate_full_running = false;
	pthread_cond_broadcast(&progress);
}

static void run_kernel_body(const struct cmd *c)
{
	if (!c->k) {
		run_entry(c);
		return;
	}
	struct devq_sig sig;
	char err[128];
	if (devq_sig_parse(c->k->signature, &sig, err, sizeof(err)) < 0) {
		violation("kernel %s: bad signature", c->k->name);
		return;
	}
	for (unsigned i = 0; i < sig.nparams; i++) {
		if (sig.p[i].access == DEVQ_ACC_SCALAR)
			continue;
		uint64_t bytes = 0;
		if (devq_sig_extent_bytes(&sig, i, c->args, &bytes) < 0 ||
		    !check_mem(c->k->name, c->args[i].u64, bytes, sig.p[i].access & DEVQ_ACC_OUT)) {
			fault(CUDA_ERROR_ILLEGAL_ADDRESS, "bad address in a kernel");
			return;
		}
	}
	launches++;
	if (fault_at && launches == fault_at) {
		fault(fault_code, "DEVQ_CUDASIM_FAULT");
		return;
	}
	pthread_mutex_unlock(&G);
	struct devq_kctx kc = { .start_ns = mono_ns() };
	int r = c->k->cpu(c->args, &kc);
	pthread_mutex_lock(&G);
	if (r == -ENOTRECOVERABLE)
		fault(CUDA_ERROR_ILLEGAL_ADDRESS, "the fault kernel");
	else if (r < 0)
		fault(CUDA_ERROR_LAUNCH_FAILED, "a kernel failed");
}

static void run_kernel(struct CUstream_st *s, const struct cmd *c)
{
	if (!gate_enter(s, c))
		return;
	run_kernel_body(c);
	gate_leave(s);
}

static void exec_cmd(struct CUstream_st *s, struct cmd *c);
static void module_done(struct CUmod_st *m);

static void run_graph(struct CUstream_st *s, struct CUgraphExec_st *x, uint64_t seq)
{
	s->graph_seq = seq; /* its kernels wait for the device in its place */
	pthread_mutex_unlock(&G);
	pthread_mutex_lock(&x->run);
	pthread_mutex_lock(&G);
	graph_launches++;
	for (struct cmd *c = x->head; c && sticky == CUDA_SUCCESS; c = c->next)
		exec_cmd(s, c);
	x->pending--;
	pthread_mutex_unlock(&x->run);
}

/* G held; may drop it while work runs. */
static void exec_cmd(struct CUstream_st *s, struct cmd *c)
{
	switch (c->kind) {
	case C_KERNEL:
		run_kernel(s, c);
		break;
	case C_COPY: {
		if (c->dst < c->src + c->n && c->src < c->dst + c->n && c->n)
			violation("cuMemcpyAsync: overlapping ranges %#llx and %#llx (+%llu)",
				  (unsigned long long)c->dst, (unsigned long long)c->src,
				  (unsigned long long)c->n);
		else if (check_mem("cuMemcpyAsync (source)", c->src, c->n, false) &&
			 check_mem("cuMemcpyAsync (destination)", c->dst, c->n, true))
			memcpy((void *)(uintptr_t)c->dst, (const void *)(uintptr_t)c->src, c->n);
		else
			fault(CUDA_ERROR_ILLEGAL_ADDRESS, "bad copy");
		break;
	}
	case C_SET32:
		if (check_mem("cuMemsetD32Async", c->dst, c->n * 4, true))
			for (uint64_t i = 0; i < c->n; i++)
				memcpy((char *)(uintptr_t)c->dst + 4 * i, &c->value, 4);
		else
			fault(CUDA_ERROR_ILLEGAL_ADDRESS, "bad memset");
		break;
	case C_SET8:
		if (check_mem("cuMemsetD8Async", c->dst, c->n, true))
			memset((void *)(uintptr_t)c->dst, (int)(c->value & 0xff), c->n);
		else
			fault(CUDA_ERROR_ILLEGAL_ADDRESS, "bad memset");
		break;
	case C_RECORD:
		if (c->gen) {
			complete_event(c->ev);
		} else { /* a graph's event-record node */
			c->ev->rec_gen++;
			complete_event(c->ev);
		}
		break;
	case C_WAIT:
		while (c->ev->done_gen < c->gen && sticky == CUDA_SUCCESS)
			pthread_cond_wait(&progress, &G);
		break;
	case C_FREE:
		for (struct region **pr = &regions; *pr; pr = &(*pr)->next) {
			if ((*pr)->base == c->dst) {
				struct region *r = *pr;
				*pr = r->next;
				dev_used -= r->len;
				free((void *)(uintptr_t)r->base);
				free(r);
				break;
			}
		}
		break;
	case C_HOSTFN:
		pthread_mutex_unlock(&G);
		in_host_fn = true;
		c->fn(c->ud);
		in_host_fn = false;
		pthread_mutex_lock(&G);
		break;
	case C_GRAPH:
		run_graph(s, c->exec, c->seq);
		break;
	}
}

static void *stream_main(void *arg)
{
	/* (also declared above, for the legacy stream) */
	struct CUstream_st *s = arg;
	pthread_mutex_lock(&G);
	for (;;) {
		while (!s->head && !s->dying)
			pthread_cond_wait(&s->cv, &G);
		if (!s->head)
			break;
		struct cmd *c = s->head;
		s->busy = true;
		if (sticky == CUDA_SUCCESS)
			exec_cmd(s, c);
		else if (c->kind == C_RECORD)
			complete_event(c->ev); /* waiters learn of the fault */
		else if (c->kind == C_GRAPH)
			c->exec->pending--;
		s->head = c->next;
		if (!s->head)
			s->tail = NULL;
		s->busy = false;
		s->kernels -= c->kind == C_KERNEL;
		if (c->kind == C_KERNEL && c->ent)
			module_done(c->ent->mod);
		free(c);
		pthread_cond_broadcast(&progress);
	}
	pthread_mutex_unlock(&G);
	return NULL;
}

static struct cmd *new_cmd(enum cmd_kind k)
{
	struct cmd *c = calloc(1, sizeof(*c));
	if (c)
		c->kind = k;
	return c;
}

/* G held: c goes onto s, or into the graph s is capturing. */
static CUresult submit(struct CUstream_st *s, struct cmd *c, const char *call)
{
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (s->capture) {
		if (c->kind == C_WAIT || c->kind == C_FREE || c->kind == C_HOSTFN ||
		    c->kind == C_GRAPH) {
			violation("%s on a capturing stream (not modelled as a node)", call);
			free(c);
			return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		}
		if (c->kind == C_RECORD) {
			c->ev->rec_gen--; /* the node records when the graph runs */
			c->gen = 0;
		}
		struct CUgraph_st *g = s->capture;
		if (g->tail)
			g->tail->next = c;
		else
			g->head = c;
		g->tail = c;
		g->n++;
		return CUDA_SUCCESS;
	}
	if (s->tail)
		s->tail->next = c;
	else
		s->head = c;
	s->tail = c;
	if (c->kind == C_KERNEL && ++s->kernels > max_kernels_queued)
		max_kernels_queued = s->kernels;
	if (c->kind == C_KERNEL && c->ent)
		c->ent->mod->pending++;
	pthread_cond_signal(&s->cv);
	return CUDA_SUCCESS;
}

/* The legacy default stream (NULL, default_stream above), made on first
 * use.  Modelled as one more stream: devqd's streams are
 * CU_STREAM_NON_BLOCKING, which do not synchronise with it, and only the
 * test tools use it. */

static void *stream_main(void *arg);

static CUstream legacy(CUstream s)
{
	if (s)
		return s;
	if (!default_stream) {
		struct CUstream_st *d = calloc(1, sizeof(*d));
		if (!d)
			return NULL;
		d->magic = MAGIC_STREAM;
		pthread_cond_init(&d->cv, NULL);
		if (pthread_create(&d->thread, NULL, stream_main, d)) {
			free(d);
			return NULL;
		}
		default_stream = d;
	}
	return default_stream;
}

/* ---- the service thread -------------------------------------------------- */

static void *service_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&G);
	while (!service_stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&service_cv, &G, &ts);
	}
	pthread_mutex_unlock(&G);
	return NULL;
}

/* ---- initialisation and device ------------------------------------------- */

EXPORT CUresult cuDriverGetVersion(int *v)
{
	const char *e = getenv("DEVQ_CUDASIM_DRIVER_VERSION");
	*v = e && *e ? atoi(e) : CUDA_VERSION;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuInit(unsigned flags)
{
	pthread_mutex_lock(&G);
	if (flags)
		RET(CUDA_ERROR_INVALID_VALUE);
	if (!inited) {
		const char *a = getenv("DEVQ_CUDASIM_ARCH");
		if (a && *a)
			arch = (unsigned)atoi(a);
		const char *n = getenv("DEVQ_CUDASIM_NOTIFY_US");
		if (n && *n)
			notify_ns = strtoull(n, NULL, 10) * 1000;
		const char *rn = getenv("DEVQ_CUDASIM_REGISTER_NS");
		if (rn && *rn)
			register_ns_per_mib = strtoull(rn, NULL, 10);
		const char *o = getenv("DEVQ_CUDASIM_OCCUPANCY");
		occupancy = o && *o && strcmp(o, "0");
		const char *pr = getenv("DEVQ_CUDASIM_PRIORITY_RANGE");
		if (pr && *pr && sscanf(pr, "%d:%d", &prio_least, &prio_greatest) != 2)
			fprintf(stderr, "cudasim: DEVQ_CUDASIM_PRIORITY_RANGE=%s: not LEAST:GREATEST\n",
				pr);
		const char *f = getenv("DEVQ_CUDASIM_FAULT");
		if (f && *f) {
			char *end;
			fault_at = strtoul(f, &end, 10);
			fault_code = *end == ':' ? (CUresult)atoi(end + 1) : CUDA_ERROR_ILLEGAL_ADDRESS;
		}
#ifndef __SANITIZE_THREAD__ /* TSan's atexit wrapper drops the argument */
		exiting = malloc(sizeof(*exiting));
#endif
		if (exiting) {
			pthread_mutex_init(exiting, NULL);
			/* Registered with no DSO: it runs at exit() only, never at
			 * dlclose, and its code (libc's) outlives this library. */
			extern int __cxa_atexit(void (*)(void *), void *, void *);
			__cxa_atexit((void (*)(void *))(void (*)(void))pthread_mutex_lock, exiting, NULL);
		}
		if (pthread_create(&service, NULL, service_main, NULL) == 0)
			service_started = true;
		inited = true;
	}
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
	ENTER("cuDeviceGetCount", false);
	*n = 1;
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	ENTER("cuDeviceGet", false);
	if (ordinal != 0)
		RET(CUDA_ERROR_INVALID_DEVICE);
	*d = 0;
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	ENTER("cuDeviceGetName", false);
	if (d != 0 || len <= 0)
		RET(CUDA_ERROR_INVALID_VALUE);
	snprintf(name, (size_t)len, "cudasim sm_%u (test instrument)", arch);
	RET(CUDA_SUCCESS);
}

/* A fixed UUID: devqd's metrics label UUID="GPU-..." comes from it. */
EXPORT CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d)
{
	ENTER("cuDeviceGetUuid", false);
	if (d != 0 || !u)
		RET(CUDA_ERROR_INVALID_VALUE);
	static const unsigned char id[16] = { 0xde, 0x5c, 0x51, 0x30, 0x00, 0x01, 0x40, 0x02,
					      0x80, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x44 };
	memcpy(u->bytes, id, sizeof(id));
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
	ENTER("cuDeviceGetAttribute", false);
	if (d != 0)
		RET(CUDA_ERROR_INVALID_DEVICE);
	switch (a) {
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = (int)arch / 10; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = (int)arch % 10; break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 8; break;
	case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED: *v = 1; break;
	default: *v = 0; break;
	}
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuDeviceTotalMem(size_t *b, CUdevice d)
{
	ENTER("cuDeviceTotalMem", false);
	(void)d;
	*b = DEV_TOTAL;
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	ENTER("cuDevicePrimaryCtxRetain", false);
	if (d != 0)
		RET(CUDA_ERROR_INVALID_DEVICE);
	primary.retained++;
	ever_retained = true;
	*c = &primary;
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
	pthread_mutex_lock(&G);
	(void)d;
	if (primary.retained <= 0) {
		violation("cuDevicePrimaryCtxRelease without a retain");
		RET(CUDA_ERROR_INVALID_CONTEXT);
	}
	primary.retained--;
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
	/* Binds even after a sticky fault, and then reports it, as the
	 * driver does. */
	pthread_mutex_lock(&G);
	if (!in_host_fn && inited && sticky != CUDA_SUCCESS && c == &primary && primary.retained > 0)
		current = c;
	ENTER_LOCKED("cuCtxSetCurrent", false);
	if (c && (c != &primary || primary.retained <= 0)) {
		violation("cuCtxSetCurrent: context %p is not retained", (void *)c);
		RET(CUDA_ERROR_INVALID_CONTEXT);
	}
	current = c;
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
	ENTER("cuCtxGetStreamPriorityRange", true);
	*least = prio_least;
	*greatest = prio_greatest;
	RET(CUDA_SUCCESS);
}

static bool all_idle(void)
{
	for (struct CUstream_st *s = streams; s; s = s->next_all)
		if (s->head)
			return false;
	return !default_stream || !default_stream->head;
}

EXPORT CUresult cuCtxSynchronize(void)
{
	ENTER("cuCtxSynchronize", true);
	while (!all_idle() && sticky == CUDA_SUCCESS)
		pthread_cond_wait(&progress, &G);
	RET(sticky);
}

/* ---- modules -------------------------------------------------------------- */

static uint32_t rd32(const unsigned char *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* The cubin's section table, checked to lie inside img[0..len); NULL if
 * img is not a 64-bit ELF whose sections all do. */
static const Elf64_Shdr *elf_sections(const unsigned char *img, size_t len, unsigned *n)
{
	Elf64_Ehdr eh;
	if (len < sizeof(eh) || memcmp(img, ELFMAG, SELFMAG) || img[EI_CLASS] != ELFCLASS64)
		return NULL;
	memcpy(&eh, img, sizeof(eh));
	if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shoff > len ||
	    (len - eh.e_shoff) / sizeof(Elf64_Shdr) < eh.e_shnum || eh.e_shoff % 8)
		return NULL;
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(const void *)(img + eh.e_shoff);
	for (unsigned i = 0; i < eh.e_shnum; i++)
		if (sh[i].sh_type != SHT_NOBITS &&
		    (sh[i].sh_offset > len || sh[i].sh_size > len - sh[i].sh_offset))
			return NULL;
	if (eh.e_shstrndx >= eh.e_shnum)
		return NULL;
	*n = eh.e_shnum;
	return sh;
}

/* The string at off in section sec, or "" when out of bounds. */
static const char *elf_str(const unsigned char *img, const Elf64_Shdr *sec, uint64_t off)
{
	if (off >= sec->sh_size || !memchr(img + sec->sh_offset + off, 0, sec->sh_size - off))
		return "";
	return (const char *)img + sec->sh_offset + off;
}

/* A cubin's entry: a function symbol marked as a kernel entry
 * (STO_CUDA_ENTRY, 0x10), its parameters from the EIATTR_KPARAM_INFO
 * attributes (0x17: u32 index, u16 ordinal, u16 offset, u32 whose top 14
 * bits are the size) of its .nv.info.NAME section. */
static bool elf_entry(const unsigned char *img, size_t len, const char *name, struct CUfunc_st *f)
{
	unsigned n;
	const Elf64_Shdr *sh = elf_sections(img, len, &n);
	if (!sh)
		return false;
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)(const void *)img;
	const Elf64_Shdr *names = &sh[eh->e_shstrndx];
	bool found = false;
	for (unsigned i = 0; i < n && !found; i++) {
		if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= n ||
		    sh[i].sh_entsize != sizeof(Elf64_Sym) || sh[i].sh_offset % 8)
			continue;
		const Elf64_Sym *sym = (const Elf64_Sym *)(const void *)(img + sh[i].sh_offset);
		for (uint64_t j = 0; j < sh[i].sh_size / sizeof(Elf64_Sym); j++)
			if (ELF64_ST_TYPE(sym[j].st_info) == STT_FUNC && (sym[j].st_other & 0x10) &&
			    !strcmp(elf_str(img, &sh[sh[i].sh_link], sym[j].st_name), name))
				found = true;
	}
	if (!found)
		return false;
	char info[160];
	snprintf(info, sizeof(info), ".nv.info.%s", name);
	for (unsigned i = 0; i < n; i++) {
		if (strcmp(elf_str(img, names, sh[i].sh_name), info))
			continue;
		const unsigned char *p = img + sh[i].sh_offset, *end = p + sh[i].sh_size;
		f->params_known = true;
		while (end - p >= 4) {
			unsigned fmt = p[0], attr = p[1], size = 0;
			if (fmt == 4) /* EIFMT_SVAL: u16 size, then the value */
				memcpy(&size, p + 2, 2);
			if ((size_t)(end - p) < 4 + (size_t)size)
				break;
			if (fmt == 4 && attr == 0x17 && size >= 12) {
				unsigned ord = p[8] | p[9] << 8;
				if (ord <= DEVQ_MAX_PARAMS) {
					f->off[ord] = p[10] | p[11] << 8;
					f->size[ord] = rd32(p + 12) >> 18;
					if (ord + 1 > f->nparams)
						f->nparams = ord + 1;
				}
			}
			p += 4 + size;
		}
	}
	return true;
}

static size_t ptx_type_size(const char *t, size_t len)
{
	static const struct {
		const char *name;
		size_t size;
	} types[] = { { ".u8", 1 },  { ".s8", 1 },  { ".b8", 1 },  { ".u16", 2 }, { ".s16", 2 },
		      { ".b16", 2 }, { ".f16", 2 }, { ".u32", 4 }, { ".s32", 4 }, { ".b32", 4 },
		      { ".f32", 4 }, { ".u64", 8 }, { ".s64", 8 }, { ".b64", 8 }, { ".f64", 8 } };
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (strlen(types[i].name) == len && !memcmp(types[i].name, t, len))
			return types[i].size;
	return 0;
}

/* A PTX entry: ".entry NAME (" and its ".param" list, each "[.align A]
 * TYPE [.ptr [.space] [.align P]] name[[K]]", laid out at A (else at the
 * type's size). */
static bool ptx_entry(const unsigned char *img, size_t len, const char *name, struct CUfunc_st *f)
{
	const char *t = (const char *)img, *end = t + len;
	size_t nl = strlen(name);
	for (const char *p = t; p < end && (p = memmem(p, (size_t)(end - p), ".entry", 6)); p++) {
		const char *q = p + 6;
		while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
			q++;
		if ((size_t)(end - q) < nl || memcmp(q, name, nl))
			continue;
		q += nl;
		while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
			q++;
		if (q == end || *q != '(')
			continue;
		const char *rp = memchr(q, ')', (size_t)(end - q));
		if (!rp)
			return false;
		f->params_known = true;
		size_t off = 0;
		for (const char *r = q + 1; r < rp && f->nparams <= DEVQ_MAX_PARAMS;) {
			const char *comma = memchr(r, ',', (size_t)(rp - r));
			const char *pe = comma ? comma : rp;
			const char *pp = memmem(r, (size_t)(pe - r), ".param", 6);
			if (!pp)
				break;
			size_t size = 0, align = 0, count = 1;
			for (const char *w = pp + 6; w < pe;) {
				while (w < pe && (*w == ' ' || *w == '\t' || *w == '\n' || *w == '\r'))
					w++;
				const char *we = w;
				while (we < pe && !(*we == ' ' || *we == '\t' || *we == '\n' || *we == '\r'))
					we++;
				/* ".align A" before the type aligns the parameter;
				 * after ".ptr" it is the pointee's. */
				if (we - w == 6 && !memcmp(w, ".align", 6) && !size)
					align = strtoul(we, NULL, 10);
				else if (!size && ptx_type_size(w, (size_t)(we - w)))
					size = ptx_type_size(w, (size_t)(we - w));
				const char *br = memchr(w, '[', (size_t)(we - w));
				if (br && *w != '.')
					count = strtoul(br + 1, NULL, 10);
				w = we;
			}
			if (!align)
				align = size ? size : 1;
			off = (off + align - 1) / align * align;
			f->off[f->nparams] = off;
			f->size[f->nparams] = size * count;
			f->nparams++;
			off += size * count;
			r = pe + 1;
		}
		return true;
	}
	return false;
}

/* The compute capability a cubin was built for (e_flags: bits 8-15 from
 * ELF ABI version 8 on, bits 0-7 before). */
static unsigned elf_arch(const unsigned char *img)
{
	Elf64_Ehdr eh;
	memcpy(&eh, img, sizeof(eh));
	return img[EI_ABIVERSION] >= 8 ? (eh.e_flags >> 8) & 0xff : eh.e_flags & 0xff;
}

/* The PTX's ".target sm_XY" as XY (0 when absent). */
static unsigned ptx_arch(const char *ptx)
{
	const char *t = strstr(ptx, ".target");
	if (!t)
		return 0;
	t += 7;
	while (*t == ' ' || *t == '\t')
		t++;
	return strncmp(t, "sm_", 3) ? 0 : (unsigned)atoi(t + 3);
}

/* Accepts what the driver does: a fatbin (the image the device runs is
 * chosen as devq_fatbin_select says), a cubin for the device's major
 * version and a minor no higher, or NUL-terminated PTX for an architecture
 * no higher than the device's ("JIT-compiled": a PTX image stands for its
 * SASS).  The chosen payload is copied, as the driver does. */
EXPORT CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	ENTER("cuModuleLoadData", true);
	if (!image)
		RET(CUDA_ERROR_INVALID_VALUE);
	const unsigned char *img = image, *payload;
	size_t len;
	bool ptx;
	char what[48];
	const uint32_t *hdr = image;
	if (hdr[0] == DEVQ_FATBIN_MAGIC) {
		struct devq_fatbin fb;
		char err[256];
		uint64_t size;
		memcpy(&size, img + 8, 8);
		if (devq_fatbin_parse(image, (size_t)size + 16, &fb, err, sizeof(err)) < 0)
			RET(CUDA_ERROR_INVALID_IMAGE);
		struct devq_fatbin_pick pick;
		if (devq_fatbin_select(&fb, arch / 10, arch % 10, &pick) < 0)
			RET(CUDA_ERROR_NO_BINARY_FOR_GPU);
		const struct devq_fatbin_image *fi = &fb.img[pick.image];
		if (fi->compressed) {
			fprintf(stderr, "cudasim: a compressed fatbin image: not modelled (build "
					"with -Xfatbin -compress=false)\n");
			RET(CUDA_ERROR_INVALID_IMAGE);
		}
		payload = img + fi->offset;
		len = (size_t)fi->size;
		ptx = fi->kind == DEVQ_FATBIN_PTX;
		devq_fatbin_image_name(fi, what, sizeof(what));
	} else if (!memcmp(img, ELFMAG, SELFMAG)) {
		/* A cubin: its extent is that of its headers and sections. */
		const Elf64_Ehdr *eh = image;
		if (img[EI_CLASS] != ELFCLASS64 || eh->e_shentsize != sizeof(Elf64_Shdr))
			RET(CUDA_ERROR_INVALID_IMAGE);
		len = (size_t)eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr);
		unsigned n;
		if (!elf_sections(img, len, &n))
			RET(CUDA_ERROR_INVALID_IMAGE);
		unsigned a = elf_arch(img);
		if (a / 10 != arch / 10 || a % 10 > arch % 10)
			RET(CUDA_ERROR_NO_BINARY_FOR_GPU);
		payload = img;
		ptx = false;
		snprintf(what, sizeof(what), "sm_%u cubin", a);
	} else {
		/* PTX text.  (An image of another kind would be read up to its
		 * first NUL: the driver's API has no length either.) */
		len = strlen(image) + 1;
		if (!strstr(image, ".version") || !strstr(image, ".target"))
			RET(CUDA_ERROR_INVALID_IMAGE);
		unsigned a = ptx_arch(image);
		if (!a || a > arch)
			RET(CUDA_ERROR_NO_BINARY_FOR_GPU);
		payload = img;
		ptx = true;
		snprintf(what, sizeof(what), "sm_%u PTX", a);
	}
	struct CUmod_st *mod = calloc(1, sizeof(*mod));
	unsigned char *copy = malloc(len ? len : 1);
	if (!mod || !copy) {
		free(mod);
		free(copy);
		RET(CUDA_ERROR_OUT_OF_MEMORY);
	}
	memcpy(copy, payload, len);
	mod->magic = MAGIC_MODULE;
	mod->image = copy;
	mod->image_len = len;
	mod->ptx = ptx;
	count_image(what);
	mod->next_all = modules;
	modules = mod;
	*m = mod;
	RET(CUDA_SUCCESS);
}

/* Closes the CPU stand-ins of m's entries.  The handles stay (left to the
 * process's end, like the others): a late use of one is reported, not a
 * crash. */
static void module_free_fns(struct CUmod_st *m)
{
	for (struct CUfunc_st *f = m->fns; f; f = f->next) {
		if (f->dl && dlclose(f->dl) != 0)
			fprintf(stderr, "cudasim: dlclose: %s\n", dlerror());
		if (f->dl_fd >= 0 && close(f->dl_fd) < 0)
			perror("cudasim: close");
		f->dl = NULL;
		f->dl_fd = -1;
		f->cpu = NULL;
		f->magic = MAGIC_DEAD;
	}
}

/* G held: a launch of one of m's entries finished. */
static void module_done(struct CUmod_st *m)
{
	if (--m->pending == 0 && m->magic != MAGIC_MODULE)
		module_free_fns(m); /* unloaded while running (a violation): now */
}

EXPORT CUresult cuModuleUnload(CUmodule m)
{
	ENTER("cuModuleUnload", true);
	if (!live(m, MAGIC_MODULE, "cuModuleUnload", "module"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	if (m->pending) {
		char name[128] = "?";
		if (m->fns)
			snprintf(name, sizeof(name), "%s", m->fns->name);
		violation("cuModuleUnload: the module of entry %s still has %u launch(es) queued "
			  "or running",
			  name, m->pending);
	}
	m->magic = MAGIC_DEAD;
	if (!m->pending)
		module_free_fns(m);
	RET(CUDA_SUCCESS);
}

/* Whether the image names the symbol: a whole word (a SASS string table
 * ends it with NUL, PTX with "(" after ".entry name"). */
static bool image_has(const struct CUmod_st *m, const char *name)
{
	size_t n = strlen(name);
	const unsigned char *p = m->image, *end = m->image + m->image_len;
	while (p < end && (p = memmem(p, (size_t)(end - p), name, n))) {
		unsigned char next = p + n < end ? p[n] : 0;
		bool before_ok = p == m->image || !(p[-1] == '_' || (p[-1] >= '0' && p[-1] <= '9') ||
						     ((p[-1] | 32) >= 'a' && (p[-1] | 32) <= 'z'));
		bool after_ok = !(next == '_' || (next >= '0' && next <= '9') ||
				  ((next | 32) >= 'a' && (next | 32) <= 'z'));
		if (before_ok && after_ok)
			return true;
		p++;
	}
	return false;
}

/* The CPU stand-in for entry from DEVQ_CUDASIM_CPU, a list
 * "ENTRY=PATH[:SYMBOL],..." (SYMBOL defaults to ENTRY): the shared object
 * is opened when the module's entry is looked up, so a module loaded after
 * PATH was replaced runs the new code, and closed when the module is
 * unloaded.  0, or -1 with nothing changed. */
static int cpu_standin(struct CUfunc_st *f)
{
	const char *list = getenv("DEVQ_CUDASIM_CPU");
	size_t nl = strlen(f->name);
	for (const char *p = list; p && *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len > nl && !memcmp(p, f->name, nl) && p[nl] == '=') {
			char spec[512], sym[128];
			snprintf(spec, sizeof(spec), "%.*s", (int)(len - nl - 1), p + nl + 1);
			char *colon = strchr(spec, ':');
			snprintf(sym, sizeof(sym), "%s", colon ? colon + 1 : f->name);
			if (colon)
				*colon = '\0';
			f->dl_fd = open(spec, O_RDONLY | O_CLOEXEC);
			if (f->dl_fd < 0) {
				fprintf(stderr, "cudasim: DEVQ_CUDASIM_CPU: %s: %s\n", spec,
					strerror(errno));
				return -1;
			}
			/* By the fd, under a name ld.so has never seen (it hands
			 * back an object loaded earlier under the same name):
			 * /proc/self/fd/N behind "./" or "fd/../" per bit of a
			 * counter. */
			static unsigned seq;
			unsigned c = seq++;
			char dlpath[32 * 6 + 64] = "/proc/self/";
			for (unsigned b = 0; b < 32; b++)
				strcat(dlpath, (c >> b) & 1 ? "fd/../" : "./");
			snprintf(dlpath + strlen(dlpath), 32, "fd/%d", f->dl_fd);
			f->dl = dlopen(dlpath, RTLD_NOW | RTLD_LOCAL);
			void *fn = f->dl ? dlsym(f->dl, sym) : NULL;
			if (!fn) {
				fprintf(stderr, "cudasim: DEVQ_CUDASIM_CPU: %s: no %s in it (%s)\n",
					spec, sym, f->dl ? "dlsym" : dlerror());
				if (f->dl)
					dlclose(f->dl);
				close(f->dl_fd);
				f->dl = NULL;
				f->dl_fd = -1;
				return -1;
			}
			f->cpu = (devq_cpu_fn)fn;
			return 0;
		}
		p = end ? end + 1 : NULL;
	}
	return -1;
}

/* An entry of a repository image, found in the image itself. */
static CUresult image_entry(struct CUmod_st *m, const char *name, CUfunction *out)
{
	for (struct CUfunc_st *f = m->fns; f; f = f->next)
		if (!strcmp(f->name, name)) {
			*out = (CUfunction)f;
			return CUDA_SUCCESS;
		}
	struct CUfunc_st *f = calloc(1, sizeof(*f));
	if (!f)
		return CUDA_ERROR_OUT_OF_MEMORY;
	f->dl_fd = -1;
	snprintf(f->name, sizeof(f->name), "%s", name);
	bool ok = strlen(name) < sizeof(f->name) &&
		  (m->ptx ? ptx_entry(m->image, m->image_len, name, f)
			  : elf_entry(m->image, m->image_len, name, f));
	if (!ok) {
		free(f);
		return CUDA_ERROR_NOT_FOUND;
	}
	if (f->nparams > DEVQ_MAX_PARAMS)
		f->params_known = false; /* more than any launch passes: not checked */
	cpu_standin(f);
	f->magic = MAGIC_FUNC;
	f->mod = m;
	f->next = m->fns;
	m->fns = f;
	*out = (CUfunction)f;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	ENTER("cuModuleGetFunction", true);
	if (!live(m, MAGIC_MODULE, "cuModuleGetFunction", "module"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	if (strncmp(name, "devq_", 5))
		RET(image_entry(m, name, f));
	if (!image_has(m, name))
		RET(CUDA_ERROR_NOT_FOUND);
	const struct devq_kernel *k = devq_kernel_find(name + 5);
	if (!k && !strcmp(name + 5, "fault"))
		for (size_t i = 0; i < devq_nkernels; i++)
			if (!strcmp(devq_kernels[i].name, "fault"))
				k = &devq_kernels[i];
	if (!k)
		RET(CUDA_ERROR_NOT_FOUND);
	*f = (CUfunction)(uintptr_t)k;
	RET(CUDA_SUCCESS);
}

static bool is_kernel(CUfunction f)
{
	const struct devq_kernel *k = (const struct devq_kernel *)(uintptr_t)f;
	return k >= devq_kernels && k < devq_kernels + devq_nkernels;
}

/* Where the image declares them (CUDA 12.4 on): offset and size of
 * parameter i of an entry of a loaded image; CUDA_ERROR_INVALID_VALUE past
 * the last. */
EXPORT CUresult cuFuncGetParamInfo(CUfunction fn, size_t i, size_t *off, size_t *size)
{
	ENTER("cuFuncGetParamInfo", true);
	if (!off || !size)
		RET(CUDA_ERROR_INVALID_VALUE);
	if (is_kernel(fn))
		RET(CUDA_ERROR_NOT_SUPPORTED); /* the project's kernels: not parsed */
	struct CUfunc_st *f = (struct CUfunc_st *)fn;
	if (!live(f, MAGIC_FUNC, "cuFuncGetParamInfo", "function") || f->mod->magic != MAGIC_MODULE)
		RET(CUDA_ERROR_INVALID_HANDLE);
	if (!f->params_known)
		RET(CUDA_ERROR_NOT_SUPPORTED);
	if (i >= f->nparams)
		RET(CUDA_ERROR_INVALID_VALUE);
	*off = f->off[i];
	*size = f->size[i];
	RET(CUDA_SUCCESS);
}

/* ---- streams and events ---------------------------------------------------- */

EXPORT CUresult cuStreamCreateWithPriority(CUstream *out, unsigned flags, int priority)
{
	ENTER("cuStreamCreateWithPriority", true);
	(void)flags;
	struct CUstream_st *s = calloc(1, sizeof(*s));
	if (!s)
		RET(CUDA_ERROR_OUT_OF_MEMORY);
	s->magic = MAGIC_STREAM;
	s->priority = priority;
	pthread_cond_init(&s->cv, NULL);
	if (pthread_create(&s->thread, NULL, stream_main, s)) {
		free(s);
		RET(CUDA_ERROR_OUT_OF_MEMORY);
	}
	s->next_all = streams;
	streams = s;
	*out = s;
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuStreamDestroy(CUstream s)
{
	ENTER("cuStreamDestroy", true);
	if (!live(s, MAGIC_STREAM, "cuStreamDestroy", "stream"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	if (s->capture)
		violation("cuStreamDestroy on a capturing stream");
	/* Queued work still runs (as in CUDA); the thread then ends. */
	s->dying = true;
	s->magic = MAGIC_DEAD;
	pthread_cond_signal(&s->cv);
	pthread_mutex_unlock(&G);
	pthread_join(s->thread, NULL);
	pthread_mutex_lock(&G);
	for (struct CUstream_st **p = &streams; *p; p = &(*p)->next_all)
		if (*p == s) {
			*p = s->next_all;
			break;
		}
	pthread_cond_destroy(&s->cv);
	free(s);
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuEventCreate(CUevent *out, unsigned flags)
{
	ENTER("cuEventCreate", true);
	struct CUevent_st *e = calloc(1, sizeof(*e));
	if (!e)
		RET(CUDA_ERROR_OUT_OF_MEMORY);
	e->magic = MAGIC_EVENT;
	e->flags = flags;
	e->next_all = events;
	events = e;
	*out = e;
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuEventDestroy(CUevent e)
{
	ENTER("cuEventDestroy", true);
	if (!live(e, MAGIC_EVENT, "cuEventDestroy", "event"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	e->magic = MAGIC_DEAD; /* kept: queued commands may still name it */
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
	ENTER("cuEventRecord", true);
	if (!live(e, MAGIC_EVENT, "cuEventRecord", "event") ||
	    !live(s = legacy(s), MAGIC_STREAM, "cuEventRecord", "stream"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	if (e->done_gen < e->rec_gen && !s->capture)
		violation("cuEventRecord: event %p re-recorded before its previous record completed",
			  (void *)e);
	struct cmd *c = new_cmd(C_RECORD);
	if (c) {
		c->ev = e;
		c->gen = ++e->rec_gen;
	}
	RET(submit(s, c, "cuEventRecord"));
}

EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
	ENTER("cuStreamWaitEvent", true);
	(void)flags;
	if (!live(e, MAGIC_EVENT, "cuStreamWaitEvent", "event") ||
	    !live(s = legacy(s), MAGIC_STREAM, "cuStreamWaitEvent", "stream"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	if (!e->rec_gen)
		RET(CUDA_SUCCESS); /* never recorded: nothing to wait for */
	struct cmd *c = new_cmd(C_WAIT);
	if (c) {
		c->ev = e;
		c->gen = e->rec_gen; /* the latest record at the time of the call */
	}
	RET(submit(s, c, "cuStreamWaitEvent"));
}

EXPORT CUresult cuEventSynchronize(CUevent e)
{
	ENTER("cuEventSynchronize", true);
	if (!live(e, MAGIC_EVENT, "cuEventSynchronize", "event"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	uint64_t gen = e->rec_gen;
	while (e->done_gen < gen && sticky == CUDA_SUCCESS)
		pthread_cond_wait(&progress, &G);
	if (sticky != CUDA_SUCCESS)
		RET(sticky);
	uint64_t vis = e->visible_ns;
	pthread_mutex_unlock(&G);
	uint64_t now = mono_ns();
	if (gen && now < vis) {
		struct timespec ts = { 0, (long)(vis - now) };
		nanosleep(&ts, NULL);
	}
	pthread_mutex_lock(&G);
	RET(sticky);
}

EXPORT CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
	ENTER("cuEventElapsedTime", true);
	if (!live(a, MAGIC_EVENT, "cuEventElapsedTime", "event") ||
	    !live(b, MAGIC_EVENT, "cuEventElapsedTime", "event"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) {
		violation("cuEventElapsedTime on an event created with CU_EVENT_DISABLE_TIMING");
		RET(CUDA_ERROR_INVALID_HANDLE);
	}
	if (!a->rec_gen || !b->rec_gen || a->done_gen < a->rec_gen || b->done_gen < b->rec_gen) {
		violation("cuEventElapsedTime on a record not complete (or never recorded)");
		RET(CUDA_ERROR_NOT_READY);
	}
	*ms = (float)(b->t_ms - a->t_ms);
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *ud)
{
	ENTER("cuLaunchHostFunc", true);
	if (!live(s = legacy(s), MAGIC_STREAM, "cuLaunchHostFunc", "stream"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	struct cmd *c = new_cmd(C_HOSTFN);
	if (c) {
		c->fn = fn;
		c->ud = ud;
	}
	RET(submit(s, c, "cuLaunchHostFunc"));
}

/* ---- launches and memory operations ------------------------------------- */

EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			       unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
			       void **extra)
{
	ENTER("cuLaunchKernel", true);
	struct CUfunc_st *ent = (struct CUfunc_st *)f;
	if (!is_kernel(f) &&
	    (!f || ent->magic != MAGIC_FUNC || ent->mod->magic != MAGIC_MODULE)) {
		violation("cuLaunchKernel: %p is not a function of a loaded module", (void *)f);
		RET(CUDA_ERROR_INVALID_HANDLE);
	}
	if (!live(s = legacy(s), MAGIC_STREAM, "cuLaunchKernel", "stream"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024 || shmem > 48 * 1024 ||
	    extra || !params)
		RET(CUDA_ERROR_INVALID_VALUE);
	if (!is_kernel(f)) {
		/* An entry of a repository image: each parameter read at the
		 * size its image declares, as the driver does. */
		struct cmd *c = new_cmd(C_KERNEL);
		if (c) {
			c->ent = ent;
			c->threads = (uint64_t)gx * gy * gz * bx * by * bz;
			c->seq = ++launch_seq;
			for (unsigned i = 0; i < ent->nparams && i < DEVQ_MAX_PARAMS; i++)
				memcpy(&c->args[i], params[i],
				       ent->size[i] <= sizeof(c->args[i]) ? ent->size[i]
									   : sizeof(c->args[i]));
		}
		RET(submit(s, c, "cuLaunchKernel"));
	}
	const struct devq_kernel *k = (const struct devq_kernel *)(uintptr_t)f;
	struct devq_sig sig;
	char err[128];
	if (devq_sig_parse(k->signature, &sig, err, sizeof(err)) < 0)
		RET(CUDA_ERROR_INVALID_VALUE);
	struct cmd *c = new_cmd(C_KERNEL);
	if (c) {
		c->k = k;
		c->threads = (uint64_t)gx * gy * gz * bx * by * bz;
		c->seq = ++launch_seq;
		/* Read each parameter at its own size, as the driver does. */
		for (unsigned i = 0; i < sig.nparams; i++)
			memcpy(&c->args[i], params[i],
			       sig.p[i].access == DEVQ_ACC_SCALAR ? devq_type_size(sig.p[i].type) : 8);
	}
	RET(submit(s, c, "cuLaunchKernel"));
}

EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	ENTER("cuMemcpyAsync", true);
	if (!live(s = legacy(s), MAGIC_STREAM, "cuMemcpyAsync", "stream"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	struct cmd *c = new_cmd(C_COPY);
	if (c) {
		c->dst = dst;
		c->src = src;
		c->n = n;
	}
	RET(submit(s, c, "cuMemcpyAsync"));
}

static CUresult memset_async(const char *call, enum cmd_kind k, CUdeviceptr p, uint32_t v,
			     size_t n, CUstream s)
{
	if (!live(s = legacy(s), MAGIC_STREAM, call, "stream"))
		return CUDA_ERROR_INVALID_HANDLE;
	if (k == C_SET32 && (p & 3)) {
		violation("%s: %#llx is not 4-byte aligned", call, (unsigned long long)p);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct cmd *c = new_cmd(k);
	if (c) {
		c->dst = p;
		c->value = v;
		c->n = n;
	}
	return submit(s, c, call);
}

EXPORT CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, CUstream s)
{
	ENTER("cuMemsetD32Async", true);
	RET(memset_async("cuMemsetD32Async", C_SET32, p, v, n, s));
}

EXPORT CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s)
{
	ENTER("cuMemsetD8Async", true);
	RET(memset_async("cuMemsetD8Async", C_SET8, p, v, n, s));
}

static CUresult alloc_region(uint64_t len, CUdeviceptr *out)
{
	if (len > DEV_TOTAL - dev_used)
		return CUDA_ERROR_OUT_OF_MEMORY;
	void *p = calloc(1, len ? len : 1);
	struct region *r = malloc(sizeof(*r));
	if (!p || !r) {
		free(p);
		free(r);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*r = (struct region){ .base = (uint64_t)(uintptr_t)p, .len = len, .device = true,
			      .next = regions };
	/* Fresh device memory is not zero: make reads of it visible. */
	memset(p, 0xa5, len);
	regions = r;
	dev_used += len;
	*out = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

static struct region *device_region(CUdeviceptr p, const char *call)
{
	struct region *r = find_region(p, 0);
	if (!r || !r->device || r->base != p || r->freeing) {
		violation("%s: %#llx is not an allocation", call, (unsigned long long)p);
		return NULL;
	}
	return r;
}

EXPORT CUresult cuMemAlloc(CUdeviceptr *p, size_t len)
{
	ENTER("cuMemAlloc", true);
	RET(alloc_region(len, p));
}

EXPORT CUresult cuMemFree(CUdeviceptr p)
{
	ENTER("cuMemFree", true);
	struct region *r = device_region(p, "cuMemFree");
	if (!r)
		RET(CUDA_ERROR_INVALID_VALUE);
	while (!all_idle()) /* cuMemFree synchronises the device */
		pthread_cond_wait(&progress, &G);
	struct cmd c = { .kind = C_FREE, .dst = p };
	exec_cmd(NULL, &c);
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t len, CUstream s)
{
	ENTER("cuMemAllocAsync", true);
	if (!live(s = legacy(s), MAGIC_STREAM, "cuMemAllocAsync", "stream"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	RET(alloc_region(len, p));
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
	ENTER("cuMemFreeAsync", true);
	if (!live(s = legacy(s), MAGIC_STREAM, "cuMemFreeAsync", "stream"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	struct region *r = device_region(p, "cuMemFreeAsync");
	if (!r)
		RET(CUDA_ERROR_INVALID_VALUE);
	struct cmd *c = new_cmd(C_FREE);
	if (!c)
		RET(CUDA_ERROR_OUT_OF_MEMORY);
	c->dst = p;
	r->freeing = true; /* no later use is legal, on any stream */
	RET(submit(s, c, "cuMemFreeAsync"));
}

EXPORT CUresult cuMemGetInfo(size_t *free_b, size_t *total)
{
	ENTER("cuMemGetInfo", true);
	*free_b = DEV_TOTAL - dev_used;
	*total = DEV_TOTAL;
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n)
{
	ENTER("cuMemcpyHtoD", true);
	while (!all_idle())
		pthread_cond_wait(&progress, &G);
	if (!check_mem("cuMemcpyHtoD", dst, n, true))
		RET(CUDA_ERROR_INVALID_VALUE);
	memcpy((void *)(uintptr_t)dst, src, n);
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n)
{
	ENTER("cuMemcpyDtoH", true);
	while (!all_idle())
		pthread_cond_wait(&progress, &G);
	if (!check_mem("cuMemcpyDtoH", src, n, false))
		RET(CUDA_ERROR_INVALID_VALUE);
	memcpy(dst, (const void *)(uintptr_t)src, n);
	RET(CUDA_SUCCESS);
}

/* DEVQ_CUDASIM_REGISTER_NS: pinning or unpinning len bytes takes this long,
 * on the calling thread, G not held. */
static void pin_delay(size_t len)
{
	if (!register_ns_per_mib)
		return;
	uint64_t ns = (uint64_t)((double)register_ns_per_mib * (double)len / (1 << 20));
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000u),
			       .tv_nsec = (long)(ns % 1000000000u) };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

EXPORT CUresult cuMemHostRegister(void *p, size_t len, unsigned flags)
{
	ENTER("cuMemHostRegister", true);
	uint64_t b = (uint64_t)(uintptr_t)p;
	if (!p || !len)
		RET(CUDA_ERROR_INVALID_VALUE);
	for (struct region *r = regions; r; r = r->next)
		if (!r->device && b < r->base + r->len && r->base < b + len) {
			violation("cuMemHostRegister: %p (+%zu) overlaps a registration", p, len);
			RET(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
		}
	struct region *r = malloc(sizeof(*r));
	if (!r)
		RET(CUDA_ERROR_OUT_OF_MEMORY);
	*r = (struct region){ .base = b, .len = len,
			      .read_only = flags & CU_MEMHOSTREGISTER_READ_ONLY,
			      .devicemap = flags & CU_MEMHOSTREGISTER_DEVICEMAP };
	/* Usable only once the call returns: entered after the delay. */
	pthread_mutex_unlock(&G);
	pin_delay(len);
	pthread_mutex_lock(&G);
	r->next = regions;
	regions = r;
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
	ENTER("cuMemHostUnregister", true);
	for (struct region **pr = &regions; *pr; pr = &(*pr)->next) {
		struct region *r = *pr;
		if (!r->device && r->base == (uint64_t)(uintptr_t)p) {
			/* No use is legal once the call has begun: out first. */
			*pr = r->next;
			size_t len = r->len;
			free(r);
			pthread_mutex_unlock(&G);
			pin_delay(len);
			return CUDA_SUCCESS;
		}
	}
	violation("cuMemHostUnregister: %p is not registered", p);
	RET(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

EXPORT CUresult cuMemHostGetDevicePointer(CUdeviceptr *dp, void *p, unsigned flags)
{
	ENTER("cuMemHostGetDevicePointer", true);
	struct region *r = find_region((uint64_t)(uintptr_t)p, 0);
	if (flags || !r || r->device || !r->devicemap)
		RET(CUDA_ERROR_INVALID_VALUE);
	*dp = (CUdeviceptr)(uintptr_t)p;
	RET(CUDA_SUCCESS);
}

/* ---- graphs ------------------------------------------------------------------ */

EXPORT CUresult cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode)
{
	ENTER("cuStreamBeginCapture", true);
	(void)mode;
	if (!live(s = legacy(s), MAGIC_STREAM, "cuStreamBeginCapture", "stream"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	if (s->capture) {
		violation("cuStreamBeginCapture on a stream already capturing");
		RET(CUDA_ERROR_ILLEGAL_STATE);
	}
	struct CUgraph_st *g = calloc(1, sizeof(*g));
	if (!g)
		RET(CUDA_ERROR_OUT_OF_MEMORY);
	g->magic = MAGIC_GRAPH;
	g->next_all = graphs;
	graphs = g;
	s->capture = g;
	captures++;
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *out)
{
	ENTER("cuStreamEndCapture", true);
	if (!live(s = legacy(s), MAGIC_STREAM, "cuStreamEndCapture", "stream"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	if (!s->capture) {
		violation("cuStreamEndCapture on a stream not capturing");
		RET(CUDA_ERROR_ILLEGAL_STATE);
	}
	*out = s->capture;
	s->capture = NULL;
	RET(CUDA_SUCCESS);
}

static void free_cmds(struct cmd *c)
{
	while (c) {
		struct cmd *n = c->next;
		free(c);
		c = n;
	}
}

EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g, unsigned long long flags)
{
	ENTER("cuGraphInstantiateWithFlags", true);
	(void)flags;
	if (!live(g, MAGIC_GRAPH, "cuGraphInstantiateWithFlags", "graph"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	struct CUgraphExec_st *x = calloc(1, sizeof(*x));
	if (!x)
		RET(CUDA_ERROR_OUT_OF_MEMORY);
	x->magic = MAGIC_EXEC;
	pthread_mutex_init(&x->run, NULL);
	struct cmd **tail = &x->head;
	for (struct cmd *c = g->head; c; c = c->next) {
		struct cmd *d = malloc(sizeof(*d));
		if (!d) {
			free_cmds(x->head);
			free(x);
			RET(CUDA_ERROR_OUT_OF_MEMORY);
		}
		*d = *c;
		d->next = NULL;
		*tail = d;
		tail = &d->next;
	}
	x->next_all = execs;
	execs = x;
	*out = x;
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuGraphLaunch(CUgraphExec x, CUstream s)
{
	ENTER("cuGraphLaunch", true);
	if (!live(x, MAGIC_EXEC, "cuGraphLaunch", "graph exec") ||
	    !live(s = legacy(s), MAGIC_STREAM, "cuGraphLaunch", "stream"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	struct cmd *c = new_cmd(C_GRAPH);
	if (c) {
		c->exec = x;
		c->seq = ++launch_seq;
		x->pending++;
	}
	CUresult r = submit(s, c, "cuGraphLaunch");
	if (r != CUDA_SUCCESS && c)
		x->pending--;
	RET(r);
}

EXPORT CUresult cuGraphExecDestroy(CUgraphExec x)
{
	ENTER("cuGraphExecDestroy", true);
	if (!live(x, MAGIC_EXEC, "cuGraphExecDestroy", "graph exec"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	x->magic = MAGIC_DEAD; /* freed at exit: launches in flight still read it */
	RET(CUDA_SUCCESS);
}

EXPORT CUresult cuGraphDestroy(CUgraph g)
{
	ENTER("cuGraphDestroy", true);
	if (!live(g, MAGIC_GRAPH, "cuGraphDestroy", "graph"))
		RET(CUDA_ERROR_INVALID_HANDLE);
	g->magic = MAGIC_DEAD;
	free_cmds(g->head);
	g->head = g->tail = NULL;
	RET(CUDA_SUCCESS);
}

/* ---- cuGetProcAddress ---------------------------------------------------------- */

#define ENTRY(name) { #name, (void *)(uintptr_t)name },
static const struct {
	const char *name;
	void *fn;
} table[] = {
	ENTRY(cuInit) ENTRY(cuDriverGetVersion) ENTRY(cuDeviceGetCount) ENTRY(cuDeviceGet)
	ENTRY(cuDeviceGetName) ENTRY(cuDeviceGetAttribute) ENTRY(cuDeviceTotalMem)
	ENTRY(cuDevicePrimaryCtxRetain) ENTRY(cuDevicePrimaryCtxRelease) ENTRY(cuCtxSetCurrent)
	ENTRY(cuCtxGetStreamPriorityRange) ENTRY(cuModuleLoadData) ENTRY(cuModuleUnload)
	ENTRY(cuModuleGetFunction) ENTRY(cuStreamCreateWithPriority) ENTRY(cuStreamDestroy)
	ENTRY(cuStreamWaitEvent) ENTRY(cuEventCreate) ENTRY(cuEventDestroy) ENTRY(cuEventRecord)
	ENTRY(cuEventSynchronize) ENTRY(cuEventElapsedTime) ENTRY(cuLaunchKernel)
	ENTRY(cuMemAlloc) ENTRY(cuMemFree) ENTRY(cuMemcpyHtoD) ENTRY(cuMemcpyDtoH)
	ENTRY(cuCtxSynchronize) ENTRY(cuMemAllocAsync) ENTRY(cuMemFreeAsync) ENTRY(cuMemGetInfo)
	ENTRY(cuMemHostRegister) ENTRY(cuMemHostUnregister) ENTRY(cuMemHostGetDevicePointer)
	ENTRY(cuMemcpyAsync) ENTRY(cuMemsetD32Async) ENTRY(cuMemsetD8Async)
	ENTRY(cuStreamBeginCapture) ENTRY(cuStreamEndCapture) ENTRY(cuGraphInstantiateWithFlags)
	ENTRY(cuGraphLaunch) ENTRY(cuGraphExecDestroy) ENTRY(cuGraphDestroy)
	ENTRY(cuLaunchHostFunc) ENTRY(cuFuncGetParamInfo) ENTRY(cuDeviceGetUuid)
};

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
				    cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
	(void)flags;
	int have = 0;
	cuDriverGetVersion(&have);
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		if (strcmp(table[i].name, symbol))
			continue;
		if (version > have) {
			*pfn = NULL;
			if (status)
				*status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
			return CUDA_ERROR_NOT_FOUND;
		}
		*pfn = table[i].fn;
		if (status)
			*status = CU_GET_PROC_ADDRESS_SUCCESS;
		return CUDA_SUCCESS;
	}
	*pfn = NULL;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return CUDA_ERROR_NOT_FOUND;
}

/* ---- unload and exit ------------------------------------------------------------ */

static void write_stats(void)
{
	const char *path = getenv("DEVQ_CUDASIM_STATS");
	if (!path || !*path)
		return;
	FILE *f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f,
		"kernel_launches %lu\ngraph_launches %lu\ncaptures %lu\nmax_kernels_queued %lu\n"
		"violations %u\n",
		launches, graph_launches, captures, max_kernels_queued, atomic_load(&violations));
	for (size_t i = 0; i < sizeof(images_loaded) / sizeof(images_loaded[0]); i++)
		if (images_loaded[i].n)
			fprintf(f, "module_image %s %lu\n", images_loaded[i].name, images_loaded[i].n);
	if (fclose(f) != 0)
		perror("cudasim: stats");
}

__attribute__((destructor)) static void cudasim_fini(void)
{
	if (!inited)
		return;
	bool at_exit = !exiting; /* without the detector (TSan): assume exit */
	if (exiting) {
		int e = pthread_mutex_trylock(exiting);
		at_exit = e == EBUSY;
		if (e == 0) /* not exiting: the exit handler still has to take it */
			pthread_mutex_unlock(exiting);
	}
	pthread_mutex_lock(&G);
	if (!at_exit)
		violation("libcuda.so.1 unloaded (dlclose) after cuInit: the driver's own "
			  "threads would run unmapped code (open it with RTLD_NODELETE)");
	/* After a sticky fault every call fails, destroys included: the
	 * context goes with all it holds, which is no leak. */
	if (ever_retained && primary.retained == 0 && sticky == CUDA_SUCCESS) {
		unsigned n = 0;
		for (struct CUstream_st *s = streams; s; s = s->next_all)
			n++;
		if (n)
			violation("%u stream(s) not destroyed", n);
		n = 0;
		for (struct CUevent_st *e = events; e; e = e->next_all)
			n += e->magic == MAGIC_EVENT;
		if (n)
			violation("%u event(s) not destroyed", n);
		n = 0;
		for (struct CUmod_st *m = modules; m; m = m->next_all)
			n += m->magic == MAGIC_MODULE;
		if (n)
			violation("%u module(s) not unloaded", n);
		n = 0;
		for (struct CUgraphExec_st *x = execs; x; x = x->next_all)
			n += x->magic == MAGIC_EXEC;
		for (struct CUgraph_st *g = graphs; g; g = g->next_all)
			n += g->magic == MAGIC_GRAPH;
		if (n)
			violation("%u graph(s) or graph exec(s) not destroyed", n);
		unsigned regs = 0, allocs = 0;
		for (struct region *r = regions; r; r = r->next)
			r->device ? allocs++ : regs++;
		if (regs)
			violation("%u host registration(s) not unregistered", regs);
		if (allocs)
			violation("%u device allocation(s) not freed", allocs);
	}
	write_stats();
	service_stop = true;
	pthread_cond_signal(&service_cv);
	pthread_mutex_unlock(&G);
	if (service_started)
		pthread_join(service, NULL);
	/* Memory of handles is left to the process's end: streams still
	 * running (a daemon exiting with its context retained) may use it. */
}
