/* SPDX-License-Identifier: Apache-2.0 */
/* Granted tenants, their sockets and the admin calls; see tenants.h. */
#include "server/tenants.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "core/engine.h"
#include "core/outbox.h"
#include "core/sched.h"
#include "core/session.h"
#include "core/tenant.h"
#include "server/daemon.h"

/* An evict waiting for the tenant's running ops and buffers. */
struct devq_evict_wait {
	struct devq_evict_wait *next;
	struct devq_tenant *t; /* kept (t->held) until answered */
	uint64_t session;      /* the admin's session, by id: it may be gone */
	uint64_t deadline_ns;
};

/* How often a waiting evict looks again: its answer comes within this of
 * the last buffer going. */
#define EVICT_POLL_MS 5

static void close_or_log(int fd, const char *what)
{
	if (fd >= 0 && close(fd) < 0)
		log_err("%s: close: %s", what, strerror(errno));
}

void devq_tenants_instance(const char *sock_path, char *out, size_t n)
{
	const char *base = strrchr(sock_path, '/');
	base = base ? base + 1 : sock_path;
	size_t len = strlen(base);
	if (len > 5 && !strcmp(base + len - 5, ".sock"))
		len -= 5;
	snprintf(out, n, "%.*s", (int)len, len ? base : "devqd");
}

/* ---- the state file ---------------------------------------------------- */

/* One line per grant: "TENANT UID SHARES OF MEMORY PRIORITY".  Written whole
 * to a temporary file and renamed over, so a crash leaves the old or the
 * new list, never half of one.  At most DEVQ_GRANTS_MAX short lines. */
static void save(struct devq_daemon *d)
{
	struct devq_tenants *ts = &d->tenants;
	if (!ts->state[0])
		return;
	char tmp[PATH_MAX + 8];
	snprintf(tmp, sizeof(tmp), "%s.new", ts->state);
	FILE *f = fopen(tmp, "we");
	if (!f) {
		log_err("%s: %s: grants will not outlive a restart", tmp, strerror(errno));
		return;
	}
	fprintf(f, "# devqd grants: tenant uid shares of memory_bytes priority\n");
	for (const struct devq_tsock *k = ts->socks; k; k = k->next)
		fprintf(f, "%s %u %u %u %" PRIu64 " %d\n", k->t->name, (unsigned)k->t->uid,
			k->t->shares, k->t->of, k->t->memory_cap, k->t->priority ? 1 : 0);
	bool ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
	ok = fclose(f) == 0 && ok;
	if (!ok || rename(tmp, ts->state) < 0) {
		log_err("%s: %s: grants will not outlive a restart", ts->state, strerror(errno));
		unlink(tmp);
	}
}

/* ---- sockets ----------------------------------------------------------- */

static struct devq_tsock *sock_of(const struct devq_tenants *ts, const struct devq_tenant *t)
{
	for (struct devq_tsock *k = ts->socks; k; k = k->next)
		if (k->t == t)
			return k;
	return NULL;
}

/* path of tenant name's socket into out: false when it does not fit in
 * sun_path. */
static bool sock_path(const struct devq_tenants *ts, const char *name, char *out, size_t n)
{
	size_t need = (size_t)snprintf(out, n, "%s/%s.sock", ts->dir, name);
	return need < n;
}

/* Listens on t's socket, owned by its uid, mode 0600.  0, or a Devq__Code
 * with err filled. */
