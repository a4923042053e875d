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

struct devq_admin;
struct devq_session;

/* dispatch.c: one ClientMessage, from the socket or (ring) the submit
 * ring, answered by its entry in the table of requests; the admin calls
 * reach the server's socket work through a.  Fds of f that it does not
 * claim stay in f for the caller to close. */
void devq_dispatch_message(struct devq_admin *a, struct devq_session *s,
			   const Devq__ClientMessage *m, struct devq_frame *f, uint64_t t_received,
			   bool ring);

/* held.c: backpressure.  Submits the ops of m in order until the in-flight
 * quota is reached and holds the rest; the server stops reading the
 * session while ops are held.  0, or -ENOMEM (the session is closed). */
int devq_held_submit(struct devq_session *s, const Devq__Submit *m, uint64_t t_received);
/* Submits held ops while the quota allows; true when none are left held. */
bool devq_held_resume(struct devq_session *s);

/* tracereq.c: answers a TraceRequest (TraceReply or Error{request "trace"}).
 * An error is queued at once; a reply's ops are selected and packed on the
 * trace builder thread (s->trace_job set meanwhile, and
 * devq_tracereq_pending true), which wakes the loop (devq_tracereq_start's
 * eventfd) when they are: devq_tracereq_collect then marks the session dirty, and its next
 * devq_tracereq_step finishes the reply and queues it (true: the job is
 * gone).  Without a builder thread, each step builds a part, returning by
 * deadline_ns (plus one record's work).  The server reads nothing more of
 * the session until the reply is queued, which keeps replies in order. */
void devq_tracereq_handle(struct devq_session *s, const Devq__TraceRequest *r);
bool devq_tracereq_step(struct devq_session *s, uint64_t deadline_ns);
/* The builder's wake-up: an eventfd that turns readable when replies are
 * handed back (read it, then devq_tracereq_collect), or -1 when there is
 * none and the loop builds every reply.  Call once before serving. */
int devq_tracereq_start(void);
/* Whether s's reply is with the builder (no step can finish it yet). */
bool devq_tracereq_pending(const struct devq_session *s);
/* Loop thread: the replies the builder handed back (cheap when none). */
void devq_tracereq_collect(void);
/* Drops a reply being built (the session is closing). */
void devq_tracereq_abort(struct devq_session *s);
/* Stops the builder thread (before the loop's wake-up handle closes);
 * later requests are built on the loop. */
void devq_tracereq_fini(void);

/* status.c: answers GetStatus (req: its options; NULL: the defaults). */
void devq_status_handle(struct devq_session *s, const Devq__GetStatus *req);

#endif
