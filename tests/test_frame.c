/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of proto/frame.c over socketpair(AF_UNIX, SOCK_STREAM): framing,
 * fd accounting across recvmsg boundaries, hostile headers, and partial
 * writes.  Raw frames are built here byte by byte from the documented header
 * layout rather than through devq_tx_push, so the receive side is checked
 * against the specification, not against its own sender. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "devq.pb-c.h"
#include "frame.h"

/* ---- helpers ---------------------------------------------------------- */

static void pair(int sv[2])
{
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static int open_fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	ck_assert_ptr_nonnull(d);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory stream's own fd */
}

static bool fd_is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0 || errno != EBADF;
}

/* A memfd of a distinctive size, so a received copy can be told apart even
 * when the original was closed. */
static int memfd_of_size(off_t size)
{
	int fd = memfd_create("test_frame", MFD_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, size), 0);
	return fd;
}

static off_t fd_size(int fd)
{
	struct stat st;
	ck_assert_int_eq(fstat(fd, &st), 0);
	return st.st_size;
}

/* Whether a and b are the same open file (a received fd is a new number). */
static bool same_file(int a, int b)
{
	struct stat sa, sb;
	ck_assert_int_eq(fstat(a, &sa), 0);
	ck_assert_int_eq(fstat(b, &sb), 0);
	return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Writes a header from the documented layout: u32 length, u16 type, u16 fd
 * count, all little endian. */
static void put_header(uint8_t *p, uint32_t len, uint16_t type, uint16_t nfds)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(len >> (8 * i));
	p[4] = (uint8_t)type;
	p[5] = (uint8_t)(type >> 8);
	p[6] = (uint8_t)nfds;
	p[7] = (uint8_t)(nfds >> 8);
}

/* A raw frame: header plus payload bytes derived from seed.  Returns its
 * length; buf must hold DEVQ_FRAME_HDR + plen bytes. */
static size_t raw_frame(uint8_t *buf, uint32_t plen, uint16_t nfds, uint8_t seed)
{
	put_header(buf, plen, DEVQ_FRAME_CLIENT, nfds);
	for (uint32_t i = 0; i < plen; i++)
		buf[DEVQ_FRAME_HDR + i] = (uint8_t)(seed + i * 7);
	return DEVQ_FRAME_HDR + plen;
}

static void check_payload(const struct devq_frame *f, uint32_t plen, uint8_t seed)
{
	ck_assert_uint_eq(f->type, DEVQ_FRAME_CLIENT);
	ck_assert_uint_eq(f->len, plen);
	for (uint32_t i = 0; i < plen; i++)
		ck_assert_uint_eq(f->payload[i], (uint8_t)(seed + i * 7));
}

/* One sendmsg: these bytes, these fds, nothing split by us. */
static void send_raw(int sock, const void *data, size_t len, const int *fds, unsigned nfds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * DEVQ_FDS_PER_MSG)];
	} ctl;
	ck_assert_uint_le(nfds, DEVQ_FDS_PER_MSG);
	struct iovec iov = { (void *)data, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfds) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	ck_assert_int_eq(sendmsg(sock, &mh, MSG_NOSIGNAL), (ssize_t)len);
}

/* ---- messages used for round trips ----------------------------------- */

#define NMSG 6
#define BIG_NAME 20000 /* larger than the rx buffer's first allocation */

/* Message k of a fixed, varied set: small, empty, nested, and one larger
 * than the receiver's initial 4 KiB buffer. */
static void push_msg(struct devq_tx *tx, int k, char *bigname)
{
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	Devq__Hello h = DEVQ__HELLO__INIT;
	Devq__CreateBuffer cb = DEVQ__CREATE_BUFFER__INIT;
	Devq__GetStatus gs = DEVQ__GET_STATUS__INIT;
	Devq__Submit sub = DEVQ__SUBMIT__INIT;
	Devq__Op op = DEVQ__OP__INIT, *ops[1] = { &op };
	Devq__KernelOp ko = DEVQ__KERNEL_OP__INIT;
	Devq__Arg a0 = DEVQ__ARG__INIT, a1 = DEVQ__ARG__INIT, *args[2] = { &a0, &a1 };
	Devq__BufferArg ba = DEVQ__BUFFER_ARG__INIT;
	Devq__Wait w = DEVQ__WAIT__INIT, *waits[1] = { &w };

	switch (k) {
	case 0:
		m.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
		m.hello = &h;
		h.min_version = 1;
		h.max_version = 3;
		h.client_name = "alpha";
		break;
	case 1:
		m.body_case = DEVQ__CLIENT_MESSAGE__BODY_CREATE_BUFFER;
		m.create_buffer = &cb;
		cb.id = 42;
		cb.size = 1ull << 40;
		cb.kind = DEVQ__BUFFER_KIND__DEVICE;
		break;
	case 2: /* no body: a zero-length payload */
		break;
	case 3:
		m.body_case = DEVQ__CLIENT_MESSAGE__BODY_SUBMIT;
		m.submit = &sub;
		sub.n_ops = 1;
		sub.ops = ops;
		op.queue = 7;
		op.client_submit_ns = 123456789;
		op.n_waits = 1;
		op.waits = waits;
		w.queue = 3;
		w.point = 99;
		op.body_case = DEVQ__OP__BODY_KERNEL;
		op.kernel = &ko;
		ko.executable = 5;
		ko.n_args = 2;
		ko.args = args;
		a0.name = "a";
		a0.value_case = DEVQ__ARG__VALUE_F32;
		a0.f32 = 2.5f;
		a1.name = "y";
		a1.value_case = DEVQ__ARG__VALUE_BUFFER;
		a1.buffer = &ba;
		ba.id = 11;
		ba.offset = 64;
		break;
	case 4:
		m.body_case = DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS;
		m.get_status = &gs;
		break;
	case 5:
		m.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
		m.hello = &h;
		h.client_name = bigname;
		break;
	}
	ck_assert_int_eq(devq_tx_push(tx, DEVQ_FRAME_CLIENT, &m.base, NULL, 0), 0);
}

static void check_msg(const struct devq_frame *f, int k, const char *bigname)
{
	ck_assert_uint_eq(f->type, DEVQ_FRAME_CLIENT);
	ck_assert_uint_eq(f->nfds, 0);
	Devq__ClientMessage *m = devq__client_message__unpack(NULL, f->len, f->payload);
	ck_assert_ptr_nonnull(m);
	switch (k) {
	case 0:
		ck_assert_int_eq(m->body_case, DEVQ__CLIENT_MESSAGE__BODY_HELLO);
		ck_assert_uint_eq(m->hello->min_version, 1);
		ck_assert_uint_eq(m->hello->max_version, 3);
		ck_assert_str_eq(m->hello->client_name, "alpha");
		break;
	case 1:
		ck_assert_int_eq(m->body_case, DEVQ__CLIENT_MESSAGE__BODY_CREATE_BUFFER);
		ck_assert_uint_eq(m->create_buffer->id, 42);
		ck_assert_uint_eq(m->create_buffer->size, 1ull << 40);
		ck_assert_int_eq(m->create_buffer->kind, DEVQ__BUFFER_KIND__DEVICE);
		break;
	case 2:
		ck_assert_uint_eq(f->len, 0);
		ck_assert_int_eq(m->body_case, DEVQ__CLIENT_MESSAGE__BODY__NOT_SET);
		break;
	case 3: {
		ck_assert_int_eq(m->body_case, DEVQ__CLIENT_MESSAGE__BODY_SUBMIT);
		ck_assert_uint_eq(m->submit->n_ops, 1);
		const Devq__Op *op = m->submit->ops[0];
		ck_assert_uint_eq(op->queue, 7);
		ck_assert_uint_eq(op->client_submit_ns, 123456789);
		ck_assert_uint_eq(op->n_waits, 1);
		ck_assert_uint_eq(op->waits[0]->queue, 3);
		ck_assert_uint_eq(op->waits[0]->point, 99);
		ck_assert_int_eq(op->body_case, DEVQ__OP__BODY_KERNEL);
		ck_assert_uint_eq(op->kernel->executable, 5);
		ck_assert_uint_eq(op->kernel->n_args, 2);
		ck_assert_str_eq(op->kernel->args[0]->name, "a");
		ck_assert_int_eq(op->kernel->args[0]->value_case, DEVQ__ARG__VALUE_F32);
		ck_assert(op->kernel->args[0]->f32 == 2.5f);
		ck_assert_str_eq(op->kernel->args[1]->name, "y");
		ck_assert_int_eq(op->kernel->args[1]->value_case, DEVQ__ARG__VALUE_BUFFER);
		ck_assert_uint_eq(op->kernel->args[1]->buffer->id, 11);
		ck_assert_uint_eq(op->kernel->args[1]->buffer->offset, 64);
		break;
	}
	case 4:
		ck_assert_int_eq(m->body_case, DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS);
		break;
	case 5:
		ck_assert_int_eq(m->body_case, DEVQ__CLIENT_MESSAGE__BODY_HELLO);
		ck_assert_str_eq(m->hello->client_name, bigname);
		break;
	}
	devq__client_message__free_unpacked(m, NULL);
}

