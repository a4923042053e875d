/* SPDX-License-Identifier: Apache-2.0 */
/* The admin API against a real devqd (CPU backend): granted tenants and
 * their sockets, who may make admin calls, names and their bounds, memory
 * caps over a tenant's sessions, eviction of a tenant with ops in flight,
 * grants across a restart, the grants file's lines and their bounds,
 * per-instance state files, the tenant directory's safety check, and
 * devctl's admin and health commands. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "devq.h"
#include "harness.h"

#define NOBODY 65534
#define OTHER 65533

static bool root_or_skip(const char *test)
{
	if (geteuid() == 0)
		return true;
	fprintf(stderr, "SKIP: %s needs root (grants to another uid, clients as it)\n", test);
	return false;
}

/* Another uid must reach the tenant directory inside the test's 0700 one. */
static void start(struct daemon_proc *d, const char *const *extra)
{
	harness_start(d, extra);
	ck_assert_int_eq(chmod(d->dir, 0711), 0);
}

static void stop(struct daemon_proc *d)
{
	ck_assert_int_eq(harness_stop(d), 0);
}

static void become(uid_t uid, const gid_t *groups, size_t ngroups)
{
	if (setgroups(ngroups, groups) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
		_exit(90);
}

static int child_status(pid_t pid)
{
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int grant(devq *q, const char *name, uid_t uid, uint32_t shares, uint32_t of,
		 uint64_t mem, struct devq_grant *out)
{
	struct devq_grant_request r = { .tenant = name, .uid = uid, .shares = shares, .of = of,
					.memory_bytes = mem };
	struct devq_grant tmp;
	return devq_admin_grant(q, &r, out ? out : &tmp);
}

static const char *tenant_sock(const struct daemon_proc *d, const char *name)
{
	static char p[160];
	snprintf(p, sizeof(p), "%s/devqd.tenants/%s.sock", d->dir, name);
	return p;
}

static uint64_t spin(devq *q, uint32_t queue, uint64_t ns)
{
	struct devq_arg a = a_u64("ns", ns);
	struct devq_op op = { .queue = queue, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
			      .args = &a, .nargs = 1 };
	uint64_t p = 0;
	if (devq_submit(q, &op, 1, &p) < 0)
		return 0;
	return p;
}

/* ---- grants and their sockets ------------------------------------------ */

/* A grant makes the tenant and its socket, owned by the uid, mode 0600, in
 * a 0711 directory; granting again with the same uid updates it. */
START_TEST(grant_makes_socket)
{
	if (!root_or_skip("grant_makes_socket"))
		return;
	struct daemon_proc d;
	start(&d, NULL);
	devq *q = conn(d.sock, "admin");
	struct devq_grant g;
	ck_assert_msg(grant(q, "job_42", NOBODY, 2, 4, 1 << 20, &g) == 0, "%s",
		      devq_last_error(q));
	ck_assert_str_eq(g.tenant, "job_42");
	ck_assert_uint_eq(g.uid, NOBODY);
	ck_assert_str_eq(g.socket, tenant_sock(&d, "job_42"));
	ck_assert_uint_eq(g.shares, 2);
	ck_assert_uint_eq(g.of, 4);
	ck_assert_uint_eq(g.memory_bytes, 1 << 20);
	ck_assert(!g.priority);
	struct stat st;
	ck_assert_int_eq(stat(g.socket, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	ck_assert_uint_eq(st.st_uid, NOBODY);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	char dir[160];
	snprintf(dir, sizeof(dir), "%s/devqd.tenants", d.dir);
	ck_assert_int_eq(stat(dir, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0711);
	ck_assert_uint_eq(st.st_uid, geteuid());
	/* Idempotent: the same uid again updates the grant, one tenant. */
	ck_assert_int_eq(grant(q, "job_42", NOBODY, 3, 4, 0, &g), 0);
	ck_assert_uint_eq(g.shares, 3);
	ck_assert_uint_eq(g.memory_bytes, 0);
	struct devq_grant *list;
	size_t n;
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(list[0].tenant, "job_42");
	ck_assert_uint_eq(list[0].shares, 3);
	ck_assert_uint_eq(list[0].sessions, 0);
	free(list);
	/* The weight is the shares: status shows it. */
	struct devq_status *s;
	ck_assert_int_eq(devq_get_status(q, &s), 0);
	bool seen = false;
	for (size_t i = 0; i < s->ntenants; i++)
		if (!strcmp(s->tenants[i].name, "job_42")) {
			seen = true;
			ck_assert_uint_eq(s->tenants[i].weight, 3);
			ck_assert_uint_eq(s->tenants[i].uid, NOBODY);
		}
	ck_assert(seen);
	devq_status_free(s);
	devq_disconnect(q);
	stop(&d);
	/* A clean stop removes the sockets and the directory it made. */
	ck_assert_int_eq(stat(g.socket, &st), -1);
	ck_assert_int_eq(stat(dir, &st), -1);
}
END_TEST

/* Names: 1 to 64 characters of [A-Za-z0-9_.-], not starting with a dot,
 * and the socket path within sun_path; the rest is invalid_argument. */
START_TEST(grant_names)
{
	if (!root_or_skip("grant_names"))
		return;
	struct daemon_proc d;
	start(&d, NULL);
	devq *q = conn(d.sock, "admin");
	char n64[65], n65[66];
	memset(n64, 'a', 64);
	n64[64] = '\0';
	memset(n65, 'b', 65);
	n65[65] = '\0';
	ck_assert_msg(grant(q, n64, NOBODY, 0, 0, 0, NULL) == 0, "%s", devq_last_error(q));
	const char *bad[] = { n65, "", "../x", ".x", "a/b", "a b", "x\n", "job:1" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(grant(q, bad[i], NOBODY, 0, 0, 0, NULL), -EINVAL);
		ck_assert_msg(strstr(devq_last_error(q), "invalid_argument"), "%s",
			      devq_last_error(q));
	}
	ck_assert_int_eq(grant(q, "a.b-C_9", NOBODY, 0, 0, 0, NULL), 0);
	/* Nothing was made for a refused name. */
	struct devq_grant *list;
	size_t n;
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	ck_assert_uint_eq(n, 2);
	free(list);
	/* Shares 1..64, of from shares to 65536. */
	ck_assert_int_eq(grant(q, "s64", NOBODY, 64, 64, 0, NULL), 0);
	ck_assert_int_eq(grant(q, "s65", NOBODY, 65, 65, 0, NULL), -EINVAL);
	ck_assert_int_eq(grant(q, "s_of", NOBODY, 3, 2, 0, NULL), -EINVAL);
	ck_assert_int_eq(grant(q, "s_eq", NOBODY, 3, 3, 0, NULL), 0);
	ck_assert_int_eq(grant(q, "of_max", NOBODY, 1, 65536, 0, NULL), 0);
	ck_assert_int_eq(grant(q, "of_over", NOBODY, 1, 65537, 0, NULL), -EINVAL);
	devq_disconnect(q);
	stop(&d);
}
END_TEST

/* The whole socket path must fit in sun_path (107 bytes and its NUL). */
START_TEST(grant_socket_path_bound)
{
	if (!root_or_skip("grant_socket_path_bound"))
		return;
	char dir[200];
	char top[] = "/tmp/devq-tdir-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(top));
	/* A tenant directory of 60 bytes: DIR/NAME.sock is 66 + NAME. */
	snprintf(dir, sizeof(dir), "%s/%0*d", top, (int)(60 - strlen(top) - 1), 0);
	ck_assert_uint_eq(strlen(dir), 60);
	const char *extra[] = { "--tenants-dir", dir, NULL };
	struct daemon_proc d;
	start(&d, extra);
	devq *q = conn(d.sock, "admin");
	char name[64];
	memset(name, 'n', 41);
	name[41] = '\0'; /* 60 + 1 + 41 + 5 = 107: fits */
	struct devq_grant g;
	ck_assert_msg(grant(q, name, NOBODY, 0, 0, 0, &g) == 0, "%s", devq_last_error(q));
	ck_assert_uint_eq(strlen(g.socket), 107);
	name[41] = 'n';
	name[42] = '\0'; /* 108: does not */
	ck_assert_int_eq(grant(q, name, NOBODY, 0, 0, 0, NULL), -EINVAL);
	ck_assert_msg(strstr(devq_last_error(q), "would not fit"), "%s", devq_last_error(q));
	devq_disconnect(q);
	stop(&d);
	ck_assert_int_eq(rmdir(top), 0); /* the daemon removed its directory */
}
END_TEST

START_TEST(grant_conflicts)
{
	if (!root_or_skip("grant_conflicts"))
		return;
	struct daemon_proc d;
	start(&d, NULL);
	devq *q = conn(d.sock, "admin");
	ck_assert_int_eq(grant(q, "job_7", NOBODY, 0, 0, 0, NULL), 0);
	ck_assert_int_eq(grant(q, "job_7", OTHER, 0, 0, 0, NULL), -EPROTONOSUPPORT);
	ck_assert_msg(strstr(devq_last_error(q), "failed_precondition"), "%s", devq_last_error(q));
	struct devq_evict_result r;
	ck_assert_int_eq(devq_admin_evict(q, "job_8", 0, &r), -ENOENT);
	ck_assert_msg(strstr(devq_last_error(q), "not_found"), "%s", devq_last_error(q));
	devq_disconnect(q);
	stop(&d);
}
END_TEST

/* An update-only grant changes a granted tenant and never makes one: none
 * by that name is not_found, with no tenant and no socket left behind,
 * before a grant and after its evict; devctl's --update-only the same. */
START_TEST(update_only_needs_grant)
{
	if (!root_or_skip("update_only_needs_grant"))
		return;
	struct daemon_proc d;
	start(&d, NULL);
	devq *q = conn(d.sock, "admin");
	struct devq_grant_request r = { .tenant = "job_5", .uid = NOBODY, .shares = 3, .of = 4,
					.memory_bytes = 1 << 20 };
	struct devq_grant g;
	struct stat st;
	struct devq_grant *list;
	size_t n;
	ck_assert_int_eq(devq_admin_update(q, &r, &g), -ENOENT);
	ck_assert_msg(strstr(devq_last_error(q), "not_found"), "%s", devq_last_error(q));
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	ck_assert_uint_eq(n, 0);
	free(list);
	ck_assert_int_eq(stat(tenant_sock(&d, "job_5"), &st), -1);
	/* Granted: the update changes it, the same tenant and socket. */
	ck_assert_int_eq(grant(q, "job_5", NOBODY, 1, 4, 0, NULL), 0);
	ck_assert_msg(devq_admin_update(q, &r, &g) == 0, "%s", devq_last_error(q));
	ck_assert_str_eq(g.socket, tenant_sock(&d, "job_5"));
	ck_assert_uint_eq(g.shares, 3);
	ck_assert_uint_eq(g.memory_bytes, 1 << 20);
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(list[0].shares, 3);
	free(list);
	/* Another uid's update is refused as a grant's is. */
	r.uid = OTHER;
	ck_assert_int_eq(devq_admin_update(q, &r, &g), -EPROTONOSUPPORT);
	r.uid = NOBODY;
	/* Evicted: not_found again, nothing made. */
	struct devq_evict_result e;
	ck_assert_int_eq(devq_admin_evict(q, "job_5", 0, &e), 0);
	ck_assert_int_eq(devq_admin_update(q, &r, &g), -ENOENT);
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	ck_assert_uint_eq(n, 0);
	free(list);
	ck_assert_int_eq(stat(tenant_sock(&d, "job_5"), &st), -1);
	devq_disconnect(q);
	const char *ctl = harness_bin("devctl");
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s --socket %s admin grant job_6 --uid 65534 --update-only "
		 "--json >/dev/null 2>&1", ctl, d.sock);
	ck_assert_int_eq(WEXITSTATUS(system(cmd)), 1);
	ck_assert_int_eq(stat(tenant_sock(&d, "job_6"), &st), -1);
	q = conn(d.sock, "admin");
	ck_assert_int_eq(grant(q, "job_6", NOBODY, 1, 4, 0, NULL), 0);
	snprintf(cmd, sizeof(cmd), "%s --socket %s admin grant job_6 --uid 65534 --shares 2 "
		 "--of 4 --update-only --json >/dev/null 2>&1", ctl, d.sock);
	ck_assert_int_eq(WEXITSTATUS(system(cmd)), 0);
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(list[0].shares, 2);
	free(list);
	devq_disconnect(q);
	stop(&d);
}
END_TEST

/* DEVQ_GRANTS_MAX (256) grants at once: the 256th is made, the 257th is
 * resource_exhausted; an update of a granted one still works. */
START_TEST(grant_count_bound)
{
	if (!root_or_skip("grant_count_bound"))
		return;
	struct daemon_proc d;
	start(&d, NULL);
	devq *q = conn(d.sock, "admin");
	char name[32];
	for (int i = 0; i < 256; i++) {
		snprintf(name, sizeof(name), "t%d", i);
		ck_assert_msg(grant(q, name, NOBODY, 0, 0, 0, NULL) == 0, "%d: %s", i,
			      devq_last_error(q));
	}
	ck_assert_int_eq(grant(q, "t256", NOBODY, 0, 0, 0, NULL), -ENOSPC);
	ck_assert_int_eq(grant(q, "t0", NOBODY, 2, 0, 0, NULL), 0);
	struct devq_evict_result r;
	ck_assert_int_eq(devq_admin_evict(q, "t1", 0, &r), 0);
	ck_assert_int_eq(grant(q, "t256", NOBODY, 0, 0, 0, NULL), 0);
	devq_disconnect(q);
	stop(&d);
}
END_TEST

/* ---- who may make admin calls -------------------------------------------- */

/* A non-admin gets permission_denied, on the main socket or its tenant
 * socket; a member of control-groups may grant; admin-group alone may not. */
START_TEST(admin_calls_need_rights)
{
	if (!root_or_skip("admin_calls_need_rights"))
		return;
	/* nobody is granted job_1 and still calls on the main socket: with
	 * grant-exclusive (the default) it could not. */
	const char *extra[] = { "--allow-users", "65534,65533", "--control-groups", "4242",
				"--admin-group", "root", "--grant-exclusive", "no", NULL };
	struct daemon_proc d;
	start(&d, extra);
	ck_assert_int_eq(chmod(d.sock, 0666), 0);
	devq *q = conn(d.sock, "admin");
	ck_assert_int_eq(grant(q, "job_1", NOBODY, 0, 0, 0, NULL), 0);
	devq_disconnect(q);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		become(NOBODY, NULL, 0);
		int bad = 0;
		devq *m = NULL;
		if (devq_connect(d.sock, "user", &m) < 0)
			_exit(10);
		if (grant(m, "job_2", NOBODY, 0, 0, 0, NULL) != -EACCES ||
		    !strstr(devq_last_error(m), "permission_denied"))
			bad |= 1;
		struct devq_evict_result r;
		if (devq_admin_evict(m, "job_1", 0, &r) != -EACCES)
			bad |= 2;
		struct devq_grant *l;
		size_t n;
		if (devq_admin_tenants(m, &l, &n) != -EACCES)
			bad |= 4;
		devq_disconnect(m);
		devq *t = NULL;
		if (devq_connect(tenant_sock(&d, "job_1"), "job", &t) < 0)
			_exit(11);
		if (grant(t, "job_3", NOBODY, 0, 0, 0, NULL) != -EACCES ||
		    !strstr(devq_last_error(t), "never on a tenant socket"))
			bad |= 8;
		devq_disconnect(t);
		_exit(bad);
	}
	ck_assert_int_eq(child_status(pid), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		gid_t g = 4242;
		become(OTHER, &g, 1);
		devq *m = NULL;
		if (devq_connect(d.sock, "operator", &m) < 0)
			_exit(10);
		int r = grant(m, "job_4", NOBODY, 0, 0, 0, NULL);
		devq_disconnect(m);
		_exit(r == 0 ? 0 : 1);
	}
	ck_assert_int_eq(child_status(pid), 0);
	stop(&d);
}
END_TEST

/* ---- the tenant socket --------------------------------------------------- */

/* Only the granted uid is admitted on a tenant socket, whatever the access
 * lists say (nobody is in none of them here); root is refused there unless
 * the grant is root's.  Every connection on it is the tenant's. */
START_TEST(tenant_socket_admits_its_uid)
{
	if (!root_or_skip("tenant_socket_admits_its_uid"))
		return;
	struct daemon_proc d;
	start(&d, NULL);
	devq *q = conn(d.sock, "admin");
	ck_assert_int_eq(grant(q, "job_5", NOBODY, 2, 4, 0, NULL), 0);
	ck_assert_int_eq(grant(q, "root_job", 0, 0, 0, 0, NULL), 0);
	/* Root is not nobody: the daemon refuses it (the file mode would not). */
	devq *r = NULL;
	ck_assert_int_eq(devq_connect(tenant_sock(&d, "job_5"), "root", &r), -EACCES);
	ck_assert_msg(strstr(devq_last_error(r), "granted to uid 65534"), "%s",
		      devq_last_error(r));
	devq_disconnect(r);
	devq *rj = conn(tenant_sock(&d, "root_job"), "root");
	devq_disconnect(rj);
	/* Nobody may not use the main socket but may use its tenant's. */
	int ready[2], done[2];
	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(done), 0);
	ck_assert_int_eq(chmod(d.sock, 0666), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		become(NOBODY, NULL, 0);
		devq *m = NULL;
		if (devq_connect(d.sock, "main", &m) != -EACCES)
			_exit(10);
		devq_disconnect(m);
		devq *a = NULL, *b = NULL;
		if (devq_connect(tenant_sock(&d, "job_5"), "job-a", &a) < 0 ||
		    devq_connect(tenant_sock(&d, "job_5"), "job-b", &b) < 0)
			_exit(11);
		/* A job's own status shows its sessions and its tenant. */
		struct devq_status *s;
		if (devq_get_status(a, &s) < 0)
			_exit(12);
		int bad = 0;
		size_t mine = 0;
		for (size_t i = 0; i < s->nsessions; i++)
			mine += s->sessions[i].uid == NOBODY;
		if (mine != 2)
			bad |= 1;
		bool seen = false;
		for (size_t i = 0; i < s->ntenants; i++)
			seen |= !strcmp(s->tenants[i].name, "job_5") && s->tenants[i].sessions == 2;
		if (!seen)
			bad |= 2;
		devq_status_free(s);
		if (write(ready[1], "r", 1) != 1)
			_exit(13);
		char c;
		if (read(done[0], &c, 1) != 1)
			_exit(14);
		devq_disconnect(a);
		devq_disconnect(b);
		_exit(bad);
	}
	char c;
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	struct devq_grant *list;
	size_t n;
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	bool seen = false;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(list[i].tenant, "job_5")) {
			seen = true;
			ck_assert_uint_eq(list[i].sessions, 2);
		}
	ck_assert(seen);
	free(list);
	/* The metrics label a granted tenant by its name. */
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s --socket %s metrics", harness_bin("devctl"), d.sock);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	char line[512];
	bool weight = false, uidrow = false;
	while (fgets(line, sizeof(line), p)) {
		/* After gpu and UUID, which join the GPU's own series. */
		bool gpu = strstr(line, "{gpu=\"0\",UUID=\"CPU-") != NULL;
		weight |= gpu && !strncmp(line, "devq_tenant_weight{", 19) &&
			  strstr(line, "\",tenant=\"job_5\"} 2\n");
		uidrow |= gpu && !strncmp(line, "devq_tenant_sessions{", 21) &&
			  strstr(line, "\",tenant=\"uid:0\"}");
	}
	ck_assert_int_eq(pclose(p), 0);
	ck_assert(weight);
	ck_assert(uidrow); /* uid tenants keep their label */
	ck_assert_int_eq(write(done[1], "d", 1), 1);
	ck_assert_int_eq(child_status(pid), 0);
	devq_disconnect(q);
	stop(&d);
}
END_TEST

/* --priority lets the tenant's sessions open high-priority queues; its
 * uid alone may not (nobody is not in priority-users). */
START_TEST(grant_priority)
{
	if (!root_or_skip("grant_priority"))
		return;
	const char *extra[] = { "--priority-streams", "1", NULL };
	struct daemon_proc d;
	start(&d, extra);
	devq *q = conn(d.sock, "admin");
	struct devq_grant_request r = { .tenant = "job_hi", .uid = NOBODY, .priority = true };
	struct devq_grant g;
	ck_assert_int_eq(devq_admin_grant(q, &r, &g), 0);
	ck_assert(g.priority);
	ck_assert_int_eq(grant(q, "job_lo", NOBODY, 0, 0, 0, NULL), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		become(NOBODY, NULL, 0);
		devq *hi = NULL, *lo = NULL;
		if (devq_connect(tenant_sock(&d, "job_hi"), "hi", &hi) < 0 ||
		    devq_connect(tenant_sock(&d, "job_lo"), "lo", &lo) < 0)
			_exit(10);
		int bad = 0;
		/* A refused open is an asynchronous error: a status round trip
		 * makes sure it has come. */
		struct devq_status *st;
		struct devq_error e;
		if (devq_queue_open_priority(hi, 1, 1) < 0 || devq_get_status(hi, &st) < 0)
			_exit(11);
		devq_status_free(st);
		if (devq_next_error(hi, &e) != 0)
			bad |= 1;
		struct devq_completion c;
		uint64_t p = spin(hi, 1, 1000);
		if (!p || devq_wait(hi, 1, p, 10000, &c) < 0 || c.code != DEVQ_OK)
			bad |= 2;
		if (devq_queue_open_priority(lo, 1, 1) < 0 || devq_get_status(lo, &st) < 0)
			_exit(12);
		devq_status_free(st);
		if (devq_next_error(lo, &e) != 1 || e.code != DEVQ_E_PERMISSION_DENIED)
			bad |= 4;
		devq_disconnect(hi);
		devq_disconnect(lo);
		_exit(bad);
	}
	ck_assert_int_eq(child_status(pid), 0);
	devq_disconnect(q);
	stop(&d);
}
END_TEST

/* The queue ids' streams in s's status: stream of queue id, or -1. */
static int queue_stream(devq *q, const char *client, uint32_t id)
{
	struct devq_status *st;
	ck_assert_int_eq(devq_get_status(q, &st), 0);
	int stream = -1;
	for (size_t i = 0; i < st->nsessions; i++) {
		if (strcmp(st->sessions[i].name, client))
			continue;
		for (size_t k = 0; k < st->sessions[i].nqueues_depth; k++)
			if (st->sessions[i].queue_depths[k].queue == id)
				stream = (int)st->sessions[i].queue_depths[k].stream;
	}
	devq_status_free(st);
	return stream;
}

/* A re-grant reaches the tenant's live sessions for priority too: without
 * --priority no new high-priority queue opens, and one already open runs
 * its next op on a normal stream; with it again, high queues open again. */
START_TEST(regrant_priority_reaches_sessions)
{
	if (!root_or_skip("regrant_priority_reaches_sessions"))
		return;
	const char *extra[] = { "--streams", "2", "--priority-streams", "1", NULL };
	struct daemon_proc d;
	start(&d, extra);
	devq *q = conn(d.sock, "admin");
	struct devq_grant_request r = { .tenant = "rj", .uid = 0, .priority = true };
	struct devq_grant g;
	ck_assert_int_eq(devq_admin_grant(q, &r, &g), 0);
	devq *t = conn(tenant_sock(&d, "rj"), "rj-client");
	struct devq_completion c;
	struct devq_error e;
	ck_assert_int_eq(devq_queue_open_priority(t, 1, 1), 0);
	uint64_t p = spin(t, 1, 1000);
	ck_assert_int_eq(devq_wait(t, 1, p, 10000, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_OK);
	ck_assert_int_eq(queue_stream(t, "rj-client", 1), 2); /* the high stream */

	r.priority = false;
	ck_assert_int_eq(devq_admin_grant(q, &r, &g), 0);
	ck_assert(!g.priority);
	/* A refused open is an asynchronous error: the status round trip of
	 * queue_stream makes sure it has come. */
	ck_assert_int_eq(devq_queue_open_priority(t, 2, 1), 0);
	ck_assert_int_eq(queue_stream(t, "rj-client", 2), -1);
	ck_assert_int_eq(devq_next_error(t, &e), 1);
	ck_assert_int_eq(e.code, DEVQ_E_PERMISSION_DENIED);
	p = spin(t, 1, 1000);
	ck_assert_int_eq(devq_wait(t, 1, p, 10000, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_OK);
	int s = queue_stream(t, "rj-client", 1);
	ck_assert_msg(s == 0 || s == 1, "queue 1 still on stream %d", s);

	r.priority = true;
	ck_assert_int_eq(devq_admin_grant(q, &r, &g), 0);
	ck_assert_int_eq(devq_queue_open_priority(t, 3, 1), 0);
	ck_assert_int_eq(queue_stream(t, "rj-client", 3), 2);
	ck_assert_int_eq(devq_next_error(t, &e), 0);
	devq_disconnect(t);
	devq_disconnect(q);
	stop(&d);
}
END_TEST

/* ---- the main socket of a granted uid ----------------------------------- */

/* nobody's side of the main-socket cases, in a child: one command byte at
 * a time from cmd, one answer byte on ans, '0' meaning as expected:
 *   'a' opens session A on the main socket
 *   'b' opens session B there, with an 8 MiB buffer
 *   'r' is refused on the main socket, naming the tenant socket and the
 *       setting grant-exclusive
 *   't' opens a session on tenant jobm's socket
 *   'A' finds session A alive (a status round trip)
 *   'B' finds session B closed (its request fails)
 *   'L' finds session B alive
 *   'q' quits */
static void nobody_side(const struct daemon_proc *d, int cmd, int ans)
{
	become(NOBODY, NULL, 0);
	devq *a = NULL, *b = NULL;
	char c;
	while (read(cmd, &c, 1) == 1 && c != 'q') {
		bool ok = false;
		devq *x = NULL;
		struct devq_buffer *buf;
		struct devq_status *st;
		switch (c) {
		case 'a':
			ok = devq_connect(d->sock, "main-a", &a) == 0;
			break;
		case 'b':
			ok = devq_connect(d->sock, "main-b", &b) == 0 &&
			     devq_buffer_create(b, 8 << 20, DEVQ_BUFFER_SHARED, &buf) == 0;
			break;
		case 'r':
			ok = devq_connect(d->sock, "main-r", &x) == -EACCES &&
			     strstr(devq_last_error(x), tenant_sock(d, "jobm")) &&
			     strstr(devq_last_error(x), "grant-exclusive");
			if (!ok)
				fprintf(stderr, "main socket: %s\n", devq_last_error(x));
			devq_disconnect(x);
			break;
		case 't':
			ok = devq_connect(tenant_sock(d, "jobm"), "job", &x) == 0;
			devq_disconnect(x);
			break;
		case 'A':
			ok = devq_get_status(a, &st) == 0;
			if (ok)
				devq_status_free(st);
			break;
		case 'B':
			ok = devq_get_status(b, &st) < 0;
			if (!ok)
				devq_status_free(st);
			break;
		case 'L':
			ok = devq_get_status(b, &st) == 0;
			if (ok)
				devq_status_free(st);
			break;
		}
		char r = ok ? '0' : '1';
		if (write(ans, &r, 1) != 1)
			_exit(91);
	}
	devq_disconnect(a);
	devq_disconnect(b);
	_exit(0);
}

struct nobody {
	pid_t pid;
	int cmd, ans;
};

static struct nobody nobody_start(const struct daemon_proc *d)
{
	int cmd[2], ans[2];
	ck_assert_int_eq(pipe(cmd), 0);
	ck_assert_int_eq(pipe(ans), 0);
	struct nobody n = { .pid = fork(), .cmd = cmd[1], .ans = ans[0] };
	ck_assert_int_ge(n.pid, 0);
	if (n.pid == 0) {
		close(cmd[1]);
		close(ans[0]);
		nobody_side(d, cmd[0], ans[1]);
	}
	ck_assert_int_eq(close(cmd[0]), 0);
	ck_assert_int_eq(close(ans[1]), 0);
	return n;
}

/* Whether nobody's side did c as expected. */
static bool nobody_does(const struct nobody *n, char c)
{
	char r = 0;
	ck_assert_int_eq(write(n->cmd, &c, 1), 1);
	ck_assert_int_eq(read(n->ans, &r, 1), 1);
	return r == '0';
}

static void nobody_stop(struct nobody *n)
{
	ck_assert_int_eq(write(n->cmd, "q", 1), 1);
	ck_assert_int_eq(child_status(n->pid), 0);
	ck_assert_int_eq(close(n->cmd), 0);
	ck_assert_int_eq(close(n->ans), 0);
}

/* A devqd that admits nobody on its main socket too (grant-exclusive as
 * given), an admin's connection q, and nobody's side n. */
struct main_case {
	struct daemon_proc d;
	devq *q;
	struct nobody n;
};

static void main_case_start(struct main_case *m, bool exclusive)
{
	const char *extra[] = { "--allow-users", "65534", "--grant-exclusive",
				exclusive ? "yes" : "no", NULL };
	start(&m->d, extra);
	ck_assert_int_eq(chmod(m->d.sock, 0666), 0);
	m->q = conn(m->d.sock, "admin");
	m->n = nobody_start(&m->d);
}

static void main_case_stop(struct main_case *m)
{
	nobody_stop(&m->n);
	devq_disconnect(m->q);
	stop(&m->d);
}

/* grant-exclusive (the default): while nobody holds a grant it is refused
 * on the main socket, which would make it its own uid tenant outside the
 * grant's cap, weight and eviction; the refusal names its tenant socket.
 * Its session from before the grant stays, and the grant says so; after
 * the evict it may connect there again. */
START_TEST(granted_uid_refused_on_main_socket)
{
	if (!root_or_skip("granted_uid_refused_on_main_socket"))
		return;
	struct main_case m;
	main_case_start(&m, true);
	devq *q = m.q;
	struct nobody *n = &m.n;
	ck_assert(nobody_does(n, 'a'));
	ck_assert_int_eq(grant(q, "jobm", NOBODY, 0, 0, 1 << 20, NULL), 0);
	ck_assert_msg(strstr(devq_admin_warning(q), "uid 65534 has 1 sessions on the main socket"),
		      "warning: '%s'", devq_admin_warning(q));
	ck_assert(nobody_does(n, 'r'));
	ck_assert(nobody_does(n, 't'));
	ck_assert(nobody_does(n, 'A'));
	struct devq_evict_result er;
	ck_assert_int_eq(devq_admin_evict(q, "jobm", 0, &er), 0);
	ck_assert(nobody_does(n, 'b'));
	main_case_stop(&m);
}
END_TEST

/* grant-exclusive = no: the uid may still connect on the main socket, and
 * the grant warns that it is outside the cap and weight there.  The evict
 * of its last grant closes its main-socket sessions opened after the grant
 * (B, which took 8 MiB against a cap of 1), not the one from before (A). */
START_TEST(evict_closes_main_sessions_after_grant)
{
	if (!root_or_skip("evict_closes_main_sessions_after_grant"))
		return;
	struct main_case m;
	main_case_start(&m, false);
	devq *q = m.q;
	struct nobody *n = &m.n;
	ck_assert(nobody_does(n, 'a'));
	ck_assert_int_eq(grant(q, "jobm", NOBODY, 0, 0, 1 << 20, NULL), 0);
	const char *w = devq_admin_warning(q);
	ck_assert_msg(strstr(w, "grant-exclusive is off") && strstr(w, "(1 sessions there now)"),
		      "warning: '%s'", w);
	ck_assert(nobody_does(n, 'b'));
	ck_assert(nobody_does(n, 't'));
	struct devq_evict_result er;
	ck_assert_int_eq(devq_admin_evict(q, "jobm", 0, &er), 0);
	ck_assert(nobody_does(n, 'B'));
	ck_assert(nobody_does(n, 'A'));
	main_case_stop(&m);
}
END_TEST

/* The uid's main-socket sessions go with its last grant whichever ends
 * last: B, opened under jobm, is closed when jobn ends after jobm (jobn's
 * own grant came after B). */
START_TEST(evict_last_grant_closes_earlier_main_sessions)
{
	if (!root_or_skip("evict_last_grant_closes_earlier_main_sessions"))
		return;
	struct main_case m;
	main_case_start(&m, false);
	devq *q = m.q;
	struct nobody *n = &m.n;
	ck_assert_int_eq(grant(q, "jobm", NOBODY, 0, 0, 1 << 20, NULL), 0);
	ck_assert(nobody_does(n, 'b'));
	ck_assert_int_eq(grant(q, "jobn", NOBODY, 0, 0, 1 << 20, NULL), 0);
	struct devq_evict_result er;
	ck_assert_int_eq(devq_admin_evict(q, "jobm", 0, &er), 0);
	ck_assert(nobody_does(n, 'L')); /* the uid still holds jobn */
	ck_assert_int_eq(devq_admin_evict(q, "jobn", 0, &er), 0);
	ck_assert(nobody_does(n, 'B'));
	main_case_stop(&m);
}
END_TEST

/* A grant's memory cap is at most 2^63 bytes, what the grants file keeps:
 * at the bound it is granted, one past it invalid_argument. */
START_TEST(grant_memory_bound)
{
	if (!root_or_skip("grant_memory_bound"))
		return;
	struct daemon_proc d;
	start(&d, NULL);
	devq *q = conn(d.sock, "admin");
	struct devq_grant g;
	ck_assert_int_eq(grant(q, "mem_max", NOBODY, 0, 0, UINT64_C(1) << 63, &g), 0);
	ck_assert_uint_eq(g.memory_bytes, UINT64_C(1) << 63);
	ck_assert_int_eq(grant(q, "mem_over", NOBODY, 0, 0, (UINT64_C(1) << 63) + 1, NULL),
			 -EINVAL);
	ck_assert_msg(strstr(devq_last_error(q), "at most 9223372036854775808"), "%s",
		      devq_last_error(q));
	devq_disconnect(q);
	stop(&d);
}
END_TEST

/* ---- memory caps ----------------------------------------------------------- */

/* --memory caps pinned plus device bytes over all of the tenant's sessions:
 * up to the cap exactly is allowed, a byte more is resource_exhausted; the
 * same uid's other job has its own cap and continues. */
START_TEST(memory_cap_spans_sessions)
{
	if (!root_or_skip("memory_cap_spans_sessions"))
		return;
	struct daemon_proc d;
	start(&d, NULL);
	devq *q = conn(d.sock, "admin");
	ck_assert_int_eq(grant(q, "job_a", NOBODY, 0, 0, 1 << 20, NULL), 0);
	ck_assert_int_eq(grant(q, "job_b", NOBODY, 0, 0, 1 << 20, NULL), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		become(NOBODY, NULL, 0);
		devq *a = NULL, *b = NULL, *c = NULL;
		if (devq_connect(tenant_sock(&d, "job_a"), "a1", &a) < 0 ||
		    devq_connect(tenant_sock(&d, "job_a"), "a2", &b) < 0 ||
		    devq_connect(tenant_sock(&d, "job_b"), "b1", &c) < 0)
			_exit(10);
		struct devq_buffer *x, *y, *z, *w, *v;
		int bad = 0;
		if (devq_buffer_create(a, 768 << 10, DEVQ_BUFFER_SHARED, &x) < 0)
			bad |= 1;
		if (devq_buffer_create(b, 252 << 10, DEVQ_BUFFER_DEVICE, &y) < 0)
			bad |= 2;
		/* 1020 KiB held: 4 KiB fit exactly, then not one byte more. */
		if (devq_buffer_create(b, 4096, DEVQ_BUFFER_SHARED, &z) < 0)
			bad |= 4;
		if (devq_buffer_create(a, 1, DEVQ_BUFFER_DEVICE, &w) != -ENOSPC ||
		    !strstr(devq_last_error(a), "resource_exhausted") ||
		    !strstr(devq_last_error(a), "tenant job_a"))
			bad |= 8;
		/* The other job of the same uid is not charged for it. */
		if (devq_buffer_create(c, 1 << 20, DEVQ_BUFFER_SHARED, &v) < 0)
			bad |= 16;
		devq_disconnect(a);
		devq_disconnect(b);
		devq_disconnect(c);
		_exit(bad);
	}
	ck_assert_int_eq(child_status(pid), 0);
	struct devq_grant *list;
	size_t n;
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(list[i].peak_bytes, 1 << 20);
	free(list);
	devq_disconnect(q);
	stop(&d);
}
END_TEST

/* A cap lowered below what the tenant holds: its buffers stay (an op on
 * one still runs), new ones are refused until use falls below the cap. */
START_TEST(cap_lowered_below_use)
{
	if (!root_or_skip("cap_lowered_below_use"))
		return;
	struct daemon_proc d;
	start(&d, NULL);
	devq *q = conn(d.sock, "admin");
	ck_assert_int_eq(grant(q, "rcap", 0, 0, 0, 4 << 20, NULL), 0);
	devq *t = conn(tenant_sock(&d, "rcap"), "rcap-client");
	struct devq_buffer *big, *small;
	ck_assert_int_eq(devq_buffer_create(t, 3 << 20, DEVQ_BUFFER_SHARED, &big), 0);
	ck_assert_int_eq(grant(q, "rcap", 0, 0, 0, 1 << 20, NULL), 0);
	ck_assert_int_eq(devq_buffer_create(t, 4096, DEVQ_BUFFER_SHARED, &small), -ENOSPC);
	ck_assert_msg(strstr(devq_last_error(t), "memory cap of 1048576"), "%s",
		      devq_last_error(t));
	ck_assert_int_eq(devq_queue_open(t, 0), 0);
	struct devq_op op = { .queue = 0, .kind = DEVQ_OP_FILL, .dst = big, .dst_offset = 0,
			      .size = 4096, .pattern = 7 };
	uint64_t p;
	ck_assert_int_eq(devq_submit(t, &op, 1, &p), 0);
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(t, 0, p, 10000, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_OK);
	ck_assert_int_eq(devq_buffer_release(t, big), 0);
	ck_assert_int_eq(devq_buffer_wait_released(t, big, 10000), 0);
	ck_assert_int_eq(devq_buffer_create(t, 1 << 20, DEVQ_BUFFER_SHARED, &small), 0);
	devq_disconnect(t);
	devq_disconnect(q);
	stop(&d);
}
END_TEST

/* ---- eviction ------------------------------------------------------------ */

struct job {
	pid_t pid;
	int ready;
};

/* A job of nobody on tenant name's socket: a 64 KiB buffer, one spin_buf
 * of run_ns on it running and `behind` more queued behind it on the same
 * queue.
 * Tells the parent once they are submitted; exits 0 when its connection was
 * closed under it (the evict) and the ops queued behind were cancelled. */
static struct job start_job(const struct daemon_proc *d, const char *name, uint64_t run_ns,
			    int behind)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	struct job j = { fork(), p[0] };
	ck_assert_int_ge(j.pid, 0);
	if (j.pid == 0) {
		close(p[0]);
		become(NOBODY, NULL, 0);
		devq *q = NULL;
		struct devq_buffer *b;
		if (devq_connect(tenant_sock(d, name), "job", &q) < 0 ||
		    devq_buffer_create(q, 64 << 10, DEVQ_BUFFER_SHARED, &b) < 0 ||
		    devq_queue_open(q, 1) < 0)
			_exit(10);
		struct devq_arg a[3] = { a_u64("ns", run_ns), a_u64("n", 64 << 10),
					 a_buf("buf", b, 0) };
		struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL,
				      .exec = exe(q, "spin_buf"), .args = a, .nargs = 3 };
		uint64_t last = 0;
		for (int i = 0; i <= behind; i++)
			if (devq_submit(q, &op, 1, &last) < 0)
				last = 0;
		if (!last || devq_flush(q) < 0)
			_exit(11);
		if (write(p[1], "r", 1) != 1)
			_exit(12);
		struct devq_completion c;
		int r = devq_wait(q, 1, last, 30000, &c);
		/* The last op was cancelled, unless it was the running one. */
		if (behind && r == 0 && c.code != DEVQ_E_CANCELLED)
			_exit(2);
		struct devq_status *st;
		_exit(devq_get_status(q, &st) < 0 ? 0 : 1); /* closed under it */
	}
	close(p[1]);
	return j;
}

static void job_ready(const struct job *j)
{
	char c;
	ck_assert_int_eq(read(j->ready, &c, 1), 1);
	close(j->ready);
}

/* The ops in the daemon of tenant name, from devctl admin tenants. */
static uint64_t tenant_inflight(devq *q, const char *name, bool *found)
{
	struct devq_grant *list;
	size_t n;
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	uint64_t v = 0;
	*found = false;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(list[i].tenant, name)) {
			*found = true;
			v = list[i].ops_in_flight;
		}
	free(list);
	return v;
}

