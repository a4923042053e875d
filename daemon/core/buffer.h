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

/* Shared buffers of at least this many bytes are mapped without
 * MAP_POPULATE; one worker thread prefaults them (MADV_POPULATE_*) and
 * later unmaps them, in order, so neither blocks the loop. */
#define DEVQ_BUFFER_BG_BYTES (64u << 20)
/* Waits for the worker to finish what it was given and stops it (server
 * fini); what comes later runs on the caller's thread. */
void devq_buffer_worker_fini(void);

#endif
