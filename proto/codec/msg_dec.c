/* SPDX-License-Identifier: Apache-2.0 */
/* Hand-written decoding of ClientMessage{submit} (see msg_dec.h for why).
 * The wire format, from proto/devq.proto:
 *
 *   ClientMessage  7: Submit submit (oneof body)
 *   Submit         1: repeated Op ops
 *   Op             1: uint32 queue   2: uint64 client_submit_ns
 *                  3: repeated Wait waits
 *                  4: KernelOp kernel | 5: CopyOp copy | 6: FillOp fill
 *                 30: bool no_timing  31: uint64 deadline_us
 *                 60: bool replayable
 *   Wait           1: uint32 queue   2: uint64 point
 *   KernelOp       1: uint32 executable   2: repeated Arg args
 *   Arg            1: string name, then one of 2: uint64 u64 | 3: uint32
 *                  u32 | 4: int64 i64 | 5: int32 i32 | 6: float f32 |
 *                  7: double f64 | 8: BufferArg buffer
 *   BufferArg      1: uint64 id   2: uint64 offset
 *   CopyOp         1: BufferArg src   2: BufferArg dst   3: uint64 size
 *   FillOp         1: BufferArg dst   2: uint64 size   3: uint32 pattern
 *
 * proto/wire.h names these fields and holds the varint and tag helpers
 * that every hand-written codec shares.
 *
 * "The same result as protobuf-c" means as protobuf-c 1.4.1 reads the
 * wire (protobuf-c.c: parse_tag_and_wiretype, scan_length_prefixed_data,
 * parse_required_member, parse_oneof_member, merge_messages), quirks
 * included, since clients and tests were written against it:
 *
 *  - a tag takes at most 5 bytes, a varint at most 10, a length prefix at
 *    most 5 and no more than INT_MAX; overlong encodings are accepted;
 *  - a 32-bit field keeps the low 32 bits of a longer varint, a 64-bit one
 *    the low 64 bits of a 10-byte one;
 *  - a bool takes any wire type and is true when a byte of the field after
 *    its tag (a length prefix included) has one of its low 7 bits set;
 *    every other field with the wrong wire type rejects the message;
 *  - repeated fields append in wire order, other fields between them;
 *  - a scalar seen twice: the last wins;
 *  - a oneof seen twice, the same member or another: the last wins whole
 *    (protobuf-c frees the earlier member and does not merge it);
 *  - a singular message field seen twice (CopyOp.src and .dst, FillOp.dst)
 *    is merged by protobuf-c, but merge_messages copies no proto3 scalar
 *    (they have no presence), so the later BufferArg wins whole;
 *  - strings are copied byte for byte and NUL-terminated; 1.4.1 does not
 *    check UTF-8;
 *  - a field number the message does not know is skipped if its wire type
 *    is 0, 1, 2 or 5 and it is whole (protobuf-c keeps a copy; see
 *    msg_dec.h); wire types 3, 4 (groups), 6 and 7 reject the message.
 *
 * This decoder never rejects anything itself: whatever protobuf-c would
 * reject, and an allocation failure, make it free what it built and hand
 * the payload to protobuf-c, which then gives the answer.  Error paths cost
 * twice; the path libdevq uses costs once. */
#include "codec/msg_dec.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

/* Reads the field at *pp (before end) and moves *pp past it.  -1 where
 * protobuf-c's scan fails: a bad tag, a varint of more than 10 bytes, a
 * value past end, a length prefix that is too long or too large, a wire
 * type it does not take.  Every case; next_field below takes the common
 * ones first. */
