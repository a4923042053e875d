/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of daemon/requests/trace_enc.c, the hand-written TraceOp of a
 * TraceReply.  The reference is protobuf-c, the daemon's previous packer
 * and every client's decoder: each record's bytes must equal what
 * devq__trace_op__pack writes for the TraceOp the daemon used to build
 * from it (the mapping below is that code), and a TraceReply made of them
 * must unpack to the record's values.  Random but reproducible records:
 * DEVQ_TEST_SEED picks the seed and a failure names it. */
#include <check.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devq.pb-c.h"
#include "requests/trace_enc.h"
#include "test_rng.h"

/* The TraceOp field as protobuf-c packs it: tag, length, the message. */
static size_t reference(uint8_t *out, const struct devq_trace_rec *x)
{
	Devq__TraceOp o = DEVQ__TRACE_OP__INIT;
	Devq__Timing tm = DEVQ__TIMING__INIT;
	Devq__TraceWait w[DEVQ_TRACE_WAITS], *wp[DEVQ_TRACE_WAITS];
	Devq__TraceBuffer b[DEVQ_TRACE_BUFS], *bp[DEVQ_TRACE_BUFS];
	o.session = x->session;
	o.queue = x->queue;
	o.point = x->point;
	o.stream = x->stream;
	o.executable = x->exec;
	o.code = x->code;
	uint64_t *tf[7] = { &tm.client_submit, &tm.received, &tm.handoff, &tm.device_start,
			    &tm.device_end, &tm.observed, &tm.enqueue_ns };
	for (int f = 0; f < 7; f++)
		*tf[f] = x->t[f];
	o.timing = &tm;
	unsigned nw = x->nwaits < DEVQ_TRACE_WAITS ? x->nwaits : DEVQ_TRACE_WAITS;
	for (unsigned i = 0; i < nw; i++) {
		devq__trace_wait__init(&w[i]);
		w[i].queue = x->waits[i].queue;
		w[i].point = x->waits[i].point;
		w[i].kind = x->waits[i].kind;
		wp[i] = &w[i];
	}
	o.waits = wp;
	o.n_waits = nw;
	o.waits_dropped = x->waits_dropped;
	unsigned nb = x->nbufs < DEVQ_TRACE_BUFS ? x->nbufs : DEVQ_TRACE_BUFS;
	for (unsigned i = 0; i < nb; i++) {
		devq__trace_buffer__init(&b[i]);
		b[i].id = x->bufs[i].id;
		b[i].access = x->bufs[i].access;
		b[i].released = x->bufs[i].released;
		bp[i] = &b[i];
	}
	o.buffers = bp;
	o.n_buffers = nb;
	size_t size = devq__trace_op__get_packed_size(&o);
	uint8_t *p = out;
	*p++ = (10 << 3) | 2;
	for (size_t v = size; ; v >>= 7) {
		*p++ = (uint8_t)(v >= 0x80 ? (v | 0x80) : v);
		if (v < 0x80)
			break;
	}
	return (size_t)(p - out) + devq__trace_op__pack(&o, p);
}

static uint32_t rnd_u32(void)
{
	return (uint32_t)rnd_u64();
}

/* Executable ids and codes: small values, the negative ids of copy, fill
 * and a bare op, and int32's extremes (ten bytes when negative). */
static int32_t rnd_i32(void)
{
	static const int32_t odd[] = { -1, -2, -3, INT32_MIN, INT32_MAX, 0, 127, 128 };
	if (rnd() % 4)
		return (int32_t)(rnd() % 40);
	return odd[rnd() % (sizeof(odd) / sizeof(odd[0]))];
}