/* Evict with ops in flight: the sessions close at once, the ops not
 * started are cancelled, the running one finishes, then the buffer is
 * freed and the answer comes with the usage; the socket is gone. */
START_TEST(evict_waits_for_running_op)
{
	if (!root_or_skip("evict_waits_for_running_op"))
		return;
	struct daemon_proc d;
	start(&d, NULL);
	devq *q = conn(d.sock, "admin");
	ck_assert_int_eq(grant(q, "job_ev", NOBODY, 0, 0, 0, NULL), 0);
	struct job j = start_job(&d, "job_ev", 400000000ull, 5);
	job_ready(&j);
	/* The first spin is running once the tenant has ops in the daemon
	 * and one of them is on the device; wait for the ops to arrive. */
	bool found;
	for (int i = 0; i < 500 && tenant_inflight(q, "job_ev", &found) < 6; i++)
		usleep(2000);
	ck_assert_uint_eq(tenant_inflight(q, "job_ev", &found), 6);
	usleep(50000); /* the worker has taken the first spin */
	struct devq_evict_result r;
	ck_assert_msg(devq_admin_evict(q, "job_ev", 10000, &r) == 0, "%s", devq_last_error(q));
	ck_assert_str_eq(r.tenant, "job_ev");
	ck_assert_uint_eq(r.still_running, 0);
	ck_assert_uint_eq(r.bytes_left, 0);
	ck_assert_uint_eq(r.cancelled, 5);
	ck_assert_uint_eq(r.errors, 0);
	ck_assert_uint_eq(r.peak_bytes, 64 << 10);
	/* The running spin ran to its end: its device time is counted. */
	ck_assert_uint_ge(r.device_ns, 400000000ull);
	ck_assert_int_eq(child_status(j.pid), 0);
	struct stat st;
	ck_assert_int_eq(stat(tenant_sock(&d, "job_ev"), &st), -1);
	ck_assert_int_eq(errno, ENOENT);
	tenant_inflight(q, "job_ev", &found);
	ck_assert(!found);
	/* Nothing of it is left in the daemon. */
	struct devq_status *s;
	ck_assert_int_eq(devq_get_status(q, &s), 0);
	ck_assert_uint_eq(s->buffers, 0);
	ck_assert_uint_eq(s->bytes_mapped, 0);
	for (size_t i = 0; i < s->nsessions; i++)
		ck_assert_uint_ne(s->sessions[i].uid, NOBODY);
	devq_status_free(s);
	/* The name may be granted again, afresh. */
	struct devq_grant g;
	ck_assert_int_eq(grant(q, "job_ev", NOBODY, 0, 0, 0, &g), 0);
	ck_assert_uint_eq(g.ops, 0);
	devq_disconnect(q);
	stop(&d);
}
END_TEST