static int next_field_any(const uint8_t **pp, const uint8_t *end, struct devq_field *f)
{
	const uint8_t *p = *pp;
	uint32_t b = *p++;
	if (!(b & 0xf8))
		return -1; /* protobuf-c refuses a first byte naming field 0 */
	f->wt = b & 7;
	if (b < 0x80) {
		f->num = b >> 3;
	} else {
		/* At most 4 more bytes; the last one is not masked, and cannot
		 * carry past 32 bits since it is below 0x80. */
		uint32_t num = (b & 0x7f) >> 3;
		unsigned shift = 4;
		const uint8_t *lim = end - p < 4 ? end : p + 4;
		for (;;) {
			if (p == lim)
				return -1;
			b = *p++;
			num |= (b & 0x7f) << shift;
			if (b < 0x80)
				break;
			shift += 7;
		}
		f->num = num;
	}
	f->at = f->v = p;
	size_t rem = (size_t)(end - p);
	switch (f->wt) {
	case DEVQ_WIRE_VARINT:
		if (rem && *p < 0x80) { /* the common one-byte value */
			f->u = *p++;
			break;
		} else if (rem >= 8 && devq_wire_varint8_ends(devq_wire_le64(p))) {
			p += devq_wire_varint8(devq_wire_le64(p), &f->u);
		} else {
			size_t max = rem < 10 ? rem : 10, i = 0;
			unsigned shift = 0;
			uint64_t v = 0;
			for (;;) {
				if (i == max)
					return -1;
				uint8_t c = p[i++];
				/* The 10th byte lands at bit 63: only its low
				 * bit stays, as in protobuf-c's parse_uint64. */
				v |= (uint64_t)(c & 0x7f) << shift;
				if (c < 0x80)
					break;
				shift += 7;
			}
			f->u = v;
			p += i;
		}
		break;
	case DEVQ_WIRE_I64:
		if (rem < 8)
			return -1;
		p += 8;
		break;
	case DEVQ_WIRE_I32:
		if (rem < 4)
			return -1;
		p += 4;
		break;
	case DEVQ_WIRE_LEN: {
		size_t max = rem < 5 ? rem : 5, i = 0, len = 0;
		unsigned shift = 0;
		for (;;) {
			if (i == max)
				return -1;
			uint8_t c = p[i++];
			len |= (size_t)(c & 0x7f) << shift;
			if (c < 0x80)
				break;
			shift += 7;
		}
		if (len > INT_MAX || len > rem - i)
			return -1;
		f->v = p + i;
		p += i + len;
		break;
	}
	default:
		return -1;
	}
	f->end = p;
	*pp = p;
	return 0;
}

/* Out of line for the other walkers (codec/strcheck.c): next_field_any
 * itself stays static, so that its callers here compile as before. */
int devq_field_next(const uint8_t **pp, const uint8_t *end, struct devq_field *f)
{
	return next_field_any(pp, end, f);
}

/* next_field_any, inlined for the fields a Submit is mostly made of: a
 * one-byte tag (field numbers 1 to 15) followed by a one-byte varint or a
 * one-byte length.  Out of line, the general case cost about as much again
 * as all the rest of the decoder. */
static inline __attribute__((always_inline)) int next_field(const uint8_t **pp, const uint8_t *end, struct devq_field *f)
{
	const uint8_t *p = *pp;
	if (end - p >= 2) {
		unsigned b = p[0], c = p[1];
		if (b >= 8 && b < 0x80 && c < 0x80) {
			f->num = b >> 3;
			f->wt = b & 7;
			f->at = p + 1;
			if (f->wt == DEVQ_WIRE_VARINT) {
				f->v = p + 1;
				f->u = c;
				*pp = f->end = p + 2;
				return 0;
			}
			if (f->wt == DEVQ_WIRE_LEN && c <= (size_t)(end - p) - 2) {
				f->v = p + 2;
				*pp = f->end = p + 2 + c;
				return 0;
			}
		} else if (b >= 8 && b < 0x80 && (b & 7) == DEVQ_WIRE_VARINT && end - p >= 9 &&
			   devq_wire_varint8_ends(devq_wire_le64(p + 1))) {
			/* A one-byte tag and a varint of 2 to 8 bytes (a
			 * timestamp): what next_field_any does, without the
			 * call. */
			f->num = b >> 3;
			f->wt = DEVQ_WIRE_VARINT;
			f->at = f->v = p + 1;
			*pp = f->end = p + 1 + devq_wire_varint8(devq_wire_le64(p + 1), &f->u);
			return 0;
		}
	}
	return next_field_any(pp, end, f);
}

/* protobuf-c's parse_boolean over the field's bytes after the tag. */
static bool field_bool(const struct devq_field *f)
{
	for (const uint8_t *p = f->at; p < f->end; p++)
		if (*p & 0x7f)
			return true;
	return false;
}

static inline void *xalloc(ProtobufCAllocator *a, size_t n)
{
	return a->alloc(a->allocator_data, n);
}

