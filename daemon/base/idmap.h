/* SPDX-License-Identifier: Apache-2.0 */
/* idmap: u64 key -> pointer, open addressing with linear probing and
 * backward-shift deletion.  Used for client-chosen ids inside a session. */
#ifndef DEVQ_IDMAP_H
#define DEVQ_IDMAP_H

#include <stddef.h>
#include <stdint.h>

struct idmap_slot {
	uint64_t key;
	void *val; /* NULL marks an empty slot */
};

struct idmap {
	struct idmap_slot *slots;
	size_t cap, count; /* cap is 0 or a power of two */
};

void *devq_idmap_get(const struct idmap *m, uint64_t key);
/* -EEXIST when the key is present, -ENOMEM. */
int devq_idmap_put(struct idmap *m, uint64_t key, void *val);
void *devq_idmap_del(struct idmap *m, uint64_t key);
void devq_idmap_fini(struct idmap *m);

/* Iteration: for (size_t i = 0; i < m->cap; i++) if (m->slots[i].val) ... */

#endif
