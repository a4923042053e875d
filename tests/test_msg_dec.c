/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of proto/codec/msg_dec.c, the hand-written decoder of
 * ClientMessage{submit}.  protobuf-c's unpacker decoded every client frame
 * before it and still decodes the ones it declines, so it is the
 * reference: for every payload, devq_msg_dec must accept exactly what
 * devq__client_message__unpack accepts and produce the same message, field
 * by field (unknown fields aside, see msg_dec.h).
 *
 * The hand-written path alone (devq_msg_dec_fast) is held to more: it must
 * take every payload that is a lone submit field protobuf-c accepts, so
 * these checks cannot pass by everything falling back to protobuf-c.
 *
 * Inputs: Submits built and packed by protobuf-c as libdevq builds them
 * (unknown fields added through protobuf-c's unknown_fields), Submits
 * written field by field with every encoding protobuf-c takes (overlong
 * tags and varints, duplicated scalars, oneofs and messages, bools of every
 * wire type, unknown fields anywhere, now and then a wrong wire type), and
 * mutations of both: truncation at every length, flipped bytes, random
 * bytes, duplicated fields at any depth; and, written deliberately, every
 * length of a set of Submits off by one and two, every value cut at each
 * byte, every tag and varint padded past protobuf-c's limits.  Each
 * payload is decoded where it ends at an inaccessible page, and each block
 * the decoder allocates ends in a canary, so that reading or writing one
 * byte too far fails in every build.  Random but reproducible:
 * DEVQ_TEST_SEED picks the seed, and every failure names the seed and the
 * input it failed on.
 *
 * Also proto/codec/strcheck.c, the check of a message's strings with their
 * lengths (a NUL inside one is refused, where protobuf-c's C string would
 * cut it): every payload above goes through it as well, read where it
 * ends at an inaccessible page, and must never be called malformed where
 * protobuf-c accepts it; pinned cases name the field; the nesting bound is
 * held at its limit and one past, over a descriptor that contains itself. */
#include <check.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "codec/msg_dec.h"
#include "codec/strcheck.h"
#include "devq.pb-c.h"
#include "base/pool.h"

/* ---- reproducible random inputs --------------------------------------- */

static uint64_t rng_state, seed;

static uint64_t seed_from_env(void)
{
	const char *e = getenv("DEVQ_TEST_SEED");
	return e && *e ? strtoull(e, NULL, 0) : 0xdec0de5eed2026ULL;
}

static void reseed(uint64_t salt)
{
	seed = seed_from_env();
	rng_state = (seed ^ (salt * 0x9E3779B97F4A7C15ULL)) | 1;
}

static uint64_t rnd(void) /* xorshift64* */
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1DULL;
}

static unsigned rndn(unsigned n)
{
	return (unsigned)(rnd() % n);
}

static const uint64_t edges[] = {
	0, 1, 0x7f, 0x80, 0x3fff, 0x4000, UINT32_MAX, (uint64_t)UINT32_MAX + 1,
	(1ULL << 63) - 1, 1ULL << 63, UINT64_MAX,
};

/* 0 often (proto3 leaves it out), an edge, or a value of random width. */
static uint64_t rnd_u64(void)
{
	unsigned k = rndn(8);
	if (k < 2)
		return 0;
	if (k < 4)
		return edges[rndn(sizeof(edges) / sizeof(edges[0]))];
	unsigned bits = 1 + rndn(64);
	uint64_t v = rnd();
	return bits == 64 ? v : v & ((1ULL << bits) - 1);
}

/* ---- a wire writer (test side) ---------------------------------------- */

struct wb {
	uint8_t *p;
	size_t n, cap;
};

static void wb_bytes(struct wb *b, const void *d, size_t n)
{
	if (b->n + n > b->cap) {
		size_t c = b->cap ? b->cap : 256;
		while (c < b->n + n)
			c *= 2;
		b->p = realloc(b->p, c);
		if (!b->p) /* not ck_assert: Check logs each one it passes */
			ck_abort_msg("out of memory");
		b->cap = c;
	}
	if (d && n)
		memcpy(b->p + b->n, d, n);
	b->n += n;
}

static void wb_byte(struct wb *b, uint8_t c)
{
	wb_bytes(b, &c, 1);
}

static unsigned vlen(uint64_t v)
{
	unsigned n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

/* v as a varint of its own width plus pad more bytes (overlong: protobuf-c
 * reads it the same). */
static void wb_varint(struct wb *b, uint64_t v, unsigned pad)
{
	while (v >= 0x80) {
		wb_byte(b, (uint8_t)(v | 0x80));
		v >>= 7;
	}
	if (!pad) {
		wb_byte(b, (uint8_t)v);
		return;
	}
	wb_byte(b, (uint8_t)(v | 0x80));
	for (unsigned i = 1; i < pad; i++)
		wb_byte(b, 0x80);
	wb_byte(b, 0);
}

/* Overlong padding that keeps a varint within max bytes, now and then. */
static unsigned rnd_pad(uint64_t v, unsigned max)
{
	unsigned room = max - vlen(v);
	return room && !rndn(6) ? 1 + rndn(room) : 0;
}

static void wb_tag(struct wb *b, uint32_t num, unsigned wt)
{
	uint64_t t = (uint64_t)num << 3 | wt;
	wb_varint(b, t, rnd_pad(t, 5));
}

/* A varint field; sometimes 10 bytes with junk above bit 63 in the last,
 * which protobuf-c drops. */
static void wb_vfield(struct wb *b, uint32_t num, uint64_t v)
{
	wb_tag(b, num, 0);
	if (!rndn(16)) {
		for (int i = 0; i < 9; i++)
			wb_byte(b, (uint8_t)((v >> (7 * i)) | 0x80));
		wb_byte(b, (uint8_t)((v >> 63) | (rndn(64) << 1)));
		return;
	}
	wb_varint(b, v, rnd_pad(v, 10));
}

static void wb_lfield(struct wb *b, uint32_t num, const uint8_t *d, size_t n)
{
	wb_tag(b, num, 2);
	wb_varint(b, n, rnd_pad(n, 5));
	wb_bytes(b, d, n);
}

/* A length-delimited field with a one-byte tag, c's bytes as its value,
 * its length of the shortest form (as libdevq writes it). */
static void wb_nested(struct wb *b, uint8_t tag, const struct wb *c)
{
	wb_byte(b, tag);
	wb_varint(b, c->n, 0);
	wb_bytes(b, c->p, c->n);
}

static void wb_fixed(struct wb *b, uint32_t num, unsigned wt, uint64_t v)
{
	uint8_t x[8];
	for (int i = 0; i < 8; i++)
		x[i] = (uint8_t)(v >> (8 * i));
	wb_tag(b, num, wt);
	wb_bytes(b, x, wt == 1 ? 8 : 4);
}

/* ---- comparing decoded messages --------------------------------------- */

/* The first difference found, for the failure message. */
static char diff[512];

#define DIFF(...) (snprintf(diff, sizeof(diff), __VA_ARGS__), false)

/* A field's path for the failure message; cut short if it must be. */
static void subpath(char *out, size_t cap, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, cap, fmt, ap);
	va_end(ap);
}

/* Set while y comes from the hand-written path: it must then also be a
 * proper protobuf-c message of its own, with no unknown fields. */
static bool y_is_hand;

static bool eq_base(const ProtobufCMessage *x, const ProtobufCMessage *y,
		    const ProtobufCMessageDescriptor *d, const char *path)
{
	if (x->descriptor != d || y->descriptor != d)
		return DIFF("%s: descriptor", path);
	if (y_is_hand && (y->n_unknown_fields || y->unknown_fields))
		return DIFF("%s: hand-decoded message keeps unknown fields", path);
	return true;
}

static bool eq_buf(const Devq__BufferArg *x, const Devq__BufferArg *y, const char *path)
{
	if (!x || !y)
		return x == y ? true : DIFF("%s: present in one only", path);
	if (!eq_base(&x->base, &y->base, &devq__buffer_arg__descriptor, path))
		return false;
	if (x->id != y->id || x->offset != y->offset)
		return DIFF("%s: {%" PRIu64 ", %" PRIu64 "} vs {%" PRIu64 ", %" PRIu64 "}", path,
			    x->id, x->offset, y->id, y->offset);
	return true;
}

static bool eq_arg(const Devq__Arg *x, const Devq__Arg *y, const char *path)
{
	if (!eq_base(&x->base, &y->base, &devq__arg__descriptor, path))
		return false;
	if (!x->name || !y->name || strcmp(x->name, y->name))
		return DIFF("%s.name: \"%s\" vs \"%s\"", path, x->name ? x->name : "(null)",
			    y->name ? y->name : "(null)");
	if (x->value_case != y->value_case)
		return DIFF("%s.value_case: %d vs %d", path, x->value_case, y->value_case);
	char sub[256];
	switch (x->value_case) {
	case DEVQ__ARG__VALUE__NOT_SET:
		return true;
	case DEVQ__ARG__VALUE_U32:
	case DEVQ__ARG__VALUE_I32:
	case DEVQ__ARG__VALUE_F32:
		/* Bits, not values: NaNs must come through too. */
		return !memcmp(&x->u32, &y->u32, 4) ? true : DIFF("%s: 32-bit value", path);
	case DEVQ__ARG__VALUE_BUFFER:
		subpath(sub, sizeof(sub), "%s.buffer", path);
		return eq_buf(x->buffer, y->buffer, sub);
	default:
		return !memcmp(&x->u64, &y->u64, 8) ? true : DIFF("%s: 64-bit value", path);
	}
}

static bool eq_op(const Devq__Op *x, const Devq__Op *y, const char *path)
{
	char sub[256];
	if (!eq_base(&x->base, &y->base, &devq__op__descriptor, path))
		return false;
	if (x->queue != y->queue || x->client_submit_ns != y->client_submit_ns ||
	    x->no_timing != y->no_timing || x->replayable != y->replayable ||
	    x->deadline_us != y->deadline_us)
		return DIFF("%s: queue %u/%u, submit_ns %" PRIu64 "/%" PRIu64
			    ", no_timing %d/%d, replayable %d/%d, deadline_us %" PRIu64 "/%" PRIu64,
			    path, x->queue, y->queue, x->client_submit_ns, y->client_submit_ns,
			    x->no_timing, y->no_timing, x->replayable, y->replayable,
			    x->deadline_us, y->deadline_us);
	if (x->n_waits != y->n_waits)
		return DIFF("%s: %zu waits vs %zu", path, x->n_waits, y->n_waits);
	for (size_t i = 0; i < x->n_waits; i++) {
		const Devq__Wait *a = x->waits[i], *b = y->waits[i];
		subpath(sub, sizeof(sub), "%s.waits[%zu]", path, i);
		if (!eq_base(&a->base, &b->base, &devq__wait__descriptor, sub))
			return false;
		if (a->queue != b->queue || a->point != b->point)
			return DIFF("%s: differs", sub);
	}
	if (x->body_case != y->body_case)
		return DIFF("%s.body_case: %d vs %d", path, x->body_case, y->body_case);
	switch (x->body_case) {
	case DEVQ__OP__BODY_KERNEL: {
		const Devq__KernelOp *a = x->kernel, *b = y->kernel;
		subpath(sub, sizeof(sub), "%s.kernel", path);
		if (!eq_base(&a->base, &b->base, &devq__kernel_op__descriptor, sub))
			return false;
		if (a->executable != b->executable || a->n_args != b->n_args)
			return DIFF("%s: executable %u/%u, %zu/%zu args", sub, a->executable,
				    b->executable, a->n_args, b->n_args);
		for (size_t i = 0; i < a->n_args; i++) {
			subpath(sub, sizeof(sub), "%s.kernel.args[%zu]", path, i);
			if (!eq_arg(a->args[i], b->args[i], sub))
				return false;
		}
		return true;
	}
	case DEVQ__OP__BODY_COPY: {
		const Devq__CopyOp *a = x->copy, *b = y->copy;
		subpath(sub, sizeof(sub), "%s.copy", path);
		if (!eq_base(&a->base, &b->base, &devq__copy_op__descriptor, sub))
			return false;
		if (a->size != b->size)
			return DIFF("%s.size", sub);
		subpath(sub, sizeof(sub), "%s.copy.src", path);
		if (!eq_buf(a->src, b->src, sub))
			return false;
		subpath(sub, sizeof(sub), "%s.copy.dst", path);
		return eq_buf(a->dst, b->dst, sub);
	}
	case DEVQ__OP__BODY_FILL: {
		const Devq__FillOp *a = x->fill, *b = y->fill;
		subpath(sub, sizeof(sub), "%s.fill", path);
		if (!eq_base(&a->base, &b->base, &devq__fill_op__descriptor, sub))
			return false;
		if (a->size != b->size || a->pattern != b->pattern)
			return DIFF("%s: size or pattern", sub);
		subpath(sub, sizeof(sub), "%s.fill.dst", path);
		return eq_buf(a->dst, b->dst, sub);
	}
	default:
		return true;
	}
}

