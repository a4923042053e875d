/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target: two client connections of a real in-process devqd.
 *
 * The daemon is the real one (server.c's accept, frame reader, decoder,
 * session dispatch, validation, scheduling, buffers and the threaded CPU
 * backend), listening on a private socket and stepped with uv_run from here
 * (devq_server_start is the seam).  Each input is two connections: the
 * input is cut into records, each sent on one of them with one sendmsg
 * carrying the fake fds the record asks for.  After the last record the
 * driver waits for every op to complete, hangs up, and checks that the
 * daemon freed the sessions, every buffer and every fd it was given; a
 * violation aborts, which libFuzzer reports as a crash.  A hang is caught
 * by libFuzzer's -timeout.
 *
 * Record format (the seed generator mkcorpus.c writes the same):
 *   u8  nfds      low 2 bits: fds to attach (0..3); 0x80: a flood of 253;
 *                 0x40: send on the second connection (same user), which
 *                 otherwise never speaks; 0x20: write the payload into
 *                 the connection's submit ring instead (once a HelloReply
 *                 gave it one; dropped before), as an entry of len bytes
 *                 whose socket offset is the bytes sent so far plus kinds
 *                 (as a signed 16-bit value), then ring the doorbell
 *                 unless 0x10; 0x08: first move the ring's tail past its
 *                 size (a hostile tail)
 *   u16 kinds     3 bits per fd, fd i of kind (kinds >> 3*(i%5)) & 7
 *   u16 len       payload bytes (clamped to what is left)
 *   len bytes     sent as they are: frame headers and protobuf payloads
 * little endian.  The same file builds the replay test (test_fuzz_replay),
 * which runs the seed corpus and every kept crasher through this function. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/cpage.h"
#include "core/session.h"
#include "core/timeline.h"
#include "core/trace.h"
#include "fuzz_session.h"
#include "server/server.h"

#ifndef DEVQ_FAIL_RANGES_MAX /* a daemon from before the bound */
#define DEVQ_FAIL_RANGES_MAX 1024
#endif

#define FLOOD_FDS DEVQ_FDS_PER_MSG
#define DRAIN_LIMIT_NS (60ull * 1000 * 1000 * 1000) /* far beyond any sane input */

struct fuzz_stats fuzz_stats;

static struct devq_daemon D;
static uv_loop_t L;
static uv_timer_t tick; /* keeps uv_run(UV_RUN_ONCE) from blocking for long */
static char dir[64], sockpath[96];
static bool ready;

/* ---- the daemon ------------------------------------------------------ */

static void cleanup_socket(void)
{
	unlink(sockpath);
	rmdir(dir);
}

static void on_tick(uv_timer_t *t)
{
	(void)t;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "fuzz_session: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	abort();
}

/* The daemon as main.c makes it (the same devq_engine_init and
 * devq_server_start), with limits small enough that an input runs in
 * milliseconds: 1 ms ops, 1 MiB buffers, 8 queues a session. */
static void setup(void)
{
	const char *v = getenv("DEVQ_FUZZ_VERBOSE");
	devq_log_set_level(v && *v ? DEVQ_LOG_DEBUG : DEVQ_LOG_ERR);
	signal(SIGPIPE, SIG_IGN);
	snprintf(dir, sizeof(dir), "/tmp/devq-fuzz-XXXXXX");
	if (!mkdtemp(dir))
		die("mkdtemp: %s", strerror(errno));
	snprintf(sockpath, sizeof(sockpath), "%s/devqd.sock", dir);
	atexit(cleanup_socket);

	struct devq_config cfg = { 0 };
	cfg.socket_path = sockpath;
	cfg.backend = "cpu";
	cfg.streams = 2;
	cfg.priority_streams = 1;
	cfg.max_op_ns = 1000 * 1000;
	cfg.max_buffer_bytes = 1 << 20;
	cfg.max_frame = DEVQ_FRAME_MAX_DEFAULT;
	cfg.max_queues = 8;
	cfg.stop_grace_ns = 2ull * 1000 * 1000 * 1000;
	cfg.stall_ns = 60ull * 1000 * 1000 * 1000;
	cfg.trace_records = DEVQ_TRACE_DEFAULT_RECORDS;
	/* Quotas an input of a few kB can reach, so backpressure (held ops,
	 * resuming), the per-session cap in the backend and the quota errors
	 * are fuzzed too; the ok-* seeds stay within them. */
	cfg.fair_k = 2;
	cfg.q_session_ops = 8;
	cfg.q_session_buffers = 6;
	cfg.q_session_pinned = 256 << 10;
	cfg.q_session_device = 256 << 10;
	cfg.q_session_fds = 16;
	D.listen_fd = -1;
	struct devq_engine_events ev = devq_server_events(&D);
	if (devq_engine_init(&D.e, &cfg, &ev, NULL) < 0)
		die("devq_engine_init failed");
	if (uv_loop_init(&L) < 0)
		die("out of memory");
	D.loop = &L;
	if (devq_server_start(&D) != 0)
		die("devq_server_start failed");
	uv_timer_init(&L, &tick);
	uv_timer_start(&tick, on_tick, 5, 5);
	ready = true;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		die("/proc/self/fd: %s", strerror(errno));
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own fd */
}

