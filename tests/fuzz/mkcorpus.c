/* SPDX-License-Identifier: Apache-2.0 */
/* Writes the seed corpus of the fuzz target into a directory: each file is
 * one connection's worth of real, protobuf-encoded ClientMessage frames,
 * wrapped in the target's records (see fuzz_session.c) with the fake fds an
 * import needs.  Files named ok-* are exchanges a correct client makes and
 * must run without a single Error or failed op (test_fuzz_replay checks
 * that); edge-* are well-formed frames the daemon must reject cleanly.
 *
 *   mkcorpus DIR */
#include <errno.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpage_layout.h"
#include "devq.pb-c.h"
#include "frame.h"
#include "kernels.h"

/* fd kinds of the target's records */
enum { FD_GOOD = 0, FD_UNSEALED = 1, FD_WSEALED = 2, FD_PIPE = 3, FD_SMALL = 4,
       FD_DEVNULL = 5, FD_RDONLY = 6, FD_SOCKET = 7 };

static uint8_t out[1 << 17];
static size_t outlen;

static void put(const void *p, size_t n)
{
	if (outlen + n > sizeof(out)) {
		fprintf(stderr, "mkcorpus: seed too large\n");
		exit(1);
	}
	memcpy(out + outlen, p, n);
	outlen += n;
}

static void put_le(uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++) {
		uint8_t b = (uint8_t)(v >> (8 * i));
		put(&b, 1);
	}
}

static bool second; /* records go to the target's second connection */

/* A record of raw bytes with nfds fake fds of the given kinds. */
static void rec_raw(const void *p, size_t n, unsigned nfds, const unsigned *kinds)
{
	unsigned k = 0;
	for (unsigned i = 0; i < nfds && i < 5; i++)
		k |= (kinds[i] & 7) << (3 * i);
	put_le((nfds >= 4 ? 0x80 : nfds) | (second ? 0x40 : 0), 1);
	put_le(k, 2);
	put_le(n, 2);
	put(p, n);
}

/* A frame header plus payload, declaring hdr_fds fds. */
static size_t frame(uint8_t *buf, size_t cap, const Devq__ClientMessage *m, unsigned hdr_fds)
{
	size_t plen = protobuf_c_message_get_packed_size(&m->base);
	if (DEVQ_FRAME_HDR + plen > cap) {
		fprintf(stderr, "mkcorpus: frame too large\n");
		exit(1);
	}
	uint32_t l = (uint32_t)plen;
	uint8_t h[8] = { l & 0xff, (l >> 8) & 0xff, (l >> 16) & 0xff, l >> 24, DEVQ_FRAME_CLIENT, 0,
			 hdr_fds & 0xff, hdr_fds >> 8 };
	memcpy(buf, h, 8);
	protobuf_c_message_pack(&m->base, buf + DEVQ_FRAME_HDR);
	return DEVQ_FRAME_HDR + plen;
}

/* Between batch_begin and batch_end, messages (without fds) are appended
 * to one record: the daemon gets them in one write, as a pipelining client
 * sends them, and answers them before any completion is processed. */
static uint8_t batch[60000];
static size_t batch_len;
static bool batching;

static void batch_begin(void)
{
	batching = true;
	batch_len = 0;
}

static void batch_end(void)
{
	batching = false;
	rec_raw(batch, batch_len, 0, NULL);
}

/* One message as one record; fds attached as declared. */
static void msg_fds(const Devq__ClientMessage *m, unsigned nfds, const unsigned *kinds)
{
	uint8_t buf[16384];
	if (batching && !nfds) {
		size_t n = frame(buf, sizeof(buf), m, 0);
		if (batch_len + n > sizeof(batch)) {
			fprintf(stderr, "mkcorpus: batch too large\n");
			exit(1);
		}
		memcpy(batch + batch_len, buf, n);
		batch_len += n;
		return;
	}
	rec_raw(buf, frame(buf, sizeof(buf), m, nfds), nfds, kinds);
}

static void msg(const Devq__ClientMessage *m)
{
	msg_fds(m, 0, NULL);
}

