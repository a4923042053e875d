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
	bool imported;   /* ImportBuffer, not CreateBuffer */
	bool bg;         /* large: installed and unmapped by the buffer worker */
	bool bg_busy;    /* its install is queued or running on the worker */
	bool mapped;     /* pinned (shared) or allocated (device) by the backend */
	bool unmap_due;  /* released meanwhile: unmapped once it is done */
	int ready_fd;    /* the memfd BufferReady will carry (CreateBuffer), -1 */
	uint64_t devaddr;
	unsigned inflight; /* ops referencing it that have not completed */
	/* Hazard tracking: readers wait for the last writer,
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
 * or import: BufferReady for b, now; or, for a large buffer, once the
 * worker has installed it (meanwhile counted in s->populating: the server
 * does not read a session while it is not 0, so the replies keep their
 * order, one session has at most one install queued, and no op can name
 * the buffer before it is pinned).  If the worker cannot pin or allocate
 * it, the create or import fails then, with the error it would have had
 * at once, and the buffer is gone. */
void devq_buffer_reply_ready(struct devq_buf *b, int fd);

/* Buffers of at least this many bytes are installed and unmade by one
 * worker thread, in order, so that nothing of it blocks the loop.  Shared
 * ones are mapped here without MAP_POPULATE; the worker prefaults them
 * (MADV_POPULATE_*) and then pins them (the backend's map_host: CUDA's
 * cuMemHostRegister, seconds for GiBs), and at release unpins (unmap_host)
 * and unmaps them.  Device ones it allocates and zeroes (alloc), and frees.
 * The worker reports each back (ev.wake): BufferReady goes out once the
 * install is done, BufferReleased (and the quota's credit) once the unmap
 * is. */
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
