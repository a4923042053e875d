/* SPDX-License-Identifier: Apache-2.0 */
/* Hand-written protobuf encoding of DaemonMessage{completions} (see
 * cmpl_enc.h for why).  The wire format, from proto/devq.proto:
 *
 *   DaemonMessage   5: Completions  (tag 0x2a, length-delimited)
 *   Completions     1: repeated Completion items (tag 0x0a each)
 *   Completion      1: uint32 queue   (0x08)    2: uint64 point (0x10)
 *                   3: Code code      (0x18)    4: string message (0x22)
 *                   5: Timing timing  (0x2a)
 *   Timing          1..7: uint64      (0x08, 0x10, ... 0x38)
 *
 * Every field number is below 16, so every tag is one byte.  A length
 * prefix precedes each submessage, and a varint's width depends on its
 * value, so the bytes cannot simply be written front to back:
 *
 *  - the caller allocates the exact payload, so one sizing pass
 *    (devq_cmpl_enc_size) is needed anyway; it also gives the outer
 *    Completions length, the only prefix whose width is not bounded;
 *  - a Timing is at most 7 * (1 + 10) = 77 bytes, so its length always
 *    fits one varint byte: that byte is filled in after the fields;
 *  - a Completion is under 128 bytes unless it carries a long message, so
 *    its length byte is likewise filled in afterwards, and in the rare
 *    longer case the body moves up to make room for a wider prefix.
 *
 * Sizing each record again while writing (a count-leading-zeros per
 * field) would be a large part of the encoder's instructions (measured:
 * bench/RESULTS.md, "Figures from the code's comments"); filling the
 * length bytes in afterwards avoids it. */
#include "codec/cmpl_enc.h"

#include <string.h>

/* Tags: (field number << 3) | wire type (0 varint, 2 length-delimited). */
#define TAG_VARINT(f) ((uint8_t)((f) << 3 | 0))
#define TAG_LEN(f) ((uint8_t)((f) << 3 | 2))

enum {
	F_DAEMON_COMPLETIONS = 5,
	F_COMPLETIONS_ITEMS = 1,
	F_CMPL_QUEUE = 1,
	F_CMPL_POINT = 2,
	F_CMPL_CODE = 3,
	F_CMPL_MESSAGE = 4,
	F_CMPL_TIMING = 5,
	/* Timing's fields are 1..7 in the order of devq_cmpl.t[]. */
};

/* Bytes of v as a varint: 7 bits a byte, so ceil(bits / 7) with at least
 * one byte.  bits * 9 / 64 + 1 equals that for 1..64 bits without a
 * division by 7 or a loop (checked against protobuf-c by test_cmpl_enc);
 * v | 1 gives 0 one significant bit. */
static inline size_t vsize(uint64_t v)
{
	unsigned bits = 64u - (unsigned)__builtin_clzll(v | 1);
	return bits * 9u / 64u + 1u;
}

static inline uint8_t *put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

/* An enum is encoded as an int32, and a negative int32 as its 64-bit sign
 * extension (10 bytes): what protobuf-c and every other encoder write. */
static inline uint64_t enum_wire(int code)
{
	return (uint64_t)(int64_t)(int32_t)code;
}

static inline size_t msg_len(const struct devq_cmpl *c)
{
	/* Most ops complete without a message: skip the call.  Bounded: a
	 * record that somehow lost its NUL is never read past its array. */
	return c->msg[0] ? strnlen(c->msg, sizeof(c->msg) - 1) : 0;
}

static inline size_t timing_size(const uint64_t t[7])
{
	size_t n = 0;
	for (int i = 0; i < 7; i++)
		if (t[i])
			n += 1 + vsize(t[i]);
	return n;
}

/* Size of one Completion's body (without its own tag and length). */
static inline size_t cmpl_size(const struct devq_cmpl *c, size_t mlen, size_t tsize)
{
	size_t n = 0;
	if (c->queue)
		n += 1 + vsize(c->queue);
	if (c->point)
		n += 1 + vsize(c->point);
	if (c->code)
		n += 1 + vsize(enum_wire(c->code));
	if (mlen)
		n += 1 + vsize(mlen) + mlen;
	/* A set submessage field is written even when empty: protobuf-c packs
	 * a non-NULL Timing as "2a 00", and the old path always set one. */
	n += 1 + vsize(tsize) + tsize;
	return n;
}

/* Size of the Completions body: each item with its tag and length. */
static size_t items_size(const struct devq_cmpl *c, size_t n)
{
	size_t sum = 0;
	for (size_t i = 0; i < n; i++) {
		size_t b = cmpl_size(&c[i], msg_len(&c[i]), timing_size(c[i].t));
		sum += 1 + vsize(b) + b;
	}
	return sum;
}

size_t devq_cmpl_enc_size(const struct devq_cmpl *c, size_t n)
{
	size_t body = items_size(c, n);
	return 1 + vsize(body) + body;
}

/* Width of the outer length prefix, from the total size that
 * devq_cmpl_enc_size returned: the k with 1 + k + body == size and
 * vsize(body) == k (unique: vsize never shrinks as body grows).  Two
 * tries for a batch of 64 (a body of 128 B .. 16 KiB). */
static size_t outer_prefix(size_t size)
{
	for (size_t k = 1; k < 10; k++)
		if (size >= 1 + k && vsize(size - 1 - k) == k)
			return k;
	return 10;
}

/* Writes the Timing submessage (tag, length, fields) at p. */
static inline uint8_t *put_timing(uint8_t *p, const uint64_t t[7])
{
	*p++ = TAG_LEN(F_CMPL_TIMING);
	uint8_t *len = p++; /* at most 77 bytes follow: one length byte */
	for (int f = 0; f < 7; f++) {
		if (t[f]) {
			*p++ = TAG_VARINT(f + 1);
			p = put_varint(p, t[f]);
		}
	}
	*len = (uint8_t)(p - len - 1);
	return p;
}

size_t devq_cmpl_enc(uint8_t *out, size_t size, const struct devq_cmpl *c, size_t n)
{
	uint8_t *p = out;
	size_t k = outer_prefix(size);
	*p++ = TAG_LEN(F_DAEMON_COMPLETIONS);
	p = put_varint(p, size - 1 - k);
	for (size_t i = 0; i < n; i++) {
		const struct devq_cmpl *x = &c[i];
		*p++ = TAG_LEN(F_COMPLETIONS_ITEMS);
		uint8_t *len = p++; /* one length byte, widened below if need be */
		uint8_t *body = p;
		if (x->queue) {
			*p++ = TAG_VARINT(F_CMPL_QUEUE);
			p = put_varint(p, x->queue);
		}
		if (x->point) {
			*p++ = TAG_VARINT(F_CMPL_POINT);
			p = put_varint(p, x->point);
		}
		if (x->code) {
			*p++ = TAG_VARINT(F_CMPL_CODE);
			p = put_varint(p, enum_wire(x->code));
		}
		size_t mlen = msg_len(x);
		if (mlen) {
			*p++ = TAG_LEN(F_CMPL_MESSAGE);
			p = put_varint(p, mlen);
			memcpy(p, x->msg, mlen);
			p += mlen;
		}
		p = put_timing(p, x->t);
		size_t blen = (size_t)(p - body);
		if (blen < 0x80) {
			*len = (uint8_t)blen;
		} else {
			/* The sizing pass counted the wide prefix, so the
			 * buffer has room for the body to move up. */
			size_t w = vsize(blen);
			memmove(body + w - 1, body, blen);
			put_varint(len, blen);
			p += w - 1;
		}
	}
	return (size_t)(p - out);
}
