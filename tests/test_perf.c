/* SPDX-License-Identifier: Apache-2.0 */
/* The completion page and the submission fast paths, against a real devqd:
 * what the page promises (sealed, points and failure state right, futex and
 * eventfd wake-ups, no socket traffic to check a completed point), that a
 * client scribbling on its hint page cannot hurt the daemon, and that
 * coalesced and replayable submissions keep every op's semantics.  No timed
 * assertions: speed is measured in bench/. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cpage_layout.h"
#include "devq.pb-c.h"
#include "frame.h"
#include "harness.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

static struct devq_op spin_op(const struct devq_exec *e, const struct devq_arg *a, uint32_t queue)
{
	return (struct devq_op){ .queue = queue, .kind = DEVQ_OP_KERNEL, .exec = e, .args = a,
				 .nargs = 1 };
}

/* One op through the queue with its record: afterwards the daemon has
 * surely opened the queue's page slot (the first wait after OpenQueue may
 * still go through the socket while it has not). */
static void warm_up(devq *q, const struct devq_exec *e, uint32_t queue)
{
	struct devq_arg ns = a_u64("ns", 0);
	struct devq_op o = spin_op(e, &ns, queue);
	uint64_t pt;
	struct devq_completion c;
	ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
	ck_assert_int_eq(devq_wait(q, queue, pt, 60000, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_OK);
}

/* ---- a raw client, to see the fds and pages as the wire gives them ---- */

struct raw {
	int fd;
	struct devq_rx rx;
	struct devq_tx tx;
};

static void raw_connect(struct raw *r, const char *sock)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(r->fd, 0);
	ck_assert_int_eq(connect(r->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	devq_rx_init(&r->rx, 1u << 20);
	devq_tx_init(&r->tx);
}

static void raw_send(struct raw *r, Devq__ClientMessage *m)
{
	ck_assert_int_eq(devq_tx_push(&r->tx, DEVQ_FRAME_CLIENT, &m->base, NULL, 0), 0);
	ck_assert_int_eq(devq_tx_flush(&r->tx, r->fd), 0);
}

/* Next daemon message; its fds go to fds (up to 3). */
static Devq__DaemonMessage *raw_recv(struct raw *r, int *fds, unsigned *nfds)
{
	struct devq_frame f;
	int k;
	while ((k = devq_rx_next(&r->rx, &f)) == 0)
		ck_assert_int_gt(devq_rx_recv(&r->rx, r->fd, 0), 0);
	ck_assert_int_eq(k, 1);
	Devq__DaemonMessage *m = devq__daemon_message__unpack(NULL, f.len, f.payload);
	ck_assert_ptr_nonnull(m);
	if (nfds) {
		*nfds = f.nfds;
		for (unsigned i = 0; i < f.nfds && i < 3; i++) {
			fds[i] = f.fds[i];
			f.fds[i] = -1;
		}
	}
	devq_frame_close_fds(&f);
	return m;
}

static void raw_close(struct raw *r)
{
	close(r->fd);
	devq_rx_fini(&r->rx);
	devq_tx_fini(&r->tx);
}

/* Hello asking for the page; returns the HelloReply's page description. */
static void raw_hello(struct raw *r, int fds[3], uint32_t *size, uint32_t *hint_size)
{
	Devq__Hello h = DEVQ__HELLO__INIT;
	h.min_version = 1;
	h.max_version = 1;
	h.client_name = "raw";
	h.completion_page = true;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
	m.hello = &h;
	raw_send(r, &m);
	unsigned n = 0;
	Devq__DaemonMessage *rep = raw_recv(r, fds, &n);
	ck_assert_int_eq(rep->body_case, DEVQ__DAEMON_MESSAGE__BODY_HELLO_REPLY);
	ck_assert_ptr_nonnull(rep->hello_reply->completion_page);
	ck_assert_uint_eq(rep->hello_reply->completion_page->layout, DEVQ_CPAGE_LAYOUT);
	ck_assert_uint_eq(n, 3);
	*size = rep->hello_reply->completion_page->size;
	*hint_size = rep->hello_reply->completion_page->hint_size;
	devq__daemon_message__free_unpacked(rep, NULL);
}

START_TEST(page_is_sealed_read_only)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	struct raw r;
	raw_connect(&r, d.sock);
	int fds[3];
	uint32_t size, hsize;
	raw_hello(&r, fds, &size, &hsize);

	int seals = fcntl(fds[0], F_GET_SEALS);
	ck_assert_int_ge(seals, 0);
	ck_assert_msg(seals & F_SEAL_FUTURE_WRITE, "published page seals 0x%x", seals);
	ck_assert(seals & F_SEAL_SHRINK && seals & F_SEAL_GROW && seals & F_SEAL_SEAL);
	/* No way to write it: a writable mapping, write(2), mprotect. */
	ck_assert_ptr_eq(mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0),
			 MAP_FAILED);
	ck_assert_int_eq(errno, EPERM);
	char z = 0;
	ck_assert_int_lt(pwrite(fds[0], &z, 1, 0), 0);
	ck_assert_int_eq(errno, EPERM);
	void *p = mmap(NULL, size, PROT_READ, MAP_SHARED, fds[0], 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	ck_assert_int_lt(mprotect(p, size, PROT_READ | PROT_WRITE), 0);
	const struct devq_cpage_hdr *h = p;
	ck_assert_uint_eq(h->magic, DEVQ_CPAGE_MAGIC);
	ck_assert_uint_eq(h->layout, DEVQ_CPAGE_LAYOUT);
	ck_assert_uint_ge(size, sizeof(*h) + (size_t)h->nslots * sizeof(struct devq_cpage_slot));
	/* The hint page is the client's to write. */
	void *hp = mmap(NULL, hsize, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	ck_assert_ptr_ne(hp, MAP_FAILED);
	/* The third fd is an eventfd. */
	char link[64], path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[2]);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	ck_assert_int_gt(n, 0);
	link[n] = '\0';
	ck_assert_msg(strstr(link, "eventfd"), "third fd is %s", link);
	munmap(p, size);
	munmap(hp, hsize);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	raw_close(&r);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A client that writes garbage into its hint page (and lies about sleeping)
 * still gets its completions, and the daemon serves everyone else. */
START_TEST(hostile_hints_harmless)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "bystander");
	const struct devq_exec *e = exe(q, "spin");
	struct raw r;
	raw_connect(&r, d.sock);
	int fds[3];
	uint32_t size, hsize;
	raw_hello(&r, fds, &size, &hsize);
	const struct devq_cpage_hdr *h = mmap(NULL, size, PROT_READ, MAP_SHARED, fds[0], 0);
	unsigned char *hp = mmap(NULL, hsize, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1], 0);
	ck_assert_ptr_ne(h, MAP_FAILED);
	ck_assert_ptr_ne(hp, MAP_FAILED);
	memset(hp, 0xff, hsize);

	Devq__OpenQueue oq = DEVQ__OPEN_QUEUE__INIT;
	oq.id = 7;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_OPEN_QUEUE;
	m.open_queue = &oq;
	raw_send(&r, &m);
	Devq__Arg a = DEVQ__ARG__INIT;
	a.name = "ns";
	a.value_case = DEVQ__ARG__VALUE_U64;
	a.u64 = 0;
	Devq__Arg *ap = &a;
	Devq__KernelOp k = DEVQ__KERNEL_OP__INIT;
	k.executable = e->id;
	k.n_args = 1;
	k.args = &ap;
	Devq__Op op = DEVQ__OP__INIT;
	op.queue = 7;
	op.body_case = DEVQ__OP__BODY_KERNEL;
	op.kernel = &k;
	Devq__Op *ops[3] = { &op, &op, &op };
	Devq__Submit sub = DEVQ__SUBMIT__INIT;
	sub.n_ops = 3;
	sub.ops = ops;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_SUBMIT;
	m.submit = &sub;
	raw_send(&r, &m);
	unsigned got = 0;
	while (got < 3) {
		Devq__DaemonMessage *x = raw_recv(&r, NULL, NULL);
		ck_assert_int_eq(x->body_case, DEVQ__DAEMON_MESSAGE__BODY_COMPLETIONS);
		for (size_t i = 0; i < x->completions->n_items; i++) {
			ck_assert_int_eq(x->completions->items[i]->code, DEVQ__CODE__OK);
			ck_assert_uint_eq(x->completions->items[i]->point, ++got);
		}
		devq__daemon_message__free_unpacked(x, NULL);
	}
	const struct devq_cpage_slot *sl = devq_cpage_slots((struct devq_cpage_hdr *)h);
	ck_assert_uint_ge(h->used, 1);
	ck_assert_uint_eq(sl[0].queue, 7);
	ck_assert_uint_eq(sl[0].completed, 3);
	ck_assert_uint_eq(sl[0].failed, 0);
	/* Someone else is served as usual. */
	struct devq_arg ns = a_u64("ns", 0);
	struct devq_op o = spin_op(e, &ns, 1);
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	uint64_t pt;
	ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
	struct devq_completion c;
	ck_assert_int_eq(devq_wait(q, 1, pt, 60000, &c), 0);
	ck_assert_int_eq(c.code, DEVQ_OK);
	devq_disconnect(q);
	munmap((void *)h, size);
	munmap(hp, hsize);
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	raw_close(&r);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Waiting on a completed point through the page reads no socket: the
 * socket counters do not move, the page-hit counter does. */
