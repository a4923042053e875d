/* SPDX-License-Identifier: Apache-2.0 */
/* CUDA backend: the driver API behind backend.h.
 *
 * Streams.  One CUDA stream per device stream (non-blocking, so nothing
 * serialises on the legacy default stream).  Every op, even one that does
 * no work (a failed validation, a failed dependency, a cancelled op), goes
 * through its stream as "wait for my waits, maybe work, record my end
 * event": a dependent that waits on an op that did nothing still waits,
 * through that op's own waits, for everything before it, so buffer
 * hazards hold transitively on the device without any host round trip.
 *
 * Cross-stream order is cuStreamWaitEvent on the producer's end event.  A
 * producer already reported complete is skipped: its event may have been
 * recycled.  "Reported" (done) and "recycled" both happen under the
 * backend lock, and enqueue checks done under it, so a wait is never
 * issued on a recycled event; a wait issued before recycling is unaffected
 * by later records (cuStreamWaitEvent captures the event's latest record
 * at the time of the call).
 *
 * Completion.  A waiter thread per stream blocks in cuEventSynchronize on
 * the oldest op's end event (CU_EVENT_BLOCKING_SYNC: a sleeping wait, not
 * a spin), so a slow stream never holds back another's completions.  It
 * then waits, on the host, until the op's waits have been reported (they
 * have finished on the device already; this only keeps the backend's
 * promise that a producer is reported before its dependents), stamps
 * times, reports, and only then recycles the events.  Waiters call CUDA
 * (event sync, elapsed time); nothing runs in stream callbacks.
 *
 * Faults.  A sticky error (illegal address, launch failure...) poisons the
 * context: every later call fails with it.  The first call that sees one
 * marks the backend lost; from then on every op completes with
 * DEVQ__CODE__DEVICE_LOST naming the error, and the daemon restarts
 * (lost.c). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/backend.h"
#include "device/cuda/backend_cuda.h"
#include "device/cuda/cuda_drv.h"
#include "cuda_launch.h"
#include "device/cuda/cuda_time.h"
#include "devq.pb-c.h"
#include "device/cuda/fatbin.h"
#include "fatbin_embed.h"
#include "device/cuda/graph_cache.h"
#include "device/cuda/exe_cuda.h" /* repository executables' images */
#include "device/hostslot.h"

enum { POOL_SYNC, POOL_TIMED_END, POOL_TIMED_START, NPOOLS };

static const unsigned pool_flags[NPOOLS] = {
	[POOL_SYNC] = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING,
	[POOL_TIMED_END] = CU_EVENT_BLOCKING_SYNC,
	[POOL_TIMED_START] = CU_EVENT_DEFAULT,
};

struct event_pool {
	CUevent *ev;
	size_t n, cap;
	unsigned flags;
};

/* The backend's per-op state, pooled: bop->priv points at it. */
struct cu_op {
	struct cu_op *next_free;
	CUevent start, end; /* NULL: none recorded */
	int end_pool;
	bool work; /* something ran on the device */
	bool issued; /* on its CUDA stream (or failed without reaching it) */
	unsigned run_len; /* first op of a replayable run: its length */
	uint64_t est_ns; /* the device time it declares (spin ns), else 0 */
};

struct cu_stream {
	struct cuda_backend *cb;
	CUstream stream;
	pthread_t waiter;
	bool started;
	pthread_cond_t work;
	struct devq_bop *head, *tail; /* issued, in completion order */
	/* Handed over, not yet issued: at most DEVQ_CUDA_WINDOW ops of a
	 * stream are on the device at once, so stop and disconnect can still
	 * cancel the rest. */
	struct devq_bop *uhead, *utail;
	unsigned on_device; /* issued, not yet reported */
	uint64_t dev_ns;    /* their declared device time (est_ns) */
	uint64_t last_end; /* host time the previous op was seen complete */
};

struct cuda_backend {
	struct devq_backend b;
	struct devq_cuda_drv drv;
	CUdevice dev;
	CUcontext ctx;
	bool ctx_retained;
	CUmodule module;
	CUfunction *fn;     /* indexed like devq_kernels; NULL: no code */
	int *n_param;       /* index of each kernel's "n" argument, or -1 */
	unsigned *nparams;  /* parameters of each kernel */
	size_t k_spin, k_spin_buf, k_copy; /* indices the backend launches itself */
	size_t k_fault; /* declares its ns like spin; devq_nkernels if none */
	unsigned sm_count;
	bool ro_register; /* read-only host memory can be registered */

	pthread_mutex_t lock; /* FIFOs, done flags, pools, lost state */
	pthread_cond_t done;
	bool stop;
	bool lost;
	char lost_msg[DEVQ_BOP_MSG];
	struct event_pool pool[NPOOLS];
	struct cu_op *free_ops;
	struct cu_stream *s;
	/* Host executables' per-stream slots; its thread runs their init and
	 * fini with the context current. */
	struct devq_hslots *hslots;

	/* The replayable run held back until it ends or the daemon flushes. */
	struct devq_bop *pend_head, *pend_tail;
	unsigned npend, pend_stream;
	struct devq_graph_op *gops; /* DEVQ_GRAPH_MAX_OPS, for lookups */
	struct devq_graph_cache graphs;

	/* Calibration of device event times to CLOCK_MONOTONIC. */
	pthread_mutex_t cal_lock;
	CUstream cal_stream;
	CUevent cal_ev[2];
	unsigned cal_cur; /* cal_ev[cal_cur] is the current calibration event */
	struct devq_cal cal;
};

/* Ops of one stream issued to CUDA and not yet reported.  An op can only be
 * cancelled before it is issued (nothing takes work back off a CUDA
 * stream), so this bounds what a stop or a disconnect must wait for: two
 * ops (one running, one queued so the device does not idle while the
 * completion thread wakes up and issues the next), and beyond them short
 * ops only: up to DEVQ_CUDA_DEPTH_MAX while the device time they declare
 * (a spin's ns; other kernels, copies and fills declare none) stays within
 * DEVQ_CUDA_WINDOW_NS.  Two at a time would cost small ops most of their
 * throughput (each then waits for a completion thread's wake-up); long
 * spins are what a stop must not wait for.  A replayable run is one graph
 * launch, whatever its length, counted by its ops. */
#ifndef DEVQ_CUDA_WINDOW /* -D for measurements only */
#define DEVQ_CUDA_WINDOW 2
#endif
#define DEVQ_CUDA_DEPTH_MAX 64
#define DEVQ_CUDA_WINDOW_NS 1000000ull

/* Shorter replayable runs are issued op by op: a graph launch costs about
 * as much as a few kernel launches, and a new run's capture far more. */
#define DEVQ_CUDA_GRAPH_MIN_OPS 4

static uint64_t now_ns(void)
{
	return devq_now_ns();
}

/* Called with the lock held.  Returns whether r is a sticky fault (then
 * the backend is lost). */
