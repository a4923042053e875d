/* SPDX-License-Identifier: Apache-2.0 */
/* The engine: the core of devqd without its transport.  It owns the
 * configuration, the backend, the sessions and their queues, buffers and
 * ops, fairness, quotas, the trace ring and the counters; it knows no
 * sockets and no event loop (no <uv.h> in daemon/core/), so it links and is
 * unit-tested alone against a fake backend (tests/core/).
 *
 * The error convention of the whole daemon, followed by every function
 * that can fail:
 *     0    success;
 *   > 0    a client-visible Devq__Code, with the message written to the
 *          caller's err buffer (the caller sends it as an Error or a failed
 *          completion);
 *   < 0    an internal -errno (out of memory, a failed syscall), for the
 *          log; the client sees at most a generic message.
 *
 * The engine tells the layer above (the server) what it must act on only
 * through struct devq_engine_events, each member labelled with the thread
 * it is called from; everything else flows down as calls. */
#ifndef DEVQ_ENGINE_H
#define DEVQ_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "base/lock.h"
#include "core/cost.h"
#include "core/fair.h"
#include "core/metrics.h"
#include "core/repo.h"
#include "device/backend.h"
#include "kernels.h"

struct devq_engine;
struct devq_session;
struct devq_job;
struct devq_trace_ring;
struct devq_tenant;

/* A uid refused at admission after repeated device losses. */
struct devq_refused_uid {
	uint32_t uid;
	uint32_t losses;
	int64_t until_s; /* wall clock, seconds since the epoch */
};
/* The most a record holds (server/culprit.h's DEVQ_CULPRIT_MAX). */
#define DEVQ_REFUSED_UIDS_MAX 256

struct devq_engine_events {
	/* Any thread (backend completers included): completions are queued
	 * for the loop; it must call devq_sched_drain soon. */
	void (*wake)(void *ud);
	/* Loop thread, once: job reported DEVICE_LOST (a sticky fault).  The
	 * layer above tells the sessions and stops the daemon. */
	void (*device_lost)(void *ud, const struct devq_job *job);
	/* Loop thread: the uids refused at admission now after repeated
	 * device losses (the server keeps that record), at most max of them
	 * into out; returns how many.  NULL: none (Status shows them). */
	unsigned (*refused_uids)(void *ud, struct devq_refused_uid *out, unsigned max);
	void *ud;
};

struct devq_engine {
	struct devq_config cfg;
	struct devq_engine_events ev;
	struct devq_backend *be;
	struct devq_sig *sigs; /* parsed manifest, indexed like devq_kernels */
	struct devq_cost *costs; /* their cost expressions, compiled (n 0: none) */
	/* repo.c: executables from the repository directories, ids from
	 * DEVQ_REPO_FIRST_ID (empty until the server loads them). */
	struct devq_repo repo;
	unsigned *stream_load; /* queues bound to each device stream now */
	/* timeline.c: the newest op placed on each device stream (a
	 * reference), NULL: none yet.  Streams run in order, so the stream is
	 * idle once that op is done: what work-conserving placement asks. */
	struct devq_job **stream_last;
	struct devq_lock cmpl_lock; /* base/lock.h: held for a few hundred instructions */
	struct devq_job *cmpl_head, *cmpl_tail; /* from backend threads */
	/* Completions published in a page whose loop wake-up was deferred
	 * (sched.c): the loop's lazy poll collects them within a
	 * millisecond while it runs.  While it is parked (cmpl_parked,
	 * devq_sched_park) the first such completion wakes the loop, which
	 * starts the poll again: a poll that found nothing parks, so an op
	 * longer than a millisecond costs the loop at most two wake-ups (its
	 * completion's, and one empty poll when other ops are in flight), not
	 * one per millisecond on the CPUs the op runs on. */
	unsigned cmpl_deferred; /* under cmpl_lock: since the last wake-up */
	unsigned cmpl_lazy;     /* under cmpl_lock: since the last drain */
	bool cmpl_parked;       /* under cmpl_lock */
	/* The thread that called devq_engine_init: the loop's.  A deferred
	 * completion reported on it (an op the loop ran itself, an enqueue
	 * refused) needs no wake-up: it sets drain_due (loop thread only),
	 * and the loop drains before it waits. */
	pthread_t loop_thread;
	bool drain_due;
	/* Ops were handed to the backend since its last flush: the loop
	 * flushes once at the end of its iteration (devq_fair_flush). */
	bool flush_due;
	/* sched.c: between devq_sched_batch_begin and _end (one Submit
	 * frame), validated ops wait here, linked by fnext, and go to
	 * fairness together. */
	bool batching;
	struct devq_job *batch_head, *batch_tail;
	/* sched.c: an op with a client deadline was submitted since start
	 * (never cleared): until then fair.c's hand-over of a burst has no
	 * deadline to check, op by op.  Stored by the loop before it submits
	 * that op under fair.c's lock, read under that lock by whichever
	 * thread hands the op over: relaxed, the lock orders them. */
	atomic_bool deadlines_seen;
	struct devq_session *sessions;
	struct devq_session *dirty; /* outboxes to flush (core/outbox.c) */
	struct devq_trace_ring *trace; /* recent op records (trace.c) */
	uint64_t next_session_id;
	struct devq_metrics metrics; /* metrics.c: for devctl metrics */
	uint64_t start_ns;
	/* totals */
	uint64_t ops_in_flight, ops_completed, ops_failed, sessions_total, bytes_mapped;
	unsigned nbufs;
	/* Why the backend in use was chosen, when that deserves an operator's
	 * attention (e.g. CPU fallback on a host with /dev/nvidia*); "" if not. */
	char backend_note[256];
	bool device_lost;
	/* The watchdog's verdict (server/notify.c): ops in flight and none
	 * completed for longer than one may run.  Status reports it. */
	bool device_stalled;
	/* The device as other exporters of the node label it (Status.gpu,
	 * Status.uuid), set by the server once the backend is up. */
	char gpu[16], uuid[64];
	struct devq_fair fair;   /* fair.c: ops waiting for room on their stream */
	struct devq_tenant *tenants; /* tenant.c: one per Unix user with a session */
	unsigned tenants_live;       /* quota.c: tenants with at least one session */
};

typedef int (*devq_backend_open_fn)(const struct devq_backend_config *bc,
				    struct devq_backend **out);

/* Copies cfg and fills in the defaults of its unset limits, parses the
 * manifest and the fair shares, starts the backend (the one cfg names, or
 * what open makes when not NULL: tests bring a fake one) and allocates the
 * trace ring.  The one initialisation of devqd and of every in-process
 * driver (tests/fuzz, tests/core).  0; -EINVAL for a setting that is
 * wrong (logged); another -errno when the backend or memory failed
 * (logged).  On failure nothing is left to free. */
int devq_engine_init(struct devq_engine *e, const struct devq_config *cfg,
		     const struct devq_engine_events *ev, devq_backend_open_fn open);
/* Hands the limits the backend reads itself (max-op-ms, slice-us) to it:
 * at start, and after each reload of the configuration. */
void devq_engine_limits(struct devq_engine *e);
/* After every session is gone: stops the backend, frees the rest. */
void devq_engine_fini(struct devq_engine *e);

#endif