static char *make_bigname(void)
{
	char *s = malloc(BIG_NAME + 1);
	ck_assert_ptr_nonnull(s);
	for (int i = 0; i < BIG_NAME; i++)
		s[i] = (char)('a' + i % 26);
	s[BIG_NAME] = '\0';
	return s;
}

/* ---- round trip ------------------------------------------------------- */

START_TEST(roundtrip_several_frames)
{
	int sv[2];
	pair(sv);
	char *big = make_bigname();
	struct devq_tx tx;
	struct devq_rx rx;
	devq_tx_init(&tx);
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);

	for (int k = 0; k < NMSG; k++)
		push_msg(&tx, k, big);
	ck_assert_uint_eq(tx.frames, NMSG);
	size_t total = tx.bytes;
	ck_assert_int_eq(devq_tx_flush(&tx, sv[0]), 0);
	ck_assert_uint_eq(tx.frames, 0);
	ck_assert_uint_eq(tx.bytes, 0);

	/* taken counts the stream's bytes in frames taken (the submit ring's
	 * offsets are compared with it), not bytes received. */
	int got = 0;
	ck_assert_uint_eq(rx.taken, 0);
	while (got < NMSG) {
		ssize_t n = devq_rx_recv(&rx, sv[1], MSG_DONTWAIT);
		ck_assert_msg(n > 0, "recv returned %zd after %d frames", n, got);
		struct devq_frame f;
		int r;
		uint64_t before = rx.taken;
		while ((r = devq_rx_next(&rx, &f)) == 1) {
			ck_assert_uint_eq(rx.taken, before + DEVQ_FRAME_HDR + f.len);
			before = rx.taken;
			check_msg(&f, got++, big);
		}
		ck_assert_int_eq(r, 0);
		ck_assert_uint_eq(rx.taken, before);
	}
	ck_assert_uint_eq(rx.taken, total);
	/* Nothing more: the stream ended exactly at a frame boundary. */
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), -EAGAIN);
	close(sv[0]);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], 0), 0);

	devq_rx_fini(&rx);
	devq_tx_fini(&tx);
	free(big);
	close(sv[1]);
}
END_TEST

/* fds pushed through the tx arrive with their frame, in order, and the tx
 * closes its own copies once the kernel holds them. */
START_TEST(roundtrip_fds_through_tx)
{
	int sv[2];
	pair(sv);
	struct devq_tx tx;
	struct devq_rx rx;
	devq_tx_init(&tx);
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);

	int base = open_fd_count();
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	int a[2] = { memfd_of_size(1001), memfd_of_size(1002) };
	int b[1] = { memfd_of_size(1003) };
	ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &m.base, NULL, 0), 0);
	ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &m.base, a, 2), 0);
	ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &m.base, NULL, 0), 0);
	ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &m.base, b, 1), 0);
	ck_assert_int_eq(devq_tx_flush(&tx, sv[0]), 0);
	ck_assert_int_eq(open_fd_count(), base); /* in flight: only the kernel holds them */

	static const unsigned want_nfds[4] = { 0, 2, 0, 1 };
	static const off_t want_size[4][2] = { { 0 }, { 1001, 1002 }, { 0 }, { 1003 } };
	int got = 0;
	while (got < 4) {
		ck_assert_int_gt(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), 0);
		struct devq_frame f;
		while (devq_rx_next(&rx, &f) == 1) {
			ck_assert_uint_eq(f.nfds, want_nfds[got]);
			for (unsigned i = 0; i < f.nfds; i++) {
				ck_assert_int_eq(fd_size(f.fds[i]), want_size[got][i]);
				/* Received with MSG_CMSG_CLOEXEC. */
				ck_assert_int_eq(fcntl(f.fds[i], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
			}
			devq_frame_close_fds(&f);
			got++;
		}
	}
	ck_assert_int_eq(open_fd_count(), base);
	devq_rx_fini(&rx);
	devq_tx_fini(&tx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* ---- fds across recvmsg boundaries ------------------------------------ */

/* Frame A (2 fds) goes out in two sendmsg calls: its first half with its
 * fds, then its second half together with all of frame B and B's fd.  The
 * kernel ends a recvmsg after a message that carried fds, so the second
 * recvmsg returns A's tail, B's first byte and B's fd at once: the fd FIFO
 * then holds fds of two frames and must hand each frame its own. */
START_TEST(fds_split_between_frames)
{
	int sv[2];
	pair(sv);
	struct devq_rx rx;
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);

	uint8_t a[DEVQ_FRAME_HDR + 300], b[DEVQ_FRAME_HDR + 50], second[sizeof(a) + sizeof(b)];
	size_t alen = raw_frame(a, 300, 2, 1);
	size_t blen = raw_frame(b, 50, 1, 2);
	size_t half = alen / 2;
	memcpy(second, a + half, alen - half);
	memcpy(second + (alen - half), b, blen);

	int afds[2] = { memfd_of_size(11), memfd_of_size(12) };
	int bfds[1] = { memfd_of_size(13) };
	send_raw(sv[0], a, half, afds, 2);
	send_raw(sv[0], second, alen - half + blen, bfds, 1);

	struct devq_frame f;
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), (ssize_t)half);
	ck_assert_int_eq(devq_rx_next(&rx, &f), 0);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), (ssize_t)(alen - half + blen));
	ck_assert_uint_eq(rx.fd_count, 3); /* A's two and B's one, queued together */

	ck_assert_int_eq(devq_rx_next(&rx, &f), 1);
	check_payload(&f, 300, 1);
	ck_assert_uint_eq(f.nfds, 2);
	ck_assert(same_file(f.fds[0], afds[0]));
	ck_assert(same_file(f.fds[1], afds[1]));
	devq_frame_close_fds(&f);

	ck_assert_int_eq(devq_rx_next(&rx, &f), 1);
	check_payload(&f, 50, 2);
	ck_assert_uint_eq(f.nfds, 1);
	ck_assert(same_file(f.fds[0], bfds[0]));
	devq_frame_close_fds(&f);

	ck_assert_int_eq(devq_rx_next(&rx, &f), 0);
	ck_assert_uint_eq(rx.fd_count, 0);
	devq_rx_fini(&rx);
	close(afds[0]);
	close(afds[1]);
	close(bfds[0]);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* ---- hostile headers -------------------------------------------------- */

/* The length is checked against max_payload before the buffer grows, so a
 * header claiming gigabytes costs nothing. */
START_TEST(oversized_header_rejected_without_allocation)
{
	static const uint32_t lens[] = { 5001, 2u << 20, 0xffffffffu };
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		int sv[2];
		pair(sv);
		struct devq_rx rx;
		devq_rx_init(&rx, 5000);
		uint8_t hdr[DEVQ_FRAME_HDR + 16] = { 0 };
		put_header(hdr, lens[i], DEVQ_FRAME_CLIENT, 0);

		/* The header split over two reads: the check must not depend
		 * on it arriving whole. */
		send_raw(sv[0], hdr, 3, NULL, 0);
		ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), 3);
		struct devq_frame f;
		ck_assert_int_eq(devq_rx_next(&rx, &f), 0);
		send_raw(sv[0], hdr + 3, sizeof(hdr) - 3, NULL, 0);
		ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), -EMSGSIZE);
		ck_assert_int_eq(devq_rx_next(&rx, &f), -EMSGSIZE);
		ck_assert_uint_le(rx.cap, 4096);

		/* Once poisoned, further reads refuse before growing. */
		send_raw(sv[0], hdr, sizeof(hdr), NULL, 0);
		ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), -EMSGSIZE);
		ck_assert_uint_le(rx.cap, 4096);
		devq_rx_fini(&rx);
		close(sv[0]);
		close(sv[1]);
	}
}
END_TEST

/* The bound is inclusive: exactly max_payload bytes is a valid frame, and it
 * arrives whole even though it is larger than the first allocation. */
