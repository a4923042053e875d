/* SPDX-License-Identifier: Apache-2.0 */
/* A hand-written encoder for the frame libdevq sends per devq_submit: a
 * ClientMessage whose body is Submit (proto/devq.proto).  Building the
 * protobuf-c structs takes seven allocations per call, and protobuf-c's
 * generic packer walks field descriptors and sizes every nested message
 * twice (get_packed_size, then again while packing); for a one-op submit
 * that is most of libdevq's instructions per op (measured:
 * bench/RESULTS.md, "Run 10").  This module writes the same bytes straight
 * from libdevq's own struct devq_op array into the send buffer.  Every
 * other client message still goes through protobuf-c. */
#ifndef DEVQ_SUBMIT_ENC_H
#define DEVQ_SUBMIT_ENC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devq.h"

/* What the ops carry besides their own fields: the client submit stamp
 * (Op.client_submit_ns) and the replayable mark, the same for every op of
 * the batch; and per op, its options (devq_submit_ex): ext, n entries of
 * ext_size bytes each (checked by the caller), or NULL for none. */
struct devq_submit_enc_batch {
	const struct devq_op *ops;
	size_t n;
	uint64_t submit_ns;
	bool replayable;
	const struct devq_op_ext *ext;
	size_t ext_size;
};

/* Payload bytes of ClientMessage{submit: Submit{ops: b->ops[0..n)}}. */
size_t devq_submit_enc_size(const struct devq_submit_enc_batch *b);

/* Writes that payload to out, which must hold size bytes, where size is
 * what devq_submit_enc_size(b) returned (the outer length comes from it
 * instead of a second sizing pass).  Returns size.  The bytes are the ones
 * protobuf-c's packer writes for the same message built as protobuf-c
 * structs: fields in number order, proto3 defaults (0, "", false) left
 * out, oneof members written whenever set (an Arg value of 0 included),
 * KernelOp, CopyOp, FillOp and their BufferArgs always present (even when
 * empty), an Arg name left out when NULL or "", an Arg of a type outside
 * enum devq_arg_type and an op of a kind outside enum devq_op_kind without
 * a value or body.  A missing buffer or executable (NULL) counts as id 0. */
size_t devq_submit_enc(uint8_t *out, size_t size, const struct devq_submit_enc_batch *b);

#endif
