/* SPDX-License-Identifier: Apache-2.0 */
/* devq-exporter against real devqds (CPU backend): /metrics for every
 * instance, labelled gpu, devq_up 0 for one it cannot reach; / and 404;
 * concurrent scrapes costing a devqd at most one status request per 500 ms;
 * the same series after 200 client connect/disconnect cycles; hostile HTTP
 * clients (slow headers, a 1 MB header, connections up to the limit) refused
 * or timed out while other scrapes and devqd's ops go on; observer-groups
 * (every tenant seen, no admin call). */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devq.h"
#include "harness.h"

struct exporter {
	pid_t pid;
	int port;
};

/* Starts build/devq-exporter on 127.0.0.1, any port, with the arguments
 * (NULL-terminated), and reads the port it prints. */
static void exporter_start(struct exporter *x, const char *const *args)
{
	int p[2];
	ck_assert_int_eq(pipe(p), 0);
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		const char *argv[40];
		int n = 0;
		argv[n++] = harness_bin("devq-exporter");
		argv[n++] = "--listen";
		argv[n++] = "127.0.0.1:0";
		for (int i = 0; args && args[i] && n < 38; i++)
			argv[n++] = args[i];
		argv[n] = NULL;
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	char line[256] = "";
	size_t got = 0;
	while (got < sizeof(line) - 1 && !strchr(line, '\n')) {
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		ck_assert_msg(poll(&pf, 1, 10000) == 1, "devq-exporter printed no address");
		ssize_t r = read(p[0], line + got, sizeof(line) - 1 - got);
		ck_assert_msg(r > 0, "devq-exporter exited at start");
		got += (size_t)r;
		line[got] = '\0';
	}
	close(p[0]);
	const char *c = strrchr(line, ':');
	ck_assert_msg(c && strstr(line, "listening on 127.0.0.1:"), "%s", line);
	x->pid = pid;
	x->port = atoi(c + 1);
	ck_assert_int_gt(x->port, 0);
}

static void exporter_stop(struct exporter *x)
{
	ck_assert_int_eq(kill(x->pid, SIGTERM), 0);
	int st;
	ck_assert_int_eq(waitpid(x->pid, &st, 0), x->pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "devq-exporter: status %d", st);
}

/* A connection to 127.0.0.1:port, or -1 when refused. */
static int tcp_try(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
		return fd;
	ck_assert_int_eq(close(fd), 0);
	return -1;
}

static int tcp(int port)
{
	int fd = tcp_try(port);
	ck_assert_msg(fd >= 0, "connect to port %d: %s", port, strerror(errno));
	return fd;
}

/* Reads until EOF or ms pass; how many bytes (buf NUL-terminated, the
 * excess dropped).  -1 when the time ran out first. */
static ssize_t read_all(int fd, char *buf, size_t len, int ms)
{
	size_t got = 0;
	uint64_t until = harness_now_ns() + (uint64_t)ms * 1000000;
	for (;;) {
		uint64_t now = harness_now_ns();
		if (now >= until)
			return -1;
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		if (poll(&pf, 1, (int)((until - now) / 1000000) + 1) <= 0)
			continue;
		char tmp[8192];
		ssize_t r = read(fd, tmp, sizeof(tmp));
		if (r < 0 && errno == ECONNRESET)
			r = 0; /* refused the hard way: as closed */
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		size_t k = (size_t)r < len - 1 - got ? (size_t)r : len - 1 - got;
		memcpy(buf + got, tmp, k);
		got += k;
	}
	buf[got] = '\0';
	return (ssize_t)got;
}

/* One GET; the HTTP status (0: the connection was closed without an
 * answer), the body in body. */
