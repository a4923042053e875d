/* SPDX-License-Identifier: Apache-2.0 */
/* The memory half of the core tests' fake backends (test_core.c,
 * test_repo_core.c): device addresses are host addresses, device buffers
 * plain malloc. */
#ifndef DEVQ_TESTS_FAKE_MEM_H
#define DEVQ_TESTS_FAKE_MEM_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "device/backend.h"

/* Set to a negative errno: map_host refuses (pinning failed). */
static int fake_map_host_err;

static int fake_map_host(struct devq_backend *b, void *addr, size_t len, bool ro, uint64_t *dev)
{
	(void)b, (void)len, (void)ro;
	if (fake_map_host_err)
		return fake_map_host_err;
	*dev = (uint64_t)(uintptr_t)addr;
	return 0;
}

/* Host ranges unpinned so far. */
static unsigned fake_unmaps;

static void fake_unmap_host(struct devq_backend *b, void *addr, size_t len)
{
	(void)b, (void)addr, (void)len;
	fake_unmaps++;
}

/* Set to a negative errno: alloc refuses (device memory exhausted). */
static int fake_alloc_err;

static int fake_alloc(struct devq_backend *b, size_t len, uint64_t *dev)
{
	(void)b;
	if (fake_alloc_err)
		return fake_alloc_err;
	void *p = malloc(len);
	*dev = (uint64_t)(uintptr_t)p;
	return p ? 0 : -ENOMEM;
}

static void fake_free(struct devq_backend *b, uint64_t dev, size_t len)
{
	(void)b, (void)len;
	free((void *)(uintptr_t)dev);
}

#endif
