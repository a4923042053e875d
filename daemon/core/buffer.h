/* SPDX-License-Identifier: Apache-2.0 */
/* Buffers: memfds created or imported safely, device memory, and the
 * deferred release that keeps a buffer mapped until its last consumer has
 * completed (then BufferReleased goes to the client).  Loop thread. */
#ifndef DEVQ_BUFFER_H
#define DEVQ_BUFFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "devq.pb-c.h"

struct devq_session;
struct devq_job;

struct devq_buf {
	struct devq_session *s;
	uint64_t id, size;
	Devq__BufferKind kind;
	bool read_only;
	bool releasing;  /* release asked; freed when inflight drops to 0 */
	void *host;      /* shared: daemon mapping; NULL for device buffers */
	size_t map_len;
	bool bg;         /* large: populated and unmapped by the buffer worker */
	bool bg_busy;    /* its populate is queued or running on the worker */
	bool ready_due;  /* BufferReady waits for that populate */
	bool unmap_due;  /* released meanwhile: unmapped once it is done */
	int ready_fd;    /* the memfd BufferReady will carry (CreateBuffer), -1 */
	uint64_t devaddr;
	unsigned inflight; /* ops referencing it that have not completed */
	/* Hazard tracking (dma_resv rule): readers wait for the last writer,
	 * writers for the last writer and every reader since. */
	struct devq_job *last_writer;
	struct devq_job **readers;
	unsigned nreaders, readers_cap;
};

/* CreateBuffer: 0 with *fd_out (shared buffers: the memfd for the client,
 * -1 for device buffers), or a Devq__Code with err filled in. */
int devq_buffer_create(struct devq_session *s, uint64_t id, uint64_t size, Devq__BufferKind kind,
		    int *fd_out, char *err, size_t errlen);
/* ImportBuffer of fd (not taken: the caller closes it): 0, or a
 * Devq__Code with err filled in. */
int devq_buffer_import(struct devq_session *s, uint64_t id, uint64_t size, bool read_only, int fd,
		    char *err, size_t errlen);
void devq_buffer_release(struct devq_buf *b); /* frees now or once idle */
void devq_buffer_put(struct devq_buf *b);     /* an op stopped using it */

/* After a successful create (fd: the memfd for the client, -1 for none)
 * or import: BufferReady for b, now; or, for a large shared buffer, once
 * the worker has prefaulted it, meanwhile counted in s->populating (the
 * server does not read a session while it is not 0, so the replies keep
 * their order and one session has at most one populate queued). */
void devq_buffer_reply_ready(struct devq_buf *b, int fd);

/* Shared buffers of at least this many bytes are mapped without
 * MAP_POPULATE; one worker thread prefaults them (MADV_POPULATE_*) and
 * later unmaps them, in order, so neither blocks the loop.  The worker
 * reports each back (ev.wake): BufferReady goes out once the populate is
 * done, BufferReleased (and the quota's credit) once the unmap is. */
#define DEVQ_BUFFER_BG_BYTES (64u << 20)
/* Loop thread, after a wake: what the worker finished (replies sent,
 * released buffers freed; their sessions marked dirty, so that the server
 * frees each once nothing refers to it). */
struct devq_engine;
void devq_buffer_collect(struct devq_engine *e);
/* Waits for the worker to finish what it was given, stops it and collects
 * (server fini); what comes later runs on the caller's thread. */
void devq_buffer_worker_fini(struct devq_engine *e);

#endif
