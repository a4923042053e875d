/* SPDX-License-Identifier: Apache-2.0 */
/* devq framing; see frame.h.  Header: u32 payload length, u16 type, u16 fd
 * count, little endian. */
#include "frame.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static void put_hdr(uint8_t *p, uint32_t len, uint16_t type, uint16_t nfds)
{
	p[0] = len & 0xff;
	p[1] = (len >> 8) & 0xff;
	p[2] = (len >> 16) & 0xff;
	p[3] = (len >> 24) & 0xff;
	p[4] = type & 0xff;
	p[5] = type >> 8;
	p[6] = nfds & 0xff;
	p[7] = nfds >> 8;
}

int devq_rx_init(struct devq_rx *rx, uint32_t max_payload)
{
	memset(rx, 0, sizeof(*rx));
	rx->max_payload = max_payload;
	return 0;
}

void devq_rx_fini(struct devq_rx *rx)
{
	if (!rx)
		return;
	for (size_t i = 0; i < rx->fd_count; i++)
		close(rx->fds[(rx->fd_head + i) % rx->fd_cap]);
	free(rx->fds);
	free(rx->buf);
	memset(rx, 0, sizeof(*rx));
}

static int fifo_push(struct devq_rx *rx, int fd)
{
	if (rx->fd_count == rx->fd_cap) {
		size_t ncap = rx->fd_cap ? rx->fd_cap * 2 : 16;
		int *n = malloc(ncap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		for (size_t i = 0; i < rx->fd_count; i++)
			n[i] = rx->fds[(rx->fd_head + i) % rx->fd_cap];
		free(rx->fds);
		rx->fds = n;
		rx->fd_cap = ncap;
		rx->fd_head = 0;
	}
	rx->fds[(rx->fd_head + rx->fd_count) % rx->fd_cap] = fd;
	rx->fd_count++;
	return 0;
}

static int fifo_pop(struct devq_rx *rx)
{
	int fd = rx->fds[rx->fd_head];
	rx->fd_head = (rx->fd_head + 1) % rx->fd_cap;
	rx->fd_count--;
	return fd;
}

/* Drops the bytes of frames already handed out. */
static void compact(struct devq_rx *rx)
{
	if (!rx->consumed)
		return;
	memmove(rx->buf, rx->buf + rx->consumed, rx->len - rx->consumed);
	rx->len -= rx->consumed;
	rx->consumed = 0;
}

/* Room for the frame now being received, sized from its header so a single
 * large frame costs one allocation and a hostile length costs none. */
static int reserve(struct devq_rx *rx)
{
	size_t want = 4096;
	if (rx->len >= DEVQ_FRAME_HDR) {
		uint32_t plen = get_le32(rx->buf);
		if (plen > rx->max_payload)
			return -EMSGSIZE;
		want = DEVQ_FRAME_HDR + (size_t)plen;
		if (want < 4096)
			want = 4096;
	}
	if (rx->cap - rx->len >= 1 && rx->cap >= want)
		return 0;
	size_t ncap = rx->cap ? rx->cap : 4096;
	while (ncap < want || ncap - rx->len < 1)
		ncap *= 2;
	uint8_t *n = realloc(rx->buf, ncap);
	if (!n)
		return -ENOMEM;
	rx->buf = n;
	rx->cap = ncap;
	return 0;
}

ssize_t devq_rx_recv(struct devq_rx *rx, int sock, int flags)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * DEVQ_FDS_PER_MSG)];
	} ctl;
	compact(rx);
	int r = reserve(rx);
	if (r < 0)
		return r;

	struct iovec iov = { rx->buf + rx->len, rx->cap - rx->len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	ssize_t n;
	do
		n = recvmsg(sock, &mh, flags | MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;

	int err = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t cnt = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		const int *fds = (const int *)(void *)CMSG_DATA(c);
		for (size_t i = 0; i < cnt; i++) {
			/* Queue every fd even after an error so fini closes it. */
			if (err || (err = fifo_push(rx, fds[i])) < 0)
				close(fds[i]);
		}
	}
	if (err)
		return err;
	if (mh.msg_flags & MSG_CTRUNC)
		return -EPROTO;
	rx->len += (size_t)n;
	if (rx->len >= DEVQ_FRAME_HDR && get_le32(rx->buf) > rx->max_payload)
		return -EMSGSIZE;
	return n;
}