/* ---- the client side ------------------------------------------------- */

/* Points a client was told completed OK, for the failure-range oracle. */
#define MAX_OKS 65536

struct client {
	int fd;
	uv_poll_t poll;
	bool polling, eof;
	struct devq_rx rx;
	uint64_t session; /* from HelloReply */
	struct ok_point {
		uint32_t queue;
		uint64_t point;
	} *oks;
	size_t noks;
	uint64_t sent; /* bytes written to the socket */
	/* The submit ring, mapped from the HelloReply (sq NULL: none). */
	void *hint;
	size_t hint_len;
	struct devq_sq_hdr *sq;
	struct devq_sqe *sqe;
	uint32_t sq_n;
	uint64_t sq_tail;
	int bell;
};

/* A HelloReply that made a submit ring: map it and keep its doorbell. */
static void client_map_ring(struct client *c, const Devq__HelloReply *r, struct devq_frame *f)
{
	const Devq__CompletionPage *pg = r->completion_page;
	if (!pg || !pg->sq_entries || c->hint)
		return;
	if (f->nfds != 4 || pg->sq_entries & (pg->sq_entries - 1) ||
	    (uint64_t)DEVQ_SQ_OFF + (uint64_t)pg->sq_entries * sizeof(struct devq_sqe) > pg->hint_size)
		die("HelloReply: a submit ring of %u entries, hint page of %u bytes, %u fds",
		    pg->sq_entries, pg->hint_size, f->nfds);
	void *p = mmap(NULL, pg->hint_size, PROT_READ | PROT_WRITE, MAP_SHARED, f->fds[1], 0);
	if (p == MAP_FAILED)
		die("mmap of the hint page: %s", strerror(errno));
	c->hint = p;
	c->hint_len = pg->hint_size;
	c->sq = devq_sq_hdr(p);
	c->sqe = devq_sq_entries(p);
	c->sq_n = pg->sq_entries;
	c->bell = f->fds[3];
	f->fds[3] = -1;
}

/* Everything the daemon sends must be a well-formed DaemonMessage frame. */
static void client_read(struct client *c)
{
	for (;;) {
		ssize_t n = devq_rx_recv(&c->rx, c->fd, MSG_DONTWAIT);
		if (n == -EAGAIN)
			return;
		if (n <= 0) {
			if (n < 0 && n != -ECONNRESET)
				die("client recv: %s", strerror((int)-n));
			c->eof = true;
			return;
		}
		struct devq_frame f;
		int r;
		while ((r = devq_rx_next(&c->rx, &f)) == 1) {
			fuzz_stats.frames++;
			if (f.type != DEVQ_FRAME_DAEMON)
				die("daemon sent frame type %u", f.type);
			Devq__DaemonMessage *m = devq__daemon_message__unpack(NULL, f.len, f.payload);
			if (!m)
				die("daemon sent a malformed DaemonMessage (%u bytes)", f.len);
			if (m->body_case == DEVQ__DAEMON_MESSAGE__BODY_ERROR) {
				fuzz_stats.errors++;
				if (m->error->code == DEVQ__CODE__PROTOCOL_ERROR)
					fuzz_stats.protocol_errors++;
				if (!m->error->message || !*m->error->message)
					die("Error without a message (code %d)", m->error->code);
			} else if (m->body_case == DEVQ__DAEMON_MESSAGE__BODY_COMPLETIONS) {
				for (size_t i = 0; i < m->completions->n_items; i++) {
					const Devq__Completion *x = m->completions->items[i];
					fuzz_stats.completions++;
					if (x->code == DEVQ__CODE__OK && c->oks && c->noks < MAX_OKS)
						c->oks[c->noks++] =
							(struct ok_point){ x->queue, x->point };
					if (x->code != DEVQ__CODE__OK)
						fuzz_stats.failed++;
					if (x->code != DEVQ__CODE__OK &&
					    (!x->message || !*x->message))
						die("failed completion without a message");
				}
			} else if (m->body_case == DEVQ__DAEMON_MESSAGE__BODY_HELLO_REPLY) {
				c->session = m->hello_reply->session;
				client_map_ring(c, m->hello_reply, &f);
			} else if (m->body_case == DEVQ__DAEMON_MESSAGE__BODY_BUFFER_READY) {
				if (m->buffer_ready->has_fd != (f.nfds == 1))
					die("BufferReady has_fd %d with %u fds",
					    m->buffer_ready->has_fd, f.nfds);
			} else if (f.nfds) {
				die("message %d carries %u fds", m->body_case, f.nfds);
			}
			devq__daemon_message__free_unpacked(m, NULL);
			devq_frame_close_fds(&f);
		}
		if (r < 0)
			die("daemon broke framing: %s", strerror(-r));
	}
}

