/* SPDX-License-Identifier: Apache-2.0 */
/* Fairness between tenants (core/tenant.h: a Unix user, or a tenant an
 * administrator granted).
 *
 * Work handed to a device stream cannot be reordered and a running op
 * cannot be interrupted, so what is handed over is kept short: a stream
 * takes ops while the expected device time of what it holds (running and
 * queued in the backend) is below fair-window-us, and at most fair-k ops
 * at once, whoever they belong to; one op always goes to an empty stream,
 * however long.  Everything else waits here, already validated and ordered
 * (points, waits and hazards are fixed at submit), and the next op for a
 * stream with room is chosen in two levels: the tenant with the least
 * virtual device time (device time used, divided by its weight), then,
 * inside that tenant, its sessions in turn.  A newcomer's op therefore
 * waits for the op running on its stream, plus at most about one window
 * of work queued behind it, and a tenant gains nothing by opening more
 * sessions or queues.  Work-conserving: a lone tenant fills every stream
 * of its queues' class.
 *
 * Virtual time.  A tenant is charged its op's expected device time when
 * the op is handed over (so one that fills several streams at once is
 * seen at once) and corrected to the time the device reports when the op
 * completes.  A tenant that had nothing in the daemon starts again at the
 * virtual time of the latest op chosen, so idling earns no credit.  Ties
 * go to the tenant with fewer ops inside the backend.
 *
 * Expected time.  A kernel with a u64 argument named ns declares its
 * duration (spin).  One with a cost (core/cost.h: gemm's 2*m*n*k) is
 * expected to take cost / rate, the rate pinned by devqd.conf (rate key)
 * or learned from its timed ops (cost per second of device time, an
 * average of about the last 8), as soon as one is known.  Otherwise (and
 * until then) each executable (and copies, and fills)
 * learns from the device times its ops report an average per 4 KiB of
 * buffer argument (an op of no sample yet counts as 1/fair-k of the
 * window, so a stream holds at most fair-k of them, until one is timed).  On a backend whose untimed ops
 * report no device time (CUDA), one op in DEVQ_FAIR_SAMPLE of each
 * executable is timed.
 *
 * Within a session, a lane (one per device stream: the stream placement,
 * core/timeline.c, gave the op) holds its waiting ops in submit order,
 * and an op is handed over only once every op it waits on (queue order,
 * explicit waits, buffer hazards) has been: the backend then still only
 * ever waits on ops handed over before, which keeps its streams free of
 * deadlock.
 *
 * Where an op runs is decided when it is handed over, in the fair order,
 * so that no stream idles while a tenant has an op that could start there
 * and weights hold whatever the number and depth of queues: a stream with
 * room takes, of the tenants with an op that starts there at once (each
 * op it waits on done or handed to that stream: the head of its lane for
 * it, else one of the first DEVQ_FAIR_MOVE_SCAN ops of any of its lanes
 * of the stream's class that may move), the one whose virtual time is
 * least, and the op is bound to it then; failing any, the head of its own
 * lane whose waits were handed over, which may wait there for another
 * stream.  An op
 * whose queue order rests on its stream (the first after a reset, a
 * failed op) pins its previous op and follows it.  A stream left with
 * nothing to start while an op waited only for one running elsewhere looks
 * again when that one is done (devq_fair_after_done).  Cost: nothing on
 * the straight-through path; per waiting op a test at submit, per choice
 * a look at each active tenant's lane heads (up to 4 ops per lane of the
 * class when its own have nothing), one load per completion.  A replayable batch obeys the window but not the op count,
 * so a batch of short ops still reaches the backend as one run (one graph
 * on CUDA) and a long one is split where the window ends.
 *
 * Cores.  On the CPU backend the streams share the machine's cores: bulk
 * host slices that wait for cores get them, as they free, in the same
 * order (devq_fair_core_pick: the tenant with the least virtual time
 * first), so weights hold for the cores as they do for the streams,
 * whatever the number of queues; short and high-priority ops take no
 * cores and run at once (device/cpu/backend_cpu.c).  Cost: one look at
 * each waiting slice's tenant when two or more wait, per slice.
 *
 * With a backend that takes enqueue from any thread (CPU), the completion
 * that makes room hands the next ops over itself, before the loop hears of
 * it; otherwise the loop does in devq_fair_kick after processing
 * completions.  Either refills once half the window or half the count is
 * free, so a stream of short ops costs one lock per burst. */
