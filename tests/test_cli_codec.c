/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of libdevq's hand-written codecs: client/submit_enc.c (the
 * Submit frame) and client/cmpl_dec.c (the Completions frame), and of
 * devq_tx_append (proto/frame.c), the send queue they write into.
 *
 * protobuf-c is the reference.  The encoder must write, for random batches
 * of every op kind, argument type, wait count and flag, exactly the bytes
 * protobuf-c packed from the structs libdevq built before (ref_pack below
 * builds them the same way).  The decoder must accept exactly the frames
 * protobuf-c accepts and, when both accept, give the same records:
 * frames protobuf-c packed, frames written field by field with the oddities
 * the wire format allows (unknown fields, repeated scalars and Timings,
 * long tags and varints, embedded NULs), every truncation of them, byte
 * flips and random bytes.  Inputs are random but reproducible:
 * DEVQ_TEST_SEED picks the seed, and every failure names the seed and
 * the case.
 *
 * And the field numbers and wire types every hand-written codec uses
 * (proto/wire.h, DEVQ_WIRE_FIELDS: libdevq's two and the daemon's) against
 * protobuf-c's descriptors of proto/devq.proto. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cmpl_dec.h"
#include "submit_enc.h"
#include "devq.pb-c.h"
#include "frame.h"
#include "test_rng.h"
#include "wire.h"

/* Check's assertions report every passing one to the parent process (a
 * write each); the loops below make millions of checks, so they fail
 * through this instead. */
#define REQUIRE(cond, ...)                          \
	do {                                        \
		if (!(cond))                        \
			ck_abort_msg(__VA_ARGS__);  \
	} while (0)

/* ---- reproducible random inputs --------------------------------------- */

static uint64_t seed;

static void reseed(uint64_t salt)
{
	seed = seed_from_env(0xc0dec2026ULL);
	rng_state = (seed ^ salt) | 1;
}

static char longname[400];

/* NULL, "", short names, and long ones (an Arg, a KernelOp and an Op over
 * 127 bytes need a wider length prefix). */
static const char *rnd_name(void)
{
	static const char *const names[] = { "n", "ns", "x", "value", "dst", "a_rather_long_name" };
	uint64_t k = rnd() % 16;
	if (k == 0)
		return NULL;
	if (k == 1)
		return "";
	if (k == 2)
		return longname + (rnd() % sizeof(longname)); /* 0..399 chars */
	return names[rnd() % (sizeof(names) / sizeof(names[0]))];
}

/* ---- the encoder's reference: what libdevq built before ---------------- */

struct wire_op {
	Devq__Op op;
	Devq__KernelOp k;
	Devq__CopyOp c;
	Devq__FillOp f;
	Devq__BufferArg src, dst;
};

/* The protobuf-c structs libdevq's submit() filled before the encoder
 * replaced it (same mapping, field by field), packed by protobuf-c. */
static uint8_t *ref_pack(const struct devq_submit_enc_batch *b, size_t *len)
{
	size_t n = b->n, nargs = 0, nwaits = 0;
	for (size_t i = 0; i < n; i++) {
		nargs += b->ops[i].kind == DEVQ_OP_KERNEL ? b->ops[i].nargs : 0;
		nwaits += b->ops[i].nwaits;
	}
	struct wire_op *w = calloc(n, sizeof(*w));
	Devq__Op **wp = calloc(n, sizeof(*wp));
	Devq__Arg *args = calloc(nargs + 1, sizeof(*args));
	Devq__Arg **argp = calloc(nargs + 1, sizeof(*argp));
	Devq__BufferArg *bargs = calloc(nargs + 1, sizeof(*bargs));
	Devq__Wait *waits = calloc(nwaits + 1, sizeof(*waits));
	Devq__Wait **waitp = calloc(nwaits + 1, sizeof(*waitp));
	REQUIRE(w && wp && args && argp && bargs && waits && waitp, "out of memory");
	size_t ai = 0, wi = 0;
	for (size_t i = 0; i < n; i++) {
		const struct devq_op *o = &b->ops[i];
		struct wire_op *x = &w[i];
		devq__op__init(&x->op);
		x->op.queue = o->queue;
		x->op.client_submit_ns = b->submit_ns;
		x->op.no_timing = o->no_timing;
		x->op.replayable = b->replayable;
		if (b->ext) /* entries ext_size bytes apart, as devq_submit_ex takes them */
			memcpy(&x->op.deadline_us,
			       (const uint8_t *)b->ext + i * b->ext_size +
				       offsetof(struct devq_op_ext, deadline_us),
			       sizeof(x->op.deadline_us));
		x->op.waits = &waitp[wi];
		x->op.n_waits = o->nwaits;
		for (size_t j = 0; j < o->nwaits; j++, wi++) {
			devq__wait__init(&waits[wi]);
			waits[wi].queue = o->waits[j].queue;
			waits[wi].point = o->waits[j].point;
			waitp[wi] = &waits[wi];
		}
		switch (o->kind) {
		case DEVQ_OP_KERNEL:
			devq__kernel_op__init(&x->k);
			x->k.executable = o->exec->id;
			x->k.args = &argp[ai];
			x->k.n_args = o->nargs;
			for (size_t j = 0; j < o->nargs; j++, ai++) {
				const struct devq_arg *a = &o->args[j];
				Devq__Arg *d = &args[ai];
				devq__arg__init(d);
				d->name = (char *)a->name;
				switch (a->type) {
				case DEVQ_ARG_U64: d->value_case = DEVQ__ARG__VALUE_U64; d->u64 = a->v.u64; break;
				case DEVQ_ARG_U32: d->value_case = DEVQ__ARG__VALUE_U32; d->u32 = a->v.u32; break;
				case DEVQ_ARG_I64: d->value_case = DEVQ__ARG__VALUE_I64; d->i64 = a->v.i64; break;
				case DEVQ_ARG_I32: d->value_case = DEVQ__ARG__VALUE_I32; d->i32 = a->v.i32; break;
				case DEVQ_ARG_F32: d->value_case = DEVQ__ARG__VALUE_F32; d->f32 = a->v.f32; break;
				case DEVQ_ARG_F64: d->value_case = DEVQ__ARG__VALUE_F64; d->f64 = a->v.f64; break;
				case DEVQ_ARG_BUFFER:
					devq__buffer_arg__init(&bargs[ai]);
					bargs[ai].id = a->v.buf.buf ? a->v.buf.buf->id : 0;
					bargs[ai].offset = a->v.buf.offset;
					d->value_case = DEVQ__ARG__VALUE_BUFFER;
					d->buffer = &bargs[ai];
					break;
				}
				argp[ai] = d;
			}
			x->op.body_case = DEVQ__OP__BODY_KERNEL;
			x->op.kernel = &x->k;
			break;
		case DEVQ_OP_COPY:
			devq__copy_op__init(&x->c);
			devq__buffer_arg__init(&x->src);
			devq__buffer_arg__init(&x->dst);
			x->src.id = o->src ? o->src->id : 0;
			x->src.offset = o->src_offset;
			x->dst.id = o->dst ? o->dst->id : 0;
			x->dst.offset = o->dst_offset;
			x->c.src = &x->src;
			x->c.dst = &x->dst;
			x->c.size = o->size;
			x->op.body_case = DEVQ__OP__BODY_COPY;
			x->op.copy = &x->c;
			break;
		case DEVQ_OP_FILL:
			devq__fill_op__init(&x->f);
			devq__buffer_arg__init(&x->dst);
			x->dst.id = o->dst ? o->dst->id : 0;
			x->dst.offset = o->dst_offset;
			x->f.dst = &x->dst;
			x->f.size = o->size;
			x->f.pattern = o->pattern;
			x->op.body_case = DEVQ__OP__BODY_FILL;
			x->op.fill = &x->f;
			break;
		}
		wp[i] = &x->op;
	}
	Devq__Submit s = DEVQ__SUBMIT__INIT;
	s.n_ops = n;
	s.ops = wp;
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_SUBMIT;
	m.submit = &s;
	*len = protobuf_c_message_get_packed_size(&m.base);
	uint8_t *buf = malloc(*len + 1);
	REQUIRE(buf, "out of memory");
	REQUIRE(protobuf_c_message_pack(&m.base, buf) == *len, "protobuf-c packed another size");
	free(w);
	free(wp);
	free(args);
	free(argp);
	free(bargs);
	free(waits);
	free(waitp);
	return buf;
}

