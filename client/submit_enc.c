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
 *                  31: uint64 deadline_us (0xf8 0x01)
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
 * proto/wire.h names these fields and holds the varint and tag helpers
 * that every hand-written codec shares.
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

#include "wire.h"

static inline uint64_t buf_id(const struct devq_buffer *b)
{
	return b ? b->id : 0;
}

static inline size_t bufarg_size(const struct devq_buffer *b, uint64_t off)
{
	return devq_wire_field_size(buf_id(b)) + devq_wire_field_size(off);
}

static inline size_t name_len(const char *name)
{
	return name && name[0] ? strlen(name) : 0;
}

static size_t arg_size(const struct devq_arg *a)
{
	size_t nl = name_len(a->name), n = nl ? devq_wire_len_size(nl) : 0;
	switch (a->type) {
	case DEVQ_ARG_U64: return n + 1 + devq_wire_varint_size(a->v.u64);
	case DEVQ_ARG_U32: return n + 1 + devq_wire_varint_size(a->v.u32);
	case DEVQ_ARG_I64: return n + 1 + devq_wire_varint_size((uint64_t)a->v.i64);
	case DEVQ_ARG_I32: return n + 1 + devq_wire_varint_size(devq_wire_int32(a->v.i32));
	case DEVQ_ARG_F32: return n + 1 + 4;
	case DEVQ_ARG_F64: return n + 1 + 8;
	case DEVQ_ARG_BUFFER:
		return n + devq_wire_len_size(bufarg_size(a->v.buf.buf, a->v.buf.offset));
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
		n = devq_wire_field_size(o->exec ? o->exec->id : 0);
		for (size_t j = 0; j < o->nargs; j++)
			n += devq_wire_len_size(arg_size(&o->args[j]));
		return devq_wire_len_size(n);
	case DEVQ_OP_COPY:
		n = devq_wire_len_size(bufarg_size(o->src, o->src_offset)) +
		    devq_wire_len_size(bufarg_size(o->dst, o->dst_offset)) +
		    devq_wire_field_size(o->size);
		return devq_wire_len_size(n);
	case DEVQ_OP_FILL:
		n = devq_wire_len_size(bufarg_size(o->dst, o->dst_offset)) +
		    devq_wire_field_size(o->size) + devq_wire_field_size(o->pattern);
		return devq_wire_len_size(n);
	}
	return 0;
}

/* A bool field set to true: its tag (two bytes for no_timing and
 * replayable, numbered above 15), then 1. */
static inline size_t flag_size(uint32_t tag)
{
	return devq_wire_varint_size(tag) + 1;
}

static inline uint8_t *put_flag(uint8_t *p, uint32_t tag)
{
	p = devq_wire_put_varint(p, tag);
	*p++ = 1;
	return p;
}

/* Op i's deadline (devq_submit_ex), 0 without options.  Read through
 * memcpy: the entries are ext_size bytes apart, the caller's size. */
static inline uint64_t op_deadline(const struct devq_submit_enc_batch *b, size_t i)
{
	if (!b->ext)
		return 0;
	uint64_t v;
	memcpy(&v,
	       (const unsigned char *)b->ext + i * b->ext_size +
		       offsetof(struct devq_op_ext, deadline_us),
	       sizeof(v));
	return v;
}

/* The deadline field when set (proto3: 0 is left out); two tag bytes. */
static inline size_t deadline_size(uint64_t us)
{
	return us ? devq_wire_varint_size(DEVQ_WIRE_TAG_OF(OP_DEADLINE_US)) +
			    devq_wire_varint_size(us)
		  : 0;
}

/* Size of one Op's body; fixed is what every op of the batch carries alike
 * (the submit stamp and the replayable mark), dl its deadline. */
static size_t op_size(const struct devq_op *o, size_t fixed, uint64_t dl)
{
	size_t n = fixed + devq_wire_field_size(o->queue) + body_size(o) +
		   (o->no_timing ? flag_size(DEVQ_WIRE_TAG_OF(OP_NO_TIMING)) : 0) +
		   deadline_size(dl);
	for (size_t j = 0; j < o->nwaits; j++)
		n += devq_wire_len_size(devq_wire_field_size(o->waits[j].queue) +
					devq_wire_field_size(o->waits[j].point));
	return n;
}

static inline size_t fixed_size(const struct devq_submit_enc_batch *b)
{
	return devq_wire_field_size(b->submit_ns) +
	       (b->replayable ? flag_size(DEVQ_WIRE_TAG_OF(OP_REPLAYABLE)) : 0);
}

size_t devq_submit_enc_size(const struct devq_submit_enc_batch *b)
{
	size_t fixed = fixed_size(b), sum = 0;
	for (size_t i = 0; i < b->n; i++)
		sum += devq_wire_len_size(op_size(&b->ops[i], fixed, op_deadline(b, i)));
	return devq_wire_len_size(sum);
}

/* ---- writing ----------------------------------------------------------- */

/* A BufferArg: at most 22 bytes, so its length is one byte. */
static inline uint8_t *put_bufarg(uint8_t *p, uint8_t tag, const struct devq_buffer *b,
				  uint64_t off)
{
	*p++ = tag;
	uint8_t *len = p++;
	p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(BUFFER_ARG_ID), buf_id(b));
	p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(BUFFER_ARG_OFFSET), off);
	return devq_wire_close_short(len, p);
}

