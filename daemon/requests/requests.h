/* SPDX-License-Identifier: Apache-2.0 */
/* Requests: what each client message means for its session.  Called by the
 * server with one decoded frame at a time; answers go to the session's
 * outbox (core/outbox.h).  Loop thread. */
#ifndef DEVQ_REQUESTS_H
#define DEVQ_REQUESTS_H

#include <stdbool.h>
#include <stdint.h>

#include "devq.pb-c.h"
#include "frame.h"

struct devq_session;

/* dispatch.c: one ClientMessage; fds of f that it does not claim stay in
 * f for the caller to close. */
void devq_dispatch_message(struct devq_session *s, const Devq__ClientMessage *m,
			   struct devq_frame *f, uint64_t t_received);

/* held.c: backpressure.  Submits the ops of m in order until the in-flight
 * quota is reached and holds the rest; the server stops reading the
 * session while ops are held.  0, or -ENOMEM (the session is closed). */
int devq_held_submit(struct devq_session *s, const Devq__Submit *m, uint64_t t_received);
/* Submits held ops while the quota allows; true when none are left held. */
bool devq_held_resume(struct devq_session *s);

/* tracereq.c: answers a TraceRequest (TraceReply or Error{request "trace"}).
 * An error is queued at once; a reply is built in steps (s->trace_job set
 * meanwhile), each devq_tracereq_step returning by deadline_ns (plus one
 * record's work), so that a whole ring does not hold the loop: true once
 * the reply is queued and the job gone.  The server reads nothing more of
 * the session until then, which keeps replies in order. */
void devq_tracereq_handle(struct devq_session *s, const Devq__TraceRequest *r);
bool devq_tracereq_step(struct devq_session *s, uint64_t deadline_ns);
/* Drops a reply being built (the session is closing). */
void devq_tracereq_abort(struct devq_session *s);

/* status.c: answers GetStatus. */
void devq_status_handle(struct devq_session *s);

#endif
