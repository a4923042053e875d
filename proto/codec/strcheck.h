/* SPDX-License-Identifier: Apache-2.0 */
/* The string fields of a message, checked on the wire with their lengths.
 *
 * protobuf-c hands a string field to C as a NUL-terminated copy, so a
 * string that holds a NUL byte reads as its part before the NUL: a tenant
 * name "job\0../../x" would be validated, and granted, as "job".  This
 * walks the raw bytes of a message protobuf-c has already accepted, by its
 * descriptors, and says which string field holds a NUL, so that the
 * caller refuses it instead of acting on a shorter name.
 *
 * Only the messages whose strings are names the daemon acts on go through
 * it (Hello and the admin calls: requests/dispatch.c's RQ_STRINGS), never
 * a Submit: the hot path pays nothing. */
#ifndef DEVQ_STRCHECK_H
#define DEVQ_STRCHECK_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* How many messages deep below the top one the walk goes: devq.proto's
 * ClientMessage nests 5 deep (submit, op, kernel, arg, buffer), and no
 * message of it contains itself; test_msg_dec checks the schema against
 * this bound, so that a .proto change that nests deeper fails there.  The
 * bound keeps the walk's stack bounded whatever the descriptors. */
#define DEVQ_STRCHECK_DEPTH 8

enum devq_strcheck {
	DEVQ_STRCHECK_OK = 0,
	DEVQ_STRCHECK_NUL,       /* a string field holds a NUL byte */
	DEVQ_STRCHECK_MALFORMED, /* bytes protobuf-c's unpacker refuses */
	DEVQ_STRCHECK_DEEP,      /* messages nested deeper than DEVQ_STRCHECK_DEPTH */
};

/* Walks the len bytes at buf as a message of type d: every string field
 * (each occurrence, repeated or not, in every message field, known fields
 * only) must hold no NUL byte; other fields and unknown ones are skipped.
 * Returns the first problem found, in wire order; where (n bytes, n > 0)
 * gets the names of the fields that lead to it from the top message,
 * joined by ": " ("admin_grant: tenant"), cut to fit, or "" when there is
 * none (OK, or malformed bytes in the top message itself).  The work is
 * linear in len and the stack bounded by DEVQ_STRCHECK_DEPTH.  A pure
 * function: no allocation, no state. */
enum devq_strcheck devq_strcheck(const ProtobufCMessageDescriptor *d, const uint8_t *buf,
				 size_t len, char *where, size_t n);

#endif
