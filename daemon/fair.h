/* Fairness between sessions.  Work handed to a device stream cannot be
 * reordered, so a session that floods the device would make everyone else's
 * op wait behind all of its work.  Each session may have at most fair_k ops
 * inside the backend; the rest wait here, already validated and ordered (their
 * points, waits and hazards are fixed at submit), and are handed over in each
 * session's submit order as completions free its slots, sessions taking
 * turns.  An op of a session with a free slot is handed over at once, so it
 * waits behind at most (S-1)*k ops of the S-1 other sessions (k per session)
 * already on its stream.
 *
 * Shares weight users: a session of a user with share w may have k*w ops
 * inside the backend, so when sessions compete for a stream it gets about w
 * times the device time of a share-1 session. */
#ifndef DEVQ_FAIR_H
#define DEVQ_FAIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DEVQ_FAIR_MAX_SHARES 64
#define DEVQ_FAIR_MAX_WEIGHT 64

struct devq_daemon;
struct devq_session;
struct devq_op;

struct devq_fair_sess {
	struct devq_op *head, *tail; /* waiting, in submit order (op->fnext) */
	uint64_t waiting;
	unsigned inside; /* handed to the backend, completion not yet processed */
	struct devq_session *rr_prev, *rr_next;
	bool in_rr; /* in the daemon's turn list: has waiting ops */
	unsigned cap; /* k times the user's share; 0 until first needed */
};

struct devq_fair {
	struct devq_session *rr_head, *rr_tail; /* sessions with waiting ops */
	uid_t share_uid[DEVQ_FAIR_MAX_SHARES];
	unsigned share[DEVQ_FAIR_MAX_SHARES];
	unsigned nshares;
};

/* Parses "user:weight[,user:weight...]" (names or uids, weights 1..64);
 * users not listed have share 1.  0, or -EINVAL with err naming the
 * problem. */
int devq_fair_init(struct devq_fair *f, const char *shares, char *err, size_t errlen);

/* A validated op: to the backend now if its session has a free slot and
 * nothing waiting ahead of it, else to the back of its session's line. */
void devq_fair_submit(struct devq_op *op);
/* The loop processed op's completion: its slot is free. */
void devq_fair_done(struct devq_op *op);
/* Hands waiting ops to free slots, one per session per turn. */
void devq_fair_kick(struct devq_daemon *d);

#endif
