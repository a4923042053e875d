/* SPDX-License-Identifier: Apache-2.0 */
/* Replayable batches: which launched sequence a CUDA graph stands for.
 * A run of replayable kernel ops that a client submits again and again is
 * captured once as a CUDA graph and replayed; this cache finds the graph of
 * a run by its exact contents (kernel, launch shape and every argument
 * value, device addresses included), so a replay can never run other work
 * than the ops asked for, and by the stream it launches on: launches of one
 * CUgraphExec serialise on the device, so one exec shared by two streams
 * would make their identical batches wait for each other.  Pure C: no CUDA here, so it is tested everywhere;
 * graphs are opaque pointers to it. */
#ifndef DEVQ_GRAPH_CACHE_H
#define DEVQ_GRAPH_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels.h"

#define DEVQ_GRAPH_CACHE_SIZE 16
#define DEVQ_GRAPH_MAX_OPS 1024 /* longer runs are split */

struct devq_graph_op {
	uint32_t kernel; /* index in devq_kernels */
	uint32_t grid, block;
	uint32_t nargs;
	uint64_t args[DEVQ_MAX_PARAMS]; /* the first nargs meaningful */
};

struct devq_graph_entry {
	uint64_t hash;
	unsigned stream; /* the backend's stream index the graph launches on */
	unsigned n;
	struct devq_graph_op *ops; /* owned copy */
	void *graph;               /* the backend's instantiated graph */
	uint64_t used;             /* LRU tick */
	uint64_t replays;
};

struct devq_graph_cache {
	struct devq_graph_entry e[DEVQ_GRAPH_CACHE_SIZE];
	uint64_t tick;
	uint64_t hits, misses;
};

uint64_t devq_graph_cache_hash(unsigned stream, const struct devq_graph_op *ops, unsigned n);
/* The graph recorded for exactly this run on this stream, or NULL. */
void *devq_graph_cache_find(struct devq_graph_cache *c, unsigned stream,
			    const struct devq_graph_op *ops, unsigned n);
/* Remembers graph for this run on this stream.  When the cache is full the least recently
 * used entry makes room: its graph is returned in *evicted for the caller
 * to destroy (else NULL).  -ENOMEM when the run cannot be copied (graph is
 * then not kept: the caller destroys it). */
int devq_graph_cache_insert(struct devq_graph_cache *c, unsigned stream,
			    const struct devq_graph_op *ops, unsigned n, void *graph, void **evicted);
/* Empties the cache, handing every graph to destroy. */
void devq_graph_cache_clear(struct devq_graph_cache *c, void (*destroy)(void *graph, void *ud),
			    void *ud);

#endif