/* ---- random batches ---------------------------------------------------- */

#define MAX_OPS 80
#define MAX_ARGS 12
#define MAX_WAITS 12

static struct devq_exec execs[4];
static struct devq_buffer bufs[4];

struct batch {
	struct devq_op ops[MAX_OPS];
	struct devq_arg args[MAX_OPS][MAX_ARGS];
	struct devq_wait waits[MAX_OPS][MAX_WAITS];
	struct devq_op_ext ext[MAX_OPS];
};

/* A deadline: mostly none, else of every varint width. */
static uint64_t rnd_deadline(void)
{
	switch (rnd() % 4) {
	case 0: return 0;
	case 1: return 1 + rnd() % 127;
	case 2: return rnd_u64();
	default: return rnd() % 2 ? UINT64_MAX : 5000;
	}
}

static const struct devq_buffer *rnd_buf(void)
{
	return rnd() % 8 ? &bufs[rnd() % 4] : NULL;
}

static float rnd_f32(void)
{
	static const float odd[] = { 0.0f, -0.0f, 1.0f, -2.5f, INFINITY, -INFINITY, NAN };
	if (rnd() % 2)
		return odd[rnd() % (sizeof(odd) / sizeof(odd[0]))];
	uint32_t bits = (uint32_t)rnd();
	float f;
	memcpy(&f, &bits, 4);
	return f;
}

static double rnd_f64(void)
{
	static const double odd[] = { 0.0, -0.0, 1.0, -2.5, INFINITY, -INFINITY, NAN };
	if (rnd() % 2)
		return odd[rnd() % (sizeof(odd) / sizeof(odd[0]))];
	uint64_t bits = rnd();
	double d;
	memcpy(&d, &bits, 8);
	return d;
}

static void rnd_arg(struct devq_arg *a)
{
	memset(a, 0, sizeof(*a));
	a->name = rnd_name();
	/* Now and then a type outside the enum: no value, as libdevq did. */
	a->type = rnd() % 32 ? (enum devq_arg_type)(rnd() % 7) : (enum devq_arg_type)(7 + rnd() % 5);
	switch (a->type) {
	case DEVQ_ARG_U64: a->v.u64 = rnd_u64(); break;
	case DEVQ_ARG_U32: a->v.u32 = (uint32_t)rnd_u64(); break;
	case DEVQ_ARG_I64: a->v.i64 = (int64_t)rnd_u64(); break;
	case DEVQ_ARG_I32: a->v.i32 = (int32_t)(uint32_t)rnd_u64(); break;
	case DEVQ_ARG_F32: a->v.f32 = rnd_f32(); break;
	case DEVQ_ARG_F64: a->v.f64 = rnd_f64(); break;
	case DEVQ_ARG_BUFFER:
		a->v.buf.buf = rnd_buf();
		a->v.buf.offset = rnd_u64();
		break;
	}
}

static void rnd_op(struct batch *b, size_t i)
{
	struct devq_op *o = &b->ops[i];
	memset(o, 0, sizeof(*o));
	o->queue = (uint32_t)rnd_u64();
	uint64_t k = rnd() % 16;
	o->kind = k < 8 ? DEVQ_OP_KERNEL : k < 11 ? DEVQ_OP_COPY : k < 15 ? DEVQ_OP_FILL
							 : (enum devq_op_kind)(3 + rnd() % 4);
	o->exec = &execs[rnd() % 4];
	o->nargs = rnd() % 4 ? rnd() % 4 : rnd() % (MAX_ARGS + 1);
	for (size_t j = 0; j < o->nargs; j++)
		rnd_arg(&b->args[i][j]);
	o->args = o->nargs || rnd() % 2 ? b->args[i] : NULL;
	o->src = rnd_buf();
	o->dst = rnd_buf();
	o->src_offset = rnd_u64();
	o->dst_offset = rnd_u64();
	o->size = rnd_u64();
	o->pattern = (uint32_t)rnd_u64();
	o->nwaits = rnd() % 3 ? 0 : rnd() % 4 ? 1 + rnd() % 3 : rnd() % (MAX_WAITS + 1);
	for (size_t j = 0; j < o->nwaits; j++)
		b->waits[i][j] = (struct devq_wait){ (uint32_t)rnd_u64(), rnd_u64() };
	o->waits = o->nwaits ? b->waits[i] : NULL;
	o->no_timing = rnd() % 2;
	b->ext[i] = (struct devq_op_ext){ .size = sizeof(b->ext[i]), .deadline_us = rnd_deadline() };
}

static void setup_pools(void)
{
	for (size_t i = 0; i < sizeof(longname) - 1; i++)
		longname[i] = (char)('a' + rnd() % 26);
	longname[sizeof(longname) - 1] = 0;
	for (int i = 0; i < 4; i++) {
		execs[i].id = i == 0 ? 0 : (uint32_t)rnd_u64();
		bufs[i].id = i == 0 ? 0 : rnd_u64();
	}
}

/* Encodes into a buffer of exactly the announced size (ASan and valgrind
 * catch a write past it) and compares with protobuf-c's bytes. */