/* A message of `size` bytes set to its generated *_INIT (tmpl). */
static inline void *new_msg(ProtobufCAllocator *a, const void *tmpl, size_t size)
{
	void *m = xalloc(a, size);
	if (m)
		memcpy(m, tmpl, size);
	return m;
}

static const Devq__ClientMessage client_message_init = DEVQ__CLIENT_MESSAGE__INIT;
static const Devq__Submit submit_init = DEVQ__SUBMIT__INIT;
static const Devq__Op op_init = DEVQ__OP__INIT;
static const Devq__Wait wait_init = DEVQ__WAIT__INIT;
static const Devq__KernelOp kernel_init = DEVQ__KERNEL_OP__INIT;
static const Devq__Arg arg_init = DEVQ__ARG__INIT;
static const Devq__BufferArg buffer_arg_init = DEVQ__BUFFER_ARG__INIT;
static const Devq__CopyOp copy_init = DEVQ__COPY_OP__INIT;
static const Devq__FillOp fill_init = DEVQ__FILL_OP__INIT;

/* Adds the occurrences of length-delimited field num (below 16) in
 * [p, end) to *n; -1 if a field there is malformed.  Runs of the field
 * itself with one-byte lengths (a batch of ops) are skipped without a full
 * read. */
static int count_field(const uint8_t *p, const uint8_t *end, uint32_t num, size_t *n)
{
	const unsigned tag = DEVQ_WIRE_TAG(num, DEVQ_WIRE_LEN);
	struct devq_field f;
	while (p < end) {
		if (end - p >= 2 && p[0] == tag && p[1] < 0x80 && p[1] <= (size_t)(end - p) - 2) {
			++*n;
			p += 2 + p[1];
			continue;
		}
		if (next_field(&p, end, &f))
			return -1;
		*n += f.num == num;
	}
	return 0;
}

/* The array of a repeated message field, sized at its first occurrence,
 * f, by counting the occurrences from there to the end of the message:
 * protobuf-c counts them in a scan pass over every message, this decoder
 * only where a repeated field occurs, and not at all when it is the last
 * field (a kernel's one argument). */
static void *rep_array(ProtobufCAllocator *a, const struct devq_field *f, const uint8_t *end,
		       uint32_t num)
{
	size_t n = 1;
	if (f->end != end && count_field(f->end, end, num, &n))
		return NULL;
	return xalloc(a, n * sizeof(void *));
}

/* Every dec_* below fills an initialised message already linked into its
 * parent, so that after a failure (-1) the whole tree stays valid for
 * protobuf_c_message_free_unpacked: counts of repeated fields cover only
 * linked elements, a oneof case is set only with its member in place. */

static int dec_buffer_arg(Devq__BufferArg *b, const uint8_t *p, const uint8_t *end)
{
	struct devq_field f;
	while (p < end) {
		if (next_field(&p, end, &f))
			return -1;
		switch (f.num) {
		case DEVQ_WIRE_F_BUFFER_ARG_ID:
			if (f.wt != DEVQ_WIRE_VARINT)
				return -1;
			b->id = f.u;
			break;
		case DEVQ_WIRE_F_BUFFER_ARG_OFFSET:
			if (f.wt != DEVQ_WIRE_VARINT)
				return -1;
			b->offset = f.u;
			break;
		default:
			break; /* unknown: skipped */
		}
	}
	return 0;
}

/* A singular BufferArg field: a second occurrence replaces the first whole
 * (see the top of the file), so the struct is reused, reset. */
static int dec_buffer_field(ProtobufCAllocator *a, Devq__BufferArg **slot,
			    const struct devq_field *f)
{
	if (f->wt != DEVQ_WIRE_LEN)
		return -1;
	if (*slot)
		**slot = buffer_arg_init;
	else if (!(*slot = new_msg(a, &buffer_arg_init, sizeof(**slot))))
		return -1;
	return dec_buffer_arg(*slot, f->v, f->end);
}

/* Drops the Arg's value before another takes its place, as
 * parse_oneof_member does: a BufferArg is freed, the union cleared. */
static void arg_drop_value(ProtobufCAllocator *a, Devq__Arg *g)
{
	if (g->value_case == DEVQ__ARG__VALUE_BUFFER && g->buffer)
		protobuf_c_message_free_unpacked(&g->buffer->base, a);
	g->value_case = DEVQ__ARG__VALUE__NOT_SET;
	g->u64 = 0;
}