static bool check_sticky(struct cuda_backend *cb, CUresult r, const char *call)
{
	if (!devq_cuda_drv_error_is_sticky(r))
		return false;
	if (!cb->lost) {
		cb->lost = true;
		snprintf(cb->lost_msg, sizeof(cb->lost_msg), "%s (%s): the device context is lost",
			 devq_cuda_drv_error_name(r), call);
	}
	return true;
}

static void set_lost(struct cuda_backend *cb, struct devq_bop *op)
{
	if (op->kind == DEVQ_BOP_FAIL)
		return; /* keeps the reason it was rejected for */
	op->code = DEVQ__CODE__DEVICE_LOST;
	snprintf(op->msg, sizeof(op->msg), "%s", cb->lost_msg);
}

/* ---- pools (lock held) ------------------------------------------------ */

static CUevent pool_get(struct cuda_backend *cb, int p, CUresult *err)
{
	struct event_pool *ep = &cb->pool[p];
	if (ep->n)
		return ep->ev[--ep->n];
	CUevent e = NULL;
	*err = cb->drv.cuEventCreate(&e, ep->flags);
	return *err == CUDA_SUCCESS ? e : NULL;
}

static void pool_put(struct cuda_backend *cb, int p, CUevent e)
{
	struct event_pool *ep = &cb->pool[p];
	if (!e)
		return;
	if (ep->n == ep->cap) {
		size_t ncap = ep->cap ? ep->cap * 2 : 64;
		CUevent *n = realloc(ep->ev, ncap * sizeof(*n));
		if (!n) {
			cb->drv.cuEventDestroy(e);
			return;
		}
		ep->ev = n;
		ep->cap = ncap;
	}
	ep->ev[ep->n++] = e;
}

static struct cu_op *op_get(struct cuda_backend *cb)
{
	struct cu_op *co = cb->free_ops;
	if (co)
		cb->free_ops = co->next_free;
	else
		co = malloc(sizeof(*co));
	if (co)
		memset(co, 0, sizeof(*co));
	return co;
}

static void op_put(struct cuda_backend *cb, struct cu_op *co)
{
	pool_put(cb, POOL_TIMED_START, co->start);
	pool_put(cb, co->end_pool, co->end);
	co->next_free = cb->free_ops;
	cb->free_ops = co;
}

/* ---- calibration ------------------------------------------------------ */

/* Records a calibration event on an idle stream and brackets it with host
 * reads.  Its event is created without BLOCKING_SYNC: the synchronize spins,
 * which keeps the bracket to a few µs.  Callers hold cal_lock (or, at open,
 * are the only thread). */
static CUresult calibrate(struct cuda_backend *cb)
{
	unsigned next = cb->cal_cur ^ 1;
	uint64_t t0 = now_ns();
	CUresult r = cb->drv.cuEventRecord(cb->cal_ev[next], cb->cal_stream);
	if (r == CUDA_SUCCESS)
		r = cb->drv.cuEventSynchronize(cb->cal_ev[next]);
	uint64_t t1 = now_ns();
	if (r != CUDA_SUCCESS)
		return r;
	float ms = 0;
	struct devq_cal prev = cb->cal;
	if (prev.valid &&
	    cb->drv.cuEventElapsedTime(&ms, cb->cal_ev[cb->cal_cur], cb->cal_ev[next]) != CUDA_SUCCESS)
		ms = 0;
	devq_cuda_time_update(&cb->cal, &prev, t0, t1, ms);
	cb->cal_cur = next;
	return CUDA_SUCCESS;
}

/* Host times of the op's start and end events. */
static void map_times(struct cuda_backend *cb, struct devq_bop *op, struct cu_op *co)
{
	pthread_mutex_lock(&cb->cal_lock);
	if (devq_cuda_time_stale(&cb->cal, now_ns()))
		calibrate(cb);
	float ms_s = 0, ms_e = 0;
	CUevent cal = cb->cal_ev[cb->cal_cur];
	bool ok = cb->cal.valid &&
		  cb->drv.cuEventElapsedTime(&ms_s, cal, co->start) == CUDA_SUCCESS &&
		  cb->drv.cuEventElapsedTime(&ms_e, cal, co->end) == CUDA_SUCCESS;
	if (ok) {
		op->t_start = devq_cuda_time_map(&cb->cal, ms_s);
		op->t_end = devq_cuda_time_map(&cb->cal, ms_e);
	}
	pthread_mutex_unlock(&cb->cal_lock);
	if (!ok)
		op->t_start = op->t_end = 0;
}

/* ---- completion ------------------------------------------------------- */

static void wait_reported(struct cuda_backend *cb, struct devq_bop *op)
{
	for (unsigned i = 0; i < op->nwaits; i++)
		while (!atomic_load_explicit(&op->waits[i]->done, memory_order_acquire))
			pthread_cond_wait(&cb->done, &cb->lock);
}

/* Lock held, op's waits reported.  Without timing events (or when they
 * could not be read) the host's view bounds the device's: the op cannot
 * have started before the hand-off, before the previous op on its stream
 * ended or before any op it waits on ended, and it had ended by `seen`.
 * Mapped times carry the calibration's error, so the interval they give is
 * moved as a whole into that bracket: its length is the device's own
 * measure (two events of one timer), and only an interval longer than the
 * bracket itself is cut. */
static void stamp(struct devq_bop *op, uint64_t last_end, uint64_t seen)
{
	uint64_t lo = op->t_handoff > last_end ? op->t_handoff : last_end;
	for (unsigned i = 0; i < op->nwaits; i++)
		if (op->waits[i]->t_end > lo)
			lo = op->waits[i]->t_end;
	if (lo > seen)
		seen = lo; /* a producer seen late by its own stream's thread */
	if (!op->t_start || !op->t_end) {
		op->t_start = lo;
		op->t_end = seen;
		return;
	}
	uint64_t d = op->t_end > op->t_start ? op->t_end - op->t_start : 0;
	if (d > seen - lo)
		d = seen - lo;
	uint64_t start = op->t_start < lo ? lo : op->t_start;
	if (start > seen - d)
		start = seen - d;
	op->t_start = start;
	op->t_end = start + d;
}

static void pump(struct cuda_backend *cb);
static void lose(struct cuda_backend *cb, CUresult r, const char *call);

