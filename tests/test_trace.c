/* SPDX-License-Identifier: Apache-2.0 */
/* devctl trace and the daemon's op recorder, against a real devqd:
 * the JSON and SVG files checked by tests/trace/check_trace.py against the
 * completions the clients received, who may trace whom, --last / since /
 * a disabled recorder, and devctl top --once. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

/* Runs argv with stdout and stderr into out (may be NULL); exit status. */
static int run(const char *const *argv, const char *out)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (out) {
			int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
			if (fd < 0)
				_exit(126);
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	ck_assert_msg(f != NULL, "cannot read %s", path);
	static char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void dump_file(const char *path)
{
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "cat %s >&2", path);
	if (system(cmd) < 0)
		perror("system");
}

/* One completion as the checker wants it. */
struct seen {
	uint64_t session;
	struct devq_completion c;
};

static void put_seen(FILE *f, const struct seen *s, bool comma)
{
	const struct devq_timing *t = &s->c.t;
	fprintf(f,
		"%s{\"session\":%" PRIu64 ",\"queue\":%u,\"point\":%" PRIu64 ",\"code\":%d,"
		"\"client_submit\":%" PRIu64 ",\"received\":%" PRIu64 ",\"handoff\":%" PRIu64
		",\"device_start\":%" PRIu64 ",\"device_end\":%" PRIu64 ",\"observed\":%" PRIu64
		",\"client_received\":%" PRIu64 "}\n",
		comma ? "," : "", s->session, s->c.queue, s->c.point, s->c.code, t->client_submit,
		t->received, t->handoff, t->device_start, t->device_end, t->observed,
		t->client_received);
}

/* ---- a second client, in its own process ---------------------------- */

/* Connects as name, runs n spins on queue 1, writes its completions to fd.
 * Returns an exit status; no Check calls in a forked client. */
static int client_b(const char *sock, const char *name, int n, int fd)
{
	devq *q = NULL;
	if (devq_connect(sock, name, &q) < 0) {
		fprintf(stderr, "client b: %s\n", q ? devq_last_error(q) : "connect");
		return 10;
	}
	const struct devq_exec *spin;
	if (devq_exec_lookup(q, "spin", &spin) < 0 || devq_queue_open(q, 1) < 0)
		return 11;
	struct devq_arg a = { .name = "ns", .type = DEVQ_ARG_U64, .v.u64 = 2000000 };
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = spin, .args = &a,
			      .nargs = 1 };
	for (int i = 0; i < n; i++)
		if (devq_submit(q, &op, 1, NULL) < 0)
			return 12;
	for (int i = 1; i <= n; i++) {
		struct seen s = { .session = devq_get_info(q)->session };
		if (devq_wait(q, 1, (uint64_t)i, 60000, &s.c) < 0 || s.c.code != DEVQ_OK)
			return 13;
		if (write(fd, &s, sizeof(s)) != (ssize_t)sizeof(s))
			return 14;
	}
	devq_disconnect(q);
	return 0;
}