START_TEST(payload_at_maximum_accepted)
{
	int sv[2];
	pair(sv);
	struct devq_rx rx;
	devq_rx_init(&rx, 5000);
	static uint8_t buf[DEVQ_FRAME_HDR + 5000];
	size_t len = raw_frame(buf, 5000, 0, 9);
	send_raw(sv[0], buf, len, NULL, 0);
	struct devq_frame f;
	size_t got = 0;
	int r = 0;
	while (got < len && (r = devq_rx_next(&rx, &f)) == 0) {
		ssize_t n = devq_rx_recv(&rx, sv[1], MSG_DONTWAIT);
		ck_assert_int_gt(n, 0);
		got += (size_t)n;
	}
	if (r == 0)
		r = devq_rx_next(&rx, &f);
	ck_assert_int_eq(r, 1);
	check_payload(&f, 5000, 9);
	devq_rx_fini(&rx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

START_TEST(declared_fd_missing)
{
	int sv[2];
	pair(sv);
	struct devq_rx rx;
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	uint8_t buf[DEVQ_FRAME_HDR + 20];
	size_t len = raw_frame(buf, 20, 1, 3);
	send_raw(sv[0], buf, len, NULL, 0);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), (ssize_t)len);
	struct devq_frame f;
	ck_assert_int_eq(devq_rx_next(&rx, &f), -EPROTO);
	devq_rx_fini(&rx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* More fds than one sendmsg can carry cannot be honest. */
START_TEST(too_many_fds_declared)
{
	int sv[2];
	pair(sv);
	struct devq_rx rx;
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	uint8_t buf[DEVQ_FRAME_HDR + 4];
	size_t len = raw_frame(buf, 4, DEVQ_FDS_PER_MSG + 1, 3);
	send_raw(sv[0], buf, len, NULL, 0);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), (ssize_t)len);
	struct devq_frame f;
	ck_assert_int_eq(devq_rx_next(&rx, &f), -EPROTO);
	devq_rx_fini(&rx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* A frame declaring no fds whose bytes came in a sendmsg carrying one: the
 * fd belongs to no frame.  The frame itself may be handed out first (it is
 * well formed and declared nothing), but never with the fd, and the stray fd
 * must then be reported. */
START_TEST(stray_fd_without_frame)
{
	int sv[2];
	pair(sv);
	int before = open_fd_count();
	struct devq_rx rx;
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	uint8_t buf[DEVQ_FRAME_HDR + 10];
	size_t len = raw_frame(buf, 10, 0, 4);
	int stray = memfd_of_size(77);
	send_raw(sv[0], buf, len, &stray, 1);
	close(stray);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), (ssize_t)len);

	struct devq_frame f;
	int r, frames = 0;
	while ((r = devq_rx_next(&rx, &f)) == 1) {
		ck_assert_uint_eq(f.nfds, 0);
		check_payload(&f, 10, 4);
		ck_assert_int_le(++frames, 1);
	}
	ck_assert_int_eq(r, -EPROTO);

	/* The same with the stray fd riding on a frame that is still
	 * incomplete: detected before the frame completes. */
	uint8_t big[DEVQ_FRAME_HDR + 100];
	raw_frame(big, 100, 0, 5);
	int sv2[2];
	pair(sv2);
	struct devq_rx rx2;
	devq_rx_init(&rx2, DEVQ_FRAME_MAX_DEFAULT);
	stray = memfd_of_size(78);
	send_raw(sv2[0], big, 50, &stray, 1);
	close(stray);
	ck_assert_int_eq(devq_rx_recv(&rx2, sv2[1], MSG_DONTWAIT), 50);
	ck_assert_int_eq(devq_rx_next(&rx2, &f), -EPROTO);

	/* Both stray fds are closed by fini. */
	devq_rx_fini(&rx);
	devq_rx_fini(&rx2);
	close(sv2[0]);
	close(sv2[1]);
	ck_assert_int_eq(open_fd_count(), before);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* ---- partial frames --------------------------------------------------- */

/* Every byte in its own recvmsg: frames reassemble, a frame's fds ride with
 * its first byte, and nothing comes out before a frame's last byte. */
START_TEST(byte_by_byte_reassembly)
{
	int sv[2];
	pair(sv);
	struct devq_rx rx;
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);

	enum { NF = 4 };
	static const uint32_t plen[NF] = { 0, 17, 300, 5 };
	static const uint16_t nfds[NF] = { 0, 2, 0, 1 };
	uint8_t frames[NF][DEVQ_FRAME_HDR + 300];
	size_t flen[NF];
	int orig[NF][2];
	for (int k = 0; k < NF; k++) {
		flen[k] = raw_frame(frames[k], plen[k], nfds[k], (uint8_t)(10 * k));
		for (int i = 0; i < nfds[k]; i++)
			orig[k][i] = memfd_of_size(100 * k + i);
	}

	for (int k = 0; k < NF; k++) {
		for (size_t i = 0; i < flen[k]; i++) {
			send_raw(sv[0], &frames[k][i], 1, i == 0 ? orig[k] : NULL,
				 i == 0 ? nfds[k] : 0);
			ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), 1);
			struct devq_frame f;
			int r = devq_rx_next(&rx, &f);
			if (i + 1 < flen[k]) {
				ck_assert_msg(r == 0, "frame %d byte %zu: %d", k, i, r);
				continue;
			}
			ck_assert_int_eq(r, 1);
			check_payload(&f, plen[k], (uint8_t)(10 * k));
			ck_assert_uint_eq(f.nfds, nfds[k]);
			for (int j = 0; j < nfds[k]; j++)
				ck_assert(same_file(f.fds[j], orig[k][j]));
			devq_frame_close_fds(&f);
			ck_assert_int_eq(devq_rx_next(&rx, &f), 0);
		}
	}
	for (int k = 0; k < NF; k++)
		for (int i = 0; i < nfds[k]; i++)
			close(orig[k][i]);
	devq_rx_fini(&rx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* ---- cleanup ---------------------------------------------------------- */

/* fds received for a frame that never completed are the rx's to close. */
START_TEST(fini_closes_queued_fds)
{
	int sv[2];
	pair(sv);
	int before = open_fd_count();
	struct devq_rx rx;
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	uint8_t buf[DEVQ_FRAME_HDR + 64];
	raw_frame(buf, 64, 3, 6);
	int fds[3] = { memfd_of_size(1), memfd_of_size(2), memfd_of_size(3) };
	send_raw(sv[0], buf, 20, fds, 3); /* the frame stays incomplete */
	for (int i = 0; i < 3; i++)
		close(fds[i]);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), 20);
	struct devq_frame f;
	ck_assert_int_eq(devq_rx_next(&rx, &f), 0);
	ck_assert_uint_eq(rx.fd_count, 3);

	int queued[3];
	for (int i = 0; i < 3; i++) {
		queued[i] = rx.fds[(rx.fd_head + (size_t)i) % rx.fd_cap];
		ck_assert(fd_is_open(queued[i]));
	}
	ck_assert_int_eq(open_fd_count(), before + 3);
	devq_rx_fini(&rx);
	for (int i = 0; i < 3; i++)
		ck_assert_msg(!fd_is_open(queued[i]), "fd %d still open", queued[i]);
	ck_assert_int_eq(open_fd_count(), before);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* Frames never sent still own their fds: fini closes them. */
START_TEST(tx_fini_closes_unsent_fds)
{
	int before = open_fd_count();
	struct devq_tx tx;
	devq_tx_init(&tx);
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	int fds[2] = { memfd_of_size(1), memfd_of_size(2) };
	ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &m.base, fds, 2), 0);
	ck_assert_int_eq(open_fd_count(), before + 2);
	devq_tx_fini(&tx);
	ck_assert_int_eq(open_fd_count(), before);
}
END_TEST

/* ---- partial writes --------------------------------------------------- */

#define TX_FRAMES 60
#define TX_NAME 900
#define TX_BIG 20000 /* frames with an fd: larger than the send buffer */

/* Drains whatever is readable into rx and checks each completed frame in
 * order; returns how many frames have been checked so far. */