/* A job of nobody on tenant name's socket running one gemm_f32 of
 * 4096^3 (seconds on a few cores) over device buffers.  Tells the parent
 * once it is submitted; exits 0 when the op was cancelled or its
 * connection closed under it, 2 when the gemm ran to its end. */
static struct job start_gemm_job(const struct daemon_proc *d, const char *name)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	struct job j = { fork(), p[0] };
	ck_assert_int_ge(j.pid, 0);
	if (j.pid == 0) {
		close(p[0]);
		become(NOBODY, NULL, 0);
		const uint64_t n = 4096;
		devq *q = NULL;
		struct devq_buffer *b[3];
		if (devq_connect(tenant_sock(d, name), "job", &q) < 0 || devq_queue_open(q, 1) < 0)
			_exit(10);
		for (int i = 0; i < 3; i++)
			if (devq_buffer_create(q, n * n * 4, DEVQ_BUFFER_DEVICE, &b[i]) < 0)
				_exit(10);
		struct devq_arg a[] = { a_u64("m", n), a_u64("n", n), a_u64("k", n),
					a_f32("alpha", 1.0f), a_f32("beta", 0.0f),
					a_buf("a", b[0], 0), a_buf("b", b[1], 0), a_buf("c", b[2], 0) };
		struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL,
				      .exec = exe(q, "gemm_f32"), .args = a, .nargs = 8 };
		uint64_t pt;
		if (devq_submit(q, &op, 1, &pt) < 0 || devq_flush(q) < 0)
			_exit(11);
		if (write(p[1], "r", 1) != 1)
			_exit(12);
		struct devq_completion c;
		int r = devq_wait(q, 1, pt, 60000, &c);
		_exit(r == 0 && c.code == DEVQ_OK ? 2 : 0);
	}
	close(p[1]);
	return j;
}