/* A Hello; cpage_sq: it also asks for the completion page and the
 * submit ring. */
static void hello_with(uint32_t lo, uint32_t hi, bool cpage_sq)
{
	Devq__Hello h = DEVQ__HELLO__INIT;
	h.min_version = lo;
	h.max_version = hi;
	h.client_name = "fuzz-seed";
	h.completion_page = h.submit_ring = cpage_sq;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
	m.hello = &h;
	msg(&m);
}

static void hello_v(uint32_t lo, uint32_t hi)
{
	hello_with(lo, hi, false);
}

static void hello(void)
{
	hello_v(1, 1);
}

static void hello_sq(void)
{
	hello_with(1, 1, true);
}

/* A submit-ring record (the target's 0x20 flag, with flags among 0x10 and
 * 0x08): the payload goes into the ring as an entry of n bytes at the
 * socket offset "bytes sent so far + delta". */
static void rec_ring(const void *p, size_t n, unsigned flags, int16_t delta)
{
	put_le(0x20 | flags | (second ? 0x40 : 0), 1);
	put_le((uint16_t)delta, 2);
	put_le(n, 2);
	put(p, n);
}

/* A message as a submit-ring record. */
static void ring_msg(const Devq__ClientMessage *m, unsigned flags, int16_t delta)
{
	uint8_t buf[16384];
	size_t n = protobuf_c_message_get_packed_size(&m->base);
	if (n > sizeof(buf)) {
		fprintf(stderr, "mkcorpus: message too large\n");
		exit(1);
	}
	protobuf_c_message_pack(&m->base, buf);
	rec_ring(buf, n, flags, delta);
}

static void create(uint64_t id, uint64_t size, int kind)
{
	Devq__CreateBuffer c = DEVQ__CREATE_BUFFER__INIT;
	c.id = id;
	c.size = size;
	c.kind = kind;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_CREATE_BUFFER;
	m.create_buffer = &c;
	msg(&m);
}

static void import_n(uint64_t id, uint64_t size, int ro, unsigned nfds, const unsigned *kinds)
{
	Devq__ImportBuffer c = DEVQ__IMPORT_BUFFER__INIT;
	c.id = id;
	c.size = size;
	c.read_only = ro;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_IMPORT_BUFFER;
	m.import_buffer = &c;
	msg_fds(&m, nfds, kinds);
}

static void import(uint64_t id, uint64_t size, int ro, unsigned kind)
{
	import_n(id, size, ro, 1, &kind);
}

static void release(uint64_t id)
{
	Devq__ReleaseBuffer r = DEVQ__RELEASE_BUFFER__INIT;
	r.id = id;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_RELEASE_BUFFER;
	m.release_buffer = &r;
	msg(&m);
}

static void queue_msg_prio(uint32_t id, bool reset, int32_t priority)
{
	Devq__OpenQueue o = DEVQ__OPEN_QUEUE__INIT;
	Devq__ResetQueue r = DEVQ__RESET_QUEUE__INIT;
	o.id = r.id = id;
	o.priority = priority;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	if (reset) {
		m.body_case = DEVQ__CLIENT_MESSAGE__BODY_RESET_QUEUE;
		m.reset_queue = &r;
	} else {
		m.body_case = DEVQ__CLIENT_MESSAGE__BODY_OPEN_QUEUE;
		m.open_queue = &o;
	}
	msg(&m);
}

static void queue_msg(uint32_t id, bool reset)
{
	queue_msg_prio(id, reset, 0);
}

static void empty_msg(Devq__ClientMessage__BodyCase c)
{
	Devq__ListExecutables l = DEVQ__LIST_EXECUTABLES__INIT;
	Devq__GetStatus g = DEVQ__GET_STATUS__INIT;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = c;
	if (c == DEVQ__CLIENT_MESSAGE__BODY_LIST_EXECUTABLES)
		m.list_executables = &l;
	else
		m.get_status = &g;
	msg(&m);
}

/* ---- ops: a small arena, freed with each submit ------------------------ */