static void client_cb(uv_poll_t *h, int status, int events)
{
	struct client *c = h->data;
	(void)events;
	if (status < 0 || c->eof)
		return;
	client_read(c);
	if (c->eof && c->polling) {
		uv_poll_stop(&c->poll);
		c->polling = false;
	}
}

/* A fake fd of the given kind, as a client might send. */
static int make_fd(unsigned kind)
{
	int fd = -1, p[2];
	switch (kind) {
	case 0: /* what an honest client imports: sealed memfd, 4 KiB */
	case 4: /* sealed but only 16 bytes */
	case 6: /* sealed, 4 KiB, reopened read-only */
		fd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0 || ftruncate(fd, kind == 4 ? 16 : 4096) < 0 ||
		    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
			die("memfd: %s", strerror(errno));
		if (kind == 6) {
			char path[64];
			snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
			int ro = open(path, O_RDONLY | O_CLOEXEC);
			close(fd);
			fd = ro;
		}
		break;
	case 1: /* memfd without seals */
		fd = memfd_create("fuzz", MFD_CLOEXEC);
		if (fd >= 0 && ftruncate(fd, 4096) < 0)
			die("ftruncate: %s", strerror(errno));
		break;
	case 2: /* sealed against writing as well */
		fd = memfd_create("fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
		if (fd < 0 || ftruncate(fd, 4096) < 0 ||
		    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0)
			die("memfd: %s", strerror(errno));
		break;
	case 3: /* a pipe */
		if (pipe2(p, O_CLOEXEC) < 0)
			die("pipe: %s", strerror(errno));
		close(p[1]);
		fd = p[0];
		break;
	case 5:
		fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		break;
	default: /* a socket */
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) < 0)
			die("socketpair: %s", strerror(errno));
		close(p[1]);
		fd = p[0];
		break;
	}
	if (fd < 0)
		die("fake fd of kind %u: %s", kind, strerror(errno));
	return fd;
}

#define NCONN 2

/* Steps the loop until cond holds; false if it did not within limit_ns. */
static bool pump(bool (*cond)(void), uint64_t limit_ns, bool block)
{
	uint64_t end = now_ns() + limit_ns;
	while (!cond()) {
		if (now_ns() > end)
			return false;
		uv_run(&L, block ? UV_RUN_ONCE : UV_RUN_NOWAIT);
	}
	return true;
}

static uint64_t sessions_before;

static bool accepted(void)
{
	return D.e.sessions_total == sessions_before + NCONN;
}

/* The daemon has read all we sent, or will read no more. */
static bool consumed(void)
{
	for (struct devq_session *s = D.e.sessions; s; s = s->next) {
		int n = 0;
		int fd = devq_server_session_fd(s);
		if (!s->connected || s->close_after_flush || fd < 0)
			continue;
		if (ioctl(fd, FIONREAD, &n) < 0 || n > 0)
			return false;
	}
	return true;
}

static bool idle(void)
{
	if (D.e.ops_in_flight)
		return false;
	for (struct devq_session *s = D.e.sessions; s; s = s->next)
		if (s->connected && s->tx.bytes)
			return false;
	return true;
}

/* Issue 14 #3 and #4: a point the client was told completed OK must not
 * read as failed (a later wait on it would get DEPENDENCY_FAILED), and a
 * queue's failed ranges stay sorted, disjoint and bounded. */