static int drain_and_check(struct devq_rx *rx, int sock, int got, const off_t *fdsize)
{
	for (;;) {
		ssize_t n = devq_rx_recv(rx, sock, MSG_DONTWAIT);
		if (n == -EAGAIN)
			return got;
		ck_assert_msg(n > 0, "recv: %zd", n);
		struct devq_frame f;
		int r;
		while ((r = devq_rx_next(rx, &f)) == 1) {
			Devq__ClientMessage *m = devq__client_message__unpack(NULL, f.len, f.payload);
			ck_assert_ptr_nonnull(m);
			ck_assert_int_eq(m->body_case, DEVQ__CLIENT_MESSAGE__BODY_HELLO);
			ck_assert_uint_eq(m->hello->min_version, (uint32_t)got);
			size_t want = fdsize[got] ? TX_BIG : TX_NAME;
			ck_assert_uint_eq(strlen(m->hello->client_name), want);
			for (size_t i = 0; i < want; i++)
				ck_assert_int_eq(m->hello->client_name[i], 'A' + (got + (int)i) % 26);
			devq__client_message__free_unpacked(m, NULL);
			ck_assert_uint_eq(f.nfds, fdsize[got] ? 1 : 0);
			if (f.nfds)
				ck_assert_int_eq(fd_size(f.fds[0]), fdsize[got]);
			devq_frame_close_fds(&f);
			got++;
		}
		ck_assert_int_eq(r, 0);
	}
}

/* A non-blocking sender with a small send buffer: flush stops with -EAGAIN
 * mid-frame, resumes after the reader drains, and the byte stream and each
 * frame's fd come out intact.  Frames with an fd are larger than the send
 * buffer, so each of them is certainly cut by a stop: the resumed write must
 * not send its fds again. */
START_TEST(tx_partial_writes)
{
	int sv[2];
	pair(sv);
	int small = 4096;
	ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	ck_assert_int_eq(fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK), 0);

	struct devq_tx tx;
	struct devq_rx rx;
	devq_tx_init(&tx);
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	off_t fdsize[TX_FRAMES] = { 0 };
	static char name[TX_BIG + 1];
	for (int k = 0; k < TX_FRAMES; k++) {
		bool with_fd = k % 7 == 3;
		int len = with_fd ? TX_BIG : TX_NAME;
		for (int i = 0; i < len; i++)
			name[i] = (char)('A' + (k + i) % 26);
		name[len] = '\0';
		Devq__Hello h = DEVQ__HELLO__INIT;
		h.min_version = (uint32_t)k;
		h.client_name = name;
		Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
		m.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
		m.hello = &h;
		int fd = -1;
		if (with_fd) {
			fdsize[k] = 500 + k;
			fd = memfd_of_size(fdsize[k]);
		}
		ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &m.base, &fd, fd >= 0), 0);
	}
	size_t total = tx.bytes;
	ck_assert_uint_gt(total, 8 * (size_t)small);

	int r = devq_tx_flush(&tx, sv[0]);
	ck_assert_int_eq(r, -EAGAIN);
	ck_assert_uint_gt(tx.bytes, 0);
	ck_assert_uint_lt(tx.bytes, total);
	ck_assert_uint_gt(tx.frames, 0);

	int got = 0, rounds = 0;
	while (r == -EAGAIN) {
		ck_assert_int_lt(++rounds, 10000);
		got = drain_and_check(&rx, sv[1], got, fdsize);
		r = devq_tx_flush(&tx, sv[0]);
		ck_assert(r == 0 || r == -EAGAIN);
	}
	ck_assert_int_gt(rounds, 1);
	ck_assert_uint_eq(tx.bytes, 0);
	ck_assert_uint_eq(tx.frames, 0);
	got = drain_and_check(&rx, sv[1], got, fdsize);
	ck_assert_int_eq(got, TX_FRAMES);
	ck_assert_uint_eq(rx.fd_count, 0);

	devq_rx_fini(&rx);
	devq_tx_fini(&tx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* A peer that went away is an error, not a hang or a SIGPIPE. */
START_TEST(tx_flush_to_closed_peer)
{
	int sv[2];
	pair(sv);
	close(sv[1]);
	struct devq_tx tx;
	devq_tx_init(&tx);
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &m.base, NULL, 0), 0);
	ck_assert_int_eq(devq_tx_flush(&tx, sv[0]), -EPIPE);
	devq_tx_fini(&tx);
	close(sv[0]);
}
END_TEST

/* A frame built in a chunk of its own and queued where it lies: a frame
 * queued before it, the chunk's frame (header written at the start given,
 * the bytes before it never sent) and one appended after it arrive whole
 * and in order; the chunk takes no appended frame into its own room.  A
 * frame that does not fit its chunk is refused (and the chunk freed): at
 * exactly the chunk's end it fits. */
START_TEST(tx_push_chunk_in_place)
{
	int sv[2];
	pair(sv);
	struct devq_tx tx;
	struct devq_rx rx;
	devq_tx_init(&tx);
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	uint8_t *p;
	ck_assert_int_eq(devq_tx_append(&tx, 7, 3, &p), 0);
	memcpy(p, "abc", 3);
	enum { LEAD = 40, PLEN = 100000 };
	struct devq_txchunk *c = devq_txchunk_new(1000);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(devq_txchunk_grow(&c, LEAD + PLEN), 0);
	ck_assert_uint_eq(devq_txchunk_cap(c), LEAD + PLEN);
	uint8_t *d = devq_txchunk_data(c);
	memset(d, 0xee, LEAD);
	for (size_t i = 0; i < PLEN; i++)
		d[LEAD + i] = (uint8_t)(i * 31);
	ck_assert_int_eq(devq_tx_push_chunk(&tx, c, 9, LEAD - DEVQ_FRAME_HDR, PLEN), 0);
	ck_assert_uint_eq(tx.bytes, 3 + PLEN + 2 * DEVQ_FRAME_HDR);
	ck_assert_int_eq(devq_tx_append(&tx, 7, 2, &p), 0);
	memcpy(p, "xy", 2);
	ck_assert_uint_eq(tx.frames, 3);
	/* Refused: one byte more than the chunk holds. */
	struct devq_txchunk *small = devq_txchunk_new(64);
	ck_assert_ptr_nonnull(small);
	ck_assert_int_eq(devq_tx_push_chunk(&tx, small, 9, 10, 64 - 10 - DEVQ_FRAME_HDR + 1),
			 -EINVAL);
	ck_assert_uint_eq(tx.frames, 3);

	int got = 0;
	while (got < 3) {
		if (tx.bytes) {
			int fr = devq_tx_flush(&tx, sv[0]);
			ck_assert(fr == 0 || fr == -EAGAIN);
		}
		ssize_t n = devq_rx_recv(&rx, sv[1], MSG_DONTWAIT);
		if (n == -EAGAIN)
			continue;
		ck_assert_int_gt(n, 0);
		struct devq_frame f;
		int r;
		while ((r = devq_rx_next(&rx, &f)) == 1) {
			if (got == 1) {
				ck_assert_uint_eq(f.type, 9);
				ck_assert_uint_eq(f.len, PLEN);
				for (size_t i = 0; i < PLEN; i++)
					ck_assert_uint_eq(f.payload[i], (uint8_t)(i * 31));
			} else {
				ck_assert_uint_eq(f.type, 7);
				ck_assert_uint_eq(f.len, got ? 2 : 3);
				ck_assert(!memcmp(f.payload, got ? "xy" : "abc", f.len));
			}
			got++;
		}
		ck_assert_int_eq(r, 0);
	}
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), -EAGAIN);
	/* At exactly the chunk's end it fits. */
	small = devq_txchunk_new(64);
	ck_assert_ptr_nonnull(small);
	ck_assert_int_eq(devq_tx_push_chunk(&tx, small, 9, 10, 64 - 10 - DEVQ_FRAME_HDR), 0);
	devq_rx_fini(&rx);
	devq_tx_fini(&tx); /* frees the unsent chunk */
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* ---- the rx buffer ---------------------------------------------------- */

/* Frames already taken are dropped before the next read, so the header the
 * read checks against max_payload is that of the frame now arriving, not
 * that of one handed out long ago. */
