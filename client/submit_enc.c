/* SPDX-License-Identifier: Apache-2.0 */
/* Hand-written protobuf encoding of ClientMessage{submit} (see
 * submit_enc.h for why).  The wire format, from proto/devq.proto:
 *
 *   ClientMessage  7: Submit submit       (tag 0x3a)
 *   Submit         1: repeated Op ops     (0x0a)
 *   Op             1: uint32 queue (0x08)  2: uint64 client_submit_ns (0x10)
 *                  3: repeated Wait waits (0x1a)
 *                  4: KernelOp (0x22) | 5: CopyOp (0x2a) | 6: FillOp (0x32)
 *                  30: bool no_timing (0xf0 0x01)
 *                  60: bool replayable (0xe0 0x03)
 *   Wait           1: uint32 queue (0x08)  2: uint64 point (0x10)
 *   KernelOp       1: uint32 executable (0x08)  2: repeated Arg args (0x12)
 *   Arg            1: string name (0x0a), then one of
 *                  2: u64 (0x10)  3: u32 (0x18)  4: i64 (0x20)  5: i32 (0x28)
 *                  6: f32 (0x35, fixed32)  7: f64 (0x39, fixed64)
 *                  8: BufferArg buffer (0x42)
 *   BufferArg      1: uint64 id (0x08)  2: uint64 offset (0x10)
 *   CopyOp         1: BufferArg src (0x0a)  2: BufferArg dst (0x12)
 *                  3: uint64 size (0x18)
 *   FillOp         1: BufferArg dst (0x0a)  2: uint64 size (0x10)
 *                  3: uint32 pattern (0x18)
 *
 * A length prefix precedes every submessage and a varint's width depends on
 * its value, so the bytes cannot be written front to back without knowing
 * each length first.  As in cmpl_enc.c: one sizing pass gives the
 * frame's exact size (the send buffer needs it) and the outer Submit
 * length; while writing, every other submessage gets one length byte that
 * is filled in after its body, and a body of 128 bytes or more (a kernel
 * with many or long-named arguments, an op with many waits) moves up to
 * make room for a wider prefix.  The sizing pass counted those wider
 * prefixes, so the move never runs past the buffer.  BufferArg (at most 22
 * bytes), Wait (17), CopyOp (59) and FillOp (41) always fit one byte. */
#include "submit_enc.h"

#include <string.h>

#define TAG_VARINT(f) ((uint8_t)((f) << 3 | 0))
#define TAG_I64(f) ((uint8_t)((f) << 3 | 1))
#define TAG_LEN(f) ((uint8_t)((f) << 3 | 2))
#define TAG_I32(f) ((uint8_t)((f) << 3 | 5))

/* Field numbers above 15 take a two-byte tag. */
static const uint8_t tag_no_timing[2] = { (30 << 3 & 0x7f) | 0x80, (30 << 3) >> 7 };
static const uint8_t tag_replayable[2] = { (60 << 3 & 0x7f) | 0x80, (60 << 3) >> 7 };

/* Bytes of v as a varint: ceil(bits / 7), at least one (see
 * cmpl_enc.c; test_cli_codec checks it against protobuf-c). */
static inline size_t vsize(uint64_t v)
{
	unsigned bits = 64u - (unsigned)__builtin_clzll(v | 1);
	return bits * 9u / 64u + 1u;
}

/* A varint field left out when 0 (proto3): tag and value. */
static inline size_t fsize(uint64_t v)
{
	return v ? 1 + vsize(v) : 0;
}

/* A length-delimited field: tag, length, body. */
static inline size_t lsize(size_t body)
{
	return 1 + vsize(body) + body;
}

/* int32 is the 64-bit sign extension on the wire: a negative one takes
 * ten bytes, as protobuf-c (and every other encoder) writes it. */
static inline uint64_t i32_wire(int32_t v)
{
	return (uint64_t)(int64_t)v;
}

static inline uint64_t buf_id(const struct devq_buffer *b)
{
	return b ? b->id : 0;
}

static inline size_t bufarg_size(const struct devq_buffer *b, uint64_t off)
{
	return fsize(buf_id(b)) + fsize(off);
}

static inline size_t name_len(const char *name)
{
	return name && name[0] ? strlen(name) : 0;
}

