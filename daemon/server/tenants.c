/* SPDX-License-Identifier: Apache-2.0 */
/* Granted tenants' sockets; see tenants.h. */
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
#include "core/tenant.h"
#include "requests/admin.h"
#include "server/daemon.h"

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

/* ---- sockets ----------------------------------------------------------- */

/* path of tenant name's socket into out: false when it does not fit in
 * sun_path. */
static bool sock_path(const struct devq_tenants *ts, const char *name, char *out, size_t n)
{
	size_t need = (size_t)snprintf(out, n, "%s/%s.sock", ts->dir, name);
	return need < n;
}

/* Listens on t's socket, owned by its uid, mode 0600.  0 with *out set,
 * or a Devq__Code with err filled. */
static int sock_listen(struct devq_daemon *d, struct devq_tenant *t, struct devq_tsock **out,
		       char *err, size_t errlen)
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
	*out = k;
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
static void sock_close(struct devq_tsock *k)
{
	if (unlink(k->path) < 0 && errno != ENOENT)
		log_err("%s: unlink: %s", k->path, strerror(errno));
	uv_poll_stop(&k->poll);
	uv_close((uv_handle_t *)&k->poll, on_tsock_closed);
}

void devq_tenants_pause(struct devq_daemon *d, bool pause)
{
	for (struct devq_admin_grant *g = d->admin.grants; g; g = g->next) {
		struct devq_tsock *k = g->sock;
		if (!k)
			continue;
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

/* ---- the admin calls' socket work (requests/admin.h) ------------------ */

static int op_sock_fits(void *ud, const char *name, char *err, size_t n)
{
	struct devq_daemon *d = ud;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	if (sock_path(&d->tenants, name, path, sizeof(path)))
		return 0;
	snprintf(err, n, "tenant %s: its socket %s/%s.sock would not fit in %zu bytes", name,
		 d->tenants.dir, name, sizeof(path) - 1);
	return DEVQ__CODE__INVALID_ARGUMENT;
}

static int op_sock_open(void *ud, struct devq_tenant *t, void **sock, char *err, size_t n)
{
	struct devq_daemon *d = ud;
	struct devq_tsock *k = NULL;
	int code = dir_make(&d->tenants, err, n);
	if (!code)
		code = sock_listen(d, t, &k, err, n);
	*sock = k;
	return code;
}

static void op_sock_close(void *ud, void *sock)
{
	(void)ud;
	sock_close(sock);
}

static const char *op_sock_path(void *ud, const void *sock)
{
	(void)ud;
	return ((const struct devq_tsock *)sock)->path;
}

static void op_close_session(void *ud, struct devq_session *s)
{
	struct devq_daemon *d = ud;
	d->tenants.close_session(s);
}

static void evict_tick(uv_timer_t *h)
{
	struct devq_daemon *d = h->data;
	if (!devq_admin_evict_tick(&d->admin))
		uv_timer_stop(h);
	d->tenants.flush(d);
}

static void op_evict_poll(void *ud)
{
	struct devq_daemon *d = ud;
	uv_timer_t *h = &d->tenants.evict_timer;
	if (!uv_is_active((uv_handle_t *)h))
		uv_timer_start(h, evict_tick, DEVQ_EVICT_POLL_MS, DEVQ_EVICT_POLL_MS);
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
	struct devq_admin_ops ops = { .sock_fits = op_sock_fits,
				      .sock_open = op_sock_open,
				      .sock_close = op_sock_close,
				      .sock_path = op_sock_path,
				      .close_session = op_close_session,
				      .evict_poll = op_evict_poll,
				      .ud = d };
	devq_admin_init(&d->admin, &d->e, &ops);
	d->admin.control = ts->control.describe;
	d->admin.unavailable = ts->dir_err;
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
	char *state = d->admin.state;
	if (state_dir && *state_dir) {
		char inst[128];
		devq_tenants_instance(sock, inst, sizeof(inst));
		if ((size_t)snprintf(state, sizeof(d->admin.state), "%s/grants.%s", state_dir,
				     inst) >= sizeof(d->admin.state))
			state[0] = '\0';
	}
	if (!state[0]) {
		log_info("no state directory: grants last until devqd exits");
		return 0;
	}
	if (!ts->dir_err[0])
		devq_admin_load(&d->admin);
	return 0;
}

void devq_tenants_stop(struct devq_daemon *d)
{
	struct devq_tenants *ts = &d->tenants;
	for (struct devq_admin_grant *g = d->admin.grants; g; g = g->next)
		if (g->sock)
			sock_close(g->sock);
	devq_admin_socks_gone(&d->admin);
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
	devq_admin_fini(&d->admin);
}
