/* SPDX-License-Identifier: Apache-2.0 */
/* The submit ring (proto/cpage_layout.h), against a real devqd: libdevq's
 * submits go through it when nothing waits on the socket, and a client
 * without it, or a daemon without it, works as before; its entries keep
 * their order against the socket's frames both ways; and a client that
 * breaks its rules (by hand, as a hostile local user could) gets a
 * protocol error that says which, while the daemon goes on serving
 * others.  No timed assertions. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cpage_layout.h"
#include "hostile.h"

/* A raw connection with its submit ring mapped, and the bytes it wrote to
 * the socket (the offset an entry written now carries). */
struct sq_conn {
	struct raw r;
	uint64_t sent;
	void *hint;
	size_t hint_len;
	struct devq_sq_hdr *sq;
	struct devq_sqe *sqe;
	uint32_t n;
	uint64_t tail;
	int bell;
};

static void start(struct daemon_proc *d, const char *entries)
{
	if (entries)
		setenv("DEVQD_SQ_ENTRIES", entries, 1);
	harness_start(d, NULL);
	unsetenv("DEVQD_SQ_ENTRIES");
}

/* Sends m as one frame and counts its bytes. */
static void sq_send(struct sq_conn *c, const Devq__ClientMessage *m)
{
	c->sent += DEVQ_FRAME_HDR + devq__client_message__get_packed_size(m);
	raw_send(&c->r, m);
}

/* Connects, says Hello with the completion page and the submit ring, and
 * maps the ring from the reply's fds. */
static void sq_open(struct sq_conn *c, const struct daemon_proc *d)
{
	memset(c, 0, sizeof(*c));
	raw_open(&c->r, d);
	Devq__Hello h = DEVQ__HELLO__INIT;
	h.min_version = DEVQ_PROTOCOL_MIN;
	h.max_version = DEVQ_PROTOCOL_MAX;
	h.client_name = "sring";
	h.completion_page = true;
	h.submit_ring = true;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
	m.hello = &h;
	sq_send(c, &m);
	struct devq_frame f;
	uint64_t deadline = harness_now_ns() + (uint64_t)HOSTILE_WAIT_MS * 1000000u;
	while (devq_rx_next(&c->r.rx, &f) != 1) {
		ck_assert(harness_now_ns() < deadline);
		struct pollfd p = { .fd = c->r.fd, .events = POLLIN };
		ck_assert_int_ge(poll(&p, 1, 100), 0);
		ssize_t got = devq_rx_recv(&c->r.rx, c->r.fd, MSG_DONTWAIT);
		ck_assert(got > 0 || got == -EAGAIN);
	}
	Devq__DaemonMessage *rep = devq__daemon_message__unpack(NULL, f.len, f.payload);
	ck_assert_ptr_nonnull(rep);
	ck_assert_int_eq(rep->body_case, DEVQ__DAEMON_MESSAGE__BODY_HELLO_REPLY);
	const Devq__CompletionPage *pg = rep->hello_reply->completion_page;
	ck_assert_ptr_nonnull(pg);
	c->n = pg->sq_entries;
	ck_assert_uint_eq(f.nfds, c->n ? 4 : 3);
	c->hint_len = pg->hint_size;
	c->hint = mmap(NULL, c->hint_len, PROT_READ | PROT_WRITE, MAP_SHARED, f.fds[1], 0);
	ck_assert(c->hint != MAP_FAILED);
	c->sq = devq_sq_hdr(c->hint);
	c->sqe = devq_sq_entries(c->hint);
	c->bell = c->n ? f.fds[3] : -1;
	if (c->n)
		f.fds[3] = -1;
	devq_frame_close_fds(&f);
	devq__daemon_message__free_unpacked(rep, NULL);
}

static void sq_close(struct sq_conn *c)
{
	raw_close(&c->r);
	ck_assert_int_eq(munmap(c->hint, c->hint_len), 0);
	if (c->bell >= 0)
		ck_assert_int_eq(close(c->bell), 0);
}

