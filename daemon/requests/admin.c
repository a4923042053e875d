/* SPDX-License-Identifier: Apache-2.0 */
/* The admin calls; see admin.h. */
#include "requests/admin.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "core/engine.h"
#include "core/outbox.h"
#include "core/sched.h"
#include "core/session.h"
#include "core/tenant.h"

/* An evict waiting for the tenant's running ops and buffers. */
struct devq_evict_wait {
	struct devq_evict_wait *next;
	struct devq_tenant *t; /* kept (t->held) until answered */
	uint64_t session;      /* the admin's session, by id: it may be gone */
	uint64_t deadline_ns;
};

void devq_admin_init(struct devq_admin *a, struct devq_engine *e, const struct devq_admin_ops *ops)
{
	a->e = e;
	a->ops = *ops;
	a->control = "";
	a->unavailable = "";
	a->state[0] = '\0';
}

void devq_admin_socks_gone(struct devq_admin *a)
{
	for (struct devq_admin_grant *g = a->grants; g; g = g->next)
		g->sock = NULL;
}

void devq_admin_fini(struct devq_admin *a)
{
	while (a->waits) {
		struct devq_evict_wait *w = a->waits;
		a->waits = w->next;
		free(w);
	}
	while (a->grants) {
		struct devq_admin_grant *g = a->grants;
		a->grants = g->next;
		free(g);
	}
}

unsigned devq_admin_grants_of(const struct devq_admin *a, uid_t uid, char *socks, size_t n)
{
	unsigned count = 0;
	size_t len = 0;
	if (n)
		socks[0] = '\0';
	for (const struct devq_admin_grant *g = a->grants; g; g = g->next) {
		if (g->t->uid != uid || !g->t->granted)
			continue;
		if (g->sock && len < n) {
			int w = snprintf(socks + len, n - len, "%s%s", count ? ", " : "",
					 a->ops.sock_path(a->ops.ud, g->sock));
			len = w < 0 ? n : len + (size_t)w;
		}
		count++;
	}
	return count;
}

/* uid's connected sessions on the main socket that are not an admin's (an
 * admin's own sessions are its tools', not a job's). */
static unsigned main_sessions(const struct devq_admin *a, uid_t uid)
{
	unsigned n = 0;
	for (const struct devq_session *x = a->e->sessions; x; x = x->next)
		n += x->connected && !x->grant && !x->admin && x->uid == uid;
	return n;
}

static struct devq_admin_grant *grant_of(const struct devq_admin *a, const struct devq_tenant *t)
{
	for (struct devq_admin_grant *g = a->grants; g; g = g->next)
		if (g->t == t)
			return g;
	return NULL;
}

/* ---- the state file ---------------------------------------------------- */

/* One line per grant: "TENANT UID SHARES OF MEMORY PRIORITY".  Written whole
 * to a temporary file and renamed over, so a crash leaves the old or the
 * new list, never half of one.  At most DEVQ_GRANTS_MAX short lines. */
static void save(struct devq_admin *a)
{
	if (!a->state[0])
		return;
	char tmp[PATH_MAX + 8];
	snprintf(tmp, sizeof(tmp), "%s.new", a->state);
	FILE *f = fopen(tmp, "we");
	if (!f) {
		log_err("%s: %s: grants will not outlive a restart", tmp, strerror(errno));
		return;
	}
	fprintf(f, "# devqd grants: tenant uid shares of memory_bytes priority\n");
	for (const struct devq_admin_grant *g = a->grants; g; g = g->next)
		fprintf(f, "%s %u %u %u %" PRIu64 " %d\n", g->t->name, (unsigned)g->t->uid,
			g->t->shares, g->t->of, g->t->memory_cap, g->t->priority ? 1 : 0);
	bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
	ok = fclose(f) == 0 && ok;
	if (!ok || rename(tmp, a->state) < 0) {
		log_err("%s: %s: grants will not outlive a restart", a->state, strerror(errno));
		unlink(tmp);
	}
}

static int grant(struct devq_admin *a, const char *name, uid_t uid, uint32_t shares,
		 uint32_t of, uint64_t memory, bool priority, struct devq_tenant **out, char *err,
		 size_t n);

