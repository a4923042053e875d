/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of proto/codec/cmpl_enc.c, the hand-written encoder of
 * DaemonMessage{completions}.  Clients decode that frame with protobuf-c, so
 * protobuf-c is the reference twice over: every encoding must unpack with
 * devq__daemon_message__unpack into exactly the records encoded, and must
 * equal byte for byte what protobuf-c's own packer writes for the same
 * message (the daemon's previous path), so no client can tell the change.
 * Inputs are random but reproducible: DEVQ_TEST_SEED picks the seed, and
 * every failure names the seed and the set it failed on. */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "codec/cmpl_enc.h"
#include "devq.pb-c.h"
#include "frame.h"
#include "test_rng.h"

#define MAX_MSG (DEVQ_CMPL_MSG - 1) /* longest message a record holds */

/* ---- reproducible random inputs --------------------------------------- */


static int rnd_code(void)
{
	/* Mostly the codes of proto/devq.proto (OK .. DEADLINE_EXCEEDED); sometimes
	 * values outside them, negative ones included: an open proto3 enum
	 * carries any int32, and negatives take the 10-byte form. */
	static const int odd[] = { -1, INT32_MIN, INT32_MAX, 13, 1000 };
	if (rnd() % 8)
		return (int)(rnd() % 13);
	return odd[rnd() % (sizeof(odd) / sizeof(odd[0]))];
}

static void rnd_msg(char *m)
{
	size_t len;
	uint64_t k = rnd() % 6;
	if (k < 3)
		len = 0; /* the common case: no message */
	else if (k == 3)
		len = MAX_MSG;
	else
		len = rnd() % (MAX_MSG + 1); /* 127/128 cross the 1-byte length */
	for (size_t i = 0; i < len; i++)
		m[i] = (char)(' ' + rnd() % 95); /* printable: valid UTF-8 */
	m[len] = '\0';
	/* Bytes after the NUL must not leak into the encoding. */
	for (size_t i = len + 1; i < DEVQ_CMPL_MSG; i++)
		m[i] = (char)('A' + rnd() % 26);
}

static void rnd_cmpl(struct devq_cmpl *c)
{
	c->queue = rnd() % 4 ? (uint32_t)rnd_u64() : UINT32_MAX;
	c->point = rnd_u64();
	c->code = rnd_code();
	rnd_msg(c->msg);
	for (int i = 0; i < 7; i++)
		c->t[i] = rnd_u64();
}

/* ---- the reference: protobuf-c ---------------------------------------- */

/* Packs c[0..n) the way the daemon did before the encoder (server.c's
 * former push_completions); *len gets the size. */
static uint8_t *pbc_pack(const struct devq_cmpl *x, size_t n, size_t *len)
{
	Devq__Completion *c = calloc(n + 1, sizeof(*c));
	Devq__Completion **cp = calloc(n + 1, sizeof(*cp));
	Devq__Timing *t = calloc(n + 1, sizeof(*t));
	ck_assert(c && cp && t);
	for (size_t i = 0; i < n; i++) {
		devq__completion__init(&c[i]);
		devq__timing__init(&t[i]);
		c[i].queue = x[i].queue;
		c[i].point = x[i].point;
		c[i].code = x[i].code;
		c[i].message = (char *)x[i].msg;
		t[i].client_submit = x[i].t[0];
		t[i].received = x[i].t[1];
		t[i].handoff = x[i].t[2];
		t[i].device_start = x[i].t[3];
		t[i].device_end = x[i].t[4];
		t[i].observed = x[i].t[5];
		t[i].enqueue_ns = x[i].t[6];
		c[i].timing = &t[i];
		cp[i] = &c[i];
	}
	Devq__Completions cs = DEVQ__COMPLETIONS__INIT;
	cs.n_items = n;
	cs.items = cp;
	Devq__DaemonMessage m = DEVQ__DAEMON_MESSAGE__INIT;
	m.body_case = DEVQ__DAEMON_MESSAGE__BODY_COMPLETIONS;
	m.completions = &cs;
	*len = protobuf_c_message_get_packed_size(&m.base);
	uint8_t *buf = malloc(*len + 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_uint_eq(protobuf_c_message_pack(&m.base, buf), *len);
	free(c);
	free(cp);
	free(t);
	return buf;
}

/* Decodes buf with protobuf-c and asserts it holds exactly c[0..n). */
static void assert_decodes_to(const uint8_t *buf, size_t len, const struct devq_cmpl *c,
			      size_t n, uint64_t seed, int set)
{
	Devq__DaemonMessage *m = devq__daemon_message__unpack(NULL, len, buf);
	ck_assert_msg(m, "seed %#" PRIx64 " set %d: protobuf-c rejects the encoding", seed, set);
	ck_assert_int_eq(m->body_case, DEVQ__DAEMON_MESSAGE__BODY_COMPLETIONS);
	ck_assert_ptr_nonnull(m->completions);
	ck_assert_uint_eq(m->completions->n_items, n);
	for (size_t i = 0; i < n; i++) {
		const Devq__Completion *d = m->completions->items[i];
		const struct devq_cmpl *x = &c[i];
		ck_assert_msg(d->queue == x->queue && d->point == x->point &&
				      (int)d->code == x->code,
			      "seed %#" PRIx64 " set %d item %zu: queue/point/code differ", seed,
			      set, i);
		ck_assert_msg(strcmp(d->message, x->msg) == 0,
			      "seed %#" PRIx64 " set %d item %zu: message differs", seed, set, i);
		ck_assert_msg(d->timing, "seed %#" PRIx64 " set %d item %zu: no timing", seed,
			      set, i);
		const uint64_t got[7] = { d->timing->client_submit, d->timing->received,
					  d->timing->handoff,	    d->timing->device_start,
					  d->timing->device_end,    d->timing->observed,
					  d->timing->enqueue_ns };
		for (int f = 0; f < 7; f++)
			ck_assert_msg(got[f] == x->t[f],
				      "seed %#" PRIx64 " set %d item %zu: timing field %d: %" PRIu64
				      " != %" PRIu64,
				      seed, set, i, f + 1, got[f], x->t[f]);
	}
	devq__daemon_message__free_unpacked(m, NULL);
}

/* Encodes c[0..n) into a buffer of exactly the announced size (ASan and
 * valgrind catch a write past it) and checks it against protobuf-c. */
static void check_set(const struct devq_cmpl *c, size_t n, uint64_t seed, int set)
{
	size_t len = devq_cmpl_enc_size(c, n);
	uint8_t *buf = malloc(len ? len : 1);
	ck_assert_ptr_nonnull(buf);
	ck_assert_msg(devq_cmpl_enc(buf, len, c, n) == len,
		      "seed %#" PRIx64 " set %d: wrote other than the announced size", seed, set);
	assert_decodes_to(buf, len, c, n, seed, set);
	size_t rlen;
	uint8_t *ref = pbc_pack(c, n, &rlen);
	ck_assert_msg(rlen == len && memcmp(ref, buf, len) == 0,
		      "seed %#" PRIx64 " set %d (%zu completions): %zu bytes, protobuf-c %zu, "
		      "or the bytes differ",
		      seed, set, n, len, rlen);
	free(ref);
	free(buf);
}

/* ---- tests ------------------------------------------------------------ */

START_TEST(empty_set)
{
	/* Never sent by the daemon, but still a valid message: "2a 00". */
	check_set(NULL, 0, 0, -1);
	uint8_t b[2];
	ck_assert_uint_eq(devq_cmpl_enc(b, 2, NULL, 0), 2);
	ck_assert_uint_eq(b[0], 0x2a);
	ck_assert_uint_eq(b[1], 0x00);
}
END_TEST

START_TEST(all_defaults)
{
	/* Every field at its default: only the item and its empty Timing. */
	struct devq_cmpl c;
	memset(&c, 0, sizeof(c));
	check_set(&c, 1, 0, -1);
	uint8_t b[8];
	ck_assert_uint_eq(devq_cmpl_enc_size(&c, 1), 6);
	devq_cmpl_enc(b, 6, &c, 1);
	static const uint8_t want[] = { 0x2a, 0x04, 0x0a, 0x02, 0x2a, 0x00 };
	ck_assert_mem_eq(b, want, sizeof(want));
}
END_TEST

START_TEST(all_maximal)
{
	/* The largest record there is: every varint 10 bytes (a negative
	 * code), a message of MAX_MSG bytes, in a set long enough that every
	 * length prefix takes several bytes. */
	enum { N = 300 };
	struct devq_cmpl *c = calloc(N, sizeof(*c));
	ck_assert_ptr_nonnull(c);
	for (size_t i = 0; i < N; i++) {
		c[i].queue = UINT32_MAX;
		c[i].point = UINT64_MAX;
		c[i].code = INT32_MIN;
		memset(c[i].msg, 'x', MAX_MSG);
		c[i].msg[MAX_MSG] = '\0';
		for (int f = 0; f < 7; f++)
			c[i].t[f] = UINT64_MAX;
	}
	check_set(c, N, 0, -1);
	free(c);
}
END_TEST

START_TEST(every_message_length)
{
	/* Message lengths 0 .. MAX_MSG with large varints around them: the
	 * Completion body crosses 127 -> 128 bytes (its length prefix grows
	 * to two bytes and the body moves) at a known point, whatever the
	 * random sets happen to hit. */
	struct devq_cmpl c[2];
	memset(c, 0, sizeof(c));
	for (size_t len = 0; len <= MAX_MSG; len++) {
		for (int j = 0; j < 2; j++) {
			c[j].queue = 7;
			c[j].point = 1000 + len;
			c[j].code = (int)(len % 12);
			memset(c[j].msg, 'm', len);
			c[j].msg[len] = '\0';
			for (int f = 0; f < 7; f++)
				c[j].t[f] = (1ULL << 42) + len * 977 + (uint64_t)f;
		}
		check_set(c, 2, 0, (int)len);
	}
}
END_TEST

START_TEST(random_sets)
{
	/* 0..N completions per set; N spans the daemon's batches of 64 and
	 * crosses the 2- and 3-byte lengths of the Completions body. */
	enum { SETS = 3000, N = 200 };
	uint64_t seed = seed_from_env(0x5eedc0de2026ULL);
	rng_state = seed ? seed : 1;
	struct devq_cmpl *c = calloc(N, sizeof(*c));
	ck_assert_ptr_nonnull(c);
	for (int set = 0; set < SETS; set++) {
		size_t n = set % 10 == 0 ? (size_t)(rnd() % (N + 1)) : (size_t)(rnd() % 70);
		for (size_t i = 0; i < n; i++)
			rnd_cmpl(&c[i]);
		check_set(c, n, seed, set);
	}
	free(c);
}
END_TEST

START_TEST(through_the_socket)
{
	/* The daemon's path: reserve a frame in the send queue, encode into
	 * it in place, flush; the peer reads one whole frame that unpacks. */
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	rng_state = 42;
	struct devq_cmpl c[64];
	for (size_t i = 0; i < 64; i++)
		rnd_cmpl(&c[i]);
	struct devq_tx tx;
	devq_tx_init(&tx);
	size_t plen = devq_cmpl_enc_size(c, 64);
	uint8_t *p = NULL;
	ck_assert_int_eq(devq_tx_reserve(&tx, DEVQ_FRAME_DAEMON, plen, &p), 0);
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(devq_cmpl_enc(p, plen, c, 64), plen);
	ck_assert_uint_eq(tx.bytes, DEVQ_FRAME_HDR + plen);
	ck_assert_uint_eq(tx.frames, 1);
	ck_assert_int_eq(devq_tx_flush(&tx, sv[0]), 0);
	devq_tx_fini(&tx);

	struct devq_rx rx;
	ck_assert_int_eq(devq_rx_init(&rx, DEVQ_FRAME_MAX_DEFAULT), 0);
	static struct devq_frame f;
	int r;
	while ((r = devq_rx_next(&rx, &f)) == 0)
		ck_assert_int_gt(devq_rx_recv(&rx, sv[1], 0), 0);
	ck_assert_int_eq(r, 1);
	ck_assert_uint_eq(f.type, DEVQ_FRAME_DAEMON);
	ck_assert_uint_eq(f.len, plen);
	ck_assert_uint_eq(f.nfds, 0);
	assert_decodes_to(f.payload, f.len, c, 64, 42, -1);
	devq_rx_fini(&rx);
	close(sv[0]);
	close(sv[1]);
}
END_TEST

START_TEST(reserve_rejects_oversize)
{
	struct devq_tx tx;
	devq_tx_init(&tx);
	uint8_t *p = NULL;
	ck_assert_int_eq(devq_tx_reserve(&tx, DEVQ_FRAME_DAEMON, (size_t)UINT32_MAX + 1, &p),
			 -EINVAL);
	ck_assert_ptr_null(p);
	ck_assert_uint_eq(tx.frames, 0);
	devq_tx_fini(&tx);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("cmpl_enc");
	TCase *t = tcase_create("cmpl_enc");
	tcase_set_timeout(t, 120); /* ASan and valgrind runs are slow */
	tcase_add_test(t, empty_set);
	tcase_add_test(t, all_defaults);
	tcase_add_test(t, all_maximal);
	tcase_add_test(t, every_message_length);
	tcase_add_test(t, random_sets);
	tcase_add_test(t, through_the_socket);
	tcase_add_test(t, reserve_rejects_oversize);
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