/* x from protobuf-c, y from the decoder under test. */
static bool eq_msg(const Devq__ClientMessage *x, const Devq__ClientMessage *y)
{
	if (!eq_base(&x->base, &y->base, &devq__client_message__descriptor, "msg"))
		return false;
	if (x->body_case != y->body_case)
		return DIFF("msg.body_case: %d vs %d", x->body_case, y->body_case);
	if (x->body_case != DEVQ__CLIENT_MESSAGE__BODY_SUBMIT)
		return true; /* a fallback: both are protobuf-c's */
	const Devq__Submit *a = x->submit, *b = y->submit;
	if (!eq_base(&a->base, &b->base, &devq__submit__descriptor, "submit"))
		return false;
	if (a->n_ops != b->n_ops)
		return DIFF("submit: %zu ops vs %zu", a->n_ops, b->n_ops);
	for (size_t i = 0; i < a->n_ops; i++) {
		char path[64];
		subpath(path, sizeof(path), "ops[%zu]", i);
		if (!eq_op(a->ops[i], b->ops[i], path))
			return false;
	}
	return true;
}

/* ---- an allocator that counts, and fails on request ------------------- */

static const char *what; /* the input's kind, for failure messages */

struct counting {
	ProtobufCAllocator pa;
	long live;    /* blocks handed out and not freed */
	long calls;   /* allocations asked for */
	long fail_at; /* the call (0-based) that gets NULL; -1: none */
};

/* Each block carries its size before it and CANARY bytes of 0xa5 after
 * it, checked when it is freed: a write one byte past a block fails the
 * test in every build, not only under ASan. */
#define HDR 16u
#define CANARY 8u

static void *c_alloc(void *ud, size_t n)
{
	struct counting *c = ud;
	if (c->calls++ == c->fail_at)
		return NULL;
	unsigned char *p = malloc(HDR + n + CANARY);
	if (!p)
		return NULL;
	c->live++;
	memcpy(p, &n, sizeof(n));
	memset(p + HDR + n, 0xa5, CANARY);
	return p + HDR;
}

static void c_free(void *ud, void *q)
{
	struct counting *c = ud;
	if (q) {
		unsigned char *p = (unsigned char *)q - HDR;
		size_t n;
		memcpy(&n, p, sizeof(n));
		/* A plain test first: each ck_assert, passing or not, costs
		 * Check a write to its log. */
		for (unsigned i = 0; i < CANARY; i++)
			if (p[HDR + n + i] != 0xa5)
				ck_abort_msg("%s: a write past the end of a block of %zu bytes",
					     what, n);
		c->live--;
		free(p);
	}
}

static void counting_init(struct counting *c)
{
	c->pa.alloc = c_alloc;
	c->pa.free = c_free;
	c->pa.allocator_data = c;
	c->live = c->calls = 0;
	c->fail_at = -1;
}

/* A frame arena (daemon/base/pool.c) that counts its allocations: the
 * daemon decodes into one, and frees nothing piecewise. */
struct arena_count {
	ProtobufCAllocator pa;
	struct devq_arena arena;
	long calls;
};

static void *ac_alloc(void *ud, size_t n)
{
	struct arena_count *c = ud;
	c->calls++;
	return c->arena.pa.alloc(c->arena.pa.allocator_data, n);
}

static void ac_free(void *ud, void *p)
{
	(void)ud;
	(void)p;
}

static void arena_count_init(struct arena_count *c)
{
	devq_pool_arena_init(&c->arena);
	c->pa.alloc = ac_alloc;
	c->pa.free = ac_free;
	c->pa.allocator_data = c;
	c->calls = 0;
}

static void arena_count_fini(struct arena_count *c)
{
	devq_pool_arena_fini(&c->arena);
}

/* ---- the check every input goes through ------------------------------- */

static unsigned long n_fast, n_fast_declined, n_both_reject;
/* Payloads protobuf-c accepts that strcheck passes, and that it refuses
 * for a NUL in a string. */
static unsigned long n_str_ok, n_str_nul;

static void dump(const uint8_t *buf, size_t len, char *out, size_t cap)
{
	size_t o = 0;
	for (size_t i = 0; i < len && o + 4 < cap; i++)
		o += (size_t)snprintf(out + o, cap - o, "%02x", buf[i]);
	if (o + 4 >= cap && cap > 4)
		strcpy(out + cap - 4, "...");
}

/* A payload that is one submit field with a one-byte tag covering all of
 * it: the shape the hand-written path takes. */
static bool lone_submit(const uint8_t *buf, size_t len)
{
	if (len < 2 || buf[0] != 0x3a)
		return false;
	size_t v = 0, i = 1;
	for (unsigned shift = 0; i < len && i <= 5; shift += 7) {
		uint8_t c = buf[i++];
		v |= (size_t)(c & 0x7f) << shift;
		if (c < 0x80)
			return v == len - i;
	}
	return false;
}

/* ck_assert_msg, for the checks every input makes: Check logs each
 * ck_assert it passes (a write), which cost more than the decoding. */
#define CHECK(cond, ...)                          \
	do {                                      \
		if (!(cond))                      \
			ck_abort_msg(__VA_ARGS__); \
	} while (0)

/* A copy of buf that ends where an inaccessible page begins, so that a
 * read of even one byte past the payload faults in every build, not only
 * under ASan: the decoders read the frame in place, and a payload can end
 * a frame buffer. */