#ifndef DEVQ_FAIR_H
#define DEVQ_FAIR_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/lock.h"

#define DEVQ_FAIR_MAX_SHARES 64
#define DEVQ_FAIR_MAX_WEIGHT 64
/* Virtual time is ns * DEVQ_FAIR_VT_SCALE / weight: 64 keeps weights 1..64
 * exact enough and lasts 9 years of device time in 64 bits. */
#define DEVQ_FAIR_VT_SCALE 64
/* One op in this many of an executable is timed where timing is optional. */
#define DEVQ_FAIR_SAMPLE 16

struct devq_engine;
struct devq_session;
struct devq_tenant;
struct devq_job;
struct devq_bop;

/* Learned device time of one executable's ops (or of copies, of fills):
 * an average of ns per 4 KiB page of buffer arguments (plus one), times
 * 16; 0 until the first sample.  Completers update it without a lock: a
 * lost update only delays learning. */
struct devq_fair_est {
	_Atomic uint64_t ns16_per_page;
	atomic_uint ops; /* handed over: picks which ones are timed */
	/* How far its ops are trusted to run on the loop thread
	 * (devq_fair_flush_loop): each run there that took more than
	 * DEVQ_FAIR_HERE_OVER_NS adds DEVQ_FAIR_HERE_STRIKE, each op of it
	 * that took at most DEVQ_FAIR_HERE_NS (wherever it ran) takes one
	 * away; above DEVQ_FAIR_HERE_DISTRUST none runs there.  Updated
	 * racily, like the average. */
	atomic_uint here_score;
	/* Its ops' rate, where it declares a cost (core/cost.h): cost units
	 * per second of device time.  pinned: devqd.conf's rate key (0:
	 * none), written before any op can see it (engine start, repository
	 * apply).  Learned from timed ops as the estimate is: rate, an
	 * average over about the last 8 (what fairness charges by);
	 * rate_max, the fastest one seen (what validation refuses by, once
	 * DEVQ_COST_SAMPLES were seen: an op is refused only when it would
	 * take longer than max-op-ms even at that speed, and since rate_max
	 * only grows, an op accepted once is never refused later). */
	uint64_t pinned;
	_Atomic uint64_t rate, rate_max;
	atomic_uint rate_n; /* samples, counted up to DEVQ_COST_SAMPLES */
};

/* Rate samples before validation refuses by a learned rate. */
#define DEVQ_COST_SAMPLES 8

/* The rate validation refuses by: pinned, or the fastest seen after
 * DEVQ_COST_SAMPLES samples; 0 when none applies yet. */
static inline uint64_t devq_fair_refuse_rate(const struct devq_fair_est *e)
{
	if (e->pinned)
		return e->pinned;
	if (atomic_load_explicit(&e->rate_n, memory_order_relaxed) < DEVQ_COST_SAMPLES)
		return 0;
	return atomic_load_explicit(&e->rate_max, memory_order_relaxed);
}

struct devq_fair_lane {
	struct devq_job *head, *tail; /* waiting, in submit order (op->fnext) */
};

struct devq_fair_sess {
	struct devq_fair_lane *lanes; /* one per device stream; NULL: no cap */
	unsigned nlanes;
	_Atomic uint64_t waiting; /* under the lock; read outside it too */
	struct devq_session *rr_prev, *rr_next; /* the tenant's turn list */
	bool in_rr; /* in it: has waiting ops */
};

