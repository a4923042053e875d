/* SPDX-License-Identifier: Apache-2.0 */
/* The device backend interface.  Everything above it (sessions, validation,
 * ordering, timing) is common to every backend; a backend only moves memory
 * and runs ops on device streams, in order per stream, honouring waits.
 *
 * Threading: every call is made from the daemon's loop thread, except that a
 * backend with enqueue_any_thread also takes enqueue from on_complete, and
 * that map_host, unmap_host, alloc and free may also be called from the
 * daemon's buffer worker (core/buffer.c: one thread, for buffers of
 * DEVQ_BUFFER_BG_BYTES and more, as pinning GiBs takes seconds), at the
 * same time as loop-thread calls, including these four: a backend makes
 * them safe to call so (the CUDA backend makes its primary context current
 * on the calling thread first; the CPU one has nothing to share).  For one
 * buffer the calls stay in order: map_host (or alloc) returns before any
 * op names the buffer, and unmap_host (or free) is called once every op
 * that named it has been reported complete.
 * Completions are reported from backend threads through on_complete, which
 * must not call back into the backend unless enqueue_any_thread is set (it
 * is also called from the loop thread inside run_here); it
 * stores op->done = 1 as its last access to op, so a backend that waits on
 * done sees a dependency complete only once its completion is reported.  An
 * op's completion is reported before that of any op that waited on it, and
 * in order within a stream. */
#ifndef DEVQ_BACKEND_H
#define DEVQ_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "devq.pb-c.h"
#include "kernels.h"

enum devq_bop_kind {
	DEVQ_BOP_KERNEL,
	DEVQ_BOP_COPY,
	DEVQ_BOP_FILL,
	DEVQ_BOP_FAIL, /* completes in stream order with code/msg preset; runs nothing */
};

#define DEVQ_BOP_MSG 160

/* One op handed to a backend.  The daemon owns the memory and keeps it (and
 * every op in waits) alive until on_complete has been called for it. */
struct devq_bop {
	struct devq_bop *next; /* the backend's link while it holds the op */
	enum devq_bop_kind kind;
	unsigned stream;
	const struct devq_kernel *kernel;
	union devq_kval args[DEVQ_MAX_PARAMS]; /* buffers as device addresses */
	uint64_t dst, src, size;               /* COPY and FILL */
	uint32_t pattern;                      /* FILL */
	/* Must complete first, on any stream.  The first nstrict propagate
	 * failure (dependency_failed); the rest only order (buffer hazards). */
	struct devq_bop **waits;
	unsigned nwaits, nstrict;
	const atomic_bool *cancel; /* set: do not start it, complete as cancelled */
	/* Where the op stands in its client's queue, for messages only: the
	 * queue's id and the op's point; waits_prev: waits[0] is the
	 * previous point of that queue (no reset between), whose failure
	 * fails the queue from there; qfail: set when the op failed for its
	 * queue's failure, the first failed point (0: it did not). */
	bool waits_prev;
	uint32_t queue;
	uint64_t point, qfail;
	/* The client's deadline (Op.deadline_us): not started by deadline_ns
	 * (CLOCK_MONOTONIC), it never runs (devq_bop_deadline_passed).  0:
	 * none, the common case, which costs a backend one branch. */
	uint64_t deadline_ns, deadline_us;
	bool timed; /* the submitter wants device start/end (CUDA: timing events) */
	/* Part of a batch the client submits again and again (Op.replayable):
	 * CUDA may capture the run of such ops handed over together as a graph
	 * and replay it; the CPU backend needs nothing (a batch already costs
	 * one worker wake-up). */
	bool replay;
	/* Set by the backend before on_complete when more ops wait on this
	 * op's stream, so the stream does not run dry if the daemon's loop
	 * learns of this completion a little later.  Left false, the daemon
	 * treats every completion as possibly the stream's last. */
	bool more_queued;

	/* Results, written by the backend before on_complete. */
	atomic_int done;
	int code; /* devq code (enum Devq__Code) */
	char msg[DEVQ_BOP_MSG];
	uint64_t t_handoff;  /* stamped by the daemon before enqueue */
	/* How long the enqueue call took, stored by the daemon once the call
	 * returns (by enqueue_chain itself, before the op can start); atomic
	 * because the op may already complete on another thread, whose
	 * completer reads it for the record ring (0 there if the op finished
	 * before its enqueue call returned). */
	_Atomic uint64_t enqueue_ns;
	uint64_t t_start, t_end;
	/* The daemon's estimate of the op's device time (core/fair.c), or
	 * UINT64_MAX when it has none: what run_here goes by. */
	uint64_t expect_ns;
	/* Set by the backend before on_complete when run_here ran the op on
	 * the daemon's loop thread (the daemon then checks its estimate). */
	bool ran_here;
	void *priv; /* backend private */
};