static void check_batch(const struct devq_submit_enc_batch *b, int set)
{
	size_t len = devq_submit_enc_size(b);
	uint8_t *buf = malloc(len);
	REQUIRE(buf, "out of memory");
	REQUIRE(devq_submit_enc(buf, len, b) == len,
		      "seed %#" PRIx64 " set %d: wrote other than the announced size", seed, set);
	size_t rlen;
	uint8_t *ref = ref_pack(b, &rlen);
	REQUIRE(rlen == len, "seed %#" PRIx64 " set %d (%zu ops): %zu bytes, protobuf-c %zu",
		      seed, set, b->n, len, rlen);
	for (size_t i = 0; i < len; i++)
		REQUIRE(buf[i] == ref[i],
			      "seed %#" PRIx64 " set %d (%zu ops): byte %zu is %#x, protobuf-c %#x",
			      seed, set, b->n, i, buf[i], ref[i]);
	free(ref);
	free(buf);
}

/* ---- encoder tests ----------------------------------------------------- */

START_TEST(enc_one_null_op)
{
	/* The launch-bound workload's op: spin with ns=0, no waits. */
	struct devq_exec spin = { .id = 7 };
	struct devq_arg ns = { .name = "ns", .type = DEVQ_ARG_U64 };
	struct devq_op op = { .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = &spin, .args = &ns,
			      .nargs = 1 };
	struct devq_submit_enc_batch b = { &op, 1, 123456789, false, NULL, 0 };
	reseed(0);
	check_batch(&b, -1);
	/* 3a len 0a len 08 01 10 <stamp> 22 len 08 07 12 06 0a 02 'n' 's' 10 00 */
	uint8_t buf[64];
	size_t len = devq_submit_enc_size(&b);
	ck_assert_uint_le(len, sizeof(buf));
	devq_submit_enc(buf, len, &b);
	ck_assert_uint_eq(buf[0], 0x3a);
	ck_assert_uint_eq(buf[len - 2], 0x10); /* u64 = 0 is written: a oneof member */
	ck_assert_uint_eq(buf[len - 1], 0x00);
}
END_TEST

START_TEST(enc_every_kind_and_type)
{
	/* One op of each kind and one argument of each type, with zero and
	 * non-zero values, flags on and off. */
	reseed(1);
	setup_pools();
	struct devq_arg args[2 * 7];
	for (int t = 0; t < 7; t++) {
		for (int z = 0; z < 2; z++) {
			struct devq_arg *a = &args[2 * t + z];
			memset(a, 0, sizeof(*a));
			a->name = z ? "v" : NULL;
			a->type = (enum devq_arg_type)t;
			if (z) {
				a->v.u64 = 0x1234567890abcdefULL;
				if (t == DEVQ_ARG_BUFFER)
					a->v.buf.buf = &bufs[1];
			}
		}
	}
	struct devq_wait w = { 3, 9 };
	struct devq_op ops[4] = {
		{ .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = &execs[1], .args = args, .nargs = 14 },
		{ .queue = 0, .kind = DEVQ_OP_COPY, .waits = &w, .nwaits = 1, .no_timing = true },
		{ .queue = 2, .kind = DEVQ_OP_FILL, .dst = &bufs[2], .size = 64, .pattern = 0xffffffff },
		{ .queue = 2, .kind = DEVQ_OP_KERNEL, .exec = &execs[0] },
	};
	for (int r = 0; r < 2; r++) {
		for (uint64_t ts = 0; ts < 2; ts++) {
			struct devq_submit_enc_batch b = { ops, 4, ts * UINT64_MAX, r, NULL, 0 };
			check_batch(&b, r * 2 + (int)ts);
		}
	}
}
END_TEST

START_TEST(enc_random_batches)
{
	reseed(2);
	setup_pools();
	static struct batch bt;
	for (int set = 0; set < 4000; set++) {
		size_t n = 1 + (rnd() % 4 ? rnd() % 8 : rnd() % MAX_OPS);
		for (size_t i = 0; i < n; i++)
			rnd_op(&bt, i);
		struct devq_submit_enc_batch b = { bt.ops, n, rnd() % 8 ? rnd_u64() : 0,
						   rnd() % 4 == 0, NULL, 0 };
		if (rnd() % 2) { /* with options (devq_submit_ex) */
			b.ext = bt.ext;
			b.ext_size = sizeof(bt.ext[0]);
		}
		check_batch(&b, set);
	}
}
END_TEST

/* Op.deadline_us (field 31, two tag bytes: 0xf8 0x01), from entries of
 * the caller's size: a later devq.h's larger struct devq_op_ext is read
 * at its own stride, and a deadline of 0 is left out (proto3). */
START_TEST(enc_deadlines)
{
	reseed(4);
	setup_pools();
	struct devq_arg ns = { .name = "ns", .type = DEVQ_ARG_U64 };
	struct devq_op ops[3];
	for (int i = 0; i < 3; i++)
		ops[i] = (struct devq_op){ .queue = 1, .kind = DEVQ_OP_KERNEL, .exec = &execs[1],
					   .args = &ns, .nargs = 1, .no_timing = i == 1 };
	/* A caller's struct of 32 bytes: two members this library does not
	 * know after deadline_us (devq_submit_ex checks them zero). */
	struct {
		struct devq_op_ext e;
		uint64_t later[2];
	} wide[3] = { { { 32, 0, 5000 }, { 0, 0 } },
		      { { 32, 0, 0 }, { 0, 0 } },
		      { { 32, 0, UINT64_MAX }, { 0, 0 } } };
	_Static_assert(sizeof(wide[0]) == 32, "no padding");
	struct devq_submit_enc_batch b = { ops, 3, 42, false, &wide[0].e, sizeof(wide[0]) };
	check_batch(&b, 0);
	uint8_t buf[256];
	size_t len = devq_submit_enc_size(&b);
	ck_assert_uint_le(len, sizeof(buf));
	devq_submit_enc(buf, len, &b);
	/* 5000 = 0x88 0x27 after its tag, once; UINT64_MAX in ten bytes. */
	int found = 0;
	for (size_t i = 0; i + 3 < len; i++)
		found += buf[i] == 0xf8 && buf[i + 1] == 0x01 &&
			 ((buf[i + 2] == 0x88 && buf[i + 3] == 0x27) ||
			  (buf[i + 2] == 0xff && buf[i + 3] == 0xff));
	ck_assert_int_eq(found, 2);
	/* Without options: the same bytes as devq_submit's. */
	struct devq_submit_enc_batch plain = { ops, 3, 42, false, NULL, 0 };
	struct {
		struct devq_op_ext e;
		uint64_t later[2];
	} none[3] = { { { 32, 0, 0 }, { 0, 0 } }, { { 32, 0, 0 }, { 0, 0 } },
		      { { 32, 0, 0 }, { 0, 0 } } };
	struct devq_submit_enc_batch zero = { ops, 3, 42, false, &none[0].e, sizeof(none[0]) };
	uint8_t a[256], z[256];
	size_t la = devq_submit_enc_size(&plain), lz = devq_submit_enc_size(&zero);
	ck_assert_uint_eq(la, lz);
	devq_submit_enc(a, la, &plain);
	devq_submit_enc(z, lz, &zero);
	ck_assert_int_eq(memcmp(a, z, la), 0);
}
END_TEST