START_TEST(trace_two_clients_json_and_svg)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "client-a");
	uint64_t sa = devq_get_info(q)->session;
	struct devq_buffer *x = mkbuf(q, 65536), *y = mkbuf(q, 8);
	for (uint32_t i = 1; i <= 3; i++)
		ck_assert_int_eq(devq_queue_open(q, i), 0);
	/* Client b starts only now: its queue takes the fourth stream.  Started
	 * earlier, it could finish and free its stream before a's third queue
	 * opened, which then took that stream (3 lanes, seen under load). */
	int pfd[2];
	ck_assert_int_eq(pipe(pfd), 0);
	pid_t b = fork();
	ck_assert_int_ge(b, 0);
	if (b == 0) {
		close(pfd[0]);
		_exit(client_b(d.sock, "client-b", 2, pfd[1]));
	}
	close(pfd[1]);
	/* (1,1) writes x for 30 ms; (2,1) reads it with an explicit wait;
	 * (3,1) overwrites it: hazard waits on the writer and the reader. */
	struct devq_arg a1[] = { a_u64("ns", 30000000), a_u64("n", 65536), a_buf("buf", x, 0) };
	struct devq_arg a2[] = { a_u64("n", 65536), a_buf("data", x, 0), a_buf("out", y, 0) };
	struct devq_wait w = { 1, 1 };
	struct devq_op ops[3] = {
		{ .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin_buf"), .args = a1, .nargs = 3 },
		{ .queue = 2, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "checksum"), .args = a2, .nargs = 3,
		  .waits = &w, .nwaits = 1 },
		{ .queue = 3, .kind = DEVQ_OP_FILL, .dst = x, .size = 65536, .pattern = 7 },
	};
	ck_assert_int_eq(devq_submit(q, ops, 3, NULL), 0);
	/* Released while all three use it: freed after the last of them. */
	uint64_t xid = x->id;
	ck_assert_int_eq(devq_buffer_release(q, x), 0);
	struct seen seen[8];
	int n = 0;
	for (uint32_t i = 1; i <= 3; i++) {
		seen[n].session = sa;
		ck_assert_int_eq(devq_wait(q, i, 1, 60000, &seen[n].c), 0);
		ck_assert_int_eq(seen[n].c.code, DEVQ_OK);
		harness_check_monotonic(&seen[n].c);
		n++;
	}
	ck_assert_int_eq(devq_buffer_wait_released(q, x, 60000), 0);
	while (n < 5 && read(pfd[0], &seen[n], sizeof(seen[n])) == (ssize_t)sizeof(seen[n]))
		n++;
	close(pfd[0]);
	int st;
	ck_assert_int_eq(waitpid(b, &st, 0), b);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client b failed: %d", st);
	ck_assert_int_eq(n, 5);
	uint64_t sb = seen[3].session;

	char json[160], svg[160], expect[160], log[160];
	snprintf(json, sizeof(json), "%s/trace.json", d.dir);
	snprintf(svg, sizeof(svg), "%s/trace.svg", d.dir);
	snprintf(expect, sizeof(expect), "%s/expect.json", d.dir);
	snprintf(log, sizeof(log), "%s/out.log", d.dir);
	const char *tr[] = { harness_bin("devctl"), "--socket", d.sock, "trace", "-o", json,
			     "--svg", svg, NULL };
	int rc = run(tr, log);
	if (rc)
		dump_file(log);
	ck_assert_int_eq(rc, 0);

	FILE *f = fopen(expect, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "{\"sessions\":{\"%" PRIu64 "\":{\"pid\":%d,\"uid\":%u,\"name\":\"client-a\"},"
		   "\"%" PRIu64 "\":{\"pid\":%d,\"uid\":%u,\"name\":\"client-b\"}},\n",
		sa, (int)getpid(), (unsigned)getuid(), sb, (int)b, (unsigned)getuid());
	fprintf(f, "\"completions\":[\n");
	for (int i = 0; i < n; i++)
		put_seen(f, &seen[i], i > 0);
	fprintf(f, "],\"deps\":["
		   "{\"from\":[%" PRIu64 ",1,1],\"to\":[%" PRIu64 ",2,1],\"name\":\"explicit wait\"},"
		   "{\"from\":[%" PRIu64 ",1,1],\"to\":[%" PRIu64 ",3,1],\"name\":\"buffer hazard\"},"
		   "{\"from\":[%" PRIu64 ",2,1],\"to\":[%" PRIu64 ",3,1],\"name\":\"buffer hazard\"}],\n",
		sa, sa, sa, sa, sa, sa);
	fprintf(f, "\"releases\":[{\"session\":%" PRIu64 ",\"buffer\":%" PRIu64
		   ",\"after\":[%" PRIu64 ",3,1]}],\n",
		sa, xid, sa);
	/* Four queues opened, each bound to the least-loaded of 4 streams. */
	fprintf(f, "\"lanes\":4}\n");
	fclose(f);

	const char *chk[] = { "python3", "tests/trace/check_trace.py", json, expect, svg, NULL };
	rc = run(chk, log);
	if (rc)
		dump_file(log);
	ck_assert_msg(rc == 0, "check_trace.py found problems (above)");
	ck_assert_ptr_nonnull(strstr(slurp(log), "check_trace: ok"));

	/* The checker must be able to fail: a consumer that never waited. */
	f = fopen(expect, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "{\"deps\":[{\"from\":[%" PRIu64 ",1,1],\"to\":[%" PRIu64
		   ",1,1],\"name\":\"explicit wait\"}]}\n",
		sb, sa);
	fclose(f);
	ck_assert_int_eq(run(chk, log), 1);
	unlink(json);
	unlink(svg);
	unlink(expect);
	unlink(log);

	devq_buffer_release(q, y);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* ---- who may trace whom ----------------------------------------------- */

/* Whether this devqd has the access policy flag (the check holds with and
 * without it: uid 65534 must be admitted to ask at all). */
static bool daemon_has_flag(const char *flag)
{
	char out[200];
	snprintf(out, sizeof(out), "/tmp/devq-trace-help-%d.txt", (int)getpid());
	const char *argv[] = { harness_bin("devqd"), "--help", NULL };
	run(argv, out);
	bool has = strstr(slurp(out), flag) != NULL;
	unlink(out);
	return has;
}

struct nobody_result {
	int connect_rc;
	int all_rc;
	char all_msg[200];
	int own_rc;
	int cli_all_rc, cli_own_rc; /* devctl trace --all / -o FILE, as 65534 */
	uint64_t self;
	size_t nops, foreign_ops, nsessions, foreign_sessions;
};

/* As uid/gid 65534: runs an op, asks for everyone, then for itself, with
 * libdevq and with devctl (its output files go to dir). */