static void rnd_rec(struct devq_trace_rec *x)
{
	memset(x, 0, sizeof(*x));
	x->session = rnd_u64();
	x->point = rnd_u64();
	for (int f = 0; f < 7; f++)
		x->t[f] = rnd_u64();
	x->uid = rnd_u32();
	x->pid = rnd_u32();
	x->queue = rnd_u32();
	x->stream = rnd_u32();
	x->exec = rnd_i32();
	x->code = rnd_i32();
	/* Counts past the arrays too: the recorder never stores them, and
	 * the encoder must still not read past an array. */
	x->nwaits = (uint8_t)(rnd() % 8 ? rnd() % (DEVQ_TRACE_WAITS + 1) : rnd() % 256);
	x->nbufs = (uint8_t)(rnd() % 8 ? rnd() % (DEVQ_TRACE_BUFS + 1) : rnd() % 256);
	x->waits_dropped = (uint8_t)(rnd() % 2 ? 0 : rnd());
	for (unsigned i = 0; i < DEVQ_TRACE_WAITS; i++) {
		x->waits[i].point = rnd_u64();
		x->waits[i].queue = rnd_u32();
		x->waits[i].kind = (uint8_t)(rnd() % 4 ? rnd() % 3 : rnd());
	}
	for (unsigned i = 0; i < DEVQ_TRACE_BUFS; i++) {
		x->bufs[i].id = rnd_u64();
		x->bufs[i].access = (uint8_t)(rnd() % 4 ? rnd() % 4 : rnd());
		x->bufs[i].released = rnd() % 2;
	}
	for (size_t i = 0; i < sizeof(x->name) - 1; i++)
		x->name[i] = (char)('a' + rnd() % 26);
}

/* The widest record: every field at its longest varint, full arrays. */
static void widest(struct devq_trace_rec *x)
{
	memset(x, 0xff, sizeof(*x));
	x->exec = INT32_MIN;
	x->code = INT32_MIN;
	x->nwaits = DEVQ_TRACE_WAITS;
	x->nbufs = DEVQ_TRACE_BUFS;
	for (unsigned i = 0; i < DEVQ_TRACE_BUFS; i++)
		x->bufs[i].released = true;
}

/* Same bytes as protobuf-c, written within DEVQ_TRACE_ENC_OP_MAX, and the
 * bytes after them untouched. */
static size_t check_rec(const struct devq_trace_rec *x, uint8_t *got, uint64_t seed, int i)
{
	uint8_t want[2 * DEVQ_TRACE_ENC_OP_MAX];
	memset(got, 0xa5, DEVQ_TRACE_ENC_OP_MAX + 16);
	size_t n = devq_trace_enc_op(got, x);
	size_t r = reference(want, x);
	/* Plain ifs: Check writes to its log for every ck_assert that passes,
	 * and this runs for some hundred thousand records. */
	if (n > DEVQ_TRACE_ENC_OP_MAX)
		ck_abort_msg("seed %#" PRIx64 " record %d: %zu bytes, over DEVQ_TRACE_ENC_OP_MAX",
			     seed, i, n);
	for (size_t k = n; k < DEVQ_TRACE_ENC_OP_MAX + 16; k++)
		if (got[k] != 0xa5)
			ck_abort_msg("seed %#" PRIx64 " record %d: byte %zu written", seed, i, k);
	if (n != r || memcmp(got, want, n) != 0) {
		size_t k = 0;
		while (k < n && k < r && got[k] == want[k])
			k++;
		ck_abort_msg("seed %#" PRIx64 " record %d: %zu bytes, protobuf-c %zu; first "
			     "difference at byte %zu",
			     seed, i, n, r, k);
	}
	return n;
}

START_TEST(defaults_only)
{
	struct devq_trace_rec x;
	memset(&x, 0, sizeof(x));
	uint8_t got[DEVQ_TRACE_ENC_OP_MAX + 16];
	/* Everything left out but the Timing, which is always present. */
	ck_assert_uint_eq(check_rec(&x, got, 0, 0), 4);
	ck_assert_uint_eq(got[0], 0x52);
	ck_assert_uint_eq(got[1], 2);
	ck_assert_uint_eq(got[2], 0x3a);
	ck_assert_uint_eq(got[3], 0);
}
END_TEST

START_TEST(widest_fits_exactly)
{
	struct devq_trace_rec x;
	widest(&x);
	uint8_t got[DEVQ_TRACE_ENC_OP_MAX + 16];
	/* The bound is this record's size: trace_enc.h's arithmetic, checked
	 * (check_rec also sees nothing written past it). */
	ck_assert_uint_eq(check_rec(&x, got, 0, 0), DEVQ_TRACE_ENC_OP_MAX);
	/* Counts past the arrays encode as the full arrays. */
	x.nwaits = 255;
	x.nbufs = 255;
	ck_assert_uint_eq(check_rec(&x, got, 0, 1), DEVQ_TRACE_ENC_OP_MAX);
}
END_TEST

