/* SPDX-License-Identifier: Apache-2.0 */
/* Which backend serves: the one cfg->backend names ("auto" tries the GPU
 * first and falls back to the CPU backend, saying why). */
#ifndef DEVQ_SELECT_H
#define DEVQ_SELECT_H

#include <stddef.h>

#include "base/config.h"
#include "device/backend.h"

/* Opens the backend: 0 and *out, with note set to why the backend in use
 * was chosen when an operator should know ("" otherwise); or -errno after
 * logging the reason. */
int devq_select_backend(const struct devq_config *cfg, const struct devq_backend_config *bc,
			struct devq_backend **out, char *note, size_t notelen);

#endif