static size_t arg_size(const struct devq_arg *a)
{
	size_t nl = name_len(a->name), n = nl ? lsize(nl) : 0;
	switch (a->type) {
	case DEVQ_ARG_U64: return n + 1 + vsize(a->v.u64);
	case DEVQ_ARG_U32: return n + 1 + vsize(a->v.u32);
	case DEVQ_ARG_I64: return n + 1 + vsize((uint64_t)a->v.i64);
	case DEVQ_ARG_I32: return n + 1 + vsize(i32_wire(a->v.i32));
	case DEVQ_ARG_F32: return n + 1 + 4;
	case DEVQ_ARG_F64: return n + 1 + 8;
	case DEVQ_ARG_BUFFER: return n + lsize(bufarg_size(a->v.buf.buf, a->v.buf.offset));
	}
	return n; /* a type libdevq does not know: no value (submit_enc.h) */
}

/* Size of the op's body submessage (KernelOp, CopyOp, FillOp) with its
 * tag and length; 0 for an op of an unknown kind. */
static size_t body_size(const struct devq_op *o)
{
	size_t n;
	switch (o->kind) {
	case DEVQ_OP_KERNEL:
		n = fsize(o->exec ? o->exec->id : 0);
		for (size_t j = 0; j < o->nargs; j++)
			n += lsize(arg_size(&o->args[j]));
		return lsize(n);
	case DEVQ_OP_COPY:
		n = lsize(bufarg_size(o->src, o->src_offset)) +
		    lsize(bufarg_size(o->dst, o->dst_offset)) + fsize(o->size);
		return lsize(n);
	case DEVQ_OP_FILL:
		n = lsize(bufarg_size(o->dst, o->dst_offset)) + fsize(o->size) +
		    fsize(o->pattern);
		return lsize(n);
	}
	return 0;
}

/* Size of one Op's body; fixed is what every op of the batch carries alike
 * (the submit stamp and the replayable mark). */
static size_t op_size(const struct devq_op *o, size_t fixed)
{
	size_t n = fixed + fsize(o->queue) + body_size(o) + (o->no_timing ? 3 : 0);
	for (size_t j = 0; j < o->nwaits; j++)
		n += lsize(fsize(o->waits[j].queue) + fsize(o->waits[j].point));
	return n;
}

static inline size_t fixed_size(const struct devq_submit_enc_batch *b)
{
	return fsize(b->submit_ns) + (b->replayable ? 3 : 0);
}

size_t devq_submit_enc_size(const struct devq_submit_enc_batch *b)
{
	size_t fixed = fixed_size(b), sum = 0;
	for (size_t i = 0; i < b->n; i++)
		sum += lsize(op_size(&b->ops[i], fixed));
	return lsize(sum);
}

/* ---- writing ----------------------------------------------------------- */

static inline uint8_t *put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

static inline uint8_t *put_field(uint8_t *p, uint8_t tag, uint64_t v)
{
	if (!v)
		return p;
	*p++ = tag;
	return put_varint(p, v);
}

static inline uint8_t *put_le(uint8_t *p, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
	return p + bytes;
}

/* Ends a submessage whose one length byte is at len and whose body runs
 * from len + 1 to p; returns the new end. */
static inline uint8_t *close_len(uint8_t *len, uint8_t *p)
{
	size_t blen = (size_t)(p - len - 1);
	if (blen < 0x80) {
		*len = (uint8_t)blen;
		return p;
	}
	size_t w = vsize(blen);
	memmove(len + w, len + 1, blen);
	put_varint(len, blen);
	return p + w - 1;
}

/* A BufferArg: at most 22 bytes, so its length is one byte. */
static inline uint8_t *put_bufarg(uint8_t *p, uint8_t tag, const struct devq_buffer *b,
				  uint64_t off)
{
	*p++ = tag;
	uint8_t *len = p++;
	p = put_field(p, TAG_VARINT(1), buf_id(b));
	p = put_field(p, TAG_VARINT(2), off);
	*len = (uint8_t)(p - len - 1);
	return p;
}

