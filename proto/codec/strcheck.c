/* SPDX-License-Identifier: Apache-2.0 */
/* String fields checked with their lengths; see strcheck.h. */
#include "codec/strcheck.h"

#include <stdio.h>
#include <string.h>

#include "codec/msg_dec.h"
#include "wire.h"

/* The fields from the top message down to the one being read: trail[i] is
 * the field read in the message i deep.  n of them name the culprit once
 * one is found. */
struct walk {
	const ProtobufCFieldDescriptor *trail[DEVQ_STRCHECK_DEPTH + 1];
	unsigned n;
};

static enum devq_strcheck walk(struct walk *w, const ProtobufCMessageDescriptor *d,
			       const uint8_t *p, const uint8_t *end, unsigned depth)
{
	struct devq_field f;
	while (p < end) {
		/* Fields are delimited as protobuf-c delimits them, so bytes
		 * it accepted are read whole here, and nothing past end. */
		if (devq_field_next(&p, end, &f) < 0) {
			w->n = depth;
			return DEVQ_STRCHECK_MALFORMED;
		}
		const ProtobufCFieldDescriptor *fd = protobuf_c_message_descriptor_get_field(d, f.num);
		/* An unknown field is kept aside by protobuf-c and read by no
		 * one; a number, a bool or a bytes field has its length. */
		if (!fd || (fd->type != PROTOBUF_C_TYPE_STRING && fd->type != PROTOBUF_C_TYPE_MESSAGE))
			continue;
		w->trail[depth] = fd;
		if (f.wt != DEVQ_WIRE_LEN) { /* protobuf-c refuses the message */
			w->n = depth + 1;
			return DEVQ_STRCHECK_MALFORMED;
		}
		if (fd->type == PROTOBUF_C_TYPE_STRING) {
			/* What C reads of the string ends at its first NUL:
			 * any NUL makes it shorter than what was sent. */
			if (memchr(f.v, 0, (size_t)(f.end - f.v))) {
				w->n = depth + 1;
				return DEVQ_STRCHECK_NUL;
			}
			continue;
		}
		if (depth == DEVQ_STRCHECK_DEPTH) {
			w->n = depth + 1;
			return DEVQ_STRCHECK_DEEP;
		}
		enum devq_strcheck r = walk(w, fd->descriptor, f.v, f.end, depth + 1);
		if (r != DEVQ_STRCHECK_OK)
			return r;
	}
	return DEVQ_STRCHECK_OK;
}

enum devq_strcheck devq_strcheck(const ProtobufCMessageDescriptor *d, const uint8_t *buf,
				 size_t len, char *where, size_t n)
{
	struct walk w = { .n = 0 };
	enum devq_strcheck r = len ? walk(&w, d, buf, buf + len, 0) : DEVQ_STRCHECK_OK;
	size_t at = 0;
	where[0] = '\0';
	for (unsigned i = 0; r != DEVQ_STRCHECK_OK && i < w.n && at < n; i++) {
		int k = snprintf(where + at, n - at, "%s%s", i ? ": " : "", w.trail[i]->name);
		if (k < 0)
			break;
		at += (size_t)k;
	}
	return r;
}