#define MAXOPS 64
static Devq__Op ops[MAXOPS];
static Devq__Op *opp[MAXOPS];
static Devq__KernelOp kops[MAXOPS];
static Devq__CopyOp cops[MAXOPS];
static Devq__FillOp fops[MAXOPS];
static Devq__Arg args[MAXOPS][DEVQ_MAX_PARAMS];
static Devq__Arg *argp[MAXOPS][DEVQ_MAX_PARAMS];
static Devq__BufferArg bargs[MAXOPS][DEVQ_MAX_PARAMS];
static Devq__Wait waits[MAXOPS][4];
static Devq__Wait *waitp[MAXOPS][4];
static unsigned nops;

static Devq__Op *op_new(uint32_t queue)
{
	if (nops == MAXOPS) {
		fprintf(stderr, "mkcorpus: too many ops\n");
		exit(1);
	}
	Devq__Op *o = &ops[nops];
	devq__op__init(o);
	o->queue = queue;
	o->client_submit_ns = 1000 + nops;
	opp[nops] = o;
	nops++;
	return o;
}

static void op_wait(Devq__Op *o, uint32_t queue, uint64_t point)
{
	unsigned i = (unsigned)(o - ops);
	devq__wait__init(&waits[i][o->n_waits]);
	waits[i][o->n_waits].queue = queue;
	waits[i][o->n_waits].point = point;
	waitp[i][o->n_waits] = &waits[i][o->n_waits];
	o->waits = waitp[i];
	o->n_waits++;
}

static uint32_t exec_id(const char *name)
{
	const struct devq_kernel *k = devq_kernel_find(name);
	if (!k) {
		fprintf(stderr, "mkcorpus: no executable %s in the manifest\n", name);
		exit(1);
	}
	return (uint32_t)(k - devq_kernels);
}

/* kernel(q, "saxpy_f32", "n", 'u', 1024, "a", 'f', 2, "x", 'b', id, offset, NULL) */
static Devq__Op *kernel(uint32_t queue, const char *exe, ...)
{
	Devq__Op *o = op_new(queue);
	unsigned i = (unsigned)(o - ops);
	Devq__KernelOp *k = &kops[i];
	devq__kernel_op__init(k);
	k->executable = exec_id(exe);
	k->args = argp[i];
	va_list ap;
	va_start(ap, exe);
	const char *name;
	while ((name = va_arg(ap, const char *))) {
		Devq__Arg *a = &args[i][k->n_args];
		devq__arg__init(a);
		a->name = (char *)name;
		int t = va_arg(ap, int);
		switch (t) {
		case 'u':
			a->value_case = DEVQ__ARG__VALUE_U64;
			a->u64 = va_arg(ap, uint64_t);
			break;
		case 'w':
			a->value_case = DEVQ__ARG__VALUE_U32;
			a->u32 = va_arg(ap, uint32_t);
			break;
		case 'f':
			a->value_case = DEVQ__ARG__VALUE_F32;
			a->f32 = (float)va_arg(ap, double);
			break;
		case 'i':
			a->value_case = DEVQ__ARG__VALUE_I64;
			a->i64 = va_arg(ap, int64_t);
			break;
		default: {
			Devq__BufferArg *b = &bargs[i][k->n_args];
			devq__buffer_arg__init(b);
			b->id = va_arg(ap, uint64_t);
			b->offset = va_arg(ap, uint64_t);
			a->value_case = DEVQ__ARG__VALUE_BUFFER;
			a->buffer = b;
			break;
		}
		}
		argp[i][k->n_args] = a;
		k->n_args++;
	}
	va_end(ap);
	o->body_case = DEVQ__OP__BODY_KERNEL;
	o->kernel = k;
	return o;
}

static Devq__Op *copy(uint32_t queue, uint64_t src, uint64_t soff, uint64_t dst, uint64_t doff,
		      uint64_t size)
{
	Devq__Op *o = op_new(queue);
	unsigned i = (unsigned)(o - ops);
	Devq__CopyOp *c = &cops[i];
	devq__copy_op__init(c);
	devq__buffer_arg__init(&bargs[i][0]);
	devq__buffer_arg__init(&bargs[i][1]);
	bargs[i][0].id = src;
	bargs[i][0].offset = soff;
	bargs[i][1].id = dst;
	bargs[i][1].offset = doff;
	c->src = &bargs[i][0];
	c->dst = &bargs[i][1];
	c->size = size;
	o->body_case = DEVQ__OP__BODY_COPY;
	o->copy = c;
	return o;
}

