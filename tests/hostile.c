/* SPDX-License-Identifier: Apache-2.0 */
/* The hostile client: speaks devq's wire protocol by hand (raw frames,
 * fds on any byte, never reading replies unless asked) so that tests can
 * break the protocol and attack the daemon as a local user could, and
 * reads what the daemon holds (/proc) to check that it gave it all back. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "hostile.h"

#define WAIT_MS HOSTILE_WAIT_MS

void raw_open(struct raw *r, const struct daemon_proc *d)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	ck_assert_uint_lt(strlen(d->sock), sizeof(sa.sun_path));
	memcpy(sa.sun_path, d->sock, strlen(d->sock) + 1);
	r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(r->fd, 0);
	ck_assert_int_eq(connect(r->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	devq_rx_init(&r->rx, 64u << 20);
}

void raw_close(struct raw *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	devq_rx_fini(&r->rx);
}

void raw_write(struct raw *r, const void *data, size_t len)
{
	const uint8_t *p = data;
	while (len) {
		ssize_t n = send(r->fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		ck_assert_msg(n > 0, "send: %s", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

void header(uint8_t *p, uint32_t len, uint16_t type, uint16_t nfds)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(len >> (8 * i));
	p[4] = (uint8_t)type;
	p[5] = (uint8_t)(type >> 8);
	p[6] = (uint8_t)nfds;
	p[7] = (uint8_t)(nfds >> 8);
}

/* One sendmsg of these bytes with these fds: how a frame's fds ride with its
 * first byte. */
void raw_sendmsg(struct raw *r, const void *data, size_t len, const int *fds,
			unsigned nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * 4)];
	} ctl;
	ck_assert_uint_le(nfds, 4);
	memset(&ctl, 0, sizeof(ctl));
	struct iovec iov = { (void *)data, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds) {
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	ssize_t n = sendmsg(r->fd, &mh, MSG_NOSIGNAL);
	ck_assert_msg(n == (ssize_t)len, "sendmsg: %zd (%s)", n, strerror(errno));
}

/* A frame of the given type around arbitrary payload bytes, declaring and
 * carrying nfds fds. */
void raw_send_frame(struct raw *r, uint16_t type, const void *payload, size_t len,
			   const int *fds, unsigned nfds)
{
	uint8_t *buf = malloc(DEVQ_FRAME_HDR + len + 1);
	ck_assert_ptr_nonnull(buf);
	header(buf, (uint32_t)len, type, (uint16_t)nfds);
	if (len)
		memcpy(buf + DEVQ_FRAME_HDR, payload, len);
	if (nfds)
		raw_sendmsg(r, buf, DEVQ_FRAME_HDR + len, fds, nfds);
	else
		raw_write(r, buf, DEVQ_FRAME_HDR + len);
	free(buf);
}

void raw_send_payload(struct raw *r, uint16_t type, const void *payload, size_t len)
{
	raw_send_frame(r, type, payload, len, NULL, 0);
}

void raw_send_fds(struct raw *r, const Devq__ClientMessage *m, const int *fds,
			 unsigned nfds)
{
	size_t len = devq__client_message__get_packed_size(m);
	uint8_t *payload = malloc(len + 1);
	ck_assert_ptr_nonnull(payload);
	devq__client_message__pack(m, payload);
	raw_send_frame(r, DEVQ_FRAME_CLIENT, payload, len, fds, nfds);
	free(payload);
}

void raw_send(struct raw *r, const Devq__ClientMessage *m)
{
	raw_send_fds(r, m, NULL, 0);
}

/* The next daemon message within timeout_ms.  EOF and ECONNRESET both mean
 * the daemon closed the connection. */
enum raw_result raw_next(struct raw *r, int timeout_ms, Devq__DaemonMessage **out)
{
	uint64_t deadline = harness_now_ns() + (uint64_t)timeout_ms * 1000000u;
	*out = NULL;
	for (;;) {
		struct devq_frame f;
		int k = devq_rx_next(&r->rx, &f);
		ck_assert_msg(k >= 0, "framing error from devqd: %d", k);
		if (k == 1) {
			ck_assert_uint_eq(f.type, DEVQ_FRAME_DAEMON);
			*out = devq__daemon_message__unpack(NULL, f.len, f.payload);
			devq_frame_close_fds(&f);
			ck_assert_ptr_nonnull(*out);
			return RAW_MSG;
		}
		uint64_t now = harness_now_ns();
		if (now >= deadline)
			return RAW_TIMEOUT;
		struct pollfd p = { .fd = r->fd, .events = POLLIN };
		int n = poll(&p, 1, (int)((deadline - now) / 1000000u) + 1);
		if (n < 0 && errno == EINTR)
			continue;
		ck_assert_int_ge(n, 0);
		if (n == 0)
			return RAW_TIMEOUT;
		ssize_t got = devq_rx_recv(&r->rx, r->fd, MSG_DONTWAIT);
		if (got == 0 || got == -ECONNRESET)
			return RAW_EOF;
		if (got == -EAGAIN)
			continue;
		ck_assert_msg(got > 0, "recv: %s", strerror((int)-got));
	}
}