/* op will not run because w, its strict wait number i, failed.  The message
 * names the root cause once, not once per link of a chain, and is the same
 * on every backend.  When w is the previous point of op's own queue, the
 * queue has failed: the message is the one the daemon gives an op
 * submitted after that failure was known (sched.c), naming the queue, its
 * first failed point and the remedy, so that one cause reads one way
 * however the timing fell. */
static inline void devq_bop_dependency_failed(struct devq_bop *op, const struct devq_bop *w,
					      unsigned i)
{
	op->code = DEVQ__CODE__DEPENDENCY_FAILED;
	if (i == 0 && op->waits_prev) {
		op->qfail = w->qfail ? w->qfail : w->point;
		snprintf(op->msg, sizeof(op->msg),
			 "queue %u failed at point %llu (an earlier point); reset it", op->queue,
			 (unsigned long long)op->qfail);
	} else if (w->code == DEVQ__CODE__DEPENDENCY_FAILED)
		memcpy(op->msg, w->msg, sizeof(op->msg));
	else
		snprintf(op->msg, sizeof(op->msg), "an op it waits on failed: %.120s", w->msg);
}

/* Whether op, not started yet, may no longer start at now: its client's
 * deadline passed.  Then it is failed DEADLINE_EXCEEDED (naming that
 * deadline) and must not run; its dependants see a failure like any other.
 * The daemon checks at hand-over, a backend where it starts an op; only an
 * op still OK is judged (a failed dependency or a cancel came first and
 * says more). */
static inline bool devq_bop_deadline_passed(struct devq_bop *op, uint64_t now)
{
	if (__builtin_expect(!op->deadline_ns, 1) || now <= op->deadline_ns ||
	    op->code != DEVQ__CODE__OK)
		return false;
	op->code = DEVQ__CODE__DEADLINE_EXCEEDED;
	uint64_t late = now - op->deadline_ns;
	snprintf(op->msg, sizeof(op->msg),
		 "not started within the client's deadline of %llu us after devqd received it"
		 " (%llu.%03llu ms past it)",
		 (unsigned long long)op->deadline_us, (unsigned long long)(late / 1000000),
		 (unsigned long long)(late / 1000 % 1000));
	return true;
}

struct devq_backend;
typedef void (*devq_complete_fn)(void *ud, struct devq_bop *op);

/* Which of n bulk host slices waiting for cores (CPU backend) gets the
 * next ones that free: the index into ops.  The daemon answers in its fair
 * order (core/fair.c), so that weights hold for the cores as for the
 * streams (high-priority ops take no cores: they never wait here).  Called from a backend thread holding the backend's
 * core lock: it must not call back into the backend.  n >= 2. */
typedef unsigned (*devq_core_pick_fn)(void *ud, struct devq_bop *const *ops, unsigned n);