/* Evict with a long gemm running: it runs in slices, and stops at the end
 * of the one running when its session closes (cancelled, C partly
 * written), instead of running to its end; its buffers are freed and the
 * answer comes at once. */
START_TEST(evict_stops_sliced_gemm)
{
	if (!root_or_skip("evict_stops_sliced_gemm"))
		return;
	struct daemon_proc d;
	start(&d, NULL);
	devq *q = conn(d.sock, "admin");
	/* gemm_f32's code is the built-in host library (OpenBLAS), which a
	 * tree built without it (make mutate's) lacks. */
	if (devq_exec_info(q, exe(q, "gemm_f32"))->unavailable) {
		printf("SKIP evict_stops_sliced_gemm: gemm_f32 has no code here\n");
		devq_disconnect(q);
		stop(&d);
		return;
	}
	ck_assert_int_eq(grant(q, "job_gm", NOBODY, 0, 0, 0, NULL), 0);
	struct job j = start_gemm_job(&d, "job_gm");
	job_ready(&j);
	bool found;
	for (int i = 0; i < 500 && tenant_inflight(q, "job_gm", &found) < 1; i++)
		usleep(2000);
	ck_assert_uint_eq(tenant_inflight(q, "job_gm", &found), 1);
	usleep(300000); /* well into the gemm */
	uint64_t t0 = harness_now_ns();
	struct devq_evict_result r;
	ck_assert_msg(devq_admin_evict(q, "job_gm", 10000, &r) == 0, "%s", devq_last_error(q));
	uint64_t took_ms = (harness_now_ns() - t0) / 1000000;
	ck_assert_uint_eq(r.still_running, 0);
	ck_assert_uint_eq(r.bytes_left, 0);
	/* The running gemm itself completed cancelled. */
	ck_assert_uint_eq(r.cancelled, 1);
	ck_assert_uint_eq(r.errors, 0);
	/* A liveness bound (the gemm alone takes seconds here): the evict
	 * waited for one slice, not for the gemm's end. */
	ck_assert_msg(took_ms < 3000, "evict took %llu ms", (unsigned long long)took_ms);
	ck_assert_int_eq(child_status(j.pid), 0);
	struct devq_status *s;
	ck_assert_int_eq(devq_get_status(q, &s), 0);
	ck_assert_uint_eq(s->buffers, 0);
	ck_assert_uint_eq(s->ops_in_flight, 0);
	devq_status_free(s);
	devq_disconnect(q);
	stop(&d);
}
END_TEST