START_TEST(completed_point_needs_no_socket)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "page");
	ck_assert(devq_has_completion_page(q));
	const struct devq_exec *e = exe(q, "spin");
	struct devq_arg ns = a_u64("ns", 0);
	struct devq_op ops[16];
	for (int i = 0; i < 16; i++)
		ops[i] = spin_op(e, &ns, 1);
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	warm_up(q, e, 1);
	uint64_t pts[16];
	ck_assert_int_eq(devq_submit(q, ops, 16, pts), 0);
	ck_assert_int_eq(devq_wait(q, 1, pts[15], 60000, NULL), 0);
	ck_assert_uint_ge(devq_completed(q, 1), 16);

	struct devq_io_stats s0, s1;
	devq_get_io_stats(q, &s0);
	for (int i = 0; i < 16; i++) {
		ck_assert_int_eq(devq_wait(q, 1, pts[i], 60000, NULL), 0);
		ck_assert_int_eq(devq_point_state(q, 1, pts[i]), DEVQ_POINT_OK);
		ck_assert_uint_ge(devq_completed(q, 1), pts[i]);
	}
	devq_get_io_stats(q, &s1);
	ck_assert_uint_eq(s1.recv_calls, s0.recv_calls);
	ck_assert_uint_eq(s1.flushes, s0.flushes);
	ck_assert_uint_eq(s1.futex_waits, s0.futex_waits);
	ck_assert_uint_ge(s1.page_hits, s0.page_hits + 16);

	/* The completion records still arrive, in point order, all ok. */
	for (int i = 0; i < 16; i++) {
		struct devq_completion c;
		ck_assert_int_eq(devq_next_completion(q, &c, 60000), 0);
		ck_assert_uint_eq(c.point, pts[i]);
		ck_assert_int_eq(c.code, DEVQ_OK);
		harness_check_monotonic(&c);
	}
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A point not yet complete is waited for on the page (futex or a late
 * hit), and then reads complete. */
