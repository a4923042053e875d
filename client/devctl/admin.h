/* SPDX-License-Identifier: Apache-2.0 */
/* devctl admin (grant, evict, tenants: devqd's granted tenants) and devctl
 * health (whether devqd serves and its device runs an op). */
#ifndef DEVCTL_ADMIN_H
#define DEVCTL_ADMIN_H

#include <stdio.h>

#include "devq.h"

void devctl_admin_usage(FILE *f);
/* argv: the arguments after "admin".  Returns devctl's exit status. */
int devctl_admin_main(const char *sock, int argc, char **argv);
/* argv: the arguments after "health": 0 healthy, 1 the device failed, 3
 * devqd unreachable, 2 usage. */
int devctl_health_main(const char *sock, int argc, char **argv);

#endif
