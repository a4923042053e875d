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
 * the stack first, since its length may take two bytes.  proto/wire.h
 * names these fields and holds the varint and tag helpers that every
 * hand-written codec shares. */
#include "requests/trace_enc.h"

#include <string.h>

#include "wire.h"

/* The body of one TraceOp: at most 458 bytes (trace_enc.h). */
static uint8_t *put_op(uint8_t *p, const struct devq_trace_rec *x)
{
	p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(TRACE_OP_SESSION), x->session);
	p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(TRACE_OP_QUEUE), x->queue);
	p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(TRACE_OP_POINT), x->point);
	p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(TRACE_OP_STREAM), x->stream);
	p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(TRACE_OP_EXECUTABLE), devq_wire_int32(x->exec));
	p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(TRACE_OP_CODE), devq_wire_int32(x->code));
	*p++ = DEVQ_WIRE_TAG1(TRACE_OP_TIMING);
	uint8_t *len = p++; /* at most 7 * 11 bytes follow */
	for (unsigned f = 0; f < 7; f++)
		p = devq_wire_put_field(p, DEVQ_WIRE_TIMING_TAG(f), x->t[f]);
	p = devq_wire_close_short(len, p);
	unsigned nw = x->nwaits < DEVQ_TRACE_WAITS ? x->nwaits : DEVQ_TRACE_WAITS;
	for (unsigned i = 0; i < nw; i++) {
		const struct devq_trace_wait *w = &x->waits[i];
		*p++ = DEVQ_WIRE_TAG1(TRACE_OP_WAITS);
		len = p++; /* at most 20 bytes */
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(TRACE_WAIT_QUEUE), w->queue);
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(TRACE_WAIT_POINT), w->point);
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(TRACE_WAIT_KIND), w->kind);
		p = devq_wire_close_short(len, p);
	}
	unsigned nb = x->nbufs < DEVQ_TRACE_BUFS ? x->nbufs : DEVQ_TRACE_BUFS;
	for (unsigned i = 0; i < nb; i++) {
		const struct devq_trace_buf *b = &x->bufs[i];
		*p++ = DEVQ_WIRE_TAG1(TRACE_OP_BUFFERS);
		len = p++; /* at most 16 bytes */
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(TRACE_BUFFER_ID), b->id);
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(TRACE_BUFFER_ACCESS), b->access);
		p = devq_wire_put_field(p, DEVQ_WIRE_TAG1(TRACE_BUFFER_RELEASED), b->released);
		p = devq_wire_close_short(len, p);
	}
	return devq_wire_put_field(p, DEVQ_WIRE_TAG1(TRACE_OP_WAITS_DROPPED), x->waits_dropped);
}

size_t devq_trace_enc_op(uint8_t *out, const struct devq_trace_rec *x)
{
	uint8_t body[DEVQ_TRACE_ENC_OP_MAX];
	size_t n = (size_t)(put_op(body, x) - body);
	uint8_t *p = out;
	*p++ = DEVQ_WIRE_TAG1(TRACE_REPLY_OPS);
	p = devq_wire_put_varint(p, n);
	memcpy(p, body, n);
	return (size_t)(p - out) + n;
}