/* A grace shorter than the running op: the answer says what still runs,
 * and the buffer goes when the op ends. */
START_TEST(evict_grace_reports_still_running)
{
	if (!root_or_skip("evict_grace_reports_still_running"))
		return;
	struct daemon_proc d;
	start(&d, NULL);
	devq *q = conn(d.sock, "admin");
	ck_assert_int_eq(grant(q, "job_gr", NOBODY, 0, 0, 0, NULL), 0);
	struct job j = start_job(&d, "job_gr", 1500000000ull, 0);
	job_ready(&j);
	bool found;
	for (int i = 0; i < 500 && tenant_inflight(q, "job_gr", &found) < 1; i++)
		usleep(2000);
	usleep(50000);
	struct devq_evict_result r;
	ck_assert_int_eq(devq_admin_evict(q, "job_gr", 1, &r), 0);
	ck_assert_uint_eq(r.still_running, 1);
	ck_assert_uint_eq(r.bytes_left, 64 << 10);
	ck_assert_uint_eq(r.cancelled, 0);
	ck_assert_int_eq(child_status(j.pid), 0);
	/* Once it ends, its buffer is freed. */
	struct devq_status *s = NULL;
	for (int i = 0; i < 400; i++) {
		devq_status_free(s);
		ck_assert_int_eq(devq_get_status(q, &s), 0);
		if (!s->buffers && !s->ops_in_flight)
			break;
		usleep(10000);
	}
	ck_assert_uint_eq(s->buffers, 0);
	ck_assert_uint_eq(s->ops_in_flight, 0);
	devq_status_free(s);
	devq_disconnect(q);
	stop(&d);
}
END_TEST

/* ---- restarts and instances ------------------------------------------------ */

static void run_on_tenant_socket(const char *path)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		become(NOBODY, NULL, 0);
		devq *t = NULL;
		if (devq_connect(path, "after-restart", &t) < 0)
			_exit(10);
		if (devq_queue_open(t, 1) < 0)
			_exit(11);
		uint64_t p = spin(t, 1, 1000);
		struct devq_completion c;
		if (!p || devq_wait(t, 1, p, 10000, &c) < 0 || c.code != DEVQ_OK)
			_exit(12);
		devq_disconnect(t);
		_exit(0);
	}
	ck_assert_int_eq(child_status(pid), 0);
}

/* A file that keeps the harness from removing d's directory at a clean
 * stop, for a restart in it. */
static void keep(const struct daemon_proc *d, bool on)
{
	char p[160];
	snprintf(p, sizeof(p), "%s/keep", d->dir);
	if (on) {
		int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		ck_assert_int_ge(fd, 0);
		close(fd);
	} else {
		ck_assert_int_eq(unlink(p), 0);
	}
}

/* Grants outlive a restart (grants.<instance> in the state directory):
 * the socket is back and serves; an evicted one does not come back. */
START_TEST(grants_survive_restart)
{
	if (!root_or_skip("grants_survive_restart"))
		return;
	char state[] = "/tmp/devq-astate-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(state));
	const char *extra[] = { "--state-dir", state, NULL };
	struct daemon_proc d;
	start(&d, extra);
	devq *q = conn(d.sock, "admin");
	ck_assert_int_eq(grant(q, "job_keep", NOBODY, 3, 8, 4096, NULL), 0);
	ck_assert_int_eq(grant(q, "job_gone", NOBODY, 0, 0, 0, NULL), 0);
	struct devq_evict_result r;
	ck_assert_int_eq(devq_admin_evict(q, "job_gone", 0, &r), 0);
	devq_disconnect(q);
	keep(&d, true);
	ck_assert_int_eq(harness_stop(&d), 0);
	char file[128];
	snprintf(file, sizeof(file), "%s/grants.devqd", state);
	struct stat st;
	ck_assert_int_eq(stat(file, &st), 0);
	harness_restart(&d, extra);
	q = conn(d.sock, "admin");
	struct devq_grant *list;
	size_t n;
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(list[0].tenant, "job_keep");
	ck_assert_uint_eq(list[0].uid, NOBODY);
	ck_assert_uint_eq(list[0].shares, 3);
	ck_assert_uint_eq(list[0].of, 8);
	ck_assert_uint_eq(list[0].memory_bytes, 4096);
	free(list);
	run_on_tenant_socket(tenant_sock(&d, "job_keep"));
	ck_assert_int_eq(devq_admin_evict(q, "job_keep", 0, &r), 0);
	devq_disconnect(q);
	keep(&d, false);
	stop(&d);
	ck_assert_int_eq(unlink(file), 0);
	ck_assert_int_eq(rmdir(state), 0);
}
END_TEST

/* The metric labels of every tenant's row (devq_status tenant_extra),
 * "k=v,k=v" for the tenant name, or NULL when it has no row. */
static const char *labels_of(devq *q, const char *tenant)
{
	static char out[1200];
	struct devq_status *s;
	ck_assert_int_eq(devq_get_status(q, &s), 0);
	const char *r = NULL;
	for (size_t i = 0; i < s->ntenants; i++) {
		if (strcmp(s->tenants[i].name, tenant))
			continue;
		out[0] = '\0';
		for (size_t k = 0; k < s->tenant_extra[i].nlabels; k++) {
			strcat(out, k ? "," : "");
			strcat(out, s->tenant_extra[i].labels[k]);
		}
		r = out;
	}
	devq_status_free(s);
	return r;
}

/* grant --label: at most 8 labels (8 taken, 9 refused), key=value with a
 * label name devq does not set itself, a value without blanks or quotes;
 * given, they replace the tenant's, none keeps them; they are in the
 * metrics, after tenant, and outlive a restart (the grants file). */