static int http_get(int port, const char *path, char *body, size_t len)
{
	int fd = tcp_try(port);
	if (fd < 0)
		return 0;
	char req[1200];
	int n = snprintf(req, sizeof(req),
			 "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
	if (write(fd, req, (size_t)n) != n) {
		close(fd);
		return 0;
	}
	static __thread char resp[1 << 18];
	ssize_t r = read_all(fd, resp, sizeof(resp), 15000);
	close(fd);
	if (r <= 0)
		return 0;
	int code = 0;
	if (sscanf(resp, "HTTP/1.1 %d", &code) != 1)
		return 0;
	const char *b = strstr(resp, "\r\n\r\n");
	if (body)
		snprintf(body, len, "%s", b ? b + 4 : "");
	return code;
}

static double value_of(const char *text, const char *series)
{
	size_t n = strlen(series);
	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
		if (!strncmp(l, series, n) && l[n] == ' ')
			return strtod(l + n + 1, NULL);
	ck_abort_msg("no series %s in:\n%.2000s", series, text);
	return 0;
}


static void promtool_check(const char *text)
{
	const char *tool = harness_promtool();
	if (!tool) {
		fprintf(stderr, "SKIP promtool check: make promtool, or DEVQ_PROMTOOL=PATH\n");
		return;
	}
	char path[] = "/tmp/devq-exporter-XXXXXX";
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	ck_assert_int_eq(close(fd), 0);
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "%s check metrics < %s 2>&1", tool, path);
	FILE *p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	char out[2048];
	size_t n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	int rc = pclose(p);
	unlink(path);
	ck_assert_msg(rc == 0 && n == 0, "promtool check metrics: %d: %s", rc, out);
}

static uint64_t spin(devq *q, uint32_t queue, uint64_t ns)
{
	struct devq_arg a = a_u64("ns", ns);
	struct devq_op op = { .queue = queue, .kind = DEVQ_OP_KERNEL, .exec = exe(q, "spin"),
			      .args = &a, .nargs = 1 };
	uint64_t p = 0;
	ck_assert_int_eq(devq_submit(q, &op, 1, &p), 0);
	return p;
}

static char page[1 << 18], page2[1 << 18];

/* Every instance, labelled gpu; one not reachable is devq_up 0 and the
 * scrape still answers 200; / names /metrics; anything else is 404; the
 * text passes promtool; a stopped devqd turns to devq_up 0. */
START_TEST(serves_every_instance)
{
	struct daemon_proc a, b;
	harness_start(&a, NULL);
	const char *dev1[] = { "--device", "1", NULL };
	harness_start(&b, dev1);
	char missing[200];
	snprintf(missing, sizeof(missing), "%s/gpu7.sock", a.dir);
	const char *args[] = { "--socket", a.sock, "--socket", b.sock, "--socket", missing, NULL };
	struct exporter x;
	exporter_start(&x, args);
	devq *q = conn(a.sock, "worker");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	ck_assert_int_eq(devq_wait(q, 1, spin(q, 1, 1000000), 10000, NULL), 0);

	ck_assert_int_eq(http_get(x.port, "/metrics", page, sizeof(page)), 200);
	ck_assert_double_eq(value_of(page, "devq_up{gpu=\"0\"}"), 1);
	ck_assert_double_eq(value_of(page, "devq_up{gpu=\"1\"}"), 1);
	ck_assert_double_eq(value_of(page, "devq_up{gpu=\"7\"}"), 0);
	ck_assert_ptr_nonnull(strstr(page, "devq_ops_completed_total{gpu=\"0\"} 1\n"));
	ck_assert_ptr_nonnull(strstr(page, "devq_ops_completed_total{gpu=\"1\"} 0\n"));
	/* Per-tenant families join the GPU's: gpu, UUID, tenant. */
	char want[200];
	snprintf(want, sizeof(want), "devq_tenant_ops_total{gpu=\"0\",UUID=\"CPU-");
	const char *t = strstr(page, want);
	ck_assert_msg(t, "%.3000s", page);
	snprintf(want, sizeof(want), "\",tenant=\"uid:%u\"} 1\n", (unsigned)getuid());
	ck_assert_msg(strstr(t, want), "%.3000s", t);
	ck_assert_ptr_nonnull(strstr(page, "devq_tenant_op_seconds_bucket{gpu=\"0\",UUID=\""));
	/* No per-session family unless asked. */
	ck_assert_ptr_null(strstr(page, "devq_session_"));
	promtool_check(page);

	ck_assert_int_eq(http_get(x.port, "/", page2, sizeof(page2)), 200);
	ck_assert_ptr_nonnull(strstr(page2, "/metrics"));
	ck_assert_int_eq(http_get(x.port, "/metricsx", NULL, 0), 404);
	ck_assert_int_eq(http_get(x.port, "/nope", NULL, 0), 404);

	ck_assert_int_eq(harness_stop(&b), 0);
	usleep(600 * 1000); /* past the 500 ms between status requests */
	ck_assert_int_eq(http_get(x.port, "/metrics", page, sizeof(page)), 200);
	ck_assert_double_eq(value_of(page, "devq_up{gpu=\"0\"}"), 1);
	ck_assert_double_eq(value_of(page, "devq_up{gpu=\"1\"}"), 0);
	promtool_check(page);
	devq_disconnect(q);
	exporter_stop(&x);
	ck_assert_int_eq(harness_stop(&a), 0);
}
END_TEST