void devq_admin_load(struct devq_admin *a)
{
	FILE *f = fopen(a->state, "re");
	if (!f) {
		if (errno != ENOENT)
			log_warn("%s: %s; no grant restored", a->state, strerror(errno));
		return;
	}
	char line[256];
	unsigned n = 0, lineno = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (line[0] == '#' || line[0] == '\n')
			continue;
		char name[DEVQ_TENANT_NAME_MAX + 2];
		unsigned uid, shares, of;
		uint64_t memory;
		int prio;
		char err[300];
		struct devq_tenant *t;
		if (sscanf(line, "%65s %u %u %u %" SCNu64 " %d", name, &uid, &shares, &of, &memory,
			   &prio) != 6) {
			log_warn("%s:%u: not a grant; skipped", a->state, lineno);
			continue;
		}
		if (grant(a, name, (uid_t)uid, shares, of, memory, prio != 0, &t, err,
			  sizeof(err))) {
			log_warn("%s:%u: %s; skipped", a->state, lineno, err);
			continue;
		}
		n++;
	}
	if (fclose(f) != 0)
		log_warn("%s: close: %s", a->state, strerror(errno));
	if (n)
		log_notice("restored %u grants from %s", n, a->state);
}

/* ---- the calls --------------------------------------------------------- */

