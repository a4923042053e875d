/* SPDX-License-Identifier: Apache-2.0 */
/* devctl subcommands built on devqd's op recorder (devq_trace_get). */
#ifndef DEVCTL_TRACE_H
#define DEVCTL_TRACE_H

#include <stdio.h>

/* devctl trace [--duration SECONDS | --last N] [--all] [-o FILE] [--svg FILE] */
int devctl_trace_main(const char *sock, int argc, char **argv);
/* devctl top [--once] [--interval SECONDS] [--all] */
int devctl_top_main(const char *sock, int argc, char **argv);

/* The help text of both, for devctl --help. */
void devctl_trace_usage(FILE *f);

#endif
