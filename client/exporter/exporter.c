/* SPDX-License-Identifier: Apache-2.0 */
/* devq-exporter: serves GET /metrics, in the Prometheus text format 0.0.4,
 * for every devqd of the node (the sockets in /run/devqd, or the --socket list),
 * each instance's series labelled gpu; devq_up{gpu} is 0 for one it cannot
 * reach, and the scrape still succeeds.  HTTP is libmicrohttpd's: this file
 * parses no request itself.
 *
 * Limits, all explicit (devq-exporter(8)): at most --max-connections
 * connections at once (more are closed at accept), a request's headers
 * within DEVQ_EXPORTER_REQUEST_MAX bytes (more: refused), and a connection
 * idle for --timeout seconds is closed, so a slow or silent client holds
 * a slot for a bounded time.
 *
 * Each instance has one fetcher thread: a scrape that finds the last status
 * older than DEVQ_EXPORTER_MIN_INTERVAL_MS asks it for a new one, and every
 * scrape meanwhile waits for that same answer (at most
 * DEVQ_EXPORTER_WAIT_MS from the scrape's start, for every instance
 * together; past that the instance reads as down), so any
 * number of concurrent scrapes costs a devqd at most one status request
 * per interval.  A devqd that never answers holds its fetcher only. */
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "devq.h"
#include "promtext.h"

#define DEVQ_EXPORTER_MAX_INSTANCES 64
#define DEVQ_EXPORTER_MIN_INTERVAL_MS 500
#define DEVQ_EXPORTER_WAIT_MS 5000
#define DEVQ_EXPORTER_REQUEST_MAX (16 * 1024)
#define DEVQ_EXPORTER_DEFAULT_GLOB "/run/devqd/*.sock"

/* One status answer, shared by the scrapes that use it. */
struct devq_exporter_result {
	unsigned refs; /* under the exporter's lock */
	struct devq_status *s; /* NULL: the instance was not reached */
	uint64_t self;
};

struct devq_exporter_inst {
	char path[108];
	char gpu[64];      /* the label: see inst_label */
	pthread_cond_t cv; /* a fetch is done */
	bool want;         /* the fetcher is asked for a new status */
	bool fetching;     /* between want and its answer */
	uint64_t asked_ns; /* when the last fetch was asked for */
	uint64_t gen;      /* answers so far */
	struct devq_exporter_result *last;
	bool thread;
};

static pthread_mutex_t devq_exporter_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t devq_exporter_want = PTHREAD_COND_INITIALIZER;
static struct devq_exporter_inst devq_exporter_insts[DEVQ_EXPORTER_MAX_INSTANCES];
static size_t devq_exporter_ninsts;
static const char *devq_exporter_sockets[DEVQ_EXPORTER_MAX_INSTANCES];
static size_t devq_exporter_nsockets;
static bool devq_exporter_sessions;

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void result_unref(struct devq_exporter_result *r)
{
	if (!r || --r->refs)
		return;
	devq_status_free(r->s);
	free(r);
}

/* The fetcher of one instance: one status request each time it is asked,
 * on a connection of its own (a fresh one each time: a restarted devqd is
 * simply reached again). */
static void *fetcher(void *arg)
{
	struct devq_exporter_inst *x = arg;
	pthread_mutex_lock(&devq_exporter_lock);
	for (;;) {
		while (!x->want)
			pthread_cond_wait(&devq_exporter_want, &devq_exporter_lock);
		x->want = false;
		pthread_mutex_unlock(&devq_exporter_lock);
		struct devq_exporter_result *r = calloc(1, sizeof(*r));
		devq *q = NULL;
		if (r && devq_connect(x->path, "devq-exporter", &q) == 0) {
			unsigned flags = devq_exporter_sessions ? 0 : DEVQ_STATUS_NO_SESSIONS;
			if (devq_get_status_opts(q, flags, &r->s) < 0)
				r->s = NULL;
			r->self = devq_get_info(q)->session;
		}
		devq_disconnect(q);
		pthread_mutex_lock(&devq_exporter_lock);
		if (r) {
			r->refs = 1;
			result_unref(x->last);
			x->last = r;
		}
		x->fetching = false;
		x->gen++;
		pthread_cond_broadcast(&x->cv);
	}
	return NULL;
}