START_TEST(rx_checks_the_arriving_header_after_taken_frames)
{
	int sv[2];
	pair(sv);
	struct devq_rx rx;
	devq_rx_init(&rx, 5000);
	uint8_t a[DEVQ_FRAME_HDR + 20];
	size_t alen = raw_frame(a, 20, 0, 1);
	send_raw(sv[0], a, alen, NULL, 0);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), (ssize_t)alen);
	struct devq_frame f;
	ck_assert_int_eq(devq_rx_next(&rx, &f), 1);
	check_payload(&f, 20, 1);

	uint8_t hdr[DEVQ_FRAME_HDR + 8] = { 0 };
	put_header(hdr, 5001, DEVQ_FRAME_CLIENT, 0);
	send_raw(sv[0], hdr, sizeof(hdr), NULL, 0);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), -EMSGSIZE);
	ck_assert_int_eq(devq_rx_next(&rx, &f), -EMSGSIZE);
	devq_rx_fini(&rx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* A header is judged once it is whole: seven bytes of one announcing too
 * much are not an error yet (the read waits for more), the eighth is, and
 * every read after it refuses at once, even with nothing more to read. */
START_TEST(header_judged_when_whole)
{
	int sv[2];
	pair(sv);
	struct devq_rx rx;
	devq_rx_init(&rx, 5000);
	uint8_t hdr[DEVQ_FRAME_HDR];
	put_header(hdr, 5001, DEVQ_FRAME_CLIENT, 0);
	struct devq_frame f;

	send_raw(sv[0], hdr, DEVQ_FRAME_HDR - 1, NULL, 0);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), DEVQ_FRAME_HDR - 1);
	ck_assert_int_eq(devq_rx_next(&rx, &f), 0);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), -EAGAIN);

	send_raw(sv[0], hdr + DEVQ_FRAME_HDR - 1, 1, NULL, 0);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), -EMSGSIZE);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), -EMSGSIZE);
	ck_assert_int_eq(devq_rx_next(&rx, &f), -EMSGSIZE);
	devq_rx_fini(&rx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* A reader may read everything there is before taking frames.  When the
 * buffer is exactly full (here: one frame of exactly the first allocation)
 * the next read must grow it, not offer the kernel no room: a recvmsg of
 * zero bytes returns 0, which reads as end of stream. */
START_TEST(recv_again_before_taking_frames)
{
	int sv[2];
	pair(sv);
	struct devq_rx rx;
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	static uint8_t a[4096];
	uint8_t b[DEVQ_FRAME_HDR + 50];
	size_t alen = raw_frame(a, sizeof(a) - DEVQ_FRAME_HDR, 0, 1);
	size_t blen = raw_frame(b, 50, 0, 2);
	send_raw(sv[0], a, alen, NULL, 0);
	send_raw(sv[0], b, blen, NULL, 0);
	size_t got = 0;
	while (got < alen + blen) {
		ssize_t n = devq_rx_recv(&rx, sv[1], MSG_DONTWAIT);
		ck_assert_msg(n > 0, "recv returned %zd after %zu bytes", n, got);
		got += (size_t)n;
	}
	struct devq_frame f;
	ck_assert_int_eq(devq_rx_next(&rx, &f), 1);
	check_payload(&f, sizeof(a) - DEVQ_FRAME_HDR, 1);
	ck_assert_int_eq(devq_rx_next(&rx, &f), 1);
	check_payload(&f, 50, 2);
	ck_assert_int_eq(devq_rx_next(&rx, &f), 0);
	devq_rx_fini(&rx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* With SO_PASSCRED every read also carries the sender's credentials
 * (SOL_SOCKET, SCM_CREDENTIALS): control data that holds no fds, which
 * must not be queued as fds. */
START_TEST(credentials_are_not_fds)
{
	int sv[2];
	pair(sv);
	int one = 1;
	ck_assert_int_eq(setsockopt(sv[1], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)), 0);
	struct devq_rx rx;
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	uint8_t a[DEVQ_FRAME_HDR + 10], b[DEVQ_FRAME_HDR + 10];
	size_t alen = raw_frame(a, 10, 0, 1);
	size_t blen = raw_frame(b, 10, 1, 2);
	int m = memfd_of_size(55);
	send_raw(sv[0], a, alen, NULL, 0);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), (ssize_t)alen);
	ck_assert_uint_eq(rx.fd_count, 0);
	struct devq_frame f;
	ck_assert_int_eq(devq_rx_next(&rx, &f), 1);
	check_payload(&f, 10, 1);
	ck_assert_uint_eq(f.nfds, 0);
	ck_assert_int_eq(devq_rx_next(&rx, &f), 0);

	send_raw(sv[0], b, blen, &m, 1);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), (ssize_t)blen);
	ck_assert_uint_eq(rx.fd_count, 1);
	ck_assert_int_eq(devq_rx_next(&rx, &f), 1);
	check_payload(&f, 10, 2);
	ck_assert_uint_eq(f.nfds, 1);
	ck_assert(same_file(f.fds[0], m));
	devq_frame_close_fds(&f);
	ck_assert_int_eq(devq_rx_next(&rx, &f), 0);
	devq_rx_fini(&rx);
	close(m);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* A frame declaring one fd more than a sendmsg can carry is refused even
 * when that many fds did arrive (over two sendmsg calls): a frame has room
 * for DEVQ_FDS_PER_MSG fds only. */
START_TEST(too_many_fds_declared_and_sent)
{
	int sv[2];
	pair(sv);
	int before = open_fd_count();
	struct devq_rx rx;
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	uint8_t buf[DEVQ_FRAME_HDR + 4];
	size_t len = raw_frame(buf, 4, DEVQ_FDS_PER_MSG + 1, 3);
	int m = memfd_of_size(254);
	int fds[DEVQ_FDS_PER_MSG];
	for (unsigned i = 0; i < DEVQ_FDS_PER_MSG; i++)
		fds[i] = m;
	send_raw(sv[0], buf, 1, fds, DEVQ_FDS_PER_MSG);
	send_raw(sv[0], buf + 1, len - 1, &m, 1);
	struct devq_frame f;
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), 1);
	ck_assert_int_eq(devq_rx_next(&rx, &f), 0);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), (ssize_t)(len - 1));
	ck_assert_uint_eq(rx.fd_count, DEVQ_FDS_PER_MSG + 1);
	ck_assert_int_eq(devq_rx_next(&rx, &f), -EPROTO);
	devq_rx_fini(&rx);
	close(m);
	ck_assert_int_eq(open_fd_count(), before);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* ---- interrupted calls ------------------------------------------------ */

static volatile sig_atomic_t nsig;

static void on_sig(int sig)
{
	(void)sig;
	nsig++;
}

/* SIGUSR1 interrupts a blocked call (no SA_RESTART): recvmsg and sendmsg
 * fail with EINTR. */
static void catch_usr1(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sig;
	sigemptyset(&sa.sa_mask);
	ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	nsig = 0;
}

/* In a child: waits until process pid sleeps (blocked in its one blocking
 * call) and signals it. */
static void signal_when_blocked(pid_t pid)
{
	char path[64], st[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	for (;;) {
		FILE *fp = fopen(path, "r");
		if (!fp)
			_exit(2);
		size_t n = fread(st, 1, sizeof(st) - 1, fp);
		fclose(fp);
		st[n] = '\0';
		const char *p = strrchr(st, ')');
		if (p && p[1] == ' ' && p[2] == 'S')
			break;
		usleep(1000);
	}
	kill(pid, SIGUSR1);
	usleep(2000);
}

/* The exit status of child pid, -1 unless it exited. */
static int child_status(pid_t pid)
{
	int status;
	pid_t r;
	while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
		;
	ck_assert_int_eq(r, pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A signal while recv blocks is no error: the read is retried. */
START_TEST(recv_retries_after_signal)
{
	int sv[2];
	pair(sv);
	catch_usr1();
	uint8_t buf[DEVQ_FRAME_HDR + 30];
	size_t len = raw_frame(buf, 30, 0, 8);
	pid_t parent = getpid(), pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(sv[1]);
		signal_when_blocked(parent);
		signal_when_blocked(parent);
		_exit(send(sv[0], buf, len, MSG_NOSIGNAL) == (ssize_t)len ? 0 : 1);
	}
	close(sv[0]);
	struct devq_rx rx;
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	size_t got = 0;
	while (got < len) {
		ssize_t n = devq_rx_recv(&rx, sv[1], 0);
		ck_assert_msg(n > 0, "recv: %zd", n);
		got += (size_t)n;
	}
	ck_assert_int_ge(nsig, 1);
	struct devq_frame f;
	ck_assert_int_eq(devq_rx_next(&rx, &f), 1);
	check_payload(&f, 30, 8);
	ck_assert_int_eq(child_status(pid), 0);
	devq_rx_fini(&rx);
	close(sv[1]);
}
END_TEST

/* The end of the stream is 0 whatever errno held before: EINTR left over
 * from an earlier interrupted call must not make recv read again (it would
 * read 0 again, for ever). */
START_TEST(eof_with_stale_eintr)
{
	int sv[2];
	pair(sv);
	close(sv[0]);
	struct devq_rx rx;
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	errno = EINTR;
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], 0), 0);
	devq_rx_fini(&rx);
	close(sv[1]);
}
END_TEST

/* Fills n bytes from seed, as raw_frame does. */
static void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

/* A signal while a blocking flush waits for room is no error either: the
 * write is retried and everything goes.  The reader (a child) signals
 * twice before it reads: the second signal finds a sendmsg that has sent
 * nothing yet, which fails with EINTR rather than returning a count. */