static const uint8_t *guarded(const uint8_t *buf, size_t len)
{
	static uint8_t *region;
	static size_t room; /* bytes before the guard page */
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	if (!region || len > room) {
		if (region)
			ck_assert_int_eq(munmap(region, room + pg), 0);
		room = len ? (len + pg - 1) / pg * pg : pg;
		region = mmap(NULL, room + pg, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		ck_assert_ptr_ne(region, MAP_FAILED);
		ck_assert_int_eq(mprotect(region + room, pg, PROT_NONE), 0);
	}
	uint8_t *p = region + room - len;
	if (len)
		memcpy(p, buf, len);
	return p;
}

/* Decodes buf with protobuf-c and with both entry points of msg_dec (each
 * through a counting allocator) and asserts that they agree, that the
 * hand-written path took it when it should, and that nothing leaks.  The
 * payload is read where it ends at an inaccessible page (guarded). */
static void check_payload(const uint8_t *buf, size_t len, unsigned long iter)
{
	char hex[200];
	buf = guarded(buf, len);
	Devq__ClientMessage *ref = devq__client_message__unpack(NULL, len, buf);

	/* The daemon checks the strings of what protobuf-c accepted: never
	 * "malformed" there, and safe on everything else. */
	char where[128];
	enum devq_strcheck sc = devq_strcheck(&devq__client_message__descriptor, buf, len, where,
					      sizeof(where));
	if (ref && sc != DEVQ_STRCHECK_OK && sc != DEVQ_STRCHECK_NUL) {
		dump(buf, len, hex, sizeof(hex));
		ck_abort_msg("seed %#" PRIx64 " %s #%lu: protobuf-c accepts, strcheck says %d at "
			     "'%s': %s", seed, what, iter, (int)sc, where, hex);
	}
	/* A NUL names its field; a pass names none. */
	CHECK(sc == DEVQ_STRCHECK_NUL ? where[0] != '\0'
	      : sc == DEVQ_STRCHECK_OK ? where[0] == '\0' : true,
	      "seed %#" PRIx64 " %s #%lu: strcheck %d at '%s'", seed, what, iter, (int)sc, where);
	if (ref && sc == DEVQ_STRCHECK_OK)
		n_str_ok++;
	else if (ref)
		n_str_nul++;

	struct counting c;
	counting_init(&c);
	Devq__ClientMessage *fast = devq_msg_dec_fast(&c.pa, len, buf);
	if (!fast) {
		CHECK(c.live == 0, "seed %#" PRIx64 " %s #%lu: %ld blocks leaked", seed, what,
		      iter, c.live);
	}
	bool must_take = ref && lone_submit(buf, len);
	if ((fast != NULL) != must_take || (!ref && fast)) {
		dump(buf, len, hex, sizeof(hex));
		ck_abort_msg("seed %#" PRIx64 " %s #%lu: protobuf-c %s, hand-written %s: %s", seed,
			     what, iter, ref ? "accepts" : "rejects", fast ? "accepts" : "declines",
			     hex);
	}
	if (fast) {
		n_fast++;
		y_is_hand = true;
		if (!eq_msg(ref, fast)) {
			dump(buf, len, hex, sizeof(hex));
			ck_abort_msg("seed %#" PRIx64 " %s #%lu: %s; payload %s", seed, what, iter,
				     diff, hex);
		}
		devq__client_message__free_unpacked(fast, &c.pa);
		CHECK(c.live == 0, "seed %#" PRIx64 " %s #%lu: %ld blocks left after free",
		      seed, what, iter, c.live);
	} else if (ref) {
		n_fast_declined++;
	} else {
		n_both_reject++;
	}

	/* The entry point the daemon calls: the same answer either way. */
	counting_init(&c);
	Devq__ClientMessage *m = devq_msg_dec(&c.pa, len, buf);
	CHECK((m != NULL) == (ref != NULL), "seed %#" PRIx64 " %s #%lu: devq_msg_dec %s",
	      seed, what, iter, m ? "accepts" : "rejects");
	if (m) {
		y_is_hand = fast != NULL;
		CHECK(eq_msg(ref, m), "seed %#" PRIx64 " %s #%lu: devq_msg_dec: %s", seed,
		      what, iter, diff);
		devq__client_message__free_unpacked(m, &c.pa);
	}
	CHECK(c.live == 0, "seed %#" PRIx64 " %s #%lu: devq_msg_dec leaked %ld", seed,
	      what, iter, c.live);

	/* The daemon's entry point, into a frame arena: the one-block layout
	 * of the common kernel op and of a Submit's ops. */
	struct arena_count ac;
	arena_count_init(&ac);
	m = devq_msg_dec_arena(&ac.pa, len, buf);
	CHECK((m != NULL) == (ref != NULL),
	      "seed %#" PRIx64 " %s #%lu: devq_msg_dec_arena %s", seed, what, iter,
	      m ? "accepts" : "rejects");
	if (m) {
		y_is_hand = fast != NULL;
		CHECK(eq_msg(ref, m), "seed %#" PRIx64 " %s #%lu: devq_msg_dec_arena: %s",
		      seed, what, iter, diff);
	}
	arena_count_fini(&ac);
	devq__client_message__free_unpacked(ref, NULL);
}

/* ClientMessage{submit} around a Submit's bytes, as protobuf-c frames it. */
static void wrap_submit(struct wb *out, const uint8_t *body, size_t n)
{
	out->n = 0;
	wb_byte(out, 0x3a);
	wb_varint(out, n, 0);
	wb_bytes(out, body, n);
}

/* ---- inputs built by protobuf-c, as libdevq builds them --------------- */

/* Field numbers each message knows; an unknown field takes another. */
static const uint32_t known_submit[] = { 1 };
static const uint32_t known_op[] = { 1, 2, 3, 4, 5, 6, 30, 31, 60 };
static const uint32_t known_wait[] = { 1, 2 };
static const uint32_t known_kernel[] = { 1, 2 };
static const uint32_t known_arg[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
static const uint32_t known_buf[] = { 1, 2 };
static const uint32_t known_copy[] = { 1, 2, 3 };
static const uint32_t known_fill[] = { 1, 2, 3 };
#define KNOWN(k) k, sizeof(k) / sizeof(k[0])

static uint32_t rnd_unknown_num(const uint32_t *known, size_t n)
{
	for (;;) {
		uint32_t num = rndn(4) ? 1 + rndn(100) : 1 + (uint32_t)(rnd() % ((1u << 29) - 1));
		bool hit = false;
		for (size_t i = 0; i < n; i++)
			hit |= known[i] == num;
		if (!hit)
			return num;
	}
}

/* Bytes of an unknown field's value of wire type wt (a length-delimited
 * one with its prefix, as protobuf-c keeps them). */
static void rnd_unknown_value(struct wb *b, unsigned wt)
{
	switch (wt) {
	case 0:
		wb_varint(b, rnd_u64(), 0);
		break;
	case 1:
	case 5:
		for (unsigned i = 0; i < (wt == 1 ? 8u : 4u); i++)
			wb_byte(b, (uint8_t)rnd());
		break;
	default: {
		size_t n = rndn(4) ? rndn(12) : rndn(300);
		wb_varint(b, n, 0);
		for (size_t i = 0; i < n; i++)
			wb_byte(b, (uint8_t)rnd());
	}
	}
}

static const unsigned unknown_wts[] = { 0, 1, 2, 5 };

static bool with_unknowns; /* this message gets unknown fields */

static void add_unknowns(ProtobufCMessage *m, const uint32_t *known, size_t nknown)
{
	if (!with_unknowns || rndn(3))
		return;
	size_t n = 1 + rndn(3);
	m->unknown_fields = calloc(n, sizeof(*m->unknown_fields));
	ck_assert_ptr_nonnull(m->unknown_fields);
	m->n_unknown_fields = n;
	for (size_t i = 0; i < n; i++) {
		ProtobufCMessageUnknownField *u = &m->unknown_fields[i];
		struct wb v = { 0 };
		u->tag = rnd_unknown_num(known, nknown);
		u->wire_type = unknown_wts[rndn(4)];
		rnd_unknown_value(&v, u->wire_type);
		u->len = v.n;
		u->data = v.p;
	}
}

static char *rnd_name(void)
{
	static const char *common[] = { "ns", "n", "buf", "x", "y", "data", "out", "a" };
	if (rndn(4)) {
		char *s = strdup(common[rndn(8)]);
		ck_assert_ptr_nonnull(s);
		return s;
	}
	size_t n = rndn(8) ? rndn(24) : 200 + rndn(200);
	char *s = malloc(n + 1);
	ck_assert_ptr_nonnull(s);
	for (size_t i = 0; i < n; i++)
		s[i] = (char)(1 + rndn(255)); /* any byte but NUL: not always UTF-8 */
	s[n] = '\0';
	return s;
}

static Devq__BufferArg *pb_buf(void)
{
	Devq__BufferArg *b = malloc(sizeof(*b));
	ck_assert_ptr_nonnull(b);
	devq__buffer_arg__init(b);
	b->id = rnd_u64();
	b->offset = rnd_u64();
	add_unknowns(&b->base, KNOWN(known_buf));
	return b;
}

static Devq__Arg *pb_arg(void)
{
	Devq__Arg *g = malloc(sizeof(*g));
	ck_assert_ptr_nonnull(g);
	devq__arg__init(g);
	if (rndn(10))
		g->name = rnd_name();
	switch (rndn(8)) {
	case 0: g->value_case = DEVQ__ARG__VALUE_U64; g->u64 = rnd_u64(); break;
	case 1: g->value_case = DEVQ__ARG__VALUE_U32; g->u32 = (uint32_t)rnd_u64(); break;
	case 2: g->value_case = DEVQ__ARG__VALUE_I64; g->i64 = (int64_t)rnd_u64(); break;
	case 3: g->value_case = DEVQ__ARG__VALUE_I32; g->i32 = (int32_t)rnd_u64(); break;
	case 4: {
		uint32_t bits = (uint32_t)rnd();
		g->value_case = DEVQ__ARG__VALUE_F32;
		memcpy(&g->f32, &bits, 4);
		break;
	}
	case 5: {
		uint64_t bits = rnd();
		g->value_case = DEVQ__ARG__VALUE_F64;
		memcpy(&g->f64, &bits, 8);
		break;
	}
	case 6: g->value_case = DEVQ__ARG__VALUE_BUFFER; g->buffer = pb_buf(); break;
	default: break; /* no value */
	}
	add_unknowns(&g->base, KNOWN(known_arg));
	return g;
}

static size_t rnd_count(unsigned typical, unsigned large)
{
	unsigned k = rndn(16);
	return k == 0 ? 0 : k == 1 ? rndn(large + 1) : rndn(typical + 1);
}

static Devq__Op *pb_op(void)
{
	Devq__Op *op = malloc(sizeof(*op));
	ck_assert_ptr_nonnull(op);
	devq__op__init(op);
	op->queue = (uint32_t)rnd_u64();
	op->client_submit_ns = rnd_u64();
	op->no_timing = rndn(2);
	op->replayable = rndn(2);
	op->deadline_us = rndn(2) ? 0 : rndn(2) ? rndn(100000) : rnd_u64();
	op->n_waits = rnd_count(2, 40);
	op->waits = op->n_waits ? calloc(op->n_waits, sizeof(*op->waits)) : NULL;
	for (size_t i = 0; i < op->n_waits; i++) {
		Devq__Wait *w = malloc(sizeof(*w));
		ck_assert_ptr_nonnull(w);
		devq__wait__init(w);
		w->queue = (uint32_t)rnd_u64();
		w->point = rnd_u64();
		add_unknowns(&w->base, KNOWN(known_wait));
		op->waits[i] = w;
	}
	unsigned k = rndn(10);
	if (k < 6) {
		Devq__KernelOp *kn = malloc(sizeof(*kn));
		ck_assert_ptr_nonnull(kn);
		devq__kernel_op__init(kn);
		kn->executable = (uint32_t)rnd_u64();
		kn->n_args = rnd_count(5, 60);
		kn->args = kn->n_args ? calloc(kn->n_args, sizeof(*kn->args)) : NULL;
		for (size_t i = 0; i < kn->n_args; i++)
			kn->args[i] = pb_arg();
		add_unknowns(&kn->base, KNOWN(known_kernel));
		op->body_case = DEVQ__OP__BODY_KERNEL;
		op->kernel = kn;
	} else if (k < 8) {
		Devq__CopyOp *c = malloc(sizeof(*c));
		ck_assert_ptr_nonnull(c);
		devq__copy_op__init(c);
		c->src = rndn(6) ? pb_buf() : NULL;
		c->dst = rndn(6) ? pb_buf() : NULL;
		c->size = rnd_u64();
		add_unknowns(&c->base, KNOWN(known_copy));
		op->body_case = DEVQ__OP__BODY_COPY;
		op->copy = c;
	} else if (k < 9) {
		Devq__FillOp *f = malloc(sizeof(*f));
		ck_assert_ptr_nonnull(f);
		devq__fill_op__init(f);
		f->dst = rndn(6) ? pb_buf() : NULL;
		f->size = rnd_u64();
		f->pattern = (uint32_t)rnd_u64();
		add_unknowns(&f->base, KNOWN(known_fill));
		op->body_case = DEVQ__OP__BODY_FILL;
		op->fill = f;
	}
	add_unknowns(&op->base, KNOWN(known_op));
	return op;
}

/* A random Submit packed by protobuf-c into out; true if it carries
 * unknown fields. */
static bool pb_submit(struct wb *out)
{
	with_unknowns = !rndn(3);
	Devq__Submit *s = malloc(sizeof(*s));
	ck_assert_ptr_nonnull(s);
	devq__submit__init(s);
	unsigned k = rndn(20);
	s->n_ops = k == 0 ? 0 : k == 1 ? 64 : k == 2 ? 100 + rndn(400) : 1 + rndn(16);
	s->ops = s->n_ops ? calloc(s->n_ops, sizeof(*s->ops)) : NULL;
	for (size_t i = 0; i < s->n_ops; i++)
		s->ops[i] = pb_op();
	add_unknowns(&s->base, KNOWN(known_submit));
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_SUBMIT;
	m.submit = s;
	size_t len = devq__client_message__get_packed_size(&m);
	out->n = 0;
	wb_bytes(out, NULL, len);
	ck_assert_uint_eq(devq__client_message__pack(&m, out->p), len);
	devq__submit__free_unpacked(s, NULL); /* malloc'd throughout */
	return with_unknowns;
}

/* ---- inputs written field by field ------------------------------------ */

static bool allow_bad; /* this message may carry a wrong wire type */

static void wr_unknown(struct wb *b, const uint32_t *known, size_t n)
{
	unsigned wt = unknown_wts[rndn(4)];
	wb_tag(b, rnd_unknown_num(known, n), wt);
	rnd_unknown_value(b, wt);
}

/* Now and then, in a message allowed to be bad: field num with a wire type
 * protobuf-c refuses for it (or one it refuses everywhere). */
static bool wr_bad(struct wb *b, uint32_t num, unsigned right_wt)
{
	if (!allow_bad || rndn(20))
		return false;
	static const unsigned wts[] = { 0, 1, 2, 5, 3, 4, 6, 7 };
	unsigned wt;
	do
		wt = wts[rndn(8)];
	while (wt == right_wt);
	if (wt > 5 || wt == 3 || wt == 4) {
		wb_tag(b, num, wt);
		wb_byte(b, 0);
	} else {
		wb_tag(b, num, wt);
		rnd_unknown_value(b, wt);
	}
	return true;
}

/* A nested message as a length-delimited field. */
static void wr_nested(struct wb *b, uint32_t num, void (*gen)(struct wb *))
{
	if (wr_bad(b, num, 2))
		return;
	struct wb sub = { 0 };
	gen(&sub);
	wb_lfield(b, num, sub.p, sub.n);
	free(sub.p);
}

static void wr_varint(struct wb *b, uint32_t num)
{
	if (!wr_bad(b, num, 0))
		wb_vfield(b, num, rnd_u64());
}

/* A bool: any wire type, any bytes; protobuf-c reads them all. */
static void wr_bool(struct wb *b, uint32_t num)
{
	switch (rndn(6)) {
	case 0:
		wb_tag(b, num, 1);
		for (int i = 0; i < 8; i++)
			wb_byte(b, rndn(3) ? (uint8_t)(rndn(2) << 7) : (uint8_t)rnd());
		break;
	case 1:
		wb_tag(b, num, 5);
		for (int i = 0; i < 4; i++)
			wb_byte(b, rndn(3) ? (uint8_t)(rndn(2) << 7) : (uint8_t)rnd());
		break;
	case 2: {
		uint8_t d[3] = { 0, 0x80, (uint8_t)rnd() };
		wb_lfield(b, num, d, rndn(4));
		break;
	}
	case 3:
		/* 10 bytes whose only set bits lie above bit 63: the value is
		 * 0, the bool true. */
		wb_tag(b, num, 0);
		for (int i = 0; i < 9; i++)
			wb_byte(b, 0x80);
		wb_byte(b, (uint8_t)(rndn(64) << 1));
		break;
	default:
		wb_tag(b, num, 0);
		wb_varint(b, rndn(3), rnd_pad(1, 10));
	}
}

static void gen_buf(struct wb *b)
{
	for (unsigned i = 0, n = rndn(4); i < n; i++) {
		unsigned k = rndn(5);
		if (k < 2)
			wr_varint(b, 1);
		else if (k < 4)
			wr_varint(b, 2);
		else
			wr_unknown(b, KNOWN(known_buf));
	}
}

static void gen_arg(struct wb *b)
{
	for (unsigned i = 0, n = rndn(5); i < n; i++) {
		unsigned k = rndn(10);
		if (k == 0 || k == 1) {
			if (wr_bad(b, 1, 2))
				continue;
			uint8_t s[40];
			size_t len = rndn(sizeof(s));
			for (size_t j = 0; j < len; j++)
				s[j] = (uint8_t)(rndn(8) ? 'a' + rndn(26) : rnd()); /* NULs too */
			wb_lfield(b, 1, s, len);
		} else if (k < 6) {
			wr_varint(b, k); /* u64, u32, i64, i32 */
		} else if (k == 6) {
			if (!wr_bad(b, 6, 5))
				wb_fixed(b, 6, 5, rnd());
		} else if (k == 7) {
			if (!wr_bad(b, 7, 1))
				wb_fixed(b, 7, 1, rnd());
		} else if (k == 8) {
			wr_nested(b, 8, gen_buf);
		} else {
			wr_unknown(b, KNOWN(known_arg));
		}
	}
}

static void gen_kernel(struct wb *b)
{
	for (unsigned i = 0, n = rndn(8); i < n; i++) {
		unsigned k = rndn(6);
		if (k == 0)
			wr_varint(b, 1);
		else if (k < 5)
			wr_nested(b, 2, gen_arg);
		else
			wr_unknown(b, KNOWN(known_kernel));
	}
}

static void gen_copy(struct wb *b)
{
	for (unsigned i = 0, n = rndn(6); i < n; i++) {
		unsigned k = rndn(7);
		if (k < 2)
			wr_nested(b, 1, gen_buf);
		else if (k < 4)
			wr_nested(b, 2, gen_buf);
		else if (k < 6)
			wr_varint(b, 3);
		else
			wr_unknown(b, KNOWN(known_copy));
	}
}

static void gen_fill(struct wb *b)
{
	for (unsigned i = 0, n = rndn(6); i < n; i++) {
		unsigned k = rndn(7);
		if (k < 2)
			wr_nested(b, 1, gen_buf);
		else if (k < 6)
			wr_varint(b, 2 + (k & 1));
		else
			wr_unknown(b, KNOWN(known_fill));
	}
}

static void gen_wait(struct wb *b)
{
	for (unsigned i = 0, n = rndn(4); i < n; i++) {
		unsigned k = rndn(5);
		if (k < 4)
			wr_varint(b, 1 + (k & 1));
		else
			wr_unknown(b, KNOWN(known_wait));
	}
}

static void gen_op(struct wb *b)
{
	for (unsigned i = 0, n = rndn(12); i < n; i++) {
		switch (rndn(12)) {
		case 0: wr_varint(b, 1); break;
		case 1: wr_varint(b, 2); break;
		case 2: case 3: wr_nested(b, 3, gen_wait); break;
		case 4: case 5: wr_nested(b, 4, gen_kernel); break;
		case 6: wr_nested(b, 5, gen_copy); break;
		case 7: wr_nested(b, 6, gen_fill); break;
		case 8: wr_bool(b, 30); break;
		case 9: wr_bool(b, 60); break;
		case 10: wr_varint(b, 31); break;
		default: wr_unknown(b, KNOWN(known_op)); break;
		}
	}
}

static void gen_submit(struct wb *b)
{
	unsigned n = rndn(8) ? rndn(10) : rndn(100);
	for (unsigned i = 0; i < n; i++) {
		if (rndn(7))
			wr_nested(b, 1, gen_op);
		else
			wr_unknown(b, KNOWN(known_submit));
	}
}

/* ---- mutations -------------------------------------------------------- */

/* Splits a message's bytes into fields the lenient way (no checks beyond
 * staying in bounds); false where that fails.  For mutating only. */
struct span {
	size_t at, len;     /* the whole field */
	size_t val, vlen;   /* a length-delimited field's value */
	bool lp;
};

static bool split(const uint8_t *p, size_t n, struct span *out, size_t cap, size_t *count)
{
	size_t i = 0, k = 0;
	while (i < n) {
		if (k == cap)
			return false;
		size_t start = i;
		uint64_t tag = 0, v = 0;
		unsigned shift = 0;
		do {
			if (i >= n || shift > 63)
				return false;
			tag |= (uint64_t)(p[i] & 0x7f) << shift;
			shift += 7;
		} while (p[i++] & 0x80);
		struct span s = { start, 0, 0, 0, false };
		switch (tag & 7) {
		case 0:
			do
				if (i >= n)
					return false;
			while (p[i++] & 0x80);
			break;
		case 1:
		case 5:
			i += (tag & 7) == 1 ? 8 : 4;
			if (i > n)
				return false;
			break;
		case 2:
			shift = 0;
			do {
				if (i >= n || shift > 63)
					return false;
				v |= (uint64_t)(p[i] & 0x7f) << shift;
				shift += 7;
			} while (p[i++] & 0x80);
			if (v > n - i)
				return false;
			s.lp = true;
			s.val = i;
			s.vlen = (size_t)v;
			i += (size_t)v;
			break;
		default:
			return false;
		}
		s.len = i - start;
		out[k++] = s;
	}
	*count = k;
	return true;
}

/* Duplicates one field somewhere in the tree under p[0..n) (at depth 0 or
 * inside a length-delimited field, whose prefix is rewritten), or swaps two
 * neighbours; writes the result to out. */
static void mutate_fields(const uint8_t *p, size_t n, struct wb *out, int depth)
{
	struct span f[512];
	size_t nf;
	if (!split(p, n, f, 512, &nf) || nf == 0) {
		wb_bytes(out, p, n);
		return;
	}
	size_t pick = rndn((unsigned)nf);
	unsigned how = rndn(4);
	if (how == 0 && f[pick].lp && f[pick].vlen && depth < 6) {
		/* Recurse into it. */
		wb_bytes(out, p, f[pick].at);
		struct wb inner = { 0 };
		mutate_fields(p + f[pick].val, f[pick].vlen, &inner, depth + 1);
		size_t tag_len = 0;
		while (p[f[pick].at + tag_len] & 0x80)
			tag_len++;
		wb_bytes(out, p + f[pick].at, tag_len + 1);
		wb_varint(out, inner.n, 0);
		wb_bytes(out, inner.p, inner.n);
		free(inner.p);
		size_t after = f[pick].at + f[pick].len;
		wb_bytes(out, p + after, n - after);
		return;
	}
	size_t split_at = f[pick].at + f[pick].len;
	if (how == 1 && pick + 1 < nf) { /* swap with the next one */
		wb_bytes(out, p, f[pick].at);
		wb_bytes(out, p + f[pick + 1].at, f[pick + 1].len);
		wb_bytes(out, p + f[pick].at, f[pick].len);
		size_t after = f[pick + 1].at + f[pick + 1].len;
		wb_bytes(out, p + after, n - after);
		return;
	}
	/* Duplicate: right after itself, or at the end. */
	if (how == 2) {
		wb_bytes(out, p, n);
		wb_bytes(out, p + f[pick].at, f[pick].len);
	} else {
		wb_bytes(out, p, split_at);
		wb_bytes(out, p + f[pick].at, f[pick].len);
		wb_bytes(out, p + split_at, n - split_at);
	}
}

/* The Submit body inside a payload from pb_submit (its prefix is
 * canonical: one tag byte, then the length). */
static void submit_body(const struct wb *msg, const uint8_t **body, size_t *n)
{
	size_t i = 1;
	while (msg->p[i] & 0x80)
		i++;
	*body = msg->p + i + 1;
	*n = msg->n - i - 1;
}

/* ---- tests ------------------------------------------------------------ */

static void check_hex(const char *hex, unsigned long iter)
{
	uint8_t buf[256];
	size_t n = strlen(hex) / 2;
	ck_assert_uint_le(n, sizeof(buf));
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		ck_assert_int_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
		buf[i] = (uint8_t)v;
	}
	check_payload(buf, n, iter);
}

static Devq__ClientMessage *dec_hex(const char *hex)
{
	uint8_t buf[256];
	size_t n = strlen(hex) / 2;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		ck_assert_int_eq(sscanf(hex + 2 * i, "%2x", &v), 1);
		buf[i] = (uint8_t)v;
	}
	return devq_msg_dec_fast(NULL, n, buf);
}

