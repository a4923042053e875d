/* SPDX-License-Identifier: Apache-2.0 */
/* See pool.h. */
#include "base/pool.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARENA_MIN 16384
#define ARENA_MAX (8u << 20) /* a larger frame's overflow goes to malloc */

/* Heap bytes parked in free lists and arena buffers, as malloc counts them
 * (usable size plus glibc's size word), so the SIGUSR1 stats can tell a
 * bounded cache from a leak. */
static size_t cached;

static size_t chunk_bytes(void *x)
{
	return x ? malloc_usable_size(x) + sizeof(size_t) : 0;
}

size_t devq_pool_cached_bytes(void)
{
	return cached;
}

struct devq_arena_big {
	struct devq_arena_big *next;
	max_align_t data[];
};

static void *arena_alloc(void *ud, size_t n)
{
	struct devq_arena *a = ud;
	size_t need = (n + 15) & ~(size_t)15;
	a->want += need;
	if (a->buf && a->cap - a->used >= need) {
		void *p = a->buf + a->used;
		a->used += need;
		return p;
	}
	struct devq_arena_big *b = malloc(sizeof(*b) + n);
	if (!b)
		return NULL;
	b->next = a->big;
	a->big = b;
	return b->data;
}

static void arena_free(void *ud, void *p)
{
	(void)ud;
	(void)p; /* released with the whole arena */
}

void devq_pool_arena_init(struct devq_arena *a)
{
	memset(a, 0, sizeof(*a));
	a->pa.alloc = arena_alloc;
	a->pa.free = arena_free;
	a->pa.allocator_data = a;
}

void devq_pool_arena_reset(struct devq_arena *a)
{
	while (a->big) {
		struct devq_arena_big *b = a->big;
		a->big = b->next;
		free(b);
	}
	/* Grow (never shrink) to what the last frame needed. */
	if (a->want > a->cap && a->want <= ARENA_MAX) {
		size_t ncap = a->cap ? a->cap : ARENA_MIN;
		while (ncap < a->want)
			ncap *= 2;
		unsigned char *n = malloc(ncap);
		if (n) {
			cached += chunk_bytes(n);
			cached -= chunk_bytes(a->buf);
			free(a->buf);
			a->buf = n;
			a->cap = ncap;
		}
	}
	a->used = 0;
	a->want = 0;
}

void devq_pool_arena_fini(struct devq_arena *a)
{
	devq_pool_arena_reset(a);
	cached -= chunk_bytes(a->buf);
	free(a->buf);
	a->buf = NULL;
	a->cap = 0;
}

void devq_pool_init(struct devq_pool *p, size_t size, unsigned keep)
{
	p->size = size < sizeof(void *) ? sizeof(void *) : size;
	p->zero = 0;
	p->keep = keep;
	p->nfree = 0;
	p->free = NULL;
	p->chunk = 0;
}

void devq_pool_fini(struct devq_pool *p)
{
	while (p->free) {
		void *x = p->free;
		memcpy(&p->free, x, sizeof(void *));
		cached -= chunk_bytes(x);
		free(x);
	}
	p->nfree = 0;
}

void *devq_pool_get(struct devq_pool *p)
{
	void *x = p->free;
	if (!x)
		return calloc(1, p->size);
	memcpy(&p->free, x, sizeof(void *));
	p->nfree--;
	cached -= p->chunk;
	memset(x, 0, p->zero ? p->zero : p->size);
	return x;
}

void devq_pool_put(struct devq_pool *p, void *x)
{
	if (!x)
		return;
	if (p->nfree >= p->keep) {
		free(x);
		return;
	}
	memcpy(x, &p->free, sizeof(void *));
	p->free = x;
	p->nfree++;
	if (!p->chunk)
		p->chunk = chunk_bytes(x);
	cached += p->chunk;
}
