/* SPDX-License-Identifier: Apache-2.0 */
/* The replayable-batch cache: see graph_cache.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "device/cuda/graph_cache.h"

static bool same_op(const struct devq_graph_op *a, const struct devq_graph_op *b)
{
	return a->kernel == b->kernel && a->grid == b->grid && a->block == b->block &&
	       a->nargs == b->nargs && !memcmp(a->args, b->args, a->nargs * sizeof(a->args[0]));
}

uint64_t devq_graph_cache_hash(unsigned stream, const struct devq_graph_op *ops, unsigned n)
{
	uint64_t h = devq_mix64((uint64_t)stream << 32 | n);
	for (unsigned i = 0; i < n; i++) {
		const struct devq_graph_op *o = &ops[i];
		h = devq_mix64(h ^ ((uint64_t)o->kernel << 32 | o->nargs));
		h = devq_mix64(h ^ ((uint64_t)o->grid << 32 | o->block));
		for (unsigned j = 0; j < o->nargs && j < DEVQ_MAX_PARAMS; j++)
			h = devq_mix64(h ^ o->args[j]);
	}
	return h;
}

static struct devq_graph_entry *lookup(struct devq_graph_cache *c, unsigned stream,
				       const struct devq_graph_op *ops, unsigned n, uint64_t h)
{
	for (unsigned i = 0; i < DEVQ_GRAPH_CACHE_SIZE; i++) {
		struct devq_graph_entry *e = &c->e[i];
		if (!e->graph || e->hash != h || e->stream != stream || e->n != n)
			continue;
		unsigned k = 0;
		while (k < n && same_op(&e->ops[k], &ops[k]))
			k++;
		if (k == n)
			return e;
	}
	return NULL;
}

void *devq_graph_cache_find(struct devq_graph_cache *c, unsigned stream,
			    const struct devq_graph_op *ops, unsigned n)
{
	struct devq_graph_entry *e = lookup(c, stream, ops, n, devq_graph_cache_hash(stream, ops, n));
	if (!e) {
		c->misses++;
		return NULL;
	}
	c->hits++;
	e->used = ++c->tick;
	e->replays++;
	return e->graph;
}

int devq_graph_cache_insert(struct devq_graph_cache *c, unsigned stream,
			    const struct devq_graph_op *ops, unsigned n, void *graph, void **evicted)
{
	*evicted = NULL;
	struct devq_graph_op *copy = malloc((size_t)n * sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	memcpy(copy, ops, (size_t)n * sizeof(*copy));
	struct devq_graph_entry *slot = &c->e[0];
	for (unsigned i = 0; i < DEVQ_GRAPH_CACHE_SIZE; i++) {
		if (!c->e[i].graph) {
			slot = &c->e[i];
			break;
		}
		if (c->e[i].used < slot->used)
			slot = &c->e[i];
	}
	if (slot->graph) {
		*evicted = slot->graph;
		free(slot->ops);
	}
	*slot = (struct devq_graph_entry){ .hash = devq_graph_cache_hash(stream, ops, n),
					   .stream = stream, .n = n, .ops = copy, .graph = graph,
					   .used = ++c->tick };
	return 0;
}

void devq_graph_cache_clear(struct devq_graph_cache *c, void (*destroy)(void *graph, void *ud),
			    void *ud)
{
	for (unsigned i = 0; i < DEVQ_GRAPH_CACHE_SIZE; i++) {
		if (c->e[i].graph)
			destroy(c->e[i].graph, ud);
		free(c->e[i].ops);
	}
	memset(c, 0, sizeof(*c));
}
