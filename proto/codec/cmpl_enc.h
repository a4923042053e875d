/* SPDX-License-Identifier: Apache-2.0 */
/* A hand-written encoder for the one frame the daemon sends per op: a
 * DaemonMessage whose body is Completions (proto/devq.proto).  protobuf-c's
 * generic packer walks field descriptors and sizes every submessage once for
 * get_packed_size and again while packing; for a Completion with a 7-field
 * Timing that is a large share of the daemon's instructions per null op
 * (measured: bench/RESULTS.md, "Run 9").  This module writes the same
 * bytes straight from the daemon's completion
 * records.  Only this frame: every other message still goes through
 * protobuf-c. */
#ifndef DEVQ_CMPL_ENC_H
#define DEVQ_CMPL_ENC_H

#include <stddef.h>
#include <stdint.h>

/* A completion's message, NUL included: what a client's struct
 * devq_completion holds. */
#define DEVQ_CMPL_MSG 160


/* One finished op waiting to go out (filled by sched.c, sent by server.c). */
struct devq_cmpl {
	uint32_t queue;
	uint64_t point;
	int code;               /* devq.Code */
	char msg[DEVQ_CMPL_MSG]; /* NUL-terminated; "" when none */
	uint64_t t[7];          /* Timing fields 1..7, in field order */
};

/* Payload bytes of DaemonMessage{completions: Completions{items: c[0..n)}}.
 * The message field of a record counts up to its first NUL (at most
 * DEVQ_CMPL_MSG - 1 bytes). */
size_t devq_cmpl_enc_size(const struct devq_cmpl *c, size_t n);

/* Writes that payload to out, which must hold size bytes, where size is
 * what devq_cmpl_enc_size(c, n) returned for the same records (the encoder
 * takes the outer length from it instead of sizing every record twice).
 * Returns the bytes written: size.  The bytes are the ones protobuf-c's
 * packer writes for the same message: fields in number order, proto3
 * defaults (0, "") left out, Timing always present. */
size_t devq_cmpl_enc(uint8_t *out, size_t size, const struct devq_cmpl *c, size_t n);

#endif