START_TEST(enc_wide_prefixes)
{
	/* Every name length 0..399 on a one-arg op, so the Arg, the KernelOp,
	 * the Op and the Submit each cross the 128 and (in a batch) the
	 * 16384-byte length boundary. */
	reseed(3);
	setup_pools();
	static struct batch bt;
	for (size_t l = 0; l < sizeof(longname); l++) {
		for (size_t i = 0; i < MAX_OPS; i++) {
			struct devq_op *o = &bt.ops[i];
			memset(o, 0, sizeof(*o));
			o->queue = 1;
			o->kind = DEVQ_OP_KERNEL;
			o->exec = &execs[1];
			bt.args[i][0] = (struct devq_arg){ .name = longname + sizeof(longname) - 1 - l,
							   .type = DEVQ_ARG_U64, .v.u64 = l };
			o->args = bt.args[i];
			o->nargs = 1;
		}
		struct devq_submit_enc_batch one = { bt.ops, 1, 1, false, NULL, 0 };
		check_batch(&one, (int)l);
		struct devq_submit_enc_batch many = { bt.ops, MAX_OPS, UINT64_MAX, true, NULL, 0 };
		check_batch(&many, (int)l);
	}
}
END_TEST

/* ---- the decoder's reference ------------------------------------------- */

struct dec_stats {
	unsigned other, accepted, rejected;
};

/* Decodes payload with both decoders and asserts they agree: the same
 * accept or reject and, on accept, the same records as libdevq stored them
 * from protobuf-c's (the message through "%s" into 160 bytes). */
static void check_frame_exact(const uint8_t *buf, size_t len, struct dec_stats *st,
			      const char *what, int set);

/* On a copy of exactly len bytes: ASan and valgrind catch a read past the
 * frame (the decoder reads 8 bytes at a time where it may). */
static void check_frame(const uint8_t *buf, size_t len, struct dec_stats *st, const char *what,
			int set)
{
	uint8_t *exact = malloc(len ? len : 1);
	REQUIRE(exact, "out of memory");
	if (len)
		memcpy(exact, buf, len);
	check_frame_exact(exact, len, st, what, set);
	free(exact);
}

static void check_frame_exact(const uint8_t *buf, size_t len, struct dec_stats *st,
			      const char *what, int set)
{
	Devq__DaemonMessage *m = devq__daemon_message__unpack(NULL, len, buf);
	struct devq_cmpl_dec d;
	int r = devq_cmpl_dec_begin(&d, buf, len);
	if (r == DEVQ_CMPL_DEC_OTHER) {
		st->other++;
		if (m)
			devq__daemon_message__free_unpacked(m, NULL);
		return;
	}
	/* Every item takes two bytes at least. */
	static struct devq_completion *got;
	static size_t got_cap;
	size_t cap = len / 2 + 1, n = 0;
	if (cap > got_cap) {
		free(got);
		got = malloc(cap * sizeof(*got));
		got_cap = cap;
		REQUIRE(got, "out of memory");
	}
	if (r == 0) {
		while (n < cap && (r = devq_cmpl_dec_next(&d, &got[n])) == 1)
			n++;
		REQUIRE(n < cap, "seed %#" PRIx64 " %s %d: more items than bytes allow",
			      seed, what, set);
	}
	REQUIRE((r == 0) == (m != NULL),
		      "seed %#" PRIx64 " %s %d (%zu bytes): decoder %s, protobuf-c %s", seed, what,
		      set, len, r == 0 ? "accepts" : "rejects", m ? "accepts" : "rejects");
	if (r < 0) {
		REQUIRE(r == -EPROTO, "decoder returned %d", r);
		st->rejected++;
		return;
	}
	st->accepted++;
	REQUIRE(m->body_case == DEVQ__DAEMON_MESSAGE__BODY_COMPLETIONS, "seed %#" PRIx64 " %s %d: not a Completions frame", seed, what, set);
	REQUIRE(m->completions->n_items == n,
		      "seed %#" PRIx64 " %s %d: %zu items, protobuf-c %zu", seed, what, set, n,
		      m->completions->n_items);
	for (size_t i = 0; i < n; i++) {
		const Devq__Completion *c = m->completions->items[i];
		const struct devq_completion *x = &got[i];
		char msg[sizeof(x->message)];
		snprintf(msg, sizeof(msg), "%s", c->message ? c->message : "");
		REQUIRE(x->queue == c->queue && x->point == c->point && x->code == (int)c->code,
			      "seed %#" PRIx64 " %s %d item %zu: queue/point/code differ", seed, what,
			      set, i);
		REQUIRE(strcmp(x->message, msg) == 0,
			      "seed %#" PRIx64 " %s %d item %zu: message differs", seed, what, set, i);
		Devq__Timing zero = DEVQ__TIMING__INIT;
		const Devq__Timing *t = c->timing ? c->timing : &zero;
		REQUIRE(x->t.client_submit == t->client_submit && x->t.received == t->received &&
				      x->t.handoff == t->handoff &&
				      x->t.device_start == t->device_start &&
				      x->t.device_end == t->device_end && x->t.observed == t->observed &&
				      x->t.enqueue_ns == t->enqueue_ns && x->t.client_received == 0,
			      "seed %#" PRIx64 " %s %d item %zu: timing differs", seed, what, set, i);
	}
	devq__daemon_message__free_unpacked(m, NULL);
}

/* ---- random Completions frames ------------------------------------------ */

struct wbuf {
	uint8_t *b;
	size_t len, cap;
};

static void wb_put(struct wbuf *w, const void *p, size_t n)
{
	if (!n)
		return;
	if (w->len + n > w->cap) {
		w->cap = (w->len + n) * 2 + 64;
		w->b = realloc(w->b, w->cap);
		REQUIRE(w->b, "out of memory");
	}
	memcpy(w->b + w->len, p, n);
	w->len += n;
}

/* A varint, sometimes padded with redundant continuation bytes up to ten
 * (pad): protobuf-c accepts those. */
static void wb_varint(struct wbuf *w, uint64_t v, int pad)
{
	uint8_t b[10];
	size_t n = 0;
	do {
		b[n++] = (uint8_t)(v & 0x7f);
		v >>= 7;
	} while (v);
	while (pad && n < 10 && rnd() % 2)
		b[n++] = 0;
	for (size_t i = 0; i + 1 < n; i++)
		b[i] |= 0x80;
	wb_put(w, b, n);
}

