/* SPDX-License-Identifier: Apache-2.0 */
/* Session lifetime; see session.h.  A session outlives its connection
 * while ops or buffers of it are in flight: it is freed once the transport
 * let go, its outbox is off the dirty list, and nothing refers to it. */
#include "core/session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/buffer.h"
#include "core/cpage.h"
#include "core/engine.h"
#include "core/timeline.h"
#include "devq.pb-c.h"

struct devq_session *devq_session_new(struct devq_engine *e, pid_t pid, uid_t uid, gid_t gid)
{
	struct devq_session *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->e = e;
	s->id = ++e->next_session_id;
	s->pid = pid;
	s->uid = uid;
	s->gid = gid;
	s->held = true;
	s->connected = true;
	atomic_init(&s->cancel, false);
	atomic_init(&s->cp_eager, false);
	devq_tx_init(&s->tx);
	s->next = e->sessions;
	if (s->next)
		s->next->prev = s;
	e->sessions = s;
	e->sessions_total++;
	return s;
}

int devq_session_admit(struct devq_session *s, char *why, size_t whylen)
{
	int r = devq_quota_attach(s, why, whylen);
	if (r)
		return r;
	if (devq_fair_attach(s) < 0) {
		snprintf(why, whylen, "out of memory");
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	return 0;
}

void devq_session_disconnect(struct devq_session *s)
{
	if (!s->connected)
		return;
	s->connected = false;
	s->ncmpl = 0;
	devq_tx_fini(&s->tx);
	atomic_store(&s->cancel, true);
	size_t n = 0;
	struct devq_buf **list = malloc((s->bufs.count ? s->bufs.count : 1) * sizeof(*list));
	if (!list) {
		/* Cannot snapshot: release one at a time from the map. */
		for (size_t i = 0; i < s->bufs.cap;) {
			struct devq_buf *b = s->bufs.slots[i].val;
			if (b && !b->releasing) {
				devq_buffer_release(b);
				i = 0; /* the map may have shifted */
				continue;
			}
			i++;
		}
		return;
	}
	for (size_t i = 0; i < s->bufs.cap; i++)
		if (s->bufs.slots[i].val)
			list[n++] = s->bufs.slots[i].val;
	for (size_t i = 0; i < n; i++)
		if (!list[i]->releasing)
			devq_buffer_release(list[i]);
	free(list);
}

static void session_free(struct devq_session *s)
{
	struct devq_engine *e = s->e;
	if (s->prev)
		s->prev->next = s->next;
	else
		e->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	devq_quota_detach(s); /* before the queues go: it counts them */
	devq_fair_fini(s);
	for (size_t i = 0; i < s->queues.cap; i++)
		if (s->queues.slots[i].val)
			devq_timeline_free(e, s->queues.slots[i].val);
	devq_idmap_fini(&s->queues);
	devq_idmap_fini(&s->bufs);
	devq_tx_fini(&s->tx);
	free(s->cmpl);
	devq_cpage_free(s->cpage);
	devq_slog(DEVQ_LOG_DEBUG, s, -1, -1, -1, "freed");
	free(s);
}

bool devq_session_maybe_free(struct devq_session *s)
{
	if (s->connected || s->held || s->dirty || s->ops_in_flight || s->nbufs)
		return false;
	session_free(s);
	return true;
}

void devq_session_unhold(struct devq_session *s)
{
	s->held = false;
	devq_session_maybe_free(s);
}