static Devq__Op *fill(uint32_t queue, uint64_t dst, uint64_t off, uint64_t size, uint32_t pat)
{
	Devq__Op *o = op_new(queue);
	unsigned i = (unsigned)(o - ops);
	Devq__FillOp *f = &fops[i];
	devq__fill_op__init(f);
	devq__buffer_arg__init(&bargs[i][0]);
	bargs[i][0].id = dst;
	bargs[i][0].offset = off;
	f->dst = &bargs[i][0];
	f->size = size;
	f->pattern = pat;
	o->body_case = DEVQ__OP__BODY_FILL;
	o->fill = f;
	return o;
}

/* Sends the ops built since the last submit as one batch. */
static void submit(void)
{
	Devq__Submit s = DEVQ__SUBMIT__INIT;
	s.n_ops = nops;
	s.ops = opp;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_SUBMIT;
	m.submit = &s;
	msg(&m);
	nops = 0;
}

/* The ops built since the last submit as one Submit in the submit ring. */
static void ring_submit(unsigned flags, int16_t delta)
{
	Devq__Submit s = DEVQ__SUBMIT__INIT;
	s.n_ops = nops;
	s.ops = opp;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_SUBMIT;
	m.submit = &s;
	ring_msg(&m, flags, delta);
	nops = 0;
}

#define U(v) 'u', (uint64_t)(v)
#define W(v) 'w', (uint32_t)(v)
#define F(v) 'f', (double)(v)
#define B(id, off) 'b', (uint64_t)(id), (uint64_t)(off)

/* ---- the seeds ---------------------------------------------------------- */

static const char *outdir;

