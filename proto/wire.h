/* SPDX-License-Identifier: Apache-2.0 */
/* The protobuf wire format's primitives, and the numbers of the fields that
 * devq writes or reads by hand.
 *
 * Most messages go through protobuf-c, generated from proto/devq.proto.  A
 * few are on the hot path and have codecs written by hand, because
 * protobuf-c's generic code walks field descriptors and sizes every nested
 * message twice (each codec's header says what that cost):
 *
 *   ClientMessage{submit}       client/submit_enc.c writes it,
 *                               proto/codec/msg_dec.c reads it;
 *   DaemonMessage{completions}  proto/codec/cmpl_enc.c writes it,
 *                               client/cmpl_dec.c reads it;
 *   TraceReply.ops              daemon/requests/trace_enc.c writes them,
 *                               daemon/requests/tracereq.c frames the reply.
 *
 * They share this header instead of each keeping a copy of the varint, its
 * size, the tags and the field numbers.  Everything is static inline: each
 * helper runs once per field of every op, where a call would cost about as
 * much as the work it does.
 *
 * What is here is the wire format as protobuf-c writes it; what each codec
 * accepts of other encoders (overlong varints, fields twice) stays in the
 * codec, next to the rule it follows. */
#ifndef DEVQ_WIRE_H
#define DEVQ_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "devq.pb-c.h"

/* ---- field numbers -------------------------------------------------- */

/* Every field a hand-written codec writes or reads, once: an id (MESSAGE_
 * FIELD), the message and field as devq.proto names them (the message in
 * protobuf-c's lower case, which names its descriptor), the field number
 * and the wire type.  A number protobuf-c gives in its generated header (a
 * oneof member's case) is taken from there.  test_cli_codec checks each
 * line against protobuf-c's descriptors, so a .proto edit that renumbers
 * or retypes one of these fields fails there, not on the wire. */