START_TEST(grant_labels_bound_and_kept)
{
	if (!root_or_skip("grant_labels_bound_and_kept"))
		return;
	char state[] = "/tmp/devq-alabel-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(state));
	const char *extra[] = { "--state-dir", state, NULL };
	struct daemon_proc d;
	start(&d, extra);
	devq *q = conn(d.sock, "admin");
	struct devq_grant_request r = { .tenant = "job_l", .uid = NOBODY };
	struct devq_grant g;
	const char *eight[] = { "a=1", "b=2", "c=3", "d=4", "e=5", "f=6", "g=7", "job=42", "i=9" };
	ck_assert_int_eq(devq_admin_grant_labels(q, &r, eight, 9, 0, &g), -EINVAL);
	ck_assert_ptr_nonnull(strstr(devq_last_error(q), "9 labels; at most 8"));
	static const char *const bad[] = { "gpu=1", "UUID=x", "tenant=x", "le=1", "__x=1", "1a=1",
					   "a b=1", "k=", "=v", "k=a b", "k=a\"b", "k=a\\b", "kv" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(devq_admin_grant_labels(q, &r, &bad[i], 1, 0, &g) == -EINVAL,
			      "label '%s' was taken", bad[i]);
	const char *twice[] = { "a=1", "a=2" };
	ck_assert_int_eq(devq_admin_grant_labels(q, &r, twice, 2, 0, &g), -EINVAL);
	ck_assert_ptr_null(labels_of(q, "job_l")); /* nothing made by a refusal */
	ck_assert_int_eq(devq_admin_grant_labels(q, &r, eight, 8, 0, &g), 0);
	ck_assert_str_eq(labels_of(q, "job_l"), "a=1,b=2,c=3,d=4,e=5,f=6,g=7,job=42");
	/* None given keeps them; given, they replace them. */
	ck_assert_int_eq(grant(q, "job_l", NOBODY, 2, 2, 0, NULL), 0);
	ck_assert_str_eq(labels_of(q, "job_l"), "a=1,b=2,c=3,d=4,e=5,f=6,g=7,job=42");
	const char *two[] = { "job=42", "team=ml-x.1" };
	ck_assert_int_eq(devq_admin_grant_labels(q, &r, two, 2, DEVQ_GRANT_UPDATE_ONLY, &g), 0);
	ck_assert_str_eq(labels_of(q, "job_l"), "job=42,team=ml-x.1");
	/* In the metrics, after gpu, UUID and tenant. */
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "%s --socket %s metrics", harness_bin("devctl"), d.sock);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	char line[1024], was[1024] = "";
	bool seen = false;
	while (fgets(line, sizeof(line), p)) {
		if (strstr(line, "devq_tenant_weight{") && strstr(line, "job_l"))
			snprintf(was, sizeof(was), "%s", line);
		seen |= !strncmp(line, "devq_tenant_weight{gpu=\"0\",UUID=\"", 33) &&
			strstr(line, "\",tenant=\"job_l\",job=\"42\",team=\"ml-x.1\"} 1\n");
	}
	ck_assert_int_eq(pclose(p), 0);
	ck_assert_msg(seen, "no labelled devq_tenant_weight for job_l: %s", was);
	/* devctl takes --label too, and refuses a ninth itself. */
	snprintf(cmd, sizeof(cmd),
		 "%s --socket %s admin grant job_l --uid %d --label job=43 >/dev/null 2>&1",
		 harness_bin("devctl"), d.sock, NOBODY);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_str_eq(labels_of(q, "job_l"), "job=43");
	devq_disconnect(q);
	keep(&d, true);
	ck_assert_int_eq(harness_stop(&d), 0);
	harness_restart(&d, extra);
	q = conn(d.sock, "admin");
	ck_assert_str_eq(labels_of(q, "job_l"), "job=43");
	struct devq_evict_result er;
	ck_assert_int_eq(devq_admin_evict(q, "job_l", 0, &er), 0);
	devq_disconnect(q);
	keep(&d, false);
	stop(&d);
	char file[128];
	snprintf(file, sizeof(file), "%s/grants.devqd", state);
	ck_assert_int_eq(unlink(file), 0);
	ck_assert_int_eq(rmdir(state), 0);
}
END_TEST

/* Two instances share the state directory, not its files: devqd.sock's
 * lost-uids and grants are not gpu0.sock's (they once were, by device). */
START_TEST(instances_keep_own_state)
{
	if (!root_or_skip("instances_keep_own_state"))
		return;
	char state[] = "/tmp/devq-istate-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(state));
	char lost[128];
	snprintf(lost, sizeof(lost), "%s/lost-uids.devqd", state);
	FILE *f = fopen(lost, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "devqd lost-uids 1\n%d 5 %lld\n", NOBODY, (long long)time(NULL));
	ck_assert_int_eq(fclose(f), 0);
	const char *extra[] = { "--state-dir", state, "--allow-users", "65534", NULL };
	struct daemon_proc a;
	start(&a, extra);
	ck_assert_int_eq(chmod(a.sock, 0666), 0);
	/* The second instance, gpu0.sock, in a directory of its own. */
	struct daemon_proc b;
	memset(&b, 0, sizeof(b));
	snprintf(b.dir, sizeof(b.dir), "/tmp/devq-test-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(b.dir));
	ck_assert_int_eq(chmod(b.dir, 0711), 0);
	snprintf(b.sock, sizeof(b.sock), "%s/gpu0.sock", b.dir);
	snprintf(b.log, sizeof(b.log), "%s/devqd.log", b.dir);
	harness_restart(&b, extra);
	ck_assert_int_eq(chmod(b.sock, 0666), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		become(NOBODY, NULL, 0);
		devq *x = NULL, *y = NULL;
		int ra = devq_connect(a.sock, "a", &x);
		int rb = devq_connect(b.sock, "b", &y);
		devq_disconnect(x);
		devq_disconnect(y);
		/* Refused by the instance whose record names it, not the other. */
		_exit(ra == -EACCES && rb == 0 ? 0 : 1);
	}
	ck_assert_int_eq(child_status(pid), 0);
	devq *qa = conn(a.sock, "admin"), *qb = conn(b.sock, "admin");
	ck_assert_int_eq(grant(qa, "on_a", NOBODY, 0, 0, 0, NULL), 0);
	ck_assert_int_eq(grant(qb, "on_b", NOBODY, 0, 0, 0, NULL), 0);
	devq_disconnect(qa);
	devq_disconnect(qb);
	ck_assert_int_eq(harness_stop(&a), 0);
	keep(&b, true);
	ck_assert_int_eq(harness_stop(&b), 0);
	keep(&b, false);
	harness_restart(&b, extra);
	qb = conn(b.sock, "admin");
	struct devq_grant *list;
	size_t n;
	ck_assert_int_eq(devq_admin_tenants(qb, &list, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(list[0].tenant, "on_b");
	char bsock[160];
	snprintf(bsock, sizeof(bsock), "%s/gpu0.tenants/on_b.sock", b.dir);
	ck_assert_str_eq(list[0].socket, bsock);
	free(list);
	devq_disconnect(qb);
	stop(&b);
	char file[128];
	snprintf(file, sizeof(file), "%s/grants.devqd", state);
	ck_assert_int_eq(unlink(file), 0);
	snprintf(file, sizeof(file), "%s/grants.gpu0", state);
	ck_assert_int_eq(unlink(file), 0);
	ck_assert_int_eq(unlink(lost), 0);
	ck_assert_int_eq(rmdir(state), 0);
	rmdir(a.dir);
}
END_TEST

/* ---- the grants file ------------------------------------------------------ */

/* A fresh state directory in state (a mkdtemp template) whose grants.devqd
 * holds len bytes of text; its path in file. */
static void state_with(char *state, char *file, size_t n, const char *text, size_t len)
{
	ck_assert_ptr_nonnull(mkdtemp(state));
	snprintf(file, n, "%s/grants.devqd", state);
	FILE *f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

static void state_gone(const char *state, const char *file)
{
	ck_assert_int_eq(unlink(file), 0);
	ck_assert_int_eq(rmdir(state), 0);
}

/* Whether d's log says text (the whole log: file_has reads its start). */
static bool log_says(const struct daemon_proc *d, const char *text)
{
	FILE *f = fopen(d->log, "r");
	if (!f)
		return false;
	char *line = NULL;
	size_t cap = 0;
	bool found = false;
	while (!found && getline(&line, &cap, f) >= 0)
		found = strstr(line, text) != NULL;
	free(line);
	fclose(f);
	return found;
}

/* The granted tenants, by name: list[i] for name, or NULL. */
/* The test fails unless devqd's log holds text. */
static void expect_log(const struct daemon_proc *d, const char *text)
{
	ck_assert_msg(log_says(d, text), "'%s' is not in %s", text, d->log);
}

static const struct devq_grant *tenant_in(const struct devq_grant *list, size_t n,
					  const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(list[i].tenant, name))
			return &list[i];
	return NULL;
}

/* The loader reads whole lines: the tail of a long comment is no grant
 * (the 256-byte reader restored one, uid 65534 at 64 of 64 shares with
 * priority); a line that does not parse whole is logged with its line
 * number and skipped, and the others load: a uid past 32 bits is refused
 * (it wrapped to 0, a tenant socket for root), so are a sign and anything
 * after the last field; a line over 4096 bytes is skipped whole; trailing
 * blanks are fine, and so is a last line without its newline. */
START_TEST(grants_file_whole_lines)
{
	if (!root_or_skip("grants_file_whole_lines"))
		return;
	static char text[8192];
	size_t len = 0;
	len += (size_t)sprintf(text + len,
			       "# devqd grants v1: tenant uid shares of memory_bytes priority\n");
	/* 255 bytes of comment, then what looks like a grant: one 279-byte line. */
	text[len++] = '#';
	memset(text + len, 'x', 254);
	len += 254;
	len += (size_t)sprintf(text + len, "job_tail 65534 64 64 0 1\n");
	len += (size_t)sprintf(text + len, "job_ok 65534 2 4 4096 0\n"
					   "job_garbage 65534 1 1 0 0 x\n"
					   "job_root 4294967296 1 1 0 0\n"
					   "job_sign +0 1 1 0 0\n"
					   "job_huge 65534 1 1 0 0");
	/* A grant, but 5022 bytes long: skipped, not read in pieces. */
	memset(text + len, ' ', 5000);
	len += 5000;
	len += (size_t)sprintf(text + len, "\njob_blank 65534 1 1 0 0 \t \n"
					   "job_last 65534 1 1 0 1");
	char state[] = "/tmp/devq-gfile-XXXXXX", file[128];
	state_with(state, file, sizeof(file), text, len);
	const char *extra[] = { "--state-dir", state, NULL };
	struct daemon_proc d;
	start(&d, extra);
	devq *q = conn(d.sock, "admin");
	struct devq_grant *list;
	size_t n;
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	const struct devq_grant *g = tenant_in(list, n, "job_ok");
	ck_assert_ptr_nonnull(g);
	ck_assert_uint_eq(g->uid, NOBODY);
	ck_assert_uint_eq(g->shares, 2);
	ck_assert_uint_eq(g->of, 4);
	ck_assert_uint_eq(g->memory_bytes, 4096);
	ck_assert(!g->priority);
	ck_assert_ptr_nonnull(tenant_in(list, n, "job_blank"));
	g = tenant_in(list, n, "job_last");
	ck_assert_ptr_nonnull(g);
	ck_assert(g->priority);
	ck_assert_msg(n == 3, "%zu tenants restored, not 3 (see %s)", n, d.log);
	free(list);
	expect_log(&d, "grants.devqd:4: 'x' after the last field");
	expect_log(&d, "grants.devqd:5: uid 4294967296 is more than 4294967294");
	expect_log(&d, "grants.devqd:6: uid '+0' is not a decimal number");
	expect_log(&d, "grants.devqd:7: longer than 4096 bytes");
	run_on_tenant_socket(tenant_sock(&d, "job_last"));
	devq_disconnect(q);
	stop(&d);
	state_gone(state, file);
}
END_TEST

/* Each bound of a line at its limit loads, one past it is skipped: uid
 * 4294967294 / 4294967295 ((uid_t)-1), shares 1..64, of 65536 / 65537,
 * memory 2^63 / 2^63 + 1, priority 1 / 2.  No header: files of the
 * releases before the header named a version load too. */
START_TEST(grants_file_bounds)
{
	if (!root_or_skip("grants_file_bounds"))
		return;
	static const char text[] = "b_uid 4294967294 1 1 0 0\n"
				   "b_uid_over 4294967295 1 1 0 0\n"
				   "b_shares 65534 64 64 0 0\n"
				   "b_shares_over 65534 65 65 0 0\n"
				   "b_shares_zero 65534 0 1 0 0\n"
				   "b_of 65534 1 65536 0 0\n"
				   "b_of_over 65534 1 65537 0 0\n"
				   "b_mem 65534 1 1 9223372036854775808 0\n"
				   "b_mem_over 65534 1 1 9223372036854775809 0\n"
				   "b_prio 65534 1 1 0 1\n"
				   "b_prio_over 65534 1 1 0 2\n";
	char state[] = "/tmp/devq-gbound-XXXXXX", file[128];
	state_with(state, file, sizeof(file), text, sizeof(text) - 1);
	const char *extra[] = { "--state-dir", state, NULL };
	struct daemon_proc d;
	start(&d, extra);
	devq *q = conn(d.sock, "admin");
	struct devq_grant *list;
	size_t n;
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	const struct devq_grant *g = tenant_in(list, n, "b_uid");
	ck_assert_ptr_nonnull(g);
	ck_assert_uint_eq(g->uid, 4294967294u);
	g = tenant_in(list, n, "b_shares");
	ck_assert_ptr_nonnull(g);
	ck_assert_uint_eq(g->shares, 64);
	g = tenant_in(list, n, "b_of");
	ck_assert_ptr_nonnull(g);
	ck_assert_uint_eq(g->of, 65536);
	g = tenant_in(list, n, "b_mem");
	ck_assert_ptr_nonnull(g);
	ck_assert_uint_eq(g->memory_bytes, UINT64_C(9223372036854775808));
	g = tenant_in(list, n, "b_prio");
	ck_assert_ptr_nonnull(g);
	ck_assert(g->priority);
	ck_assert_msg(n == 5, "%zu tenants restored, not 5 (see %s)", n, d.log);
	free(list);
	expect_log(&d, "grants.devqd:2: uid 4294967295 is more than 4294967294");
	expect_log(&d, "grants.devqd:4: shares 65 is more than 64");
	expect_log(&d, "grants.devqd:5: shares 0; 1 to 64");
	expect_log(&d, "grants.devqd:7: of 65537 is more than 65536");
	expect_log(&d, "grants.devqd:9: memory_bytes 9223372036854775809 is more "
		       "than 9223372036854775808");
	expect_log(&d, "grants.devqd:11: priority 2 is more than 1");
	devq_disconnect(q);
	stop(&d);
	state_gone(state, file);
}
END_TEST

/* The header names the format's version: the unversioned header of
 * earlier releases loads, a grant rewrites the file under "v1", and a
 * version devqd does not know restores nothing, saying so. */
START_TEST(grants_file_versions)
{
	if (!root_or_skip("grants_file_versions"))
		return;
	static const char old[] = "# devqd grants: tenant uid shares of memory_bytes priority\n"
				  "v_old 65534 2 3 0 0\n";
	char state[] = "/tmp/devq-gver-XXXXXX", file[128];
	state_with(state, file, sizeof(file), old, sizeof(old) - 1);
	const char *extra[] = { "--state-dir", state, NULL };
	struct daemon_proc d;
	start(&d, extra);
	devq *q = conn(d.sock, "admin");
	struct devq_grant *list;
	size_t n;
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	ck_assert_uint_eq(n, 1);
	ck_assert_str_eq(list[0].tenant, "v_old");
	ck_assert_uint_eq(list[0].of, 3);
	free(list);
	ck_assert_int_eq(grant(q, "v_new", NOBODY, 1, 1, 0, NULL), 0);
	devq_disconnect(q);
	keep(&d, true);
	ck_assert_int_eq(harness_stop(&d), 0);
	FILE *f = fopen(file, "r");
	ck_assert_ptr_nonnull(f);
	char saved[512];
	size_t k = fread(saved, 1, sizeof(saved) - 1, f);
	saved[k] = '\0';
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_str_eq(saved, "# devqd grants v1: tenant uid shares of memory_bytes priority\n"
				"v_new 65534 1 1 0 0\n"
				"v_old 65534 2 3 0 0\n");
	/* A later format: nothing of it is restored. */
	static const char later[] = "# devqd grants v2: tenant uid shares of memory_bytes "
				    "priority labels\n"
				    "v_later 65534 1 1 0 0\n";
	f = fopen(file, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(later, 1, sizeof(later) - 1, f), sizeof(later) - 1);
	ck_assert_int_eq(fclose(f), 0);
	harness_restart(&d, extra);
	q = conn(d.sock, "admin");
	ck_assert_int_eq(devq_admin_tenants(q, &list, &n), 0);
	ck_assert_uint_eq(n, 0);
	free(list);
	expect_log(&d, "names no format this devqd reads (v1, or none); no grant "
		       "restored");
	devq_disconnect(q);
	keep(&d, false);
	stop(&d);
	state_gone(state, file);
}
END_TEST

/* ---- the tenant directory ------------------------------------------------- */

/* devqd on sock with the tenant directory as given: its exit status, its
 * log in log. */
static int start_refused(const char *dir, const char *sock, char *log, size_t n)
{
	snprintf(log, n, "%s/refused.log", dir);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, 2) < 0)
			_exit(120);
		harness_cudasim_env();
		execl(harness_bin("devqd"), "devqd", "--socket", sock, "--backend",
		      harness_backend(), (char *)NULL);
		_exit(127);
	}
	return child_status(pid);
}