static int dec_arg(ProtobufCAllocator *a, Devq__Arg *g, const uint8_t *p, const uint8_t *end)
{
	struct devq_field f;
	while (p < end) {
		if (next_field(&p, end, &f))
			return -1;
		switch (f.num) {
		case DEVQ_WIRE_F_ARG_NAME: {
			if (f.wt != DEVQ_WIRE_LEN)
				return -1;
			size_t n = (size_t)(f.end - f.v);
			char *s = xalloc(a, n + 1);
			if (!s)
				return -1;
			if (n < 16) /* the usual name: cheaper than a call */
				for (size_t i = 0; i < n; i++)
					s[i] = (char)f.v[i];
			else
				memcpy(s, f.v, n);
			s[n] = '\0';
			if (g->name != protobuf_c_empty_string)
				a->free(a->allocator_data, g->name);
			g->name = s;
			break;
		}
		case DEVQ_WIRE_F_ARG_U64:
		case DEVQ_WIRE_F_ARG_U32:
		case DEVQ_WIRE_F_ARG_I64:
		case DEVQ_WIRE_F_ARG_I32:
			if (f.wt != DEVQ_WIRE_VARINT)
				return -1;
			arg_drop_value(a, g);
			if (f.num == DEVQ_WIRE_F_ARG_U64)
				g->u64 = f.u;
			else if (f.num == DEVQ_WIRE_F_ARG_U32)
				g->u32 = (uint32_t)f.u;
			else if (f.num == DEVQ_WIRE_F_ARG_I64)
				g->i64 = (int64_t)f.u;
			else
				g->i32 = (int32_t)(uint32_t)f.u;
			g->value_case = (Devq__Arg__ValueCase)f.num;
			break;
		case DEVQ_WIRE_F_ARG_F32: {
			if (f.wt != DEVQ_WIRE_I32)
				return -1;
			arg_drop_value(a, g);
			uint32_t bits = devq_wire_le32(f.v);
			memcpy(&g->f32, &bits, sizeof(bits));
			g->value_case = DEVQ__ARG__VALUE_F32;
			break;
		}
		case DEVQ_WIRE_F_ARG_F64: {
			if (f.wt != DEVQ_WIRE_I64)
				return -1;
			arg_drop_value(a, g);
			uint64_t bits = devq_wire_le64(f.v);
			memcpy(&g->f64, &bits, sizeof(bits));
			g->value_case = DEVQ__ARG__VALUE_F64;
			break;
		}
		case DEVQ_WIRE_F_ARG_BUFFER: {
			if (f.wt != DEVQ_WIRE_LEN)
				return -1;
			arg_drop_value(a, g);
			Devq__BufferArg *b = new_msg(a, &buffer_arg_init, sizeof(*b));
			if (!b)
				return -1;
			g->buffer = b;
			g->value_case = DEVQ__ARG__VALUE_BUFFER;
			if (dec_buffer_arg(b, f.v, f.end))
				return -1;
			break;
		}
		default:
			break;
		}
	}
	return 0;
}

static int dec_kernel(ProtobufCAllocator *a, Devq__KernelOp *k, const uint8_t *p,
		      const uint8_t *end)
{
	struct devq_field f;
	while (p < end) {
		if (next_field(&p, end, &f))
			return -1;
		switch (f.num) {
		case DEVQ_WIRE_F_KERNEL_OP_EXECUTABLE:
			if (f.wt != DEVQ_WIRE_VARINT)
				return -1;
			k->executable = (uint32_t)f.u;
			break;
		case DEVQ_WIRE_F_KERNEL_OP_ARGS: {
			if (f.wt != DEVQ_WIRE_LEN)
				return -1;
			if (!k->args && !(k->args = rep_array(a, &f, end, DEVQ_WIRE_F_KERNEL_OP_ARGS)))
				return -1;
			Devq__Arg *g = new_msg(a, &arg_init, sizeof(*g));
			if (!g)
				return -1;
			k->args[k->n_args++] = g;
			if (dec_arg(a, g, f.v, f.end))
				return -1;
			break;
		}
		default:
			break;
		}
	}
	return 0;
}

