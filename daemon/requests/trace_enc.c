/* SPDX-License-Identifier: Apache-2.0 */
/* TraceOp written by hand (trace_enc.h says why).  The wire format, from
 * proto/devq.proto, every field number below 16 so every tag one byte:
 *
 *   TraceReply   10: repeated TraceOp ops        (tag 0x52 each)
 *   TraceOp       1: uint64 session (0x08)   2: uint32 queue (0x10)
 *                 3: uint64 point   (0x18)   4: uint32 stream (0x20)
 *                 5: int32 executable (0x28) 6: Code code (0x30)
 *                 7: Timing timing  (0x3a, always present, as the packer
 *                    writes a set submessage even when empty)
 *                 8: repeated TraceWait waits (0x42)
 *                 9: repeated TraceBuffer buffers (0x4a)
 *                10: uint32 waits_dropped (0x50)
 *   Timing     1..7: uint64 (0x08 .. 0x38)
 *   TraceWait     1: uint32 queue  2: uint64 point  3: Kind kind
 *   TraceBuffer   1: uint64 id     2: uint32 access 3: bool released
 *
 * proto3: a field at its default (0, false) is left out.  An int32 or
 * enum below zero is its 64-bit sign extension, ten bytes.  Every
 * submessage but the op itself is under 128 bytes (one length byte,
 * filled in after its fields); the op's body is written to a buffer on
 * the stack first, since its length may take two bytes. */
#include "requests/trace_enc.h"

#include <string.h>

#define TAG_VARINT(f) ((uint8_t)((f) << 3 | 0))
#define TAG_LEN(f) ((uint8_t)((f) << 3 | 2))

enum { F_REPLY_OPS = 10 };

static inline uint8_t *put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

/* A field written only when not its default. */
static inline uint8_t *put_field(uint8_t *p, unsigned f, uint64_t v)
{
	if (v) {
		*p++ = TAG_VARINT(f);
		p = put_varint(p, v);
	}
	return p;
}

/* int32 and enum fields: a negative value as its 64-bit sign extension. */
static inline uint64_t int32_wire(int32_t v)
{
	return (uint64_t)(int64_t)v;
}

/* The body of one TraceOp: at most 458 bytes (trace_enc.h). */
static uint8_t *put_op(uint8_t *p, const struct devq_trace_rec *x)
{
	p = put_field(p, 1, x->session);
	p = put_field(p, 2, x->queue);
	p = put_field(p, 3, x->point);
	p = put_field(p, 4, x->stream);
	p = put_field(p, 5, int32_wire(x->exec));
	p = put_field(p, 6, int32_wire(x->code));
	*p++ = TAG_LEN(7);
	uint8_t *len = p++; /* at most 7 * 11 bytes follow */
	for (unsigned f = 0; f < 7; f++)
		p = put_field(p, f + 1, x->t[f]);
	*len = (uint8_t)(p - len - 1);
	unsigned nw = x->nwaits < DEVQ_TRACE_WAITS ? x->nwaits : DEVQ_TRACE_WAITS;
	for (unsigned i = 0; i < nw; i++) {
		const struct devq_trace_wait *w = &x->waits[i];
		*p++ = TAG_LEN(8);
		len = p++; /* at most 20 bytes */
		p = put_field(p, 1, w->queue);
		p = put_field(p, 2, w->point);
		p = put_field(p, 3, w->kind);
		*len = (uint8_t)(p - len - 1);
	}
	unsigned nb = x->nbufs < DEVQ_TRACE_BUFS ? x->nbufs : DEVQ_TRACE_BUFS;
	for (unsigned i = 0; i < nb; i++) {
		const struct devq_trace_buf *b = &x->bufs[i];
		*p++ = TAG_LEN(9);
		len = p++; /* at most 16 bytes */
		p = put_field(p, 1, b->id);
		p = put_field(p, 2, b->access);
		p = put_field(p, 3, b->released);
		*len = (uint8_t)(p - len - 1);
	}
	return put_field(p, 10, x->waits_dropped);
}

size_t devq_trace_enc_op(uint8_t *out, const struct devq_trace_rec *x)
{
	uint8_t body[DEVQ_TRACE_ENC_OP_MAX];
	size_t n = (size_t)(put_op(body, x) - body);
	uint8_t *p = out;
	*p++ = TAG_LEN(F_REPLY_OPS);
	p = put_varint(p, n);
	memcpy(p, body, n);
	return (size_t)(p - out) + n;
}