/* An instance that accepts and never answers reads as down after the
 * exporter's 5 s wait, in one scrape that still answers 200 with the other
 * instance up; two silent ones wait together, not one after the other. */
START_TEST(silent_instance_reads_down)
{
	struct daemon_proc a;
	harness_start(&a, NULL);
	int silent[2];
	char paths[2][200];
	for (int i = 0; i < 2; i++) {
		snprintf(paths[i], sizeof(paths[i]), "%s/gpu%d.sock", a.dir, 3 + i);
		silent[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%.100s", paths[i]);
		ck_assert_int_eq(bind(silent[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
		ck_assert_int_eq(listen(silent[i], 8), 0); /* never accepted */
	}
	const char *args[] = { "--socket", a.sock, "--socket", paths[0], "--socket", paths[1],
			       NULL };
	struct exporter x;
	exporter_start(&x, args);
	uint64_t t0 = harness_now_ns();
	ck_assert_int_eq(http_get(x.port, "/metrics", page, sizeof(page)), 200);
	double took = (double)(harness_now_ns() - t0) / 1e9;
	ck_assert_double_eq(value_of(page, "devq_up{gpu=\"0\"}"), 1);
	ck_assert_double_eq(value_of(page, "devq_up{gpu=\"3\"}"), 0);
	ck_assert_double_eq(value_of(page, "devq_up{gpu=\"4\"}"), 0);
	ck_assert_msg(took >= 4.5 && took < 9.5, "a scrape with two silent instances took %.2f s",
		      took);
	promtool_check(page);
	exporter_stop(&x);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(close(silent[i]), 0);
		ck_assert_int_eq(unlink(paths[i]), 0);
	}
	ck_assert_int_eq(harness_stop(&a), 0);
}
END_TEST

/* --sessions adds the per-session families, this client's among them. */
START_TEST(sessions_opt_in)
{
	struct daemon_proc a;
	harness_start(&a, NULL);
	const char *args[] = { "--socket", a.sock, "--sessions", NULL };
	struct exporter x;
	exporter_start(&x, args);
	devq *q = conn(a.sock, "worker");
	ck_assert_int_eq(http_get(x.port, "/metrics", page, sizeof(page)), 200);
	char want[128];
	snprintf(want, sizeof(want), "devq_session_ops_completed_total{gpu=\"0\",session=\"%llu\"",
		 (unsigned long long)devq_get_info(q)->session);
	ck_assert_msg(strstr(page, want), "%.3000s", page);
	promtool_check(page);
	devq_disconnect(q);
	exporter_stop(&x);
	ck_assert_int_eq(harness_stop(&a), 0);
}
END_TEST

struct scraper {
	int port, n, ok;
};

static void *scrape_loop(void *arg)
{
	struct scraper *s = arg;
	for (int i = 0; i < s->n; i++)
		s->ok += http_get(s->port, "/metrics", NULL, 0) == 200;
	return NULL;
}

/* 1,000 scrapes from 50 clients at once: devqd sees at most one status
 * request (one session of the exporter's) per 500 ms of the run, plus the
 * first. */
START_TEST(concurrent_scrapes_coalesce)
{
	struct daemon_proc a;
	harness_start(&a, NULL);
	const char *args[] = { "--socket", a.sock, "--max-connections", "64", NULL };
	struct exporter x;
	exporter_start(&x, args);
	devq *q = conn(a.sock, "counter");
	struct devq_status *s;
	ck_assert_int_eq(devq_get_status(q, &s), 0);
	uint64_t before = s->sessions_total;
	devq_status_free(s);
	enum { CLIENTS = 50, EACH = 20 };
	struct scraper sc[CLIENTS];
	pthread_t th[CLIENTS];
	uint64_t t0 = harness_now_ns();
	for (int i = 0; i < CLIENTS; i++) {
		sc[i] = (struct scraper){ .port = x.port, .n = EACH };
		ck_assert_int_eq(pthread_create(&th[i], NULL, scrape_loop, &sc[i]), 0);
	}
	int ok = 0;
	for (int i = 0; i < CLIENTS; i++) {
		pthread_join(th[i], NULL);
		ok += sc[i].ok;
	}
	double secs = (double)(harness_now_ns() - t0) / 1e9;
	ck_assert_int_eq(ok, CLIENTS * EACH);
	ck_assert_int_eq(devq_get_status(q, &s), 0);
	uint64_t requests = s->sessions_total - before;
	devq_status_free(s);
	uint64_t bound = (uint64_t)(secs / 0.5) + 1;
	fprintf(stderr, "1000 scrapes in %.2f s: %llu status requests (bound %llu)\n", secs,
		(unsigned long long)requests, (unsigned long long)bound);
	ck_assert_msg(requests >= 1 && requests <= bound, "%llu status requests in %.2f s",
		      (unsigned long long)requests, secs);
	devq_disconnect(q);
	exporter_stop(&x);
	ck_assert_int_eq(harness_stop(&a), 0);
}
END_TEST

/* The series (names and labels, values aside) of a scrape, sorted, one a
 * line, into out. */
static void series_set(const char *text, char *out, size_t len)
{
	static char lines[4096][320];
	size_t n = 0;
	for (const char *l = text; l && *l && n < 4096; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		if (*l == '#' || *l == '\n')
			continue;
		const char *nl = strchr(l, '\n'), *sp = NULL;
		for (const char *p = l; nl ? p < nl : *p; p++)
			if (*p == ' ')
				sp = p; /* the value follows the line's last space */
		if (!sp)
			continue;
		snprintf(lines[n], sizeof(lines[n]), "%.*s", (int)(sp - l), l);
		n++;
	}
	qsort(lines, n, sizeof(lines[0]), (int (*)(const void *, const void *))strcmp);
	size_t k = 0;
	out[0] = '\0';
	for (size_t i = 0; i < n; i++)
		k += (size_t)snprintf(out + k, k < len ? len - k : 0, "%s\n", lines[i]);
}

/* 200 connect/disconnect cycles of a client (each with a queue and an op)
 * leave the set of series as it was: nothing labelled per connection. */
START_TEST(series_stable_over_connect_cycles)
{
	struct daemon_proc a;
	harness_start(&a, NULL);
	const char *args[] = { "--socket", a.sock, NULL };
	struct exporter x;
	exporter_start(&x, args);
	devq *q = conn(a.sock, "warm");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	ck_assert_int_eq(devq_wait(q, 1, spin(q, 1, 1000), 10000, NULL), 0);
	devq_disconnect(q);
	ck_assert_int_eq(http_get(x.port, "/metrics", page, sizeof(page)), 200);
	static char before[1 << 18], after[1 << 18];
	series_set(page, before, sizeof(before));
	for (int i = 0; i < 200; i++) {
		q = conn(a.sock, "cycle");
		ck_assert_int_eq(devq_queue_open(q, 1), 0);
		ck_assert_int_eq(devq_wait(q, 1, spin(q, 1, 1000), 10000, NULL), 0);
		devq_disconnect(q);
	}
	usleep(600 * 1000);
	ck_assert_int_eq(http_get(x.port, "/metrics", page, sizeof(page)), 200);
	series_set(page, after, sizeof(after));
	ck_assert_msg(!strcmp(before, after), "series changed:\nbefore:\n%.2000s\nafter:\n%.2000s",
		      before, after);
	ck_assert_double_ge(value_of(page, "devq_sessions_total{gpu=\"0\"}"), 201);
	exporter_stop(&x);
	ck_assert_int_eq(harness_stop(&a), 0);
}
END_TEST

/* A client that sends part of its headers and stops is closed after the
 * idle timeout (2 s here); one that sends a 1 MB header is refused; while
 * both go on, and with the connections at the limit, devqd's ops complete
 * and, once below the limit, scrapes from another client succeed. */
START_TEST(hostile_clients)
{
	struct daemon_proc a;
	harness_start(&a, NULL);
	const char *args[] = { "--socket", a.sock, "--max-connections", "4", "--timeout", "2",
			       NULL };
	struct exporter x;
	exporter_start(&x, args);
	devq *q = conn(a.sock, "worker");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	uint64_t last = 0;
	for (int i = 0; i < 20; i++)
		last = spin(q, 1, 50 * 1000 * 1000); /* 1 s of ops across the attacks */

	/* Slow headers: timed out, not held forever. */
	int slow = tcp(x.port);
	const char part[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
	ck_assert_int_eq(write(slow, part, sizeof(part) - 1), (ssize_t)(sizeof(part) - 1));
	uint64_t t0 = harness_now_ns();
	char buf[4096];
	ssize_t r = read_all(slow, buf, sizeof(buf), 10000);
	double waited = (double)(harness_now_ns() - t0) / 1e9;
	ck_assert_msg(r >= 0, "a slow client held its connection for 10 s");
	ck_assert_ptr_null(strstr(buf, " 200 "));
	ck_assert_msg(waited >= 1.0, "closed after %.2f s, before its timeout", waited);
	ck_assert_int_eq(close(slow), 0);

	/* A 1 MB header: refused (an error status or a closed connection),
	 * never served. */
	int big = tcp(x.port);
	size_t blen = 1 << 20;
	char *hdr = malloc(blen + 64);
	ck_assert_ptr_nonnull(hdr);
	int h = snprintf(hdr, 64, "GET /metrics HTTP/1.1\r\nX-Big: ");
	memset(hdr + h, 'a', blen);
	memcpy(hdr + h + blen, "\r\n\r\n", 4);
	size_t total = (size_t)h + blen + 4, sent = 0;
	while (sent < total) {
		ssize_t w = send(big, hdr + sent, total - sent, MSG_NOSIGNAL);
		if (w <= 0)
			break; /* the server closed it: refused */
		sent += (size_t)w;
	}
	free(hdr);
	r = read_all(big, buf, sizeof(buf), 10000);
	ck_assert_msg(r >= 0, "a 1 MB header was neither answered nor closed");
	ck_assert_msg(!strstr(buf, " 200 "), "a 1 MB header was served: %.200s", buf);
	ck_assert_int_eq(close(big), 0);

	/* Connections up to the limit, idle: one more is closed unanswered. */
	int held[4];
	for (int i = 0; i < 4; i++)
		held[i] = tcp(x.port);
	/* The exporter accepts them in its own time (a thread each): within
	 * 5 s a fifth client must find the door closed, and stays refused. */
	int refused = 0;
	for (int i = 0; i < 50 && !refused; i++) {
		refused = http_get(x.port, "/metrics", NULL, 0) == 0;
		if (!refused)
			usleep(100 * 1000);
	}
	ck_assert_msg(refused, "a fifth connection was served with 4 at the limit");
	ck_assert_int_eq(http_get(x.port, "/metrics", NULL, 0), 0);
	/* One below the limit: another client's scrape succeeds. */
	ck_assert_int_eq(close(held[0]), 0);
	int code = 0, tries = 0;
	uint64_t t1 = harness_now_ns();
	while ((code = http_get(x.port, "/metrics", page, sizeof(page))) != 200 && tries++ < 50)
		usleep(100 * 1000);
	fprintf(stderr, "below the limit: served after %d tries, %.2f s\n", tries,
		(double)(harness_now_ns() - t1) / 1e9);
	ck_assert_int_eq(code, 200);
	ck_assert_double_eq(value_of(page, "devq_up{gpu=\"0\"}"), 1);
	for (int i = 1; i < 4; i++)
		ck_assert_int_eq(close(held[i]), 0);

	/* devqd's ops went on: every one completed, without error. */
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 1, last, 30000, &c), 0);
	ck_assert_int_eq(c.code, 0);
	struct devq_status *s;
	ck_assert_int_eq(devq_get_status(q, &s), 0);
	uint64_t failed = s->ops_failed;
	devq_status_free(s);
	ck_assert_uint_eq(failed, 0);
	devq_disconnect(q);
	exporter_stop(&x);
	ck_assert_int_eq(harness_stop(&a), 0);
}
END_TEST

/* observer-groups: a member (another uid) sees every tenant's row, root's
 * too, in status; an admin call is refused to it. */
START_TEST(observer_sees_every_tenant)
{
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: observer_sees_every_tenant needs root (a client as another uid)\n");
		return;
	}
	struct daemon_proc a;
	const char *extra[] = { "--allow-users", "65534,65533", "--observer-groups", "4343", NULL };
	harness_start(&a, extra);
	ck_assert_int_eq(chmod(a.dir, 0711), 0);
	ck_assert_int_eq(chmod(a.sock, 0666), 0);
	devq *q = conn(a.sock, "root-work");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	ck_assert_int_eq(devq_wait(q, 1, spin(q, 1, 1000), 10000, NULL), 0);
	/* 65534 in group 4343 (an observer), 65533 not. */
	for (int who = 0; who < 2; who++) {
		pid_t pid = fork();
		ck_assert_int_ge(pid, 0);
		if (pid == 0) {
			gid_t g = 4343;
			uid_t u = who == 0 ? 65534 : 65533;
			if (setgroups(who == 0 ? 1 : 0, &g) < 0 || setgid(u) < 0 || setuid(u) < 0)
				_exit(90);
			devq *o = NULL;
			if (devq_connect(a.sock, "observer", &o) < 0)
				_exit(91);
			struct devq_status *s;
			if (devq_get_status(o, &s) < 0)
				_exit(92);
			bool root_row = false;
			for (size_t i = 0; i < s->ntenants; i++)
				root_row |= !strcmp(s->tenants[i].name, "uid:0");
			devq_status_free(s);
			if (root_row != (who == 0))
				_exit(93);
			struct devq_grant_request r = { .tenant = "nope", .uid = 65534 };
			struct devq_grant g2;
			if (devq_admin_grant(o, &r, &g2) != -EACCES)
				_exit(94);
			devq_disconnect(o);
			_exit(0);
		}
		int st;
		ck_assert_int_eq(waitpid(pid, &st, 0), pid);
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "observer %d: exit %d", who,
			      WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	}
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&a), 0);
}
END_TEST