/* protobuf-c's readings of odd inputs, pinned with values so that a
 * change in either decoder shows here, and each run through check_payload
 * against protobuf-c as well. */
START_TEST(pinned_cases)
{
	what = "pinned";
	static const char *bytes[] = {
		"3a00",     /* an empty Submit: accepted, no ops */
		"3a020a00", /* one empty op */
		/* queue as a 10-byte varint: its low 32 bits, 0xffffffff */
		"3a0d0a0b08ffffffffffffffffff01",
		/* no_timing (30) length-delimited, holding 0x00: true, since
		 * protobuf-c counts the prefix byte 0x01 */
		"3a060a04f2010100",
		/* replayable (60) as a fixed32 of 0x80 bytes: false */
		"3a080a06e50380808080",
		/* kernel{executable 5, args [{u64 10}]}, then copy{}: the copy */
		"3a0c0a0a220608051202100a2a00",
		/* kernel twice: the second whole, no args kept from the first */
		"3a0e0a0c220608051202100a22020807",
		/* CopyOp.src {id 11, offset 1} then {offset 22}: the second
		 * whole, id 0 (no merge) */
		"3a0e0a0c2a0a0a04080b10010a021016",
		/* an unknown field (99, varint) in an op: skipped */
		"3a050a03980601",
		/* deadline_us (31) = 5000: 0xf8 0x01, then 0x88 0x27 */
		"3a060a04f8018827",
		/* deadline_us twice: the last wins */
		"3a090a07f8018827f80107",
		/* deadline_us length-delimited: rejected (not a bool) */
		"3a050a03fa0100",
		/* a group (wire type 3) in an op: rejected */
		"3a040a021b00",
		/* queue = 7 behind an overlong 2-byte tag: accepted */
		"3a050a03880007",
		/* a tag byte of field 0: rejected */
		"3a030a0100",
		/* a varint of 11 bytes: rejected */
		"3a0e0a0c08ffffffffffffffffffff01",
		/* a length past the end: rejected */
		"3a030a0505",
	};
	for (unsigned i = 0; i < sizeof(bytes) / sizeof(bytes[0]); i++)
		check_hex(bytes[i], i);

	Devq__ClientMessage *m = dec_hex("3a00");
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->submit->n_ops, 0);
	devq__client_message__free_unpacked(m, NULL);

	m = dec_hex("3a0d0a0b08ffffffffffffffffff01");
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->submit->ops[0]->queue, UINT32_MAX);
	devq__client_message__free_unpacked(m, NULL);

	m = dec_hex("3a060a04f2010100");
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->submit->ops[0]->no_timing, 1);
	devq__client_message__free_unpacked(m, NULL);

	m = dec_hex("3a080a06e50380808080");
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->submit->ops[0]->replayable, 0);
	devq__client_message__free_unpacked(m, NULL);

	m = dec_hex("3a0c0a0a220608051202100a2a00");
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->submit->ops[0]->body_case, DEVQ__OP__BODY_COPY);
	ck_assert_ptr_null(m->submit->ops[0]->copy->src);
	devq__client_message__free_unpacked(m, NULL);

	m = dec_hex("3a0e0a0c220608051202100a22020807");
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->submit->ops[0]->body_case, DEVQ__OP__BODY_KERNEL);
	ck_assert_uint_eq(m->submit->ops[0]->kernel->executable, 7);
	ck_assert_uint_eq(m->submit->ops[0]->kernel->n_args, 0);
	devq__client_message__free_unpacked(m, NULL);

	/* src {id 11, offset 1} then src {offset 22}: id is 0, not 11 */
	m = dec_hex("3a0e0a0c2a0a0a04080b10010a021016");
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->submit->ops[0]->copy->src->id, 0);
	ck_assert_uint_eq(m->submit->ops[0]->copy->src->offset, 22);
	devq__client_message__free_unpacked(m, NULL);

	m = dec_hex("3a050a03980601");
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->submit->ops[0]->queue, 0);
	devq__client_message__free_unpacked(m, NULL);

	m = dec_hex("3a060a04f8018827");
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->submit->ops[0]->deadline_us, 5000);
	devq__client_message__free_unpacked(m, NULL);

	m = dec_hex("3a090a07f8018827f80107");
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->submit->ops[0]->deadline_us, 7);
	devq__client_message__free_unpacked(m, NULL);
	ck_assert_ptr_null(dec_hex("3a050a03fa0100"));

	m = dec_hex("3a050a03880007");
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->submit->ops[0]->queue, 7);
	devq__client_message__free_unpacked(m, NULL);

	ck_assert_ptr_null(dec_hex("3a040a021b00"));
	ck_assert_ptr_null(dec_hex("3a030a0100"));
	ck_assert_ptr_null(dec_hex("3a0e0a0c08ffffffffffffffffffff01"));
}
END_TEST

/* Other message bodies are protobuf-c's: the hand-written path declines
 * them and devq_msg_dec returns what protobuf-c does. */
START_TEST(other_bodies_fall_back)
{
	what = "other bodies";
	Devq__Hello h = DEVQ__HELLO__INIT;
	h.min_version = 1;
	h.max_version = 1;
	h.client_name = "x";
	Devq__ClientMessage m = DEVQ__CLIENT_MESSAGE__INIT;
	m.body_case = DEVQ__CLIENT_MESSAGE__BODY_HELLO;
	m.hello = &h;
	uint8_t buf[64];
	size_t len = devq__client_message__pack(&m, buf);
	ck_assert_ptr_null(devq_msg_dec_fast(NULL, len, buf));
	Devq__ClientMessage *r = devq_msg_dec(NULL, len, buf);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(r->body_case, DEVQ__CLIENT_MESSAGE__BODY_HELLO);
	ck_assert_str_eq(r->hello->client_name, "x");
	devq__client_message__free_unpacked(r, NULL);
	check_payload(buf, len, 0);
	/* Hello, then a Submit: one payload, two bodies; the last wins. */
	uint8_t two[80];
	memcpy(two, buf, len);
	memcpy(two + len, "\x3a\x02\x0a\x00", 4);
	check_payload(two, len + 4, 1);
	/* A Submit, then an unknown field: protobuf-c's too. */
	check_payload((const uint8_t *)"\x3a\x02\x0a\x00\xa0\x06\x01", 7, 2);
	check_payload((const uint8_t *)"", 0, 3);
}
END_TEST

/* What libdevq sends: every one must take the hand-written path, decode to
 * what protobuf-c decodes and, without unknown fields, pack back to the
 * same bytes. */
START_TEST(random_protobuf_c_submits)
{
	reseed(1);
	what = "packed by protobuf-c";
	struct wb msg = { 0 };
	unsigned long fast_before = n_fast, nul_before = n_str_nul;
	for (unsigned long i = 0; i < 3000; i++) {
		bool unknowns = pb_submit(&msg);
		check_payload(msg.p, msg.n, i);
		Devq__ClientMessage *m = devq_msg_dec_fast(NULL, msg.n, msg.p);
		ck_assert_msg(m != NULL, "seed %#" PRIx64 " #%lu: declined", seed, i);
		if (!unknowns) {
			size_t len = devq__client_message__get_packed_size(m);
			uint8_t *re = malloc(len + 1);
			ck_assert_ptr_nonnull(re);
			devq__client_message__pack(m, re);
			ck_assert_msg(len == msg.n && !memcmp(re, msg.p, len),
				      "seed %#" PRIx64 " #%lu: packs back differently", seed, i);
			free(re);
		}
		devq__client_message__free_unpacked(m, NULL);
	}
	ck_assert_uint_eq(n_fast - fast_before, 3000);
	ck_assert_uint_eq(n_str_nul, nul_before); /* rnd_name writes no NUL */
	free(msg.p);
}
END_TEST

/* Submits written field by field with every encoding protobuf-c takes,
 * and some it refuses. */