static void check_failure_ranges(const struct client *c)
{
	const struct devq_session *s = D.e.sessions;
	while (s && s->id != c->session)
		s = s->next;
	if (!s)
		return;
	for (size_t i = 0; i < s->queues.cap; i++) {
		const struct devq_timeline *q = s->queues.slots[i].val;
		if (!q)
			continue;
		if (q->nfails > DEVQ_FAIL_RANGES_MAX)
			die("queue %u: %u failed ranges, above %u", q->id, q->nfails,
			    DEVQ_FAIL_RANGES_MAX);
		for (unsigned k = 0; k < q->nfails; k++)
			if (q->fails[k].from >= q->fails[k].to ||
			    (k && q->fails[k].from < q->fails[k - 1].to))
				die("queue %u: failed ranges unsorted or overlapping at %u", q->id, k);
	}
	for (size_t i = 0; i < c->noks; i++) {
		const struct devq_timeline *q = devq_idmap_get(&s->queues, c->oks[i].queue);
		/* A queue closed and reopened since starts a new timeline. */
		if (q && c->oks[i].point <= q->completed &&
		    devq_timeline_failed(q, c->oks[i].point))
			die("queue %u point %llu completed OK but is recorded as failed",
			    c->oks[i].queue, (unsigned long long)c->oks[i].point);
	}
}

static bool freed(void)
{
	return D.e.sessions == NULL && D.e.ops_in_flight == 0;
}

static bool send_record(struct client *c, const uint8_t *p, size_t len, unsigned nfds,
			unsigned kinds)
{
	int fds[FLOOD_FDS];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * FLOOD_FDS)];
	} ctl;
	for (unsigned i = 0; i < nfds; i++)
		fds[i] = make_fd((kinds >> (3 * (i % 5))) & 7);
	struct iovec iov = { (void *)p, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
	}
	bool ok = true;
	/* fds need at least one byte to ride on. */
	if (len || nfds) {
		char zero = 0;
		if (!len) {
			iov.iov_base = &zero;
			iov.iov_len = 1;
		}
		for (int tries = 0;; tries++) {
			ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
			if (n >= 0) {
				fuzz_stats.bytes_sent += (size_t)n;
				c->sent += (uint64_t)n;
				if ((size_t)n < iov.iov_len) {
					/* The rest goes without the fds (sent already). */
					iov.iov_base = (char *)iov.iov_base + n;
					iov.iov_len -= (size_t)n;
					mh.msg_control = NULL;
					mh.msg_controllen = 0;
					pump(consumed, 100 * 1000 * 1000, true);
					continue;
				}
				break;
			}
			if (errno == EAGAIN && tries < 100) {
				/* Backpressure: let the daemon catch up. */
				pump(consumed, 10 * 1000 * 1000, true);
				continue;
			}
			ok = false; /* the daemon hung up (or is not reading) */
			break;
		}
	}
	for (unsigned i = 0; i < nfds; i++)
		close(fds[i]);
	return ok;
}

/* Every connected session's submit ring is taken up to its tail. */
static bool rings_taken(void)
{
	for (struct devq_session *s = D.e.sessions; s; s = s->next)
		if (s->connected && !s->close_after_flush && devq_cpage_sq_pending(s->cpage))
			return false;
	return true;
}

static struct client *ring_client;

/* The HelloReply that maps ring_client's submit ring has been read (or
 * the connection ended). */
static bool ring_known(void)
{
	return ring_client->sq || ring_client->eof;
}