START_TEST(wait_sleeps_on_page)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "sleeper");
	const struct devq_exec *e = exe(q, "spin");
	struct devq_arg ns = a_u64("ns", 50 * 1000 * 1000);
	struct devq_op o = spin_op(e, &ns, 1);
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	warm_up(q, e, 1);
	uint64_t pt;
	struct devq_io_stats s0, s1;
	devq_get_io_stats(q, &s0);
	ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
	ck_assert_int_eq(devq_wait(q, 1, pt, 60000, NULL), 0);
	devq_get_io_stats(q, &s1);
	ck_assert_uint_ge(s1.futex_waits + s1.page_hits, s0.futex_waits + s0.page_hits + 1);
	ck_assert_uint_eq(s1.recv_calls, s0.recv_calls); /* waited on the page only */
	ck_assert_int_eq(devq_point_state(q, 1, pt), DEVQ_POINT_OK);
	struct devq_completion c;
	ck_assert_int_eq(devq_next_completion(q, &c, 60000), 0);
	ck_assert_int_eq(c.code, DEVQ_OK);
	ck_assert_uint_ge(c.t.device_end - c.t.device_start, 50 * 1000 * 1000);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Failure state on the page: a failed point, and the points failing after
 * it, read "see the record"; after a reset, success reads ok again. */
