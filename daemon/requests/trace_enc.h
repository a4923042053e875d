/* SPDX-License-Identifier: Apache-2.0 */
/* One op recorder record (core/trace.h) as a TraceReply `ops` field, the
 * bytes written by hand.  A whole-ring TraceReply is 16 384 of them by
 * default; protobuf-c's generic packer (a descriptor walk to size each
 * op, and another to write it) made packing them most of the loop's work
 * while a tenant asked for traces in a loop (measured: bench/RESULTS.md,
 * "Trace replies off the loop").  The bytes are protobuf-c's for the same
 * TraceOp: test_trace_enc compares them on random records. */
#ifndef DEVQ_TRACE_ENC_H
#define DEVQ_TRACE_ENC_H

#include <stddef.h>
#include <stdint.h>

#include "core/trace.h"

/* The most bytes devq_trace_enc_op writes for one record: a TraceOp body
 * of at most 458 bytes (session, point 11 bytes each with their tags;
 * queue, stream 6; executable, code 11 when negative; Timing 79; 8 waits
 * of 22 and 8 buffers of 18; waits_dropped 3), its tag and a two-byte
 * length.  test_trace_enc writes a record this wide. */
#define DEVQ_TRACE_ENC_OP_MAX 461

/* Writes TraceReply field 10 (`ops`: tag, length, TraceOp) for x at out,
 * which has room for DEVQ_TRACE_ENC_OP_MAX bytes.  Waits and buffers past
 * the record's arrays (DEVQ_TRACE_WAITS, DEVQ_TRACE_BUFS) are not read.
 * Returns the bytes written. */
size_t devq_trace_enc_op(uint8_t *out, const struct devq_trace_rec *x);

#endif