/* Frames are taken in place, consumed only advancing: moving the rest of
 * the buffer down after every frame cost a copy of all that followed it
 * (quadratic in the frames one recv brings; libdevq reading a backlog of
 * completion frames spent more there than in anything else).  The bytes
 * are moved down once, before the next recv. */
int devq_rx_next(struct devq_rx *rx, struct devq_frame *f)
{
	const uint8_t *b = rx->buf + rx->consumed;
	size_t avail = rx->len - rx->consumed;
	if (avail < DEVQ_FRAME_HDR) {
		if (avail == 0 && rx->fd_count)
			return -EPROTO; /* fds with no frame to claim them */
		return 0;
	}
	uint32_t plen = get_le32(b);
	uint16_t nfds = get_le16(b + 6);
	if (plen > rx->max_payload)
		return -EMSGSIZE;
	if (nfds > DEVQ_FDS_PER_MSG)
		return -EPROTO;
	if (avail - DEVQ_FRAME_HDR < plen) {
		/* Every byte buffered belongs to this frame, and its fds came
		 * with its first byte: more fds than it declares belong to no
		 * frame.  (A complete frame may be followed by the next one's
		 * first bytes and fds, so this holds only here.) */
		if (rx->fd_count > nfds)
			return -EPROTO;
		return 0;
	}
	if (rx->fd_count < nfds)
		return -EPROTO;
	f->type = get_le16(b + 4);
	f->len = plen;
	f->payload = b + DEVQ_FRAME_HDR;
	f->nfds = nfds;
	for (unsigned i = 0; i < nfds; i++)
		f->fds[i] = fifo_pop(rx);
	rx->consumed += DEVQ_FRAME_HDR + plen;
	rx->taken += DEVQ_FRAME_HDR + plen;
	return 1;
}

void devq_frame_close_fds(struct devq_frame *f)
{
	for (unsigned i = 0; i < f->nfds; i++) {
		if (f->fds[i] >= 0)
			close(f->fds[i]);
		f->fds[i] = -1;
	}
	f->nfds = 0;
}

struct devq_txchunk {
	struct devq_txchunk *next;
	size_t len, off;
	size_t cap;       /* bytes of data room: len for a frame of its own */
	unsigned nframes; /* frames in it: more than one only for appended ones */
	unsigned nfds;
	int fds[]; /* followed by data, at (uint8_t *)(fds + nfds) */
};

static uint8_t *chunk_data(struct devq_txchunk *c)
{
	return (uint8_t *)(c->fds + c->nfds);
}

void devq_tx_init(struct devq_tx *tx)
{
	memset(tx, 0, sizeof(*tx));
}

static void chunk_free(struct devq_txchunk *c)
{
	for (unsigned i = 0; i < c->nfds; i++)
		if (c->fds[i] >= 0)
			close(c->fds[i]);
	free(c);
}

/* A sent chunk: a slab is kept for devq_tx_append when none is. */
static void chunk_done(struct devq_tx *tx, struct devq_txchunk *c)
{
	if (!tx->spare && c->cap == DEVQ_TX_SLAB && !c->nfds) {
		tx->spare = c;
		return;
	}
	chunk_free(c);
}

void devq_tx_fini(struct devq_tx *tx)
{
	if (!tx)
		return;
	while (tx->head) {
		struct devq_txchunk *c = tx->head;
		tx->head = c->next;
		chunk_free(c);
	}
	free(tx->spare);
	devq_tx_init(tx);
}