/* Bodies of 127 and 128 bytes: the op's length prefix grows a byte. */
START_TEST(length_prefix_edge)
{
	struct devq_trace_rec x;
	memset(&x, 0, sizeof(x));
	uint8_t got[DEVQ_TRACE_ENC_OP_MAX + 16];
	bool seen127 = false, seen128 = false;
	for (unsigned nw = 0; nw <= DEVQ_TRACE_WAITS; nw++) {
		x.nwaits = (uint8_t)nw;
		/* Every width of the other fields, and of client_submit alone
		 * (one byte a step). */
		for (unsigned bits = 1; bits <= 64; bits++) {
			for (unsigned b0 = 1; b0 <= 64; b0++) {
				for (int f = 0; f < 7; f++)
					x.t[f] = UINT64_MAX >> (64 - (f ? bits : b0));
				for (unsigned i = 0; i < nw; i++)
					x.waits[i].point = UINT64_MAX >> (64 - bits);
				check_rec(&x, got, 0, (int)(nw * 10000 + bits * 100 + b0));
				seen127 |= got[1] == 127;
				seen128 |= got[1] == 0x80 && got[2] == 1;
			}
		}
	}
	ck_assert_msg(seen127 && seen128, "no body of 127 and 128 bytes came up (%d %d)", seen127,
		      seen128);
}
END_TEST

START_TEST(random_records)
{
	uint64_t seed = seed_from_env(0x7eace2026ULL);
	rng_state = seed ? seed : 1;
	uint8_t got[DEVQ_TRACE_ENC_OP_MAX + 16];
	for (int i = 0; i < 20000; i++) {
		struct devq_trace_rec x;
		rnd_rec(&x);
		check_rec(&x, got, seed, i);
	}
}
END_TEST

/* A TraceReply made of encoded ops unpacks to the records' values. */
START_TEST(reply_unpacks)
{
	uint64_t seed = seed_from_env(0x7eace2027ULL);
	rng_state = seed ? seed : 1;
	enum { N = 200 };
	static struct devq_trace_rec x[N];
	static uint8_t buf[N * DEVQ_TRACE_ENC_OP_MAX];
	size_t len = 0;
	for (int i = 0; i < N; i++) {
		rnd_rec(&x[i]);
		len += devq_trace_enc_op(buf + len, &x[i]);
	}
	Devq__TraceReply *r = devq__trace_reply__unpack(NULL, len, buf);
	ck_assert_msg(r, "seed %#" PRIx64 ": protobuf-c rejects the reply", seed);
	ck_assert_uint_eq(r->n_ops, N);
	for (int i = 0; i < N; i++) {
		const Devq__TraceOp *o = r->ops[i];
		const struct devq_trace_rec *y = &x[i];
		ck_assert_msg(o->session == y->session && o->queue == y->queue &&
				      o->point == y->point && o->stream == y->stream &&
				      o->executable == y->exec && (int32_t)o->code == y->code,
			      "seed %#" PRIx64 " op %d: a scalar differs", seed, i);
		ck_assert_ptr_nonnull(o->timing);
		ck_assert_uint_eq(o->timing->client_submit, y->t[0]);
		ck_assert_uint_eq(o->timing->enqueue_ns, y->t[6]);
		unsigned nw = y->nwaits < DEVQ_TRACE_WAITS ? y->nwaits : DEVQ_TRACE_WAITS;
		unsigned nb = y->nbufs < DEVQ_TRACE_BUFS ? y->nbufs : DEVQ_TRACE_BUFS;
		ck_assert_uint_eq(o->n_waits, nw);
		ck_assert_uint_eq(o->n_buffers, nb);
		for (unsigned k = 0; k < nw; k++)
			ck_assert(o->waits[k]->point == y->waits[k].point &&
				  o->waits[k]->queue == y->waits[k].queue &&
				  (unsigned)o->waits[k]->kind == y->waits[k].kind);
		for (unsigned k = 0; k < nb; k++)
			ck_assert(o->buffers[k]->id == y->bufs[k].id &&
				  o->buffers[k]->access == y->bufs[k].access &&
				  o->buffers[k]->released == y->bufs[k].released);
		ck_assert_uint_eq(o->waits_dropped, y->waits_dropped);
	}
	devq__trace_reply__free_unpacked(r, NULL);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("trace_enc");
	TCase *t = tcase_create("trace_enc");
	tcase_set_timeout(t, 120); /* ASan and valgrind runs are slow */
	tcase_add_test(t, defaults_only);
	tcase_add_test(t, widest_fits_exactly);
	tcase_add_test(t, length_prefix_edge);
	tcase_add_test(t, random_records);
	tcase_add_test(t, reply_unpacks);
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
