/* SPDX-License-Identifier: Apache-2.0 */
/* Quotas: what one session and one Unix user may hold in the daemon.
 *
 * Per session and per tenant (a Unix user, or a granted tenant: tenant.h):
 * buffers, pinned (shared, mapped) bytes, device
 * bytes, ops in flight; per user: queues and sessions; per session: fds
 * received and not yet claimed, and bytes queued for a client that does not
 * read.  Going over a memory or count quota is a RESOURCE_EXHAUSTED error on
 * that request.  Going over the in-flight quota is not an error: the daemon
 * stops reading that client (backpressure) and resumes once completions have
 * brought it to three quarters of the quota, so no op is ever dropped.  A
 * client whose unsent replies exceed the outbound quota is disconnected; its
 * work still completes and its buffers are freed after, as on any
 * disconnect. */
#ifndef DEVQ_QUOTA_H
#define DEVQ_QUOTA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "core/tenant.h"
#include "devq.pb-c.h"

struct devq_config;
struct devq_session;


struct devq_quota_sess {
	uint64_t pinned, device; /* bytes, by kind */
	/* The ops of a Submit not yet taken when the quota was reached, in a
	 * copy of their own (the frame's memory is not kept; requests/submit.c
	 * holds and resumes them, the server stops reading meanwhile). */
	Devq__Submit *held;
	size_t held_next;
	uint64_t held_t;
};

/* Fills the quotas left at 0 in the config with the defaults (some depend
 * on the host's memory). */
void devq_quota_defaults(struct devq_config *c);

/* "uid 1000" or "tenant job_42", for messages. */
void devq_quota_who(const struct devq_tenant *t, char *out, size_t n);

/* A new connection: charges its user for a session.  0, or
 * RESOURCE_EXHAUSTED with why filled in (too many sessions of the user, or
 * out of memory). */
int devq_quota_attach(struct devq_session *s, char *why, size_t whylen);
/* The session is being freed: uncharges what it still holds and frees the
 * user's record once unused. */
void devq_quota_detach(struct devq_session *s);

/* Before a buffer of size bytes is made: 0 or RESOURCE_EXHAUSTED with err
 * naming the quota. */
int devq_quota_buffer(struct devq_session *s, uint64_t id, uint64_t size, bool device,
		      char *err, size_t errlen);
/* A buffer was entered (sign +1) or freed (-1). */
void devq_quota_charge_buffer(struct devq_session *s, uint64_t size, bool device, int sign);
/* Before a queue is opened: 0 or RESOURCE_EXHAUSTED with err filled. */
int devq_quota_queue(struct devq_session *s, uint32_t id, char *err, size_t errlen);
/* A queue was opened (queues last as long as their session). */
void devq_quota_queue_opened(struct devq_session *s);
/* An op of tenant t (NULL: none yet) entered (+1) or left (-1) the
 * daemon.  Inline: it runs twice per op.  Called from sched.c alone, where
 * the session's own count of ops in flight moves: fair.c calling it would
 * close a circle (fair -> quota -> tenant -> fair), which
 * tools/check_layers.py counts though an inlined call leaves no symbol. */
static inline void devq_quota_op(struct devq_tenant *t, int sign)
{
	if (t)
		t->ops = sign > 0 ? t->ops + 1 : t->ops - 1;
}

/* Whether s (or its user) is at its in-flight quota: stop taking ops. */
bool devq_quota_over_ops(const struct devq_session *s);
/* Whether s may be read again (below three quarters of the quota). */
bool devq_quota_may_resume(const struct devq_session *s);

#endif