struct devq_backend_ops {
	void (*destroy)(struct devq_backend *b);
	/* Makes host memory usable by the device (pins it) and returns the
	 * address ops use for it.  read_only: the mapping is PROT_READ.  This
	 * and the next three: loop thread or buffer worker (Threading). */
	int (*map_host)(struct devq_backend *b, void *addr, size_t len, bool read_only,
			uint64_t *devaddr);
	void (*unmap_host)(struct devq_backend *b, void *addr, size_t len);
	/* Device memory, zeroed; -ENOMEM when the device is full. */
	int (*alloc)(struct devq_backend *b, size_t len, uint64_t *devaddr);
	void (*free)(struct devq_backend *b, uint64_t devaddr, size_t len);
	/* Whether the loaded code can run this kernel on this device. */
	bool (*has_kernel)(struct devq_backend *b, const struct devq_kernel *k);
	/* Queues op on op->stream and returns before it runs. */
	int (*enqueue)(struct devq_backend *b, struct devq_bop *op);
	/* Queues the ops linked by next from first, in that order, each on
	 * its op->stream, as enqueue would one by one but at the cost of one
	 * call: the daemon hands over a burst (a Submit frame, a refill) at
	 * once.  It stores each op's enqueue_ns before the op can start, so
	 * the daemon never touches an op after handing it over.  A negative
	 * errno queues nothing (the daemon then enqueues op by op, for each
	 * op's own error).  May be NULL. */
	int (*enqueue_chain)(struct devq_backend *b, struct devq_bop *first);
	/* The daemon has handed over all it has for now: issue anything held
	 * back (CUDA: a replayable run captured as a graph).  May be NULL. */
	void (*flush)(struct devq_backend *b);
	/* Loop thread, in place of flush where the daemon can charge the time
	 * to a tenant: when what waits for the device is one op on an idle
	 * stream, expected to take at most max_ns (expect_ns), whose waits are
	 * done and which no thread of the backend is awake to take, the
	 * backend runs it here, on the calling thread, and reports it through
	 * on_complete from here; then it flushes as flush does.  Returns the
	 * ns spent running ops here, 0 when none ran.  A sporadic op then
	 * costs no wake-up of a backend thread.  May be NULL. */
	uint64_t (*run_here)(struct devq_backend *b, uint64_t max_ns);
	/* Executable repository (core/repo.c); both NULL for a backend that
	 * runs repository executables only through their CPU code (k->cpu).
	 * load_image, from any thread (a rescan runs off the loop): loads the
	 * device image at path (fatbin, cubin or PTX), finds entry in it and
	 * checks it against sig as far as the image tells; 0 with *dev set
	 * (a repository kernel's k->dev), or a negative errno with the
	 * reason in err.  unload_image, loop thread: once no op uses dev. */
	int (*load_image)(struct devq_backend *b, const char *path, const char *entry,
			  const struct devq_sig *sig, void **dev, char *err, size_t errlen);
	void (*unload_image)(struct devq_backend *b, void *dev);
	/* Host executables (<devq/kernel.h>, device/hostslot.h): no op of x
	 * will run any more.  Any thread; the backend finis x's per-stream
	 * slots on its housekeeping thread and then calls done(ud) there
	 * (where the caller closes x's library).  NULL for a backend that
	 * runs no host executables. */
	void (*host_release)(struct devq_backend *b, const struct devq_host_exe *x,
			     void (*done)(void *ud), void *ud);
	/* Loop thread, for the watchdog (server/notify.c): whether bulk work
	 * (below every other thread: CPU backend, SCHED_IDLE) waited for a
	 * CPU since the last call, hardly running: starved by other
	 * processes, it makes no progress without being stuck.  May be
	 * NULL. */
	bool (*cpu_starved)(struct devq_backend *b);
};

struct devq_backend {
	const struct devq_backend_ops *ops;
	const char *name;
	char device[128];
	/* The device's UUID as NVML and DCGM print it ("GPU-xxxxxxxx-...");
	 * "" where the backend has none (the server then names the host). */
	char uuid[64];
	unsigned streams;      /* in all: normal ones first, then high_streams */
	unsigned high_streams; /* streams [streams - high_streams, streams) */
	devq_complete_fn on_complete;
	devq_core_pick_fn core_pick; /* may be NULL */
	void *ud;
	/* enqueue may be called from any thread, on_complete included (the
	 * backend calls on_complete holding none of its locks): the daemon
	 * then hands a session's next ops over from the completion itself,
	 * with no round trip through its loop. */
	bool enqueue_any_thread;
	/* Ops of one stream that may be beyond cancellation at once (issued to
	 * the device, so they run to their end even when cancelled); 0 means
	 * 1, the running op.  The stop grace covers this many ops per stream. */
	unsigned device_depth;
	/* Every op's completion carries its device start and end, timed or
	 * not (CPU: two clock reads); otherwise an untimed op may report
	 * none, and fairness asks for timing of a sample of them. */
	bool always_timed;
	/* Sliced host ops (<devq/kernel.h> units; CPU backend).  The daemon
	 * stores the limits at start and at each reload (SIGHUP); the backend
	 * reads them between slices, from its own threads: max_op_ns bounds
	 * an op's own device time, slice_ns is the expected time per core of one
	 * slice. */
	_Atomic uint64_t max_op_ns, slice_ns;
	/* For the watchdog (server/notify.c): slices finished (progress that
	 * is not a completion), ops running in slices now, and ops or slices
	 * running that may take long before their end (a CPU kernel, an
	 * unsliced host executable, a slice not known to be short): while one
	 * of those runs, no progress for up to max_op_ns is no stall. */
	_Atomic uint64_t slices;
	atomic_uint sliced_running, unsliced_running;
};

struct devq_backend_config {
	unsigned streams;      /* normal priority */
	unsigned high_streams; /* high priority, after them */
	devq_complete_fn on_complete;
	devq_core_pick_fn core_pick; /* NULL: first come, first served */
	void *ud;
};

int devq_backend_cpu_open(const struct devq_backend_config *cfg, struct devq_backend **out);

#endif
