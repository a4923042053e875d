/* SPDX-License-Identifier: Apache-2.0 */
/* Reproducible random inputs for the codec tests (Completions encoder, libdevq
 * codecs): xorshift64*, seeded from $DEVQ_TEST_SEED when set so that a
 * failure names a seed that reproduces it, and 64-bit values biased to 0
 * (which proto3 leaves out) and to the varint length boundaries. */
#ifndef DEVQ_TEST_RNG_H
#define DEVQ_TEST_RNG_H

#include <stdint.h>
#include <stdlib.h>

static uint64_t rng_state;

/* $DEVQ_TEST_SEED, else dflt. */
static inline uint64_t seed_from_env(uint64_t dflt)
{
	const char *e = getenv("DEVQ_TEST_SEED");
	return e && *e ? strtoull(e, NULL, 0) : dflt;
}

static inline uint64_t rnd(void) /* xorshift64*: small, fast, good enough here */
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1DULL;
}

/* Values that sit on varint length boundaries, int32's, and the extremes,
 * where a size computation goes wrong first. */
static const uint64_t rng_edges[] = {
	0, 1, 0x7f, 0x80, 0x3fff, 0x4000, 0x1fffff, 0x200000, INT32_MAX, (uint64_t)INT32_MAX + 1,
	UINT32_MAX, (uint64_t)UINT32_MAX + 1, (1ULL << 56) - 1, 1ULL << 56, (1ULL << 63) - 1,
	1ULL << 63, UINT64_MAX - 1, UINT64_MAX,
};

/* 0 a quarter of the time, an edge value a quarter, or a value of a random
 * bit length so that every varint length 1..10 comes up. */
static inline uint64_t rnd_u64(void)
{
	uint64_t k = rnd() % 8;
	if (k < 2)
		return 0;
	if (k < 4)
		return rng_edges[rnd() % (sizeof(rng_edges) / sizeof(rng_edges[0]))];
	unsigned bits = 1 + (unsigned)(rnd() % 64);
	uint64_t v = rnd();
	return bits == 64 ? v : v & ((1ULL << bits) - 1);
}

#endif
