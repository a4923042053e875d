/* SPDX-License-Identifier: Apache-2.0 */
/* Loading the executable repository into the engine (core/repo.h): once
 * at start, and again on SIGHUP off the loop thread.  Loop thread. */
#ifndef DEVQ_RELOAD_H
#define DEVQ_RELOAD_H

#include <stdbool.h>

#include "server/daemon.h"

/* Before serving: scans cfg.executables and serves what is valid (each
 * refused file logged).  0, or a negative errno (out of memory). */
int devq_reload_initial(struct devq_daemon *d);
/* SIGHUP: rescans on the thread pool and applies the result on the loop;
 * while one runs, one more is queued. */
void devq_reload_executables(struct devq_daemon *d);
/* After the loop ended. */
void devq_reload_fini(struct devq_daemon *d);

#endif
