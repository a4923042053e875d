/* SPDX-License-Identifier: Apache-2.0 */
/* Status requests: the daemon's state and counters, and each session's
 * (devctl status, top and metrics).  A non-admin session sees its own uid's
 * sessions, queues and per-uid counters, and at most its own uid among
 * those refused after device losses; the daemon-wide aggregates (ops,
 * buffers, busy time, latency histograms) are seen by all. */
#include "requests/requests.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/metrics.h"
#include "core/outbox.h"
#include "core/session.h"
#include "core/tenant.h"
#include "core/timeline.h"

/* Everything a Status message points at, freed in one go after packing. */
struct scratch {
	Devq__MetricsCodeCount codes[DEVQ_METRICS_CODES], *codep[DEVQ_METRICS_CODES];
	Devq__MetricsUser users[DEVQ_METRICS_USERS], *userp[DEVQ_METRICS_USERS];
	Devq__MetricsHistogram hist[DEVQ_METRICS_PHASES], *histp[DEVQ_METRICS_PHASES];
	uint64_t le[DEVQ_METRICS_BOUNDS];
	uint64_t counts[DEVQ_METRICS_PHASES][DEVQ_METRICS_BOUNDS + 1];
	size_t nqueue_arrays;
	void *queue_arrays[]; /* per session: MetricsQueue items, then pointers */
};

/* What a session may see of another's: its own uid's, or everything when it
 * is an admin (root or the admin group) or an observer (observer-groups).
 * Aggregates are seen by all. */
static bool status_visible(const struct devq_session *s, uid_t uid)
{
	return s->admin || s->observer || uid == s->uid;
}

/* A tenant's three op histograms and its labels, pointing into sc. */
struct tenant_extra {
	Devq__MetricsHistogram hist[DEVQ_METRICS_TPHASES], *histp[DEVQ_METRICS_TPHASES];
	char *labels[DEVQ_TENANT_LABELS];
};

static int metrics_status(const struct devq_session *s, Devq__Status *st,
			  Devq__SessionStatus *const *items, struct devq_session *const *shown,
			  size_t nitems, void **scratch)
{
	*scratch = NULL;
	struct scratch *sc = calloc(1, sizeof(*sc) + nitems * sizeof(void *));
	if (!sc)
		return -ENOMEM;
	*scratch = sc;
	const struct devq_engine *d = s->e;
	const struct devq_metrics *m = &d->metrics;
	size_t n = 0;
	for (int c = 1; c < DEVQ_METRICS_CODES; c++) {
		if (!m->op_errors[c])
			continue;
		devq__metrics_code_count__init(&sc->codes[n]);
		sc->codes[n].code = (Devq__Code)c;
		sc->codes[n].count = m->op_errors[c];
		sc->codep[n] = &sc->codes[n];
		n++;
	}
	st->n_op_errors = n;
	st->op_errors = sc->codep;
	st->device_busy_ns = m->device_busy_ns;
	size_t nu = 0;
	for (unsigned i = 0; i < m->nusers; i++) {
		if (!status_visible(s, m->users[i].uid))
			continue;
		devq__metrics_user__init(&sc->users[nu]);
		sc->users[nu].uid = m->users[i].uid;
		sc->users[nu].ops_completed = m->users[i].ops_completed;
		sc->users[nu].ops_failed = m->users[i].ops_failed;
		sc->users[nu].device_busy_ns = m->users[i].device_busy_ns;
		sc->userp[nu] = &sc->users[nu];
		nu++;
	}
	st->n_users = nu;
	st->users = sc->userp;
	memcpy(sc->le, devq_metrics_bounds_ns, sizeof(sc->le));
	for (int p = 0; p < DEVQ_METRICS_PHASES; p++) {
		Devq__MetricsHistogram *h = &sc->hist[p];
		devq__metrics_histogram__init(h);
		h->phase = (char *)devq_metrics_phase_names[p];
		h->n_le_ns = DEVQ_METRICS_BOUNDS;
		h->le_ns = sc->le;
		memcpy(sc->counts[p], m->hist[p], sizeof(sc->counts[p]));
		h->n_counts = DEVQ_METRICS_BOUNDS + 1;
		h->counts = sc->counts[p];
		h->sum_ns = m->hist_sum[p];
		h->count = m->hist_count[p];
		sc->histp[p] = h;
	}
	st->n_phases = DEVQ_METRICS_PHASES;
	st->phases = sc->histp;

	/* Sessions, as the caller listed them. */
	for (size_t i = 0; i < nitems; i++) {
		const struct devq_session *t = shown[i];
		Devq__SessionStatus *ss = items[i];
		ss->ops_failed = t->trace_failed;
		size_t nq = t->queues.count;
		if (!nq)
			continue;
		void *arr = calloc(nq, sizeof(Devq__MetricsQueue) + sizeof(Devq__MetricsQueue *));
		if (!arr)
			return -ENOMEM;
		sc->queue_arrays[sc->nqueue_arrays++] = arr;
		Devq__MetricsQueue *mq = arr;
		Devq__MetricsQueue **mp = (Devq__MetricsQueue **)(mq + nq);
		size_t k = 0;
		for (size_t j = 0; j < t->queues.cap && k < nq; j++) {
			const struct devq_timeline *q = t->queues.slots[j].val;
			if (!q)
				continue;
			devq__metrics_queue__init(&mq[k]);
			mq[k].queue = q->id;
			mq[k].stream = q->stream;
			mq[k].depth = q->submitted - q->completed;
			mp[k] = &mq[k];
			k++;
		}
		ss->n_queue_depths = k;
		ss->queue_depths = mp;
	}
	return 0;
}

