/* SPDX-License-Identifier: Apache-2.0 */
/* Granted tenants' sockets; see tenants.h. */
#include "server/tenants.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
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

/* The name of k's socket in the tenant directory (its path's last part). */
static const char *sock_file(const struct devq_tsock *k)
{
	return strrchr(k->path, '/') + 1;
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
	const char *file = sock_file(k);
	/* bind(2) takes a path only: the directory's fd, through /proc, is
	 * the directory devqd opened, whatever is at ts->dir now.
	 * (/proc/net/unix shows that path; clients are told k->path.) */
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", ts->dirfd,
			     file) >= sizeof(sa.sun_path)) {
		free(k);
		snprintf(err, errlen, "tenant %s: /proc/self/fd/%d/%s would not fit in %zu bytes",
			 t->name, ts->dirfd, file, sizeof(sa.sun_path) - 1);
		return DEVQ__CODE__INVALID_ARGUMENT;
	}
	const char *step = "socket";
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		goto fail;
	/* A socket file left by an earlier run (a crash, a restart) is ours:
	 * the directory is devqd's alone. */
	struct stat st;
	if (fstatat(ts->dirfd, file, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode) &&
	    unlinkat(ts->dirfd, file, 0) < 0) {
		step = "unlink";
		goto fail;
	}
	/* The node is made 0600 at once (0777 less the umask): no chmod to
	 * do, and no moment where it has a wider mode.  The umask is the
	 * process's, but devqd makes its own files (this, the grants file,
	 * the lost-uids file, the main socket) on this, the loop thread, only:
	 * its other threads (the backend's workers and waiters, the trace
	 * builder, the buffer unmapper, the host slots' housekeeper, the
	 * thread pool's executable rescan, which opens files read-only) make
	 * none, and memfds ignore the umask.  Code devqd loads (the
	 * repository's executables, the device driver) could still create a
	 * file during this one bind: it would get a narrower mode (0600 at
	 * most), never a wider one. */
	step = "bind";
	mode_t mask = umask(0177);
	int br = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	int be = errno;
	umask(mask);
	errno = be;
	if (br < 0)
		goto fail;
	/* Only the tenant's uid may connect(2): the kernel checks the
	 * socket's mode before devqd sees the peer (which it checks too). */
	step = "chown (devqd needs CAP_CHOWN to give the socket to another uid)";
	if (t->uid != geteuid() &&
	    fchownat(ts->dirfd, file, t->uid, (gid_t)-1, AT_SYMLINK_NOFOLLOW) < 0)
		goto fail_bound;
	step = "listen";
	if (listen(fd, 128) < 0)
		goto fail_bound;
	k->fd = fd;
	ts->nsocks++;
	uv_poll_init(d->loop, &k->poll, fd);
	k->poll.data = k;
	uv_poll_start(&k->poll, UV_READABLE, ts->on_accept);
	*out = k;
	return 0;
fail_bound:;
	int e = errno;
	if (unlinkat(ts->dirfd, file, 0) < 0)
		log_err("%s: unlink after a failed %s: %s", k->path, step, strerror(errno));
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

/* Stops listening on k and removes its file from the directory devqd
 * opened (not by path: what is at the path may have been swapped since);
 * k is freed once libuv lets go of it. */