static uint8_t *put_arg(uint8_t *p, const struct devq_arg *a)
{
	*p++ = TAG_LEN(2); /* KernelOp.args */
	uint8_t *len = p++;
	size_t nl = name_len(a->name);
	if (nl) {
		*p++ = TAG_LEN(1);
		p = put_varint(p, nl);
		memcpy(p, a->name, nl);
		p += nl;
	}
	uint32_t f32;
	uint64_t f64;
	switch (a->type) {
	case DEVQ_ARG_U64:
		*p++ = TAG_VARINT(2);
		p = put_varint(p, a->v.u64);
		break;
	case DEVQ_ARG_U32:
		*p++ = TAG_VARINT(3);
		p = put_varint(p, a->v.u32);
		break;
	case DEVQ_ARG_I64:
		*p++ = TAG_VARINT(4);
		p = put_varint(p, (uint64_t)a->v.i64);
		break;
	case DEVQ_ARG_I32:
		*p++ = TAG_VARINT(5);
		p = put_varint(p, i32_wire(a->v.i32));
		break;
	case DEVQ_ARG_F32:
		/* The float's bits, little endian, whatever its value:
		 * -0.0 and NaNs go out as they are. */
		memcpy(&f32, &a->v.f32, 4);
		*p++ = TAG_I32(6);
		p = put_le(p, f32, 4);
		break;
	case DEVQ_ARG_F64:
		memcpy(&f64, &a->v.f64, 8);
		*p++ = TAG_I64(7);
		p = put_le(p, f64, 8);
		break;
	case DEVQ_ARG_BUFFER:
		p = put_bufarg(p, TAG_LEN(8), a->v.buf.buf, a->v.buf.offset);
		break;
	}
	return close_len(len, p);
}

static uint8_t *put_body(uint8_t *p, const struct devq_op *o)
{
	uint8_t *len;
	switch (o->kind) {
	case DEVQ_OP_KERNEL:
		*p++ = TAG_LEN(4);
		len = p++;
		p = put_field(p, TAG_VARINT(1), o->exec ? o->exec->id : 0);
		for (size_t j = 0; j < o->nargs; j++)
			p = put_arg(p, &o->args[j]);
		return close_len(len, p);
	case DEVQ_OP_COPY:
		*p++ = TAG_LEN(5);
		len = p++;
		p = put_bufarg(p, TAG_LEN(1), o->src, o->src_offset);
		p = put_bufarg(p, TAG_LEN(2), o->dst, o->dst_offset);
		p = put_field(p, TAG_VARINT(3), o->size);
		*len = (uint8_t)(p - len - 1);
		return p;
	case DEVQ_OP_FILL:
		*p++ = TAG_LEN(6);
		len = p++;
		p = put_bufarg(p, TAG_LEN(1), o->dst, o->dst_offset);
		p = put_field(p, TAG_VARINT(2), o->size);
		p = put_field(p, TAG_VARINT(3), o->pattern);
		*len = (uint8_t)(p - len - 1);
		return p;
	}
	return p;
}

/* Width of the outer length prefix, from the total size: the k with
 * 1 + k + body == size and vsize(body) == k (see cmpl_enc.c). */
static size_t outer_prefix(size_t size)
{
	for (size_t k = 1; k < 10; k++)
		if (size >= 1 + k && vsize(size - 1 - k) == k)
			return k;
	return 10;
}

size_t devq_submit_enc(uint8_t *out, size_t size, const struct devq_submit_enc_batch *b)
{
	/* The stamp is the same varint in every op: encode it once. */
	uint8_t stamp[11];
	size_t nstamp = (size_t)(put_field(stamp, TAG_VARINT(2), b->submit_ns) - stamp);
	uint8_t *p = out;
	*p++ = TAG_LEN(7);
	p = put_varint(p, size - 1 - outer_prefix(size));
	for (size_t i = 0; i < b->n; i++) {
		const struct devq_op *o = &b->ops[i];
		*p++ = TAG_LEN(1);
		uint8_t *len = p++;
		p = put_field(p, TAG_VARINT(1), o->queue);
		memcpy(p, stamp, nstamp);
		p += nstamp;
		for (size_t j = 0; j < o->nwaits; j++) {
			*p++ = TAG_LEN(3);
			uint8_t *wlen = p++;
			p = put_field(p, TAG_VARINT(1), o->waits[j].queue);
			p = put_field(p, TAG_VARINT(2), o->waits[j].point);
			*wlen = (uint8_t)(p - wlen - 1);
		}
		p = put_body(p, o);
		if (o->no_timing) {
			memcpy(p, tag_no_timing, 2);
			p[2] = 1;
			p += 3;
		}
		if (b->replayable) {
			memcpy(p, tag_replayable, 2);
			p[2] = 1;
			p += 3;
		}
		p = close_len(len, p);
	}
	return (size_t)(p - out);
}