START_TEST(random_wire_submits)
{
	reseed(2);
	what = "written by field";
	struct wb body = { 0 }, msg = { 0 };
	unsigned long fast_before = n_fast, rej_before = n_both_reject;
	unsigned long ok_before = n_str_ok, nul_before = n_str_nul;
	for (unsigned long i = 0; i < 6000; i++) {
		allow_bad = !rndn(4);
		body.n = 0;
		gen_submit(&body);
		wrap_submit(&msg, body.p, body.n);
		check_payload(msg.p, msg.n, i);
	}
	/* Both outcomes came up often: the check above compared something. */
	ck_assert_uint_gt(n_fast - fast_before, 3000);
	ck_assert_uint_gt(n_both_reject - rej_before, 100);
	/* Arg names with a NUL (gen_arg writes some) and without. */
	ck_assert_uint_gt(n_str_ok - ok_before, 1000);
	ck_assert_uint_gt(n_str_nul - nul_before, 100);
	free(body.p);
	free(msg.p);
}
END_TEST

/* Every prefix of a payload, and every prefix of its Submit re-framed so
 * that the cut lands inside the fields the hand-written path reads. */
START_TEST(truncation_at_every_length)
{
	reseed(3);
	what = "truncated";
	struct wb msg = { 0 }, cut = { 0 };
	unsigned long iter = 0;
	for (int i = 0, used = 0; used < 60 && i < 5000; i++) {
		if (i % 2) {
			pb_submit(&msg);
		} else {
			struct wb body = { 0 };
			allow_bad = false;
			gen_submit(&body);
			wrap_submit(&msg, body.p, body.n);
			free(body.p);
		}
		if (msg.n > 800)
			continue;
		used++;
		const uint8_t *body;
		size_t bn;
		submit_body(&msg, &body, &bn);
		for (size_t k = 0; k <= msg.n; k++)
			check_payload(msg.p, k, iter++);
		for (size_t k = 0; k <= bn; k++) {
			wrap_submit(&cut, body, k);
			check_payload(cut.p, cut.n, iter++);
		}
	}
	ck_assert_uint_gt(iter, 10000);
	free(msg.p);
	free(cut.p);
}
END_TEST

START_TEST(flipped_and_random_bytes)
{
	reseed(4);
	what = "flipped";
	struct wb msg = { 0 }, mut = { 0 };
	unsigned long iter = 0;
	for (int i = 0; i < 3000; i++) {
		if (i % 2) {
			pb_submit(&msg);
		} else {
			struct wb body = { 0 };
			allow_bad = false;
			gen_submit(&body);
			wrap_submit(&msg, body.p, body.n);
			free(body.p);
		}
		const uint8_t *body;
		size_t bn;
		submit_body(&msg, &body, &bn);
		if (!bn)
			continue;
		/* Flip 1..4 bytes of the Submit and re-frame it. */
		wrap_submit(&mut, body, bn);
		size_t off = mut.n - bn;
		for (unsigned f = 0, nf = 1 + rndn(4); f < nf; f++)
			mut.p[off + rndn((unsigned)bn)] ^= (uint8_t)(1 + rndn(255));
		check_payload(mut.p, mut.n, iter++);
		/* And the payload itself, header included. */
		mut.n = 0;
		wb_bytes(&mut, msg.p, msg.n);
		mut.p[rndn((unsigned)msg.n)] ^= (uint8_t)(1 + rndn(255));
		check_payload(mut.p, mut.n, iter++);
	}
	what = "random bytes";
	uint8_t raw[200];
	for (int i = 0; i < 20000; i++) {
		size_t n = rndn(sizeof(raw));
		for (size_t k = 0; k < n; k++) /* bytes of small tags now and then */
			raw[k] = rndn(3) ? (uint8_t)rnd() : (uint8_t)(rndn(9) << 3 | rndn(6));
		wrap_submit(&mut, raw, n);
		check_payload(mut.p, mut.n, iter++);
		check_payload(raw, n, iter++);
	}
	free(msg.p);
	free(mut.p);
}
END_TEST

/* Fields duplicated or swapped at any depth: repeated fields append,
 * scalars and oneofs take the last, BufferArgs the last whole. */
START_TEST(duplicated_fields)
{
	reseed(5);
	what = "duplicated";
	struct wb msg = { 0 }, mut = { 0 }, body2 = { 0 };
	unsigned long fast_before = n_fast;
	for (unsigned long i = 0; i < 4000; i++) {
		if (i % 2) {
			pb_submit(&msg);
		} else {
			struct wb body = { 0 };
			allow_bad = false;
			gen_submit(&body);
			wrap_submit(&msg, body.p, body.n);
			free(body.p);
		}
		const uint8_t *body;
		size_t bn;
		submit_body(&msg, &body, &bn);
		body2.n = 0;
		mutate_fields(body, bn, &body2, 0);
		for (unsigned r = rndn(3); r; r--) { /* sometimes mutate again */
			struct wb again = { 0 };
			mutate_fields(body2.p, body2.n, &again, 0);
			free(body2.p);
			body2 = again;
		}
		wrap_submit(&mut, body2.p, body2.n);
		check_payload(mut.p, mut.n, i);
	}
	ck_assert_uint_gt(n_fast - fast_before, 3000);
	free(msg.p);
	free(mut.p);
	free(body2.p);
}
END_TEST

/* Every field of every message with every wire type, alone in a Submit
 * that is otherwise valid: the right wire type is taken, a wrong one
 * rejects the payload (a bool takes any), as protobuf-c has it. */
START_TEST(every_field_every_wire_type)
{
	reseed(8);
	what = "wire types";
	static const struct {
		uint32_t path[4]; /* the fields leading to the message, outermost first */
		unsigned depth;
		const uint32_t *known;
		size_t nknown;
	} where[] = {
		{ { 0 }, 0, KNOWN(known_submit) },
		{ { 1 }, 1, KNOWN(known_op) },
		{ { 1, 3 }, 2, KNOWN(known_wait) },
		{ { 1, 4 }, 2, KNOWN(known_kernel) },
		{ { 1, 4, 2 }, 3, KNOWN(known_arg) },
		{ { 1, 4, 2, 8 }, 4, KNOWN(known_buf) },
		{ { 1, 5 }, 2, KNOWN(known_copy) },
		{ { 1, 5, 1 }, 3, KNOWN(known_buf) },
		{ { 1, 5, 2 }, 3, KNOWN(known_buf) },
		{ { 1, 6 }, 2, KNOWN(known_fill) },
		{ { 1, 6, 1 }, 3, KNOWN(known_buf) },
	};
	struct wb in = { 0 }, out = { 0 }, msg = { 0 };
	unsigned long iter = 0, rejected = 0;
	for (size_t w = 0; w < sizeof(where) / sizeof(where[0]); w++) {
		for (size_t f = 0; f < where[w].nknown; f++) {
			for (unsigned wt = 0; wt < 8; wt++) {
				in.n = 0;
				wb_tag(&in, where[w].known[f], wt);
				if (wt == 0 || wt == 1 || wt == 5)
					rnd_unknown_value(&in, wt);
				else if (wt == 2)
					wb_bytes(&in, "\x08\x01", rndn(2) ? 2 : 0);
				else
					wb_byte(&in, 0);
				for (unsigned d = where[w].depth; d-- > 0;) {
					out.n = 0;
					wb_lfield(&out, where[w].path[d], in.p, in.n);
					struct wb t = in;
					in = out;
					out = t;
				}
				wrap_submit(&msg, in.p, in.n);
				unsigned long before = n_both_reject;
				check_payload(msg.p, msg.n, iter++);
				rejected += n_both_reject - before;
			}
		}
	}
	/* 8 wire types each: wrong ones and groups, but never a bool's. */
	ck_assert_uint_gt(rejected, iter / 2);
	free(in.p);
	free(out.p);
	free(msg.p);
}
END_TEST

/* An allocation that fails anywhere: the hand-written path gives up
 * without leaking, and devq_msg_dec still answers as protobuf-c does. */
/* The shape the decoder reads straight through (dec_op_fast): kernel ops
 * as libdevq writes them, with every value type, 0 to 10 arguments (past
 * its limit of 8), names up to a one-byte length and past it, varints of
 * every width, and now and then a field that leaves the shape (a wait, a
 * flag after the kernel, fields out of order), each op cut at every
 * length and with allocation failures at every call. */
static void wb_common_op(struct wb *b)
{
	struct wb op = { 0 }, k = { 0 };
	bool odd = !rndn(8);
	uint64_t q = rndn(4) ? rndn(200) : rnd_u64();
	if (q || rndn(2)) {
		wb_byte(&op, 0x08);
		wb_varint(&op, q, 0);
	}
	if (odd && !rndn(3)) { /* a wait: not the straight shape */
		uint8_t w[] = { 0x08, 0x01, 0x10, 0x02 };
		wb_byte(&op, 0x1a);
		wb_byte(&op, sizeof(w));
		wb_bytes(&op, w, sizeof(w));
	}
	uint64_t ts = rndn(4) ? (1ULL << 40) + rnd() % (1ULL << 44) : rnd_u64();
	if (ts || rndn(2)) {
		wb_byte(&op, 0x10);
		wb_varint(&op, ts, 0);
	}
	if (rndn(10)) {
		if (rndn(4)) {
			wb_byte(&k, 0x08);
			wb_varint(&k, rndn(3) ? rndn(40) : rnd_u64(), 0);
		}
		unsigned nargs = rndn(11);
		for (unsigned i = 0; i < nargs; i++) {
			struct wb g = { 0 };
			char name[140];
			unsigned nl = rndn(8) ? rndn(12) : 120 + rndn(10);
			for (unsigned j = 0; j < nl; j++)
				name[j] = (char)('a' + rndn(26));
			wb_byte(&g, 0x0a);
			wb_varint(&g, nl, 0);
			wb_bytes(&g, name, nl);
			unsigned v = 2 + rndn(6);
			if (v <= 5) {
				wb_byte(&g, (uint8_t)(v << 3));
				wb_varint(&g, rnd_u64(), 0);
			} else if (v == 6) {
				uint32_t x = (uint32_t)rnd();
				wb_byte(&g, 0x35);
				wb_bytes(&g, (uint8_t[]){ (uint8_t)x, (uint8_t)(x >> 8), (uint8_t)(x >> 16),
							  (uint8_t)(x >> 24) },
					 4);
			} else {
				uint64_t x = rnd();
				wb_byte(&g, 0x39);
				for (int j = 0; j < 8; j++)
					wb_byte(&g, (uint8_t)(x >> (8 * j)));
			}
			wb_nested(&k, 0x12, &g);
			free(g.p);
		}
		wb_nested(&op, 0x22, &k);
	}
	if (odd && !rndn(2)) { /* no_timing after the kernel */
		wb_byte(&op, 0xf0);
		wb_byte(&op, 0x01);
		wb_byte(&op, 0x01);
	} else if (odd) { /* the queue again, out of order: the last wins */
		wb_byte(&op, 0x08);
		wb_varint(&op, rnd_u64(), 0);
	}
	wb_nested(b, 0x0a, &op);
	free(op.p);
	free(k.p);
}

START_TEST(common_kernel_op_shape)
{
	reseed(9);
	what = "common op";
	struct wb body = { 0 }, msg = { 0 }, cut = { 0 };
	unsigned long iter = 0;
	for (int i = 0; i < 400; i++) {
		body.n = 0;
		unsigned nops = 1 + rndn(3);
		for (unsigned j = 0; j < nops; j++)
			wb_common_op(&body);
		wrap_submit(&msg, body.p, body.n);
		check_payload(msg.p, msg.n, iter++);
		if (i % 4 == 0)
			for (size_t k = 0; k < body.n; k++) {
				wrap_submit(&cut, body.p, k);
				check_payload(cut.p, cut.n, iter++);
			}
		if (i % 8 == 0) {
			struct counting c;
			counting_init(&c);
			Devq__ClientMessage *m = devq_msg_dec_fast(&c.pa, msg.n, msg.p);
			ck_assert_ptr_nonnull(m);
			devq__client_message__free_unpacked(m, &c.pa);
			long need = c.calls;
			for (long k = 0; k < need; k++) {
				counting_init(&c);
				c.fail_at = k;
				ck_assert_ptr_null(devq_msg_dec_fast(&c.pa, msg.n, msg.p));
				ck_assert_int_eq(c.live, 0);
			}
		}
	}
	ck_assert_uint_gt(iter, 2000);
	free(body.p);
	free(msg.p);
	free(cut.p);
}
END_TEST

START_TEST(allocation_failures)
{
	reseed(6);
	what = "allocation failure";
	struct wb msg = { 0 };
	for (int i = 0; i < 40; i++) {
		pb_submit(&msg);
		if (msg.n > 4000)
			continue;
		struct counting c;
		counting_init(&c);
		Devq__ClientMessage *m = devq_msg_dec_fast(&c.pa, msg.n, msg.p);
		ck_assert_ptr_nonnull(m);
		devq__client_message__free_unpacked(m, &c.pa);
		long need = c.calls;
		Devq__ClientMessage *ref = devq__client_message__unpack(NULL, msg.n, msg.p);
		for (long k = 0; k < need; k++) {
			counting_init(&c);
			c.fail_at = k;
			ck_assert_ptr_null(devq_msg_dec_fast(&c.pa, msg.n, msg.p));
			ck_assert_int_eq(c.live, 0);
			counting_init(&c);
			c.fail_at = k;
			m = devq_msg_dec(&c.pa, msg.n, msg.p);
			if (m) { /* protobuf-c got past the failed call */
				y_is_hand = false;
				ck_assert_msg(eq_msg(ref, m), "%s", diff);
				devq__client_message__free_unpacked(m, &c.pa);
			}
			ck_assert_int_eq(c.live, 0);
		}
		devq__client_message__free_unpacked(ref, NULL);
	}
	free(msg.p);
}
END_TEST

