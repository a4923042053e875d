/* SPDX-License-Identifier: Apache-2.0 */
/* Hand-written protobuf decoding of DaemonMessage{completions} (see
 * cmpl_dec.h for why).  The wire format, from proto/devq.proto:
 *
 *   DaemonMessage   5: Completions  (tag 0x2a)
 *   Completions     1: repeated Completion items (0x0a)
 *   Completion      1: uint32 queue   2: uint64 point   3: Code code
 *                   4: string message 5: Timing timing
 *   Timing          1..7: uint64 (client_submit .. enqueue_ns)
 *
 * proto/wire.h names these fields and holds the varint and tag helpers
 * that every hand-written codec shares.
 *
 * Each rule below is protobuf-c 1.4's (protobuf-c.c, protobuf_c_message_unpack
 * and the parse_* helpers it calls), since libdevq must not see a frame
 * differently depending on which decoder read it:
 *
 *  - a tag is a varint of at most 5 bytes whose value is kept to 32 bits;
 *    a first byte with field number 0 is an error (a longer encoding of
 *    field 0 is merely an unknown field);
 *  - a varint value has at most 10 bytes, bits past 64 are dropped, and a
 *    uint32 or enum field keeps the low 32 bits;
 *  - a length prefix has at most 5 bytes, at most INT_MAX, and its data
 *    must lie within the enclosing message;
 *  - fixed64 and fixed32 need 8 and 4 bytes; wire types 3, 4, 6, 7 are
 *    errors, known or not;
 *  - a known field with another wire type than its own is an error;
 *  - a submessage given twice is merged, and for proto3 scalars protobuf-c's
 *    merge keeps every value of the later one (its "has" test reads the
 *    message header, never zero): the last Timing wins whole. */
#include "cmpl_dec.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#include "wire.h"

/* Reads a tag at *pp (end > *pp).  0 or -EPROTO. */
static inline int get_tag(const uint8_t **pp, const uint8_t *end, uint32_t *field,
			  unsigned *wt)
{
	const uint8_t *p = *pp;
	if ((p[0] & 0xf8) == 0)
		return -EPROTO;
	*wt = p[0] & 7;
	uint32_t tag = (p[0] & 0x7fu) >> 3;
	if (!(p[0] & 0x80)) {
		*field = tag;
		*pp = p + 1;
		return 0;
	}
	size_t max = (size_t)(end - p) > 5 ? 5 : (size_t)(end - p);
	unsigned shift = 4;
	for (size_t i = 1; i < max; i++) {
		if (p[i] & 0x80) {
			tag |= (uint32_t)(p[i] & 0x7f) << shift;
			shift += 7;
		} else {
			tag |= (uint32_t)p[i] << shift;
			*field = tag;
			*pp = p + i + 1;
			return 0;
		}
	}
	return -EPROTO;
}

/* Reads a varint value at *pp.  0 or -EPROTO.  lim is how far bytes may
 * be read (the frame's end), end where the message holding the varint
 * ends. */
static inline int get_varint(const uint8_t **pp, const uint8_t *end, const uint8_t *lim,
			     uint64_t *v)
{
	const uint8_t *p = *pp;
	if (p < end && !(p[0] & 0x80)) { /* the common one-byte case */
		*v = p[0];
		*pp = p + 1;
		return 0;
	}
	/* Timestamps take 6 to 8 bytes, and a byte at a time cost about 7
	 * instructions each: take up to 8 at once when 8 can be read. */
	if (lim - p >= 8 && p < end) {
		uint64_t w = devq_wire_le64(p);
		if (devq_wire_varint8_ends(w)) {
			uint64_t x;
			size_t n = devq_wire_varint8(w, &x);
			/* Not terminated within its message: as the loop below
			 * (n <= 8, so not the ten-byte limit). */
			if (n > (size_t)(end - p))
				return -EPROTO;
			*v = x;
			*pp = p + n;
			return 0;
		}
	}
	size_t max = (size_t)(end - p) > 10 ? 10 : (size_t)(end - p);
	uint64_t x = 0;
	for (size_t i = 0; i < max; i++) {
		x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80)) {
			*v = x;
			*pp = p + i + 1;
			return 0;
		}
	}
	return -EPROTO;
}

/* Reads a length prefix at *pp and checks that its data fits before end;
 * *data_end gets the end of the data.  0 or -EPROTO. */
static inline int get_len(const uint8_t **pp, const uint8_t *end, const uint8_t **data_end)
{
	const uint8_t *p = *pp;
	size_t max = (size_t)(end - p) > 5 ? 5 : (size_t)(end - p);
	uint64_t v = 0;
	for (size_t i = 0; i < max; i++) {
		v |= (uint64_t)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80)) {
			p += i + 1;
			if (v > INT_MAX || v > (uint64_t)(end - p))
				return -EPROTO;
			*pp = p;
			*data_end = p + v;
			return 0;
		}
	}
	return -EPROTO;
}