static void *waiter(void *arg)
{
	struct cu_stream *st = arg;
	struct cuda_backend *cb = st->cb;
	/* Named for top -H and /proc/PID/task/ (at most 15 characters). */
	char name[16];
	snprintf(name, sizeof(name), "devqd-cuda/%u", (unsigned)(st - cb->s) % 1000u);
	pthread_setname_np(pthread_self(), name);

	/* Without its context this thread cannot wait for anything: the
	 * device is as good as lost (a sticky fault raised before the thread
	 * got here answers this call too). */
	CUresult ctx_r = cb->drv.cuCtxSetCurrent(cb->ctx);
	pthread_mutex_lock(&cb->lock);
	if (ctx_r != CUDA_SUCCESS)
		lose(cb, ctx_r, "cuCtxSetCurrent");
	for (;;) {
		while (!st->head && !(cb->stop && !st->uhead))
			pthread_cond_wait(&st->work, &cb->lock);
		if (!st->head)
			break;
		struct devq_bop *op = st->head;
		struct cu_op *co = op->priv;
		pthread_mutex_unlock(&cb->lock);

		CUresult r = CUDA_SUCCESS;
		if (co && co->end)
			r = ctx_r != CUDA_SUCCESS ? ctx_r : cb->drv.cuEventSynchronize(co->end);
		uint64_t seen = now_ns();
		if (r == CUDA_SUCCESS && co && co->work && co->start && op->code == DEVQ__CODE__OK)
			map_times(cb, op, co);

		pthread_mutex_lock(&cb->lock);
		st->head = op->next;
		if (!st->head)
			st->tail = NULL;
		if (r != CUDA_SUCCESS) {
			if (!check_sticky(cb, r, "cuEventSynchronize") && op->code == DEVQ__CODE__OK) {
				op->code = DEVQ__CODE__DEVICE_ERROR;
				snprintf(op->msg, sizeof(op->msg), "waiting for the op: %s",
					 devq_cuda_drv_error_name(r));
			}
		}
		if (cb->lost)
			set_lost(cb, op);
		wait_reported(cb, op);
		stamp(op, st->last_end, seen);
		st->last_end = op->t_end;

		atomic_store_explicit(&op->done, 1, memory_order_release);
		cb->b.on_complete(cb->b.ud, op); /* op may be freed from here on */
		pthread_cond_broadcast(&cb->done);
		st->dev_ns -= co ? co->est_ns : 0;
		if (co)
			op_put(cb, co); /* events recycled only once published */
		st->on_device--;
		pump(cb);
	}
	pthread_mutex_unlock(&cb->lock);
	return NULL;
}

/* ---- enqueue ---------------------------------------------------------- */

static CUresult launch_kernel(struct cuda_backend *cb, CUstream s, size_t k, void **params)
{
	CUfunction fn = cb->fn[k];
	if (!fn)
		return CUDA_ERROR_NOT_FOUND;
	uint64_t n = cb->n_param[k] >= 0 ? *(const uint64_t *)params[cb->n_param[k]] : 0;
	unsigned grid = 1, block = 1;
	devq_cuda_launch_dims(devq_kernels[k].name, n, cb->sm_count, &grid, &block);
	return cb->drv.cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, s, params, NULL);
}

/* Lock held.  Issues the device work of op on st; *call names the CUDA
 * call for messages. */
static CUresult launch(struct cuda_backend *cb, struct cu_stream *st, struct devq_bop *op,
		       const char **call)
{
	CUstream s = st->stream;
	switch (op->kind) {
	case DEVQ_BOP_KERNEL: {
		if (op->kernel->repository) { /* exe_cuda.c */
			*call = "cuLaunchKernel";
			return devq_exe_cuda_launch(&cb->drv, op->kernel->dev, s, op->args);
		}
		size_t k = (size_t)(op->kernel - devq_kernels);
		union devq_kval args[DEVQ_MAX_PARAMS];
		void *params[DEVQ_MAX_PARAMS];
		memcpy(args, op->args, sizeof(args));
		for (unsigned i = 0; i < DEVQ_MAX_PARAMS; i++)
			params[i] = &args[i];
		*call = "cuLaunchKernel";
		if (k == cb->k_spin_buf && cb->fn[cb->k_spin]) {
			/* Spin in one thread, then increment across the grid: a
			 * spin in every block would last ns per wave of blocks
			 * whenever other streams hold SMs. */
			CUresult r = launch_kernel(cb, s, cb->k_spin, params);
			if (r != CUDA_SUCCESS)
				return r;
			args[0].u64 = 0;
		}
		return launch_kernel(cb, s, k, params);
	}
	case DEVQ_BOP_COPY: {
		if (!op->size)
			return CUDA_SUCCESS;
		uint64_t gap = op->dst > op->src ? op->dst - op->src : op->src - op->dst;
		if (gap < op->size && cb->fn[cb->k_copy]) {
			/* Overlapping ranges of one buffer: cuMemcpyAsync does not
			 * allow them; the copy kernel moves them like memmove. */
			union devq_kval args[3] = { { .u64 = op->size }, { .u64 = op->src },
						    { .u64 = op->dst } };
			void *params[DEVQ_MAX_PARAMS] = { &args[0], &args[1], &args[2] };
			*call = "cuLaunchKernel (overlapping copy)";
			return launch_kernel(cb, s, cb->k_copy, params);
		}
		*call = "cuMemcpyAsync";
		return cb->drv.cuMemcpyAsync((CUdeviceptr)op->dst, (CUdeviceptr)op->src, op->size, s);
	}
	case DEVQ_BOP_FILL:
		*call = "cuMemsetD32Async";
		if (op->size < 4)
			return CUDA_SUCCESS;
		return cb->drv.cuMemsetD32Async((CUdeviceptr)op->dst, op->pattern, op->size / 4, s);
	case DEVQ_BOP_FAIL:
		break;
	}
	return CUDA_SUCCESS;
}

/* Lock held: a host executable's run, with its stream's slot (made before
 * pump let the op through: host_ready).  It only enqueues on the stream. */
static void run_host(struct cuda_backend *cb, struct cu_stream *st, struct devq_bop *op)
{
	const struct devq_host_exe *x = op->kernel->cuda_host;
	struct devq_host_call call = { .stream = st->stream, .stream_index = op->stream,
				       .threads = 1, .start_ns = now_ns() };
	char why[DEVQ_BOP_MSG] = "";
	int r = devq_hslots_get_async(cb->hslots, x, op->stream, st->stream, &call.slot, why,
				      sizeof(why), NULL, NULL);
	if (r == 0)
		r = devq_hslots_call(x, op->kernel->name, op->args, &call, op->msg,
				     sizeof(op->msg));
	else
		snprintf(op->msg, sizeof(op->msg), "%s: init: %.130s", op->kernel->name,
			 r > 0 ? "not finished" : why);
	if (r == -ENOTRECOVERABLE && !cb->lost) {
		cb->lost = true;
		snprintf(cb->lost_msg, sizeof(cb->lost_msg), "%.150s", op->msg);
	}
	if (r != 0)
		op->code = DEVQ__CODE__DEVICE_ERROR;
}

static void pump(struct cuda_backend *cb);

/* The housekeeping thread made a slot: the stream that waited for it goes
 * on. */
static void host_slot_made(void *ud)
{
	struct cuda_backend *cb = ud;
	pthread_mutex_lock(&cb->lock);
	pump(cb);
	pthread_mutex_unlock(&cb->lock);
}

