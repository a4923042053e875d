/* SPDX-License-Identifier: Apache-2.0 */
/* The op recorder: see trace.h.  Everything here runs on the loop thread
 * but devq_trace_read. */
#include "core/trace.h"

#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "base/log.h"
#include "core/buffer.h"
#include "core/job.h"
#include "core/repo.h"
#include "core/session.h"
#include "core/timeline.h"

int devq_trace_ring_new(const struct devq_config *cfg, unsigned streams,
			struct devq_trace_ring **out)
{
	*out = NULL;
	struct devq_trace_ring *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->streams = streams;
	t->cap = cfg->trace_records;
	t->busy_ns = calloc(streams ? streams : 1, sizeof(*t->busy_ns));
	if (t->cap)
		t->recs = calloc(t->cap, sizeof(*t->recs));
	if (!t->busy_ns || (t->cap && !t->recs)) {
		log_err("trace: out of memory (%u records, %u stream counters)", t->cap,
			streams ? streams : 1);
		devq_trace_ring_free(t);
		return -ENOMEM;
	}
	if (cfg->admin_group && *cfg->admin_group) {
		/* Resolved once: a group renamed later keeps its gid here. */
		struct group *g = getgrnam(cfg->admin_group);
		if (!g) {
			log_err("admin group '%s' does not exist (see --admin-group)",
				cfg->admin_group);
			devq_trace_ring_free(t);
			return -ENOENT;
		}
		t->admin_group_set = true;
		t->admin_gid = g->gr_gid;
	}
	*out = t;
	return 0;
}

void devq_trace_ring_free(struct devq_trace_ring *t)
{
	if (!t)
		return;
	free(t->recs);
	free(t->busy_ns);
	free(t);
}

void devq_trace_record(struct devq_trace_ring *t, const struct devq_job *op)
{
	const struct devq_bop *b = &op->b;
	if (b->code != DEVQ__CODE__OK)
		op->s->trace_failed++;
	/* In-process drivers (the fuzzer) may run without a ring. */
	if (!t)
		return;
	if (b->stream < t->streams && b->t_end > b->t_start)
		t->busy_ns[b->stream] += b->t_end - b->t_start;
	if (!t->cap)
		return;
	/* The loop is the one writer: plain loads of its own counter. */
	uint64_t n = atomic_load_explicit(&t->recorded, memory_order_relaxed);
	atomic_store_explicit(&t->writing, n + 1, memory_order_relaxed);
	/* The mark before any byte of the slot (the sequence lock's begin). */
	atomic_thread_fence(memory_order_release);
	struct devq_trace_rec *r = &t->recs[n % t->cap];
	const struct devq_session *s = op->s;
	r->session = s->id;
	r->uid = (uint32_t)s->uid;
	r->pid = (uint32_t)s->pid;
	memcpy(r->name, s->name, sizeof(r->name) - 1);
	r->name[sizeof(r->name) - 1] = '\0';
	r->queue = op->q->id;
	r->point = op->point;
	r->stream = b->stream;
	/* A failed op keeps its kernel when validation got that far. */
	if (op->exe)
		r->exec = (int32_t)op->exe->id;
	else if (b->kernel)
		r->exec = (int32_t)(b->kernel - devq_kernels);
	else
		r->exec = b->kind == DEVQ_BOP_COPY ? -1 : b->kind == DEVQ_BOP_FILL ? -2 : -3;
	r->code = b->code;
	r->t[0] = op->t_client_submit;
	r->t[1] = op->t_received;
	r->t[2] = b->t_handoff;
	r->t[3] = b->t_start;
	r->t[4] = b->t_end;
	r->t[5] = op->t_observed;
	r->t[6] = b->enqueue_ns;
	unsigned nw = b->nwaits < DEVQ_TRACE_WAITS ? b->nwaits : DEVQ_TRACE_WAITS;
	for (unsigned i = 0; i < nw; i++) {
		const struct devq_job *w = devq_job_of(b->waits[i]);
		r->waits[i].queue = w->q->id;
		r->waits[i].point = w->point;
		r->waits[i].kind = i >= b->nstrict ? DEVQ__TRACE_WAIT__KIND__HAZARD
				   : w->q == op->q ? DEVQ__TRACE_WAIT__KIND__QUEUE
						   : DEVQ__TRACE_WAIT__KIND__EXPLICIT;
	}
	r->nwaits = (uint8_t)nw;
	r->waits_dropped = (uint8_t)(b->nwaits - nw > 255 ? 255 : b->nwaits - nw);
	unsigned nb = op->nbufs < DEVQ_TRACE_BUFS ? op->nbufs : DEVQ_TRACE_BUFS;
	r->nbufs = (uint8_t)nb;
	for (unsigned i = 0; i < nb; i++) {
		const struct devq_buf *x = op->bufs[i];
		r->bufs[i].id = x->id;
		r->bufs[i].access = (uint8_t)op->acc[i];
		/* This op is the last user of a buffer whose release is pending:
		 * its completion frees the buffer and sends BufferReleased. */
		r->bufs[i].released = x->releasing && x->inflight == 1;
	}
	atomic_store_explicit(&t->recorded, n + 1, memory_order_release);
}

_Static_assert(sizeof(struct devq_trace_rec) % sizeof(uint64_t) == 0,
	       "devq_trace_read copies records a word at a time");

/* Record a + cap, the next in record a's slot, marks itself before its
 * first byte: writing <= a + cap after the copy means it had not started. */
static bool still_whole(const struct devq_trace_ring *t, uint64_t a)
{
	atomic_thread_fence(memory_order_acquire);
	return atomic_load_explicit(&t->writing, memory_order_relaxed) - a <= t->cap;
}

/* The reader's side of the sequence lock.  The copy races with the loop
 * rewriting the slot by design, and the counters tell afterwards whether
 * it did: the copy is of volatile words (no memcpy, which the thread
 * sanitizer intercepts and checks) in a function it does not instrument,
 * the way a sequence lock's reader is written for it. */
__attribute__((no_sanitize_thread)) bool devq_trace_read(const struct devq_trace_ring *t,
							  uint64_t a, struct devq_trace_rec *out)
{
	if (!t->cap || a >= devq_trace_recorded(t))
		return false;
	const volatile uint64_t *src = (const volatile uint64_t *)&t->recs[a % t->cap];
	uint64_t *dst = (uint64_t *)out;
	for (size_t i = 0; i < sizeof(*out) / sizeof(uint64_t); i++)
		dst[i] = src[i];
	return still_whole(t, a);
}

__attribute__((no_sanitize_thread)) bool devq_trace_peek(const struct devq_trace_ring *t,
							  uint64_t a, uint32_t *uid,
							  uint64_t *observed)
{
	if (!t->cap || a >= devq_trace_recorded(t))
		return false;
	const volatile struct devq_trace_rec *r = &t->recs[a % t->cap];
	*uid = r->uid;
	*observed = r->t[5];
	return still_whole(t, a);
}