#define DEVQ_WIRE_FIELDS(X)                                                                  \
	/* ClientMessage{submit} */                                                          \
	X(CLIENT_MESSAGE_SUBMIT, client_message, submit, DEVQ__CLIENT_MESSAGE__BODY_SUBMIT, LEN) \
	X(SUBMIT_OPS, submit, ops, 1, LEN)                                                   \
	X(OP_QUEUE, op, queue, 1, VARINT)                                                    \
	X(OP_CLIENT_SUBMIT_NS, op, client_submit_ns, 2, VARINT)                              \
	X(OP_WAITS, op, waits, 3, LEN)                                                       \
	X(OP_KERNEL, op, kernel, DEVQ__OP__BODY_KERNEL, LEN)                                 \
	X(OP_COPY, op, copy, DEVQ__OP__BODY_COPY, LEN)                                       \
	X(OP_FILL, op, fill, DEVQ__OP__BODY_FILL, LEN)                                       \
	X(OP_NO_TIMING, op, no_timing, 30, VARINT)                                           \
	X(OP_DEADLINE_US, op, deadline_us, 31, VARINT)                                       \
	X(OP_REPLAYABLE, op, replayable, 60, VARINT)                                         \
	X(WAIT_QUEUE, wait, queue, 1, VARINT)                                                \
	X(WAIT_POINT, wait, point, 2, VARINT)                                                \
	X(KERNEL_OP_EXECUTABLE, kernel_op, executable, 1, VARINT)                            \
	X(KERNEL_OP_ARGS, kernel_op, args, 2, LEN)                                           \
	X(ARG_NAME, arg, name, 1, LEN)                                                       \
	X(ARG_U64, arg, u64, DEVQ__ARG__VALUE_U64, VARINT)                                   \
	X(ARG_U32, arg, u32, DEVQ__ARG__VALUE_U32, VARINT)                                   \
	X(ARG_I64, arg, i64, DEVQ__ARG__VALUE_I64, VARINT)                                   \
	X(ARG_I32, arg, i32, DEVQ__ARG__VALUE_I32, VARINT)                                   \
	X(ARG_F32, arg, f32, DEVQ__ARG__VALUE_F32, I32)                                      \
	X(ARG_F64, arg, f64, DEVQ__ARG__VALUE_F64, I64)                                      \
	X(ARG_BUFFER, arg, buffer, DEVQ__ARG__VALUE_BUFFER, LEN)                             \
	X(BUFFER_ARG_ID, buffer_arg, id, 1, VARINT)                                          \
	X(BUFFER_ARG_OFFSET, buffer_arg, offset, 2, VARINT)                                  \
	X(COPY_OP_SRC, copy_op, src, 1, LEN)                                                 \
	X(COPY_OP_DST, copy_op, dst, 2, LEN)                                                 \
	X(COPY_OP_SIZE, copy_op, size, 3, VARINT)                                            \
	X(FILL_OP_DST, fill_op, dst, 1, LEN)                                                 \
	X(FILL_OP_SIZE, fill_op, size, 2, VARINT)                                            \
	X(FILL_OP_PATTERN, fill_op, pattern, 3, VARINT)                                      \
	/* DaemonMessage{completions} */                                                     \
	X(DAEMON_MESSAGE_COMPLETIONS, daemon_message, completions,                           \
	  DEVQ__DAEMON_MESSAGE__BODY_COMPLETIONS, LEN)                                       \
	X(COMPLETIONS_ITEMS, completions, items, 1, LEN)                                     \
	X(COMPLETION_QUEUE, completion, queue, 1, VARINT)                                    \
	X(COMPLETION_POINT, completion, point, 2, VARINT)                                    \
	X(COMPLETION_CODE, completion, code, 3, VARINT)                                      \
	X(COMPLETION_MESSAGE, completion, message, 4, LEN)                                   \
	X(COMPLETION_TIMING, completion, timing, 5, LEN)                                     \
	X(TIMING_CLIENT_SUBMIT, timing, client_submit, 1, VARINT)                            \
	X(TIMING_RECEIVED, timing, received, 2, VARINT)                                      \
	X(TIMING_HANDOFF, timing, handoff, 3, VARINT)                                        \
	X(TIMING_DEVICE_START, timing, device_start, 4, VARINT)                              \
	X(TIMING_DEVICE_END, timing, device_end, 5, VARINT)                                  \
	X(TIMING_OBSERVED, timing, observed, 6, VARINT)                                      \
	X(TIMING_ENQUEUE_NS, timing, enqueue_ns, 7, VARINT)                                  \
	/* DaemonMessage{trace_reply}: its ops and gone sessions */                          \
	X(DAEMON_MESSAGE_TRACE_REPLY, daemon_message, trace_reply,                           \
	  DEVQ__DAEMON_MESSAGE__BODY_TRACE_REPLY, LEN)                                       \
	X(TRACE_REPLY_OPS, trace_reply, ops, 10, LEN)                                        \
	X(TRACE_REPLY_GONE, trace_reply, gone, 11, LEN)                                      \
	X(TRACE_OP_SESSION, trace_op, session, 1, VARINT)                                    \
	X(TRACE_OP_QUEUE, trace_op, queue, 2, VARINT)                                        \
	X(TRACE_OP_POINT, trace_op, point, 3, VARINT)                                        \
	X(TRACE_OP_STREAM, trace_op, stream, 4, VARINT)                                      \
	X(TRACE_OP_EXECUTABLE, trace_op, executable, 5, VARINT)                              \
	X(TRACE_OP_CODE, trace_op, code, 6, VARINT)                                          \
	X(TRACE_OP_TIMING, trace_op, timing, 7, LEN)                                         \
	X(TRACE_OP_WAITS, trace_op, waits, 8, LEN)                                           \
	X(TRACE_OP_BUFFERS, trace_op, buffers, 9, LEN)                                       \
	X(TRACE_OP_WAITS_DROPPED, trace_op, waits_dropped, 10, VARINT)                       \
	X(TRACE_WAIT_QUEUE, trace_wait, queue, 1, VARINT)                                    \
	X(TRACE_WAIT_POINT, trace_wait, point, 2, VARINT)                                    \
	X(TRACE_WAIT_KIND, trace_wait, kind, 3, VARINT)                                      \
	X(TRACE_BUFFER_ID, trace_buffer, id, 1, VARINT)                                      \
	X(TRACE_BUFFER_ACCESS, trace_buffer, access, 2, VARINT)                              \
	X(TRACE_BUFFER_RELEASED, trace_buffer, released, 3, VARINT)