/* The instance of path, made on first sight: NULL past the bound. */
static struct devq_exporter_inst *inst_of(const char *path)
{
	for (size_t i = 0; i < devq_exporter_ninsts; i++)
		if (!strcmp(devq_exporter_insts[i].path, path))
			return &devq_exporter_insts[i];
	if (devq_exporter_ninsts == DEVQ_EXPORTER_MAX_INSTANCES || strlen(path) >= 108)
		return NULL;
	struct devq_exporter_inst *x = &devq_exporter_insts[devq_exporter_ninsts];
	memset(x, 0, sizeof(*x));
	snprintf(x->path, sizeof(x->path), "%s", path);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&x->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_t th;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	int e = pthread_create(&th, &a, fetcher, x);
	pthread_attr_destroy(&a);
	if (e) {
		fprintf(stderr, "devq-exporter: %s: cannot start its fetcher: %s\n", path,
			strerror(e));
		return NULL;
	}
	x->thread = true;
	devq_exporter_ninsts++;
	return x;
}

/* The instance's status for this scrape, shared (result_unref it): a new
 * one is asked for when the last was asked for at least the interval ago
 * and none is in flight; NULL when the instance has not answered by until
 * (CLOCK_MONOTONIC).  Under the lock. */
static struct devq_exporter_result *status_of(struct devq_exporter_inst *x,
					      const struct timespec *until)
{
	uint64_t now = now_ns();
	if (!x->fetching && (!x->gen || now - x->asked_ns >= DEVQ_EXPORTER_MIN_INTERVAL_MS * 1000000ull)) {
		x->fetching = true;
		x->want = true;
		x->asked_ns = now;
		pthread_cond_broadcast(&devq_exporter_want);
	}
	if (x->fetching) {
		uint64_t gen = x->gen;
		while (x->gen == gen) {
			if (pthread_cond_timedwait(&x->cv, &devq_exporter_lock, until) == ETIMEDOUT)
				break;
		}
		if (x->gen == gen)
			return NULL; /* no answer in time: down for this scrape */
	}
	if (x->last)
		x->last->refs++;
	return x->last;
}

/* gpu: the ordinal the daemon reports, else from the socket's name
 * (gpuN.sock), else "0"; a label another instance already has becomes the
 * socket's path, so that no two series collide. */
static void inst_label(struct devq_exporter_inst *x, const struct devq_status *s, size_t upto)
{
	char want[64];
	const char *base = strrchr(x->path, '/');
	base = base ? base + 1 : x->path;
	unsigned n;
	char tail[8];
	if (s && s->gpu[0])
		snprintf(want, sizeof(want), "%s", s->gpu);
	else if (x->gpu[0])
		snprintf(want, sizeof(want), "%s", x->gpu);
	else if (sscanf(base, "gpu%u.soc%1[k]", &n, tail) == 2)
		snprintf(want, sizeof(want), "%u", n);
	else
		snprintf(want, sizeof(want), "0");
	for (size_t i = 0; i < upto; i++)
		if (&devq_exporter_insts[i] != x && !strcmp(devq_exporter_insts[i].gpu, want)) {
			snprintf(want, sizeof(want), "%.63s", x->path);
			break;
		}
	snprintf(x->gpu, sizeof(x->gpu), "%s", want);
}

/* The sockets of this scrape: the --socket list, or the default glob. */
static size_t scrape_instances(struct devq_exporter_inst **out)
{
	size_t n = 0;
	if (devq_exporter_nsockets) {
		for (size_t i = 0; i < devq_exporter_nsockets; i++) {
			struct devq_exporter_inst *x = inst_of(devq_exporter_sockets[i]);
			if (x)
				out[n++] = x;
		}
		return n;
	}
	glob_t g;
	if (glob(DEVQ_EXPORTER_DEFAULT_GLOB, 0, NULL, &g) != 0)
		return 0;
	for (size_t i = 0; i < g.gl_pathc && n < DEVQ_EXPORTER_MAX_INSTANCES; i++) {
		struct devq_exporter_inst *x = inst_of(g.gl_pathv[i]);
		if (x)
			out[n++] = x;
	}
	globfree(&g);
	return n;
}