static int dec_copy(ProtobufCAllocator *a, Devq__CopyOp *c, const uint8_t *p, const uint8_t *end)
{
	struct devq_field f;
	while (p < end) {
		if (next_field(&p, end, &f))
			return -1;
		switch (f.num) {
		case DEVQ_WIRE_F_COPY_OP_SRC:
			if (dec_buffer_field(a, &c->src, &f))
				return -1;
			break;
		case DEVQ_WIRE_F_COPY_OP_DST:
			if (dec_buffer_field(a, &c->dst, &f))
				return -1;
			break;
		case DEVQ_WIRE_F_COPY_OP_SIZE:
			if (f.wt != DEVQ_WIRE_VARINT)
				return -1;
			c->size = f.u;
			break;
		default:
			break;
		}
	}
	return 0;
}

static int dec_fill(ProtobufCAllocator *a, Devq__FillOp *x, const uint8_t *p, const uint8_t *end)
{
	struct devq_field f;
	while (p < end) {
		if (next_field(&p, end, &f))
			return -1;
		switch (f.num) {
		case DEVQ_WIRE_F_FILL_OP_DST:
			if (dec_buffer_field(a, &x->dst, &f))
				return -1;
			break;
		case DEVQ_WIRE_F_FILL_OP_SIZE:
			if (f.wt != DEVQ_WIRE_VARINT)
				return -1;
			x->size = f.u;
			break;
		case DEVQ_WIRE_F_FILL_OP_PATTERN:
			if (f.wt != DEVQ_WIRE_VARINT)
				return -1;
			x->pattern = (uint32_t)f.u;
			break;
		default:
			break;
		}
	}
	return 0;
}

static int dec_wait(Devq__Wait *w, const uint8_t *p, const uint8_t *end)
{
	struct devq_field f;
	while (p < end) {
		if (next_field(&p, end, &f))
			return -1;
		switch (f.num) {
		case DEVQ_WIRE_F_WAIT_QUEUE:
			if (f.wt != DEVQ_WIRE_VARINT)
				return -1;
			w->queue = (uint32_t)f.u;
			break;
		case DEVQ_WIRE_F_WAIT_POINT:
			if (f.wt != DEVQ_WIRE_VARINT)
				return -1;
			w->point = f.u;
			break;
		default:
			break;
		}
	}
	return 0;
}

/* A body (kernel, copy or fill) replaces any earlier one whole. */
static int dec_op_body(ProtobufCAllocator *a, Devq__Op *op, const struct devq_field *f)
{
	if (f->wt != DEVQ_WIRE_LEN)
		return -1;
	if (op->body_case == DEVQ__OP__BODY_KERNEL)
		protobuf_c_message_free_unpacked(&op->kernel->base, a);
	else if (op->body_case == DEVQ__OP__BODY_COPY)
		protobuf_c_message_free_unpacked(&op->copy->base, a);
	else if (op->body_case == DEVQ__OP__BODY_FILL)
		protobuf_c_message_free_unpacked(&op->fill->base, a);
	op->body_case = DEVQ__OP__BODY__NOT_SET;
	op->kernel = NULL;
	switch (f->num) {
	case DEVQ_WIRE_F_OP_KERNEL: {
		Devq__KernelOp *k = new_msg(a, &kernel_init, sizeof(*k));
		if (!k)
			return -1;
		op->kernel = k;
		op->body_case = DEVQ__OP__BODY_KERNEL;
		return dec_kernel(a, k, f->v, f->end);
	}
	case DEVQ_WIRE_F_OP_COPY: {
		Devq__CopyOp *c = new_msg(a, &copy_init, sizeof(*c));
		if (!c)
			return -1;
		op->copy = c;
		op->body_case = DEVQ__OP__BODY_COPY;
		return dec_copy(a, c, f->v, f->end);
	}
	default: {
		Devq__FillOp *x = new_msg(a, &fill_init, sizeof(*x));
		if (!x)
			return -1;
		op->fill = x;
		op->body_case = DEVQ__OP__BODY_FILL;
		return dec_fill(a, x, f->v, f->end);
	}
	}
}

