/* SPDX-License-Identifier: Apache-2.0 */
/* A session's outbox: replies, errors and completion records queued for the
 * client, and the engine's list of sessions with something to send (the
 * server writes them out).  Loop thread. */
#ifndef DEVQ_OUTBOX_H
#define DEVQ_OUTBOX_H

#include <stdint.h>

#include "core/engine.h"
#include "core/session.h"
#include "devq.pb-c.h"

struct devq_session;
struct devq_buf;

/* Queues m (and fds, which the outbox owns from here; closed at once when
 * the session is disconnected).  Pending completion records go first. */
void devq_outbox_send(struct devq_session *s, const Devq__DaemonMessage *m, const int *fds,
		      unsigned nfds);
/* Sends Error{code, message, request, buffer, queue} and logs it. */
void devq_outbox_error(struct devq_session *s, Devq__Code code, const char *request,
		       const struct devq_buf *b, const uint32_t *queue, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
/* Puts s on the engine's dirty list: its outbox is to be flushed, and (once
 * disconnected) whether it can be freed checked.  Inline: once per
 * completion. */
static inline void devq_outbox_mark_dirty(struct devq_session *s)
{
	if (s->dirty)
		return;
	s->dirty = true;
	s->dirty_next = s->e->dirty;
	s->e->dirty = s;
}
/* Encodes the completion records gathered since the last call into one
 * Completions frame: 0, or -ENOMEM (the records are lost, and logged). */
int devq_outbox_push_completions(struct devq_session *s);

#endif
