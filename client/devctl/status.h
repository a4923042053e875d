/* SPDX-License-Identifier: Apache-2.0 */
/* devctl list (devqd's executables and their signatures) and devctl status
 * (its sessions, queues, tenants and totals). */
#ifndef DEVCTL_STATUS_H
#define DEVCTL_STATUS_H

#include <stdio.h>

/* The help text of both. */
void devctl_status_usage(FILE *f);
/* argv: the arguments after "list".  0, 2 usage, 3 devqd unreachable. */
int devctl_list_main(const char *sock, int argc, char **argv);
/* argv: the arguments after "status".  0, 2 usage, 3 devqd unreachable. */
int devctl_status_main(const char *sock, int argc, char **argv);

#endif
