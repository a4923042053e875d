/* SPDX-License-Identifier: Apache-2.0 */
/* Fairness between sessions.  Work handed to a device stream cannot be
 * reordered, so a session that floods the device would make everyone else's
 * op wait behind all of its work.  Each session may have at most fair_k ops
 * inside the backend on each device stream (a "lane"); the rest wait here,
 * already validated and ordered (their points, waits and hazards are fixed at
 * submit), and are handed over as completions free slots, sessions taking
 * turns.  A slot is the session's own, so with a backend that takes enqueue
 * from any thread (CPU) the completion that frees it hands the session's
 * next op over itself, before the loop hears of it: a session above its cap
 * then costs no loop wake-up per refill, which on a small VM cost more than
 * the ops (bench/RESULTS.md, run 10).  Otherwise the loop refills in
 * devq_fair_kick after processing completions.  An op of a session with a free slot is handed over at once, so it
 * waits behind at most (S-1)*k ops of the S-1 other sessions (k per session)
 * already on its stream.
 *
 * Within a session, a lane hands over in submit order, and an op is handed
 * over only once every op it waits on (queue order, explicit waits, buffer
 * hazards) has been: the backend then still only ever waits on ops handed
 * over before, which is what keeps its streams free of deadlock, and a full
 * lane does not hold back the session's unrelated queues on other streams.
 *
 * Shares weight users: a session of a user with share w may have k*w ops
 * inside the backend, so when sessions compete for a stream it gets about w
 * times the device time of a share-1 session. */
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

struct devq_engine;
struct devq_session;
struct devq_job;

struct devq_fair_lane {
	struct devq_job *head, *tail; /* waiting, in submit order (op->fnext) */
	/* Handed to the backend and not yet reported done (CPU backend) or
	 * not yet processed by the loop (others); changed under the lock but
	 * also read, and with enqueue_any_thread decremented, outside it. */
	atomic_uint inside;
	/* t_received of the replayable batch the lane last handed an op of
	 * (0: the last op handed was not replayable): the rest of that batch
	 * follows past the cap, so it reaches the backend whole (one graph). */
	uint64_t replay_t;
};

struct devq_fair_sess {
	struct devq_fair_lane *lanes; /* one per device stream; NULL: no cap */
	unsigned nlanes, next_lane;
	_Atomic uint64_t waiting; /* under the lock; read outside it too */
	struct devq_session *rr_prev, *rr_next;
	bool in_rr; /* in the daemon's turn list: has waiting ops */
	unsigned cap; /* k times the user's share; 0 until first needed */
};

struct devq_fair {
	/* Lanes, turn list and every op's fhanded/fnext: the loop and, with a
	 * backend that takes enqueue from any thread, completers. */
	struct devq_lock lock;
	struct devq_session *rr_head, *rr_tail; /* sessions with waiting ops */
	uid_t share_uid[DEVQ_FAIR_MAX_SHARES];
	unsigned share[DEVQ_FAIR_MAX_SHARES];
	unsigned nshares;
};

/* Parses "user:weight[,user:weight...]" (names or uids, weights 1..64);
 * users not listed have share 1.  0, or -EINVAL with err naming the
 * problem. */
int devq_fair_init(struct devq_fair *f, const char *shares, char *err, size_t errlen);

/* A new session's lanes: 0 or -ENOMEM.  A session without (never
 * attached) is not capped. */
int devq_fair_attach(struct devq_session *s);
void devq_fair_fini(struct devq_session *s);
/* Validated ops, first and those linked from it by fnext, in order (a
 * frame's, core/sched.c), under one lock: each to the backend now if its
 * lane has a free slot, nothing waiting ahead of it and everything it
 * waits on handed over, else to the back of its lane. */
void devq_fair_submit(struct devq_job *first);
/* op completed (any thread, before the loop can see the completion):
 * with a backend that takes enqueue from any thread its slot is free now
 * and the session's ops that may go are handed over from here, so a
 * session above its cap costs no loop wake-up per refill. */
void devq_fair_completed(struct devq_job *op);
/* The loop processed op's completion: its slot is free (other backends). */
void devq_fair_done(struct devq_job *op);
/* Whether s has ops waiting for a slot. */
bool devq_fair_waiting(struct devq_session *s);
/* Hands waiting ops to free slots, one per session per turn. */
void devq_fair_kick(struct devq_engine *e);
/* Tells the backend that everything handed over so far should be issued
 * (a backend may hold back a replayable run to launch it as one graph).
 * The loop calls it once per iteration when e->flush_due is set, so the
 * frames of one read share each stream's wake-up. */
void devq_fair_flush(struct devq_engine *e);

#endif