static void save(const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", outdir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(out, 1, outlen, f) != outlen || fclose(f)) {
		fprintf(stderr, "mkcorpus: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	outlen = 0;
}

static void seed_ok(void)
{
	hello();
	save("ok-hello");

	hello();
	empty_msg(DEVQ__CLIENT_MESSAGE__BODY_LIST_EXECUTABLES);
	empty_msg(DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS);
	save("ok-list-status");

	hello();
	create(1, 4096, DEVQ__BUFFER_KIND__SHARED);
	create(2, 4096, DEVQ__BUFFER_KIND__DEVICE);
	queue_msg(1, false);
	fill(1, 1, 0, 4096, 0xdeadbeef);
	copy(1, 1, 0, 2, 0, 4096);
	copy(1, 2, 3, 1, 7, 100);
	submit();
	release(1);
	release(2);
	save("ok-create-fill-copy");

	hello();
	import(1, 4096, 0, FD_GOOD);
	import(2, 4096, 1, FD_RDONLY);
	import(3, 4096, 1, FD_WSEALED);
	create(4, 8, DEVQ__BUFFER_KIND__SHARED);
	queue_msg(1, false);
	kernel(1, "checksum", "n", U(4096), "data", B(2, 0), "out", B(4, 0), NULL);
	fill(1, 1, 4, 4092, 7);
	kernel(1, "checksum", "n", U(4096), "data", B(3, 0), "out", B(4, 0), NULL);
	submit();
	for (int i = 1; i <= 4; i++)
		release((uint64_t)i);
	save("ok-import");

	/* Every executable, on two queues, with explicit waits and hazards. */
	hello();
	create(1, 4096, DEVQ__BUFFER_KIND__SHARED);
	create(2, 4096, DEVQ__BUFFER_KIND__SHARED);
	create(3, 4096, DEVQ__BUFFER_KIND__DEVICE);
	create(4, 16, DEVQ__BUFFER_KIND__SHARED);
	queue_msg(1, false);
	queue_msg(2, false);
	kernel(1, "fill_u32", "n", U(1024), "value", W(0x3f800000), "dst", B(1, 0), NULL);
	kernel(2, "fill_u32", "n", U(1024), "value", W(0x40000000), "dst", B(2, 0), NULL);
	op_wait(kernel(2, "saxpy_f32", "n", U(1024), "a", F(2), "x", B(1, 0), "y", B(2, 0), NULL),
		1, 1);
	op_wait(kernel(1, "vadd_f32", "n", U(1024), "a", B(1, 0), "b", B(2, 0), "c", B(3, 0), NULL),
		2, 2);
	kernel(2, "reduce_sum_f32", "n", U(1024), "x", B(3, 0), "out", B(4, 0), NULL);
	kernel(1, "checksum", "n", U(4096), "data", B(3, 0), "out", B(4, 8), NULL);
	kernel(2, "copy", "n", U(4096), "src", B(3, 0), "dst", B(1, 0), NULL);
	kernel(1, "spin", "ns", U(1000), NULL);
	op_wait(kernel(2, "spin_buf", "ns", U(1000), "n", U(4096), "buf", B(1, 0), NULL), 1, 4);
	submit();
	queue_msg(1, true);
	fill(1, 2, 0, 4096, 0);
	submit();
	for (int i = 1; i <= 4; i++)
		release((uint64_t)i);
	save("ok-kernels");

	/* Several batches on three queues; releases while ops are in flight,
	 * then an id reused once released. */
	hello();
	create(1, 65536, DEVQ__BUFFER_KIND__SHARED);
	create(2, 65536, DEVQ__BUFFER_KIND__DEVICE);
	for (uint32_t q = 1; q <= 3; q++)
		queue_msg_prio(q, false, q == 3); /* queue 3 on a high-priority stream */
	for (int round = 0; round < 4; round++) {
		for (uint32_t q = 1; q <= 3; q++) {
			Devq__Op *o = fill(q, 1, 4096 * q, 4096, 0x01010101u * (uint32_t)round);
			if (round)
				op_wait(o, q % 3 + 1, (uint64_t)round * 2);
			copy(q, 1, 4096 * q, 2, 4096 * q, 4096);
		}
		submit();
	}
	kernel(1, "spin_buf", "ns", U(100000), "n", U(65536), "buf", B(1, 0), NULL);
	submit();
	release(1);
	release(2);
	save("ok-batches");

	/* Fds split from frames: an import's fd rides on its own frame even
	 * when the frame arrives in two pieces. */
	hello();
	{
		Devq__ImportBuffer c = DEVQ__IMPORT_BUFFER__INIT;
		c.id = 9;
		c.size = 4096;
		Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
		m.body_case = DEVQ__CLIENT_MESSAGE__BODY_IMPORT_BUFFER;
		m.import_buffer = &c;
		uint8_t buf[256];
		size_t n = frame(buf, sizeof(buf), &m, 1);
		unsigned k = FD_GOOD;
		rec_raw(buf, 3, 1, &k);
		rec_raw(buf + 3, n - 3, 0, NULL);
	}
	release(9);
	save("ok-split-frame");

	/* Two sessions of one user, interleaved, with the same ids: each sees
	 * only its own buffers and queues. */
	for (int i = 0; i < 2; i++) {
		second = i;
		hello();
		create(1, 4096, DEVQ__BUFFER_KIND__SHARED);
		queue_msg(1, false);
	}
	for (int i = 0; i < 2; i++) {
		second = i;
		kernel(1, "fill_u32", "n", U(1024), "value", W(i + 1), "dst", B(1, 0), NULL);
		kernel(1, "spin_buf", "ns", U(1000), "n", U(4096), "buf", B(1, 0), NULL);
		submit();
	}
	for (int i = 1; i >= 0; i--) {
		second = i;
		release(1);
	}
	second = false;
	save("ok-two-sessions");
}

static void seed_edge(void)
{
	/* Imports of everything that is not an acceptable memfd. */
	hello();
	import(1, 4096, 0, FD_UNSEALED);
	import(2, 4096, 0, FD_WSEALED);
	import(3, 4096, 0, FD_PIPE);
	import(4, 4096, 0, FD_SMALL);
	import(5, 4096, 0, FD_DEVNULL);
	import(6, 4096, 0, FD_RDONLY);
	import(7, 4096, 0, FD_SOCKET);
	import_n(8, 4096, 0, 0, NULL);
	{
		unsigned k[2] = { FD_GOOD, FD_GOOD };
		import_n(9, 4096, 0, 2, k);
	}
	import(10, 1u << 30, 0, FD_GOOD);
	save("edge-imports");

	/* Requests the daemon must refuse with an Error and keep serving. */
	hello();
	hello();
	create(1, 4096, DEVQ__BUFFER_KIND__SHARED);
	create(1, 4096, DEVQ__BUFFER_KIND__SHARED);
	create(2, 0, DEVQ__BUFFER_KIND__SHARED);
	create(3, 4096, 7);
	create(4, 1ull << 40, DEVQ__BUFFER_KIND__DEVICE);
	release(99);
	release(1);
	release(1);
	queue_msg(5, true);
	for (uint32_t q = 1; q <= 10; q++)
		queue_msg(q, false);
	queue_msg(1, false);
	submit(); /* empty */
	fill(77, 1, 0, 4, 0);
	submit();
	create(5, 64, DEVQ__BUFFER_KIND__SHARED);
	kernel(1, "fill_u32", "n", U(16), "dst", B(5, 0), NULL);
	kernel(1, "fill_u32", "n", U(16), "value", U(1), "dst", B(5, 0), NULL);
	kernel(1, "fill_u32", "n", U(17), "value", W(1), "dst", B(5, 0), NULL);
	kernel(1, "fill_u32", "n", U(1), "value", W(1), "dst", B(5, 2), NULL);
	kernel(1, "fill_u32", "n", U(1), "value", W(1), "value", W(2), "dst", B(5, 0), NULL);
	kernel(1, "fill_u32", "n", U(1), "value", W(1), "dst", B(6, 0), NULL);
	kernel(1, "fill_u32", "n", U(1), "value", W(1), "bogus", W(1), "dst", B(5, 0), NULL);
	kernel(1, "spin", "ns", U(1ull << 40), NULL);
	kernel(1, "copy", "n", U(UINT64_MAX), "src", B(5, 0), "dst", B(5, 1), NULL);
	op_wait(fill(2, 5, 0, 64, 1), 2, 5);
	op_wait(fill(2, 5, 0, 64, 1), 1, 2);
	fill(2, 5, 2, 8, 0);
	fill(2, 5, 0, 6, 0);
	copy(2, 5, 60, 5, 0, 8);
	copy(2, 5, UINT64_MAX, 5, 0, 2);
	{
		Devq__Op *o = op_new(3); /* no body */
		(void)o;
	}
	submit();
	queue_msg(1, true);
	fill(1, 5, 0, 64, 3);
	submit();
	release(5);
	fill(1, 5, 0, 64, 3);
	submit();
	save("edge-requests");

	/* A session naming another session's buffer and queue. */
	hello();
	create(7, 4096, DEVQ__BUFFER_KIND__SHARED);
	queue_msg(3, false);
	second = true;
	hello();
	queue_msg(1, false);
	fill(1, 7, 0, 64, 1);
	fill(3, 7, 0, 64, 1);
	submit();
	release(7);
	second = false;
	save("edge-cross-session");

	/* Before Hello; then a refused version. */
	create(1, 4096, DEVQ__BUFFER_KIND__SHARED);
	save("edge-no-hello");
	hello_v(5, 9);
	save("edge-version");
	hello_v(3, 1);
	save("edge-version-inverted");

	/* Framing: more fds than declared, fewer, none claimed, a flood, an
	 * oversized frame, a wrong frame type and a payload that is not a
	 * ClientMessage. */
	{
		unsigned k[3] = { FD_GOOD, FD_PIPE, FD_DEVNULL };
		hello();
		Devq__ListExecutables l = DEVQ__LIST_EXECUTABLES__INIT;
		Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
		m.body_case = DEVQ__CLIENT_MESSAGE__BODY_LIST_EXECUTABLES;
		m.list_executables = &l;
		uint8_t buf[256];
		size_t n = frame(buf, sizeof(buf), &m, 1);
		rec_raw(buf, n, 1, k); /* a List with an fd it does not use */
		rec_raw(buf, n, 3, k);
		save("edge-fds-extra");

		hello();
		n = frame(buf, sizeof(buf), &m, 2);
		rec_raw(buf, n, 1, k);
		save("edge-fds-missing");

		/* fds on the first bytes of a frame that declares none */
		hello();
		n = frame(buf, sizeof(buf), &m, 0);
		rec_raw(buf, 3, 2, k);
		rec_raw(buf + 3, n - 3, 0, NULL);
		save("edge-fds-orphan");

		hello();
		rec_raw(buf, n, 253, k);
		save("edge-fds-flood");

		hello();
		uint8_t big[8] = { 0, 0, 0x20, 0, 1, 0, 0, 0 };
		rec_raw(big, sizeof(big), 0, NULL);
		save("edge-frame-too-big");

		hello();
		n = frame(buf, sizeof(buf), &m, 0);
		buf[4] = 2;
		rec_raw(buf, n, 0, NULL);
		save("edge-frame-type");

		hello();
		uint8_t junk[12] = { 4, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff };
		rec_raw(junk, sizeof(junk), 0, NULL);
		save("edge-frame-junk");

		hello();
		/* field 127, length-delimited, empty: no body the daemon knows */
		uint8_t unknown[11] = { 3, 0, 0, 0, 1, 0, 0, 0, 0xfa, 0x07, 0x00 };
		rec_raw(unknown, sizeof(unknown), 0, NULL);
		empty_msg(DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS);
		save("edge-unknown-body");
	}
}

/* Failure ranges and ResetQueue (issue 14 #3 and #4): the driver checks
 * that no point completed OK is recorded as failed, and that a queue's
 * failed ranges stay sorted and within DEVQ_FAIL_RANGES_MAX. */
static void seed_reset(void)
{
	/* fail, reset, ok, reset in one write; then a wait on the ok point. */
	hello();
	create(1, 4096, 0);
	queue_msg(1, false);
	queue_msg(2, false);
	batch_begin();
	fill(1, 99, 0, 16, 1); /* no buffer 99: fails at its point */
	submit();
	queue_msg(1, true);
	fill(1, 1, 0, 16, 2);
	submit();
	queue_msg(1, true);
	batch_end();
	op_wait(fill(2, 1, 0, 16, 3), 1, 2);
	submit();
	save("reset-fail-ok-reset");

	/* Many disjoint failed ranges, each fail-reset-ok, in a few writes. */
	hello();
	create(1, 4096, 0);
	queue_msg(1, false);
	for (int r = 0; r < 4; r++) {
		batch_begin();
		for (int i = 0; i < 300; i++) {
			fill(1, 99, 0, 16, 1);
			submit();
			queue_msg(1, true);
			fill(1, 1, 0, 16, 2);
			submit();
		}
		batch_end();
	}
	save("reset-many-ranges");
}

/* The submit ring (proto/README.md, *The submit ring*). */
static void seed_ring(void)
{
	/* Submits through the ring after the socket's frames before them; one
	 * not rung, taken before the status request that follows it. */
	hello_sq();
	create(1, 4096, DEVQ__BUFFER_KIND__SHARED);
	queue_msg(1, false);
	fill(1, 1, 0, 4096, 0x5a5a5a5a);
	ring_submit(0, 0);
	fill(1, 1, 0, 64, 1);
	fill(1, 1, 64, 64, 2);
	ring_submit(0x10, 0);
	empty_msg(DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS);
	release(1);
	save("ok-submit-ring");

	/* An entry rung before the OpenQueue frame it follows is sent. */
	hello_sq();
	create(1, 4096, DEVQ__BUFFER_KIND__SHARED);
	fill(1, 1, 0, 64, 3);
	Devq__OpenQueue o = DEVQ__OPEN_QUEUE__INIT;
	o.id = 1;
	Devq__ClientMessage mq = DEVQ__CLIENT_MESSAGE__INIT;
	mq.body_case = DEVQ__CLIENT_MESSAGE__BODY_OPEN_QUEUE;
	mq.open_queue = &o;
	ring_submit(0, (int16_t)(DEVQ_FRAME_HDR + protobuf_c_message_get_packed_size(&mq.base)));
	msg(&mq);
	release(1);
	save("ok-submit-ring-early");

	/* Each of the ring's rules broken. */
	hello_sq();
	create(1, 4096, DEVQ__BUFFER_KIND__SHARED);
	queue_msg(1, false);
	fill(1, 1, 0, 64, 4);
	ring_submit(0x08, 0);
	save("edge-ring-tail");

	hello_sq();
	uint8_t big[DEVQ_SQE_FRAME + 1];
	memset(big, 0, sizeof(big));
	rec_ring(big, sizeof(big), 0, 0);
	save("edge-ring-too-long");

	hello_sq();
	create(1, 4096, DEVQ__BUFFER_KIND__SHARED);
	queue_msg(1, false);
	fill(1, 1, 0, 64, 5);
	ring_submit(0x10, 0);
	fill(1, 1, 0, 64, 6);
	ring_submit(0, -1);
	save("edge-ring-offset-back");

	hello_sq();
	Devq__GetStatus g = DEVQ__GET_STATUS__INIT;
	Devq__ClientMessage mg = DEVQ__CLIENT_MESSAGE__INIT;
	mg.body_case = DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS;
	mg.get_status = &g;
	ring_msg(&mg, 0, 0);
	save("edge-ring-not-submit");

	/* An entry whose offset the socket never reaches; and one without a
	 * ring (no Hello asked for it): both wait or drop, harmlessly, and
	 * nothing is refused (hence not an edge- seed). */
	hello_sq();
	create(1, 4096, DEVQ__BUFFER_KIND__SHARED);
	queue_msg(1, false);
	fill(1, 1, 0, 64, 7);
	ring_submit(0, 0x7fff);
	empty_msg(DEVQ__CLIENT_MESSAGE__BODY_GET_STATUS);
	second = true;
	hello();
	fill(1, 1, 0, 64, 8);
	ring_submit(0, 0);
	second = false;
	save("ring-never");
}

/* Op.deadline_us: deadlines that pass and ones that do not, through the
 * socket and the submit ring. */
static void seed_deadline(void)
{
	/* Deadlines no op here comes near: every op runs. */
	hello_sq();
	create(1, 4096, DEVQ__BUFFER_KIND__SHARED);
	queue_msg(1, false);
	fill(1, 1, 0, 4096, 0x11111111)->deadline_us = 60000000;
	kernel(1, "fill_u32", "n", U(64), "value", W(2), "dst", B(1, 0), NULL)->deadline_us =
		UINT64_MAX;
	submit();
	fill(1, 1, 0, 64, 3)->deadline_us = 60000000;
	ring_submit(0, 0);
	release(1);
	save("ok-deadline");

	/* One that passes behind a 20 ms spin (deadline_exceeded), the ops
	 * after it and one waiting on it from another queue (dependency
	 * failed), and a replayable op with a deadline (invalid_argument). */
	hello();
	create(1, 4096, DEVQ__BUFFER_KIND__SHARED);
	queue_msg(1, false);
	queue_msg(2, false);
	kernel(1, "spin", "ns", U(20000000), NULL);
	fill(1, 1, 0, 64, 4)->deadline_us = 1;
	fill(1, 1, 64, 64, 5);
	op_wait(fill(2, 1, 128, 64, 6), 1, 2);
	submit();
	Devq__Op *r = fill(2, 1, 0, 64, 7);
	r->replayable = true;
	r->deadline_us = 1000000;
	submit();
	release(1);
	save("edge-deadline");
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: mkcorpus DIR\n");
		return 2;
	}
	outdir = argv[1];
	seed_ok();
	seed_edge();
	seed_reset();
	seed_ring();
	seed_deadline();
	return 0;
}