static int odd_enc(void)
{
	return rnd() % 16 == 0;
}

/* A tag; sometimes in a longer form than needed (at most five bytes). */
static void wb_tag(struct wbuf *w, uint32_t field, unsigned wt)
{
	uint64_t v = (uint64_t)field << 3 | wt;
	uint8_t b[5];
	size_t n = 0;
	do {
		b[n++] = (uint8_t)(v & 0x7f);
		v >>= 7;
	} while (v && n < 5);
	while (odd_enc() && n < 5)
		b[n++] = 0;
	for (size_t i = 0; i + 1 < n; i++)
		b[i] |= 0x80;
	wb_put(w, b, n);
}

static void wb_len_field(struct wbuf *w, uint32_t field, const struct wbuf *body)
{
	wb_tag(w, field, 2);
	wb_varint(w, body->len, odd_enc() && body->len < (1u << 20));
	wb_put(w, body->b, body->len);
}

/* An unknown field of a random valid wire type (rarely an invalid one). */
static void wb_unknown(struct wbuf *w, uint32_t first_unknown)
{
	uint32_t f = first_unknown + (uint32_t)(rnd() % 4 ? rnd() % 20 : rnd() % (1u << 28));
	unsigned wts[] = { 0, 1, 2, 5, 0, 2, 3, 7 };
	unsigned wt = wts[rnd() % (rnd() % 32 ? 6 : 8)];
	wb_tag(w, f, wt);
	uint8_t junk[16];
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)rnd();
	switch (wt) {
	case 0: wb_varint(w, rnd_u64(), odd_enc()); break;
	case 1: wb_put(w, junk, 8); break;
	case 5: wb_put(w, junk, 4); break;
	case 2: {
		size_t n = rnd() % 16;
		wb_varint(w, n, 0);
		wb_put(w, junk, n);
		break;
	}
	default: break; /* a group or 6/7: protobuf-c rejects it */
	}
}

/* One Completion's fields in random order, with repeats and unknowns. */
static void wb_completion(struct wbuf *w)
{
	int nf = (int)(rnd() % 8);
	for (int k = 0; k < nf; k++) {
		uint64_t which = rnd() % 12;
		/* Rarely a known field with the wrong wire type. */
		int wrong = rnd() % 64 == 0;
		if (which < 3) {
			uint32_t f = (uint32_t)which + 1;
			wb_tag(w, f, wrong ? 2 : 0);
			if (wrong) {
				wb_varint(w, 0, 0);
			} else {
				uint64_t v = f == 3 && rnd() % 2 ? (uint64_t)(int64_t)(int32_t)rnd()
								  : rnd_u64();
				wb_varint(w, v, odd_enc());
			}
		} else if (which < 6) {
			/* message: printable, sometimes an embedded NUL, up to
			 * 300 bytes (over the 159 a record keeps) */
			size_t n = rnd() % 4 ? rnd() % 20 : rnd() % 300;
			char s[300];
			for (size_t i = 0; i < n; i++)
				s[i] = rnd() % 40 ? (char)(' ' + rnd() % 95) : 0;
			struct wbuf body = { 0 };
			wb_put(&body, s, n);
			if (wrong) {
				wb_tag(w, 4, 0);
				wb_varint(w, n, 0);
			} else {
				wb_len_field(w, 4, &body);
			}
			free(body.b);
		} else if (which < 10) {
			struct wbuf t = { 0 };
			int tn = (int)(rnd() % 9);
			for (int j = 0; j < tn; j++) {
				if (rnd() % 8 == 0) {
					wb_unknown(&t, 8);
					continue;
				}
				uint32_t f = 1 + (uint32_t)(rnd() % 7);
				int twrong = rnd() % 64 == 0;
				wb_tag(&t, f, twrong ? 1 : 0);
				if (twrong)
					wb_put(&t, "01234567", 8);
				else
					wb_varint(&t, rnd_u64(), odd_enc());
			}
			if (wrong) {
				wb_tag(w, 5, 0);
				wb_varint(w, 5, 0);
			} else {
				wb_len_field(w, 5, &t);
			}
			free(t.b);
		} else {
			wb_unknown(w, 6);
		}
	}
}

/* The body of a Completions message: items, now and then unknown fields. */
static void wb_completions(struct wbuf *w)
{
	int n = (int)(rnd() % 4 ? rnd() % 6 : rnd() % 70);
	for (int i = 0; i < n; i++) {
		if (rnd() % 16 == 0) {
			wb_unknown(w, 2);
			continue;
		}
		struct wbuf c = { 0 };
		wb_completion(&c);
		if (rnd() % 128 == 0) { /* items with the wrong wire type */
			wb_tag(w, 1, 0);
			wb_varint(w, c.len, 0);
		} else {
			wb_len_field(w, 1, &c);
		}
		free(c.b);
	}
}

/* Wraps a Completions body as the daemon does: 2a, length, body. */
static void wrap(struct wbuf *out, const uint8_t *body, size_t n)
{
	out->len = 0;
	uint8_t t = 0x2a;
	wb_put(out, &t, 1);
	wb_varint(out, n, 0);
	wb_put(out, body, n);
}

/* Frames protobuf-c itself packs from random records. */
static void pbc_completions(struct wbuf *body)
{
	size_t n = rnd() % 4 ? rnd() % 6 : rnd() % 70;
	Devq__Completion *c = calloc(n + 1, sizeof(*c));
	Devq__Completion **cp = calloc(n + 1, sizeof(*cp));
	Devq__Timing *t = calloc(n + 1, sizeof(*t));
	char (*msg)[300] = calloc(n + 1, sizeof(*msg));
	REQUIRE(c && cp && t && msg, "out of memory");
	for (size_t i = 0; i < n; i++) {
		devq__completion__init(&c[i]);
		devq__timing__init(&t[i]);
		c[i].queue = (uint32_t)rnd_u64();
		c[i].point = rnd_u64();
		c[i].code = rnd() % 4 ? (Devq__Code)(rnd() % 12) : (Devq__Code)(int32_t)rnd();
		size_t ml = rnd() % 3 ? 0 : rnd() % 4 ? rnd() % 40 : rnd() % 299;
		for (size_t k = 0; k < ml; k++)
			msg[i][k] = (char)(' ' + rnd() % 95);
		c[i].message = rnd() % 8 ? msg[i] : NULL;
		t[i].client_submit = rnd_u64();
		t[i].received = rnd_u64();
		t[i].handoff = rnd_u64();
		t[i].device_start = rnd_u64();
		t[i].device_end = rnd_u64();
		t[i].observed = rnd_u64();
		t[i].enqueue_ns = rnd_u64();
		c[i].timing = rnd() % 8 ? &t[i] : NULL;
		cp[i] = &c[i];
	}
	Devq__Completions cs = DEVQ__COMPLETIONS__INIT;
	cs.n_items = n;
	cs.items = cp;
	body->len = 0;
	size_t len = protobuf_c_message_get_packed_size(&cs.base);
	uint8_t *b = malloc(len + 1);
	REQUIRE(b, "out of memory");
	REQUIRE(protobuf_c_message_pack(&cs.base, b) == len, "protobuf-c packed another size");
	wb_put(body, b, len);
	free(b);
	free(c);
	free(cp);
	free(t);
	free(msg);
}