/* Lock held: false while op is a host executable whose slot on its stream
 * is still being made (off this thread: init may take hundreds of ms);
 * the stream waits, and host_slot_made pumps again. */
static bool host_ready(struct cuda_backend *cb, struct devq_bop *op)
{
	if (op->kind != DEVQ_BOP_KERNEL || !op->kernel->cuda_host || op->code != DEVQ__CODE__OK ||
	    cb->lost)
		return true;
	void *slot;
	char why[8];
	return devq_hslots_get_async(cb->hslots, op->kernel->cuda_host, op->stream,
				     cb->s[op->stream].stream, &slot, why, sizeof(why),
				     host_slot_made, cb) != 1;
}

/* Lock held: why op must not run, judged from what is known now.  On this
 * backend a failure is known when the failing op is enqueued (validation,
 * launch errors, cancellation); a fault discovered later is sticky and
 * fails everything anyway. */
static void precheck(struct devq_bop *op)
{
	if (op->kind == DEVQ_BOP_FAIL || op->code != DEVQ__CODE__OK)
		return;
	if (op->cancel && atomic_load_explicit(op->cancel, memory_order_relaxed)) {
		op->code = DEVQ__CODE__CANCELLED;
		snprintf(op->msg, sizeof(op->msg), "cancelled before it started");
		return;
	}
	for (unsigned i = 0; i < op->nstrict; i++) {
		struct devq_bop *w = op->waits[i];
		if (w->code == DEVQ__CODE__OK)
			continue;
		devq_bop_dependency_failed(op, w, i);
		return;
	}
	/* Issued is started, as far as the host can tell: the device runs
	 * what is on a stream without asking again. */
	if (op->deadline_ns)
		devq_bop_deadline_passed(op, now_ns());
}

/* Lock held: marks the backend lost after a failure of a call that orders
 * the stream (event creation or record, a stream wait).  Such a failure
 * would leave an op without the end event its dependents order through, so
 * whatever the error, the device can no longer be trusted to keep order. */
static void lose(struct cuda_backend *cb, CUresult r, const char *call)
{
	if (!check_sticky(cb, r, call) && !cb->lost) {
		cb->lost = true;
		snprintf(cb->lost_msg, sizeof(cb->lost_msg),
			 "%s (%s): the device can no longer order work", devq_cuda_drv_error_name(r),
			 call);
	}
}

/* Lock held: op (its cu_op in priv) goes onto its stream's completion FIFO,
 * failed as lost if the device is. */
static void to_fifo(struct cuda_backend *cb, struct devq_bop *op)
{
	struct cu_stream *st = &cb->s[op->stream];
	struct cu_op *co = op->priv;
	if (cb->lost) {
		/* Nothing of this op can be waited for on the device. */
		pool_put(cb, POOL_TIMED_START, co->start);
		pool_put(cb, co->end_pool, co->end);
		co->start = co->end = NULL;
		co->work = false;
		set_lost(cb, op);
	}
	op->next = NULL;
	if (st->tail)
		st->tail->next = op;
	else
		st->head = op;
	st->tail = op;
	pthread_cond_signal(&st->work);
}

/* Lock held: takes op's events from the pools.  False (the device is then
 * lost) when they cannot be had. */
static bool take_events(struct cuda_backend *cb, struct devq_bop *op, bool timed)
{
	struct cu_op *co = op->priv;
	CUresult r = CUDA_SUCCESS;
	co->end_pool = timed ? POOL_TIMED_END : POOL_SYNC;
	co->end = pool_get(cb, co->end_pool, &r);
	if (co->end && timed)
		co->start = pool_get(cb, POOL_TIMED_START, &r);
	if (!co->end || (timed && !co->start)) {
		lose(cb, r, "cuEventCreate");
		return false;
	}
	return true;
}

/* Lock held: makes stream s wait for op's waits on other streams.  Waits
 * are on the session's own earlier ops, handed over in submit order, so
 * each is either reported (done) or enqueued (has priv); one held back in
 * a replayable run on this stream has no end event yet and needs none. */
static bool apply_waits(struct cuda_backend *cb, CUstream s, struct devq_bop *op)
{
	for (unsigned i = 0; i < op->nwaits; i++) {
		struct devq_bop *w = op->waits[i];
		struct cu_op *wo = w->priv;
		if (atomic_load_explicit(&w->done, memory_order_acquire) || !wo || !wo->end ||
		    w->stream == op->stream) /* stream order already covers it */
			continue;
		CUresult r = cb->drv.cuStreamWaitEvent(s, wo->end, 0);
		if (r != CUDA_SUCCESS) {
			lose(cb, r, "cuStreamWaitEvent");
			return false;
		}
	}
	return true;
}

/* Lock held: waits, start event, the work, end event; then the FIFO. */
static void issue_one(struct cuda_backend *cb, struct devq_bop *op)
{
	struct cu_stream *st = &cb->s[op->stream];
	struct cu_op *co = op->priv;
	CUresult r;
	co->issued = true;
	if (cb->lost)
		goto queue;
	precheck(op);
	bool run = op->code == DEVQ__CODE__OK && op->kind != DEVQ_BOP_FAIL;
	bool timed = run && op->timed;
	/* Events first: once anything is on the stream, the op must end with
	 * an end event or the device's order is lost. */
	if (!take_events(cb, op, timed) || !apply_waits(cb, st->stream, op))
		goto queue;
	if (timed && (r = cb->drv.cuEventRecord(co->start, st->stream)) != CUDA_SUCCESS) {
		lose(cb, r, "cuEventRecord");
		goto queue;
	}
	if (run && op->kind == DEVQ_BOP_KERNEL && op->kernel->cuda_host) {
		run_host(cb, st, op);
		co->work = op->code == DEVQ__CODE__OK;
	} else if (run) {
		const char *call = "launch";
		r = launch(cb, st, op, &call);
		co->work = r == CUDA_SUCCESS;
		if (r != CUDA_SUCCESS) {
			if (check_sticky(cb, r, call))
				goto queue;
			/* The op failed; the stream did not. */
			op->code = DEVQ__CODE__DEVICE_ERROR;
			snprintf(op->msg, sizeof(op->msg), "%s: %s", call, devq_cuda_drv_error_name(r));
		}
	}
	/* Recorded even when nothing ran: dependents order through it. */
	if ((r = cb->drv.cuEventRecord(co->end, st->stream)) != CUDA_SUCCESS)
		lose(cb, r, "cuEventRecord");
queue:
	to_fifo(cb, op);
}

/* ---- replayable runs: CUDA graphs ------------------------------------ */

static void graph_destroy(void *g, void *ud)
{
	struct cuda_backend *cb = ud;
	cb->drv.cuGraphExecDestroy((CUgraphExec)g);
}

/* Lock held: captures the pending run as a graph (kernels only, no events:
 * those stay outside so each op keeps its own).  NULL when capture fails;
 * the run is then issued op by op. */