/* Writes an entry of len bytes of msg at the given socket offset, then
 * publishes it; ring: and writes the doorbell. */
static void sq_put_at(struct sq_conn *c, const void *msg, uint32_t len, uint64_t off, bool ring)
{
	struct devq_sqe *e = &c->sqe[c->tail % c->n];
	e->len = len;
	e->off = off;
	memcpy(e->frame, msg, len < DEVQ_SQE_FRAME ? len : DEVQ_SQE_FRAME);
	atomic_store(&c->sq->tail, ++c->tail);
	if (ring) {
		char one = 1;
		ck_assert_int_eq(write(c->bell, &one, 1), 1);
	}
}

/* The payload of a Submit of one fill op of buffer 1 on queue, padded
 * with an unknown field (skipped by the daemon) to exactly pad_to bytes
 * when pad_to is not 0. */
static size_t fill_msg(uint8_t *out, size_t cap, uint32_t queue, size_t pad_to)
{
	struct rawbuf b = { 0 };
	rawbuf_fill(&b, queue, 1, 64, 0x5a5a5a5a, NULL, 0);
	size_t n = b.len - DEVQ_FRAME_HDR;
	ck_assert_uint_le(n, cap);
	memcpy(out, b.p + DEVQ_FRAME_HDR, n);
	rawbuf_free(&b);
	if (pad_to) {
		/* Field 1000, length-delimited: tag 0xc2 0x3e, then the
		 * length as a varint of one or two bytes. */
		ck_assert_uint_ge(pad_to, n + 3);
		ck_assert_uint_le(pad_to, cap);
		size_t h = pad_to - n - 3 <= 127 ? 3 : 4, len = pad_to - n - h;
		ck_assert_uint_le(len, 16383);
		out[n] = 0xc2;
		out[n + 1] = 0x3e;
		if (h == 3) {
			out[n + 2] = (uint8_t)len;
		} else {
			out[n + 2] = (uint8_t)(0x80 | (len & 0x7f));
			out[n + 3] = (uint8_t)(len >> 7);
		}
		memset(out + n + h, 0, len);
		n = pad_to;
	}
	return n;
}

/* Buffer 1 (64 bytes, shared), through the socket. */
static void sq_buffer(struct sq_conn *c)
{
	Devq__CreateBuffer cb = DEVQ__CREATE_BUFFER__INIT;
	cb.id = 1;
	cb.size = 64;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_CREATE_BUFFER;
	m.create_buffer = &cb;
	sq_send(c, &m);
	devq__daemon_message__free_unpacked(raw_expect(&c->r, DEVQ__DAEMON_MESSAGE__BODY_BUFFER_READY),
					    NULL);
}

/* An OpenQueue of queue 1 (not sent). */
static void open_queue_msg(Devq__ClientMessage *m, Devq__OpenQueue *oq)
{
	devq__open_queue__init(oq);
	oq->id = 1;
	devq__client_message__init(m);
	m->body_case = DEVQ__CLIENT_MESSAGE__BODY_OPEN_QUEUE;
	m->open_queue = oq;
}

/* Buffer 1 and queue 1, through the socket. */
static void sq_setup(struct sq_conn *c)
{
	sq_buffer(c);
	Devq__OpenQueue oq;
	Devq__ClientMessage mq;
	open_queue_msg(&mq, &oq);
	sq_send(c, &mq);
}

/* Another user of the daemon is still served. */
static void others_served(const struct daemon_proc *d)
{
	struct raw o;
	raw_open(&o, d);
	raw_hello(&o);
	raw_expect_alive(&o);
	raw_close(&o);
}

/* A Submit through the ring runs, in order after the socket's frames
 * before it; an entry of exactly DEVQ_SQE_FRAME bytes is taken whole. */