static int dec_op(ProtobufCAllocator *a, Devq__Op *op, const uint8_t *p, const uint8_t *end)
{
	struct devq_field f;
	while (p < end) {
		if (next_field(&p, end, &f))
			return -1;
		switch (f.num) {
		case DEVQ_WIRE_F_OP_QUEUE:
			if (f.wt != DEVQ_WIRE_VARINT)
				return -1;
			op->queue = (uint32_t)f.u;
			break;
		case DEVQ_WIRE_F_OP_CLIENT_SUBMIT_NS:
			if (f.wt != DEVQ_WIRE_VARINT)
				return -1;
			op->client_submit_ns = f.u;
			break;
		case DEVQ_WIRE_F_OP_WAITS: {
			if (f.wt != DEVQ_WIRE_LEN)
				return -1;
			if (!op->waits && !(op->waits = rep_array(a, &f, end, DEVQ_WIRE_F_OP_WAITS)))
				return -1;
			Devq__Wait *w = new_msg(a, &wait_init, sizeof(*w));
			if (!w)
				return -1;
			op->waits[op->n_waits++] = w;
			if (dec_wait(w, f.v, f.end))
				return -1;
			break;
		}
		case DEVQ_WIRE_F_OP_KERNEL:
		case DEVQ_WIRE_F_OP_COPY:
		case DEVQ_WIRE_F_OP_FILL:
			if (dec_op_body(a, op, &f))
				return -1;
			break;
		case DEVQ_WIRE_F_OP_NO_TIMING:
			op->no_timing = field_bool(&f);
			break;
		case DEVQ_WIRE_F_OP_DEADLINE_US:
			if (f.wt != DEVQ_WIRE_VARINT)
				return -1;
			op->deadline_us = f.u;
			break;
		case DEVQ_WIRE_F_OP_REPLAYABLE:
			op->replayable = field_bool(&f);
			break;
		default:
			break;
		}
	}
	return 0;
}

/* The common op, read straight through: what libdevq writes for a kernel
 * op without waits, flags or long fields, in field order,
 *
 *   [queue 0x08 varint] [client_submit_ns 0x10 varint]
 *   [kernel 0x22 len<128 { [executable 0x08 varint]
 *          (arg 0x12 len<128 { name 0x0a len<128 bytes, one value })* }]
 *
 * where a value is u64/u32/i64/i32 (0x10, 0x18, 0x20, 0x28, varint), f32
 * (0x35) or f64 (0x39), and a varint is one byte or ends within 8.  The
 * whole op is checked against that shape before anything is written or
 * allocated: 1 (op untouched) for any other shape, which dec_op reads;
 * else the same fields dec_op sets for those bytes (0), or -1 on an
 * allocation failure with the tree valid as dec_op leaves it. */
#define FAST_ARGS 8

static inline __attribute__((always_inline)) const uint8_t *fast_varint(const uint8_t *p,
									const uint8_t *end,
									uint64_t *v)
{
	if (p < end && *p < 0x80) {
		*v = *p;
		return p + 1;
	}
	if (end - p >= 8 && devq_wire_varint8_ends(devq_wire_le64(p)))
		return p + devq_wire_varint8(devq_wire_le64(p), v);
	return NULL;
}

/* A one-byte-length field with tag t at p, whole before end: its body. */
static inline const uint8_t *fast_len(const uint8_t *p, const uint8_t *end, unsigned t)
{
	if (end - p < 2 || p[0] != t || p[1] >= 0x80 || p[1] > (size_t)(end - p) - 2)
		return NULL;
	return p + 2;
}