static CUgraphExec capture(struct cuda_backend *cb, CUstream s, struct devq_bop *run)
{
	CUresult r = cb->drv.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
	if (r != CUDA_SUCCESS)
		return NULL;
	bool ok = true;
	for (struct devq_bop *op = run; op; op = op->next) {
		const char *call;
		ok &= launch(cb, &cb->s[op->stream], op, &call) == CUDA_SUCCESS;
	}
	CUgraph g = NULL;
	r = cb->drv.cuStreamEndCapture(s, &g);
	CUgraphExec exec = NULL;
	if (ok && r == CUDA_SUCCESS && g &&
	    cb->drv.cuGraphInstantiateWithFlags(&exec, g, 0) != CUDA_SUCCESS)
		exec = NULL;
	if (g)
		cb->drv.cuGraphDestroy(g);
	return exec;
}

/* Lock held: issues the replayable run held back on one stream.  Its
 * kernels go to the device as one graph launch, captured the first time
 * the exact run is seen and replayed after; every op still gets its own end
 * event (recorded after the graph), so each completes, and is waited on by
 * other streams, on its own.  Ops of a run complete when the whole graph
 * has: never earlier than they ran. */
static void issue_run(struct cuda_backend *cb, struct devq_bop *run, unsigned n)
{
	struct cu_stream *st = &cb->s[run->stream];
	bool ok = !cb->lost;
	for (struct devq_bop *op = run; op; op = op->next)
		((struct cu_op *)op->priv)->issued = true;
	/* A run too short to pay for a graph launch, or with an op cancelled
	 * while the run waited for its turn: op by op (precheck completes a
	 * cancelled op as such). */
	bool by_op = n < DEVQ_CUDA_GRAPH_MIN_OPS;
	for (struct devq_bop *op = run; op && !by_op; op = op->next)
		if (op->cancel && atomic_load_explicit(op->cancel, memory_order_relaxed))
			by_op = true;
	if (by_op && ok) {
		for (struct devq_bop *op = run, *next; op; op = next) {
			next = op->next;
			issue_one(cb, op);
		}
		return;
	}
	for (struct devq_bop *op = run; op && ok; op = op->next)
		ok = take_events(cb, op, op->timed) && apply_waits(cb, st->stream, op);
	unsigned i = 0;
	for (struct devq_bop *op = run; op && ok; op = op->next, i++) {
		size_t k = (size_t)(op->kernel - devq_kernels);
		struct devq_graph_op *g = &cb->gops[i];
		memset(g, 0, sizeof(*g));
		g->kernel = (uint32_t)k;
		g->nargs = cb->nparams[k];
		uint64_t nv = cb->n_param[k] >= 0 ? op->args[cb->n_param[k]].u64 : 0;
		devq_cuda_launch_dims(op->kernel->name, nv, cb->sm_count, &g->grid, &g->block);
		for (unsigned j = 0; j < g->nargs; j++)
			g->args[j] = op->args[j].u64;
		/* spin_buf is two launches (launch()); its shape is its kernel's. */
	}
	CUgraphExec exec = NULL;
	if (ok) {
		exec = devq_graph_cache_find(&cb->graphs, run->stream, cb->gops, n);
		if (!exec) {
			exec = capture(cb, st->stream, run);
			void *evicted = NULL;
			if (exec && devq_graph_cache_insert(&cb->graphs, run->stream, cb->gops, n, exec,
									&evicted) < 0) {
				cb->drv.cuGraphExecDestroy(exec);
				exec = NULL;
			}
			if (evicted)
				cb->drv.cuGraphExecDestroy((CUgraphExec)evicted);
		}
	}
	CUresult r;
	for (struct devq_bop *op = run; op && ok; op = op->next) {
		struct cu_op *co = op->priv;
		if (co->start && (r = cb->drv.cuEventRecord(co->start, st->stream)) != CUDA_SUCCESS) {
			lose(cb, r, "cuEventRecord");
			ok = false;
		}
	}
	if (ok && exec && (r = cb->drv.cuGraphLaunch(exec, st->stream)) != CUDA_SUCCESS) {
		lose(cb, r, "cuGraphLaunch");
		ok = false;
	}
	for (struct devq_bop *op = run, *next; op; op = next) {
		next = op->next;
		struct cu_op *co = op->priv;
		if (ok && !exec) {
			/* No graph (capture failed): the run goes op by op. */
			pool_put(cb, POOL_TIMED_START, co->start);
			pool_put(cb, co->end_pool, co->end);
			co->start = co->end = NULL;
			issue_one(cb, op);
			continue;
		}
		if (ok) {
			co->work = true;
			if ((r = cb->drv.cuEventRecord(co->end, st->stream)) != CUDA_SUCCESS) {
				lose(cb, r, "cuEventRecord");
				ok = false;
			}
		}
		to_fifo(cb, op);
	}
}

/* Lock held: appends op (with run_len ops after it, for a run) to its
 * stream's ops not yet issued. */
static void hand_over(struct cuda_backend *cb, struct devq_bop *op, struct devq_bop *last)
{
	struct cu_stream *st = &cb->s[op->stream];
	last->next = NULL;
	if (st->utail)
		st->utail->next = op;
	else
		st->uhead = op;
	st->utail = last;
}

/* Lock held: the held-back replayable run joins its stream's queue as one
 * unit. */
static void issue_pending(struct cuda_backend *cb)
{
	struct devq_bop *run = cb->pend_head;
	if (!run)
		return;
	((struct cu_op *)run->priv)->run_len = cb->npend;
	hand_over(cb, run, cb->pend_tail);
	cb->pend_head = cb->pend_tail = NULL;
	cb->npend = 0;
}

/* Lock held: whether every op of the unit at op (n ops) can go to the
 * device: each wait on another stream must have its end event recorded
 * (issued) or be reported.  Waits are on ops handed over earlier, so this
 * never waits in a cycle. */
static bool unit_ready(struct devq_bop *op, unsigned n)
{
	for (unsigned k = 0; k < n && op; k++, op = op->next)
		for (unsigned i = 0; i < op->nwaits; i++) {
			struct devq_bop *w = op->waits[i];
			if (w->stream == op->stream ||
			    atomic_load_explicit(&w->done, memory_order_acquire))
				continue;
			if (!w->priv || !((struct cu_op *)w->priv)->issued)
				return false;
		}
	return true;
}

/* Lock held: the device time the unit at op (n ops) declares, each op's
 * noted in its cu_op. */
static uint64_t unit_est(struct cuda_backend *cb, struct devq_bop *op, unsigned n)
{
	uint64_t sum = 0;
	for (unsigned k = 0; k < n && op; k++, op = op->next) {
		struct cu_op *co = op->priv;
		size_t i = op->kind == DEVQ_BOP_KERNEL ? (size_t)(op->kernel - devq_kernels)
						       : devq_nkernels;
		co->est_ns = i == cb->k_spin || i == cb->k_spin_buf || i == cb->k_fault
				     ? op->args[0].u64
				     : 0;
		sum += co->est_ns;
	}
	return sum;
}