struct devq_fair_tenant {
	unsigned weight;
	/* Virtual device time: vt + vt_fix.  vt is charged at hand-over,
	 * under the lock; vt_fix gathers the corrections to what the device
	 * reported, written by the loop alone (devq_fair_done), so neither
	 * side pays an atomic read-modify-write per op on a line the other
	 * writes.  Modular: it never really goes down. */
	uint64_t vt;
	_Atomic uint64_t vt_fix;
	/* Ops inside the backend: handed (under the lock) - finished
	 * (written by the loop alone). */
	uint64_t handed;
	_Atomic uint64_t finished;
	uint64_t waiting;	 /* under the lock */
	unsigned *waiting_on;	 /* per stream, under the lock */
	uint64_t queued_ns;	 /* expected time of its waiting ops, under the lock */
	struct devq_session *rr_head, *rr_tail; /* sessions with waiting ops */
	struct devq_tenant *act_prev, *act_next; /* tenants with waiting ops */
	bool active;
	/* Usage for status and metrics: loop thread (devq_fair_done). */
	uint64_t device_ns, ops_done, wait_ns, wait_max_ns, waits;
};

/* A stream's ops handed over and not completed, and their expected time,
 * in one word (one atomic add each way): ops << DEVQ_FAIR_OPS_SHIFT | ns.
 * 48 bits of ns are 78 hours, beyond max-op-ms plus any window. */
#define DEVQ_FAIR_OPS_SHIFT 48

struct devq_fair_stream {
	_Atomic uint64_t inside;
	atomic_uint waiting;	    /* ops waiting for it (written under the lock) */
	unsigned waiting_replay;    /* of those, replayable ones (under the lock) */
};

struct devq_fair {
	/* Lanes, turn lists and every op's fhanded/fnext: the loop and, with
	 * a backend that takes enqueue from any thread, completers. */
	struct devq_lock lock;
	struct devq_fair_stream *st;
	unsigned nstreams;
	unsigned nnormal; /* streams [0, nnormal) normal, the rest high priority */
	/* Set when a stream with room found nothing it could start while ops
	 * waited elsewhere: the next completion, once its op is done (which
	 * may be what they waited for), looks again (devq_fair_after_done). */
	atomic_bool starved;
	uint64_t window_ns;
	unsigned depth;
	struct devq_tenant *act_head, *act_tail; /* tenants with waiting ops */
	uint64_t waiting; /* ops waiting, all streams (under the lock) */
	uint64_t vnow; /* the virtual time of the latest op chosen */
	struct devq_fair_est *est_builtin; /* indexed like devq_kernels */
	struct devq_fair_est est_copy, est_fill;
	uid_t share_uid[DEVQ_FAIR_MAX_SHARES];
	unsigned share[DEVQ_FAIR_MAX_SHARES];
	unsigned nshares;
};

/* Parses "user:weight[,user:weight...]" (names or uids, weights 1..64);
 * users not listed have weight 1.  0, or -EINVAL with err naming the
 * problem. */
int devq_fair_init(struct devq_fair *f, const char *shares, char *err, size_t errlen);
/* Once the backend is open: per-stream state (streams in all, the last
 * high of them high priority), the window (ns) and the op count per
 * stream.  0 or -ENOMEM. */
int devq_fair_start(struct devq_fair *f, unsigned streams, unsigned high, uint64_t window_ns,
		    unsigned depth);
void devq_fair_free(struct devq_fair *f);

/* A new tenant's turns and weight: 0 or -ENOMEM. */
int devq_fair_tenant_init(struct devq_engine *e, struct devq_tenant *t);
void devq_fair_tenant_fini(struct devq_tenant *t);
/* Sets t's weight (clamped to 1..DEVQ_FAIR_MAX_WEIGHT): a granted tenant's
 * shares.  Ops already charged keep their charge. */
void devq_fair_tenant_weight(struct devq_engine *e, struct devq_tenant *t, unsigned weight);

/* t's ops waiting for room, their expected time and its ops inside the
 * backend, read under the lock completers change them under (status). */
void devq_fair_tenant_queue(struct devq_engine *e, const struct devq_tenant *t,
			    uint64_t *waiting, uint64_t *queued_ns, uint64_t *inside);

