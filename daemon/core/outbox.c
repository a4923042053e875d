/* SPDX-License-Identifier: Apache-2.0 */
/* Session outboxes; see outbox.h.  The server writes them to the socket:
 * this file only queues frames, in the order the client must see them. */
#include "core/outbox.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/buffer.h"
#include "core/engine.h"
#include "core/session.h"

/* Pending completions go out as one frame, ahead of anything sent after
 * them, so a client sees an op complete before the release it enables.
 * Encoded by hand straight into the send queue (cmpl_enc.c): the same bytes
 * protobuf-c would write, at a fraction of the instructions, and no
 * temporary Completion/Timing structs to allocate. */
int devq_outbox_push_completions(struct devq_session *s)
{
	size_t n = s->ncmpl;
	if (!n && !s->cmpl_nudge)
		return 0;
	s->ncmpl = 0;
	s->cmpl_nudge = false;
	size_t plen = devq_cmpl_enc_size(s->cmpl, n);
	uint8_t *p;
	int r = devq_tx_reserve(&s->tx, DEVQ_FRAME_DAEMON, plen, &p);
	if (r < 0) {
		/* Their clients would wait for them forever: the session ends
		 * once what it has queued is sent. */
		log_err("session %llu: %s; %zu completions lost; closing the session",
			(unsigned long long)s->id, strerror(-r), n);
		s->close_after_flush = true;
		return r;
	}
	devq_cmpl_enc(p, plen, s->cmpl, n);
	return 0;
}

void devq_outbox_send(struct devq_session *s, const Devq__DaemonMessage *m, const int *fds,
		      unsigned nfds)
{
	if (!s->connected) {
		for (unsigned i = 0; i < nfds; i++)
			if (close(fds[i]) < 0)
				log_err("session %llu: close: %s", (unsigned long long)s->id,
					strerror(errno));
		return;
	}
	devq_outbox_push_completions(s);
	if (devq_tx_push(&s->tx, DEVQ_FRAME_DAEMON, &m->base, fds, nfds) < 0) {
		log_err("session %llu: out of memory queueing a reply; closing",
			(unsigned long long)s->id);
		s->close_after_flush = true;
	}
	devq_outbox_mark_dirty(s);
}

void devq_outbox_error(struct devq_session *s, Devq__Code code, const char *request,
		       const struct devq_buf *b, const uint32_t *queue, const char *fmt, ...)
{
	char msg[640]; /* device_lost notices name several sessions */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	devq_slog(DEVQ_LOG_INFO, s, code, queue ? (int64_t)*queue : -1, -1, "%s: %s", request, msg);
	Devq__Error e = DEVQ__ERROR__INIT;
	e.code = code;
	e.message = msg;
	e.request = (char *)request;
	if (b) {
		e.has_buffer = true;
		e.buffer = b->id;
	}
	if (queue) {
		e.has_queue = true;
		e.queue = *queue;
	}
	Devq__DaemonMessage m = DEVQ__DAEMON_MESSAGE__INIT;
	m.body_case = DEVQ__DAEMON_MESSAGE__BODY_ERROR;
	m.error = &e;
	devq_outbox_send(s, &m, NULL, 0);
}