/* Each frame, then mutations of it: every truncation of its body (wrapped
 * again, so the decoder reads it rather than handing it back), every
 * truncation of the whole payload, and byte flips in both. */
static void check_with_mutations(const struct wbuf *body, struct dec_stats *st, int set)
{
	struct wbuf f = { 0 }, g = { 0 };
	wrap(&f, body->b, body->len);
	check_frame(f.b, f.len, st, "frame", set);
	for (size_t cut = 0; cut < body->len; cut++) {
		wrap(&g, body->b, cut);
		check_frame(g.b, g.len, st, "body truncated", set);
	}
	for (size_t cut = 0; cut < f.len; cut++)
		check_frame(f.b, cut, st, "payload truncated", set);
	uint8_t *copy = malloc(f.len);
	REQUIRE(copy, "out of memory");
	for (int k = 0; k < 24 && body->len; k++) {
		memcpy(copy, body->b, body->len);
		copy[rnd() % body->len] ^= (uint8_t)(1u << (rnd() % 8));
		if (rnd() % 2)
			copy[rnd() % body->len] = (uint8_t)rnd();
		wrap(&g, copy, body->len);
		check_frame(g.b, g.len, st, "body flipped", set);
		memcpy(copy, f.b, f.len);
		copy[rnd() % f.len] ^= (uint8_t)(1u << (rnd() % 8));
		check_frame(copy, f.len, st, "payload flipped", set);
	}
	free(copy);
	free(f.b);
	free(g.b);
}

/* ---- decoder tests ------------------------------------------------------ */

START_TEST(dec_protobuf_c_frames)
{
	reseed(10);
	struct dec_stats st = { 0 };
	struct wbuf body = { 0 };
	for (int set = 0; set < 1500; set++) {
		pbc_completions(&body);
		check_with_mutations(&body, &st, set);
	}
	free(body.b);
	/* Not a test that passes by declining everything: */
	ck_assert_uint_gt(st.accepted, 10000);
	ck_assert_uint_gt(st.rejected, 10000);
}
END_TEST

START_TEST(dec_hand_made_frames)
{
	reseed(11);
	struct dec_stats st = { 0 };
	struct wbuf body = { 0 };
	for (int set = 0; set < 1500; set++) {
		body.len = 0;
		wb_completions(&body);
		check_with_mutations(&body, &st, set);
	}
	free(body.b);
	ck_assert_uint_gt(st.accepted, 10000);
	ck_assert_uint_gt(st.rejected, 10000);
}
END_TEST

START_TEST(dec_random_bytes)
{
	/* Random bodies, mostly small field-1 items of random bytes. */
	reseed(12);
	struct dec_stats st = { 0 };
	struct wbuf body = { 0 }, f = { 0 };
	for (int set = 0; set < 20000; set++) {
		body.len = 0;
		size_t n = rnd() % 64;
		for (size_t i = 0; i < n; i++) {
			uint8_t b = (uint8_t)rnd();
			if (rnd() % 4 == 0)
				b = (uint8_t)(0x08 + (rnd() % 6) * 8 + (rnd() % 3 == 0 ? 2 : 0));
			wb_put(&body, &b, 1);
		}
		wrap(&f, body.b, body.len);
		check_frame(f.b, f.len, &st, "random", set);
	}
	free(body.b);
	free(f.b);
	ck_assert_uint_gt(st.accepted, 100);
	ck_assert_uint_gt(st.rejected, 1000);
}
END_TEST

/* Hand-assembled frames for the rules the header of cmpl_dec.c states,
 * each checked against protobuf-c and against the value it must give. */
static void one(const uint8_t *body, size_t n, int accept, struct devq_completion *out,
		size_t nout)
{
	struct wbuf f = { 0 };
	struct dec_stats st = { 0 };
	wrap(&f, body, n);
	check_frame(f.b, f.len, &st, "case", (int)n);
	ck_assert_uint_eq(st.accepted, accept ? 1 : 0);
	ck_assert_uint_eq(st.rejected, accept ? 0 : 1);
	if (accept && out) {
		struct devq_cmpl_dec d;
		ck_assert_int_eq(devq_cmpl_dec_begin(&d, f.b, f.len), 0);
		for (size_t i = 0; i < nout; i++)
			ck_assert_int_eq(devq_cmpl_dec_next(&d, &out[i]), 1);
		ck_assert_int_eq(devq_cmpl_dec_next(&d, &out[0]), 0);
	}
	free(f.b);
}

