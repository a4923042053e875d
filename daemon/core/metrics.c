/* See metrics.h.  Fixed-size tables: no allocation on the completion path
 * and nothing to free. */
#include "metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

const char *const devq_metrics_phase_names[DEVQ_METRICS_PHASES] = { "submit", "queued", "device",
								      "sync" };

/* 10 us .. 10 s: from a bare submit to the longest op the default allows. */
const uint64_t devq_metrics_bounds_ns[DEVQ_METRICS_BOUNDS] = {
	10000,	   25000,     50000,	  100000,     250000,	  500000,      1000000,
	2500000,   5000000,   10000000,	  50000000,   100000000,  1000000000,  10000000000,
};

static void observe(struct devq_metrics *m, int phase, uint64_t from, uint64_t to)
{
	if (!from || !to || to < from)
		return;
	uint64_t v = to - from;
	/* The first bound above v, by halving: four looks instead of up to
	 * fourteen, at four observations per completed op. */
	unsigned lo = 0, n = DEVQ_METRICS_BOUNDS;
	while (n) {
		unsigned half = n / 2;
		if (v > devq_metrics_bounds_ns[lo + half]) {
			lo += half + 1;
			n -= half + 1;
		} else {
			n = half;
		}
	}
	m->hist[phase][lo]++;
	m->hist_sum[phase] += v;
	m->hist_count[phase]++;
}

static struct devq_metrics_user *user_slot(struct devq_metrics *m, uid_t uid)
{
	for (unsigned i = 0; i < m->nusers; i++)
		if (m->users[i].uid == (uint32_t)uid)
			return &m->users[i];
	if (m->nusers < DEVQ_METRICS_USERS - 1) {
		struct devq_metrics_user *u = &m->users[m->nusers++];
		memset(u, 0, sizeof(*u));
		u->uid = (uint32_t)uid;
		return u;
	}
	/* Table full: the overflow slot, always last. */
	struct devq_metrics_user *u = &m->users[DEVQ_METRICS_USERS - 1];
	if (m->nusers == DEVQ_METRICS_USERS - 1) {
		memset(u, 0, sizeof(*u));
		u->uid = UINT32_MAX;
		m->nusers++;
	}
	return u;
}

void devq_metrics_op_done(struct devq_metrics *m, uid_t uid, int code, uint64_t client_submit,
			  uint64_t handoff, uint64_t device_start, uint64_t device_end,
			  uint64_t observed)
{
	uint64_t busy = device_start && device_end > device_start ? device_end - device_start : 0;
	m->device_busy_ns += busy;
	if (code)
		m->op_errors[code > 0 && code < DEVQ_METRICS_CODES ? code : DEVQ_METRICS_CODES - 1]++;
	struct devq_metrics_user *u = user_slot(m, uid);
	u->ops_completed++;
	u->ops_failed += code != 0;
	u->device_busy_ns += busy;
	observe(m, 0, client_submit, handoff);
	observe(m, 1, handoff, device_start);
	observe(m, 2, device_start, device_end);
	observe(m, 3, device_end, observed);
}

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

int devq_metrics_status(const struct devq_daemon *d, Devq__Status *st,
			Devq__SessionStatus *const *items, size_t nitems, void **scratch)
{
	*scratch = NULL;
	struct scratch *sc = calloc(1, sizeof(*sc) + nitems * sizeof(void *));
	if (!sc)
		return -ENOMEM;
	*scratch = sc;
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
	for (unsigned i = 0; i < m->nusers; i++) {
		devq__metrics_user__init(&sc->users[i]);
		sc->users[i].uid = m->users[i].uid;
		sc->users[i].ops_completed = m->users[i].ops_completed;
		sc->users[i].ops_failed = m->users[i].ops_failed;
		sc->users[i].device_busy_ns = m->users[i].device_busy_ns;
		sc->userp[i] = &sc->users[i];
	}
	st->n_users = m->nusers;
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

	/* Sessions, in the order the caller listed them (d->sessions). */
	size_t i = 0;
	for (const struct devq_session *t = d->sessions; t && i < nitems; t = t->next, i++) {
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
			const struct devq_queue *q = t->queues.slots[j].val;
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

void devq_metrics_status_free(void *scratch)
{
	struct scratch *sc = scratch;
	if (!sc)
		return;
	for (size_t i = 0; i < sc->nqueue_arrays; i++)
		free(sc->queue_arrays[i]);
	free(sc);
}