/* Wire types: what follows a tag. */
enum devq_wire_type {
	DEVQ_WIRE_VARINT = 0, /* integers, enums, bools */
	DEVQ_WIRE_I64 = 1,    /* 8 bytes, little endian: fixed64, double */
	DEVQ_WIRE_LEN = 2,    /* a varint length, then that many bytes */
	DEVQ_WIRE_I32 = 5,    /* 4 bytes, little endian: fixed32, float */
};

/* DEVQ_WIRE_F_<id>: a field's number; DEVQ_WIRE_WT_<id>: its wire type. */
#define DEVQ_WIRE_F_ENUM(id, msg, field, num, wt) DEVQ_WIRE_F_##id = (num),
#define DEVQ_WIRE_WT_ENUM(id, msg, field, num, wt) DEVQ_WIRE_WT_##id = DEVQ_WIRE_##wt,
enum { DEVQ_WIRE_FIELDS(DEVQ_WIRE_F_ENUM) };
enum { DEVQ_WIRE_FIELDS(DEVQ_WIRE_WT_ENUM) };
#undef DEVQ_WIRE_F_ENUM
#undef DEVQ_WIRE_WT_ENUM

/* The codecs index Timing's fields by position (devq_cmpl.t[], a trace
 * record's t[], struct devq_timing in order): they must stay 1..7. */
_Static_assert(DEVQ_WIRE_F_TIMING_CLIENT_SUBMIT == 1 && DEVQ_WIRE_F_TIMING_ENQUEUE_NS == 7,
	       "Timing's fields are numbered 1..7 in devq.proto's order");

/* ---- tags ----------------------------------------------------------- */

/* A tag: the varint (field number << 3) | wire type before every field.
 * A constant expression, so a decoder may switch on it. */
#define DEVQ_WIRE_TAG(num, wt) ((uint32_t)(num) << 3 | (uint32_t)(wt))

/* The tag of field id of DEVQ_WIRE_FIELDS. */
#define DEVQ_WIRE_TAG_OF(id) DEVQ_WIRE_TAG(DEVQ_WIRE_F_##id, DEVQ_WIRE_WT_##id)

/* The tag of field id as its one byte: a field numbered 1..15.  The codecs
 * write such tags as a single store; a field numbered 16 or more has a
 * tag of two bytes or more, and naming one here does not compile (the
 * array's size would be negative). */