static void metrics_status_free(void *scratch)
{
	struct scratch *sc = scratch;
	if (!sc)
		return;
	for (size_t i = 0; i < sc->nqueue_arrays; i++)
		free(sc->queue_arrays[i]);
	free(sc);
}

/* The tenants s may see, into msg/ptr (room for max); how many. */
static size_t tenant_rows(const struct devq_session *s, Devq__TenantStatus *msg,
			  Devq__TenantStatus **ptr, struct tenant_extra *x, uint64_t *tle,
			  size_t max)
{
	size_t n = 0;
	for (struct devq_tenant *t = s->e->tenants; t && n < max; t = t->next) {
		if (!status_visible(s, t->uid))
			continue;
		const struct devq_fair_tenant *f = &t->fair;
		Devq__TenantStatus *m = &msg[n];
		devq__tenant_status__init(m);
		m->name = t->name;
		m->uid = t->uid;
		m->weight = f->weight;
		m->sessions = t->sessions;
		uint64_t inside;
		devq_fair_tenant_queue(s->e, t, &m->ops_waiting, &m->queued_ns, &inside);
		m->ops_inside = (uint32_t)inside;
		m->ops_done = f->ops_done;
		m->device_ns = f->device_ns;
		m->wait_ns = f->wait_ns;
		m->wait_max_ns = f->wait_max_ns;
		m->waits = f->waits;
		m->deadline_exceeded = t->deadline_exceeded;
		/* The tenant's own counts are sent as they are: packing copies
		 * them, and nothing runs between here and the send. */
		for (int p = 0; p < DEVQ_METRICS_TPHASES; p++) {
			Devq__MetricsHistogram *h = &x[n].hist[p];
			devq__metrics_histogram__init(h);
			h->phase = (char *)devq_metrics_tphase_names[p];
			h->n_le_ns = DEVQ_METRICS_TBOUNDS;
			h->le_ns = tle;
			h->n_counts = DEVQ_METRICS_TBOUNDS + 1;
			h->counts = t->hist.hist[p];
			h->sum_ns = t->hist.sum[p];
			h->count = t->hist.count[p];
			x[n].histp[p] = h;
		}
		m->n_op_seconds = DEVQ_METRICS_TPHASES;
		m->op_seconds = x[n].histp;
		for (unsigned k = 0; k < t->nlabels && k < DEVQ_TENANT_LABELS; k++)
			x[n].labels[k] = (char *)t->labels[k];
		m->n_labels = t->nlabels < DEVQ_TENANT_LABELS ? t->nlabels : DEVQ_TENANT_LABELS;
		m->labels = x[n].labels;
		ptr[n] = m;
		n++;
	}
	return n;
}