/* Lock held: issues what the windows allow, on every stream (issuing on one
 * can unblock another's waits). */
static void pump(struct cuda_backend *cb)
{
	for (bool progress = true; progress;) {
		progress = false;
		for (unsigned i = 0; i < cb->b.streams; i++) {
			struct cu_stream *st = &cb->s[i];
			while (st->uhead) {
				struct devq_bop *op = st->uhead;
				unsigned n = ((struct cu_op *)op->priv)->run_len;
				unsigned units = n ? n : 1;
				uint64_t est = unit_est(cb, op, units);
				bool fits = st->on_device < DEVQ_CUDA_WINDOW ||
					    (st->on_device + units <= DEVQ_CUDA_DEPTH_MAX &&
					     st->dev_ns + est <= DEVQ_CUDA_WINDOW_NS);
				if (!fits || !unit_ready(op, units) || !host_ready(cb, op))
					break;
				struct devq_bop *last = op;
				for (unsigned k = 1; k < n; k++)
					last = last->next;
				st->uhead = last->next;
				if (!st->uhead)
					st->utail = NULL;
				last->next = NULL;
				st->on_device += units;
				st->dev_ns += est;
				if (n)
					issue_run(cb, op, n);
				else
					issue_one(cb, op);
				progress = true;
			}
		}
	}
}

static void cuda_flush(struct devq_backend *b)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	pthread_mutex_lock(&cb->lock);
	issue_pending(cb);
	pump(cb);
	pthread_mutex_unlock(&cb->lock);
}

static int cuda_enqueue(struct devq_backend *b, struct devq_bop *op)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	if (op->stream >= b->streams)
		return -EINVAL;
	pthread_mutex_lock(&cb->lock);
	struct cu_op *co = op_get(cb);
	if (!co) {
		pthread_mutex_unlock(&cb->lock);
		return -ENOMEM;
	}
	op->priv = co;
	op->next = NULL;
	/* Host executables are never captured: what their library enqueues
	 * is its own business (devqd(8)). */
	bool replay = op->replay && op->kind == DEVQ_BOP_KERNEL && !op->kernel->repository &&
		      !op->kernel->cuda_host && !cb->lost;
	/* A run is one stream's consecutive replayable kernel ops: anything
	 * else ends it first, so the device sees every op in handed-over
	 * order. */
	if (cb->npend && (!replay || op->stream != cb->pend_stream ||
			  cb->npend == DEVQ_GRAPH_MAX_OPS))
		issue_pending(cb);
	if (replay) {
		precheck(op);
		if (op->code == DEVQ__CODE__OK && cb->fn[op->kernel - devq_kernels]) {
			if (cb->pend_tail)
				cb->pend_tail->next = op;
			else
				cb->pend_head = op;
			cb->pend_tail = op;
			cb->pend_stream = op->stream;
			cb->npend++;
			pump(cb); /* a run ended above */
			pthread_mutex_unlock(&cb->lock);
			return 0;
		}
		/* Failed before it runs: it goes op by op, and must not
		 * overtake the run held back on its stream (it waits on that
		 * run's ops, at least through stream order: the completion
		 * thread would wait for them forever). */
		issue_pending(cb);
	}
	hand_over(cb, op, op);
	pump(cb);
	pthread_mutex_unlock(&cb->lock);
	return 0;
}

/* ---- memory ----------------------------------------------------------- */

static int map_error(CUresult r)
{
	return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

/* The memory calls come from the loop thread or from the daemon's buffer
 * worker (backend.h): the context is made current on the calling thread
 * each time (a cheap call; the worker is not the backend's thread). */
static CUresult mem_ctx(struct cuda_backend *cb)
{
	return cb->drv.cuCtxSetCurrent(cb->ctx);
}

/* Pinned and mapped into the device's address space: kernels read it over
 * the bus (tens of GB/s, against the HBM's TB/s). */
static int cuda_map_host(struct devq_backend *b, void *addr, size_t len, bool read_only,
			 uint64_t *devaddr)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	/* A read-only mapping (an import the client lets us only read) can
	 * only be registered as read-only, which some devices lack. */
	if (read_only && !cb->ro_register)
		return -EOPNOTSUPP;
	CUresult r = mem_ctx(cb);
	if (r != CUDA_SUCCESS)
		return map_error(r);
	r = cb->drv.cuMemHostRegister(addr, len,
					       CU_MEMHOSTREGISTER_DEVICEMAP |
						       (read_only ? CU_MEMHOSTREGISTER_READ_ONLY : 0));
	if (r != CUDA_SUCCESS)
		return map_error(r);
	CUdeviceptr p = 0;
	r = cb->drv.cuMemHostGetDevicePointer(&p, addr, 0);
	if (r != CUDA_SUCCESS) {
		cb->drv.cuMemHostUnregister(addr);
		return map_error(r);
	}
	*devaddr = (uint64_t)p;
	return 0;
}

static void cuda_unmap_host(struct devq_backend *b, void *addr, size_t len)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	(void)len;
	if (mem_ctx(cb) == CUDA_SUCCESS)
		cb->drv.cuMemHostUnregister(addr);
}

static int cuda_alloc(struct devq_backend *b, size_t len, uint64_t *devaddr)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	CUdeviceptr p = 0;
	/* The stream-ordered allocator on the service stream: a plain
	 * cuMemAlloc/cuMemFree may synchronise the whole device, stalling
	 * every session's work behind this call. */
	CUresult r = mem_ctx(cb);
	if (r != CUDA_SUCCESS)
		return map_error(r);
	pthread_mutex_lock(&cb->cal_lock);
	r = cb->drv.cuMemAllocAsync(&p, len ? len : 1, cb->cal_stream);
	/* Zeroed like a fresh memfd, as on the CPU backend.  Ops run on other
	 * streams, so the memset is waited for before the buffer is usable
	 * (a device-speed memset: microseconds for the small buffers the loop
	 * allocates; the buffer worker waits for the large ones). */
	if (r == CUDA_SUCCESS)
		r = cb->drv.cuMemsetD8Async(p, 0, len ? len : 1, cb->cal_stream);
	CUevent e = cb->cal_ev[cb->cal_cur ^ 1];
	if (r == CUDA_SUCCESS)
		r = cb->drv.cuEventRecord(e, cb->cal_stream);
	if (r == CUDA_SUCCESS)
		r = cb->drv.cuEventSynchronize(e);
	if (r != CUDA_SUCCESS && p)
		cb->drv.cuMemFreeAsync(p, cb->cal_stream);
	pthread_mutex_unlock(&cb->cal_lock);
	if (r != CUDA_SUCCESS)
		return map_error(r);
	*devaddr = (uint64_t)p;
	return 0;
}