int devq_tx_push(struct devq_tx *tx, uint16_t type, const ProtobufCMessage *msg,
		 const int *fds, unsigned nfds)
{
	size_t plen = protobuf_c_message_get_packed_size(msg);
	struct devq_txchunk *c;
	if (nfds > DEVQ_FDS_PER_MSG || plen > UINT32_MAX ||
	    !(c = malloc(sizeof(*c) + nfds * sizeof(int) + DEVQ_FRAME_HDR + plen))) {
		for (unsigned i = 0; i < nfds; i++)
			close(fds[i]);
		return nfds > DEVQ_FDS_PER_MSG || plen > UINT32_MAX ? -EINVAL : -ENOMEM;
	}
	c->next = NULL;
	c->nfds = nfds;
	if (nfds)
		memcpy(c->fds, fds, nfds * sizeof(int));
	c->len = c->cap = DEVQ_FRAME_HDR + plen;
	c->off = 0;
	c->nframes = 1;
	put_hdr(chunk_data(c), (uint32_t)plen, type, (uint16_t)nfds);
	protobuf_c_message_pack(msg, chunk_data(c) + DEVQ_FRAME_HDR);
	if (tx->tail)
		tx->tail->next = c;
	else
		tx->head = c;
	tx->tail = c;
	tx->bytes += c->len;
	tx->frames++;
	return 0;
}

int devq_tx_reserve(struct devq_tx *tx, uint16_t type, size_t plen, uint8_t **payload)
{
	struct devq_txchunk *c;
	if (plen > UINT32_MAX)
		return -EINVAL;
	if (!(c = malloc(sizeof(*c) + DEVQ_FRAME_HDR + plen)))
		return -ENOMEM;
	c->next = NULL;
	c->nfds = 0;
	c->len = c->cap = DEVQ_FRAME_HDR + plen;
	c->off = 0;
	c->nframes = 1;
	put_hdr(chunk_data(c), (uint32_t)plen, type, 0);
	*payload = chunk_data(c) + DEVQ_FRAME_HDR;
	if (tx->tail)
		tx->tail->next = c;
	else
		tx->head = c;
	tx->tail = c;
	tx->bytes += c->len;
	tx->frames++;
	return 0;
}

struct devq_txchunk *devq_txchunk_new(size_t cap)
{
	struct devq_txchunk *c = malloc(sizeof(*c) + cap);
	if (c) {
		memset(c, 0, sizeof(*c));
		c->cap = cap;
	}
	return c;
}

uint8_t *devq_txchunk_data(struct devq_txchunk *c)
{
	return chunk_data(c);
}

size_t devq_txchunk_cap(const struct devq_txchunk *c)
{
	return c->cap;
}

int devq_txchunk_grow(struct devq_txchunk **c, size_t cap)
{
	if (cap <= (*c)->cap)
		return 0;
	struct devq_txchunk *n = realloc(*c, sizeof(*n) + cap);
	if (!n)
		return -ENOMEM;
	n->cap = cap;
	*c = n;
	return 0;
}

void devq_txchunk_shrink(struct devq_txchunk **c, size_t cap)
{
	if (cap >= (*c)->cap)
		return;
	struct devq_txchunk *n = realloc(*c, sizeof(*n) + cap);
	if (!n)
		return;
	n->cap = cap;
	*c = n;
}

void devq_txchunk_free(struct devq_txchunk *c)
{
	if (c)
		chunk_free(c);
}

int devq_tx_push_chunk(struct devq_tx *tx, struct devq_txchunk *c, uint16_t type, size_t start,
		       size_t plen)
{
	if (plen > UINT32_MAX || start > c->cap || c->cap - start < DEVQ_FRAME_HDR ||
	    c->cap - start - DEVQ_FRAME_HDR < plen) {
		chunk_free(c);
		return -EINVAL;
	}
	c->next = NULL;
	c->nfds = 0;
	c->off = start;
	/* No room after it: devq_tx_append never adds frames to this one. */
	c->len = c->cap = start + DEVQ_FRAME_HDR + plen;
	c->nframes = 1;
	put_hdr(chunk_data(c) + start, (uint32_t)plen, type, 0);
	if (tx->tail)
		tx->tail->next = c;
	else
		tx->head = c;
	tx->tail = c;
	tx->bytes += c->len - c->off;
	tx->frames++;
	return 0;
}