static void as_nobody(const char *sock, const char *dir, gid_t gid, const gid_t *sup, size_t nsup,
		      struct nobody_result *r)
{
	memset(r, 0, sizeof(*r));
	if (setgroups(nsup, sup) < 0 || setgid(gid) < 0 || setuid(65534) < 0) {
		r->connect_rc = -EPERM;
		return;
	}
	devq *q = NULL;
	r->connect_rc = devq_connect(sock, "nobody", &q);
	if (r->connect_rc < 0) {
		snprintf(r->all_msg, sizeof(r->all_msg), "%s", q ? devq_last_error(q) : "");
		devq_disconnect(q);
		return;
	}
	r->self = devq_get_info(q)->session;
	const struct devq_exec *spin;
	struct devq_arg a = { .name = "ns", .type = DEVQ_ARG_U64, .v.u64 = 1000 };
	if (devq_exec_lookup(q, "spin", &spin) == 0 && devq_queue_open(q, 1) == 0) {
		struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = spin, .args = &a,
				      .nargs = 1 };
		devq_submit(q, &op, 1, NULL);
		devq_wait(q, 1, 1, 60000, NULL);
	}
	struct devq_trace *t = NULL;
	struct devq_trace_query all = { .all = true };
	r->all_rc = devq_trace_get(q, &all, &t);
	snprintf(r->all_msg, sizeof(r->all_msg), "%s", devq_last_error(q));
	devq_trace_free(t);
	t = NULL;
	struct devq_trace_query own = { 0 };
	r->own_rc = devq_trace_get(q, &own, &t);
	if (t) {
		r->nops = t->nops;
		for (size_t i = 0; i < t->nops; i++)
			r->foreign_ops += t->ops[i].session != r->self;
		r->nsessions = t->nsessions;
		for (size_t i = 0; i < t->nsessions; i++)
			r->foreign_sessions += t->sessions[i].uid != 65534;
	}
	devq_trace_free(t);
	devq_disconnect(q);

	char json[160], log[160];
	snprintf(json, sizeof(json), "%s/nobody.json", dir);
	snprintf(log, sizeof(log), "%s/nobody-all.log", dir);
	const char *all_argv[] = { harness_bin("devctl"), "--socket", sock, "trace", "--all", "-o",
				   json, NULL };
	r->cli_all_rc = run(all_argv, log);
	snprintf(log, sizeof(log), "%s/nobody-own.log", dir);
	const char *own_argv[] = { harness_bin("devctl"), "--socket", sock, "trace", "-o", json,
				   NULL };
	r->cli_own_rc = run(own_argv, log);
}

/* Runs as_nobody in a child with primary group gid and supplementary
 * groups sup[nsup]. */
static void nobody_run(struct daemon_proc *d, gid_t gid, const gid_t *sup, size_t nsup,
		       struct nobody_result *r)
{
	/* The test opens the socket to others: 0660 would stop connect(2). */
	ck_assert_int_eq(chmod(d->dir, 0777), 0);
	ck_assert_int_eq(chmod(d->sock, 0666), 0);
	int pfd[2];
	ck_assert_int_eq(pipe(pfd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(pfd[0]);
		struct nobody_result x;
		as_nobody(d->sock, d->dir, gid, sup, nsup, &x);
		_exit(write(pfd[1], &x, sizeof(x)) == (ssize_t)sizeof(x) ? 0 : 1);
	}
	close(pfd[1]);
	ck_assert_int_eq(read(pfd[0], r, sizeof(*r)), (ssize_t)sizeof(*r));
	close(pfd[0]);
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(r->connect_rc == 0, "uid 65534 could not connect: %s", r->all_msg);
}

static void start_open_daemon(struct daemon_proc *d, const char *admin_group)
{
	const char *extra[6];
	int n = 0;
	if (daemon_has_flag("--allow-users")) {
		extra[n++] = "--allow-users";
		extra[n++] = "65534";
	}
	if (admin_group) {
		extra[n++] = "--admin-group";
		extra[n++] = admin_group;
	}
	extra[n] = NULL;
	harness_start(d, extra);
}

/* Root's own session with an op, so that there is something not to see. */
static devq *root_client(struct daemon_proc *d, uint64_t *session)
{
	devq *q = conn(d->sock, "root-client");
	*session = devq_get_info(q)->session;
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_arg a = a_u64("ns", 1000);
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
			      .args = &a, .nargs = 1 };
	ck_assert_int_eq(devq_submit(q, &op, 1, NULL), 0);
	ck_assert_int_eq(devq_wait(q, 1, 1, 60000, NULL), 0);
	return q;
}