static int dec_op_fast(ProtobufCAllocator *a, Devq__Op *op, const uint8_t *p, const uint8_t *end,
		       bool one_block)
{
	size_t names = 0; /* bytes of the names, NULs included */
	struct {
		const uint8_t *name;
		unsigned nlen, num;
		uint64_t u;
	} args[FAST_ARGS];
	unsigned nargs = 0;
	uint64_t queue = 0, ts = 0, exe = 0;
	bool kernel = false;
	if (p < end && *p == DEVQ_WIRE_TAG1(OP_QUEUE) && !(p = fast_varint(p + 1, end, &queue)))
		return 1;
	if (p < end && *p == DEVQ_WIRE_TAG1(OP_CLIENT_SUBMIT_NS) && !(p = fast_varint(p + 1, end, &ts)))
		return 1;
	if (p < end) {
		const uint8_t *k = fast_len(p, end, DEVQ_WIRE_TAG1(OP_KERNEL));
		if (!k)
			return 1;
		const uint8_t *kend = k + p[1];
		p = kend;
		kernel = true;
		if (k < kend && *k == DEVQ_WIRE_TAG1(KERNEL_OP_EXECUTABLE) && !(k = fast_varint(k + 1, kend, &exe)))
			return 1;
		while (k < kend) {
			const uint8_t *g = fast_len(k, kend, DEVQ_WIRE_TAG1(KERNEL_OP_ARGS));
			if (!g || nargs == FAST_ARGS)
				return 1;
			const uint8_t *gend = g + k[1];
			k = gend;
			const uint8_t *nm = fast_len(g, gend, DEVQ_WIRE_TAG1(ARG_NAME));
			if (!nm)
				return 1;
			args[nargs].name = nm;
			args[nargs].nlen = g[1];
			names += g[1] + 1u;
			g = nm + g[1];
			if (g == gend)
				return 1;
			unsigned t = *g++;
			switch (t) {
			case DEVQ_WIRE_TAG1(ARG_U64):
			case DEVQ_WIRE_TAG1(ARG_U32):
			case DEVQ_WIRE_TAG1(ARG_I64):
			case DEVQ_WIRE_TAG1(ARG_I32):
				if (!(g = fast_varint(g, gend, &args[nargs].u)))
					return 1;
				break;
			case DEVQ_WIRE_TAG1(ARG_F32):
				if (gend - g < 4)
					return 1;
				args[nargs].u = devq_wire_le32(g);
				g += 4;
				break;
			case DEVQ_WIRE_TAG1(ARG_F64):
				if (gend - g < 8)
					return 1;
				args[nargs].u = devq_wire_le64(g);
				g += 8;
				break;
			default:
				return 1;
			}
			if (g != gend)
				return 1;
			args[nargs++].num = t >> 3;
		}
	}
	if (p != end)
		return 1;

	op->queue = (uint32_t)queue;
	op->client_submit_ns = ts;
	if (!kernel)
		return 0;
	/* One block for the kernel, its argument array, arguments and names
	 * where the allocator frees nothing piecewise (devq_msg_dec_arena). */
	_Static_assert(sizeof(Devq__KernelOp) % sizeof(void *) == 0 &&
			       sizeof(Devq__Arg) % sizeof(void *) == 0,
		       "carved structs stay aligned");
	unsigned char *blk = NULL;
	if (one_block && !(blk = xalloc(a, sizeof(Devq__KernelOp) +
						   nargs * (sizeof(void *) + sizeof(Devq__Arg)) +
						   names)))
		return -1;
	Devq__KernelOp *k = blk ? (Devq__KernelOp *)blk : xalloc(a, sizeof(*k));
	if (!k)
		return -1;
	*k = kernel_init;
	op->kernel = k;
	op->body_case = DEVQ__OP__BODY_KERNEL;
	k->executable = (uint32_t)exe;
	if (!nargs)
		return 0;
	if (blk)
		blk += sizeof(Devq__KernelOp);
	if (!(k->args = blk ? (Devq__Arg **)blk : xalloc(a, nargs * sizeof(void *))))
		return -1;
	if (blk)
		blk += nargs * sizeof(void *);
	for (unsigned i = 0; i < nargs; i++) {
		Devq__Arg *g = blk ? (Devq__Arg *)blk : xalloc(a, sizeof(*g));
		if (!g)
			return -1;
		*g = arg_init;
		k->args[k->n_args++] = g;
		if (blk)
			blk += sizeof(Devq__Arg);
	}
	for (unsigned i = 0; i < nargs; i++) {
		Devq__Arg *g = k->args[i];
		unsigned n = args[i].nlen;
		char *s = blk ? (char *)blk : xalloc(a, n + 1);
		if (!s)
			return -1;
		if (blk)
			blk += n + 1;
		for (unsigned j = 0; j < n; j++)
			s[j] = (char)args[i].name[j];
		s[n] = '\0';
		g->name = s;
		uint64_t u = args[i].u;
		switch (args[i].num) {
		case DEVQ_WIRE_F_ARG_U64: g->u64 = u; break;
		case DEVQ_WIRE_F_ARG_U32: g->u32 = (uint32_t)u; break;
		case DEVQ_WIRE_F_ARG_I64: g->i64 = (int64_t)u; break;
		case DEVQ_WIRE_F_ARG_I32: g->i32 = (int32_t)(uint32_t)u; break;
		case DEVQ_WIRE_F_ARG_F32: {
			uint32_t bits = (uint32_t)u;
			memcpy(&g->f32, &bits, sizeof(bits));
			break;
		}
		default:
			memcpy(&g->f64, &u, sizeof(u));
			break;
		}
		g->value_case = (Devq__Arg__ValueCase)args[i].num;
	}
	return 0;
}