static bool file_has(const char *path, const char *text)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	char buf[8192];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return strstr(buf, text) != NULL;
}

/* A tenant directory made by another user, or that others may write, makes
 * devqd refuse to start, saying why. */
START_TEST(tenant_dir_must_be_devqds)
{
	if (!root_or_skip("tenant_dir_must_be_devqds"))
		return;
	char dir[] = "/tmp/devq-tdir-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char sock[128], tdir[128], log[160];
	snprintf(sock, sizeof(sock), "%s/devqd.sock", dir);
	snprintf(tdir, sizeof(tdir), "%s/devqd.tenants", dir);
	ck_assert_int_eq(mkdir(tdir, 0711), 0);
	ck_assert_int_eq(chown(tdir, NOBODY, NOBODY), 0);
	ck_assert_int_ne(start_refused(dir, sock, log, sizeof(log)), 0);
	ck_assert_msg(file_has(log, "is owned by uid 65534") && file_has(log, "refusing to start"),
		      "see %s", log);
	ck_assert_int_eq(chown(tdir, 0, 0), 0);
	ck_assert_int_eq(chmod(tdir, 0731), 0);
	ck_assert_int_ne(start_refused(dir, sock, log, sizeof(log)), 0);
	ck_assert_msg(file_has(log, "writable by group or others"), "see %s", log);
	/* Its own directory, not writable by others: it starts. */
	ck_assert_int_eq(chmod(tdir, 0700), 0);
	const char *extra[] = { "--tenants-dir", tdir, NULL };
	struct daemon_proc d;
	start(&d, extra);
	struct stat st;
	ck_assert_int_eq(stat(tdir, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0711);
	stop(&d);
	unlink(log);
	unlink(sock);
	rmdir(tdir);
	ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* devqd on sock with --tenants-dir tdir, expected to refuse at start: its
 * exit status, or -1 when it still runs after 5 s (it is stopped then);
 * its log in log. */
static int start_with_tdir(const char *dir, const char *sock, const char *tdir, char *log,
			   size_t n)
{
	snprintf(log, n, "%s/refused.log", dir);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || dup2(fd, 2) < 0)
			_exit(120);
		harness_cudasim_env();
		execl(harness_bin("devqd"), "devqd", "--socket", sock, "--backend",
		      harness_backend(), "--tenants-dir", tdir, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 500; i++) {
		int st;
		pid_t w = waitpid(pid, &st, WNOHANG);
		ck_assert_int_ge(w, 0);
		if (w == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(10000);
	}
	ck_assert_int_eq(kill(pid, SIGTERM), 0);
	child_status(pid);
	return -1;
}

/* Every directory above the tenant directory must be root's or devqd's and
 * writable by others only with the sticky bit, and every symbolic link on
 * the way root's or devqd's: else anyone could put another directory, and
 * the sockets of its choice, where jobs are told to connect.  devqd refuses
 * to start then, as for an unsafe tenant directory, naming the culprit. */
START_TEST(tenant_dir_parents_must_be_safe)
{
	if (!root_or_skip("tenant_dir_parents_must_be_safe"))
		return;
	char top[] = "/tmp/devq-tpar-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(top));
	char up[64], real[64], link[80], tdir[96], via[96], sock[64], log[96];
	snprintf(up, sizeof(up), "%s/up", top);
	snprintf(real, sizeof(real), "%s/real", top);
	snprintf(link, sizeof(link), "%s/l", up);
	snprintf(tdir, sizeof(tdir), "%s/t", up);
	snprintf(via, sizeof(via), "%s/t", link);
	snprintf(sock, sizeof(sock), "%s/devqd.sock", top);
	ck_assert_int_eq(mkdir(up, 0700), 0);
	ck_assert_int_eq(mkdir(real, 0700), 0);
	ck_assert_int_eq(chmod(real, 0755), 0);
	/* root's, writable by all, not sticky */
	ck_assert_int_eq(chmod(up, 0777), 0);
	ck_assert_int_eq(start_with_tdir(top, sock, tdir, log, sizeof(log)), 1);
	ck_assert_msg(file_has(log, "the directory") && file_has(log, up) &&
		      file_has(log, "is writable by group or others without the sticky bit") &&
		      file_has(log, "refusing to start"), "see %s", log);
	/* another uid's, writable by it alone */
	ck_assert_int_eq(chmod(up, 0755), 0);
	ck_assert_int_eq(chown(up, NOBODY, NOBODY), 0);
	ck_assert_int_eq(start_with_tdir(top, sock, tdir, log, sizeof(log)), 1);
	ck_assert_msg(file_has(log, "is owned by uid 65534, not root or devqd's") &&
		      file_has(log, "refusing to start"), "see %s", log);
	/* root's and sticky (as /tmp), but the link on the way is another
	 * uid's: it may replace it */
	ck_assert_int_eq(chown(up, 0, 0), 0);
	ck_assert_int_eq(chmod(up, 01777), 0);
	ck_assert_int_eq(symlink(real, link), 0);
	ck_assert_int_eq(lchown(link, NOBODY, NOBODY), 0);
	ck_assert_int_eq(start_with_tdir(top, sock, via, log, sizeof(log)), 1);
	ck_assert_msg(file_has(log, "the symbolic link") && file_has(log, link) &&
		      file_has(log, "refusing to start"), "see %s", log);
	/* root's link in a sticky directory: devqd starts; the tenant
	 * directory is made where the link leads, and jobs are told the path
	 * as it was given. */
	ck_assert_int_eq(lchown(link, 0, 0), 0);
	const char *extra[] = { "--tenants-dir", via, NULL };
	struct daemon_proc d;
	start(&d, extra);
	devq *q = conn(d.sock, "admin");
	struct devq_grant g;
	ck_assert_msg(grant(q, "job_up", NOBODY, 0, 0, 0, &g) == 0, "%s", devq_last_error(q));
	char want[128], made[128];
	snprintf(want, sizeof(want), "%s/job_up.sock", via);
	ck_assert_str_eq(g.socket, want);
	snprintf(made, sizeof(made), "%s/t/job_up.sock", real);
	struct stat st;
	ck_assert_int_eq(lstat(made, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	ck_assert_uint_eq(st.st_uid, NOBODY);
	ck_assert_uint_eq(st.st_mode & 07777, 0600);
	devq_disconnect(q);
	stop(&d);
	/* The socket and the directory it made are gone. */
	snprintf(made, sizeof(made), "%s/t", real);
	ck_assert_int_eq(lstat(made, &st), -1);
	ck_assert_int_eq(unlink(link), 0);
	ck_assert_int_eq(rmdir(real), 0);
	ck_assert_int_eq(rmdir(up), 0);
	ck_assert_int_eq(unlink(log), 0);
	ck_assert_int_eq(rmdir(top), 0);
}
END_TEST

/* A file named path, for devqd to leave alone. */
static void bait(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(close(fd), 0);
}

/* The tenant directory is opened once, and its sockets removed through
 * that: one moved away after a grant, and a link or another directory put
 * in its place, does not make evict remove a file of the socket's name
 * there (it once did, by path).  A grant takes the directory at the path
 * again only once none of the old one's sockets is left. */
START_TEST(tenant_dir_swapped_after_grant)
{
	if (!root_or_skip("tenant_dir_swapped_after_grant"))
		return;
	char top[] = "/tmp/devq-tswap-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(top));
	char tdir[64], moved[64], other[64], p[96];
	snprintf(tdir, sizeof(tdir), "%s/t", top);
	snprintf(moved, sizeof(moved), "%s/moved", top);
	snprintf(other, sizeof(other), "%s/other", top);
	ck_assert_int_eq(mkdir(other, 0700), 0);
	const char *extra[] = { "--tenants-dir", tdir, NULL };
	struct daemon_proc d;
	start(&d, extra);
	devq *q = conn(d.sock, "admin");
	ck_assert_msg(grant(q, "job_s1", NOBODY, 0, 0, 0, NULL) == 0, "%s", devq_last_error(q));
	ck_assert_int_eq(grant(q, "job_s2", NOBODY, 0, 0, 0, NULL), 0);
	/* A link to another directory in its place. */
	ck_assert_int_eq(rename(tdir, moved), 0);
	ck_assert_int_eq(symlink(other, tdir), 0);
	snprintf(p, sizeof(p), "%s/job_s1.sock", other);
	bait(p);
	struct devq_evict_result r;
	ck_assert_msg(devq_admin_evict(q, "job_s1", 0, &r) == 0, "%s", devq_last_error(q));
	struct stat st;
	ck_assert_msg(lstat(p, &st) == 0, "%s was removed through the link", p);
	snprintf(p, sizeof(p), "%s/job_s1.sock", moved);
	ck_assert_int_eq(lstat(p, &st), -1); /* devqd's own socket is gone */
	ck_assert_int_eq(errno, ENOENT);
	/* A new grant's socket would not be where its path leads, and the
	 * moved directory still holds job_s2's: refused. */
	ck_assert_int_eq(grant(q, "job_s3", NOBODY, 0, 0, 0, NULL), -EPROTONOSUPPORT);
	ck_assert_msg(strstr(devq_last_error(q), "was moved, removed or replaced"), "%s",
		      devq_last_error(q));
	/* Another directory in its place. */
	ck_assert_int_eq(unlink(tdir), 0);
	ck_assert_int_eq(mkdir(tdir, 0700), 0);
	snprintf(p, sizeof(p), "%s/job_s2.sock", tdir);
	bait(p);
	ck_assert_msg(devq_admin_evict(q, "job_s2", 0, &r) == 0, "%s", devq_last_error(q));
	ck_assert_msg(lstat(p, &st) == 0, "%s was removed by path", p);
	snprintf(p, sizeof(p), "%s/job_s2.sock", moved);
	ck_assert_int_eq(lstat(p, &st), -1);
	/* Nothing is left in the moved one: the directory now at the path
	 * (root's, so devqd's own) takes the next grant. */
	struct devq_grant g;
	ck_assert_msg(grant(q, "job_s3", NOBODY, 0, 0, 0, &g) == 0, "%s", devq_last_error(q));
	snprintf(p, sizeof(p), "%s/job_s3.sock", tdir);
	ck_assert_str_eq(g.socket, p);
	ck_assert_int_eq(lstat(p, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	devq_disconnect(q);
	stop(&d);
	ck_assert_int_eq(lstat(p, &st), -1);
	/* At stop devqd removes the directory it uses only if empty, and the
	 * one it had, moved, is not at the path any more: both are left. */
	snprintf(p, sizeof(p), "%s/job_s2.sock", tdir);
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(rmdir(tdir), 0);
	snprintf(p, sizeof(p), "%s/job_s1.sock", other);
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(rmdir(other), 0);
	ck_assert_int_eq(rmdir(moved), 0);
	ck_assert_int_eq(rmdir(top), 0);
}
END_TEST

/* ---- devctl ----------------------------------------------------------------- */

static int run_out(const char *cmd, char *out, size_t n)
{
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	size_t k = fread(out, 1, n - 1, p);
	out[k] = '\0';
	int st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The JSON of devctl admin grant, tenants and evict, field by field, and
 * devctl health's exit status. */
START_TEST(devctl_admin_json)
{
	if (!root_or_skip("devctl_admin_json"))
		return;
	struct daemon_proc d;
	start(&d, NULL);
	const char *ctl = harness_bin("devctl");
	char cmd[512], out[4096], want[512];
	snprintf(cmd, sizeof(cmd),
		 "%s --socket %s admin grant job_9 --uid 65534 --shares 2 --of 4 --memory 1M "
		 "--priority --json", ctl, d.sock);
	ck_assert_int_eq(run_out(cmd, out, sizeof(out)), 0);
	snprintf(want, sizeof(want),
		 "{\"tenant\":\"job_9\",\"uid\":65534,\"socket\":\"%s\",\"shares\":2,\"of\":4,"
		 "\"memory_bytes\":1048576,\"priority\":true}\n", tenant_sock(&d, "job_9"));
	ck_assert_str_eq(out, want);
	snprintf(cmd, sizeof(cmd), "%s --socket %s admin tenants --json", ctl, d.sock);
	ck_assert_int_eq(run_out(cmd, out, sizeof(out)), 0);
	snprintf(want, sizeof(want),
		 "[{\"tenant\":\"job_9\",\"uid\":65534,\"socket\":\"%s\",\"shares\":2,\"of\":4,"
		 "\"memory_bytes\":1048576,\"priority\":true,\"sessions\":0,\"device_ns\":0,"
		 "\"ops\":0,\"peak_bytes\":0,\"errors\":0,\"cancelled\":0,\"still_running\":0,"
		 "\"bytes\":0}]\n", tenant_sock(&d, "job_9"));
	ck_assert_str_eq(out, want);
	snprintf(cmd, sizeof(cmd), "%s --socket %s admin evict job_9 --grace 1000 --json", ctl,
		 d.sock);
	ck_assert_int_eq(run_out(cmd, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "{\"tenant\":\"job_9\",\"device_ns\":0,\"ops\":0,\"peak_bytes\":0,"
			      "\"errors\":0,\"cancelled\":0,\"still_running\":0}\n");
	snprintf(cmd, sizeof(cmd), "%s --socket %s admin evict job_9 2>&1", ctl, d.sock);
	ck_assert_int_eq(run_out(cmd, out, sizeof(out)), 1);
	ck_assert_msg(strstr(out, "not_found"), "%s", out);
	snprintf(cmd, sizeof(cmd), "%s --socket %s admin grant ../x --uid 1 2>&1", ctl, d.sock);
	ck_assert_int_eq(run_out(cmd, out, sizeof(out)), 1);
	ck_assert_msg(strstr(out, "invalid_argument"), "%s", out);
	snprintf(cmd, sizeof(cmd), "%s --socket %s health --json", ctl, d.sock);
	ck_assert_int_eq(run_out(cmd, out, sizeof(out)), 0);
	ck_assert_msg(!strncmp(out, "{\"ok\":true,", 11), "%s", out);
	stop(&d);
	/* No daemon on the socket: not healthy. */
	char gone[160];
	snprintf(gone, sizeof(gone), "/tmp/devq-no-daemon-%d.sock", (int)getpid());
	snprintf(cmd, sizeof(cmd), "%s --socket %s health --json", ctl, gone);
	ck_assert_int_eq(run_out(cmd, out, sizeof(out)), 3);
	ck_assert_msg(!strncmp(out, "{\"ok\":false,", 12), "%s", out);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("admin");
	TCase *t = tcase_create("admin");
	tcase_set_timeout(t, 60);
	tcase_add_test(t, grant_makes_socket);
	tcase_add_test(t, grant_names);
	tcase_add_test(t, grant_socket_path_bound);
	tcase_add_test(t, grant_conflicts);
	tcase_add_test(t, update_only_needs_grant);
	tcase_add_test(t, grant_count_bound);
	tcase_add_test(t, admin_calls_need_rights);
	tcase_add_test(t, tenant_socket_admits_its_uid);
	tcase_add_test(t, grant_priority);
	tcase_add_test(t, regrant_priority_reaches_sessions);
	tcase_add_test(t, granted_uid_refused_on_main_socket);
	tcase_add_test(t, evict_closes_main_sessions_after_grant);
	tcase_add_test(t, evict_last_grant_closes_earlier_main_sessions);
	tcase_add_test(t, grant_memory_bound);
	tcase_add_test(t, memory_cap_spans_sessions);
	tcase_add_test(t, cap_lowered_below_use);
	tcase_add_test(t, evict_waits_for_running_op);
	tcase_add_test(t, evict_grace_reports_still_running);
	tcase_add_test(t, evict_stops_sliced_gemm);
	tcase_add_test(t, grants_survive_restart);
	tcase_add_test(t, grant_labels_bound_and_kept);
	tcase_add_test(t, instances_keep_own_state);
	tcase_add_test(t, grants_file_whole_lines);
	tcase_add_test(t, grants_file_bounds);
	tcase_add_test(t, grants_file_versions);
	tcase_add_test(t, tenant_dir_must_be_devqds);
	tcase_add_test(t, devctl_admin_json);
	tcase_add_test(t, tenant_dir_parents_must_be_safe);
	tcase_add_test(t, tenant_dir_swapped_after_grant);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return harness_main(suite());
}