START_TEST(page_failure_state)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "fail");
	const struct devq_exec *e = exe(q, "spin");
	struct devq_buffer *b = mkbuf(q, 64);
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	struct devq_arg ns = a_u64("ns", 0);
	struct devq_op good = spin_op(e, &ns, 1);
	struct devq_op bad = { .queue = 1, .kind = DEVQ_OP_FILL, .dst = b, .size = 3 };
	uint64_t p1, p2, p3;
	ck_assert_int_eq(devq_submit(q, &bad, 1, &p1), 0);  /* invalid_argument */
	ck_assert_int_eq(devq_submit(q, &good, 1, &p2), 0); /* inherits: dependency_failed */
	ck_assert_int_eq(devq_wait(q, 1, p2, 60000, NULL), 0);
	ck_assert_int_eq(devq_point_state(q, 1, p1), DEVQ_POINT_SEE_RECORD);
	ck_assert_int_eq(devq_point_state(q, 1, p2), DEVQ_POINT_SEE_RECORD);
	ck_assert_int_eq(devq_queue_reset(q, 1), 0);
	ck_assert_int_eq(devq_submit(q, &good, 1, &p3), 0);
	ck_assert_int_eq(devq_wait(q, 1, p3, 60000, NULL), 0);
	ck_assert_int_eq(devq_point_state(q, 1, p3), DEVQ_POINT_OK);
	/* A queue whose first point fails and nothing after it: the page
	 * marks that point, not only a later one. */
	ck_assert_int_eq(devq_queue_open(q, 2), 0);
	struct devq_op bad2 = bad;
	bad2.queue = 2;
	uint64_t p4;
	ck_assert_int_eq(devq_submit(q, &bad2, 1, &p4), 0);
	ck_assert_uint_eq(p4, 1);
	ck_assert_int_eq(devq_wait(q, 2, p4, 60000, NULL), 0);
	ck_assert_int_eq(devq_point_state(q, 2, p4), DEVQ_POINT_SEE_RECORD);
	int want[3] = { DEVQ_E_INVALID_ARGUMENT, DEVQ_E_DEPENDENCY_FAILED, DEVQ_OK };
	for (int i = 0; i < 3; i++) {
		struct devq_completion c;
		ck_assert_int_eq(devq_next_completion(q, &c, 60000), 0);
		ck_assert_uint_eq(c.point, (uint64_t)i + 1);
		ck_assert_int_eq(c.code, want[i]);
	}
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