static int dec_submit(ProtobufCAllocator *a, Devq__Submit *s, const uint8_t *p,
		      const uint8_t *end, bool one_block)
{
	struct devq_field f;
	Devq__Op *opblk = NULL; /* one_block: the ops, after their array */
	while (p < end) {
		if (next_field(&p, end, &f))
			return -1;
		if (f.num != DEVQ_WIRE_F_SUBMIT_OPS)
			continue; /* unknown: skipped */
		if (f.wt != DEVQ_WIRE_LEN)
			return -1;
		if (!s->ops && one_block) {
			_Static_assert(sizeof(Devq__Op) % sizeof(void *) == 0, "ops stay aligned");
			size_t n = 1;
			if (f.end != end && count_field(f.end, end, DEVQ_WIRE_F_SUBMIT_OPS, &n))
				return -1;
			if (n > SIZE_MAX / (sizeof(void *) + sizeof(Devq__Op)) ||
			    !(s->ops = xalloc(a, n * (sizeof(void *) + sizeof(Devq__Op)))))
				return -1;
			opblk = (Devq__Op *)(s->ops + n);
		} else if (!s->ops && !(s->ops = rep_array(a, &f, end, DEVQ_WIRE_F_SUBMIT_OPS))) {
			return -1;
		}
		Devq__Op *op = opblk ? opblk++ : xalloc(a, sizeof(*op));
		if (!op)
			return -1;
		*op = op_init;
		s->ops[s->n_ops++] = op;
		int r = dec_op_fast(a, op, f.v, f.end, one_block);
		if (r > 0)
			r = dec_op(a, op, f.v, f.end);
		if (r)
			return -1;
	}
	return 0;
}

static void *sys_alloc(void *ud, size_t n)
{
	(void)ud;
	return malloc(n);
}

static void sys_free(void *ud, void *p)
{
	(void)ud;
	free(p);
}

/* What protobuf-c uses for a NULL allocator, so that either may free the
 * result. */
static ProtobufCAllocator sys_allocator = { sys_alloc, sys_free, NULL };

static Devq__ClientMessage *dec_fast(ProtobufCAllocator *a, size_t len, const uint8_t *buf,
				     bool one_block)
{
	if (!a)
		a = &sys_allocator;
	/* Only a payload that is one submit field (tag 7, length-delimited,
	 * one byte) and nothing else, which is what libdevq sends; anything
	 * else at this level (several bodies, other fields) is protobuf-c's. */
	if (len < 2 || buf[0] != DEVQ_WIRE_TAG1(CLIENT_MESSAGE_SUBMIT))
		return NULL;
	const uint8_t *p = buf, *end = buf + len;
	struct devq_field f;
	if (next_field(&p, end, &f) || p != end)
		return NULL;
	Devq__ClientMessage *m = new_msg(a, &client_message_init, sizeof(*m));
	if (!m)
		return NULL;
	Devq__Submit *s = new_msg(a, &submit_init, sizeof(*s));
	if (s) {
		m->submit = s;
		m->body_case = DEVQ__CLIENT_MESSAGE__BODY_SUBMIT;
		if (dec_submit(a, s, f.v, f.end, one_block) == 0)
			return m;
	}
	protobuf_c_message_free_unpacked(&m->base, a);
	return NULL;
}

Devq__ClientMessage *devq_msg_dec_fast(ProtobufCAllocator *a, size_t len, const uint8_t *buf)
{
	return dec_fast(a, len, buf, false);
}

Devq__ClientMessage *devq_msg_dec(ProtobufCAllocator *a, size_t len, const uint8_t *buf)
{
	Devq__ClientMessage *m = dec_fast(a, len, buf, false);
	return m ? m : devq__client_message__unpack(a, len, buf);
}

Devq__ClientMessage *devq_msg_dec_arena(ProtobufCAllocator *a, size_t len, const uint8_t *buf)
{
	Devq__ClientMessage *m = dec_fast(a, len, buf, true);
	return m ? m : devq__client_message__unpack(a, len, buf);
}
