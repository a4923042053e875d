/* SPDX-License-Identifier: Apache-2.0 */
/* Quotas: what one session and one Unix user may hold in the daemon.
 *
 * Per session and per user: buffers, pinned (shared, mapped) bytes, device
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

#include "core/loopshare.h"
#include "devq.pb-c.h"

struct devq_config;
struct devq_session;

/* Usage of one Unix user, across its sessions (live and draining). */
struct devq_user {
	struct devq_user *next;
	uid_t uid;
	unsigned sessions;
	uint64_t buffers, pinned, device, queues, ops;
	struct devq_loop_share loop; /* its share of the loop thread (server.c) */
};

struct devq_quota_sess {
	struct devq_user *user;
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
/* An op of the session whose quota state q is entered (+1) or left (-1)
 * the daemon.  Inline: it runs twice per op. */
static inline void devq_quota_op(struct devq_quota_sess *q, int sign)
{
	if (q->user)
		q->user->ops = sign > 0 ? q->user->ops + 1 : q->user->ops - 1;
}

/* Whether s (or its user) is at its in-flight quota: stop taking ops. */
bool devq_quota_over_ops(const struct devq_session *s);
/* Whether s may be read again (below three quarters of the quota). */
bool devq_quota_may_resume(const struct devq_session *s);

#endif