START_TEST(flush_retries_after_signal)
{
	enum { N = 4, PLEN = 60000 };
	int sv[2];
	pair(sv);
	/* A small buffer: the flush certainly waits for the reader. */
	int small = 4096;
	ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	catch_usr1();
	struct devq_tx tx;
	devq_tx_init(&tx);
	for (int k = 0; k < N; k++) {
		uint8_t *p;
		ck_assert_int_eq(devq_tx_reserve(&tx, DEVQ_FRAME_CLIENT, PLEN, &p), 0);
		fill(p, PLEN, (uint8_t)k);
	}
	pid_t parent = getpid(), pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(sv[0]);
		signal_when_blocked(parent);
		signal_when_blocked(parent);
		struct devq_rx rx;
		devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
		int got = 0;
		while (got < N) {
			if (devq_rx_recv(&rx, sv[1], 0) <= 0)
				_exit(1);
			struct devq_frame f;
			while (devq_rx_next(&rx, &f) == 1) {
				if (f.len != PLEN)
					_exit(1);
				for (size_t i = 0; i < PLEN; i++)
					if (f.payload[i] != (uint8_t)(got + i * 7))
						_exit(1);
				got++;
			}
		}
		_exit(0);
	}
	close(sv[1]);
	ck_assert_int_eq(devq_tx_flush(&tx, sv[0]), 0);
	ck_assert_int_ge(nsig, 1);
	ck_assert_uint_eq(tx.bytes, 0);
	ck_assert_uint_eq(tx.frames, 0);
	ck_assert_int_eq(child_status(pid), 0);
	devq_tx_fini(&tx);
	close(sv[0]);
}
END_TEST

/* ---- fds and their numbers -------------------------------------------- */

/* 0 is an fd like any other: with stdin closed a received fd, or one handed
 * to the tx, may well be 0, and is closed like the rest. */
START_TEST(fd_zero_is_closed)
{
	int sv[2];
	pair(sv);
	int m = memfd_of_size(66);
	close(0);
	struct devq_rx rx;
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	uint8_t buf[DEVQ_FRAME_HDR + 4];
	size_t len = raw_frame(buf, 4, 1, 1);
	send_raw(sv[0], buf, len, &m, 1);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), (ssize_t)len);
	struct devq_frame f;
	ck_assert_int_eq(devq_rx_next(&rx, &f), 1);
	ck_assert_uint_eq(f.nfds, 1);
	ck_assert_int_eq(f.fds[0], 0); /* the lowest free number */
	ck_assert(same_file(0, m));
	devq_frame_close_fds(&f);
	ck_assert(!fd_is_open(0));
	devq_rx_fini(&rx);

	struct devq_tx tx;
	devq_tx_init(&tx);
	int z = dup(m);
	ck_assert_int_eq(z, 0);
	Devq__ClientMessage msg = DEVQ__CLIENT_MESSAGE__INIT;
	ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &msg.base, &z, 1), 0);
	ck_assert(fd_is_open(0));
	devq_tx_fini(&tx); /* never sent: the tx closes it */
	ck_assert(!fd_is_open(0));
	close(m);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* devq_tx_push takes up to DEVQ_FDS_PER_MSG fds, all in one sendmsg; one
 * more is refused, and the fds handed over are closed then too (they
 * belong to the tx), every one of them and not one past them. */
START_TEST(tx_push_fd_bound)
{
	int sv[2];
	pair(sv);
	struct devq_tx tx;
	struct devq_rx rx;
	devq_tx_init(&tx);
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	Devq__ClientMessage msg = DEVQ__CLIENT_MESSAGE__INIT;
	int m = memfd_of_size(253);
	int fds[DEVQ_FDS_PER_MSG + 2];
	for (unsigned i = 0; i < DEVQ_FDS_PER_MSG + 2; i++) {
		fds[i] = fcntl(m, F_DUPFD_CLOEXEC, 0);
		ck_assert_int_ge(fds[i], 0);
	}
	int keep = fds[DEVQ_FDS_PER_MSG + 1];
	ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &msg.base, fds, DEVQ_FDS_PER_MSG + 1),
			 -EINVAL);
	for (unsigned i = 0; i < DEVQ_FDS_PER_MSG + 1; i++)
		ck_assert_msg(!fd_is_open(fds[i]), "fd %u still open", i);
	ck_assert(fd_is_open(keep));
	ck_assert_uint_eq(tx.frames, 0);
	ck_assert_uint_eq(tx.bytes, 0);
	close(keep);

	for (unsigned i = 0; i < DEVQ_FDS_PER_MSG; i++)
		fds[i] = fcntl(m, F_DUPFD_CLOEXEC, 0);
	ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &msg.base, fds, DEVQ_FDS_PER_MSG), 0);
	ck_assert_int_eq(devq_tx_flush(&tx, sv[0]), 0);
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), DEVQ_FRAME_HDR);
	struct devq_frame f;
	ck_assert_int_eq(devq_rx_next(&rx, &f), 1);
	ck_assert_uint_eq(f.nfds, DEVQ_FDS_PER_MSG);
	for (unsigned i = 0; i < DEVQ_FDS_PER_MSG; i++)
		ck_assert(same_file(f.fds[i], m));
	devq_frame_close_fds(&f);
	devq_rx_fini(&rx);
	devq_tx_fini(&tx);
	close(m);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* A frame's fds are the kernel's once its first byte went: the tx closes
 * its copies then, all of them, even when the rest of the frame waits for
 * room. */
START_TEST(tx_closes_fds_once_first_byte_sent)
{
	int sv[2];
	pair(sv);
	int small = 4096;
	ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	ck_assert_int_eq(fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK), 0);
	struct devq_tx tx;
	struct devq_rx rx;
	devq_tx_init(&tx);
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	static char name[TX_BIG + 1];
	memset(name, 'q', TX_BIG);
	Devq__Hello h = DEVQ__HELLO__INIT;
	h.client_name = name;
	Devq__ClientMessage msg = DEVQ__CLIENT_MESSAGE__INIT;
	msg.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
	msg.hello = &h;
	int fds[2] = { memfd_of_size(21), memfd_of_size(22) };
	ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &msg.base, fds, 2), 0);
	ck_assert_int_eq(devq_tx_flush(&tx, sv[0]), -EAGAIN);
	ck_assert_uint_eq(tx.frames, 1); /* cut: the frame is still queued */
	ck_assert(!fd_is_open(fds[0]));
	ck_assert(!fd_is_open(fds[1]));

	int r = -EAGAIN;
	struct devq_frame f;
	int got = 0;
	while (!got) {
		ssize_t n = devq_rx_recv(&rx, sv[1], MSG_DONTWAIT);
		ck_assert(n > 0 || n == -EAGAIN);
		if ((got = devq_rx_next(&rx, &f)) == 0 && r == -EAGAIN)
			r = devq_tx_flush(&tx, sv[0]);
	}
	ck_assert_int_eq(got, 1);
	ck_assert_uint_eq(f.nfds, 2);
	ck_assert_int_eq(fd_size(f.fds[0]), 21);
	ck_assert_int_eq(fd_size(f.fds[1]), 22);
	devq_frame_close_fds(&f);
	devq_rx_fini(&rx);
	devq_tx_fini(&tx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* ---- tx frames and chunks --------------------------------------------- */

struct want {
	uint16_t type;
	uint32_t len;
	uint8_t seed;
};

/* Flushes tx into non-blocking sv[0], then drains sv[1] until it is empty,
 * and again, until n frames came out; each must be want[k], its payload
 * filled by fill(). */
static void pump_and_check(struct devq_tx *tx, struct devq_rx *rx, int sv[2], const struct want *w,
			   int n)
{
	int got = 0;
	long rounds = 0;
	while (got < n) {
		ck_assert_int_lt(++rounds, 1000000);
		if (tx->head) {
			int fr = devq_tx_flush(tx, sv[0]);
			ck_assert_msg(fr == 0 || fr == -EAGAIN, "flush: %d", fr);
		}
		ssize_t m;
		while ((m = devq_rx_recv(rx, sv[1], MSG_DONTWAIT)) != -EAGAIN) {
			ck_assert_msg(m > 0, "recv: %zd", m);
			struct devq_frame f;
			int r;
			while ((r = devq_rx_next(rx, &f)) == 1) {
				ck_assert_int_lt(got, n);
				ck_assert_uint_eq(f.type, w[got].type);
				ck_assert_uint_eq(f.len, w[got].len);
				for (uint32_t i = 0; i < f.len; i++)
					if (f.payload[i] != (uint8_t)(w[got].seed + i * 7))
						ck_abort_msg("frame %d: byte %u differs", got, i);
				got++;
			}
			ck_assert_int_eq(r, 0);
		}
	}
	ck_assert_uint_eq(tx->bytes, 0);
	ck_assert_uint_eq(tx->frames, 0);
}

static void nonblocking_pair(int sv[2])
{
	pair(sv);
	ck_assert_int_eq(fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK), 0);
}