static void cuda_free(struct devq_backend *b, uint64_t devaddr, size_t len)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	(void)len;
	/* Every op that used it has been reported complete: freeing in the
	 * service stream's order is safe and does not wait for the device. */
	if (mem_ctx(cb) != CUDA_SUCCESS)
		return;
	pthread_mutex_lock(&cb->cal_lock);
	cb->drv.cuMemFreeAsync((CUdeviceptr)devaddr, cb->cal_stream);
	pthread_mutex_unlock(&cb->cal_lock);
}

static bool cuda_has_kernel(struct devq_backend *b, const struct devq_kernel *k)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	if (k->cuda_host)
		return true;
	if (k->repository)
		return k->dev != NULL;
	return cb->fn[k - devq_kernels] != NULL;
}

static void cuda_host_release(struct devq_backend *b, const struct devq_host_exe *x,
			      void (*done)(void *ud), void *ud)
{
	devq_hslots_release(((struct cuda_backend *)b)->hslots, x, done, ud);
}

/* The housekeeping thread's context, for init, fini and pump. */
static void host_thread_enter(void *ud)
{
	struct cuda_backend *cb = ud;
	cb->drv.cuCtxSetCurrent(cb->ctx);
}

/* Repository executables' device images: exe_cuda.c. */
static int cuda_load_image(struct devq_backend *b, const char *path, const char *entry,
			   const struct devq_sig *sig, void **dev, char *err, size_t errlen)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	return devq_exe_cuda_load(&cb->drv, cb->ctx, cb->dev, path, entry, sig, dev, err, errlen);
}

static void cuda_unload_image(struct devq_backend *b, void *dev)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	devq_exe_cuda_unload(&cb->drv, cb->ctx, dev);
}

/* ---- lifetime --------------------------------------------------------- */

static void cuda_destroy(struct devq_backend *b)
{
	struct cuda_backend *cb = (struct cuda_backend *)b;
	if (!cb)
		return;
	if (cb->s) {
		pthread_mutex_lock(&cb->lock);
		issue_pending(cb); /* nothing the daemon handed over stays behind */
		pump(cb);
		cb->stop = true;
		for (unsigned i = 0; i < b->streams; i++)
			pthread_cond_signal(&cb->s[i].work);
		pthread_mutex_unlock(&cb->lock);
		for (unsigned i = 0; i < b->streams; i++)
			if (cb->s[i].started)
				pthread_join(cb->s[i].waiter, NULL);
		/* Host executables' fini, while their streams still exist. */
		devq_hslots_close(cb->hslots);
		cb->hslots = NULL;
		for (unsigned i = 0; i < b->streams; i++) {
			if (cb->s[i].stream)
				cb->drv.cuStreamDestroy(cb->s[i].stream);
			pthread_cond_destroy(&cb->s[i].work);
		}
		free(cb->s);
	}
	if (cb->ctx) {
		for (int p = 0; p < NPOOLS; p++) {
			for (size_t i = 0; i < cb->pool[p].n; i++)
				cb->drv.cuEventDestroy(cb->pool[p].ev[i]);
			free(cb->pool[p].ev);
		}
		for (int i = 0; i < 2; i++)
			if (cb->cal_ev[i])
				cb->drv.cuEventDestroy(cb->cal_ev[i]);
		if (cb->cal_stream)
			cb->drv.cuStreamDestroy(cb->cal_stream);
		devq_graph_cache_clear(&cb->graphs, graph_destroy, cb);
		if (cb->module)
			cb->drv.cuModuleUnload(cb->module);
	}
	while (cb->free_ops) {
		struct cu_op *co = cb->free_ops;
		cb->free_ops = co->next_free;
		free(co);
	}
	if (cb->ctx_retained)
		cb->drv.cuDevicePrimaryCtxRelease(cb->dev);
	devq_cuda_drv_close(&cb->drv);
	free(cb->fn);
	free(cb->n_param);
	free(cb->nparams);
	free(cb->gops);
	pthread_cond_destroy(&cb->done);
	pthread_mutex_destroy(&cb->lock);
	pthread_mutex_destroy(&cb->cal_lock);
	free(cb);
}

static const struct devq_backend_ops cuda_ops = {
	.destroy = cuda_destroy,
	.map_host = cuda_map_host,
	.unmap_host = cuda_unmap_host,
	.alloc = cuda_alloc,
	.free = cuda_free,
	.has_kernel = cuda_has_kernel,
	.load_image = cuda_load_image,
	.unload_image = cuda_unload_image,
	.enqueue = cuda_enqueue,
	.flush = cuda_flush,
	.host_release = cuda_host_release,
};

#define FAIL(code, ...)                               \
	do {                                          \
		snprintf(err, errlen, __VA_ARGS__);   \
		cuda_destroy(&cb->b);                 \
		return (code);                        \
	} while (0)

#define CU(call, what)                                                                    \
	do {                                                                              \
		CUresult r_ = (call);                                                     \
		if (r_ != CUDA_SUCCESS)                                                   \
			FAIL(r_ == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO, "%s: %s", what, \
			     devq_cuda_drv_error_name(r_));                                   \
	} while (0)

/* The module must hold code this device runs: SASS for its major version
 * (minor no higher) or PTX no newer than it, which the driver compiles. */
static int check_fatbin(unsigned major, unsigned minor, char *what, size_t whatlen, char *err,
			size_t errlen)
{
	struct devq_fatbin fb;
	if (devq_fatbin_parse(devq_fatbin_data, (size_t)devq_fatbin_size, &fb, err, errlen) < 0)
		return -ENOEXEC;
	struct devq_fatbin_pick pick;
	if (devq_fatbin_select(&fb, major, minor, &pick) < 0) {
		snprintf(err, errlen, "the kernels have no code for this device: %.200s", pick.reason);
		return -ENOEXEC;
	}
	snprintf(what, whatlen, "%.250s", pick.reason);
	return 0;
}

int devq_backend_cuda_open(const struct devq_backend_config *cfg, const char *lib, int device,
			   struct devq_backend **out, char *err, size_t errlen)
{
	*out = NULL;
	struct cuda_backend *cb = calloc(1, sizeof(*cb));
	if (!cb) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	cb->b.ops = &cuda_ops;
	cb->b.name = "cuda";
	cb->b.on_complete = cfg->on_complete;
	cb->b.ud = cfg->ud;
	pthread_mutex_init(&cb->lock, NULL);
	pthread_mutex_init(&cb->cal_lock, NULL);
	pthread_cond_init(&cb->done, NULL);
	for (int p = 0; p < NPOOLS; p++)
		cb->pool[p].flags = pool_flags[p];

