/* SPDX-License-Identifier: Apache-2.0 */
/* Ordering, hand-off and completion of ops; see sched.c's opening comment.
 * Loop thread, except devq_sched_on_complete. */
#ifndef DEVQ_SCHED_H
#define DEVQ_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devq.pb-c.h"

struct devq_engine;
struct devq_session;
struct devq_bop;

/* Submits one op of s: assigns its point, validates it, collects its waits
 * and hazards and gives it to fairness (core/fair.h).  0 once the op has
 * its point (an op that fails validation completes as failed there, in
 * order); NOT_FOUND with err filled in for a queue that is not open (no
 * point taken); -ENOMEM when the point could not be tracked. */
int devq_sched_submit(struct devq_session *s, const Devq__Op *m, uint64_t t_received, char *err,
		      size_t errlen);
/* Brackets the submits of one frame (requests/held.c): the ops submitted
 * in between are validated one by one as always, and handed to fairness
 * and the backend together at _end, under one lock each instead of one
 * per op.  Without the bracket each op is handed over as it is
 * submitted. */
void devq_sched_batch_begin(struct devq_engine *e);
void devq_sched_batch_end(struct devq_engine *e);
/* Processes the completions the backend reported since the last drain:
 * records, releases, counters; refills the backend (fairness).  Returns
 * how many of them had been deferred (published in a page without waking
 * the loop): the loop polls while they come (engine.h, cmpl_parked). */
unsigned devq_sched_drain(struct devq_engine *e);
/* Loop thread: the loop stops polling for deferred completions; from now
 * on the first one wakes it.  True when some are already waiting: the
 * caller must see that they are drained. */
bool devq_sched_park(struct devq_engine *e);
/* Loop thread: the loop polls for deferred completions again (at most a
 * millisecond apart); they no longer wake it. */
void devq_sched_unpark(struct devq_engine *e);
/* The backend's completion callback (backend.h), ud being the engine:
 * any thread. */
void devq_sched_on_complete(void *ud, struct devq_bop *bop);

#endif
