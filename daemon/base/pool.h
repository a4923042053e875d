/* SPDX-License-Identifier: Apache-2.0 */
/* Allocation for the daemon's hot path: a bump arena that protobuf-c unpacks
 * one frame into (a dozen mallocs per op become pointer bumps, freed all at
 * once), and a free list of fixed-size records (op records).  Loop thread
 * only. */
#ifndef DEVQ_POOL_H
#define DEVQ_POOL_H

#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

struct devq_arena_big;

struct devq_arena {
	ProtobufCAllocator pa; /* hands out arena memory; free is a no-op */
	unsigned char *buf;
	size_t cap, used;
	size_t want;                /* high-water mark since the last reset */
	struct devq_arena_big *big; /* what did not fit, freed at reset */
};

void devq_pool_arena_init(struct devq_arena *a);
/* Everything allocated since the last reset is gone; the buffer grows to
 * the last frame's need (bounded) so the next frame fits in it. */
void devq_pool_arena_reset(struct devq_arena *a);
void devq_pool_arena_fini(struct devq_arena *a);

/* Free list of records of one size; keeps at most `keep` of them. */
struct devq_pool {
	size_t size;
	/* Bytes devq_pool_get clears from the start of a reused record
	 * (0: all of it): a record whose tail is written before it is read
	 * need not be cleared there. */
	size_t zero;
	size_t chunk; /* heap bytes of one item (malloc's usable size + its
		       * size word): the same for every item of one size, so
		       * measured once, not at every get and put */
	unsigned keep, nfree;
	void *free; /* singly linked through the first word */
};

void devq_pool_init(struct devq_pool *p, size_t size, unsigned keep);
void devq_pool_fini(struct devq_pool *p);
void *devq_pool_get(struct devq_pool *p); /* zeroed (its first `zero` bytes), or NULL */
void devq_pool_put(struct devq_pool *p, void *x); /* accepts NULL */

/* Heap bytes all pools and arenas keep for reuse (loop thread). */
size_t devq_pool_cached_bytes(void);

#endif