Devq__DaemonMessage *raw_expect(struct raw *r, Devq__DaemonMessage__BodyCase c)
{
	Devq__DaemonMessage *m;
	enum raw_result res = raw_next(r, WAIT_MS, &m);
	ck_assert_msg(res == RAW_MSG, "no message from devqd (%s)",
		      res == RAW_EOF ? "connection closed" : "timed out");
	ck_assert_msg(m->body_case == c, "got message %d, want %d%s%s", m->body_case, c,
		      m->body_case == DEVQ__DAEMON_MESSAGE__BODY_ERROR ? ": " : "",
		      m->body_case == DEVQ__DAEMON_MESSAGE__BODY_ERROR ? m->error->message : "");
	return m;
}

void raw_expect_error(struct raw *r, int code, const char *s1, const char *s2)
{
	Devq__DaemonMessage *m = raw_expect(r, DEVQ__DAEMON_MESSAGE__BODY_ERROR);
	const Devq__Error *e = m->error;
	ck_assert_msg((int)e->code == code, "error %s (%s), want %s", devq_code_name(e->code),
		      e->message, devq_code_name(code));
	ck_assert_msg(!s1 || strstr(e->message, s1), "'%s' lacks '%s'", e->message, s1);
	ck_assert_msg(!s2 || strstr(e->message, s2), "'%s' lacks '%s'", e->message, s2);
	devq__daemon_message__free_unpacked(m, NULL);
}

/* Skips replies to earlier requests until an Error arrives. */
void raw_expect_error_later(struct raw *r, int code, const char *s1)
{
	for (;;) {
		Devq__DaemonMessage *m;
		enum raw_result res = raw_next(r, WAIT_MS, &m);
		ck_assert_msg(res == RAW_MSG, "no error from devqd (%s)",
			      res == RAW_EOF ? "connection closed" : "timed out");
		if (m->body_case == DEVQ__DAEMON_MESSAGE__BODY_ERROR) {
			ck_assert_msg((int)m->error->code == code, "error %s (%s), want %s",
				      devq_code_name(m->error->code), m->error->message,
				      devq_code_name(code));
			ck_assert_msg(!s1 || strstr(m->error->message, s1), "'%s' lacks '%s'",
				      m->error->message, s1);
			devq__daemon_message__free_unpacked(m, NULL);
			return;
		}
		devq__daemon_message__free_unpacked(m, NULL);
	}
}

/* The daemon must close the connection within WAIT_MS; whatever it sends
 * before closing is skipped. */
void raw_expect_closed(struct raw *r)
{
	for (;;) {
		Devq__DaemonMessage *m;
		enum raw_result res = raw_next(r, WAIT_MS, &m);
		ck_assert_msg(res != RAW_TIMEOUT, "devqd did not close the connection");
		if (res == RAW_EOF)
			return;
		devq__daemon_message__free_unpacked(m, NULL);
	}
}

void raw_hello(struct raw *r)
{
	Devq__Hello h = DEVQ__HELLO__INIT;
	h.min_version = DEVQ_PROTOCOL_MIN;
	h.max_version = DEVQ_PROTOCOL_MAX;
	h.client_name = "raw";
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
	m.hello = &h;
	raw_send(r, &m);
	Devq__DaemonMessage *rep = raw_expect(r, DEVQ__DAEMON_MESSAGE__BODY_HELLO_REPLY);
	ck_assert_uint_eq(rep->hello_reply->version, 1);
	devq__daemon_message__free_unpacked(rep, NULL);
}

void raw_get_status(struct raw *r)
{
	Devq__GetStatus gs = DEVQ__GET_STATUS__INIT;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS;
	m.get_status = &gs;
	raw_send(r, &m);
}