static void sock_close(struct devq_tsock *k)
{
	struct devq_tenants *ts = &k->d->tenants;
	if (unlinkat(ts->dirfd, sock_file(k), 0) < 0 && errno != ENOENT)
		log_err("%s: unlink: %s", k->path, strerror(errno));
	ts->nsocks--;
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

/* ---- the tenant directory ---------------------------------------------- */

/* The tenant directory is devqd's: a socket in it is trusted to be the one
 * devqd made for that tenant.  One owned by someone else, or that others
 * may write, could hold a socket planted to catch a job's connections; so
 * could one under a directory that others may change, where the whole
 * directory could be swapped for theirs.  So each directory above it must
 * be root's or devqd's and writable by group or others only when sticky
 * (there only an entry's owner may rename or remove it), and each symbolic
 * link on the way root's or devqd's (in a sticky directory its owner could
 * replace it).  What passes cannot be changed afterwards except by root or
 * devqd. */

static bool owner_ok(uid_t uid)
{
	return uid == 0 || uid == geteuid();
}

/* where (a directory's path, for messages) one level down, or up. */
static void where_down(char *where, size_t n, const char *name)
{
	size_t len = strlen(where);
	if ((size_t)snprintf(where + len, n - len, "/%s", name) >= n - len)
		where[len] = '\0'; /* longer than PATH_MAX: not openable anyway */
}

static void where_up(char *where)
{
	char *slash = strrchr(where, '/');
	if (slash)
		*slash = '\0';
}

/* A directory on the way (st, at where) that only root and devqd may
 * change; why filled when not. */
static bool way_dir_safe(const struct stat *st, const char *where, char *why, size_t n)
{
	if (!owner_ok(st->st_uid)) {
		snprintf(why, n,
			 "the directory %s above it is owned by uid %u, not root or devqd's uid %u",
			 where, (unsigned)st->st_uid, (unsigned)geteuid());
		return false;
	}
	if ((st->st_mode & 022) && !(st->st_mode & S_ISVTX)) {
		snprintf(why, n,
			 "the directory %s above it is writable by group or others without the "
			 "sticky bit (mode %04o)", where, (unsigned)(st->st_mode & 07777));
		return false;
	}
	return true;
}

#define WAY_UNSAFE (-2)

/* Opens (O_PATH) the directory that holds the tenant directory path, whose
 * own name goes to base, checking everything on the way.  The fd; or -1
 * with errno set (a part missing, not searchable...), or WAY_UNSAFE (a
 * directory or link others may change); why says which, and where.
 *
 * The path is walked here as the kernel resolves it, from / (or the
 * working directory's absolute path), following links: every directory a
 * name is looked up in is checked, and every link followed.  Checking each
 * part of the path as written (lstat) would refuse a safe link such as
 * /var/run -> /run and say nothing of the directories it leads through;
 * resolving it first (realpath) and checking the result would miss a link
 * in a directory that others may write, which they could replace
 * afterwards: clients are given the path as written, and devqd opens it
 * again to make the directory. */
static int way_open(const char *path, char *base, size_t bn, char *why, size_t n)
{
	char rest[PATH_MAX], tmp[PATH_MAX], where[PATH_MAX] = "";
	char shown[PATH_MAX];
	int w, e;
	if (path[0] == '/') {
		w = snprintf(rest, sizeof(rest), "%s", path);
	} else {
		if (!getcwd(tmp, sizeof(tmp))) {
			e = errno;
			snprintf(why, n, "the working directory: %s", strerror(e));
			errno = e;
			return -1;
		}
		w = snprintf(rest, sizeof(rest), "%s/%s", tmp, path);
	}
	if (w < 0 || (size_t)w >= sizeof(rest)) {
		snprintf(why, n, "%s", strerror(ENAMETOOLONG));
		errno = ENAMETOOLONG;
		return -1;
	}
	struct stat st;
	snprintf(shown, sizeof(shown), "/");
	int cur = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0 || fstat(cur, &st) < 0)
		goto fail;
	if (!way_dir_safe(&st, "/", why, n))
		goto unsafe;
	unsigned links = 0;
	char *p = rest;
	for (;;) {
		while (*p == '/')
			p++;
		char *c = p;
		while (*p && *p != '/')
			p++;
		char *next = p;
		while (*next == '/')
			next++;
		size_t len = (size_t)(p - c);
		*p = '\0';
		if (!*next) { /* the tenant directory's own name */
			if (!len || !strcmp(c, ".") || !strcmp(c, "..")) {
				snprintf(why, n, "names no directory below another");
				errno = EINVAL;
				goto fail_why;
			}
			if (len >= bn) {
				errno = ENAMETOOLONG;
				goto fail;
			}
			memcpy(base, c, len + 1);
			return cur;
		}
		if (!strcmp(c, ".")) {
			p = next;
			continue;
		}
		if ((size_t)snprintf(shown, sizeof(shown), "%s/%s", where, c) >= sizeof(shown)) {
			errno = ENAMETOOLONG;
			goto fail;
		}
		if (fstatat(cur, c, &st, AT_SYMLINK_NOFOLLOW) < 0)
			goto fail;
		if (S_ISLNK(st.st_mode)) {
			if (!owner_ok(st.st_uid)) {
				snprintf(why, n,
					 "the symbolic link %s on its way is owned by uid %u, "
					 "not root or devqd's uid %u", shown, (unsigned)st.st_uid,
					 (unsigned)geteuid());
				goto unsafe;
			}
			errno = ELOOP;
			if (++links > 40)
				goto fail;
			ssize_t tl = readlinkat(cur, c, tmp, sizeof(tmp));
			if (tl <= 0 || (size_t)tl >= sizeof(tmp)) {
				errno = tl < 0 ? errno : tl ? ENAMETOOLONG : ENOENT;
				goto fail;
			}
			/* The link's target takes its place in what is left. */
			size_t nl = strlen(next);
			if ((size_t)tl + 1 + nl >= sizeof(rest)) {
				errno = ENAMETOOLONG;
				goto fail;
			}
			memmove(rest + tl + 1, next, nl + 1);
			memcpy(rest, tmp, (size_t)tl);
			rest[tl] = '/';
			p = rest;
			if (tmp[0] == '/') { /* from / again (checked above) */
				int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
				if (root < 0)
					goto fail;
				close_or_log(cur, "tenant directory's parent");
				cur = root;
				where[0] = '\0';
			}
			continue;
		}
		if (!S_ISDIR(st.st_mode)) {
			errno = ENOTDIR;
			goto fail;
		}
		int nfd = openat(cur, c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (nfd < 0)
			goto fail;
		close_or_log(cur, "tenant directory's parent");
		cur = nfd;
		if (!strcmp(c, ".."))
			where_up(where);
		else
			where_down(where, sizeof(where), c);
		/* Judged on what was opened, not on the fstatat above. */
		if (fstat(cur, &st) < 0)
			goto fail;
		if (!way_dir_safe(&st, where[0] ? where : "/", why, n))
			goto unsafe;
		p = next;
	}
fail:
	e = errno;
	snprintf(why, n, "%s: %s", shown, strerror(e));
	errno = e;
fail_why:
	e = errno;
	close_or_log(cur, "tenant directory's parent");
	errno = e;
	return -1;
unsafe:
	close_or_log(cur, "tenant directory's parent");
	return WAY_UNSAFE;
}

/* What makes st, the tenant directory's, not devqd's own: NULL when
 * nothing, else the remedy, with why filled. */
static const char *dir_unsafe(const struct devq_tenants *ts, const struct stat *st, char *why,
			      size_t n)
{
	if (!S_ISDIR(st->st_mode)) {
		snprintf(why, n, "tenant directory %s exists and is not a directory", ts->dir);
		return "remove it, or set tenants-dir";
	}
	if (st->st_uid != geteuid()) {
		snprintf(why, n, "tenant directory %s is owned by uid %u, not devqd's uid %u",
			 ts->dir, (unsigned)st->st_uid, (unsigned)geteuid());
		return "remove it, or set tenants-dir";
	}
	if (st->st_mode & 022) {
		snprintf(why, n, "tenant directory %s is writable by group or others (mode %04o)",
			 ts->dir, (unsigned)(st->st_mode & 07777));
		return "remove it, or chmod 0711";
	}
	return NULL;
}

static void dir_close(struct devq_tenants *ts)
{
	if (!ts->dir_open)
		return;
	if (close(ts->dirfd) < 0)
		log_err("tenant directory %s: close: %s", ts->dir, strerror(errno));
	ts->dirfd = -1;
	ts->dir_open = false;
}

/* Opens base in pfd as the tenant directory (ts->dirfd): 0; 1 when it is
 * not devqd's own (why, *remedy); -1 when it cannot be used (why, errno:
 * ENOENT when it is not there). */
static int dir_adopt(struct devq_tenants *ts, int pfd, const char *base, const char **remedy,
		     char *why, size_t n)
{
	struct stat st;
	int fd = -1;
	if (fstatat(pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0)
		goto fail;
	if ((*remedy = dir_unsafe(ts, &st, why, n)))
		return 1; /* a link is "not a directory": never followed */
	fd = openat(pfd, base, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0)
		goto fail;
	/* Judged again on what was opened, which every socket goes through
	 * (only root or devqd could have swapped it meanwhile). */
	if ((*remedy = dir_unsafe(ts, &st, why, n))) {
		close_or_log(fd, "tenant directory");
		return 1;
	}
	/* bind(2) reaches it through its fd's path in /proc: it must lead to
	 * it (a devqd without /proc could grant nothing). */
	char self[32];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	struct stat ps;
	if (stat(self, &ps) < 0 || ps.st_dev != st.st_dev || ps.st_ino != st.st_ino) {
		snprintf(why, n, "tenant directory %s: %s does not lead to it (is /proc mounted?)",
			 ts->dir, self);
		close_or_log(fd, "tenant directory");
		errno = ENXIO;
		return -1;
	}
	ts->dirfd = fd;
	ts->dir_open = true;
	return 0;
fail:;
	int e = errno;
	snprintf(why, n, "tenant directory %s: %s", ts->dir, strerror(e));
	close_or_log(fd, "tenant directory");
	errno = e;
	return -1;
}

/* The opened directory, still devqd's own, made mode 0711: searchable by
 * all (each socket's own mode admits its uid), listed and written by devqd
 * alone.  0; 1 when it is not devqd's own any more (why, *remedy); -1 when
 * chmod fails (why). */
static int dir_settle(struct devq_tenants *ts, const char **remedy, char *why, size_t n)
{
	struct stat st;
	if (fstat(ts->dirfd, &st) < 0) {
		snprintf(why, n, "tenant directory %s: fstat: %s", ts->dir, strerror(errno));
		return -1;
	}
	if ((*remedy = dir_unsafe(ts, &st, why, n)))
		return 1;
	char self[32];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", ts->dirfd);
	if ((st.st_mode & 07777) != 0711 && chmod(self, 0711) < 0) {
		snprintf(why, n, "tenant directory %s: chmod 0711: %s", ts->dir, strerror(errno));
		return -1;
	}
	return 0;
}

/* At start: the directories above the tenant directory, and the directory
 * if it exists (then opened).  0, or 1: refusing to start, logged.  One
 * that cannot be checked (not searchable...) leaves grants unavailable
 * (dir_err); one not there yet is made at the first grant (dir_make). */
static int dir_check(struct devq_tenants *ts)
{
	char why[PATH_MAX + 256], base[NAME_MAX + 1];
	const char *remedy = NULL;
	int pfd = way_open(ts->dir, base, sizeof(base), why, sizeof(why));
	if (pfd == WAY_UNSAFE) {
		log_err("tenant directory %s: %s: refusing to start (every directory above it "
			"must be root's or devqd's and writable by others only when sticky, every "
			"symbolic link on the way root's or devqd's; or set tenants-dir)",
			ts->dir, why);
		return 1;
	}
	int r = -1;
	if (pfd >= 0) {
		r = dir_adopt(ts, pfd, base, &remedy, why, sizeof(why));
		int e = errno;
		close_or_log(pfd, "tenant directory's parent");
		errno = e;
	}
	if (r < 0) {
		if (errno == ENOENT)
			return 0; /* made at the first grant, which says what is missing */
		/* The reason first: a longer one is cut to dir_err's size. */
		char *de = ts->dir_err;
		int w = pfd < 0 ? snprintf(de, sizeof(ts->dir_err), "tenant directory %s: %s",
					   ts->dir, why)
				: snprintf(de, sizeof(ts->dir_err), "%s", why);
		log_warn("%s: tenants cannot be granted%s", ts->dir_err,
			 w >= (int)sizeof(ts->dir_err) ? " (cut)" : "");
		return 0;
	}
	if (!r)
		r = dir_settle(ts, &remedy, why, sizeof(why));
	if (r > 0) {
		log_err("%s: refusing to start (%s)", why, remedy);
		dir_close(ts);
		return 1;
	}
	if (r < 0)
		log_warn("%s", why); /* it serves as it is */
	return 0;
}

/* Whether base in pfd is still the directory devqd opened. */
static bool dir_same(const struct devq_tenants *ts, int pfd, const char *base)
{
	struct stat mine, there;
	return fstat(ts->dirfd, &mine) == 0 &&
	       fstatat(pfd, base, &there, AT_SYMLINK_NOFOLLOW) == 0 &&
	       mine.st_dev == there.st_dev && mine.st_ino == there.st_ino;
}

/* The tenant directory, made when the first tenant needs it (a daemon
 * that grants nothing leaves no trace beside its socket), and checked
 * again at each grant: the way to it may have changed since the start,
 * and the path clients are told must still lead to the directory devqd
 * opened.  0, or a Devq__Code with err filled. */
static int dir_make(struct devq_tenants *ts, char *err, size_t n)
{
	char why[PATH_MAX + 256], base[NAME_MAX + 1];
	const char *remedy;
	int pfd = way_open(ts->dir, base, sizeof(base), why, sizeof(why));
	if (pfd < 0) {
		snprintf(err, n, "tenant directory %s: %s", ts->dir, why);
		return DEVQ__CODE__FAILED_PRECONDITION;
	}
	int r = 0;
	if (ts->dir_open && !dir_same(ts, pfd, base)) {
		if (ts->nsocks) {
			snprintf(why, sizeof(why),
				 "tenant directory %s was moved, removed or replaced since devqd "
				 "opened it, and %u tenant sockets are still in that one: evict "
				 "them, or restart devqd", ts->dir, ts->nsocks);
			r = -1;
		} else {
			dir_close(ts); /* nothing of it in use: the path's is taken */
		}
	}
	if (!r && !ts->dir_open) {
		/* mkdir's mode goes through the umask (settled below); one that
		 * appeared meanwhile is judged as at start. */
		if (mkdirat(pfd, base, 0711) < 0 && errno != EEXIST) {
			snprintf(why, sizeof(why), "tenant directory %s: mkdir: %s", ts->dir,
				 strerror(errno));
			r = -1;
		} else {
			r = dir_adopt(ts, pfd, base, &remedy, why, sizeof(why));
		}
	}
	close_or_log(pfd, "tenant directory's parent");
	if (!r)
		r = dir_settle(ts, &remedy, why, sizeof(why));
	if (!r)
		return 0;
	snprintf(err, n, "%s", why);
	return DEVQ__CODE__FAILED_PRECONDITION;
}

/* At stop, the directory devqd opened goes if empty; found by its parent
 * (its fd's "..") and its name, and only while it is still there: one moved
 * away, or put in its place, is left as it is. */
static void dir_remove(struct devq_tenants *ts)
{
	char base[NAME_MAX + 1];
	size_t len = strlen(ts->dir);
	while (len > 1 && ts->dir[len - 1] == '/')
		len--;
	const char *b = ts->dir + len;
	while (b > ts->dir && b[-1] != '/')
		b--;
	if ((size_t)(ts->dir + len - b) >= sizeof(base))
		return;
	snprintf(base, sizeof(base), "%.*s", (int)(ts->dir + len - b), b);
	int up = openat(ts->dirfd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
	struct stat mine, there;
	if (up < 0 || fstat(ts->dirfd, &mine) < 0) {
		log_warn("tenant directory %s: its parent: %s", ts->dir, strerror(errno));
	} else if (fstatat(up, base, &there, AT_SYMLINK_NOFOLLOW) < 0 ||
		   there.st_dev != mine.st_dev || there.st_ino != mine.st_ino) {
		log_warn("tenant directory %s was moved or replaced while devqd ran: left as it is",
			 ts->dir);
	} else if (unlinkat(up, base, AT_REMOVEDIR) < 0 && errno != ENOTEMPTY &&
		   errno != EACCES && errno != ENOENT && errno != EROFS && errno != EBUSY) {
		/* Under systemd (RuntimeDirectory=) the parent is not ours:
		 * EACCES. */
		log_warn("tenant directory %s: rmdir: %s", ts->dir, strerror(errno));
	}
	close_or_log(up, "tenant directory's parent");
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
	int e = uv_is_active((uv_handle_t *)h)
			? 0
			: uv_timer_start(h, evict_tick, DEVQ_EVICT_POLL_MS, DEVQ_EVICT_POLL_MS);
	if (e < 0) /* stopping: the timer is closed */
		log_warn("evict: its answer waits for nothing now: %s", uv_strerror(e));
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
	/* Gone if empty: a test's or a user's directory is left as found. */
	if (ts->dir_open)
		dir_remove(ts);
	dir_close(ts);
}

void devq_tenants_fini(struct devq_daemon *d)
{
	dir_close(&d->tenants); /* when the loop never stopped it */
	devq_admin_fini(&d->admin);
}