	int r = devq_cuda_drv_open(&cb->drv, lib, err, errlen);
	if (r < 0) {
		cuda_destroy(&cb->b);
		return r;
	}
	CUresult cr = cb->drv.cuInit(0);
	if (cr == CUDA_ERROR_NO_DEVICE)
		FAIL(-ENODEV, "no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)");
	if (cr != CUDA_SUCCESS)
		FAIL(-ENODEV, "cuInit: %s", devq_cuda_drv_error_name(cr));
	int count = 0;
	CU(cb->drv.cuDeviceGetCount(&count), "cuDeviceGetCount");
	if (device < 0 || device >= count)
		FAIL(-ENODEV, "no CUDA device %d (this host has %d)", device, count);
	CU(cb->drv.cuDeviceGet(&cb->dev, device), "cuDeviceGet");
	char name[96] = "";
	int major = 0, minor = 0, sms = 0;
	size_t mem = 0;
	CU(cb->drv.cuDeviceGetName(name, sizeof(name), cb->dev), "cuDeviceGetName");
	/* The UUID as NVML and DCGM print it: their series and devq's join on
	 * it (Status.uuid).  None from a driver without the call. */
	CUuuid uu;
	if (cb->drv.cuDeviceGetUuid && cb->drv.cuDeviceGetUuid(&uu, cb->dev) == CUDA_SUCCESS) {
		const unsigned char *u = (const unsigned char *)uu.bytes;
		snprintf(cb->b.uuid, sizeof(cb->b.uuid),
			 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
			 u[12], u[13], u[14], u[15]);
	}
	CU(cb->drv.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
					 cb->dev),
	   "cuDeviceGetAttribute");
	CU(cb->drv.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
					 cb->dev),
	   "cuDeviceGetAttribute");
	CU(cb->drv.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cb->dev),
	   "cuDeviceGetAttribute");
	CU(cb->drv.cuDeviceTotalMem(&mem, cb->dev), "cuDeviceTotalMem");
	int ro = 0;
	if (cb->drv.cuDeviceGetAttribute(&ro, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED,
					 cb->dev) == CUDA_SUCCESS)
		cb->ro_register = ro != 0;
	cb->sm_count = (unsigned)sms;
	char pick[256];
	char ferr[400];
	if (check_fatbin((unsigned)major, (unsigned)minor, pick, sizeof(pick), ferr, sizeof(ferr)) < 0)
		FAIL(-ENOEXEC, "%.60s (sm_%d%d): %.300s", name, major, minor, ferr);

	/* The context keeps the default scheduling: completion threads sleep
	 * because their events are BLOCKING_SYNC, while the calibration event
	 * (no such flag) is waited for with a spin that keeps its bracket
	 * short. */
	CU(cb->drv.cuDevicePrimaryCtxRetain(&cb->ctx, cb->dev), "cuDevicePrimaryCtxRetain");
	cb->ctx_retained = true;
	CU(cb->drv.cuCtxSetCurrent(cb->ctx), "cuCtxSetCurrent");
	CU(cb->drv.cuModuleLoadData(&cb->module, devq_fatbin_data), "cuModuleLoadData");

	cb->fn = calloc(devq_nkernels, sizeof(*cb->fn));
	cb->n_param = calloc(devq_nkernels, sizeof(*cb->n_param));
	cb->nparams = calloc(devq_nkernels, sizeof(*cb->nparams));
	cb->gops = calloc(DEVQ_GRAPH_MAX_OPS, sizeof(*cb->gops));
	cb->k_fault = devq_nkernels;
	if (!cb->fn || !cb->n_param || !cb->nparams || !cb->gops)
		FAIL(-ENOMEM, "out of memory");
	for (size_t i = 0; i < devq_nkernels; i++) {
		char sym[64], serr[128];
		snprintf(sym, sizeof(sym), DEVQ_CUDA_PREFIX "%s", devq_kernels[i].name);
		if (cb->drv.cuModuleGetFunction(&cb->fn[i], cb->module, sym) != CUDA_SUCCESS)
			cb->fn[i] = NULL; /* has_kernel says no; validation names it */
		struct devq_sig sig;
		cb->n_param[i] = -1;
		if (!strcmp(devq_kernels[i].name, "spin"))
			cb->k_spin = i;
		else if (!strcmp(devq_kernels[i].name, "spin_buf"))
			cb->k_spin_buf = i;
		else if (!strcmp(devq_kernels[i].name, "copy"))
			cb->k_copy = i;
		else if (!strcmp(devq_kernels[i].name, "fault"))
			cb->k_fault = i;
		if (devq_sig_parse(devq_kernels[i].signature, &sig, serr, sizeof(serr)) == 0) {
			cb->n_param[i] = devq_sig_find(&sig, "n");
			cb->nparams[i] = sig.nparams;
		}
	}

	CU(cb->drv.cuStreamCreateWithPriority(&cb->cal_stream, CU_STREAM_NON_BLOCKING, 0),
	   "cuStreamCreateWithPriority");
	for (int i = 0; i < 2; i++)
		CU(cb->drv.cuEventCreate(&cb->cal_ev[i], CU_EVENT_DEFAULT), "cuEventCreate");
	CU(calibrate(cb), "calibration event");

	unsigned n = (cfg->streams ? cfg->streams : 4) + cfg->high_streams;
	cb->s = calloc(n, sizeof(*cb->s));
	if (!cb->s)
		FAIL(-ENOMEM, "out of memory");
	cb->b.streams = n;
	cb->b.high_streams = cfg->high_streams;
	cb->b.device_depth = DEVQ_CUDA_WINDOW;
	/* Lower numbers are higher priorities; the device picks the next
	 * block to start from higher-priority streams first, but a running
	 * kernel is never preempted. */
	int prio_low = 0, prio_high = 0;
	CU(cb->drv.cuCtxGetStreamPriorityRange(&prio_low, &prio_high),
	   "cuCtxGetStreamPriorityRange");
	for (unsigned i = 0; i < n; i++) {
		cb->s[i].cb = cb;
		pthread_cond_init(&cb->s[i].work, NULL);
	}
	for (unsigned i = 0; i < n; i++)
		CU(cb->drv.cuStreamCreateWithPriority(&cb->s[i].stream, CU_STREAM_NON_BLOCKING,
						      i >= n - cfg->high_streams ? prio_high
										 : prio_low),
		   "cuStreamCreateWithPriority");
	int hr = devq_hslots_open(n, host_thread_enter, cb, &cb->hslots);
	if (hr < 0)
		FAIL(hr, "host executables' thread: %s", strerror(-hr));
	for (unsigned i = 0; i < n; i++) {
		int e = pthread_create(&cb->s[i].waiter, NULL, waiter, &cb->s[i]);
		if (e)
			FAIL(-e, "completion thread: %s", strerror(e));
		cb->s[i].started = true;
	}
	snprintf(cb->b.device, sizeof(cb->b.device),
		 "%.40s (GPU %d, sm_%d%d, %d SMs, %zu MiB, driver CUDA %d.%d)", name, device,
		 major % 100, minor % 100, sms % 10000, mem >> 20,
		 cb->drv.driver_version / 1000 % 1000, cb->drv.driver_version % 1000 / 10);
	snprintf(err, errlen, "%s", pick);
	*out = &cb->b;
	return 0;
}