/* A usable connection answers a status request. */
void raw_expect_alive(struct raw *r)
{
	raw_get_status(r);
	devq__daemon_message__free_unpacked(raw_expect(r, DEVQ__DAEMON_MESSAGE__BODY_STATUS),
					    NULL);
}

/* Waits for the completion of (queue, point), skipping other completions;
 * returns its code and copies its message. */
int raw_completion(struct raw *r, uint32_t queue, uint64_t point, char *msg, size_t n)
{
	uint64_t deadline = harness_now_ns() + (uint64_t)WAIT_MS * 1000000u;
	for (;;) {
		uint64_t now = harness_now_ns();
		ck_assert_msg(now < deadline, "no completion of queue %u point %llu", queue,
			      (unsigned long long)point);
		Devq__DaemonMessage *m;
		enum raw_result res = raw_next(r, (int)((deadline - now) / 1000000u) + 1, &m);
		ck_assert_msg(res == RAW_MSG, "no completion of queue %u point %llu (%s)", queue,
			      (unsigned long long)point, res == RAW_EOF ? "closed" : "timed out");
		ck_assert_msg(m->body_case != DEVQ__DAEMON_MESSAGE__BODY_ERROR, "error: %s",
			      m->error->message);
		int code = -1;
		if (m->body_case == DEVQ__DAEMON_MESSAGE__BODY_COMPLETIONS) {
			for (size_t i = 0; i < m->completions->n_items; i++) {
				const Devq__Completion *c = m->completions->items[i];
				if (c->queue == queue && c->point == point) {
					code = c->code;
					snprintf(msg, n, "%s", c->message);
				}
			}
		}
		devq__daemon_message__free_unpacked(m, NULL);
		if (code >= 0)
			return code;
	}
}

void raw_submit_op(struct raw *r, Devq__Op *op)
{
	Devq__Op *ops[1] = { op };
	Devq__Submit sub = DEVQ__SUBMIT__INIT;
	sub.n_ops = 1;
	sub.ops = ops;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_SUBMIT;
	m.submit = &sub;
	raw_send(r, &m);
}

void raw_expect_completion(struct raw *r, uint32_t queue, uint64_t point, int code,
				  const char *s1, const char *s2)
{
	char msg[256];
	int got = raw_completion(r, queue, point, msg, sizeof(msg));
	ck_assert_msg(got == code, "queue %u point %llu: %s (%s), want %s", queue,
		      (unsigned long long)point, devq_code_name(got), msg, devq_code_name(code));
	ck_assert_msg(!s1 || strstr(msg, s1), "'%s' lacks '%s'", msg, s1);
	ck_assert_msg(!s2 || strstr(msg, s2), "'%s' lacks '%s'", msg, s2);
}

void raw_open_queue(struct raw *r, uint32_t id)
{
	Devq__OpenQueue oq = DEVQ__OPEN_QUEUE__INIT;
	oq.id = id;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_OPEN_QUEUE;
	m.open_queue = &oq;
	raw_send(r, &m);
}

void raw_reset_queue(struct raw *r, uint32_t id)
{
	Devq__ResetQueue rq = DEVQ__RESET_QUEUE__INIT;
	rq.id = id;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_RESET_QUEUE;
	m.reset_queue = &rq;
	raw_send(r, &m);
}

void raw_create(struct raw *r, uint64_t id, uint64_t size, int kind)
{
	Devq__CreateBuffer cb = DEVQ__CREATE_BUFFER__INIT;
	cb.id = id;
	cb.size = size;
	cb.kind = (Devq__BufferKind)kind;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_CREATE_BUFFER;
	m.create_buffer = &cb;
	raw_send(r, &m);
}

void raw_import(struct raw *r, uint64_t id, uint64_t size, const int *fds, unsigned nfds)
{
	Devq__ImportBuffer im = DEVQ__IMPORT_BUFFER__INIT;
	im.id = id;
	im.size = size;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_IMPORT_BUFFER;
	m.import_buffer = &im;
	raw_send_fds(r, &m, fds, nfds);
}

/* ---- many requests in one write ---------------------------------------- */