/* The daemon's way: decoded into the frame arena (daemon/base/pool.c), used,
 * re-packed as quota.c re-packs a held Submit, and dropped at reset. */
START_TEST(arena_path)
{
	reseed(7);
	what = "arena";
	struct devq_arena arena;
	devq_pool_arena_init(&arena);
	struct wb msg = { 0 };
	for (unsigned long i = 0; i < 1000; i++) {
		bool unknowns;
		if (i % 100 == 99) { /* larger than the arena's buffer */
			unknowns = false;
			msg.n = 0;
			Devq__Op op = DEVQ__OP__INIT, *ops[3000];
			Devq__KernelOp k = DEVQ__KERNEL_OP__INIT;
			k.executable = 3;
			op.queue = 1;
			op.body_case = DEVQ__OP__BODY_KERNEL;
			op.kernel = &k;
			for (int j = 0; j < 3000; j++)
				ops[j] = &op;
			Devq__Submit s = DEVQ__SUBMIT__INIT;
			s.n_ops = 3000;
			s.ops = ops;
			Devq__ClientMessage cm = DEVQ__CLIENT_MESSAGE__INIT;
			cm.body_case = DEVQ__CLIENT_MESSAGE__BODY_SUBMIT;
			cm.submit = &s;
			size_t len = devq__client_message__get_packed_size(&cm);
			wb_bytes(&msg, NULL, len);
			devq__client_message__pack(&cm, msg.p);
		} else if (i % 2) { /* kernel ops of the one-block shape */
			struct wb body = { 0 };
			unsigned nops = 1 + rndn(4);
			for (unsigned j = 0; j < nops; j++)
				wb_common_op(&body);
			wrap_submit(&msg, body.p, body.n);
			free(body.p);
			unknowns = true; /* written as no encoder would: no byte compare */
		} else {
			unknowns = pb_submit(&msg);
		}
		Devq__ClientMessage *ref = devq__client_message__unpack(NULL, msg.n, msg.p);
		Devq__ClientMessage *m = devq_msg_dec_arena(&arena.pa, msg.n, msg.p);
		ck_assert_ptr_nonnull(ref);
		ck_assert_ptr_nonnull(m);
		y_is_hand = true; /* protobuf-c's packing: the hand-written path's */
		ck_assert_msg(eq_msg(ref, m), "seed %#" PRIx64 " #%lu: %s", seed, i, diff);
		size_t len = devq__submit__get_packed_size(m->submit);
		uint8_t *re = malloc(len + 1);
		ck_assert_ptr_nonnull(re);
		devq__submit__pack(m->submit, re);
		const uint8_t *body;
		size_t bn;
		submit_body(&msg, &body, &bn);
		if (!unknowns)
			ck_assert_msg(len == bn && !memcmp(re, body, bn),
				      "seed %#" PRIx64 " #%lu: re-packs differently", seed, i);
		free(re);
		devq__client_message__free_unpacked(ref, NULL);
		devq_pool_arena_reset(&arena);
	}
	devq_pool_arena_fini(&arena);
	free(msg.p);
}
END_TEST

/* ---- Submits as trees, written with one site changed ------------------- */

/* A field of a message to write: a varint, a fixed32 or fixed64, bytes (a
 * name), or a message of its own fields. */
enum nk { N_VAR, N_FIX32, N_FIX64, N_BYTES, N_MSG };

struct node {
	uint32_t num;
	enum nk kind;
	uint64_t v;              /* N_VAR, N_FIX32, N_FIX64 */
	const char *bytes;       /* N_BYTES */
	const struct node *kids; /* N_MSG */
	unsigned nkids;
};

#define VAR(n, x) { .num = (n), .kind = N_VAR, .v = (x) }
#define FIX32(n, x) { .num = (n), .kind = N_FIX32, .v = (x) }
#define FIX64(n, x) { .num = (n), .kind = N_FIX64, .v = (x) }
#define BYTES(n, s) { .num = (n), .kind = N_BYTES, .bytes = (s) }
#define MSG(n, k) { .num = (n), .kind = N_MSG, .kids = (k), .nkids = sizeof(k) / sizeof((k)[0]) }

/* The changes, each at one site (a field's tag, or its value):
 *  - TAG_PAD: the tag overlong by arg bytes (1 to 5; 5 makes it 6 long);
 *  - VAR_PAD: a varint overlong by arg bytes, up to 11 long;
 *  - CUT: a value cut to its first arg bytes (a varint, a fixed one, or a
 *    length-delimited one's content, the prefix then saying arg);
 *  - LEN_DELTA: a length prefix off by -2, -1, +1 or +2 (arg 0 to 3), the
 *    content as it was, the enclosing prefixes counting the bytes written;
 *  - LEN_PAD: a length prefix overlong by arg bytes (1 to 5). */
enum pk { P_NONE, TAG_PAD, VAR_PAD, CUT, LEN_DELTA, LEN_PAD, P_KINDS };

static struct {
	unsigned site; /* the site to change */
	enum pk kind;
	unsigned arg;
	unsigned next;    /* sites seen so far while writing */
	bool applied;     /* the change fit the site */
	unsigned vlen[256]; /* pass P_NONE: each value site's length in bytes */
} pt;

static void wt_varint(struct wb *b, uint64_t v, unsigned site, bool is_len)
{
	unsigned n = vlen(v);
	if (pt.kind != P_NONE && pt.site == site) {
		if (pt.kind == VAR_PAD && !is_len && pt.arg >= 1 && n + pt.arg <= 11) {
			pt.applied = true;
			wb_varint(b, v, pt.arg);
			return;
		}
		if (pt.kind == LEN_PAD && is_len && pt.arg >= 1 && pt.arg <= 5) {
			pt.applied = true;
			wb_varint(b, v, pt.arg);
			return;
		}
		if (pt.kind == CUT && !is_len && pt.arg < n) {
			pt.applied = true;
			struct wb t = { 0 };
			wb_varint(&t, v, 0);
			wb_bytes(b, t.p, pt.arg);
			free(t.p);
			return;
		}
	}
	wb_varint(b, v, 0);
}

static void wt_fields(struct wb *b, const struct node *f, unsigned n);

static void wt_field(struct wb *b, const struct node *f)
{
	static const unsigned wts[] = { [N_VAR] = 0, [N_FIX32] = 5, [N_FIX64] = 1,
					[N_BYTES] = 2, [N_MSG] = 2 };
	unsigned tag_site = pt.next++, val_site = pt.next++;
	uint64_t t = (uint64_t)f->num << 3 | wts[f->kind];
	if (pt.kind == TAG_PAD && pt.site == tag_site && pt.arg >= 1 && pt.arg <= 5) {
		pt.applied = true;
		wb_varint(b, t, pt.arg);
	} else {
		wb_varint(b, t, 0);
	}
	bool here = pt.site == val_site;
	switch (f->kind) {
	case N_VAR:
		if (pt.kind == P_NONE && val_site < 256) {
			pt.vlen[val_site] = vlen(f->v);
		}
		wt_varint(b, f->v, val_site, false);
		return;
	case N_FIX32:
	case N_FIX64: {
		unsigned n = f->kind == N_FIX32 ? 4 : 8;
		if (pt.kind == P_NONE && val_site < 256) {
			pt.vlen[val_site] = n;
		}
		if (here && pt.kind == CUT && pt.arg < n) {
			pt.applied = true;
			n = pt.arg;
		}
		for (unsigned i = 0; i < n; i++)
			wb_byte(b, (uint8_t)(f->v >> (8 * i)));
		return;
	}
	default: {
		struct wb c = { 0 };
		if (f->kind == N_BYTES)
			wb_bytes(&c, f->bytes, strlen(f->bytes));
		else
			wt_fields(&c, f->kids, f->nkids);
		if (pt.kind == P_NONE && val_site < 256) {
			pt.vlen[val_site] = (unsigned)c.n;
		}
		size_t n = c.n, prefix = n;
		if (here && pt.kind == CUT && pt.arg < n) {
			pt.applied = true;
			n = prefix = pt.arg;
		} else if (here && pt.kind == LEN_DELTA && pt.arg < 4) {
			int d = (int)pt.arg - 2 + (pt.arg >= 2); /* -2, -1, +1, +2 */
			if ((long)n + d >= 0) {
				pt.applied = true;
				prefix = (size_t)((long)n + d);
			}
		}
		wt_varint(b, prefix, val_site, true);
		wb_bytes(b, c.p, n);
		free(c.p);
	}
	}
}

static void wt_fields(struct wb *b, const struct node *f, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		wt_field(b, &f[i]);
}

/* Kernel ops in the straight shape (dec_op_fast's) and around its limits,
 * ops with waits and flags, copies and fills: Submits of several ops, so
 * that a change lands before, inside and after the op counted. */
static const struct node arg_u64[] = { BYTES(1, "n"), VAR(2, 1ULL << 35) };
static const struct node arg_f32[] = { BYTES(1, "alpha"), FIX32(6, 0x3fc00000) };
static const struct node arg_f64[] = { BYTES(1, "x"), FIX64(7, 0x400921fb54442d18ULL) };
static const struct node arg_u32[] = { BYTES(1, "m"), VAR(3, 200) };
static const struct node arg_i64[] = { BYTES(1, "i"), VAR(4, UINT64_MAX) };
static const struct node arg_i32[] = { BYTES(1, "abcdefghijklmno"), VAR(5, 7) };
static const struct node arg_long[] = { BYTES(1, "abcdefghijklmnop"), VAR(2, 0x7f) };
static const struct node arg_buf_v[] = { VAR(1, 7), VAR(2, 4096) };
static const struct node arg_buf[] = { BYTES(1, "buf"), MSG(8, arg_buf_v) };
static const struct node arg_noval[] = { BYTES(1, "q") };
static const struct node kern6[] = {
	VAR(1, 3),	   MSG(2, arg_u64), MSG(2, arg_f32), MSG(2, arg_f64),
	MSG(2, arg_u32), MSG(2, arg_i64), MSG(2, arg_i32),
};
static const struct node kern9[] = {
	VAR(1, 1ULL << 55), MSG(2, arg_u64), MSG(2, arg_f32), MSG(2, arg_f64),
	MSG(2, arg_u32),    MSG(2, arg_i64), MSG(2, arg_i32), MSG(2, arg_long),
	MSG(2, arg_u64),    MSG(2, arg_u32),
};
static const struct node kern1[] = { VAR(1, 2), MSG(2, arg_u32) };
static const struct node kern_buf[] = { VAR(1, 1), MSG(2, arg_buf), MSG(2, arg_noval) };
static const struct node op_common[] = { VAR(1, 5), VAR(2, (1ULL << 40) + 123), MSG(4, kern6) };
static const struct node op_small[] = { VAR(1, 0x7f), VAR(2, 0x80), MSG(4, kern1) };
static const struct node op_nine[] = { VAR(2, 1ULL << 49), MSG(4, kern9) };
static const struct node wait1[] = { VAR(1, 1), VAR(2, 2) };
static const struct node wait2[] = { VAR(1, 3), VAR(2, 1ULL << 50) };
static const struct node op_waits[] = {
	VAR(1, 300), MSG(3, wait1), MSG(3, wait2), MSG(4, kern_buf), VAR(30, 1), VAR(31, 5000),
	VAR(60, 1),
};
static const struct node buf_src[] = { VAR(1, 1), VAR(2, 0) };
static const struct node buf_dst[] = { VAR(1, 2), VAR(2, 8) };
static const struct node copy_b[] = { MSG(1, buf_src), MSG(2, buf_dst), VAR(3, 64) };
static const struct node fill_b[] = { MSG(1, buf_dst), VAR(2, 16), VAR(3, 0xdeadbeef) };
static const struct node op_copy[] = { VAR(1, 2), MSG(5, copy_b) };
static const struct node op_fill[] = { MSG(6, fill_b), VAR(2, 9) };
static const struct node sub_a[] = { MSG(1, op_common), MSG(1, op_small) };
static const struct node sub_b[] = { MSG(1, op_small), MSG(1, op_nine) };
static const struct node sub_c[] = { MSG(1, op_waits), MSG(1, op_copy), MSG(1, op_fill) };
static const struct node sub_d[] = { MSG(1, op_common) };
static const struct node kern_f32[] = { VAR(1, 4), MSG(2, arg_f32) };
static const struct node kern_f64[] = { VAR(1, 4), MSG(2, arg_f64) };
static const struct node op_f32[] = { VAR(1, 1), MSG(4, kern_f32) };
static const struct node op_f64[] = { MSG(4, kern_f64) };
static const struct node sub_e[] = { MSG(1, op_small), MSG(1, op_f32) };
static const struct node sub_f[] = { MSG(1, op_f64) };
static const struct {
	const struct node *f;
	unsigned n;
} trees[] = {
	{ sub_a, 2 },
	{ sub_b, 2 },
	{ sub_c, 3 },
	{ sub_d, 1 },
	{ sub_e, 2 },
	{ sub_f, 1 },
};