/* ---- a real Prometheus ------------------------------------------------- */

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	struct sockaddr_in a = { .sin_family = AF_INET };
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t l = sizeof(a);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	ck_assert_int_eq(close(fd), 0);
	return ntohs(a.sin_port);
}

/* An instant query through Prometheus's HTTP API: the JSON answer. */
static const char *prom_query(int port, const char *promql)
{
	static char path[1024], body[1 << 16];
	size_t k = (size_t)snprintf(path, sizeof(path), "/api/v1/query?query=");
	for (const char *c = promql; *c && k + 4 < sizeof(path); c++) {
		if ((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
		    *c == '_')
			path[k++] = *c;
		else
			k += (size_t)snprintf(path + k, sizeof(path) - k, "%%%02X", (unsigned char)*c);
	}
	path[k] = '\0';
	int code = http_get(port, path, body, sizeof(body));
	ck_assert_msg(code == 200, "prometheus %s: %d %s", promql, code, body);
	ck_assert_msg(strstr(body, "\"status\":\"success\""), "%s: %s", promql, body);
	return body;
}

/* The value of the single sample of an answer; NaN-free, aborts on none. */
static double prom_value(const char *json, const char *what)
{
	const char *v = strstr(json, "\"value\":[");
	ck_assert_msg(v, "%s: no sample: %s", what, json);
	v = strchr(v, ',');
	ck_assert_ptr_nonnull(v);
	ck_assert_msg(!strstr(v + 1, "\"value\":["), "%s: more than one sample: %s", what, json);
	return strtod(v + 2, NULL);
}

struct flood {
	const char *sock;
	volatile bool stop;
	bool ok;
	uint64_t ops;
};

/* Keeps 16 spin ops of 2 ms in flight on the tenant's socket until told. */
static void *flood_run(void *arg)
{
	struct flood *f = arg;
	devq *q = NULL;
	if (devq_connect(f->sock, "flood", &q) < 0 || devq_queue_open(q, 1) < 0)
		return NULL;
	const struct devq_exec *e;
	if (devq_exec_lookup(q, "spin", &e) < 0)
		return NULL;
	struct devq_arg a = a_u64("ns", 2000000);
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = e, .args = &a, .nargs = 1 };
	uint64_t sent = 0, done = 0;
	bool ok = true;
	while (ok && !f->stop) {
		while (sent - done < 16 && devq_submit(q, &op, 1, NULL) == 0)
			sent++;
		struct devq_completion c;
		if (devq_next_completion(q, &c, 5000) < 0 || c.code)
			ok = false;
		else
			done++;
	}
	while (ok && done < sent) {
		struct devq_completion c;
		if (devq_next_completion(q, &c, 30000) < 0)
			ok = false;
		done++;
	}
	f->ops = done;
	f->ok = ok;
	devq_disconnect(q);
	return NULL;
}