void devq_status_handle(struct devq_session *s, const Devq__GetStatus *req)
{
	struct devq_engine *d = s->e;
	size_t live = 0;
	for (struct devq_session *t = d->sessions; t; t = t->next)
		live += status_visible(s, t->uid);
	/* A scraper asks for no per-session rows: none is built. */
	size_t n = req && req->no_sessions ? 0 : live;
	Devq__SessionStatus *items = calloc(n ? n : 1, sizeof(*items));
	Devq__SessionStatus **ptrs = calloc(n ? n : 1, sizeof(*ptrs));
	struct devq_session **shown = calloc(n ? n : 1, sizeof(*shown));
	if (!items || !ptrs || !shown) {
		free(items);
		free(ptrs);
		free(shown);
		devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "get_status", NULL, NULL,
				   "out of memory");
		return;
	}
	size_t i = 0;
	for (struct devq_session *t = d->sessions; t && i < n; t = t->next) {
		if (!status_visible(s, t->uid))
			continue;
		shown[i] = t;
		devq__session_status__init(&items[i]);
		items[i].id = t->id;
		items[i].pid = (uint32_t)t->pid;
		items[i].uid = t->uid;
		items[i].name = t->name;
		items[i].queues = (uint32_t)t->queues.count;
		items[i].ops_in_flight = t->ops_in_flight;
		items[i].buffers = t->nbufs;
		items[i].bytes_mapped = t->bytes_mapped;
		items[i].ops_completed = t->ops_completed;
		ptrs[i] = &items[i];
		i++;
	}
	Devq__Status st = DEVQ__STATUS__INIT;
	st.backend = (char *)d->be->name;
	st.device = d->be->device;
	st.streams = d->be->streams - d->be->high_streams;
	st.uptime_ns = devq_now_ns() - d->start_ns;
	st.n_sessions = n;
	st.sessions = ptrs;
	st.ops_in_flight = d->ops_in_flight;
	st.buffers = d->nbufs;
	st.bytes_mapped = d->bytes_mapped;
	st.sessions_total = d->sessions_total;
	st.ops_completed = d->ops_completed;
	st.ops_failed = d->ops_failed;
	st.gpu = d->gpu;
	st.uuid = d->uuid;
	st.device_stalled = d->device_stalled;
	st.sessions_live = (uint32_t)live;
	/* Uids refused after device losses, as the server keeps them: an
	 * admin sees every one, anyone else at most their own uid. */
	struct devq_refused_uid ref[DEVQ_REFUSED_UIDS_MAX];
	Devq__RefusedUid rmsg[DEVQ_REFUSED_UIDS_MAX], *rptr[DEVQ_REFUSED_UIDS_MAX];
	unsigned nref = d->ev.refused_uids ? d->ev.refused_uids(d->ev.ud, ref, DEVQ_REFUSED_UIDS_MAX)
					   : 0;
	size_t nshown = 0;
	for (unsigned k = 0; k < nref && k < DEVQ_REFUSED_UIDS_MAX; k++) {
		if (!status_visible(s, ref[k].uid))
			continue;
		devq__refused_uid__init(&rmsg[nshown]);
		rmsg[nshown].uid = ref[k].uid;
		rmsg[nshown].losses = ref[k].losses;
		rmsg[nshown].until_s = ref[k].until_s;
		rptr[nshown] = &rmsg[nshown];
		nshown++;
	}
	st.n_refused_uids = nshown;
	st.refused_uids = rptr;
	size_t ntenants = 0;
	for (const struct devq_tenant *t = d->tenants; t; t = t->next)
		ntenants += status_visible(s, t->uid);
	Devq__TenantStatus *tmsg = calloc(ntenants ? ntenants : 1, sizeof(*tmsg));
	Devq__TenantStatus **tptr = calloc(ntenants ? ntenants : 1, sizeof(*tptr));
	struct tenant_extra *textra = calloc(ntenants ? ntenants : 1, sizeof(*textra));
	uint64_t tle[DEVQ_METRICS_TBOUNDS];
	memcpy(tle, devq_metrics_tbounds_ns, sizeof(tle));
	if (tmsg && tptr && textra) {
		st.n_tenants = tenant_rows(s, tmsg, tptr, textra, tle, ntenants);
		st.tenants = tptr;
	}
	void *metrics;
	if (metrics_status(s, &st, ptrs, shown, n, &metrics) < 0)
		devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "get_status", NULL, NULL,
				   "out of memory");
	else
	{
		Devq__DaemonMessage m = DEVQ__DAEMON_MESSAGE__INIT;
		m.body_case = DEVQ__DAEMON_MESSAGE__BODY_STATUS;
		m.status = &st;
		devq_outbox_send(s, &m, NULL, 0);
	}
	metrics_status_free(metrics);
	free(tmsg);
	free(tptr);
	free(textra);
	free(items);
	free(ptrs);
	free(shown);
}