static void wt_submit(struct wb *msg, unsigned t)
{
	struct wb body = { 0 };
	pt.next = 0;
	pt.applied = false;
	wt_fields(&body, trees[t].f, trees[t].n);
	wrap_submit(msg, body.p, body.n);
	free(body.p);
}

/* Every site of every tree with every change that fits it: each length
 * off by one and two either way, each value cut at every byte, each tag
 * and varint padded to and past protobuf-c's limit.  Written deliberately
 * rather than at random, these are the inputs that tell a bound from one
 * off by one: a length one past its message, a varint one byte too long. */
START_TEST(every_site_every_edge)
{
	what = "edges";
	struct wb msg = { 0 };
	unsigned long iter = 0, applied = 0, fast_before = n_fast;
	for (unsigned t = 0; t < sizeof(trees) / sizeof(trees[0]); t++) {
		pt.kind = P_NONE;
		pt.site = UINT_MAX;
		wt_submit(&msg, t);
		check_payload(msg.p, msg.n, iter++);
		unsigned sites = pt.next;
		ck_assert_uint_le(sites, 256);
		for (unsigned s = 0; s < sites; s++) {
			for (enum pk k = TAG_PAD; k < P_KINDS; k++) {
				unsigned max = k == CUT ? pt.vlen[s] : 12;
				for (unsigned arg = 0; arg <= max; arg++) {
					pt.kind = k;
					pt.site = s;
					pt.arg = arg;
					wt_submit(&msg, t);
					if (!pt.applied)
						continue;
					applied++;
					check_payload(msg.p, msg.n, iter++);
				}
			}
		}
	}
	pt.kind = P_NONE;
	/* Every kind of change fitted many sites; many inputs stayed whole. */
	ck_assert_uint_gt(applied, 2000);
	ck_assert_uint_gt(n_fast - fast_before, 500);
	free(msg.p);
}
END_TEST

/* ---- the straight shape, at its limits ---------------------------------- */

/* One op of the straight shape (dec_op_fast's) with a kernel and nargs u64
 * arguments; widths are of the varints as written (overlong beyond a
 * value's own), name_len the first argument's name length. */
struct shape {
	unsigned queue_w, ts_w, exe_w;
	unsigned val_w; /* the arguments' u64 width; F32, F64: of that type; X7F: u64 0x7f */
	unsigned nargs, name_len;
	bool fast; /* read straight through */
};

enum { F32 = 100, F64, X7F };

static void wb_width(struct wb *b, unsigned w)
{
	/* 1 << 7(w-1) has w bytes, up to 1 << 63 (10 bytes). */
	wb_varint(b, w > 1 ? 1ULL << (7 * (w - 1) < 63 ? 7 * (w - 1) : 63) : 1, 0);
}

static void wb_shape_op(struct wb *body, const struct shape *s)
{
	struct wb op = { 0 }, k = { 0 };
	wb_byte(&op, 0x08);
	wb_width(&op, s->queue_w);
	wb_byte(&op, 0x10);
	wb_width(&op, s->ts_w);
	wb_byte(&k, 0x08);
	wb_width(&k, s->exe_w);
	for (unsigned i = 0; i < s->nargs; i++) {
		struct wb g = { 0 };
		unsigned nl = i ? 1 : s->name_len;
		wb_byte(&g, 0x0a);
		wb_varint(&g, nl, 0);
		for (unsigned j = 0; j < nl; j++)
			wb_byte(&g, (uint8_t)('a' + j % 26));
		if (s->val_w == F32) {
			wb_bytes(&g, "\x35\x00\x00\xc0\x3f", 5);
		} else if (s->val_w == F64) {
			wb_bytes(&g, "\x39\x18\x2d\x44\x54\xfb\x21\x09\x40", 9);
		} else {
			wb_byte(&g, 0x10);
			if (s->val_w == X7F)
				wb_byte(&g, 0x7f);
			else
				wb_width(&g, s->val_w);
		}
		wb_nested(&k, 0x12, &g);
		free(g.p);
	}
	wb_nested(&op, 0x22, &k);
	wb_nested(body, 0x0a, &op);
	free(op.p);
	free(k.p);
}

/* What the daemon gets from libdevq is read in one pass and lands in the
 * frame arena as one block per kernel op (its kernel, argument array,
 * arguments and names) plus one for the Submit's ops: ClientMessage,
 * Submit, the ops, and one block per op.  Each limit of the shape at
 * exactly the limit (still one block) and one past it (read field by field
 * by dec_op: more blocks, the same message). */
START_TEST(straight_shape_one_block)
{
	what = "straight shape";
	static const struct shape cases[] = {
		{ 1, 6, 1, 1, 2, 1, true },
		/* varints: one byte, then one load of up to 8; 9 and 10 are read
		 * byte by byte */
		{ 8, 6, 1, 1, 2, 1, true },   { 9, 6, 1, 1, 2, 1, false },
		{ 10, 6, 1, 1, 2, 1, false }, { 1, 1, 1, 1, 2, 1, true },
		{ 1, 8, 1, 1, 2, 1, true },   { 1, 9, 1, 1, 2, 1, false },
		{ 1, 6, 2, 1, 2, 1, true },   { 1, 6, 8, 1, 2, 1, true },
		{ 1, 6, 9, 1, 2, 1, false },  { 1, 6, 1, 8, 2, 1, true },
		{ 1, 6, 1, 9, 2, 1, false },  { 1, 6, 1, 10, 2, 1, false },
		/* FAST_ARGS arguments, and one more */
		{ 1, 6, 1, 1, 1, 1, true },   { 1, 6, 1, 1, 8, 1, true },
		{ 1, 6, 1, 1, 9, 1, false },
		/* a kernel of 127 bytes (one-byte length), and of 128 */
		{ 1, 6, 1, 1, 1, 119, true }, { 1, 6, 1, 1, 1, 120, false },
		{ 1, 6, 1, 1, 1, 0, true },
		/* values of every type, each ending its argument: a fixed32 or
		 * fixed64 exactly filling it, a one-byte varint of 0x7f */
		{ 1, 6, 1, F32, 1, 1, true }, { 1, 6, 1, F64, 1, 1, true },
		{ 1, 6, 1, F32, 3, 4, true }, { 1, 6, 1, F64, 3, 4, true },
		{ 1, 6, 1, X7F, 1, 1, true }, { 1, 6, 1, X7F, 8, 2, true },
	};
	struct wb body = { 0 }, msg = { 0 };
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		for (unsigned nops = 1; nops <= 3; nops++) {
			body.n = 0;
			for (unsigned j = 0; j < nops; j++)
				wb_shape_op(&body, &cases[i]);
			wrap_submit(&msg, body.p, body.n);
			check_payload(msg.p, msg.n, i);
			struct arena_count ac;
			arena_count_init(&ac);
			const uint8_t *g = guarded(msg.p, msg.n);
			Devq__ClientMessage *m = devq_msg_dec_arena(&ac.pa, msg.n, g);
			ck_assert_ptr_nonnull(m);
			ck_assert_uint_eq(m->submit->n_ops, nops);
			long one_pass = 3 + (long)nops;
			if (cases[i].fast)
				ck_assert_msg(ac.calls == one_pass, "case %u, %u ops: %ld blocks, not %ld",
					      i, nops, ac.calls, one_pass);
			else
				ck_assert_msg(ac.calls > one_pass,
					      "case %u, %u ops: %ld blocks, read in one pass", i, nops,
					      ac.calls);
			arena_count_fini(&ac);
		}
	}
	free(body.p);
	free(msg.p);
}
END_TEST


/* A length of 128 or more takes two bytes, the first with bit 7 set: read
 * as a one-byte length of 0x80, a kernel whose real length (1024) runs past
 * its op would end exactly at the op's end, and its second length byte
 * (0x08) would read as the executable's tag.  protobuf-c rejects it; so
 * must the straight path.  And a kernel of exactly 128 bytes is read. */
START_TEST(two_byte_lengths)
{
	what = "two-byte lengths";
	struct wb op = { 0 }, body = { 0 }, msg = { 0 };
	for (int real = 0; real < 2; real++) {
		op.n = 0;
		wb_bytes(&op, real ? "\x22\x80\x01\x08\x05\x12\x7c\x0a\x78"
				   : "\x22\x80\x08\x05\x12\x7c\x0a\x78",
			 real ? 9 : 8);
		for (int i = 0; i < 120; i++)
			wb_byte(&op, 'a');
		wb_bytes(&op, "\x10\x01", 2);
		ck_assert_uint_eq(op.n, real ? 131u : 130u);
		body.n = 0;
		wb_nested(&body, 0x0a, &op);
		wrap_submit(&msg, body.p, body.n);
		check_payload(msg.p, msg.n, (unsigned long)real);
		Devq__ClientMessage *m = devq_msg_dec(NULL, msg.n, msg.p);
		if (real) {
			ck_assert_ptr_nonnull(m);
			ck_assert_uint_eq(m->submit->ops[0]->kernel->n_args, 1);
			ck_assert_uint_eq(strlen(m->submit->ops[0]->kernel->args[0]->name), 120);
			devq__client_message__free_unpacked(m, NULL);
		} else {
			ck_assert_ptr_null(m);
		}
	}
	free(op.p);
	free(body.p);
	free(msg.p);
}
END_TEST

/* ---- strings checked with their lengths (codec/strcheck.c) ------------- */

/* A length-delimited field, tag and length in their shortest forms (not
 * wb_lfield's random padding: these cases are pinned). */
static void wb_len(struct wb *b, uint32_t num, const void *d, size_t n)
{
	wb_varint(b, (uint64_t)num << 3 | 2, 0);
	wb_varint(b, n, 0);
	wb_bytes(b, d, n);
}

/* strcheck of the payload, read where it ends at an inaccessible page. */
static enum devq_strcheck strcheck(const struct wb *b, char *where, size_t n)
{
	return devq_strcheck(&devq__client_message__descriptor, guarded(b->p, b->n), b->n, where,
			     n);
}

/* The string field num of the ClientMessage body field body, as C reads it
 * after protobuf-c decoded the payload. */
static const char *decoded_string(const Devq__ClientMessage *m, uint32_t body, uint32_t num)
{
	const ProtobufCFieldDescriptor *bf =
		protobuf_c_message_descriptor_get_field(&devq__client_message__descriptor, body);
	ck_assert_ptr_nonnull(bf);
	const ProtobufCMessage *inner = *(ProtobufCMessage *const *)((const char *)m + bf->offset);
	const ProtobufCFieldDescriptor *sf = protobuf_c_message_descriptor_get_field(
		(const ProtobufCMessageDescriptor *)bf->descriptor, num);
	ck_assert_ptr_nonnull(sf);
	ck_assert_int_eq(sf->type, PROTOBUF_C_TYPE_STRING);
	return *(const char *const *)((const char *)inner + sf->offset);
}

/* Hello's and the admin calls' strings, with and without a NUL anywhere in
 * them: protobuf-c accepts every one and hands C the part before the NUL
 * (why the check exists); strcheck refuses exactly those with a NUL and
 * names the field from the body down. */
