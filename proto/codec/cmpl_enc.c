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
 * proto/wire.h names these fields and holds the varint and tag helpers
 * that every hand-written codec shares.
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

#include "wire.h"

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
		n += devq_wire_field_size(t[i]);
	return n;
}

/* Size of one Completion's body (without its own tag and length). */
static inline size_t cmpl_size(const struct devq_cmpl *c, size_t mlen, size_t tsize)
{
	size_t n = devq_wire_field_size(c->queue) + devq_wire_field_size(c->point) +
		   devq_wire_field_size(devq_wire_int32(c->code));
	if (mlen)
		n += devq_wire_len_size(mlen);
	/* A set submessage field is written even when empty: protobuf-c packs
	 * a non-NULL Timing as "2a 00", and the old path always set one. */
	return n + devq_wire_len_size(tsize);
}

/* Size of the Completions body: each item with its tag and length. */
static size_t items_size(const struct devq_cmpl *c, size_t n)
{
	size_t sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += devq_wire_len_size(cmpl_size(&c[i], msg_len(&c[i]), timing_size(c[i].t)));
	return sum;
}

size_t devq_cmpl_enc_size(const struct devq_cmpl *c, size_t n)
{
	return devq_wire_len_size(items_size(c, n));
}

/* Writes the Timing submessage (tag, length, fields) at p. */
static inline uint8_t *put_timing(uint8_t *p, const uint64_t t[7])
{
	*p++ = DEVQ_WIRE_TAG1(COMPLETION_TIMING);
	uint8_t *len = p++; /* at most 77 bytes follow: one length byte */
	for (int f = 0; f < 7; f++)
		p = devq_wire_put_field(p, DEVQ_WIRE_TIMING_TAG(f), t[f]);
	return devq_wire_close_short(len, p);
}

size_t devq_cmpl_enc(uint8_t *out, size_t size, const struct devq_cmpl *c, size_t n)
{
	uint8_t *p = out;
	*p++ = DEVQ_WIRE_TAG1(DAEMON_MESSAGE_COMPLETIONS);
	p = devq_wire_put_varint(p, size - 1 - devq_wire_prefix_width(size));
	for (size_t i = 0; i < n; i++) {
		const struct devq_cmpl *x = &c[i];
		*p++ = DEVQ_WIRE_TAG1(COMPLETIONS_ITEMS);
		uint8_t *len = p++; /* one length byte, widened if need be */
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(COMPLETION_QUEUE), x->queue);
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(COMPLETION_POINT), x->point);
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(COMPLETION_CODE), devq_wire_int32(x->code));
		size_t mlen = msg_len(x);
		if (mlen) {
			*p++ = DEVQ_WIRE_TAG1(COMPLETION_MESSAGE);
			p = devq_wire_put_varint(p, mlen);
			memcpy(p, x->msg, mlen);
			p += mlen;
		}
		p = put_timing(p, x->t);
		/* The sizing pass counted a wide prefix, so the buffer has
		 * room for a long body to move up. */
		p = devq_wire_close_len(len, p);
	}
	return (size_t)(p - out);
}
