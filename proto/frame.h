/* SPDX-License-Identifier: Apache-2.0 */
/* devq framing: length-prefixed frames with SCM_RIGHTS fds on a Unix stream
 * socket.  Shared by the daemon and libdevq; handles only bytes and fds,
 * never message semantics. */
#ifndef DEVQ_FRAME_H
#define DEVQ_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <protobuf-c/protobuf-c.h>

#define DEVQ_FRAME_HDR 8u
#define DEVQ_FRAME_MAX_DEFAULT (1u << 20) /* payload bytes */
#define DEVQ_FDS_PER_MSG 253u             /* SCM_MAX_FD */

enum devq_frame_type {
	DEVQ_FRAME_CLIENT = 1, /* devq.ClientMessage */
	DEVQ_FRAME_DAEMON = 2, /* devq.DaemonMessage */
};

struct devq_frame {
	uint16_t type;
	uint32_t len;
	const uint8_t *payload; /* valid until the next devq_rx_* call */
	unsigned nfds;
	int fds[DEVQ_FDS_PER_MSG]; /* owned by the caller once returned */
};

/* Receive side.  Bytes accumulate in buf; fds in a FIFO because the kernel
 * hands them over with the first byte of the sendmsg that carried them, which
 * may arrive in the same recvmsg as the tail of the previous frame. */
struct devq_rx {
	uint8_t *buf;
	size_t len, cap, consumed;
	uint64_t taken; /* bytes of the stream in frames taken so far */
	uint32_t max_payload;
	int *fds;
	size_t fd_head, fd_count, fd_cap;
};

int devq_rx_init(struct devq_rx *rx, uint32_t max_payload);
void devq_rx_fini(struct devq_rx *rx); /* closes every fd still queued */

/* One recvmsg (MSG_CMSG_CLOEXEC; plus flags such as MSG_DONTWAIT).
 * Returns bytes read (>0), 0 on orderly EOF, -EAGAIN, -EPROTO when the
 * control data was truncated (fds lost), -EMSGSIZE when the announced frame
 * exceeds max_payload, or another -errno. */
ssize_t devq_rx_recv(struct devq_rx *rx, int sock, int flags);

/* Takes the next complete frame.  Returns 1 with *f filled (its fds now
 * belong to the caller), 0 when more bytes are needed, -EMSGSIZE when the
 * header announces more than max_payload (checked before any allocation),
 * -EPROTO when a frame lacks its fds, declares more than DEVQ_FDS_PER_MSG, or
 * fds arrived that no frame claims. */
int devq_rx_next(struct devq_rx *rx, struct devq_frame *f);

/* Closes the fds of a frame the caller did not claim (entries set to -1 are
 * skipped). */
void devq_frame_close_fds(struct devq_frame *f);

/* Send side: a FIFO of packed frames.  fds handed to devq_tx_push belong to
 * the tx from then on and are closed once sent (or on devq_tx_fini). */
struct devq_txchunk;
struct devq_tx {
	struct devq_txchunk *head, *tail;
	size_t bytes;  /* queued, unsent */
	size_t frames; /* queued, unsent (a chunk's frames until all of it is sent) */
	struct devq_txchunk *spare; /* a sent slab kept for devq_tx_append */
};

void devq_tx_init(struct devq_tx *tx);
void devq_tx_fini(struct devq_tx *tx);
int devq_tx_push(struct devq_tx *tx, uint16_t type, const ProtobufCMessage *msg,
		 const int *fds, unsigned nfds);
/* Queues a frame of plen payload bytes (no fds) and points *payload at
 * them, for a caller that encodes the payload itself in place (the daemon's
 * completions, proto/codec/cmpl_enc.c).  The caller must fill all plen bytes
 * before the next flush.  0, -EINVAL (plen too large) or -ENOMEM. */
int devq_tx_reserve(struct devq_tx *tx, uint16_t type, size_t plen, uint8_t **payload);
/* The same for a sender of many small frames (libdevq's submits): the frame
 * goes at the end of the last queued chunk when that has room, new chunks
 * are slabs of DEVQ_TX_SLAB bytes, and one sent slab is kept for the next
 * frames, so a steady stream of frames costs no allocation.  A frame larger
 * than a slab gets a chunk of its own. */
#define DEVQ_TX_SLAB (64u << 10)
int devq_tx_append(struct devq_tx *tx, uint16_t type, size_t plen, uint8_t **payload);
/* A frame built in pieces before it is queued (a large reply that the
 * daemon packs over several loop turns): a chunk of its own with cap bytes
 * of data room, which the builder grows as it goes (NULL, or -ENOMEM with
 * *c unchanged, when memory runs out) and frees unless it queues it. */
struct devq_txchunk *devq_txchunk_new(size_t cap);
uint8_t *devq_txchunk_data(struct devq_txchunk *c);
size_t devq_txchunk_cap(const struct devq_txchunk *c);
int devq_txchunk_grow(struct devq_txchunk **c, size_t cap);
/* Gives back the room past cap bytes (a chunk sized for the most a reply
 * could take, once it is built): never fails; the larger chunk stays when
 * the allocator cannot move it. */
void devq_txchunk_shrink(struct devq_txchunk **c, size_t cap);
void devq_txchunk_free(struct devq_txchunk *c);
/* Queues c's data[start, start + DEVQ_FRAME_HDR + plen) as one frame (no
 * fds), writing its header at start: the payload must already be in place
 * after it, so the builder leaves room for the header (and whatever it
 * can only write last) ahead of the payload, and nothing is copied.  The
 * tx owns c from then on, on -EINVAL (the frame does not fit c, or plen is
 * too large) too. */
int devq_tx_push_chunk(struct devq_tx *tx, struct devq_txchunk *c, uint16_t type, size_t start,
		       size_t plen);
/* Writes as much as the socket takes.  0 when everything was sent, -EAGAIN
 * when bytes remain (non-blocking socket), or -errno. */
int devq_tx_flush(struct devq_tx *tx, int sock);

#endif
