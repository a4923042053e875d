/* SPDX-License-Identifier: Apache-2.0 */
/* <devq/kernel.h>: the ABI of code devqd runs for an executable, built-in or
 * loaded from an executable repository (devqd(8), "EXECUTABLE REPOSITORY").
 * Two kinds, both taking the same arguments:
 *
 * A CPU kernel (repository keys cpu + cpu-symbol):
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
 * A host executable (repository keys cpu-host + cpu-host-symbol, cuda-host
 * + cuda-host-symbol): SYMBOL names a const struct devq_host_exe (below)
 * whose abi is 1 or 2 (DEVQ_HOST_ABI, 2, is what this header describes);
 * a library whose symbol is missing or whose abi is another number is
 * refused at load.  devqd reads the members an executable's abi has and
 * no others: an executable built against version 1's header (the members
 * up to run) keeps working unchanged, and is one unit of work (below).
 * Its run function gets the same args
 * (buffers as host pointers on the CPU backend, as CUdeviceptr values in
 * ptr/u64 on the CUDA backend) and the op's stream:
 *  - CUDA: stream is the op's CUstream.  run only ENQUEUES work on it (a
 *    vendor library call, cuLaunchKernel, cuMemsetD32Async...) and
 *    returns; the op completes when that work has run.  It is called with
 *    the backend's context current, on the thread that issues the op.
 *  - CPU: stream is NULL; run computes synchronously on the worker thread
 *    running the op, using at most call->threads threads.
 * run must not synchronise the device (cuCtxSynchronize,
 * cuStreamSynchronize, a blocking copy), wait for other ops, or keep
 * pointers past its return: devqd orders ops itself, and a host function
 * that blocks holds up every op issued after it.
 *
 * Per-stream state: init, when not NULL, is called once per device stream
 * before that stream's first op of the executable, with the stream, and
 * stores what it made (a library handle: cublasHandle_t) in *slot; run
 * finds it in call->slot; fini gets it back once no op of the executable
 * can run any more (a reload replaced it, or devqd stops).  init and fini
 * run on a backend thread, never on the daemon's event loop nor on a
 * completion thread, so they may take long (cublasCreate: hundreds of
 * ms).  When init fails, every op of the executable on that stream fails
 * with its message until devqd restarts or the executable is reloaded.
 *
 * Units and slices (abi 2, CPU backend).  An executable whose op can be
 * cut into independent units of work gives units() and run_units(): the
 * CPU backend then runs an op's units [0, units(args)) in slices, each a
 * call run_units(args, call, first, last) of at most devqd.conf's
 * slice-us of expected time on each core (at least one unit), and
 * between two slices checks the op's own device time against max-op-ms
 * and whether the op was cancelled (admin evict, session close,
 * SIGTERM): an op stopped there leaves its outputs partly written.  Units must not depend
 * on each other (any order, any thread), and the result must not depend
 * on how they are grouped into slices or how many threads run a slice:
 * then one op gives the same bits alone and under load.  Without them (or
 * at abi 1, or on the CUDA backend) an op is one unit: run is called once
 * and cannot be stopped while it runs.  cost, when not NULL, is the op's
 * cost as an expression over its scalar arguments, in the same language
 * as a NAME.exec's `cost =` line (devqd(8), "EXECUTABLE REPOSITORY").
 *
 * Host executables are never captured into a replayable batch's graph:
 * such an op ends the run and is issued on its own (devqd(8)).
 *
 * The code runs inside devqd: a crash in it takes the daemon down, as any
 * in-process code would (systemd restarts it).
 *
 * How long an op may take is devqd's to bound, not the code's: a NAME.exec
 * may say what one op costs, `cost = EXPR` over the signature's u32 and u64
 * scalars (+ - * /, parentheses, min(a, b), max(a, b); gemm's is 2*m*n*k),
 * and devqd turns it into expected time with a rate in cost units per
 * second, pinned by devqd.conf's rate key or learned from the ops it timed.
 * An op expected to take longer than max-op-ms is refused before it runs
 * (devqd(8), "COST AND RATES").  The expression is compiled when the file
 * is loaded: a mistake refuses the file, naming its line and column.
 *
 * Build with `pkg-config --cflags devq-kernel`, as a shared object
 * (-shared -fPIC). */
#ifndef DEVQ_KERNEL_ABI_H
#define DEVQ_KERNEL_ABI_H

#include <stddef.h>
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

/* The host-executable ABI version this header describes.  A change that
 * moves or reinterprets a member of the structures below bumps it; a new
 * version only appends members, so that devqd reads an older version's
 * structure up to its own last member (version 1: up to run). */
#define DEVQ_HOST_ABI 2

/* One call of a host executable's run. */
struct devq_host_call {
	void *stream;       /* CUDA: the op's CUstream; CPU: NULL */
	void *slot;         /* what init stored for this stream (NULL without init) */
	unsigned stream_index; /* the daemon's device stream, 0-based */
	unsigned threads;   /* CPU: threads run may use (>= 1); CUDA: 1 */
	uint64_t start_ns;  /* CLOCK_MONOTONIC when the op was issued */
	char *err;          /* run may write why it failed here (NUL-terminated) */
	size_t errlen;
	/* Version 2 on (set by devqd; an executable built for version 1 never
	 * reads it).  CPU: nonzero when this call is bulk work, a slice of an
	 * op expected to take longer than slice-us: the calling thread then
	 * runs at SCHED_IDLE, below every thread of normal priority, so that
	 * short ops (and any other process) take the cores first.  Threads
	 * that run starts or wakes for the call should run so too, and at normal
	 * priority again for a call where it is 0 (the built-in gemm_f32's
	 * helper threads switch as the calls ask). */
	unsigned bulk;
};

struct devq_host_exe {
	uint32_t abi; /* DEVQ_HOST_ABI */
	uint32_t reserved; /* 0 */
	/* Per stream; both may be NULL.  init returns 0 or a negative errno,
	 * with the reason in err. */
	int (*init)(void *stream, void **slot, char *err, size_t errlen);
	void (*fini)(void *stream, void *slot);
	/* 0, or a negative errno (the op fails with err's text, else the
	 * errno's).  -ENOTRECOVERABLE: the device is lost. */
	int (*run)(const union devq_kval *args, const struct devq_host_call *call);

	/* Version 2 on; read only when abi is 2.  units and run_units: both
	 * or neither (see "Units and slices" above). */
	/* How many independent units the op with these args is (0: nothing
	 * to do; the op completes without a call).  Must be cheap: no work
	 * proportional to the units. */
	uint64_t (*units)(const union devq_kval *args);
	/* Runs units [first, last), first < last <= units(args), with at most
	 * call->threads threads; returns as run does. */
	int (*run_units)(const union devq_kval *args, const struct devq_host_call *call,
			 uint64_t first, uint64_t last);
	/* The op's cost over its scalar arguments ("2*m*n*k"), or NULL. */
	const char *cost;
};

#endif
