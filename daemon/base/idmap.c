/* SPDX-License-Identifier: Apache-2.0 */
#include "base/idmap.h"

#include <errno.h>
#include <stdlib.h>

static size_t slot_of(const struct idmap *m, uint64_t key)
{
	key ^= key >> 33;
	key *= 0xff51afd7ed558ccdULL;
	key ^= key >> 33;
	return (size_t)key & (m->cap - 1);
}

void *devq_idmap_get(const struct idmap *m, uint64_t key)
{
	if (!m->cap)
		return NULL;
	for (size_t i = slot_of(m, key);; i = (i + 1) & (m->cap - 1)) {
		if (!m->slots[i].val)
			return NULL;
		if (m->slots[i].key == key)
			return m->slots[i].val;
	}
}

static int grow(struct idmap *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 16;
	struct idmap_slot *old = m->slots;
	size_t ocap = m->cap;
	struct idmap_slot *n = calloc(ncap, sizeof(*n));
	if (!n)
		return -ENOMEM;
	m->slots = n;
	m->cap = ncap;
	for (size_t j = 0; j < ocap; j++) {
		if (!old[j].val)
			continue;
		size_t i = slot_of(m, old[j].key);
		while (n[i].val)
			i = (i + 1) & (ncap - 1);
		n[i] = old[j];
	}
	free(old);
	return 0;
}

int devq_idmap_put(struct idmap *m, uint64_t key, void *val)
{
	if (devq_idmap_get(m, key))
		return -EEXIST;
	/* Keep the load under 1/2 so probes stay short. */
	if ((m->count + 1) * 2 > m->cap) {
		int r = grow(m);
		if (r < 0)
			return r;
	}
	size_t i = slot_of(m, key);
	while (m->slots[i].val)
		i = (i + 1) & (m->cap - 1);
	m->slots[i].key = key;
	m->slots[i].val = val;
	m->count++;
	return 0;
}

void *devq_idmap_del(struct idmap *m, uint64_t key)
{
	if (!m->cap)
		return NULL;
	size_t i = slot_of(m, key);
	while (m->slots[i].val && m->slots[i].key != key)
		i = (i + 1) & (m->cap - 1);
	void *v = m->slots[i].val;
	if (!v)
		return NULL;
	m->slots[i].val = NULL;
	m->count--;
	/* Backward shift: move later members of the probe run into the hole
	 * when their home slot does not lie between the hole and them. */
	for (size_t j = (i + 1) & (m->cap - 1); m->slots[j].val; j = (j + 1) & (m->cap - 1)) {
		size_t home = slot_of(m, m->slots[j].key);
		if (((j - home) & (m->cap - 1)) >= ((j - i) & (m->cap - 1))) {
			m->slots[i] = m->slots[j];
			m->slots[j].val = NULL;
			i = j;
		}
	}
	return v;
}

void devq_idmap_fini(struct idmap *m)
{
	free(m->slots);
	m->slots = NULL;
	m->cap = m->count = 0;
}