START_TEST(eventfd_signals_completion)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "evfd");
	int efd = devq_completion_fd(q);
	ck_assert_int_ge(efd, 0);
	const struct devq_exec *e = exe(q, "spin");
	struct devq_arg ns = a_u64("ns", 1000 * 1000);
	struct devq_op o = spin_op(e, &ns, 1);
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	/* Armed once, it signals every completion after: 20 ops, each
	 * waited for on the eventfd alone. */
	for (int i = 0; i < 20; i++) {
		uint64_t pt;
		ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
		ck_assert_int_eq(devq_flush(q), 0);
		/* Poll the eventfd until the point reads complete. */
		while (devq_completed(q, 1) < pt) {
			struct pollfd p = { .fd = efd, .events = POLLIN };
			ck_assert_msg(poll(&p, 1, 20000) == 1, "op %d: the eventfd stayed silent", i);
			uint64_t v;
			ck_assert_int_eq(read(efd, &v, sizeof(v)), (ssize_t)sizeof(v));
			ck_assert_uint_ge(v, 1);
		}
		ck_assert_int_eq(devq_point_state(q, 1, pt), DEVQ_POINT_OK);
	}
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Queues beyond the page's slots complete through the socket alone. */
START_TEST(queues_beyond_slots)
{
	struct daemon_proc d;
	const char *extra[] = { "--max-queues", "1100", NULL };
	harness_start(&d, extra);
	devq *q = conn(d.sock, "many");
	const struct devq_exec *e = exe(q, "spin");
	struct devq_arg ns = a_u64("ns", 0);
	for (uint32_t i = 1; i <= 1030; i++)
		ck_assert_int_eq(devq_queue_open(q, i), 0);
	struct devq_op o1 = spin_op(e, &ns, 1), o2 = spin_op(e, &ns, 1030);
	uint64_t p1, p2;
	ck_assert_int_eq(devq_submit(q, &o1, 1, &p1), 0);
	ck_assert_int_eq(devq_submit(q, &o2, 1, &p2), 0);
	ck_assert_int_eq(devq_wait(q, 1, p1, 60000, NULL), 0);
	ck_assert_int_eq(devq_wait(q, 1030, p2, 60000, NULL), 0);
	ck_assert_uint_eq(devq_completed(q, 1030), 1);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Coalesced single-op submits and replayable batches: every op takes its
 * point and completes once, in order, whatever the wire grouping. */
START_TEST(coalesced_and_replayable_batches)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "batches");
	const struct devq_exec *e = exe(q, "spin");
	struct devq_arg ns = a_u64("ns", 0);
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	ck_assert_int_eq(devq_set_coalescing(q, 65536), 0);
	struct devq_io_stats s0, s1;
	devq_get_io_stats(q, &s0);
	struct devq_op o = spin_op(e, &ns, 1);
	uint64_t pt = 0;
	for (int i = 0; i < 200; i++)
		ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
	devq_get_io_stats(q, &s1);
	ck_assert_uint_eq(s1.flushes, s0.flushes); /* nothing written yet */
	ck_assert_int_eq(devq_wait(q, 1, pt, 60000, NULL), 0); /* flushes, then waits */
	ck_assert_uint_eq(pt, 200);
	struct devq_op batch[64];
	for (int i = 0; i < 64; i++)
		batch[i] = spin_op(e, &ns, 1);
	uint64_t pts[64];
	for (int r = 0; r < 5; r++) {
		ck_assert_int_eq(devq_submit_replayable(q, batch, 64, pts), 0);
		ck_assert_uint_eq(pts[0], 200 + (uint64_t)r * 64 + 1);
	}
	ck_assert_int_eq(devq_wait(q, 1, pts[63], 60000, NULL), 0);
	for (uint64_t i = 1; i <= 200 + 5 * 64; i++) {
		struct devq_completion c;
		ck_assert_int_eq(devq_next_completion(q, &c, 60000), 0);
		ck_assert_uint_eq(c.point, i);
		ck_assert_int_eq(c.code, DEVQ_OK);
	}
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* Without a page (DEVQ_NO_CPAGE) the same calls work through the socket. */
START_TEST(no_page_fallback)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	setenv("DEVQ_NO_CPAGE", "1", 1);
	devq *q = conn(d.sock, "plain");
	unsetenv("DEVQ_NO_CPAGE");
	ck_assert(!devq_has_completion_page(q));
	ck_assert_int_eq(devq_completion_fd(q), -EOPNOTSUPP);
	const struct devq_exec *e = exe(q, "spin");
	struct devq_arg ns = a_u64("ns", 0);
	struct devq_op o = spin_op(e, &ns, 1);
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	uint64_t pt;
	ck_assert_int_eq(devq_submit(q, &o, 1, &pt), 0);
	ck_assert_int_eq(devq_wait(q, 1, pt, 60000, NULL), 0);
	ck_assert_int_eq(devq_point_state(q, 1, pt), DEVQ_POINT_SEE_RECORD);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* The daemon's view catches up with what the page told the client before
 * it answers: status right after a page wait counts the ops. */
