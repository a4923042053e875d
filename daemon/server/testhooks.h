/* SPDX-License-Identifier: Apache-2.0 */
/* Test-only fault hooks (see testhooks.c); inert without
 * --test-fault-injection. */
#ifndef DEVQ_TESTHOOKS_H
#define DEVQ_TESTHOOKS_H

struct devq_daemon;

int devq_testhooks_install(struct devq_daemon *d);
void devq_testhooks_close(struct devq_daemon *d);

#endif