static int sock_open(struct devq_daemon *d, struct devq_tenant *t, char *err, size_t errlen)
{
	struct devq_tenants *ts = &d->tenants;
	struct devq_tsock *k = calloc(1, sizeof(*k));
	if (!k) {
		snprintf(err, errlen, "out of memory");
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	k->d = d;
	k->t = t;
	k->fd = -1;
	if (!sock_path(ts, t->name, k->path, sizeof(k->path))) {
		free(k);
		snprintf(err, errlen, "tenant %s: its socket path would not fit in %zu bytes",
			 t->name, sizeof(k->path));
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	memcpy(sa.sun_path, k->path, sizeof(k->path));
	const char *step = "socket";
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	/* A socket file left by an earlier run (a crash, a restart) is ours:
	 * the directory is devqd's alone. */
	struct stat st;
	if (lstat(k->path, &st) == 0 && S_ISSOCK(st.st_mode) && unlink(k->path) < 0) {
		step = "unlink";
		goto fail;
	}
	step = "bind";
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto fail;
	step = "chmod";
	if (chmod(k->path, 0600) < 0)
		goto fail_bound;
	/* Only the tenant's uid may connect(2): the kernel checks the
	 * socket's mode before devqd sees the peer (which it checks too). */
	step = "chown (devqd needs CAP_CHOWN to give the socket to another uid)";
	if (t->uid != geteuid() && chown(k->path, t->uid, (gid_t)-1) < 0)
		goto fail_bound;
	step = "listen";
	if (listen(fd, 128) < 0)
		goto fail_bound;
	k->fd = fd;
	uv_poll_init(d->loop, &k->poll, fd);
	k->poll.data = k;
	uv_poll_start(&k->poll, UV_READABLE, ts->on_accept);
	k->next = ts->socks;
	ts->socks = k;
	return 0;
fail_bound:;
	int e = errno;
	unlink(k->path);
	errno = e;
fail:
	snprintf(err, errlen, "tenant %s: %s %s: %s", t->name, step, k->path, strerror(errno));
	close_or_log(fd, "tenant socket");
	free(k);
	return DEVQ__CODE__FAILED_PRECONDITION;
}

static void on_tsock_closed(uv_handle_t *h)
{
	struct devq_tsock *k = h->data;
	close_or_log(k->fd, "tenant socket");
	free(k);
}

/* Stops listening on k and removes its file; k is freed once libuv lets
 * go of it. */
static void sock_close(struct devq_tenants *ts, struct devq_tsock *k)
{
	struct devq_tsock **pp = &ts->socks;
	while (*pp != k)
		pp = &(*pp)->next;
	*pp = k->next;
	if (unlink(k->path) < 0 && errno != ENOENT)
		log_err("%s: unlink: %s", k->path, strerror(errno));
	uv_poll_stop(&k->poll);
	uv_close((uv_handle_t *)&k->poll, on_tsock_closed);
}

void devq_tenants_pause(struct devq_daemon *d, bool pause)
{
	for (struct devq_tsock *k = d->tenants.socks; k; k = k->next) {
		if (pause)
			uv_poll_stop(&k->poll);
		else
			uv_poll_start(&k->poll, UV_READABLE, d->tenants.on_accept);
	}
}

/* ---- start and stop ---------------------------------------------------- */

/* The tenant directory is devqd's: a socket in it is trusted to be the one
 * devqd made for that tenant.  One owned by someone else, or that others
 * may write, could hold a socket planted to catch a job's connections. */
static int dir_check(struct devq_tenants *ts)
{
	struct stat st;
	if (lstat(ts->dir, &st) < 0) {
		if (errno == ENOENT)
			return 0; /* made at the first grant (dir_make) */
		snprintf(ts->dir_err, sizeof(ts->dir_err), "tenant directory %s: %s", ts->dir,
			 strerror(errno));
		log_warn("%s: tenants cannot be granted", ts->dir_err);
		return 0;
	}
	if (!S_ISDIR(st.st_mode)) {
		log_err("tenant directory %s exists and is not a directory: refusing to start "
			"(remove it, or set tenants-dir)", ts->dir);
		return 1;
	}
	if (st.st_uid != geteuid()) {
		log_err("tenant directory %s is owned by uid %u, not devqd's uid %u: refusing to "
			"start (remove it, or set tenants-dir)", ts->dir, (unsigned)st.st_uid,
			(unsigned)geteuid());
		return 1;
	}
	if (st.st_mode & 022) {
		log_err("tenant directory %s is writable by group or others (mode %04o): refusing "
			"to start (remove it, or chmod 0711)", ts->dir,
			(unsigned)(st.st_mode & 07777));
		return 1;
	}
	/* Searchable by all (each socket's own mode admits its uid), listed
	 * and written by devqd alone. */
	if ((st.st_mode & 07777) != 0711 && chmod(ts->dir, 0711) < 0)
		log_warn("tenant directory %s: chmod 0711: %s", ts->dir, strerror(errno));
	return 0;
}

/* The tenant directory, made when the first tenant needs it (a daemon
 * that grants nothing leaves no trace beside its socket).  0, or a
 * Devq__Code with err filled. */
static int dir_make(struct devq_tenants *ts, char *err, size_t n)
{
	if (mkdir(ts->dir, 0711) < 0 && errno != EEXIST) {
		snprintf(err, n, "tenant directory %s: mkdir: %s", ts->dir, strerror(errno));
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	/* mkdir's mode went through the umask; one that appeared meanwhile
	 * is checked as at start. */
	struct stat st;
	if (lstat(ts->dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 022)) {
		snprintf(err, n, "tenant directory %s: not devqd's own directory", ts->dir);
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	if ((st.st_mode & 07777) != 0711 && chmod(ts->dir, 0711) < 0) {
		snprintf(err, n, "tenant directory %s: chmod 0711: %s", ts->dir, strerror(errno));
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	return 0;
}

static int grant(struct devq_daemon *d, const char *name, uid_t uid, uint32_t shares,
		 uint32_t of, uint64_t memory, bool priority, struct devq_tenant **out, char *err,
		 size_t errlen);

/* Grants of the state file, from before a restart.  A bad line is logged
 * and skipped: it never stops devqd from starting. */
static void load(struct devq_daemon *d)
{
	struct devq_tenants *ts = &d->tenants;
	FILE *f = fopen(ts->state, "re");
	if (!f) {
		if (errno != ENOENT)
			log_warn("%s: %s; no grant restored", ts->state, strerror(errno));
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
			log_warn("%s:%u: not a grant; skipped", ts->state, lineno);
			continue;
		}
		if (grant(d, name, (uid_t)uid, shares, of, memory, prio != 0, &t, err,
			  sizeof(err))) {
			log_warn("%s:%u: %s; skipped", ts->state, lineno, err);
			continue;
		}
		n++;
	}
	if (fclose(f) != 0)
		log_warn("%s: close: %s", ts->state, strerror(errno));
	if (n)
		log_notice("restored %u grants from %s", n, ts->state);
}

int devq_tenants_start(struct devq_daemon *d, const char *sock, const char *state_dir)
{
	struct devq_tenants *ts = &d->tenants;
	char perr[256];
	if (devq_policy_init_control(&ts->control, d->e.cfg.control_groups, perr, sizeof(perr)) <
	    0) {
		log_err("admin calls: %s", perr);
		return 2;
	}
	uv_timer_init(d->loop, &ts->evict_timer);
	ts->evict_timer.data = d;
	ts->timer_init = true;
	const char *cfg_dir = d->e.cfg.tenants_dir;
	size_t len = strlen(sock);
	if (len > 5 && !strcmp(sock + len - 5, ".sock"))
		len -= 5;
	int w = cfg_dir && *cfg_dir ? snprintf(ts->dir, sizeof(ts->dir), "%s", cfg_dir)
				    : snprintf(ts->dir, sizeof(ts->dir), "%.*s.tenants", (int)len, sock);
	if (w < 0 || (size_t)w >= sizeof(ts->dir)) {
		log_err("tenant directory %s: too long for a socket path (%zu bytes)", ts->dir,
			sizeof(ts->dir) - 1);
		return 1;
	}
	int r = dir_check(ts);
	if (r)
		return r;
	ts->state[0] = '\0';
	if (state_dir && *state_dir) {
		char inst[128];
		devq_tenants_instance(sock, inst, sizeof(inst));
		if ((size_t)snprintf(ts->state, sizeof(ts->state), "%s/grants.%s", state_dir,
				     inst) >= sizeof(ts->state))
			ts->state[0] = '\0';
	}
	if (!ts->state[0]) {
		log_info("no state directory: grants last until devqd exits");
		return 0;
	}
	if (!ts->dir_err[0])
		load(d);
	return 0;
}

void devq_tenants_stop(struct devq_daemon *d)
{
	struct devq_tenants *ts = &d->tenants;
	while (ts->socks)
		sock_close(ts, ts->socks);
	if (ts->timer_init && !uv_is_closing((uv_handle_t *)&ts->evict_timer))
		uv_close((uv_handle_t *)&ts->evict_timer, NULL);
	/* Gone if empty: a test's or a user's directory is left as found.
	 * Under systemd (RuntimeDirectory=) the parent is not ours: EACCES. */
	if (!ts->dir_err[0] && rmdir(ts->dir) < 0 && errno != ENOTEMPTY && errno != EACCES &&
	    errno != ENOENT && errno != EROFS && errno != EBUSY)
		log_warn("tenant directory %s: rmdir: %s", ts->dir, strerror(errno));
}

void devq_tenants_fini(struct devq_daemon *d)
{
	struct devq_tenants *ts = &d->tenants;
	while (ts->waits) {
		struct devq_evict_wait *w = ts->waits;
		ts->waits = w->next;
		free(w);
	}
}

/* ---- admin calls ------------------------------------------------------- */

static int grant(struct devq_daemon *d, const char *name, uid_t uid, uint32_t shares,
		 uint32_t of, uint64_t memory, bool priority, struct devq_tenant **out, char *err,
		 size_t n)
{
	struct devq_tenants *ts = &d->tenants;
	if (!devq_tenant_name_ok(name)) {
		snprintf(err, n, "tenant name '%.80s': 1 to %d characters of A-Z a-z 0-9 _ . -, "
			 "not starting with '.'", name, DEVQ_TENANT_NAME_MAX);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	if (!sock_path(ts, name, path, sizeof(path))) {
		snprintf(err, n, "tenant %s: its socket %s/%s.sock would not fit in %zu bytes", name,
			 ts->dir, name, sizeof(path) - 1);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
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
	if (ts->dir_err[0]) {
		snprintf(err, n, "%s", ts->dir_err);
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	struct devq_tenant *t = devq_tenant_find(&d->e, name);
	if (t && t->uid != uid) {
		snprintf(err, n, "tenant %s is granted to uid %u; evict it before granting it to "
			 "uid %u", name, (unsigned)t->uid, (unsigned)uid);
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	if (!t && ts->ngranted >= DEVQ_GRANTS_MAX) {
		snprintf(err, n, "tenant %s: %u tenants are granted, the most devqd keeps", name,
			 ts->ngranted);
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	bool fresh = !t;
	if (devq_tenant_grant(&d->e, name, uid, shares, of, memory, priority, &t) < 0) {
		snprintf(err, n, "out of memory");
		return DEVQ__CODE__RESOURCE_EXHAUSTED;
	}
	if (fresh) {
		int code = dir_make(ts, err, n);
		if (!code)
			code = sock_open(d, t, err, n);
		if (code) {
			devq_tenant_ungrant(&d->e, t);
			return code;
		}
		ts->ngranted++;
	}
	*out = t;
	return 0;
}

static void grant_msg(const struct devq_tenants *ts, struct devq_tenant *t, Devq__Grant *g)
{
	devq__grant__init(g);
	const struct devq_tsock *k = sock_of(ts, t);
	g->tenant = t->name;
	g->uid = t->uid;
	g->socket = k ? (char *)k->path : "";
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
}

static void send_body(struct devq_session *s, Devq__DaemonMessage__BodyCase c, void *body)
{
	Devq__DaemonMessage m = DEVQ__DAEMON_MESSAGE__INIT;
	m.body_case = c;
	m.grant = body; /* every body of the oneof shares one slot */
	devq_outbox_send(s, &m, NULL, 0);
}

static void on_grant(struct devq_daemon *d, struct devq_session *s, const Devq__AdminGrant *a)
{
	char err[400];
	struct devq_tenant *t;
	int code = grant(d, a->tenant ? a->tenant : "", (uid_t)a->uid, a->shares, a->of,
			 a->memory_bytes, a->priority, &t, err, sizeof(err));
	if (code) {
		devq_outbox_error(s, code, "admin_grant", NULL, NULL, "%s", err);
		return;
	}
	save(d);
	devq_log_fields(DEVQ_LOG_NOTICE,
			&(struct devq_log_ctx){ .uid = t->uid, .tenant = t->name },
			-1, -1, -1, "tenant %s granted to uid %u: %u of %u shares, memory %" PRIu64
			"%s", t->name, (unsigned)t->uid, t->shares, t->of, t->memory_cap,
			t->priority ? ", priority" : "");
	Devq__Grant g;
	grant_msg(&d->tenants, t, &g);
	send_body(s, DEVQ__DAEMON_MESSAGE__BODY_GRANT, &g);
}

static void on_tenants(struct devq_daemon *d, struct devq_session *s)
{
	struct devq_tenants *ts = &d->tenants;
	size_t n = 0;
	for (struct devq_tsock *k = ts->socks; k; k = k->next)
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
	for (struct devq_tsock *k = ts->socks; k; k = k->next, i++) {
		grant_msg(ts, k->t, &g[i]);
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
static void evict_answer(struct devq_daemon *d, struct devq_tenant *t, uint64_t session)
{
	uint64_t left = t->pinned + t->device;
	devq_log_fields(DEVQ_LOG_NOTICE, &(struct devq_log_ctx){ .uid = t->uid, .tenant = t->name },
			-1, -1, -1,
			"tenant %s evicted: device %" PRIu64 " ns, %" PRIu64 " ops, peak %" PRIu64
			" bytes, %" PRIu64 " errors, %" PRIu64 " cancelled, %" PRIu64
			" still running (%" PRIu64 " bytes not yet freed)",
			t->name, t->fair.device_ns, t->fair.ops_done, t->peak, t->failed,
			t->cancelled, t->ops, left);
	for (struct devq_session *s = d->e.sessions; s; s = s->next) {
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
		devq_tenant_maybe_free(&d->e, t);
}

static void evict_tick(uv_timer_t *h)
{
	struct devq_daemon *d = h->data;
	struct devq_tenants *ts = &d->tenants;
	devq_sched_drain(&d->e); /* completions published in pages only */
	uint64_t now = devq_now_ns();
	for (struct devq_evict_wait **pp = &ts->waits; *pp;) {
		struct devq_evict_wait *w = *pp;
		if (!evict_done(w->t) && now < w->deadline_ns) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		evict_answer(d, w->t, w->session);
		free(w);
	}
	if (!ts->waits)
		uv_timer_stop(h);
	ts->flush(d);
}

static void on_evict(struct devq_daemon *d, struct devq_session *s, const Devq__AdminEvict *a)
{
	struct devq_tenants *ts = &d->tenants;
	const char *name = a->tenant ? a->tenant : "";
	struct devq_tenant *t = devq_tenant_name_ok(name) ? devq_tenant_find(&d->e, name) : NULL;
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
	struct devq_tsock *k = sock_of(ts, t);
	if (k)
		sock_close(ts, k);
	ts->ngranted--;
	t->held = true; /* before ungrant: an idle tenant may be freed there */
	devq_tenant_ungrant(&d->e, t);
	save(d);
	/* Its sessions close now: ops not started are cancelled, running
	 * ones finish, each buffer goes when its last op ends. */
	unsigned closed = 0;
	for (struct devq_session *x = d->e.sessions; x; x = x->next) {
		if (x->tenant != t && x->grant != t)
			continue;
		atomic_store(&x->cancel, true);
		if (x->connected) {
			ts->close_session(x);
			closed++;
		}
		/* One refused at admission never counted among its sessions:
		 * t may be freed before it, so it lets go of t now. */
		if (x->tenant != t)
			x->grant = NULL;
	}
	devq_log_fields(DEVQ_LOG_NOTICE, &(struct devq_log_ctx){ .uid = t->uid, .tenant = t->name },
			-1, -1, -1, "tenant %s: evicting (%u sessions closed, %" PRIu64
			" ops in flight)", t->name, closed, t->ops);
	uint64_t grace_ms = a->grace_ms ? a->grace_ms : d->e.cfg.max_op_ns / 1000000 + 1000;
	w->t = t;
	w->session = s->id;
	w->deadline_ns = devq_now_ns() + grace_ms * 1000000ull;
	if (evict_done(t)) {
		evict_answer(d, t, s->id);
		free(w);
		return;
	}
	w->next = ts->waits;
	ts->waits = w;
	if (!uv_is_active((uv_handle_t *)&ts->evict_timer))
		uv_timer_start(&ts->evict_timer, evict_tick, EVICT_POLL_MS, EVICT_POLL_MS);
}

bool devq_tenants_handle(struct devq_session *s, const Devq__ClientMessage *m)
{
	const char *req;
	switch (m->body_case) {
	case DEVQ__CLIENT_MESSAGE__BODY_ADMIN_GRANT:
		req = "admin_grant";
		break;
	case DEVQ__CLIENT_MESSAGE__BODY_ADMIN_EVICT:
		req = "admin_evict";
		break;
	case DEVQ__CLIENT_MESSAGE__BODY_ADMIN_TENANTS:
		req = "admin_tenants";
		break;
	default:
		return false;
	}
	if (!s->hello_done)
		return false; /* the requests layer refuses it */
	struct devq_daemon *d = (struct devq_daemon *)s->e; /* the engine comes first */
	if (!s->control) {
		devq_outbox_error(s, DEVQ__CODE__PERMISSION_DENIED, req, NULL, NULL,
				   "%s: uid %u may not make admin calls; allowed: %s (setting "
				   "control-groups)%s", req, (unsigned)s->uid,
				   d->tenants.control.describe,
				   s->grant ? "; never on a tenant socket" : "");
		return true;
	}
	switch (m->body_case) {
	case DEVQ__CLIENT_MESSAGE__BODY_ADMIN_GRANT:
		on_grant(d, s, m->admin_grant);
		break;
	case DEVQ__CLIENT_MESSAGE__BODY_ADMIN_EVICT:
		on_evict(d, s, m->admin_evict);
		break;
	default:
		on_tenants(d, s);
		break;
	}
	return true;
}