START_TEST(status_includes_page_completions)
{
	struct daemon_proc d;
	harness_start(&d, NULL);
	devq *q = conn(d.sock, "status");
	const struct devq_exec *e = exe(q, "spin");
	struct devq_arg ns = a_u64("ns", 0);
	struct devq_op ops[32];
	for (int i = 0; i < 32; i++)
		ops[i] = spin_op(e, &ns, 1);
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	uint64_t pts[32];
	ck_assert_int_eq(devq_submit(q, ops, 32, pts), 0);
	ck_assert_int_eq(devq_wait(q, 1, pts[31], 60000, NULL), 0);
	struct devq_status *st;
	ck_assert_int_eq(devq_get_status(q, &st), 0);
	ck_assert_uint_eq(st->ops_in_flight, 0);
	ck_assert_uint_ge(st->ops_completed, 32);
	devq_status_free(st);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

/* A client that waits only on the page still reads the completion records
 * libdevq gets on the socket meanwhile, so a small outbound quota never
 * takes it for a client that does not read. */
START_TEST(page_waiter_keeps_reading)
{
	struct daemon_proc d;
	const char *extra[] = { "--quota-outbound-kb", "64", NULL };
	harness_start(&d, extra);
	devq *q = conn(d.sock, "reader");
	const struct devq_exec *e = exe(q, "spin");
	struct devq_arg ns = a_u64("ns", 0);
	struct devq_op ops[64];
	for (int i = 0; i < 64; i++)
		ops[i] = spin_op(e, &ns, 1);
	ck_assert_int_eq(devq_queue_open(q, 1), 0);
	warm_up(q, e, 1);
	uint64_t pts[64];
	for (int b = 0; b < 200; b++) {
		ck_assert_int_eq(devq_submit(q, ops, 64, pts), 0);
		if (b % 16 == 15)
			ck_assert_int_eq(devq_wait(q, 1, pts[63], 60000, NULL), 0);
	}
	ck_assert_int_eq(devq_wait(q, 1, pts[63], 60000, NULL), 0);
	struct devq_status *st;
	ck_assert_msg(devq_get_status(q, &st) == 0, "%s", devq_last_error(q));
	devq_status_free(st);
	struct devq_error err;
	ck_assert_int_eq(devq_next_error(q, &err), 0);
	devq_disconnect(q);
	ck_assert_int_eq(harness_stop(&d), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("perf");
	TCase *tc = tcase_create("page");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, page_is_sealed_read_only);
	tcase_add_test(tc, hostile_hints_harmless);
	tcase_add_test(tc, completed_point_needs_no_socket);
	tcase_add_test(tc, wait_sleeps_on_page);
	tcase_add_test(tc, page_failure_state);
	tcase_add_test(tc, eventfd_signals_completion);
	tcase_add_test(tc, queues_beyond_slots);
	tcase_add_test(tc, coalesced_and_replayable_batches);
	tcase_add_test(tc, no_page_fallback);
	tcase_add_test(tc, status_includes_page_completions);
	tcase_add_test(tc, page_waiter_keeps_reading);
	suite_add_tcase(s, tc);
	return harness_main(s);
}