static uint8_t *append(struct devq_tx *tx, uint32_t plen, uint8_t seed)
{
	uint8_t *p;
	ck_assert_int_eq(devq_tx_append(tx, 5, plen, &p), 0);
	fill(p, plen, seed);
	return p;
}

/* Appended frames fill a slab of DEVQ_TX_SLAB bytes to its last byte and
 * never past it; a frame larger than a slab gets a chunk of its own (the
 * next frame is not put after it); one sent slab is kept and taken by the
 * next frames that fit a slab, a frame of exactly a slab too. */
START_TEST(tx_append_slabs)
{
	int sv[2];
	nonblocking_pair(sv);
	struct devq_tx tx;
	struct devq_rx rx;
	devq_tx_init(&tx);
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	const uint32_t H = DEVQ_FRAME_HDR, S = DEVQ_TX_SLAB;

	/* a leaves 108 bytes: b's 108 fill them. */
	uint8_t *a = append(&tx, S - H - 108, 1);
	uint8_t *b = append(&tx, 100, 2);
	ck_assert_ptr_eq(b, a + (S - H - 108) + H);
	/* c leaves 109 bytes: d needs 110 and goes elsewhere. */
	uint8_t *c = append(&tx, S - H - 109, 3);
	uint8_t *d = append(&tx, 102, 4);
	ck_assert_uint_ne((uintptr_t)d, (uintptr_t)c + (S - H - 109) + H);
	ck_assert_ptr_null(tx.spare);
	const struct want w1[] = { { 5, S - H - 108, 1 }, { 5, 100, 2 }, { 5, S - H - 109, 3 },
				   { 5, 102, 4 } };
	pump_and_check(&tx, &rx, sv, w1, 4);
	ck_assert_ptr_nonnull(tx.spare);

	/* One byte more than a slab: not into the spare, and alone. */
	uint8_t *e = append(&tx, S + 1 - H, 5);
	ck_assert_ptr_nonnull(tx.spare);
	uint8_t *g = append(&tx, 10, 6);
	ck_assert_uint_ne((uintptr_t)g, (uintptr_t)e + (S + 1 - H) + H);
	ck_assert_ptr_null(tx.spare);
	const struct want w2[] = { { 5, S + 1 - H, 5 }, { 5, 10, 6 } };
	pump_and_check(&tx, &rx, sv, w2, 2);
	ck_assert_ptr_nonnull(tx.spare);

	/* Exactly a slab: into the spare. */
	append(&tx, S - H, 7);
	ck_assert_ptr_null(tx.spare);
	const struct want w3[] = { { 5, S - H, 7 } };
	pump_and_check(&tx, &rx, sv, w3, 1);
	devq_rx_fini(&rx);
	devq_tx_fini(&tx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* The largest payload a header can announce is UINT32_MAX bytes: queued
 * (when memory allows), and one byte more is refused.  Nothing is sent:
 * the memory is never touched past the header. */
START_TEST(tx_payload_u32_max)
{
	struct devq_tx tx;
	devq_tx_init(&tx);
	uint8_t *p;
	int r = devq_tx_reserve(&tx, 1, UINT32_MAX, &p);
	ck_assert_msg(r == 0 || r == -ENOMEM, "reserve: %d", r);
	devq_tx_fini(&tx);
	ck_assert_int_eq(devq_tx_reserve(&tx, 1, (size_t)UINT32_MAX + 1, &p), -EINVAL);

	r = devq_tx_append(&tx, 1, UINT32_MAX, &p);
	ck_assert_msg(r == 0 || r == -ENOMEM, "append: %d", r);
	devq_tx_fini(&tx);
	ck_assert_int_eq(devq_tx_append(&tx, 1, (size_t)UINT32_MAX + 1, &p), -EINVAL);

	struct devq_txchunk *c = devq_txchunk_new(DEVQ_FRAME_HDR + (size_t)UINT32_MAX);
	if (c) { /* else no memory for it here */
		ck_assert_int_eq(devq_tx_push_chunk(&tx, c, 1, 0, UINT32_MAX), 0);
		ck_assert_uint_eq(tx.bytes, DEVQ_FRAME_HDR + (size_t)UINT32_MAX);
		devq_tx_fini(&tx);
	}
	c = devq_txchunk_new(64);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(devq_tx_push_chunk(&tx, c, 1, 0, (size_t)UINT32_MAX + 1), -EINVAL);
	ck_assert_uint_eq(tx.frames, 0);
	devq_tx_fini(&tx);
}
END_TEST

/* A message of a type of its own with one bytes field, so that its packed
 * size can be made anything without the bytes existing: devq.proto has no
 * bytes field, and a string's size is its strlen. */
struct blob {
	ProtobufCMessage base;
	ProtobufCBinaryData data;
};

static const ProtobufCFieldDescriptor blob_field = {
	.name = "data",
	.id = 1,
	.label = PROTOBUF_C_LABEL_REQUIRED,
	.type = PROTOBUF_C_TYPE_BYTES,
	.offset = offsetof(struct blob, data),
};
static const unsigned blob_by_name[] = { 0 };
static const ProtobufCIntRange blob_ranges[] = { { 1, 0 }, { 0, 1 } };
static const ProtobufCMessageDescriptor blob_desc = {
	.magic = PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC,
	.name = "test.Blob",
	.short_name = "Blob",
	.c_name = "Blob",
	.package_name = "test",
	.sizeof_message = sizeof(struct blob),
	.n_fields = 1,
	.fields = &blob_field,
	.fields_sorted_by_name = blob_by_name,
	.n_field_ranges = 1,
	.field_ranges = blob_ranges,
};

/* A message of exactly UINT32_MAX bytes with DEVQ_FDS_PER_MSG fds is
 * within both bounds: when memory for it runs out, devq_tx_push fails with
 * -ENOMEM, not -EINVAL (and still closes the fds); one byte more is
 * -EINVAL.  The memory is made to run out with RLIMIT_AS, in this test's
 * own process, so nothing of the 4 GiB is ever allocated. */
START_TEST(tx_push_u32_max_without_memory)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* The sanitizers' allocators abort when memory runs out, not
	 * returning NULL. */
	printf("SKIP: tx_push_u32_max_without_memory (sanitizer build)\n");
	return;
#endif
	static const uint8_t byte = 0;
	struct blob m = { .base = { .descriptor = &blob_desc } };
	m.data.data = (uint8_t *)&byte; /* never read: nothing is packed */
	m.data.len = UINT32_MAX - 6;    /* + a 1-byte tag and a 5-byte length */
	ck_assert_uint_eq(protobuf_c_message_get_packed_size(&m.base), UINT32_MAX);

	long pages = 0;
	FILE *fp = fopen("/proc/self/statm", "r");
	ck_assert_ptr_nonnull(fp);
	ck_assert_int_eq(fscanf(fp, "%ld", &pages), 1);
	fclose(fp);
	struct rlimit lim;
	lim.rlim_cur = lim.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (256u << 20);
	ck_assert_int_eq(setrlimit(RLIMIT_AS, &lim), 0);
	void *probe = malloc((size_t)UINT32_MAX);
	ck_assert_ptr_null(probe); /* the limit holds */

	int fd = memfd_of_size(9);
	int fds[DEVQ_FDS_PER_MSG];
	for (unsigned i = 0; i < DEVQ_FDS_PER_MSG; i++) {
		fds[i] = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		ck_assert_int_ge(fds[i], 0);
	}
	struct devq_tx tx;
	devq_tx_init(&tx);
	ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &m.base, fds, DEVQ_FDS_PER_MSG),
			 -ENOMEM);
	for (unsigned i = 0; i < DEVQ_FDS_PER_MSG; i++)
		ck_assert(!fd_is_open(fds[i]));
	m.data.len++;
	ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &m.base, NULL, 0), -EINVAL);
	ck_assert_uint_eq(tx.frames, 0);
	devq_tx_fini(&tx);
	close(fd);
}
END_TEST

/* Growing a chunk by a single byte grows it; asking for its size or less
 * keeps it; an empty chunk grows too. */