/* Prometheus (Debian's, unpacked by make promtool) scrapes the exporter
 * every second while two granted tenants weighted 1:3 saturate a CPU devqd
 * with spin ops for 20 s: through Prometheus's own API, the target is up,
 * the tenants' device-time rates over 10 s are 3:1 within 15 %, their
 * series carry gpu, UUID, tenant and the grant's labels, and both have
 * op latency buckets. */
START_TEST(prometheus_scrapes_weighted_tenants)
{
	char prom[512];
	snprintf(prom, sizeof(prom), "%s", harness_bin("promtool/usr/bin/prometheus"));
	if (access(prom, X_OK) != 0) {
		fprintf(stderr, "SKIP prometheus_scrapes_weighted_tenants: no %s (make promtool)\n",
			prom);
		return;
	}
	struct daemon_proc d;
	const char *extra[] = { "--streams", "1", NULL };
	harness_start(&d, extra);
	devq *q = conn(d.sock, "admin");
	struct devq_grant_request ra = { .tenant = "t_a", .uid = getuid(), .shares = 1, .of = 4 };
	struct devq_grant_request rb = { .tenant = "t_b", .uid = getuid(), .shares = 3, .of = 4 };
	const char *la[] = { "team=a" }, *lb[] = { "team=b" };
	struct devq_grant ga, gb;
	ck_assert_msg(devq_admin_grant_labels(q, &ra, la, 1, 0, &ga) == 0, "%s", devq_last_error(q));
	ck_assert_msg(devq_admin_grant_labels(q, &rb, lb, 1, 0, &gb) == 0, "%s", devq_last_error(q));
	const char *args[] = { "--socket", d.sock, NULL };
	struct exporter x;
	exporter_start(&x, args);

	int pport = free_port();
	char cfg[256], tsdb[256], listen[64], cfgarg[300], tsdbarg[300], listenarg[100];
	snprintf(cfg, sizeof(cfg), "%s/prometheus.yml", d.dir);
	snprintf(tsdb, sizeof(tsdb), "%s/tsdb", d.dir);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", pport);
	FILE *f = fopen(cfg, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
		   "scrape_configs:\n  - job_name: devq\n    static_configs:\n"
		   "      - targets: ['127.0.0.1:%d']\n", x.port);
	ck_assert_int_eq(fclose(f), 0);
	snprintf(cfgarg, sizeof(cfgarg), "--config.file=%s", cfg);
	snprintf(tsdbarg, sizeof(tsdbarg), "--storage.tsdb.path=%s", tsdb);
	snprintf(listenarg, sizeof(listenarg), "--web.listen-address=%s", listen);
	char logp[256];
	snprintf(logp, sizeof(logp), "%s/prometheus.log", d.dir);
	pid_t pp = fork();
	ck_assert_int_ge(pp, 0);
	if (pp == 0) {
		int lf = open(logp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (lf >= 0) {
			dup2(lf, 1);
			dup2(lf, 2);
		}
		execl(prom, prom, cfgarg, tsdbarg, listenarg, "--log.level=warn", (char *)NULL);
		_exit(127);
	}
	bool ready = false;
	for (int i = 0; i < 200 && !ready; i++) {
		ready = http_get(pport, "/-/ready", NULL, 0) == 200;
		if (!ready)
			usleep(100 * 1000);
	}
	ck_assert_msg(ready, "prometheus did not get ready in 20 s (see %s)", logp);

	struct flood fa = { .sock = ga.socket }, fb = { .sock = gb.socket };
	pthread_t ta, tb;
	ck_assert_int_eq(pthread_create(&ta, NULL, flood_run, &fa), 0);
	ck_assert_int_eq(pthread_create(&tb, NULL, flood_run, &fb), 0);
	sleep(20);
	/* While both still saturate the device. */
	double up = prom_value(prom_query(pport, "up{job=\"devq\"}"), "up");
	static char ja[1 << 16]; /* prom_query's answer is overwritten by the next */
	snprintf(ja, sizeof(ja), "%s",
		 prom_query(pport, "rate(devq_tenant_device_seconds_total{tenant=\"t_a\"}[10s])"));
	double a = prom_value(ja, "rate t_a");
	double b = prom_value(prom_query(pport,
					 "rate(devq_tenant_device_seconds_total{tenant=\"t_b\"}[10s])"),
			      "rate t_b");
	static char series_b[1 << 16];
	snprintf(series_b, sizeof(series_b), "%s",
		 prom_query(pport, "devq_tenant_device_seconds_total{tenant=\"t_b\"}"));
	double ha = prom_value(prom_query(pport,
					  "count(devq_tenant_op_seconds_bucket{tenant=\"t_a\"})"),
			       "buckets t_a");
	double hb = prom_value(prom_query(pport,
					  "count(devq_tenant_op_seconds_bucket{tenant=\"t_b\"})"),
			       "buckets t_b");
	fa.stop = fb.stop = true;
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	fprintf(stderr, "prometheus: up %g; device-time rates t_b %.3f, t_a %.3f: %.2f (3 "
		"expected); %llu and %llu ops\n", up, b, a, a > 0 ? b / a : 0,
		(unsigned long long)fb.ops, (unsigned long long)fa.ops);
	ck_assert_int_eq(kill(pp, SIGTERM), 0);
	int st;
	ck_assert_int_eq(waitpid(pp, &st, 0), pp);
	ck_assert(fa.ok && fb.ok);
	ck_assert_double_eq(up, 1);
	ck_assert_msg(a > 0 && b / a >= 3 * 0.85 && b / a <= 3 * 1.15, "t_b/t_a = %.3f / %.3f", b,
		      a);
	ck_assert_msg(strstr(series_b, "\"gpu\":\"0\"") && strstr(series_b, "\"UUID\":\"CPU-") &&
			      strstr(series_b, "\"tenant\":\"t_b\"") &&
			      strstr(series_b, "\"team\":\"b\"") && strstr(ja, "\"team\":\"a\""),
		      "labels: %s", series_b);
	ck_assert_double_ge(ha, 15);
	ck_assert_double_ge(hb, 15);
	exporter_stop(&x);
	struct devq_evict_result er;
	ck_assert_int_eq(devq_admin_evict(q, "t_a", 0, &er), 0);
	ck_assert_int_eq(devq_admin_evict(q, "t_b", 0, &er), 0);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* packaging/prometheus/devq-rules.yml: promtool check rules, and every
 * alert's unit test (devq-rules.test.yml) passes. */
START_TEST(rules_pass_promtool)
{
	const char *tool = harness_promtool();
	if (!tool) {
		fprintf(stderr, "SKIP rules_pass_promtool: make promtool, or DEVQ_PROMTOOL=PATH\n");
		return;
	}
	static const char *const sub[] = { "check rules packaging/prometheus/devq-rules.yml",
					   "test rules packaging/prometheus/devq-rules.test.yml" };
	for (size_t i = 0; i < 2; i++) {
		char cmd[1024];
		snprintf(cmd, sizeof(cmd), "%s %s 2>&1", tool, sub[i]);
		FILE *p = popen(cmd, "r");
		ck_assert_ptr_nonnull(p);
		char out[4096];
		size_t n = fread(out, 1, sizeof(out) - 1, p);
		out[n] = '\0';
		int rc = pclose(p);
		ck_assert_msg(rc == 0 && strstr(out, "SUCCESS"), "promtool %s: %d:\n%s", sub[i], rc,
			      out);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("exporter");
	TCase *tc = tcase_create("exporter");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, serves_every_instance);
	tcase_add_test(tc, silent_instance_reads_down);
	tcase_add_test(tc, sessions_opt_in);
	tcase_add_test(tc, concurrent_scrapes_coalesce);
	tcase_add_test(tc, series_stable_over_connect_cycles);
	tcase_add_test(tc, hostile_clients);
	tcase_add_test(tc, observer_sees_every_tenant);
	tcase_add_test(tc, rules_pass_promtool);
	tcase_add_test(tc, prometheus_scrapes_weighted_tenants);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