START_TEST(trace_all_refused_for_non_admin)
{
	struct daemon_proc d;
	start_open_daemon(&d, NULL);
	uint64_t rs;
	devq *q = root_client(&d, &rs);
	struct nobody_result r;
	nobody_run(&d, 65534, NULL, 0, &r);
	ck_assert_int_eq(r.all_rc, -EACCES);
	ck_assert_msg(strstr(r.all_msg, "permission_denied") && strstr(r.all_msg, "admin group"),
		      "refusal says: %s", r.all_msg);
	ck_assert_int_eq(r.own_rc, 0);
	ck_assert_uint_eq(r.nops, 1);        /* its own spin */
	ck_assert_uint_eq(r.foreign_ops, 0); /* and nothing of root's */
	ck_assert_uint_ge(r.nsessions, 1);
	ck_assert_uint_eq(r.foreign_sessions, 0);

	/* The same through devctl: --all refused by the daemon (exit 3, the
	 * reason shown); its own trace holds no event of root's session. */
	char path[160], expect[160];
	snprintf(path, sizeof(path), "%s/nobody-all.log", d.dir);
	ck_assert_int_eq(r.cli_all_rc, 3);
	ck_assert_msg(strstr(slurp(path), "permission_denied"), "devctl said: %s", slurp(path));
	unlink(path);
	snprintf(path, sizeof(path), "%s/nobody-own.log", d.dir);
	ck_assert_msg(r.cli_own_rc == 0, "devctl trace as uid 65534: %s", slurp(path));
	unlink(path);
	snprintf(expect, sizeof(expect), "%s/nobody-expect.json", d.dir);
	FILE *f = fopen(expect, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "{\"foreign\":[%" PRIu64 "]}\n", rs);
	fclose(f);
	snprintf(path, sizeof(path), "%s/nobody.json", d.dir);
	ck_assert_ptr_nonnull(strstr(slurp(path), "\"name\":\"nobody (pid "));
	char log[160];
	snprintf(log, sizeof(log), "%s/check.log", d.dir);
	const char *chk[] = { "python3", "tests/trace/check_trace.py", path, expect, NULL };
	int rc = run(chk, log);
	if (rc)
		dump_file(log);
	ck_assert_int_eq(rc, 0);
	/* And the checker does see root's session when it is there. */
	const char *tr[] = { harness_bin("devctl"), "--socket", d.sock, "trace", "--all", "-o",
			     path, NULL };
	ck_assert_int_eq(run(tr, log), 0);
	ck_assert_int_eq(run(chk, log), 1);
	unlink(path);
	unlink(expect);
	unlink(log);

	/* Root sees both sessions' ops with --all. */
	struct devq_trace *t;
	struct devq_trace_query all = { .all = true };
	ck_assert_int_eq(devq_trace_get(q, &all, &t), 0);
	bool saw_root = false, saw_nobody = false;
	for (size_t i = 0; i < t->nops; i++) {
		saw_root |= t->ops[i].session == rs;
		saw_nobody |= t->ops[i].session == r.self;
	}
	ck_assert(saw_root && saw_nobody);
	devq_trace_free(t);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(trace_all_allowed_for_admin_group)
{
	struct group *g = getgrgid(65534);
	ck_assert_msg(g != NULL, "no group with gid 65534 on this machine");
	char name[64];
	snprintf(name, sizeof(name), "%s", g->gr_name);
	struct daemon_proc d;
	start_open_daemon(&d, name);
	uint64_t rs;
	devq *q = root_client(&d, &rs);
	struct nobody_result r;
	nobody_run(&d, 65534, NULL, 0, &r);
	ck_assert_msg(r.all_rc == 0, "admin group member refused: %s", r.all_msg);
	ck_assert_int_eq(r.cli_all_rc, 0);
	static const char *const left[] = { "nobody.json", "nobody-all.log", "nobody-own.log" };
	for (size_t i = 0; i < 3; i++) {
		char path[160];
		snprintf(path, sizeof(path), "%s/%s", d.dir, left[i]);
		unlink(path);
	}
	/* A supplementary member counts too (SO_PEERGROUPS); the primary group
	 * here is one that no admin rule names. */
	gid_t sup = 65534;
	nobody_run(&d, 54321, &sup, 1, &r);
	ck_assert_msg(r.all_rc == 0, "supplementary admin group member refused: %s", r.all_msg);
	ck_assert_int_eq(r.cli_all_rc, 0);
	/* And a process in neither is refused by the same daemon. */
	nobody_run(&d, 54321, NULL, 0, &r);
	ck_assert_int_eq(r.all_rc, -EACCES);
	for (size_t i = 0; i < 3; i++) {
		char path[160];
		snprintf(path, sizeof(path), "%s/%s", d.dir, left[i]);
		unlink(path);
	}
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);

	/* An admin group that does not exist stops the daemon at start. */
	char out[160];
	snprintf(out, sizeof(out), "/tmp/devq-trace-grp-%d.txt", (int)getpid());
	const char *argv[] = { harness_bin("devqd"), "--socket", "/tmp/devq-trace-never.sock",
			       "--backend", "cpu", "--admin-group", "no-such-group-devq", NULL };
	ck_assert_int_ne(run(argv, out), 0);
	ck_assert_ptr_nonnull(strstr(slurp(out), "no-such-group-devq"));
	unlink(out);
}
END_TEST