/* A new session's lanes: 0 or -ENOMEM.  A session without (never
 * attached) is not held back. */
int devq_fair_attach(struct devq_session *s);
void devq_fair_fini(struct devq_session *s);
/* Validated ops, first and those linked from it by fnext, in order (a
 * frame's, core/sched.c), under one lock: each to the backend now if its
 * stream has room, nothing of its session waits ahead of it on that
 * stream and everything it waits on was handed over, else to the back of
 * its lane. */
void devq_fair_submit(struct devq_job *first);
/* op completed (any thread, before the loop can see the completion):
 * with a backend that takes enqueue from any thread its stream's room is
 * given to the next ops from here. */
void devq_fair_completed(struct devq_job *op);
/* With a backend that takes enqueue from any thread, after a completion
 * was published (its op done, not touched here): streams left idle for
 * want of an op that could start there look again.  One load when none
 * is. */
void devq_fair_after_done(struct devq_engine *e);
/* The loop processed op's completion (other backends: the room is free). */
void devq_fair_done(struct devq_job *op);
/* Whether s has ops waiting for room. */
bool devq_fair_waiting(struct devq_session *s);
/* Hands waiting ops to the streams with room. */
void devq_fair_kick(struct devq_engine *e);
/* The backend's core_pick (device/backend.h; ud: the engine): of n bulk
 * host slices waiting for cores, the one whose tenant's virtual time is
 * least gets the next free ones (ties: the first, the earliest arrival),
 * so that weights hold for the CPU backend's cores as they do for its
 * streams.  From a backend thread; takes the fair lock. */
unsigned devq_fair_core_pick(void *ud, struct devq_bop *const *ops, unsigned n);
/* Tells the backend that everything handed over so far should be issued
 * (a backend may hold back a replayable run to launch it as one graph).
 * The loop calls it once per iteration when e->flush_due is set, so the
 * frames of one read share each stream's wake-up. */
void devq_fair_flush(struct devq_engine *e);

/* The longest expected device time of an op the loop thread runs itself
 * (backend run_here): a sporadic op on an idle stream then costs the
 * daemon no wake-up of a worker.  10 us: a null op's whole path is a few
 * microseconds, waking a sleeping worker costs more than 10 (an idle
 * CPU's wake-up, tens of us on a VM: bench/RESULTS.md, "Where a confined
 * sporadic op's time goes"), and 10 us is 1/200 of the
 * loop budget a tenant has per turn (DEVQ_FRAMES_SLICE_NS), which the
 * time is charged to. */
#define DEVQ_FAIR_HERE_NS 10000ull
/* An op run there that took longer than this counts against its
 * executable (struct devq_fair_est, here_score): after three such runs
 * close together none of its ops runs there until sixteen of them have
 * taken no longer than the bound.  Not after one: a loop thread that is
 * preempted while it runs an op (a loaded machine, a daemon confined to
 * one CPU) sees a null op take milliseconds.  So a client whose ops run
 * far past their estimate blocks the loop at most three times, then once
 * per sixteen short ops, and pays for each with its tenant's loop
 * turns. */
#define DEVQ_FAIR_HERE_OVER_NS (4 * DEVQ_FAIR_HERE_NS)
#define DEVQ_FAIR_HERE_STRIKE 16
#define DEVQ_FAIR_HERE_DISTRUST (2 * DEVQ_FAIR_HERE_STRIKE)
/* Loop thread, after a session's frames handed ops over (server.c's
 * session_read): devq_fair_flush, except that a lone short op may be run
 * right here (backend run_here).  Returns the ns it ran ops here, to be
 * charged to that session's tenant's loop share; 0 when none ran.  The
 * op is that session's but where a completer handed another session's
 * op to an idle stream in the same instant; then the reader pays for it,
 * at most DEVQ_FAIR_HERE_NS expected. */
uint64_t devq_fair_flush_loop(struct devq_engine *e);

#endif