/* Skips the value of a field of wire type wt.  0 or -EPROTO. */
static int skip(const uint8_t **pp, const uint8_t *end, const uint8_t *lim, unsigned wt)
{
	uint64_t v;
	const uint8_t *e;
	switch (wt) {
	case DEVQ_WIRE_VARINT:
		return get_varint(pp, end, lim, &v);
	case DEVQ_WIRE_I64:
	case DEVQ_WIRE_I32: {
		size_t n = wt == DEVQ_WIRE_I64 ? 8 : 4;
		if ((size_t)(end - *pp) < n)
			return -EPROTO;
		*pp += n;
		return 0;
	}
	case DEVQ_WIRE_LEN:
		if (get_len(pp, end, &e) < 0)
			return -EPROTO;
		*pp = e;
		return 0;
	}
	return -EPROTO; /* groups (3, 4) and 6, 7 */
}

static int get_timing(const uint8_t *p, const uint8_t *end, const uint8_t *lim,
		      struct devq_timing *t)
{
	/* The last Timing wins whole: see the header comment. */
	uint64_t v[7] = { 0 };
	while (p < end) {
		uint32_t f;
		unsigned wt;
		if (get_tag(&p, end, &f, &wt) < 0)
			return -EPROTO;
		if (f >= DEVQ_WIRE_F_TIMING_CLIENT_SUBMIT && f <= DEVQ_WIRE_F_TIMING_ENQUEUE_NS) {
			if (wt != DEVQ_WIRE_VARINT ||
			    get_varint(&p, end, lim, &v[f - DEVQ_WIRE_F_TIMING_CLIENT_SUBMIT]) < 0)
				return -EPROTO;
		} else if (skip(&p, end, lim, wt) < 0) {
			return -EPROTO;
		}
	}
	t->client_submit = v[0];
	t->received = v[1];
	t->handoff = v[2];
	t->device_start = v[3];
	t->device_end = v[4];
	t->observed = v[5];
	t->enqueue_ns = v[6];
	return 0;
}

void devq_cmpl_dec_copy_msg(char *dst, size_t cap, const char *src, size_t len)
{
	size_t n = len < cap - 1 ? len : cap - 1;
	const char *nul = memchr(src, 0, n);
	if (nul)
		n = (size_t)(nul - src);
	memcpy(dst, src, n);
	dst[n] = 0;
}

static int get_completion(const uint8_t *p, const uint8_t *end, const uint8_t *lim,
			  struct devq_completion *c)
{
	c->queue = 0;
	c->point = 0;
	c->code = 0;
	c->message[0] = 0;
	memset(&c->t, 0, sizeof(c->t));
	while (p < end) {
		uint32_t f;
		unsigned wt;
		uint64_t v;
		const uint8_t *e;
		if (get_tag(&p, end, &f, &wt) < 0)
			return -EPROTO;
		switch (f) {
		case DEVQ_WIRE_F_COMPLETION_QUEUE:
		case DEVQ_WIRE_F_COMPLETION_POINT:
		case DEVQ_WIRE_F_COMPLETION_CODE:
			if (wt != DEVQ_WIRE_VARINT || get_varint(&p, end, lim, &v) < 0)
				return -EPROTO;
			if (f == DEVQ_WIRE_F_COMPLETION_QUEUE)
				c->queue = (uint32_t)v;
			else if (f == DEVQ_WIRE_F_COMPLETION_POINT)
				c->point = v;
			else
				c->code = (int32_t)(uint32_t)v;
			break;
		case DEVQ_WIRE_F_COMPLETION_MESSAGE:
		case DEVQ_WIRE_F_COMPLETION_TIMING:
			if (wt != DEVQ_WIRE_LEN || get_len(&p, end, &e) < 0)
				return -EPROTO;
			if (f == DEVQ_WIRE_F_COMPLETION_MESSAGE)
				devq_cmpl_dec_copy_msg(c->message, sizeof(c->message),
						       (const char *)p, (size_t)(e - p));
			else if (get_timing(p, e, lim, &c->t) < 0)
				return -EPROTO;
			p = e;
			break;
		default:
			if (skip(&p, end, lim, wt) < 0)
				return -EPROTO;
			break;
		}
	}
	return 0;
}

int devq_cmpl_dec_begin(struct devq_cmpl_dec *d, const uint8_t *payload, size_t len)
{
	/* The shape the daemon writes: field 5 alone.  Anything else (another
	 * body, several top-level fields, where protobuf-c's oneof rules
	 * decide which body wins) goes to protobuf-c. */
	if (len < 2 || payload[0] != DEVQ_WIRE_TAG1(DAEMON_MESSAGE_COMPLETIONS))
		return DEVQ_CMPL_DEC_OTHER;
	const uint8_t *p = payload + 1, *end = payload + len, *e;
	if (get_len(&p, end, &e) < 0 || e != end)
		return DEVQ_CMPL_DEC_OTHER;
	d->p = p;
	d->end = end;
	return 0;
}

int devq_cmpl_dec_next(struct devq_cmpl_dec *d, struct devq_completion *out)
{
	while (d->p < d->end) {
		uint32_t f;
		unsigned wt;
		const uint8_t *e;
		if (get_tag(&d->p, d->end, &f, &wt) < 0)
			return -EPROTO;
		if (f != DEVQ_WIRE_F_COMPLETIONS_ITEMS) {
			if (skip(&d->p, d->end, d->end, wt) < 0)
				return -EPROTO;
			continue;
		}
		if (wt != DEVQ_WIRE_LEN || get_len(&d->p, d->end, &e) < 0)
			return -EPROTO;
		const uint8_t *p = d->p;
		d->p = e;
		if (get_completion(p, e, d->end, out) < 0)
			return -EPROTO;
		return 1;
	}
	return 0;
}