/* The whole scrape, in a malloc'd buffer; NULL when out of memory. */
static char *scrape(size_t *len)
{
	struct devq_exporter_inst *xs[DEVQ_EXPORTER_MAX_INSTANCES];
	struct devq_exporter_result *rs[DEVQ_EXPORTER_MAX_INSTANCES];
	struct devq_promtext_instance in[DEVQ_EXPORTER_MAX_INSTANCES];
	/* The labels as of this scrape: another scrape may relabel an
	 * instance (under the lock) while this one writes its text. */
	char gpus[DEVQ_EXPORTER_MAX_INSTANCES][64];
	pthread_mutex_lock(&devq_exporter_lock);
	size_t n = scrape_instances(xs);
	/* Ask every instance first, then wait: their requests overlap. */
	uint64_t now = now_ns();
	for (size_t i = 0; i < n; i++) {
		struct devq_exporter_inst *x = xs[i];
		if (!x->fetching &&
		    (!x->gen || now - x->asked_ns >= DEVQ_EXPORTER_MIN_INTERVAL_MS * 1000000ull)) {
			x->fetching = true;
			x->want = true;
			x->asked_ns = now;
		}
	}
	pthread_cond_broadcast(&devq_exporter_want);
	/* One deadline for the whole scrape: silent instances wait together,
	 * not one after the other. */
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += DEVQ_EXPORTER_WAIT_MS / 1000;
	for (size_t i = 0; i < n; i++)
		rs[i] = status_of(xs[i], &until);
	for (size_t i = 0; i < n; i++) {
		const struct devq_status *s = rs[i] ? rs[i]->s : NULL;
		inst_label(xs[i], s, devq_exporter_ninsts);
		memcpy(gpus[i], xs[i]->gpu, sizeof(gpus[i]));
		in[i] = (struct devq_promtext_instance){ .s = s, .gpu = gpus[i],
							 .self = rs[i] ? rs[i]->self : 0 };
	}
	pthread_mutex_unlock(&devq_exporter_lock);
	char *buf = NULL;
	*len = 0;
	FILE *f = open_memstream(&buf, len);
	int w = -1;
	if (f) {
		struct devq_promtext_opts o = { .sessions = devq_exporter_sessions, .exporter = true };
		w = devq_promtext_write(f, in, n, &o);
		if (fclose(f) != 0)
			w = -1;
	}
	pthread_mutex_lock(&devq_exporter_lock);
	for (size_t i = 0; i < n; i++)
		result_unref(rs[i]);
	pthread_mutex_unlock(&devq_exporter_lock);
	if (w < 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type,
			     char *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", type);
	enum MHD_Result ret = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_len, void **ctx)
{
	(void)cls, (void)version, (void)upload, (void)upload_len, (void)ctx;
	static const char text[] = "text/plain; charset=utf-8";
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		static char msg[] = "only GET\n";
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, text, msg, sizeof(msg) - 1,
			     MHD_RESPMEM_PERSISTENT);
	}
	if (!strcmp(url, "/")) {
		static char msg[] = "devq-exporter: the metrics are at /metrics\n";
		return reply(c, MHD_HTTP_OK, text, msg, sizeof(msg) - 1, MHD_RESPMEM_PERSISTENT);
	}
	if (strcmp(url, "/metrics")) {
		static char msg[] = "not found: the metrics are at /metrics\n";
		return reply(c, MHD_HTTP_NOT_FOUND, text, msg, sizeof(msg) - 1,
			     MHD_RESPMEM_PERSISTENT);
	}
	size_t len;
	char *body = scrape(&len);
	if (!body) {
		static char msg[] = "out of memory\n";
		return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, text, msg, sizeof(msg) - 1,
			     MHD_RESPMEM_PERSISTENT);
	}
	return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", body, len,
		     MHD_RESPMEM_MUST_FREE);
}