static int grant(struct devq_admin *a, const char *name, uid_t uid, uint32_t shares,
		 uint32_t of, uint64_t memory, bool priority, struct devq_tenant **out, char *err,
		 size_t n)
{
	if (!devq_tenant_name_ok(name)) {
		snprintf(err, n, "tenant name '%.80s': 1 to %d characters of A-Z a-z 0-9 _ . -, "
			 "not starting with '.'", name, DEVQ_TENANT_NAME_MAX);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	int code = a->ops.sock_fits(a->ops.ud, name, err, n);
	if (code)
		return code;
	if (uid == (uid_t)-1) {
		snprintf(err, n, "tenant %s: uid %u is not a uid", name, (unsigned)uid);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if (!shares)
		shares = 1;
	if (shares > DEVQ_FAIR_MAX_WEIGHT) {
		snprintf(err, n, "tenant %s: %u shares; at most %d", name, shares,
			 DEVQ_FAIR_MAX_WEIGHT);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if (!of)
		of = shares;
	if (of < shares || of > DEVQ_GRANT_OF_MAX) {
		snprintf(err, n, "tenant %s: %u shares of %u; 'of' must be %u to %d", name, shares,
			 of, shares, DEVQ_GRANT_OF_MAX);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	if (a->unavailable[0]) {
		snprintf(err, n, "%s", a->unavailable);
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	struct devq_tenant *t = devq_tenant_find(a->e, name);
	if (t && t->uid != uid) {
		snprintf(err, n, "tenant %s is granted to uid %u; evict it before granting it to "
			 "uid %u", name, (unsigned)t->uid, (unsigned)uid);
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	if (!t && a->ngranted >= DEVQ_GRANTS_MAX) {
		snprintf(err, n, "tenant %s: %u tenants are granted, the most devqd keeps", name,
			 a->ngranted);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	bool fresh = !t;
	if (devq_tenant_grant(a->e, name, uid, shares, of, memory, priority, &t) < 0) {
		snprintf(err, n, "out of memory");
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	if (fresh) {
		struct devq_admin_grant *g = calloc(1, sizeof(*g));
		code = g ? a->ops.sock_open(a->ops.ud, t, &g->sock, err, n)
			 : DEVQ__CODE__RESOURCE_EXHAUSTED;
		if (!g)
			snprintf(err, n, "out of memory");
		if (code) {
			free(g);
			devq_tenant_ungrant(a->e, t);
			return code;
		}
		g->t = t;
		g->after_session = a->e->next_session_id;
		g->next = a->grants;
		a->grants = g;
		a->ngranted++;
	}
	*out = t;
	return 0;
}

static void grant_msg(const struct devq_admin *a, struct devq_tenant *t, Devq__Grant *g)
{
	devq__grant__init(g);
	const struct devq_admin_grant *k = grant_of(a, t);
	g->tenant = t->name;
	g->uid = t->uid;
	g->socket = k && k->sock ? (char *)a->ops.sock_path(a->ops.ud, k->sock) : "";
	g->shares = t->shares;
	g->of = t->of;
	g->memory_bytes = t->memory_cap;
	g->priority = t->priority;
	g->sessions = t->sessions;
	g->device_ns = t->fair.device_ns;
	g->ops = t->fair.ops_done;
	g->peak_bytes = t->peak;
	g->errors = t->failed;
	g->cancelled = t->cancelled;
	g->bytes = t->pinned + t->device;
	g->ops_in_flight = t->ops;
	g->main_sessions = main_sessions(a, t->uid);
}

static void send_body(struct devq_session *s, Devq__DaemonMessage__BodyCase c, void *body)
{
	Devq__DaemonMessage m = DEVQ__DAEMON_MESSAGE__INIT;
	m.body_case = c;
	m.grant = body; /* every body of the oneof shares one slot */
	devq_outbox_send(s, &m, NULL, 0);
}

void devq_admin_on_grant(struct devq_admin *a, struct devq_session *s, const Devq__AdminGrant *m)
{
	char err[400];
	struct devq_tenant *t;
	int code = grant(a, m->tenant ? m->tenant : "", (uid_t)m->uid, m->shares, m->of,
			 m->memory_bytes, m->priority, &t, err, sizeof(err));
	if (code) {
		devq_outbox_error(s, code, "admin_grant", NULL, NULL, "%s", err);
		return;
	}
	save(a);
	devq_log_fields(DEVQ_LOG_NOTICE,
			&(struct devq_log_ctx){ .uid = t->uid, .tenant = t->name },
			-1, -1, -1, "tenant %s granted to uid %u: %u of %u shares, memory %" PRIu64
			"%s", t->name, (unsigned)t->uid, t->shares, t->of, t->memory_cap,
			t->priority ? ", priority" : "");
	Devq__Grant g;
	grant_msg(a, t, &g);
	/* What the grant does not cover, said to whoever made it: the uid's
	 * sessions on the main socket are its own, under the per-user quotas,
	 * outside the tenant's cap and weight. */
	char warn[300] = "";
	if (!a->e->cfg.grant_exclusive)
		snprintf(warn, sizeof(warn), "grant-exclusive is off: uid %u may also connect on "
			 "the main socket, outside tenant %s's cap and weight (%u sessions there "
			 "now)", (unsigned)t->uid, t->name, g.main_sessions);
	else if (g.main_sessions)
		snprintf(warn, sizeof(warn), "uid %u has %u sessions on the main socket, opened "
			 "before this grant: they stay outside tenant %s's cap and weight until "
			 "they close", (unsigned)t->uid, g.main_sessions, t->name);
	if (warn[0]) {
		g.warning = warn;
		devq_log_fields(DEVQ_LOG_WARN,
				&(struct devq_log_ctx){ .uid = t->uid, .tenant = t->name }, -1, -1,
				-1, "tenant %s: %s", t->name, warn);
	}
	send_body(s, DEVQ__DAEMON_MESSAGE__BODY_GRANT, &g);
}

void devq_admin_on_tenants(struct devq_admin *a, struct devq_session *s)
{
	size_t n = 0;
	for (struct devq_admin_grant *k = a->grants; k; k = k->next)
		n++;
	Devq__Grant *g = calloc(n ? n : 1, sizeof(*g));
	Devq__Grant **p = calloc(n ? n : 1, sizeof(*p));
	if (!g || !p) {
		free(g);
		free(p);
		devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "admin_tenants", NULL, NULL,
				   "out of memory");
		return;
	}
	size_t i = 0;
	for (struct devq_admin_grant *k = a->grants; k; k = k->next, i++) {
		grant_msg(a, k->t, &g[i]);
		p[i] = &g[i];
	}
	Devq__GrantList l = DEVQ__GRANT_LIST__INIT;
	l.n_items = n;
	l.items = p;
	send_body(s, DEVQ__DAEMON_MESSAGE__BODY_GRANTS, &l);
	free(g);
	free(p);
}

static bool evict_done(const struct devq_tenant *t)
{
	return !t->ops && !t->buffers;
}

/* The evict's answer: the usage line in the log, the reply to the admin if
 * still connected; t is let go. */
static void evict_answer(struct devq_admin *a, struct devq_tenant *t, uint64_t session)
{
	uint64_t left = t->pinned + t->device;
	devq_log_fields(DEVQ_LOG_NOTICE, &(struct devq_log_ctx){ .uid = t->uid, .tenant = t->name },
			-1, -1, -1,
			"tenant %s evicted: device %" PRIu64 " ns, %" PRIu64 " ops, peak %" PRIu64
			" bytes, %" PRIu64 " errors, %" PRIu64 " cancelled, %" PRIu64
			" still running (%" PRIu64 " bytes not yet freed)",
			t->name, t->fair.device_ns, t->fair.ops_done, t->peak, t->failed,
			t->cancelled, t->ops, left);
	for (struct devq_session *s = a->e->sessions; s; s = s->next) {
		if (s->id != session || !s->connected)
			continue;
		Devq__Evicted r = DEVQ__EVICTED__INIT;
		r.tenant = t->name;
		r.device_ns = t->fair.device_ns;
		r.ops = t->fair.ops_done;
		r.peak_bytes = t->peak;
		r.errors = t->failed;
		r.cancelled = t->cancelled;
		r.still_running = t->ops;
		r.bytes_left = left;
		send_body(s, DEVQ__DAEMON_MESSAGE__BODY_EVICTED, &r);
		devq_outbox_mark_dirty(s);
		break;
	}
	t->held = false;
	if (!t->sessions)
		devq_tenant_maybe_free(a->e, t);
}

bool devq_admin_evict_tick(struct devq_admin *a)
{
	devq_sched_drain(a->e); /* completions published in pages only */
	uint64_t now = devq_now_ns();
	for (struct devq_evict_wait **pp = &a->waits; *pp;) {
		struct devq_evict_wait *w = *pp;
		if (!evict_done(w->t) && now < w->deadline_ns) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		evict_answer(a, w->t, w->session);
		free(w);
	}
	return a->waits != NULL;
}

void devq_admin_on_evict(struct devq_admin *a, struct devq_session *s, const Devq__AdminEvict *m)
{
	const char *name = m->tenant ? m->tenant : "";
	struct devq_tenant *t = devq_tenant_name_ok(name) ? devq_tenant_find(a->e, name) : NULL;
	if (!t) {
		devq_outbox_error(s, devq_tenant_name_ok(name) ? DEVQ__CODE__NOT_FOUND
							       : DEVQ__CODE__INVALID_ARGUMENT,
				   "admin_evict", NULL, NULL, "tenant '%.80s' is not granted", name);
		return;
	}
	struct devq_evict_wait *w = calloc(1, sizeof(*w));
	if (!w) {
		devq_outbox_error(s, DEVQ__CODE__RESOURCE_EXHAUSTED, "admin_evict", NULL, NULL,
				   "out of memory");
		return;
	}
	/* No new session: the socket goes, and one accepted meanwhile is
	 * refused at admission (the tenant is no longer granted). */
	struct devq_admin_grant **pp = &a->grants;
	while (*pp && (*pp)->t != t)
		pp = &(*pp)->next;
	uint64_t after = UINT64_MAX;
	if (*pp) {
		struct devq_admin_grant *k = *pp;
		after = k->after_session;
		*pp = k->next;
		if (k->sock)
			a->ops.sock_close(a->ops.ud, k->sock);
		free(k);
	}
	a->ngranted--;
	t->held = true; /* before ungrant: an idle tenant may be freed there */
	devq_tenant_ungrant(a->e, t);
	save(a);
	/* Its sessions close now: ops not started are cancelled, running
	 * ones finish, each buffer goes when its last op ends. */
	unsigned closed = 0;
	for (struct devq_session *x = a->e->sessions; x; x = x->next) {
		if (x->tenant != t && x->grant != t)
			continue;
		atomic_store(&x->cancel, true);
		if (x->connected) {
			a->ops.close_session(a->ops.ud, x);
			closed++;
		}
		/* One refused at admission never counted among its sessions:
		 * t may be freed before it, so it lets go of t now. */
		if (x->tenant != t)
			x->grant = NULL;
	}
	/* With the uid's last grant go its sessions on the main socket
	 * opened after the grant (possible with grant-exclusive off, or as
	 * an admin): the job's processes, wherever they connected.  Not
	 * those of its other grants, nor the evicting admin's own. */
	unsigned main_closed = 0;
	if (!devq_admin_grants_of(a, t->uid, NULL, 0))
		for (struct devq_session *x = a->e->sessions; x; x = x->next) {
			if (x->grant || x->admin || x == s || x->uid != t->uid ||
			    x->id <= after || !x->connected)
				continue;
			atomic_store(&x->cancel, true);
			a->ops.close_session(a->ops.ud, x);
			main_closed++;
		}
	devq_log_fields(DEVQ_LOG_NOTICE, &(struct devq_log_ctx){ .uid = t->uid, .tenant = t->name },
			-1, -1, -1, "tenant %s: evicting (%u sessions closed, %u of uid %u on the "
			"main socket, %" PRIu64 " ops in flight)", t->name, closed, main_closed,
			(unsigned)t->uid, t->ops);
	uint64_t grace_ms = m->grace_ms ? m->grace_ms : a->e->cfg.max_op_ns / 1000000 + 1000;
	w->t = t;
	w->session = s->id;
	w->deadline_ns = devq_now_ns() + grace_ms * 1000000ull;
	if (evict_done(t)) {
		evict_answer(a, t, s->id);
		free(w);
		return;
	}
	w->next = a->waits;
	a->waits = w;
	a->ops.evict_poll(a->ops.ud);
}