static uint8_t *put_arg(uint8_t *p, const struct devq_arg *a)
{
	*p++ = DEVQ_WIRE_TAG1(KERNEL_OP_ARGS);
	uint8_t *len = p++;
	size_t nl = name_len(a->name);
	if (nl) {
		*p++ = DEVQ_WIRE_TAG1(ARG_NAME);
		p = devq_wire_put_varint(p, nl);
		memcpy(p, a->name, nl);
		p += nl;
	}
	uint32_t f32;
	uint64_t f64;
	switch (a->type) {
	case DEVQ_ARG_U64:
		*p++ = DEVQ_WIRE_TAG1(ARG_U64);
		p = devq_wire_put_varint(p, a->v.u64);
		break;
	case DEVQ_ARG_U32:
		*p++ = DEVQ_WIRE_TAG1(ARG_U32);
		p = devq_wire_put_varint(p, a->v.u32);
		break;
	case DEVQ_ARG_I64:
		*p++ = DEVQ_WIRE_TAG1(ARG_I64);
		p = devq_wire_put_varint(p, (uint64_t)a->v.i64);
		break;
	case DEVQ_ARG_I32:
		*p++ = DEVQ_WIRE_TAG1(ARG_I32);
		p = devq_wire_put_varint(p, devq_wire_int32(a->v.i32));
		break;
	case DEVQ_ARG_F32:
		/* The float's bits, little endian, whatever its value:
		 * -0.0 and NaNs go out as they are. */
		memcpy(&f32, &a->v.f32, 4);
		*p++ = DEVQ_WIRE_TAG1(ARG_F32);
		p = devq_wire_put_fixed32(p, f32);
		break;
	case DEVQ_ARG_F64:
		memcpy(&f64, &a->v.f64, 8);
		*p++ = DEVQ_WIRE_TAG1(ARG_F64);
		p = devq_wire_put_fixed64(p, f64);
		break;
	case DEVQ_ARG_BUFFER:
		p = put_bufarg(p, DEVQ_WIRE_TAG1(ARG_BUFFER), a->v.buf.buf, a->v.buf.offset);
		break;
	}
	return devq_wire_close_len(len, p);
}

static uint8_t *put_body(uint8_t *p, const struct devq_op *o)
{
	uint8_t *len;
	switch (o->kind) {
	case DEVQ_OP_KERNEL:
		*p++ = DEVQ_WIRE_TAG1(OP_KERNEL);
		len = p++;
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(KERNEL_OP_EXECUTABLE),
					o->exec ? o->exec->id : 0);
		for (size_t j = 0; j < o->nargs; j++)
			p = put_arg(p, &o->args[j]);
		return devq_wire_close_len(len, p);
	case DEVQ_OP_COPY:
		*p++ = DEVQ_WIRE_TAG1(OP_COPY);
		len = p++;
		p = put_bufarg(p, DEVQ_WIRE_TAG1(COPY_OP_SRC), o->src, o->src_offset);
		p = put_bufarg(p, DEVQ_WIRE_TAG1(COPY_OP_DST), o->dst, o->dst_offset);
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(COPY_OP_SIZE), o->size);
		return devq_wire_close_short(len, p);
	case DEVQ_OP_FILL:
		*p++ = DEVQ_WIRE_TAG1(OP_FILL);
		len = p++;
		p = put_bufarg(p, DEVQ_WIRE_TAG1(FILL_OP_DST), o->dst, o->dst_offset);
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(FILL_OP_SIZE), o->size);
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(FILL_OP_PATTERN), o->pattern);
		return devq_wire_close_short(len, p);
	}
	return p;
}

size_t devq_submit_enc(uint8_t *out, size_t size, const struct devq_submit_enc_batch *b)
{
	/* The stamp is the same varint in every op: encode it once. */
	uint8_t stamp[11];
	size_t nstamp = (size_t)(devq_wire_put_field(stamp, DEVQ_WIRE_TAG1(OP_CLIENT_SUBMIT_NS),
						     b->submit_ns) -
				 stamp);
	uint8_t *p = out;
	*p++ = DEVQ_WIRE_TAG1(CLIENT_MESSAGE_SUBMIT);
	p = devq_wire_put_varint(p, size - 1 - devq_wire_prefix_width(size));
	for (size_t i = 0; i < b->n; i++) {
		const struct devq_op *o = &b->ops[i];
		*p++ = DEVQ_WIRE_TAG1(SUBMIT_OPS);
		uint8_t *len = p++;
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(OP_QUEUE), o->queue);
		memcpy(p, stamp, nstamp);
		p += nstamp;
		for (size_t j = 0; j < o->nwaits; j++) {
			*p++ = DEVQ_WIRE_TAG1(OP_WAITS);
			uint8_t *wlen = p++;
			p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(WAIT_QUEUE), o->waits[j].queue);
			p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(WAIT_POINT), o->waits[j].point);
			p = devq_wire_close_short(wlen, p);
		}
		p = put_body(p, o);
		if (o->no_timing)
			p = put_flag(p, DEVQ_WIRE_TAG_OF(OP_NO_TIMING));
		uint64_t dl = op_deadline(b, i);
		if (dl) {
			p = devq_wire_put_varint(p, DEVQ_WIRE_TAG_OF(OP_DEADLINE_US));
			p = devq_wire_put_varint(p, dl);
		}
		if (b->replayable)
			p = put_flag(p, DEVQ_WIRE_TAG_OF(OP_REPLAYABLE));
		p = devq_wire_close_len(len, p);
	}
	return (size_t)(p - out);
}
