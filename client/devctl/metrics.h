/* SPDX-License-Identifier: Apache-2.0 */
/* devctl metrics: the daemon's counters in Prometheus text format, and the
 * same numbers for devctl status --json. */
#ifndef DEVCTL_METRICS_H
#define DEVCTL_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "devq.h"

void devctl_metrics_usage(FILE *f);
/* argv: the arguments after "metrics".  Returns devctl's exit status. */
int devctl_metrics(const char *sock, int argc, char **argv);
/* Appends ,"op_errors":{...},"device_busy_ns":N,"users":[...],"phases":[...]
 * to an object being printed; self (this connection's session) is left out
 * of nothing here: per-session numbers stay in the caller's array. */
void devctl_metrics_json(FILE *f, const struct devq_status *s);
/* ,"ops_failed":N,"queue_depths":[...] for one session object. */
void devctl_metrics_session_json(FILE *f, const struct devq_session_info *x);
/* ,"tenants":[...] for devctl status --json. */
void devctl_metrics_tenants_json(FILE *f, const struct devq_status *s);

#endif