int devq_tx_append(struct devq_tx *tx, uint16_t type, size_t plen, uint8_t **payload)
{
	if (plen > UINT32_MAX)
		return -EINVAL;
	size_t need = DEVQ_FRAME_HDR + plen;
	struct devq_txchunk *c = tx->tail;
	/* A chunk with fds sends them with its first byte; it stays a frame
	 * of its own so that frames appended later never carry them. */
	if (!c || c->nfds || c->cap - c->len < need) {
		if (need <= DEVQ_TX_SLAB && tx->spare) {
			c = tx->spare;
			tx->spare = NULL;
		} else {
			size_t cap = need > DEVQ_TX_SLAB ? need : DEVQ_TX_SLAB;
			if (!(c = malloc(sizeof(*c) + cap)))
				return -ENOMEM;
			c->cap = cap;
		}
		c->next = NULL;
		c->nfds = 0;
		c->len = c->off = 0;
		c->nframes = 0;
		if (tx->tail)
			tx->tail->next = c;
		else
			tx->head = c;
		tx->tail = c;
	}
	uint8_t *p = chunk_data(c) + c->len;
	put_hdr(p, (uint32_t)plen, type, 0);
	*payload = p + DEVQ_FRAME_HDR;
	c->len += need;
	c->nframes++;
	tx->bytes += need;
	tx->frames++;
	return 0;
}

/* One sendmsg gathers consecutive frames; a frame with fds starts a new
 * sendmsg so that its fds ride with its own first byte. */
int devq_tx_flush(struct devq_tx *tx, int sock)
{
	enum { MAXIOV = 64 };
	while (tx->head) {
		struct iovec iov[MAXIOV];
		int niov = 0;
		struct devq_txchunk *c = tx->head;
		union {
			struct cmsghdr align;
			char buf[CMSG_SPACE(sizeof(int) * DEVQ_FDS_PER_MSG)];
		} ctl;
		struct msghdr mh = { .msg_iov = iov };
		if (c->off == 0 && c->nfds) {
			/* Zeroed: the cmsg padding goes to the kernel as well. */
			memset(&ctl, 0, sizeof(ctl));
			mh.msg_control = ctl.buf;
			mh.msg_controllen = CMSG_SPACE(sizeof(int) * c->nfds);
			struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
			cm->cmsg_level = SOL_SOCKET;
			cm->cmsg_type = SCM_RIGHTS;
			cm->cmsg_len = CMSG_LEN(sizeof(int) * c->nfds);
			memcpy(CMSG_DATA(cm), c->fds, sizeof(int) * c->nfds);
		}
		for (; c && niov < MAXIOV; c = c->next) {
			if (niov && c->nfds)
				break;
			iov[niov].iov_base = chunk_data(c) + c->off;
			iov[niov].iov_len = c->len - c->off;
			niov++;
		}
		mh.msg_iovlen = (size_t)niov;
		ssize_t n;
		do
			n = sendmsg(sock, &mh, MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			return -errno;
		size_t left = (size_t)n;
		tx->bytes -= left;
		while (left) {
			c = tx->head;
			size_t take = c->len - c->off < left ? c->len - c->off : left;
			if (c->off == 0 && c->nfds) {
				/* The kernel holds its own references now. */
				for (unsigned i = 0; i < c->nfds; i++) {
					close(c->fds[i]);
					c->fds[i] = -1;
				}
			}
			c->off += take;
			left -= take;
			if (c->off == c->len) {
				tx->head = c->next;
				if (!tx->head)
					tx->tail = NULL;
				tx->frames -= c->nframes;
				chunk_done(tx, c);
			}
		}
	}
	return 0;
}
