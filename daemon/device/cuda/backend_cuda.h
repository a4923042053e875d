/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA backend (backend_cuda.c), built when the toolkit is found. */
#ifndef DEVQ_BACKEND_CUDA_H
#define DEVQ_BACKEND_CUDA_H

#include <stddef.h>

#include "device/backend.h"

/* Opens GPU `device` through the driver library lib (NULL: libcuda.so.1),
 * using its primary context.  On failure returns a negative errno with a
 * sentence for an operator in msg: -ENOENT no driver, -ENODEV the stub
 * library or no such device, -EPROTO a driver too old for this build,
 * -ENOEXEC no kernel code for the device's architecture.  On success msg
 * says which fatbin image the device runs. */
int devq_backend_cuda_open(const struct devq_backend_config *cfg, const char *lib, int device,
			   struct devq_backend **out, char *msg, size_t msglen);

#endif
