/* SPDX-License-Identifier: Apache-2.0 */
/* A hand-written decoder for the frame libdevq receives per batch of
 * completed ops: a DaemonMessage whose body is Completions
 * (proto/devq.proto).  protobuf-c's unpacker allocates the message, an
 * array, every Completion, its Timing and its message string, and
 * free_unpacked gives them back; this module fills libdevq's struct
 * devq_completion straight from the frame's bytes, allocating nothing.
 *
 * It decodes exactly what protobuf-c 1.4 decodes from the same bytes:
 * unknown fields are skipped, a scalar or string given twice keeps its last
 * value, a Timing given twice is the last one whole (protobuf-c's merge of
 * proto3 scalars keeps the later message's values, zeros included), and a
 * frame protobuf-c rejects (truncated, a varint over ten bytes, a length
 * prefix over five bytes or past its message, a wrong wire type for a
 * known field, wire types 3, 4, 6 and 7, tag 0) is rejected.  Frames of
 * any other shape — another message, or a Completions field that is not the
 * frame's only top-level field — are left to protobuf-c. */
#ifndef DEVQ_CMPL_DEC_H
#define DEVQ_CMPL_DEC_H

#include <stddef.h>
#include <stdint.h>

#include "devq.h"

/* devq_cmpl_dec_begin: not a frame this decoder takes. */
#define DEVQ_CMPL_DEC_OTHER 1

struct devq_cmpl_dec {
	const uint8_t *p, *end; /* the Completions message still to read */
};

/* Starts on a DaemonMessage payload.  0: a Completions frame, whose items
 * devq_cmpl_dec_next returns; DEVQ_CMPL_DEC_OTHER: decode it with
 * protobuf-c instead; -EPROTO: malformed (protobuf-c rejects it too). */
int devq_cmpl_dec_begin(struct devq_cmpl_dec *d, const uint8_t *payload, size_t len);

/* The next Completion.  1: *out holds it (client_received 0, the message
 * cut at its first NUL and at sizeof(out->message) - 1 bytes, as a C
 * string copy of protobuf-c's would be); 0: no more; -EPROTO: the frame is
 * malformed and protobuf-c rejects all of it, so whatever items came
 * before must be dropped as well. */
int devq_cmpl_dec_next(struct devq_cmpl_dec *d, struct devq_completion *out);

/* Copies a message of len bytes (not NUL-terminated) into dst of cap > 0
 * bytes: up to its first NUL, at most cap - 1 bytes, then a NUL. */
void devq_cmpl_dec_copy_msg(char *dst, size_t cap, const char *src, size_t len);

#endif