void rawbuf_msg(struct rawbuf *b, const Devq__ClientMessage *m)
{
	size_t len = devq__client_message__get_packed_size(m);
	if (b->len + DEVQ_FRAME_HDR + len > b->cap) {
		size_t cap = b->cap ? b->cap : 4096;
		while (cap < b->len + DEVQ_FRAME_HDR + len)
			cap *= 2;
		b->p = realloc(b->p, cap);
		ck_assert_ptr_nonnull(b->p);
		b->cap = cap;
	}
	header(b->p + b->len, (uint32_t)len, DEVQ_FRAME_CLIENT, 0);
	devq__client_message__pack(m, b->p + b->len + DEVQ_FRAME_HDR);
	b->len += DEVQ_FRAME_HDR + len;
}

void rawbuf_fill(struct rawbuf *b, uint32_t queue, uint64_t buf, uint64_t size,
		 uint32_t pattern, const uint64_t *waits, size_t nwaits)
{
	Devq__BufferArg dst = DEVQ__BUFFER_ARG__INIT;
	dst.id = buf;
	Devq__FillOp fill = DEVQ__FILL_OP__INIT;
	fill.dst = &dst;
	fill.size = size;
	fill.pattern = pattern;
	Devq__Op op = DEVQ__OP__INIT;
	op.queue = queue;
	op.body_case = DEVQ__OP__BODY_FILL;
	op.fill = &fill;
	Devq__Wait *w = NULL, **wp = NULL;
	if (nwaits) {
		w = calloc(nwaits, sizeof(*w));
		wp = calloc(nwaits, sizeof(*wp));
		ck_assert(w && wp);
		for (size_t i = 0; i < nwaits; i++) {
			devq__wait__init(&w[i]);
			w[i].queue = (uint32_t)waits[2 * i];
			w[i].point = waits[2 * i + 1];
			wp[i] = &w[i];
		}
		op.n_waits = nwaits;
		op.waits = wp;
	}
	Devq__Op *ops[1] = { &op };
	Devq__Submit sub = DEVQ__SUBMIT__INIT;
	sub.n_ops = 1;
	sub.ops = ops;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_SUBMIT;
	m.submit = &sub;
	rawbuf_msg(b, &m);
	free(w);
	free(wp);
}

void rawbuf_reset_queue(struct rawbuf *b, uint32_t queue)
{
	Devq__ResetQueue rq = DEVQ__RESET_QUEUE__INIT;
	rq.id = queue;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_RESET_QUEUE;
	m.reset_queue = &rq;
	rawbuf_msg(b, &m);
}

void rawbuf_trace(struct rawbuf *b, bool all)
{
	Devq__TraceRequest tr = DEVQ__TRACE_REQUEST__INIT;
	tr.all = all;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_TRACE_REQUEST;
	m.trace_request = &tr;
	rawbuf_msg(b, &m);
}

void rawbuf_status(struct rawbuf *b)
{
	Devq__GetStatus gs = DEVQ__GET_STATUS__INIT;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS;
	m.get_status = &gs;
	rawbuf_msg(b, &m);
}

void rawbuf_send(struct raw *r, struct rawbuf *b)
{
	raw_write(r, b->p, b->len);
	b->len = 0;
}

void rawbuf_free(struct rawbuf *b)
{
	free(b->p);
	*b = (struct rawbuf){ 0 };
}

/* ---- what the daemon holds --------------------------------------------- */

void proc_usage(pid_t pid, struct proc_usage *u)
{
	char path[64], line[512];
	*u = (struct proc_usage){ .fds = harness_fd_count(pid), .rss_kb = -1, .threads = -1 };
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "VmRSS: %ld kB", &u->rss_kb);
		sscanf(line, "RssShmem: %ld kB", &u->shmem_kb);
		sscanf(line, "Threads: %ld", &u->threads);
	}
	fclose(f);
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	unsigned long long lo, hi, total = 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx-%llx", &lo, &hi) == 2) {
			total += hi - lo;
			u->nmaps++;
		}
		/* The rest of a long line (a path) is not a new mapping. */
		while (!strchr(line, '\n') && fgets(line, sizeof(line), f))
			;
	}
	fclose(f);
	u->maps_kb = (long)(total >> 10);
	ck_assert_int_ge(u->rss_kb, 0);
}

long hugepages_free(void)
{
	FILE *f = fopen("/proc/meminfo", "r");
	ck_assert_ptr_nonnull(f);
	char line[256];
	long total = 0, free_ = -1;
	while (fgets(line, sizeof(line), f)) {
		sscanf(line, "HugePages_Total: %ld", &total);
		sscanf(line, "HugePages_Free: %ld", &free_);
	}
	fclose(f);
	return total > 0 ? free_ : -1;
}