START_TEST(dec_rules)
{
	reseed(13);
	struct devq_completion c[2];
	/* The last Timing wins whole: client_submit from the first is gone. */
	static const uint8_t two_timings[] = { 0x0a, 0x0a, 0x2a, 0x02, 0x08, 0x05,
					       0x2a, 0x04, 0x10, 0x07, 0x38, 0x09 };
	one(two_timings, sizeof(two_timings), 1, c, 1);
	ck_assert_uint_eq(c[0].t.client_submit, 0);
	ck_assert_uint_eq(c[0].t.received, 7);
	ck_assert_uint_eq(c[0].t.enqueue_ns, 9);
	/* Scalars and messages: the last one. */
	static const uint8_t twice[] = { 0x0a, 0x0d, 0x08, 0x01, 0x08, 0x02, 0x22, 0x02, 'a',
					 'b', 0x22, 0x01, 'c', 0x18, 0x03 };
	one(twice, sizeof(twice), 1, c, 1);
	ck_assert_uint_eq(c[0].queue, 2);
	ck_assert_str_eq(c[0].message, "c");
	ck_assert_int_eq(c[0].code, 3);
	/* A message stops at its first NUL. */
	static const uint8_t nul[] = { 0x0a, 0x05, 0x22, 0x03, 'a', 0, 'b' };
	one(nul, sizeof(nul), 1, c, 1);
	ck_assert_str_eq(c[0].message, "a");
	/* uint32 keeps the low 32 bits; a negative code is 10 bytes. */
	static const uint8_t wide[] = { 0x0a, 0x11, 0x08, 0x81, 0x80, 0x80, 0x80, 0x10,
					0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
					0xff, 0xff, 0x01 };
	one(wide, sizeof(wide), 1, c, 1);
	ck_assert_uint_eq(c[0].queue, 1);
	ck_assert_int_eq(c[0].code, -1);
	/* Field 0 in one byte: rejected; in a longer form: skipped. */
	static const uint8_t tag0[] = { 0x0a, 0x02, 0x00, 0x01 };
	one(tag0, sizeof(tag0), 0, NULL, 0);
	static const uint8_t tag0_long[] = { 0x0a, 0x03, 0x80, 0x00, 0x01 };
	one(tag0_long, sizeof(tag0_long), 1, c, 1);
	/* A tag over five bytes, a varint over ten, a length over five. */
	static const uint8_t tag6[] = { 0x0a, 0x07, 0x88, 0x80, 0x80, 0x80, 0x80, 0x00, 0x01 };
	one(tag6, sizeof(tag6), 0, NULL, 0);
	static const uint8_t v11[] = { 0x0a, 0x0c, 0x10, 0x80, 0x80, 0x80, 0x80, 0x80,
				       0x80, 0x80, 0x80, 0x80, 0x80, 0x00 };
	one(v11, sizeof(v11), 0, NULL, 0);
	static const uint8_t len6[] = { 0x0a, 0x08, 0x22, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 'x' };
	one(len6, sizeof(len6), 0, NULL, 0);
	/* Groups and wire types 6, 7: rejected even in unknown fields. */
	static const uint8_t group[] = { 0x0a, 0x02, 0x33, 0x34 };
	one(group, sizeof(group), 0, NULL, 0);
	static const uint8_t wt7[] = { 0x0a, 0x01, 0x3f };
	one(wt7, sizeof(wt7), 0, NULL, 0);
	/* A known field with another wire type; unknown fields skipped. */
	static const uint8_t wrongwt[] = { 0x0a, 0x05, 0x15, 1, 2, 3, 4 };
	one(wrongwt, sizeof(wrongwt), 0, NULL, 0);
	static const uint8_t unknown[] = { 0x12, 0x01, 0x00, 0x0a, 0x09, 0x31, 1, 2, 3, 4, 5, 6,
					   7, 8, 0x0a, 0x00 };
	one(unknown, sizeof(unknown), 1, c, 2);
	/* A message over what a record holds: cut at 159 bytes. */
	uint8_t longmsg[3 + 3 + 199] = { 0x0a, 0xca, 0x01, 0x22, 0xc7, 0x01 };
	memset(longmsg + 6, 'm', 199);
	one(longmsg, sizeof(longmsg), 1, c, 1);
	ck_assert_uint_eq(strlen(c[0].message), sizeof(c[0].message) - 1);
}
END_TEST

START_TEST(dec_other_frames)
{
	/* Frames of other shapes are protobuf-c's: another body, two
	 * top-level fields (protobuf-c's oneof rules pick the body), an
	 * empty payload, a longer form of tag 5. */
	struct devq_cmpl_dec d;
	static const uint8_t err[] = { 0x12, 0x00 };
	ck_assert_int_eq(devq_cmpl_dec_begin(&d, err, sizeof(err)), DEVQ_CMPL_DEC_OTHER);
	static const uint8_t two[] = { 0x2a, 0x00, 0x2a, 0x00 };
	ck_assert_int_eq(devq_cmpl_dec_begin(&d, two, sizeof(two)), DEVQ_CMPL_DEC_OTHER);
	ck_assert_int_eq(devq_cmpl_dec_begin(&d, two, 0), DEVQ_CMPL_DEC_OTHER);
	static const uint8_t longtag[] = { 0xaa, 0x00, 0x00 };
	ck_assert_int_eq(devq_cmpl_dec_begin(&d, longtag, sizeof(longtag)), DEVQ_CMPL_DEC_OTHER);
	static const uint8_t empty[] = { 0x2a, 0x00 };
	ck_assert_int_eq(devq_cmpl_dec_begin(&d, empty, sizeof(empty)), 0);
	struct devq_completion c;
	ck_assert_int_eq(devq_cmpl_dec_next(&d, &c), 0);
}
END_TEST

/* ---- devq_tx_append ------------------------------------------------------ */

/* Reads n frames from sock and checks each against what was sent: frame i
 * has payload bytes (i * 31 + k) & 0xff, len[i] of them, fds[i] fds. */
static void expect_frames(int sock, size_t n, const size_t *len, const unsigned *nfds)
{
	struct devq_rx rx;
	ck_assert_int_eq(devq_rx_init(&rx, 1u << 20), 0);
	static struct devq_frame f;
	for (size_t i = 0; i < n; i++) {
		int r;
		while ((r = devq_rx_next(&rx, &f)) == 0)
			ck_assert_int_gt(devq_rx_recv(&rx, sock, 0), 0);
		ck_assert_int_eq(r, 1);
		ck_assert_uint_eq(f.type, DEVQ_FRAME_CLIENT);
		ck_assert_uint_eq(f.len, len[i]);
		ck_assert_uint_eq(f.nfds, nfds[i]);
		for (size_t k = 0; k < len[i]; k++)
			REQUIRE(f.payload[k] == (uint8_t)(i * 31 + k), "frame %zu byte %zu differs", i, k);
		devq_frame_close_fds(&f);
	}
	devq_rx_fini(&rx);
}