/* ADDR:PORT or [ADDR]:PORT, bound and listening; -1 with a message. */
static int listen_on(const char *spec, char *bound, size_t blen)
{
	char host[256];
	const char *colon = strrchr(spec, ':');
	if (!colon || colon == spec || !colon[1]) {
		fprintf(stderr, "devq-exporter: --listen %s: want ADDR:PORT\n", spec);
		return -1;
	}
	size_t hl = (size_t)(colon - spec);
	if (spec[0] == '[' && hl >= 2 && spec[hl - 1] == ']')
		snprintf(host, sizeof(host), "%.*s", (int)(hl - 2), spec + 1);
	else
		snprintf(host, sizeof(host), "%.*s", (int)hl, spec);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV }, *ai;
	int e = getaddrinfo(host, colon + 1, &hints, &ai);
	if (e) {
		fprintf(stderr, "devq-exporter: --listen %s: %s\n", spec, gai_strerror(e));
		return -1;
	}
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 64) < 0) {
		fprintf(stderr, "devq-exporter: --listen %s: %s\n", spec, strerror(errno));
		if (fd >= 0 && close(fd) < 0)
			fprintf(stderr, "devq-exporter: close: %s\n", strerror(errno));
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char h[128], p[16];
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
	    getnameinfo((struct sockaddr *)&ss, sl, h, sizeof(h), p, sizeof(p),
			NI_NUMERICHOST | NI_NUMERICSERV) == 0)
		snprintf(bound, blen, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", h, p);
	else
		snprintf(bound, blen, "%s", spec);
	return fd;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: devq-exporter [--listen ADDR:PORT] [--socket PATH]... [--sessions]\n"
		"                     [--max-connections N] [--timeout S]\n"
		"Serves GET /metrics (Prometheus text format 0.0.4) for every devqd of the\n"
		"node: " DEVQ_EXPORTER_DEFAULT_GLOB " by default, or each --socket.\n"
		"  --listen ADDR:PORT    where to listen (default 127.0.0.1:9464; port 0: any,\n"
		"                        printed at start)\n"
		"  --socket PATH         a devqd socket (repeatable, at most %d)\n"
		"  --sessions            add the per-session and per-queue families\n"
		"  --max-connections N   connections at once, more are closed (default 32)\n"
		"  --timeout S           a connection idle this long is closed (default 10)\n"
		"Requests larger than %d bytes are refused.  See devq-exporter(8).\n",
		DEVQ_EXPORTER_MAX_INSTANCES, DEVQ_EXPORTER_REQUEST_MAX);
}

int main(int argc, char **argv)
{
	const char *listen_spec = "127.0.0.1:9464";
	unsigned max_conn = 32, timeout_s = 10;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		char *end;
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--version")) {
			printf("devq-exporter %s\n", devq_version());
			return 0;
		} else if (!strcmp(a, "--sessions")) {
			devq_exporter_sessions = true;
		} else if (!strcmp(a, "--listen") && v) {
			listen_spec = v;
			i++;
		} else if (!strcmp(a, "--socket") && v) {
			if (devq_exporter_nsockets == DEVQ_EXPORTER_MAX_INSTANCES) {
				fprintf(stderr, "devq-exporter: at most %d --socket\n",
					DEVQ_EXPORTER_MAX_INSTANCES);
				return 2;
			}
			if (strlen(v) >= 108) {
				fprintf(stderr, "devq-exporter: --socket %s: path too long\n", v);
				return 2;
			}
			devq_exporter_sockets[devq_exporter_nsockets++] = v;
			i++;
		} else if ((!strcmp(a, "--max-connections") || !strcmp(a, "--timeout")) && v) {
			errno = 0;
			unsigned long n = strtoul(v, &end, 10);
			if (errno || *end || !*v || n < 1 || n > 4096) {
				fprintf(stderr, "devq-exporter: %s %s: want 1 to 4096\n", a, v);
				return 2;
			}
			if (!strcmp(a, "--timeout"))
				timeout_s = (unsigned)n;
			else
				max_conn = (unsigned)n;
			i++;
		} else {
			fprintf(stderr, "devq-exporter: unknown or incomplete argument '%s'\n", a);
			usage(stderr);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	char bound[200];
	int fd = listen_on(listen_spec, bound, sizeof(bound));
	if (fd < 0)
		return 1;
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	/* Every thread (MHD's, the fetchers) inherits the mask: the signals
	 * reach sigwait below only. */
	pthread_sigmask(SIG_BLOCK, &stop, NULL);
	/* A thread per connection: a scrape may wait for a devqd's answer
	 * without holding up the others; the limit bounds the threads. */
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG,
		0, NULL, NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
		MHD_OPTION_CONNECTION_LIMIT, max_conn, MHD_OPTION_CONNECTION_TIMEOUT, timeout_s,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)DEVQ_EXPORTER_REQUEST_MAX,
		MHD_OPTION_END);
	if (!d) {
		fprintf(stderr, "devq-exporter: cannot start the HTTP server on %s\n", bound);
		if (close(fd) < 0)
			fprintf(stderr, "devq-exporter: close: %s\n", strerror(errno));
		return 1;
	}
	printf("devq-exporter: listening on %s\n", bound);
	fflush(stdout);
	int sig = 0;
	sigwait(&stop, &sig);
	MHD_stop_daemon(d); /* closes the listening socket too */
	return 0;
}