#define DEVQ_WIRE_TAG1(id)                                                                   \
	((uint8_t)(DEVQ_WIRE_TAG_OF(id) + 0 * sizeof(char[DEVQ_WIRE_F_##id < 16 ? 1 : -1])))

/* The one-byte tag of Timing's field i + 1 (i from 0 to 6): the codecs
 * walk Timing's fields as an array. */
#define DEVQ_WIRE_TIMING_TAG(i)                                                              \
	((uint8_t)DEVQ_WIRE_TAG(DEVQ_WIRE_F_TIMING_CLIENT_SUBMIT + (i), DEVQ_WIRE_VARINT))

/* ---- sizes ---------------------------------------------------------- */

/* Bytes of v as a varint: 7 bits a byte, so ceil(bits / 7) with at least
 * one byte.  bits * 9 / 64 + 1 equals that for 1..64 bits without a
 * division by 7 or a loop (test_cmpl_enc and test_cli_codec compare the
 * sizes with protobuf-c's); v | 1 gives 0 one significant bit. */
static inline size_t devq_wire_varint_size(uint64_t v)
{
	unsigned bits = 64u - (unsigned)__builtin_clzll(v | 1);
	return bits * 9u / 64u + 1u;
}

/* A varint field with a one-byte tag: tag and value, or nothing for 0
 * (proto3 leaves a field at its default out). */
static inline size_t devq_wire_field_size(uint64_t v)
{
	return v ? 1 + devq_wire_varint_size(v) : 0;
}

/* A length-delimited field with a one-byte tag: tag, length, body. */
static inline size_t devq_wire_len_size(size_t body)
{
	return 1 + devq_wire_varint_size(body) + body;
}

/* The width of the length prefix of a length-delimited field with a
 * one-byte tag whose whole size (tag, prefix, body) is size: the k with
 * 1 + k + body == size and varint_size(body) == k (unique: a varint never
 * shrinks as its value grows).  An encoder that sized its frame once takes
 * the outer prefix from there instead of sizing every record again. */
static inline size_t devq_wire_prefix_width(size_t size)
{
	for (size_t k = 1; k < 10; k++)
		if (size >= 1 + k && devq_wire_varint_size(size - 1 - k) == k)
			return k;
	return 10;
}

/* An int32 or an enum on the wire: a negative one is its 64-bit sign
 * extension, ten bytes, as protobuf-c (and every other encoder) writes
 * it. */
static inline uint64_t devq_wire_int32(int32_t v)
{
	return (uint64_t)(int64_t)v;
}

/* ---- writing -------------------------------------------------------- */

/* Writes v as a varint at p; returns the byte after it. */
static inline uint8_t *devq_wire_put_varint(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

/* A varint field with the one-byte tag tag (DEVQ_WIRE_TAG1), written only
 * when v is not 0 (proto3). */
static inline uint8_t *devq_wire_put_field(uint8_t *p, uint8_t tag, uint64_t v)
{
	if (v) {
		*p++ = tag;
		p = devq_wire_put_varint(p, v);
	}
	return p;
}

/* The 4 or 8 bytes of a fixed32 or fixed64 (a float's or double's bits),
 * little endian whatever the host. */
static inline uint8_t *devq_wire_put_fixed32(uint8_t *p, uint32_t v)
{
	for (unsigned i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
	return p + 4;
}

static inline uint8_t *devq_wire_put_fixed64(uint8_t *p, uint64_t v)
{
	for (unsigned i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
	return p + 8;
}

/* A submessage's length goes before its body, and a varint's width depends
 * on the value, so the encoders reserve one length byte at len, write the
 * body after it and fill the length in at the end, with p where the body
 * ends.  devq_wire_close_short: a body that is always under 128 bytes (its
 * fields bound it).  devq_wire_close_len: any body; one of 128 bytes or
 * more moves up to make room for a wider prefix, so the buffer must have
 * that room (the encoders' sizing pass counted it).  Both return the new
 * end. */
static inline uint8_t *devq_wire_close_short(uint8_t *len, uint8_t *p)
{
	*len = (uint8_t)(p - len - 1);
	return p;
}

static inline uint8_t *devq_wire_close_len(uint8_t *len, uint8_t *p)
{
	size_t blen = (size_t)(p - len - 1);
	if (blen < 0x80) {
		*len = (uint8_t)blen;
		return p;
	}
	size_t w = devq_wire_varint_size(blen);
	memmove(len + w, len + 1, blen);
	devq_wire_put_varint(len, blen);
	return p + w - 1;
}

/* ---- reading -------------------------------------------------------- */

/* A fixed32 or fixed64 at p, little endian whatever the host (compilers
 * make one load of it where the host is little endian). */
static inline uint32_t devq_wire_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t devq_wire_le64(const uint8_t *p)
{
	return (uint64_t)devq_wire_le32(p) | (uint64_t)devq_wire_le32(p + 4) << 32;
}

/* Timestamps are varints of 6 to 8 bytes, and a byte at a time costs a
 * loop turn each: the decoders read one from a single 8-byte load w
 * (devq_wire_le64 of the bytes where it starts) when it ends within them,
 * which devq_wire_varint8_ends says. */
#define DEVQ_WIRE_CONT_BITS 0x8080808080808080ULL

static inline int devq_wire_varint8_ends(uint64_t w)
{
	return (~w & DEVQ_WIRE_CONT_BITS) != 0;
}

/* The varint that starts w, which ends within it (devq_wire_varint8_ends):
 * its value in *v, its length in bytes (1..8) returned.  Its last byte is
 * the first without bit 7; the bytes after it are masked off, and the 7-bit
 * groups are packed together by halving the number of gaps three times. */
static inline __attribute__((always_inline)) unsigned devq_wire_varint8(uint64_t w, uint64_t *v)
{
	uint64_t stop = ~w & DEVQ_WIRE_CONT_BITS;
	unsigned n = (unsigned)__builtin_ctzll(stop) / 8 + 1;
	uint64_t x = w & (stop ^ (stop - 1)) & 0x7f7f7f7f7f7f7f7fULL;
	x = (x & 0x007f007f007f007fULL) | (x & 0x7f007f007f007f00ULL) >> 1;
	x = (x & 0x00003fff00003fffULL) | (x & 0x3fff00003fff0000ULL) >> 2;
	x = (x & 0x000000000fffffffULL) | (x & 0x0fffffff00000000ULL) >> 4;
	*v = x;
	return n;
}

#endif