/* A record for the submit ring (the 0x20 flag): see the format above. */
static void ring_record(struct client *c, const uint8_t *p, size_t len, unsigned flags,
			unsigned kinds)
{
	/* A Hello sent just before: its reply may not have been read yet.
	 * Without one (or without a ring) the record is dropped. */
	ring_client = c;
	pump(ring_known, 100 * 1000 * 1000, true);
	if (!c->sq)
		return;
	if (flags & 0x08)
		c->sq_tail += c->sq_n + 1;
	struct devq_sqe *e = &c->sqe[c->sq_tail & (c->sq_n - 1)];
	int64_t off = (int64_t)c->sent + (int16_t)kinds;
	e->len = (uint32_t)len;
	e->off = off < 0 ? 0 : (uint64_t)off;
	memcpy(e->frame, p, len < DEVQ_SQE_FRAME ? len : DEVQ_SQE_FRAME);
	atomic_store(&c->sq->tail, ++c->sq_tail);
	/* EAGAIN: a full pipe is rung already; EPIPE: devqd closed the
	 * session (a protocol error) and freed its end. */
	char one = 1;
	if (!(flags & 0x10) && write(c->bell, &one, 1) < 0 && errno != EAGAIN && errno != EPIPE)
		die("doorbell: %s", strerror(errno));
	/* Taken, or waiting for socket bytes that may never come: at most
	 * 10 ms, not an error. */
	pump(rings_taken, 10 * 1000 * 1000, true);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ready)
		setup();
	memset(&fuzz_stats, 0, sizeof(fuzz_stats));
	int fds_before = fd_count();
	sessions_before = D.e.sessions_total;

	/* Two connections of the same user: records go to the first unless
	 * they say otherwise, so the second may never speak at all. */
	struct client c[NCONN];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sockpath);
	for (int i = 0; i < NCONN; i++) {
		memset(&c[i], 0, sizeof(c[i]));
		c[i].bell = -1;
		c[i].fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (c[i].fd < 0 || connect(c[i].fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			die("connect: %s", strerror(errno));
		devq_rx_init(&c[i].rx, 64u << 20);
		c[i].oks = malloc(MAX_OKS * sizeof(*c[i].oks));
		uv_poll_init(&L, &c[i].poll, c[i].fd);
		c[i].poll.data = &c[i];
		uv_poll_start(&c[i].poll, UV_READABLE, client_cb);
		c[i].polling = true;
	}
	if (!pump(accepted, DRAIN_LIMIT_NS, true))
		die("the daemon did not accept the connections");

	size_t off = 0;
	bool open[NCONN] = { true, true };
	while (off + 5 <= size) {
		unsigned nfds = data[off] & 0x80 ? FLOOD_FDS : data[off] & 3;
		unsigned to = (data[off] >> 6) & 1;
		unsigned kinds = data[off + 1] | (unsigned)data[off + 2] << 8;
		size_t len = data[off + 3] | (size_t)data[off + 4] << 8;
		off += 5;
		if (len > size - off)
			len = size - off;
		if (data[off - 5] & 0x20)
			ring_record(&c[to], data + off, len, data[off - 5], kinds);
		else if (open[to] && !send_record(&c[to], data + off, len, nfds, kinds))
			open[to] = false;
		off += len;
		pump(consumed, 100 * 1000 * 1000, false);
	}

	/* Everything submitted completes (ops are at most 1 ms), and its
	 * completions reach the clients, before they hang up. */
	if (!pump(idle, DRAIN_LIMIT_NS, true))
		die("ops still in flight after %llu s", DRAIN_LIMIT_NS / 1000000000ull);
	for (int i = 0; i < NCONN; i++) {
		client_read(&c[i]);
		check_failure_ranges(&c[i]);
		shutdown(c[i].fd, SHUT_WR);
	}
	if (!pump(freed, DRAIN_LIMIT_NS, true))
		die("sessions not freed after hang-up (%llu ops in flight, %u buffers)",
		    (unsigned long long)D.e.ops_in_flight, D.e.nbufs);
	for (int i = 0; i < NCONN; i++)
		uv_close((uv_handle_t *)&c[i].poll, NULL);
	uv_run(&L, UV_RUN_NOWAIT);
	for (int i = 0; i < NCONN; i++) {
		close(c[i].fd);
		devq_rx_fini(&c[i].rx);
		free(c[i].oks);
		if (c[i].hint && munmap(c[i].hint, c[i].hint_len) < 0)
			die("munmap: %s", strerror(errno));
		if (c[i].bell >= 0)
			close(c[i].bell);
	}

	if (D.e.sessions_total != sessions_before + NCONN)
		die("expected %d sessions, the daemon counted %llu", NCONN,
		    (unsigned long long)(D.e.sessions_total - sessions_before));
	if (D.e.nbufs || D.e.bytes_mapped)
		die("after hang-up: %u buffers, %llu bytes still mapped", D.e.nbufs,
		    (unsigned long long)D.e.bytes_mapped);
	for (unsigned i = 0; i < D.e.be->streams; i++)
		if (D.e.stream_load[i])
			die("stream %u still has %u queues bound", i, D.e.stream_load[i]);
	int fds_after = fd_count();
	if (fds_after != fds_before)
		die("fd leak: %d fds before the connections, %d after", fds_before, fds_after);
	return 0;
}
