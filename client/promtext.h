/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's status in the Prometheus text exposition format 0.0.4: what
 * `devctl metrics` prints and what devq-exporter serves for every devqd of
 * the node.  Plain C over stdio, no HTTP: devctl links it without the
 * exporter's HTTP library. */
#ifndef DEVQ_PROMTEXT_H
#define DEVQ_PROMTEXT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "devq.h"

/* Plain uid tenants ("uid:1000") with series of their own; the rest are
 * summed into tenant="other", so that a node with many users keeps a
 * bounded number of series (granted tenants are bounded by their admin). */
#define DEVQ_PROMTEXT_UID_TENANTS 256

/* One devqd as a scrape sees it. */
struct devq_promtext_instance {
	const struct devq_status *s; /* NULL: not reachable (devq_up 0) */
	const char *gpu;             /* its gpu label (the exporter: from the
				      * daemon, else from the socket's name) */
	uint64_t self;               /* the scraper's own session: left out */
};

struct devq_promtext_opts {
	/* Per-session and per-queue families (devq_session_*, devq_queue_depth):
	 * a series per connection, so only when asked (--sessions). */
	bool sessions;
	/* Every series carries gpu="N" and devq_up is printed: what the
	 * exporter serves for several instances at once.  Otherwise only the
	 * per-tenant families carry gpu (and UUID), as devctl prints them. */
	bool exporter;
};

/* Writes the families of n instances, each family once (HELP, TYPE, then
 * its series for every instance).  Returns 0, or -1 when f reports an
 * error. */
int devq_promtext_write(FILE *f, const struct devq_promtext_instance *in, size_t n,
			const struct devq_promtext_opts *o);

#endif
