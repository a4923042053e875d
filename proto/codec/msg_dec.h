/* SPDX-License-Identifier: Apache-2.0 */
/* A hand-written decoder for the one client frame that arrives per batch of
 * ops: a ClientMessage whose body is a Submit (proto/devq.proto).
 * protobuf-c's generic unpacker scans every message twice (once to count
 * and size, once to parse), looks every field up in its descriptor and
 * allocates per field; for a batch of null ops that is a large share of
 * the daemon's instructions per op (measured: bench/RESULTS.md, "Run
 * 10").  This module reads the same bytes straight
 * into the same protobuf-c structs, going over a message twice only where
 * a repeated field needs its count.  Every other frame, and any payload it
 * would have to reject, goes to protobuf-c, which gives the answer. */
#ifndef DEVQ_MSG_DEC_H
#define DEVQ_MSG_DEC_H

#include <stddef.h>
#include <stdint.h>

#include "devq.pb-c.h"

/* Decodes a ClientMessage payload like devq__client_message__unpack(a,
 * len, buf) and with the same result, NULL for a payload protobuf-c
 * rejects.  a may be NULL (malloc, as protobuf-c does).
 *
 * The result is a valid protobuf-c message, every struct initialised from
 * its generated *_INIT and allocated on its own from a, so it may be
 * packed, or freed with devq__client_message__free_unpacked(m, a).
 *
 * One difference: a Submit read here keeps no unknown fields (every
 * n_unknown_fields is 0) where protobuf-c would keep copies of them; the
 * daemon reads none, and re-packing a message only drops them. */
Devq__ClientMessage *devq_msg_dec(ProtobufCAllocator *a, size_t len, const uint8_t *buf);

/* devq_msg_dec for an allocator whose free does nothing (the daemon's frame
 * arena, dropped whole after the message): the same message, but the
 * common kernel op's kernel, arguments and names share one allocation, so
 * the result must not be freed piecewise with another allocator. */
Devq__ClientMessage *devq_msg_dec_arena(ProtobufCAllocator *a, size_t len, const uint8_t *buf);

/* The hand-written path alone: the message, or NULL where devq_msg_dec
 * hands the payload to protobuf-c instead.  It takes every payload that is
 * a single submit field (its one-byte tag 0x3a, a length, the Submit) and
 * that protobuf-c accepts, and nothing else, barring an allocation
 * failure.  Exposed for the tests, which hold it to that. */
Devq__ClientMessage *devq_msg_dec_fast(ProtobufCAllocator *a, size_t len, const uint8_t *buf);

/* One field of a protobuf message, as protobuf-c's scanner delimits it. */
struct devq_field {
	uint32_t num;       /* field number */
	unsigned wt;        /* wire type */
	const uint8_t *at;  /* first byte after the tag */
	const uint8_t *v;   /* the value: after the length prefix, if any */
	const uint8_t *end; /* first byte after the field */
	uint64_t u;         /* a varint's value */
};

/* Reads the field at *pp (before end, *pp < end) into *f and moves *pp past
 * it; -1 where protobuf-c's scan fails (a bad tag, a varint of more than 10
 * bytes, a value past end, a length prefix too long or too large, wire
 * types 3, 4, 6 and 7).  The decoder's own reader, shared so that another
 * walker over ClientMessage bytes (codec/strcheck.c) delimits fields
 * exactly as protobuf-c does, which accepted those bytes first. */
int devq_field_next(const uint8_t **pp, const uint8_t *end, struct devq_field *f);

#endif