/* ---- which ops ---------------------------------------------------------- */

static void spins(devq *q, uint32_t queue, int n)
{
	struct devq_arg a = a_u64("ns", 1000);
	struct devq_op op = { .queue = queue, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
			      .args = &a, .nargs = 1 };
	uint64_t last = 0;
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(devq_submit(q, &op, 1, &last), 0);
	ck_assert_int_eq(devq_wait(q, queue, last, 60000, NULL), 0);
}

START_TEST(trace_since_last_and_ring_bound)
{
	struct daemon_proc d;
	const char *extra[] = { "--trace-records", "16", NULL };
	harness_start(&d, extra);
	devq *q = conn(d.sock, "window");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	spins(q, 1, 5);
	struct devq_trace *t;
	struct devq_trace_query mark = { .no_ops = true };
	ck_assert_int_eq(devq_trace_get(q, &mark, &t), 0);
	uint64_t since = t->now_ns;
	ck_assert_uint_eq(t->nops, 0);
	ck_assert_uint_eq(t->capacity, 16);
	ck_assert_uint_eq(t->recorded, 5);
	devq_trace_free(t);
	spins(q, 1, 3);

	/* Exactly the ops completed after the mark: points 6..8. */
	struct devq_trace_query win = { .since_ns = since };
	ck_assert_int_eq(devq_trace_get(q, &win, &t), 0);
	ck_assert_uint_eq(t->nops, 3);
	for (size_t i = 0; i < 3; i++)
		ck_assert_uint_eq(t->ops[i].point, 6 + i);
	ck_assert(!t->truncated);
	devq_trace_free(t);

	/* --last 2: the newest two, oldest first. */
	struct devq_trace_query last = { .last = 2 };
	ck_assert_int_eq(devq_trace_get(q, &last, &t), 0);
	ck_assert_uint_eq(t->nops, 2);
	ck_assert_uint_eq(t->ops[0].point, 7);
	ck_assert_uint_eq(t->ops[1].point, 8);
	devq_trace_free(t);

	/* The ring keeps 16: 30 more ops push the mark's window out. */
	spins(q, 1, 30);
	ck_assert_int_eq(devq_trace_get(q, &win, &t), 0);
	ck_assert_uint_eq(t->nops, 16);
	ck_assert(t->truncated);
	ck_assert_uint_eq(t->ops[15].point, 38);
	ck_assert_uint_eq(t->recorded, 38);
	devq_trace_free(t);

	/* devctl trace --last 4 writes the newest four device spans. */
	char json[160], log[160];
	snprintf(json, sizeof(json), "%s/last.json", d.dir);
	snprintf(log, sizeof(log), "%s/last.log", d.dir);
	const char *tr[] = { harness_bin("devctl"), "--socket", d.sock, "trace", "--last", "4",
			     "-o", json, NULL };
	ck_assert_int_eq(run(tr, log), 0);
	const char *s = slurp(json);
	int spans = 0;
	for (const char *p = s; (p = strstr(p, "\"cat\":\"device\"")); p++)
		spans++;
	ck_assert_int_eq(spans, 4);
	ck_assert_ptr_nonnull(strstr(s, "\"point\":35,\"stream\""));
	ck_assert_ptr_nonnull(strstr(s, "\"point\":38,\"stream\""));
	ck_assert_ptr_null(strstr(s, "\"point\":34,\"stream\""));

	/* Bad usage is named. */
	const char *bad1[] = { harness_bin("devctl"), "--socket", d.sock, "trace", "--last", "x",
			       "-o", json, NULL };
	ck_assert_int_eq(run(bad1, log), 2);
	ck_assert_ptr_nonnull(strstr(slurp(log), "--last"));
	const char *bad2[] = { harness_bin("devctl"), "--socket", d.sock, "trace", NULL };
	ck_assert_int_eq(run(bad2, log), 2);
	ck_assert_ptr_nonnull(strstr(slurp(log), "-o FILE"));
	unlink(json);
	unlink(log);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(trace_duration_window)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "window");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	spins(q, 1, 3); /* done before the window opens */
	char json[160];
	snprintf(json, sizeof(json), "%s/window.json", d.dir);
	int pfd[2];
	ck_assert_int_eq(pipe(pfd), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(pfd[1], 2);
		close(pfd[0]);
		execl(harness_bin("devctl"), "devctl", "--socket", d.sock, "trace", "--duration", "3",
		      "-o", json, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	/* devctl says when its window opened; only then submit. */
	char buf[512] = "";
	size_t got = 0;
	while (!strstr(buf, "recording for") && got < sizeof(buf) - 1) {
		ssize_t n = read(pfd[0], buf + got, sizeof(buf) - 1 - got);
		ck_assert_msg(n > 0, "devctl trace --duration said: %s", buf);
		got += (size_t)n;
		buf[got] = '\0';
	}
	spins(q, 1, 2); /* points 4 and 5, inside the window */
	int st;
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	close(pfd[0]);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	const char *s = slurp(json);
	ck_assert_ptr_nonnull(strstr(s, "\"point\":4,\"stream\""));
	ck_assert_ptr_nonnull(strstr(s, "\"point\":5,\"stream\""));
	ck_assert_ptr_null(strstr(s, "\"point\":3,\"stream\""));
	unlink(json);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(trace_recorder_off)
{
	struct daemon_proc d;
	const char *extra[] = { "--trace-records", "0", NULL };
	harness_start(&d, extra);
	devq *q = conn(d.sock, "off");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	spins(q, 1, 3);
	struct devq_trace *t;
	struct devq_trace_query all = { 0 };
	ck_assert_int_eq(devq_trace_get(q, &all, &t), 0);
	ck_assert_uint_eq(t->capacity, 0);
	ck_assert_uint_eq(t->nops, 0);
	ck_assert_uint_eq(t->recorded, 0);
	/* The counters still run: the session and its three ops. */
	bool found = false;
	for (size_t i = 0; i < t->nsessions; i++)
		if (t->sessions[i].id == devq_get_info(q)->session) {
			found = true;
			ck_assert_uint_eq(t->sessions[i].ops_completed, 3);
			ck_assert_uint_eq(t->sessions[i].nqueues, 1);
		}
	ck_assert(found);
	devq_trace_free(t);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* ---- pictures at scale (issue 17 item 9) ------------------------------- */

/* A picture of many sessions, a burst of short ops, a failed op and a
 * 100 ms op on the high-priority stream, as devctl trace draws it by
 * default: check_trace.py's svg_scale checks the legend, palette, lanes,
 * short ops, failed op and units; here the default window and the warning
 * about a large output. */
START_TEST(trace_svg_at_scale)
{
	struct daemon_proc d;
	start_open_daemon(&d, NULL);
	devq *q = conn(d.sock, "burst");
	uint64_t sm = devq_get_info(q)->session;
	uint32_t normal = devq_get_info(q)->streams;
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	/* 1500 short ops first: the default window leaves the oldest out. */
	for (int i = 0; i < 3; i++)
		spins(q, 1, 500);
	/* 43 sessions of one op each. */
	devq *many[43];
	for (int i = 0; i < 43; i++) {
		char name[32];
		snprintf(name, sizeof(name), "many-%d", i);
		many[i] = conn(d.sock, name);
		ck_assert_int_eq(devq_queue_open(many[i], 1), 0);
		spins(many[i], 1, 1);
	}
	/* One session of another uid: the legend groups the rest by uid. */
	ck_assert_int_eq(chmod(d.dir, 0777), 0);
	ck_assert_int_eq(chmod(d.sock, 0666), 0);
	pid_t other = fork();
	ck_assert_int_ge(other, 0);
	if (other == 0) {
		devq *n = NULL;
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0 ||
		    devq_connect(d.sock, "other-uid", &n) < 0 || devq_queue_open(n, 1) < 0)
			_exit(1);
		const struct devq_exec *e;
		struct devq_arg na = { .name = "ns", .type = DEVQ_ARG_U64, .v.u64 = 1000 };
		struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .args = &na, .nargs = 1 };
		if (devq_exec_lookup(n, "spin", &e) < 0)
			_exit(2);
		op.exec = e;
		uint64_t p;
		if (devq_submit(n, &op, 1, &p) < 0 || devq_wait(n, 1, p, 60000, NULL) < 0)
			_exit(3);
		devq_disconnect(n);
		_exit(0);
	}
	int ost;
	ck_assert_int_eq(waitpid(other, &ost, 0), other);
	ck_assert_msg(WIFEXITED(ost) && WEXITSTATUS(ost) == 0, "uid 65534 client: %d", ost);
	/* A spin without its argument fails validation. */
	struct devq_op bad = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin") };
	uint64_t bp;
	struct devq_completion c;
	ck_assert_int_eq(devq_submit(q, &bad, 1, &bp), 0);
	ck_assert_int_eq(devq_wait(q, 1, bp, 60000, &c), 0);
	ck_assert_int_ne(c.code, DEVQ_OK);
	int failed = c.code;
	/* 100 ms on the high-priority stream. */
	ck_assert_int_eq(devq_queue_open_priority(q, 2, 1), 0);
	struct devq_arg a = a_u64("ns", 100000000);
	struct devq_op slow = { .queue = 2, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
				.args = &a, .nargs = 1 };
	uint64_t sp;
	ck_assert_int_eq(devq_submit(q, &slow, 1, &sp), 0);
	ck_assert_int_eq(devq_wait(q, 2, sp, 60000, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_OK);

	char json[160], svg[160], expect[160], log[160];
	snprintf(json, sizeof(json), "%s/scale.json", d.dir);
	snprintf(svg, sizeof(svg), "%s/scale.svg", d.dir);
	snprintf(expect, sizeof(expect), "%s/scale-expect.json", d.dir);
	snprintf(log, sizeof(log), "%s/scale.log", d.dir);
	const char *tr[] = { harness_bin("devctl"), "--socket", d.sock, "trace", "--all", "-o",
			     json, "--svg", svg, NULL };
	int rc = run(tr, log);
	if (rc)
		dump_file(log);
	ck_assert_int_eq(rc, 0);
	/* Problems are gathered, so that one run shows every one of them. */
	char why[2048] = "";
	size_t wn = 0;
#define WHY(...) (wn += (size_t)snprintf(why + wn, wn < sizeof(why) ? sizeof(why) - wn : 0, \
					 __VA_ARGS__))
	/* The default window is the newest 1000 ops, and says so. */
	const char *s = slurp(log);
	if (!strstr(s, "newest 1000") || !strstr(s, "--last 0"))
		WHY("devctl trace by default said: %s\n", s);
	if (strstr(s, "warning"))
		WHY("a default picture warned: %s\n", s);
	FILE *f = fopen(expect, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "{\"svg_scale\":{\"legend_max\":12,\"legend_entries\":12,"
		   "\"legend_groups\":2,\"high_streams\":[%u],\"min_width\":2,"
		   "\"max_device_rects\":200,\"failed\":[{\"op\":[%" PRIu64 ",1,%" PRIu64 "],"
		   "\"name\":\"spin\",\"code\":\"%s\"}]}}\n",
		normal, sm, bp, devq_code_name(failed));
	fclose(f);
	const char *chk[] = { "python3", "tests/trace/check_trace.py", json, expect, svg, NULL };
	rc = run(chk, log);
	if (rc)
		dump_file(log);
	if (rc)
		WHY("check_trace.py found problems (above)\n");
	/* JSON names the failed op with its error too. */
	char grep[400];
	snprintf(grep, sizeof(grep), "grep -q '\"name\":\"spin (failed: ' %s", json);
	if (system(grep) != 0)
		WHY("the JSON does not name the failed op 'spin (failed: ...)'\n");
	struct stat st;
	ck_assert_int_eq(stat(json, &st), 0);
	if (st.st_size >= 4 << 20)
		WHY("the default JSON is %lld bytes\n", (long long)st.st_size);

	/* Every op kept (1546): a warning says the picture is large. */
	const char *all[] = { harness_bin("devctl"), "--socket", d.sock, "trace", "--all",
			      "--last", "0", "--svg", svg, NULL };
	ck_assert_int_eq(run(all, log), 0);
	s = slurp(log);
	if (!strstr(s, "warning") || !strstr(s, "1546 ops"))
		WHY("--last 0 gave no warning about a large picture: %s\n", s);
#undef WHY
	ck_assert_msg(!why[0], "%s", why);

	unlink(json);
	unlink(svg);
	unlink(expect);
	unlink(log);
	for (int i = 0; i < 43; i++)
		devq_disconnect(many[i]);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* ---- devctl top --once ------------------------------------------------ */

/* Issue 17 item 2: busy % is device time in the interval over the interval:
 * a stream running a 1.5 s op is busy meanwhile (it showed 0 %), and the
 * frame where the op ends counts only its part of it (it showed 250 %). */
static int top_max_stream_busy(struct daemon_proc *d, const char *interval)
{
	char out[160];
	snprintf(out, sizeof(out), "%s/top.txt", d->dir);
	const char *argv[] = { harness_bin("devctl"), "--socket", d->sock, "top", "--once",
			       "--interval", interval, NULL };
	ck_assert_int_eq(run(argv, out), 0);
	char *s = slurp(out);
	char *line = strstr(s, "device busy");
	ck_assert_ptr_nonnull(line);
	char *bar = strchr(line, '|');
	ck_assert_ptr_nonnull(bar);
	int max = -1;
	for (char *x = bar; *x && *x != '\n'; x++) {
		if (*x != '%')
			continue;
		char *y = x;
		while (y > bar && y[-1] >= '0' && y[-1] <= '9')
			y--;
		if (atoi(y) > max)
			max = atoi(y);
	}
	if (getenv("TOP_DEBUG"))
		fprintf(stderr, "%s\n", s);
	unlink(out);
	return max;
}

START_TEST(top_busy_is_time_in_interval)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "longop");
	ck_assert_int_eq(devq_queue_open(q, 0), 0);
	struct devq_arg a = a_u64("ns", 1500000000ull);
	struct devq_op spin = { .queue = 0, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
				.args = &a, .nargs = 1 };
	uint64_t p, t0 = harness_now_ns();
	ck_assert_int_eq(devq_submit(q, &spin, 1, &p), 0);
	usleep(200000);
	int running = top_max_stream_busy(&d, "0.5");
	ck_assert_msg(running >= 90, "a stream running an op shows %d %%", running);
	uint64_t el = (harness_now_ns() - t0) / 1000;
	if (el < 1200000)
		usleep((useconds_t)(1200000 - el));
	int ending = top_max_stream_busy(&d, "0.6");
	ck_assert_msg(ending >= 0 && ending <= 100, "the frame where it ends shows %d %%", ending);
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 0, p, 60000, &c), 0);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(top_once_prints_documented_fields)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "topload");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	ck_assert_int_eq(devq_queue_open(q, 2), 0);
	struct devq_buffer *b = mkbuf(q, 1 << 20);
	/* One failing op (an offset outside the buffer) for ERRORS. */
	struct devq_op fill = { .queue = 2, .kind = DEVQ_OP_FILL, .dst = b, .dst_offset = 1 << 20,
				.size = 4 };
	ck_assert_int_eq(devq_submit(q, &fill, 1, NULL), 0);
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 2, 1, 60000, &c), 0);
	ck_assert_int_ne(c.code, DEVQ_OK);
	/* Work in flight while top samples: a 2 s spin and one behind it. */
	struct devq_arg a = a_u64("ns", 2000000000ull);
	struct devq_op spin = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
				.args = &a, .nargs = 1 };
	ck_assert_int_eq(devq_submit(q, &spin, 1, NULL), 0);
	ck_assert_int_eq(devq_submit(q, &spin, 1, NULL), 0);

	char out[160];
	snprintf(out, sizeof(out), "%s/top.txt", d.dir);
	const char *argv[] = { harness_bin("devctl"), "--socket", d.sock, "top", "--once",
			       "--interval", "0.2", NULL };
	ck_assert_int_eq(run(argv, out), 0);
	char *s = slurp(out);
	char backend[32];
	snprintf(backend, sizeof(backend), "backend %s", harness_backend());
	const char *const fields[] = {
		backend, "ops/s", "in flight", "errors/s", "device busy", "PHASE", "P50",
		"P99", "submit", "queued", "device", "sync", "SESSION", "PID", "UID", "NAME",
		"OPS/S", "INFLIGHT", "PINNED MiB", "ERRORS", "QUEUE", "STREAM", "DEPTH",
		"SUBMITTED",
	};
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		ck_assert_msg(strstr(s, fields[i]), "no '%s' in:\n%s", fields[i], s);
	ck_assert_msg(!strchr(s, '\x1b'), "escape codes in --once output");
	/* The session row: id, pid, uid, name, in flight 2, 1.0 MiB, 1 error. */
	char row[160];
	snprintf(row, sizeof(row), "%8" PRIu64 " %8d %6u %-16.16s", devq_get_info(q)->session,
		 (int)getpid(), (unsigned)getuid(), "topload");
	char *r = strstr(s, row);
	ck_assert_msg(r, "no row '%s' in:\n%s", row, s);
	unsigned long long inflight, errors;
	double rate, mib;
	ck_assert_int_eq(sscanf(r + strlen(row), "%lf %llu %lf %llu", &rate, &inflight, &mib, &errors),
			 4);
	ck_assert_uint_eq(inflight, 2);
	ck_assert_msg(mib > 0.99 && mib < 1.01, "pinned %f MiB", mib);
	ck_assert_uint_eq(errors, 1);
	/* Queue 1 holds two ops: depth 2. */
	snprintf(row, sizeof(row), "%8" PRIu64 " %8u", devq_get_info(q)->session, 1u);
	r = strstr(s, row);
	ck_assert_msg(r, "no queue row '%s' in:\n%s", row, s);
	unsigned stream;
	unsigned long long depth;
	ck_assert_int_eq(sscanf(r + strlen(row), "%u %llu", &stream, &depth), 2);
	ck_assert_uint_eq(depth, 2);
	/* Its own session is not part of the picture. */
	ck_assert_ptr_null(strstr(s, "devctl top"));
	unlink(out);
	devq_disconnect(q); /* cancels the queued spin; the running one ends */
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("trace");
	TCase *tc = tcase_create("trace");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, trace_two_clients_json_and_svg);
	tcase_add_test(tc, trace_all_refused_for_non_admin);
	tcase_add_test(tc, trace_all_allowed_for_admin_group);
	tcase_add_test(tc, trace_since_last_and_ring_bound);
	tcase_add_test(tc, trace_duration_window);
	tcase_add_test(tc, trace_recorder_off);
	tcase_add_test(tc, trace_svg_at_scale);
	tcase_add_test(tc, top_once_prints_documented_fields);
	tcase_add_test(tc, top_busy_is_time_in_interval);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