START_TEST(txchunk_grow_by_one)
{
	struct devq_txchunk *c = devq_txchunk_new(0);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(devq_txchunk_grow(&c, 1), 0);
	ck_assert_uint_eq(devq_txchunk_cap(c), 1);
	devq_txchunk_free(c);
	c = devq_txchunk_new(100);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(devq_txchunk_grow(&c, 100), 0);
	ck_assert_uint_eq(devq_txchunk_cap(c), 100);
	ck_assert_int_eq(devq_txchunk_grow(&c, 50), 0);
	ck_assert_uint_eq(devq_txchunk_cap(c), 100);
	ck_assert_int_eq(devq_txchunk_grow(&c, 101), 0);
	ck_assert_uint_eq(devq_txchunk_cap(c), 101);
	memset(devq_txchunk_data(c), 0x5a, 101);
	devq_txchunk_free(c);
}
END_TEST

/* Shrinking a chunk by a single byte shrinks it and keeps its data;
 * asking for its size or more keeps it (a trace reply is trimmed this way
 * once built, requests/tracereq.c). */
START_TEST(txchunk_shrink_by_one)
{
	struct devq_txchunk *c = devq_txchunk_new(1000);
	ck_assert_ptr_nonnull(c);
	uint8_t *d = devq_txchunk_data(c);
	for (int i = 0; i < 1000; i++)
		d[i] = (uint8_t)i;
	devq_txchunk_shrink(&c, 999);
	ck_assert_uint_eq(devq_txchunk_cap(c), 999);
	devq_txchunk_shrink(&c, 100);
	ck_assert_uint_eq(devq_txchunk_cap(c), 100);
	d = devq_txchunk_data(c);
	for (int i = 0; i < 100; i++)
		ck_assert_uint_eq(d[i], (uint8_t)i);
	devq_txchunk_shrink(&c, 100);
	ck_assert_uint_eq(devq_txchunk_cap(c), 100);
	devq_txchunk_shrink(&c, 200); /* never grows */
	ck_assert_uint_eq(devq_txchunk_cap(c), 100);
	devq_txchunk_free(c);
}
END_TEST

/* devq_tx_push_chunk's bounds: a start past the chunk's end (an empty
 * chunk's too), or a header that does not fit after it, is refused; an empty frame whose header ends
 * exactly at the chunk's end is queued and arrives. */
START_TEST(tx_push_chunk_bounds)
{
	int sv[2];
	nonblocking_pair(sv);
	struct devq_tx tx;
	struct devq_rx rx;
	devq_tx_init(&tx);
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	struct devq_txchunk *c = devq_txchunk_new(64);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(devq_tx_push_chunk(&tx, c, 9, 65, 0), -EINVAL);
	c = devq_txchunk_new(0);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(devq_tx_push_chunk(&tx, c, 9, 1, 0), -EINVAL);
	c = devq_txchunk_new(64);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(devq_tx_push_chunk(&tx, c, 9, 64 - DEVQ_FRAME_HDR + 1, 0), -EINVAL);
	ck_assert_uint_eq(tx.frames, 0);
	ck_assert_uint_eq(tx.bytes, 0);

	c = devq_txchunk_new(64);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(devq_tx_push_chunk(&tx, c, 9, 64 - DEVQ_FRAME_HDR, 0), 0);
	ck_assert_uint_eq(tx.bytes, DEVQ_FRAME_HDR);
	const struct want w[] = { { 9, 0, 0 } };
	pump_and_check(&tx, &rx, sv, w, 1);
	devq_rx_fini(&rx);
	devq_tx_fini(&tx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* More frames than one sendmsg gathers (64 iovecs), the first with an fd:
 * all arrive in order, the fd with the first. */
START_TEST(tx_flush_many_chunks)
{
	enum { N = 150 };
	int sv[2];
	pair(sv);
	struct devq_tx tx;
	struct devq_rx rx;
	devq_tx_init(&tx);
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	Devq__ClientMessage msg = DEVQ__CLIENT_MESSAGE__INIT;
	int m = memfd_of_size(150);
	ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &msg.base, &m, 1), 0);
	for (int k = 1; k < N; k++) {
		uint8_t *p;
		ck_assert_int_eq(devq_tx_reserve(&tx, DEVQ_FRAME_CLIENT, (size_t)k % 13, &p), 0);
		fill(p, (size_t)k % 13, (uint8_t)k);
	}
	ck_assert_int_eq(devq_tx_flush(&tx, sv[0]), 0);
	ck_assert_uint_eq(tx.frames, 0);
	int got = 0;
	while (got < N) {
		ck_assert_int_gt(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), 0);
		struct devq_frame f;
		while (devq_rx_next(&rx, &f) == 1) {
			if (got == 0) {
				ck_assert_uint_eq(f.len, 0);
				ck_assert_uint_eq(f.nfds, 1);
				ck_assert_int_eq(fd_size(f.fds[0]), 150);
				devq_frame_close_fds(&f);
			} else {
				ck_assert_uint_eq(f.nfds, 0);
				ck_assert_uint_eq(f.len, (uint32_t)got % 13);
				for (uint32_t i = 0; i < f.len; i++)
					ck_assert_uint_eq(f.payload[i], (uint8_t)(got + i * 7));
			}
			got++;
		}
	}
	ck_assert_int_eq(devq_rx_recv(&rx, sv[1], MSG_DONTWAIT), -EAGAIN);
	devq_rx_fini(&rx);
	devq_tx_fini(&tx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* Many frames, each in a chunk of its own, through a small non-blocking
 * send buffer: a write stops wherever the buffer fills, mid-frame, and
 * what went must be cut from each frame exactly.  The frames are 145 bytes,
 * prime to the 8064 bytes (two 4032-byte skbs) each write takes on Linux
 * with this buffer, so the stops fall on every offset within a frame
 * (its first byte, its last) over 145 writes. */
START_TEST(tx_partial_writes_every_offset)
{
	enum { N = 9000, PLEN = 145 - DEVQ_FRAME_HDR };
	int sv[2];
	nonblocking_pair(sv);
	int small = 4096;
	ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	struct devq_tx tx;
	struct devq_rx rx;
	devq_tx_init(&tx);
	devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT);
	static struct want w[N];
	for (int k = 0; k < N; k++) {
		w[k].type = DEVQ_FRAME_CLIENT;
		w[k].len = PLEN;
		w[k].seed = (uint8_t)k;
		uint8_t *p;
		ck_assert_int_eq(devq_tx_reserve(&tx, DEVQ_FRAME_CLIENT, w[k].len, &p), 0);
		fill(p, w[k].len, w[k].seed);
	}
	pump_and_check(&tx, &rx, sv, w, N);
	devq_rx_fini(&rx);
	devq_tx_fini(&tx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("frame");
	TCase *t = tcase_create("frame");
	tcase_add_test(t, roundtrip_several_frames);
	tcase_add_test(t, roundtrip_fds_through_tx);
	tcase_add_test(t, fds_split_between_frames);
	tcase_add_test(t, oversized_header_rejected_without_allocation);
	tcase_add_test(t, payload_at_maximum_accepted);
	tcase_add_test(t, declared_fd_missing);
	tcase_add_test(t, too_many_fds_declared);
	tcase_add_test(t, stray_fd_without_frame);
	tcase_add_test(t, byte_by_byte_reassembly);
	tcase_add_test(t, fini_closes_queued_fds);
	tcase_add_test(t, tx_fini_closes_unsent_fds);
	tcase_add_test(t, tx_partial_writes);
	tcase_add_test(t, tx_flush_to_closed_peer);
	tcase_add_test(t, tx_push_chunk_in_place);
	tcase_add_test(t, rx_checks_the_arriving_header_after_taken_frames);
	tcase_add_test(t, header_judged_when_whole);
	tcase_add_test(t, recv_again_before_taking_frames);
	tcase_add_test(t, credentials_are_not_fds);
	tcase_add_test(t, too_many_fds_declared_and_sent);
	tcase_add_test(t, recv_retries_after_signal);
	tcase_add_test(t, eof_with_stale_eintr);
	tcase_add_test(t, flush_retries_after_signal);
	tcase_add_test(t, fd_zero_is_closed);
	tcase_add_test(t, tx_push_fd_bound);
	tcase_add_test(t, tx_closes_fds_once_first_byte_sent);
	tcase_add_test(t, tx_append_slabs);
	tcase_add_test(t, tx_payload_u32_max);
	tcase_add_test(t, tx_push_u32_max_without_memory);
	tcase_add_test(t, txchunk_grow_by_one);
	tcase_add_test(t, txchunk_shrink_by_one);
	tcase_add_test(t, tx_push_chunk_bounds);
	tcase_add_test(t, tx_flush_many_chunks);
	tcase_add_test(t, tx_partial_writes_every_offset);
	tcase_set_timeout(t, 30); /* valgrind */
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