START_TEST(ring_submit_runs)
{
	struct daemon_proc d;
	start(&d, "4");
	struct sq_conn c;
	sq_open(&c, &d);
	ck_assert_uint_eq(c.n, 4);
	sq_setup(&c);
	uint8_t msg[DEVQ_SQE_FRAME];
	size_t n = fill_msg(msg, sizeof(msg), 1, 0);
	sq_put_at(&c, msg, (uint32_t)n, c.sent, true);
	raw_expect_completion(&c.r, 1, 1, DEVQ_OK, NULL, NULL);
	n = fill_msg(msg, sizeof(msg), 1, DEVQ_SQE_FRAME);
	ck_assert_uint_eq(n, DEVQ_SQE_FRAME);
	sq_put_at(&c, msg, (uint32_t)n, c.sent, true);
	raw_expect_completion(&c.r, 1, 2, DEVQ_OK, NULL, NULL);
	/* The ring full (4 entries past the head), rung once: all run. */
	n = fill_msg(msg, sizeof(msg), 1, 0);
	for (int i = 0; i < 4; i++)
		sq_put_at(&c, msg, (uint32_t)n, c.sent, i == 3);
	/* Points are the daemon's count of ops taken: a point 6 means all
	 * four were (their completions may come in one message). */
	raw_expect_completion(&c.r, 1, 6, DEVQ_OK, NULL, NULL);
	raw_expect_alive(&c.r);
	sq_close(&c);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* An entry waits for the socket frames written before it: here the
 * OpenQueue of its queue arrives in two halves, the entry rung between
 * them.  Taken before them, its op would find no queue 1. */
START_TEST(ring_waits_for_socket_frames_before_it)
{
	struct daemon_proc d;
	start(&d, NULL);
	struct sq_conn c;
	sq_open(&c, &d);
	ck_assert_uint_eq(c.n, DEVQ_SQ_DEFAULT);
	sq_buffer(&c);
	Devq__OpenQueue oq;
	Devq__ClientMessage mq;
	open_queue_msg(&mq, &oq);
	struct rawbuf b = { 0 };
	rawbuf_msg(&b, &mq);
	raw_write(&c.r, b.p, 3); /* a partial header */
	uint8_t msg[DEVQ_SQE_FRAME];
	size_t n = fill_msg(msg, sizeof(msg), 1, 0);
	sq_put_at(&c, msg, (uint32_t)n, c.sent + b.len, true);
	/* The entry waits: nothing comes meanwhile (an op taken now would
	 * complete with an error at once). */
	Devq__DaemonMessage *none = NULL;
	ck_assert_int_eq(raw_next(&c.r, 200, &none), RAW_TIMEOUT);
	raw_write(&c.r, b.p + 3, b.len - 3);
	c.sent += b.len;
	rawbuf_free(&b);
	raw_expect_completion(&c.r, 1, 1, DEVQ_OK, NULL, NULL);
	raw_expect_alive(&c.r);
	sq_close(&c);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* An entry goes before the socket frames written after it, rung or not:
 * here a non-Submit entry, then a status request on the socket, and the
 * daemon's answer is the entry's protocol error, not the status. */
START_TEST(ring_goes_before_later_socket_frames)
{
	struct daemon_proc d;
	start(&d, NULL);
	struct sq_conn c;
	sq_open(&c, &d);
	Devq__GetStatus gs = DEVQ__GET_STATUS__INIT;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS;
	m.get_status = &gs;
	uint8_t msg[64];
	size_t n = devq__client_message__pack(&m, msg);
	sq_put_at(&c, msg, (uint32_t)n, c.sent, false);
	raw_get_status(&c.r);
	raw_expect_error(&c.r, DEVQ__CODE__PROTOCOL_ERROR, "submit ring carries only Submit", NULL);
	raw_expect_closed(&c.r);
	others_served(&d);
	sq_close(&c);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* One past each of the ring's bounds: a protocol error that says which,
 * the session closed, everyone else served. */
START_TEST(ring_bounds_one_past)
{
	struct daemon_proc d;
	start(&d, "4");
	uint8_t msg[DEVQ_SQE_FRAME + 1];
	/* An entry one byte longer than an entry holds. */
	struct sq_conn c;
	sq_open(&c, &d);
	sq_setup(&c);
	sq_put_at(&c, msg, DEVQ_SQE_FRAME + 1, c.sent, true);
	raw_expect_error(&c.r, DEVQ__CODE__PROTOCOL_ERROR, "entry 0 of 241 bytes", "above the 240");
	raw_expect_closed(&c.r);
	sq_close(&c);
	others_served(&d);
	/* A tail 5 entries past the head of a 4-entry ring. */
	sq_open(&c, &d);
	sq_setup(&c);
	size_t n = fill_msg(msg, sizeof(msg), 1, 0);
	for (int i = 0; i < 5; i++)
		sq_put_at(&c, msg, (uint32_t)n, c.sent, i == 4);
	raw_expect_error(&c.r, DEVQ__CODE__PROTOCOL_ERROR, "tail 5 is more than its 4 entries", NULL);
	raw_expect_closed(&c.r);
	sq_close(&c);
	others_served(&d);
	/* An offset below the previous entry's. */
	sq_open(&c, &d);
	sq_setup(&c);
	sq_put_at(&c, msg, (uint32_t)n, c.sent, false);
	sq_put_at(&c, msg, (uint32_t)n, c.sent - 1, true);
	raw_expect_error_later(&c.r, DEVQ__CODE__PROTOCOL_ERROR, "before the previous entry's");
	raw_expect_closed(&c.r);
	sq_close(&c);
	others_served(&d);
	/* Garbage of a valid length: malformed, as on the socket. */
	sq_open(&c, &d);
	memset(msg, 0xff, sizeof(msg));
	sq_put_at(&c, msg, 16, c.sent, true);
	raw_expect_error(&c.r, DEVQ__CODE__PROTOCOL_ERROR, "malformed ClientMessage", NULL);
	raw_expect_closed(&c.r);
	sq_close(&c);
	others_served(&d);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* The doorbell is the write end of a pipe: a client that makes its end
 * blocking and fills the pipe changes nothing on devqd's end, which reads
 * it a little at a time while it serves everyone, this client included. */
START_TEST(doorbell_abuse_harmless)
{
	struct daemon_proc d;
	start(&d, "4");
	struct sq_conn c;
	sq_open(&c, &d);
	sq_setup(&c);
	ck_assert_int_eq(fcntl(c.bell, F_SETFL, 0), 0);
	static char junk[60000];
	memset(junk, 0xa5, sizeof(junk));
	ck_assert_int_eq(write(c.bell, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	others_served(&d);
	uint8_t msg[DEVQ_SQE_FRAME];
	size_t n = fill_msg(msg, sizeof(msg), 1, 0);
	sq_put_at(&c, msg, (uint32_t)n, c.sent, true);
	raw_expect_completion(&c.r, 1, 1, DEVQ_OK, NULL, NULL);
	raw_expect_alive(&c.r);
	sq_close(&c);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A client that closes its end of the doorbell: devqd stops polling it
 * (its read end would read as ready for ever: a busy loop), and the
 * session goes on, its entries taken as its socket frames arrive. */
START_TEST(doorbell_closed_by_client)
{
	struct daemon_proc d;
	start(&d, "4");
	struct sq_conn c;
	sq_open(&c, &d);
	sq_setup(&c);
	ck_assert_int_eq(close(c.bell), 0);
	c.bell = -1;
	usleep(200000);
	long t0 = harness_cpu_ticks(d.pid);
	usleep(1000000);
	long used = harness_cpu_ticks(d.pid) - t0, hz = sysconf(_SC_CLK_TCK);
	ck_assert_msg(used * 4 < hz, "devqd spins on a closed doorbell: %ld of %ld ticks", used, hz);
	uint8_t msg[DEVQ_SQE_FRAME];
	size_t n = fill_msg(msg, sizeof(msg), 1, 0);
	sq_put_at(&c, msg, (uint32_t)n, c.sent, false);
	raw_get_status(&c.r); /* a socket frame after it: the entry goes first */
	raw_expect_completion(&c.r, 1, 1, DEVQ_OK, NULL, NULL);
	others_served(&d);
	sq_close(&c);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A submit whose doorbell's read end is gone (devqd exited) is an error,
 * not a SIGPIPE that kills the program. */
START_TEST(doorbell_after_daemon_exit)
{
	struct daemon_proc d;
	start(&d, NULL);
	devq *q = conn(d.sock, "sring");
	const struct devq_exec *e = exe(q, "spin");
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_arg ns = a_u64("ns", 0);
	struct devq_op o = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = e, .args = &ns, .nargs = 1 };
	uint64_t pt;
	struct devq_completion c;
	ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
	ck_assert_int_eq(devq_wait(q, 1, pt, 60000, &c), 0);
	ck_assert_int_eq(harness_stop(&d), 0);
	ck_assert_int_ne(devq_submit(q, &o, 1, &pt), 0);
	ck_assert_msg(strstr(devq_last_error(q), "doorbell"), "%s", devq_last_error(q));
	devq_disconnect(q);
}
END_TEST

/* libdevq: sporadic submits go through the ring (no write to the socket),
 * unless DEVQ_NO_SQ=1 or the daemon has none (DEVQD_SQ_ENTRIES=0); and
 * many submits through a ring of two entries, some of them on the socket
 * when it is full, all complete, in order. */
START_TEST(libdevq_uses_ring)
{
	static const struct {
		const char *daemon, *no_sq;
		bool ring;
	} cases[] = { { "2", NULL, true }, { "2", "1", false }, { "0", NULL, false } };
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct daemon_proc d;
		start(&d, cases[k].daemon);
		if (cases[k].no_sq)
			setenv("DEVQ_NO_SQ", cases[k].no_sq, 1);
		devq *q = conn(d.sock, "sring");
		unsetenv("DEVQ_NO_SQ");
		ck_assert(devq_has_completion_page(q));
		const struct devq_exec *e = exe(q, "spin");
		ck_assert_int_eq(devq_queue_open(q, 1), 0);
		struct devq_arg ns = a_u64("ns", 0);
		struct devq_op o = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = e, .args = &ns,
				     .nargs = 1 };
		uint64_t pt;
		struct devq_completion c;
		ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
		ck_assert_int_eq(devq_wait(q, 1, pt, 60000, &c), 0);
		struct devq_io_stats s0, s1;
		devq_get_io_stats(q, &s0);
		for (int i = 0; i < 20; i++) {
			ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
			ck_assert_int_eq(devq_wait(q, 1, pt, 60000, &c), 0);
			ck_assert_int_eq(c.code, DEVQ_OK);
			ck_assert_uint_eq(c.point, pt);
		}
		devq_get_io_stats(q, &s1);
		if (cases[k].ring)
			ck_assert_uint_eq(s1.flushes, s0.flushes);
		else
			ck_assert_uint_eq(s1.flushes, s0.flushes + 20);
		/* 500 submits without waiting: the ring fills and the rest
		 * take the socket; every point completes, in order. */
		uint64_t first = pt + 1;
		for (int i = 0; i < 500; i++)
			ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
		ck_assert_uint_eq(pt, first + 499);
		for (uint64_t p = first; p <= pt; p++) {
			ck_assert_int_eq(devq_wait(q, 1, p, 60000, &c), 0);
			ck_assert_int_eq(c.code, DEVQ_OK);
			ck_assert_uint_eq(c.point, p);
		}
		devq_disconnect(q);
		ck_assert_int_eq(harness_stop(&d), 0);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sring");
	TCase *tc = tcase_create("ring");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, ring_submit_runs);
	tcase_add_test(tc, ring_waits_for_socket_frames_before_it);
	tcase_add_test(tc, ring_goes_before_later_socket_frames);
	tcase_add_test(tc, ring_bounds_one_past);
	tcase_add_test(tc, doorbell_abuse_harmless);
	tcase_add_test(tc, doorbell_closed_by_client);
	tcase_add_test(tc, doorbell_after_daemon_exit);
	tcase_add_test(tc, libdevq_uses_ring);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
