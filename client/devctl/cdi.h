/* SPDX-License-Identifier: Apache-2.0 */
/* CDI (Container Device Interface) specs for devq's sockets: devctl cdi
 * generate, and the transient spec of one tenant that devctl admin grant
 * --cdi writes and devctl admin evict removes. */
#ifndef DEVCTL_CDI_H
#define DEVCTL_CDI_H

#include <stddef.h>
#include <stdio.h>

/* Where the static spec goes by default, and where transient ones go. */
#define DEVCTL_CDI_SPEC "/etc/cdi/devq.yaml"
#define DEVCTL_CDI_RUN_DIR "/var/run/cdi"

void devctl_cdi_usage(FILE *f);
/* devctl cdi ...: sock is the global --socket/--device path or NULL. */
int devctl_cdi_main(const char *sock, int argc, char **argv);

/* /var/run/cdi/devq.dev-tenant_<tenant>.json, device devq.dev/tenant=<tenant>
 * giving a container the tenant socket (its directory bind-mounted,
 * DEVQ_SOCKET set).  0, or -1 with the reason in err. */
int devctl_cdi_tenant_write(const char *tenant, const char *socket, char *err, size_t n);
/* Removes that file; a missing one is not an error.  0, or -1 with err. */
int devctl_cdi_tenant_remove(const char *tenant, char *err, size_t n);

#endif