START_TEST(tx_append_frames)
{
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	struct devq_tx tx;
	devq_tx_init(&tx);
	/* Several rounds, so a round reuses the slab the last one sent:
	 * small frames sharing one slab, a frame with an fd in between
	 * (queued with devq_tx_push, so appended frames must not join it),
	 * a frame larger than a slab, an empty one. */
	for (int round = 0; round < 3; round++) {
		enum { N = 40 };
		size_t len[N];
		unsigned nfds[N];
		size_t total = 0;
		for (size_t i = 0; i < N; i++) {
			nfds[i] = 0;
			len[i] = i == 7 ? DEVQ_TX_SLAB + 100 : i == 9 ? 0 : 1 + (i * 977) % 300;
			if (i == 20) {
				/* A frame with one fd: an empty ClientMessage is 0
				 * bytes, so the payload pattern holds trivially. */
				Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
				int fd = dup(sv[0]);
				ck_assert_int_ge(fd, 0);
				ck_assert_int_eq(devq_tx_push(&tx, DEVQ_FRAME_CLIENT, &m.base, &fd, 1), 0);
				len[i] = 0;
				nfds[i] = 1;
				total += DEVQ_FRAME_HDR;
				continue;
			}
			uint8_t *p;
			ck_assert_int_eq(devq_tx_append(&tx, DEVQ_FRAME_CLIENT, len[i], &p), 0);
			for (size_t k = 0; k < len[i]; k++)
				p[k] = (uint8_t)(i * 31 + k);
			total += DEVQ_FRAME_HDR + len[i];
		}
		ck_assert_uint_eq(tx.bytes, total);
		ck_assert_uint_eq(tx.frames, N);
		ck_assert_int_eq(devq_tx_flush(&tx, sv[0]), 0);
		ck_assert_uint_eq(tx.bytes, 0);
		ck_assert_uint_eq(tx.frames, 0);
		ck_assert_ptr_null(tx.head);
		expect_frames(sv[1], N, len, nfds);
	}
	uint8_t *p;
	ck_assert_int_eq(devq_tx_append(&tx, DEVQ_FRAME_CLIENT, (size_t)UINT32_MAX + 1, &p),
			 -EINVAL);
	ck_assert_uint_eq(tx.frames, 0);
	devq_tx_fini(&tx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

/* ---- field numbers of every hand-written codec -------------------------- */

/* The wire type protobuf-c writes a field with. */
static unsigned wire_type_of(const ProtobufCFieldDescriptor *fd)
{
	if (fd->label == PROTOBUF_C_LABEL_REPEATED && (fd->flags & PROTOBUF_C_FIELD_FLAG_PACKED))
		return DEVQ_WIRE_LEN;
	switch (fd->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_BOOL:
	case PROTOBUF_C_TYPE_ENUM:
		return DEVQ_WIRE_VARINT;
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_FIXED32:
	case PROTOBUF_C_TYPE_FLOAT:
		return DEVQ_WIRE_I32;
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_DOUBLE:
		return DEVQ_WIRE_I64;
	case PROTOBUF_C_TYPE_STRING:
	case PROTOBUF_C_TYPE_BYTES:
	case PROTOBUF_C_TYPE_MESSAGE:
		return DEVQ_WIRE_LEN;
	}
	return ~0u;
}

/* DEVQ_WIRE_FIELDS as the codecs see it: the constants they use. */
static const struct wire_field {
	const char *id;
	const ProtobufCMessageDescriptor *msg;
	const char *field;
	unsigned num, wt, tag;
} wire_fields[] = {
#define WIRE_FIELD(id, msg, field, num, wt)                                                  \
	{ #id, &devq__##msg##__descriptor, #field, DEVQ_WIRE_F_##id, DEVQ_WIRE_WT_##id,      \
	  DEVQ_WIRE_TAG_OF(id) },
	DEVQ_WIRE_FIELDS(WIRE_FIELD)
#undef WIRE_FIELD
};

START_TEST(wire_fields_match_proto)
{
	size_t n = sizeof(wire_fields) / sizeof(wire_fields[0]);
	for (size_t i = 0; i < n; i++) {
		const struct wire_field *w = &wire_fields[i];
		const ProtobufCFieldDescriptor *fd =
			protobuf_c_message_descriptor_get_field_by_name(w->msg, w->field);
		ck_assert_msg(fd, "%s: devq.proto's %s has no field %s", w->id, w->msg->name,
			      w->field);
		ck_assert_msg(fd->id == w->num, "%s: %s.%s is field %u in devq.proto, %u in wire.h",
			      w->id, w->msg->name, w->field, fd->id, w->num);
		ck_assert_msg(wire_type_of(fd) == w->wt,
			      "%s: %s.%s has wire type %u in devq.proto, %u in wire.h", w->id,
			      w->msg->name, w->field, wire_type_of(fd), w->wt);
		ck_assert_uint_eq(w->tag, fd->id << 3 | w->wt);
		for (size_t j = 0; j < i; j++)
			ck_assert_msg(strcmp(w->id, wire_fields[j].id) != 0 &&
					      (w->msg != wire_fields[j].msg ||
					       strcmp(w->field, wire_fields[j].field) != 0),
				      "%s: listed twice", w->id);
	}
	/* The codecs walk Timing as an array of its fields in number order. */
	for (unsigned i = 0; i < 7; i++) {
		const ProtobufCFieldDescriptor *fd =
			protobuf_c_message_descriptor_get_field(&devq__timing__descriptor, i + 1);
		ck_assert_msg(fd && fd->type == PROTOBUF_C_TYPE_UINT64, "Timing field %u", i + 1);
		ck_assert_uint_eq(DEVQ_WIRE_TIMING_TAG(i), (i + 1) << 3 | DEVQ_WIRE_VARINT);
	}
}
END_TEST

/* The messages a hand-written codec writes whole: a field added to one in
 * devq.proto would be left out of every frame it writes, and read by
 * protobuf-c as its default, until wire.h and the codecs learn it. */
START_TEST(wire_fields_cover_whole_messages)
{
	static const ProtobufCMessageDescriptor *const whole[] = {
		&devq__submit__descriptor,      &devq__op__descriptor,
		&devq__wait__descriptor,        &devq__kernel_op__descriptor,
		&devq__arg__descriptor,         &devq__buffer_arg__descriptor,
		&devq__copy_op__descriptor,     &devq__fill_op__descriptor,
		&devq__completions__descriptor, &devq__completion__descriptor,
		&devq__timing__descriptor,      &devq__trace_op__descriptor,
		&devq__trace_wait__descriptor,  &devq__trace_buffer__descriptor,
	};
	size_t n = sizeof(wire_fields) / sizeof(wire_fields[0]);
	for (size_t m = 0; m < sizeof(whole) / sizeof(whole[0]); m++) {
		const ProtobufCMessageDescriptor *d = whole[m];
		for (unsigned k = 0; k < d->n_fields; k++) {
			size_t i = 0;
			while (i < n && (wire_fields[i].msg != d ||
					 strcmp(wire_fields[i].field, d->fields[k].name) != 0))
				i++;
			ck_assert_msg(i < n, "%s.%s (field %u) is in devq.proto but not in wire.h",
				      d->name, d->fields[k].name, d->fields[k].id);
		}
	}
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("cli_codec");
	TCase *t = tcase_create("cli_codec");
	tcase_set_timeout(t, 300); /* ASan and valgrind runs are slow */
	tcase_add_test(t, enc_one_null_op);
	tcase_add_test(t, enc_every_kind_and_type);
	tcase_add_test(t, enc_random_batches);
	tcase_add_test(t, enc_wide_prefixes);
	tcase_add_test(t, enc_deadlines);
	tcase_add_test(t, dec_protobuf_c_frames);
	tcase_add_test(t, dec_hand_made_frames);
	tcase_add_test(t, dec_random_bytes);
	tcase_add_test(t, dec_rules);
	tcase_add_test(t, dec_other_frames);
	tcase_add_test(t, tx_append_frames);
	tcase_add_test(t, wire_fields_match_proto);
	tcase_add_test(t, wire_fields_cover_whole_messages);
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