START_TEST(strings_with_nul)
{
	what = "strings";
	static const struct {
		uint32_t body, num; /* ClientMessage's body field, its string field */
		const char *s;
		size_t n;
		const char *where; /* NULL: no NUL, passes */
	} cases[] = {
		{ 1, 3, "demo", 4, NULL },
		{ 1, 3, "", 0, NULL },
		{ 1, 3, "ab\0cd", 5, "hello: client_name" },
		{ 80, 1, "job_42", 6, NULL },
		{ 80, 1, "job\0../../x", 11, "admin_grant: tenant" },
		{ 80, 1, "\0job", 4, "admin_grant: tenant" },
		{ 81, 1, "job", 3, NULL },
		{ 81, 1, "job\0", 4, "admin_evict: tenant" },
		{ 81, 1, "\0", 1, "admin_evict: tenant" },
		/* Bytes above 0x7f are not NULs: not this check's business. */
		{ 81, 1, "j\xff\x80", 3, NULL },
	};
	struct wb in = { 0 }, msg = { 0 };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		in.n = msg.n = 0;
		wb_len(&in, cases[i].num, cases[i].s, cases[i].n);
		wb_len(&msg, cases[i].body, in.p, in.n);
		char where[64] = "x";
		enum devq_strcheck r = strcheck(&msg, where, sizeof(where));
		ck_assert_msg(r == (cases[i].where ? DEVQ_STRCHECK_NUL : DEVQ_STRCHECK_OK),
			      "case %zu: %d", i, (int)r);
		ck_assert_str_eq(where, cases[i].where ? cases[i].where : "");
		Devq__ClientMessage *m = devq_msg_dec(NULL, msg.n, msg.p);
		ck_assert_msg(m != NULL, "case %zu: protobuf-c refuses it", i);
		ck_assert_uint_eq(strlen(decoded_string(m, cases[i].body, cases[i].num)),
				  strnlen(cases[i].s, cases[i].n));
		devq__client_message__free_unpacked(m, NULL);
	}
	/* AdminTenants has no field: passes, empty or not. */
	msg.n = 0;
	wb_len(&msg, 82, NULL, 0);
	char where[64];
	ck_assert_int_eq(strcheck(&msg, where, sizeof(where)), DEVQ_STRCHECK_OK);
	msg.n = 0;
	ck_assert_int_eq(strcheck(&msg, where, sizeof(where)), DEVQ_STRCHECK_OK);

	/* Zero bytes outside strings pass: a uid of 0 written out, an
	 * overlong varint ending in 0x00, a fixed64 of zeros and an unknown
	 * length-delimited field full of them, which nothing reads. */
	in.n = msg.n = 0;
	wb_len(&in, 1, "t", 1);
	wb_bytes(&in, "\x10\x00\x28\x80\x00\x30\x00", 7); /* uid, memory_bytes, priority */
	wb_bytes(&in, "\xa1\x06\x00\x00\x00\x00\x00\x00\x00\x00", 10); /* 100: fixed64 */
	wb_len(&in, 101, "\0\0\0", 3);
	wb_len(&msg, 80, in.p, in.n);
	ck_assert_int_eq(strcheck(&msg, where, sizeof(where)), DEVQ_STRCHECK_OK);
	Devq__ClientMessage *m = devq_msg_dec(NULL, msg.n, msg.p);
	ck_assert_ptr_nonnull(m);
	ck_assert_str_eq(m->admin_grant->tenant, "t");
	devq__client_message__free_unpacked(m, NULL);

	/* A string seen twice: protobuf-c keeps the last, but each one is
	 * checked, whichever comes last. */
	for (int last_bad = 0; last_bad < 2; last_bad++) {
		in.n = msg.n = 0;
		wb_len(&in, 1, last_bad ? "ok" : "a\0b", last_bad ? 2 : 3);
		wb_len(&in, 1, last_bad ? "a\0b" : "ok", last_bad ? 3 : 2);
		wb_len(&msg, 80, in.p, in.n);
		ck_assert_int_eq(strcheck(&msg, where, sizeof(where)), DEVQ_STRCHECK_NUL);
		ck_assert_str_eq(where, "admin_grant: tenant");
	}

	/* Nested: an argument's name, four messages down a Submit, in the
	 * second of two arguments. */
	for (int bad = 0; bad < 2; bad++) {
		struct wb arg1 = { 0 }, arg2 = { 0 }, kern = { 0 }, op = { 0 }, sub = { 0 };
		wb_len(&arg1, 1, "n", 1);
		wb_bytes(&arg1, "\x10\x00", 2);
		wb_len(&arg2, 1, bad ? "x\0y" : "xy", bad ? 3 : 2);
		wb_bytes(&kern, "\x08\x00", 2);
		wb_len(&kern, 2, arg1.p, arg1.n);
		wb_len(&kern, 2, arg2.p, arg2.n);
		wb_len(&op, 4, kern.p, kern.n);
		wb_len(&sub, 1, op.p, op.n);
		msg.n = 0;
		wb_len(&msg, 7, sub.p, sub.n);
		ck_assert_int_eq(strcheck(&msg, where, sizeof(where)),
				 bad ? DEVQ_STRCHECK_NUL : DEVQ_STRCHECK_OK);
		ck_assert_str_eq(where, bad ? "submit: ops: kernel: args: name" : "");
		check_payload(msg.p, msg.n, (unsigned long)bad); /* protobuf-c accepts it */
		/* where is cut to fit, NUL-terminated, however small. */
		char small[8];
		ck_assert_int_eq(devq_strcheck(&devq__client_message__descriptor, msg.p, msg.n,
					       small, sizeof(small)),
				 bad ? DEVQ_STRCHECK_NUL : DEVQ_STRCHECK_OK);
		ck_assert_str_eq(small, bad ? "submit:" : "");
		char one[1] = { 'x' };
		devq_strcheck(&devq__client_message__descriptor, msg.p, msg.n, one, 1);
		ck_assert_int_eq(one[0], '\0');
		free(arg1.p);
		free(arg2.p);
		free(kern.p);
		free(op.p);
		free(sub.p);
	}
	free(in.p);
	free(msg.p);
}
END_TEST

/* Bytes protobuf-c refuses are read no further than their end and called
 * malformed, naming where; every prefix of a payload with a NUL in a
 * nested string is handled (and the random inputs of the tests above all
 * went through strcheck as well). */
START_TEST(strings_malformed)
{
	what = "strings";
	static const struct {
		const char *bytes;
		size_t n;
		const char *where;
	} bad[] = {
		{ "\x82\x05\x02\x08\x01", 5, "admin_grant: tenant" }, /* a string as a varint */
		{ "\x82\x05\x05\x0d\x00\x00\x00\x00", 8, "admin_grant: tenant" }, /* fixed32 */
		{ "\x08\x01", 2, "hello" },                   /* a message as a varint */
		{ "\x82\x05\x05\x0a\x10" "ab", 7, "" },       /* body past the end */
		{ "\x82\x05\x02\x0a\x10", 5, "admin_grant" }, /* string past its message */
		{ "\x8a\x05\x02\x0a\x81", 5, "admin_evict" }, /* length prefix cut */
		{ "\x8a\x05\x02\x0b\x00", 5, "admin_evict" }, /* a group (wire type 3) */
		{ "\x0a\x01\x00", 3, "hello" },               /* field 0 */
		{ "\x0a\x06\x8a\x80\x80\x80\x80\x00", 8, "hello" }, /* a tag of 6 bytes */
	};
	struct wb msg = { 0 };
	char where[64];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		msg.n = 0;
		wb_bytes(&msg, bad[i].bytes, bad[i].n);
		ck_assert_msg(!devq__client_message__unpack(NULL, msg.n, msg.p),
			      "case %zu: protobuf-c accepts it", i);
		enum devq_strcheck r = strcheck(&msg, where, sizeof(where));
		ck_assert_msg(r == DEVQ_STRCHECK_MALFORMED, "case %zu: %d", i, (int)r);
		ck_assert_msg(!strcmp(where, bad[i].where), "case %zu: where '%s'", i, where);
	}
	/* Every prefix of an AdminGrant with a NUL in its name, then of a
	 * Submit with one in an argument's name: malformed or, where whole
	 * enough to reach the NUL, refused for it; never past the end. */
	struct wb in = { 0 }, arg = { 0 }, kern = { 0 }, op = { 0 }, sub = { 0 };
	wb_len(&in, 1, "job\0../../x", 11);
	wb_bytes(&in, "\x10\xfe\xff\x03\x18\x02", 6);
	wb_len(&arg, 1, "n\0", 2);
	wb_bytes(&arg, "\x10\x05", 2);
	wb_len(&kern, 2, arg.p, arg.n);
	wb_len(&op, 4, kern.p, kern.n);
	wb_len(&sub, 1, op.p, op.n);
	for (int which = 0; which < 2; which++) {
		msg.n = 0;
		if (which)
			wb_len(&msg, 7, sub.p, sub.n);
		else
			wb_len(&msg, 80, in.p, in.n);
		struct wb whole = msg;
		for (size_t k = 0; k <= whole.n; k++) {
			enum devq_strcheck r = devq_strcheck(&devq__client_message__descriptor,
							     guarded(whole.p, k), k, where,
							     sizeof(where));
			ck_assert_msg(r == (k == 0 ? DEVQ_STRCHECK_OK
					    : k == whole.n ? DEVQ_STRCHECK_NUL
							   : DEVQ_STRCHECK_MALFORMED),
				      "%d: prefix %zu of %zu: %d", which, k, whole.n, (int)r);
			check_payload(whole.p, k, k);
		}
	}
	free(in.p);
	free(arg.p);
	free(kern.p);
	free(op.p);
	free(sub.p);
	free(msg.p);
}
END_TEST

/* A message that contains itself, which devq.proto has none of but a
 * descriptor may: node { node child = 1; string name = 2; }. */
static const ProtobufCMessageDescriptor node_desc;
static const ProtobufCFieldDescriptor node_fields[] = {
	{ .name = "child", .id = 1, .label = PROTOBUF_C_LABEL_NONE, .type = PROTOBUF_C_TYPE_MESSAGE,
	  .descriptor = &node_desc },
	{ .name = "name", .id = 2, .label = PROTOBUF_C_LABEL_NONE, .type = PROTOBUF_C_TYPE_STRING },
};
static const ProtobufCIntRange node_ranges[] = { { 1, 0 }, { 0, 2 } };
static const ProtobufCMessageDescriptor node_desc = {
	.magic = PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC,
	.name = "test.node",
	.short_name = "node",
	.n_fields = 2,
	.fields = node_fields,
	.n_field_ranges = 1,
	.field_ranges = node_ranges,
};

/* depth nodes, each the child of the one before, inside the top one; the
 * last with the name s. */
static void nodes(struct wb *out, unsigned depth, const char *s, size_t n)
{
	struct wb cur = { 0 }, next = { 0 };
	wb_len(&cur, 2, s, n);
	for (unsigned i = 0; i < depth; i++) {
		next.n = 0;
		wb_len(&next, 1, cur.p, cur.n);
		struct wb t = cur;
		cur = next;
		next = t;
	}
	out->n = 0;
	wb_bytes(out, cur.p, cur.n);
	free(cur.p);
	free(next.p);
}

/* The deepest nesting of messages below d, or -1 when one contains itself
 * (seen[] holds the messages on the way down). */
static int schema_depth(const ProtobufCMessageDescriptor *d, const ProtobufCMessageDescriptor **seen,
			unsigned nseen)
{
	for (unsigned i = 0; i < nseen; i++)
		if (seen[i] == d)
			return -1;
	ck_assert_uint_lt(nseen, 32);
	seen[nseen] = d;
	int deepest = 0;
	for (unsigned i = 0; i < d->n_fields; i++) {
		if (d->fields[i].type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		int k = schema_depth(d->fields[i].descriptor, seen, nseen + 1);
		if (k < 0)
			return -1;
		if (k + 1 > deepest)
			deepest = k + 1;
	}
	return deepest;
}

/* DEVQ_STRCHECK_DEPTH messages below the top one are walked (a NUL at the
 * bottom is found); one more is refused; and devq.proto's ClientMessage
 * nests within the bound and contains itself nowhere. */
START_TEST(strings_depth_bound)
{
	struct wb msg = { 0 };
	char where[256];
	for (unsigned depth = DEVQ_STRCHECK_DEPTH - 1; depth <= DEVQ_STRCHECK_DEPTH + 1; depth++) {
		for (int nul = 0; nul < 2; nul++) {
			nodes(&msg, depth, nul ? "a\0" : "a", nul ? 2 : 1);
			enum devq_strcheck r = devq_strcheck(&node_desc, guarded(msg.p, msg.n), msg.n,
							     where, sizeof(where));
			enum devq_strcheck want = depth > DEVQ_STRCHECK_DEPTH ? DEVQ_STRCHECK_DEEP
						  : nul			    ? DEVQ_STRCHECK_NUL
									    : DEVQ_STRCHECK_OK;
			ck_assert_msg(r == want, "depth %u, nul %d: %d", depth, nul, (int)r);
			/* The path: "child: " for each node down, then the
			 * field; the one child too many for DEEP. */
			char path[256] = "";
			for (unsigned i = 0; i < depth && want != DEVQ_STRCHECK_OK; i++)
				strcat(path, i ? ": child" : "child");
			if (want == DEVQ_STRCHECK_NUL)
				strcat(path, ": name");
			ck_assert_str_eq(where, path);
		}
	}
	free(msg.p);

	const ProtobufCMessageDescriptor *seen[32];
	int d = schema_depth(&devq__client_message__descriptor, seen, 0);
	ck_assert_msg(d >= 5 && d <= DEVQ_STRCHECK_DEPTH,
		      "ClientMessage nests %d messages deep (-1: one contains itself); "
		      "DEVQ_STRCHECK_DEPTH is %d",
		      d, DEVQ_STRCHECK_DEPTH);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("msg_dec");
	TCase *t = tcase_create("msg_dec");
	tcase_set_timeout(t, 300); /* ASan and valgrind runs are slow */
	tcase_add_test(t, pinned_cases);
	tcase_add_test(t, other_bodies_fall_back);
	tcase_add_test(t, random_protobuf_c_submits);
	tcase_add_test(t, random_wire_submits);
	tcase_add_test(t, truncation_at_every_length);
	tcase_add_test(t, flipped_and_random_bytes);
	tcase_add_test(t, duplicated_fields);
	tcase_add_test(t, every_field_every_wire_type);
	tcase_add_test(t, common_kernel_op_shape);
	tcase_add_test(t, allocation_failures);
	tcase_add_test(t, arena_path);
	tcase_add_test(t, every_site_every_edge);
	tcase_add_test(t, straight_shape_one_block);
	tcase_add_test(t, two_byte_lengths);
	tcase_add_test(t, strings_with_nul);
	tcase_add_test(t, strings_malformed);
	tcase_add_test(t, strings_depth_bound);
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
