/* SPDX-License-Identifier: Apache-2.0 */
/* Uids whose work keeps losing the device.  A device loss is attributed to
 * a uid when every session with work on the device belonged to it; after
 * lost-refuse-after such losses, each within lost-refuse-s of the one
 * before, that uid's connections are refused until lost-refuse-s after the
 * last (root and the admin group never are: they are who investigates).
 * The record lives in a small text file in the state directory
 * (StateDirectory=devqd: /var/lib/devqd), written at each loss, so that it
 * outlives the restart the loss causes.  A file that cannot be read or
 * parsed is logged and ignored: it never stops devqd from starting.
 * Loop thread. */
#ifndef DEVQ_CULPRIT_H
#define DEVQ_CULPRIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>

#include "core/engine.h"

struct devq_config;

/* Uids remembered at most; past it the one whose last loss is oldest goes,
 * and a state file's lines past it are ignored. */
#define DEVQ_CULPRIT_MAX 256
_Static_assert(DEVQ_CULPRIT_MAX <= DEVQ_REFUSED_UIDS_MAX, "Status holds every refused uid");

struct devq_culprit {
	uint32_t uid;
	uint32_t losses; /* attributed, each within lost-refuse-s of the previous */
	int64_t last_s;  /* wall clock (seconds since the epoch) of the last */
};

struct devq_culprits {
	char path[PATH_MAX]; /* the state file; "" when there is no state directory */
	unsigned n;
	struct devq_culprit e[DEVQ_CULPRIT_MAX];
};

/* The state file of this daemon in state_dir, lost-uids.<instance> (the
 * socket's name: devqd, gpu0; instances share the directory), or none
 * (state_dir NULL or "": the record lasts as long as the process), read now; expired entries are
 * dropped.  Logs what it finds: a refused uid at the default level, a bad
 * file as a warning. */
void devq_culprit_load(struct devq_culprits *c, const char *state_dir, const char *instance,
		       const struct devq_config *cfg, int64_t now_s);
/* A loss attributed to uid at now_s: counts it, writes the state file, and
 * returns how many losses now count against uid (0 when lost-refuse-s is
 * 0: nothing is recorded). */
unsigned devq_culprit_record(struct devq_culprits *c, uint32_t uid, const struct devq_config *cfg,
			     int64_t now_s);
/* Whether uid is refused at now_s; why gets the client's message. */
bool devq_culprit_refuses(const struct devq_culprits *c, uint32_t uid,
			  const struct devq_config *cfg, int64_t now_s, char *why, size_t len);
/* The refused uids for a status line ("uids refused after device losses:
 * 1001, 1002"), "" when none; returns how many. */
unsigned devq_culprit_describe(const struct devq_culprits *c, const struct devq_config *cfg,
			       int64_t now_s, char *out, size_t len);

/* The refused uids, at most max into out (engine.h's refused_uids event);
 * returns how many. */
unsigned devq_culprit_list(const struct devq_culprits *c, const struct devq_config *cfg,
			   int64_t now_s, struct devq_refused_uid *out, unsigned max);

#endif
