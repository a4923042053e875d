/* SPDX-License-Identifier: Apache-2.0 */
/* Backend choice: "auto" prefers a working GPU and falls back to the CPU
 * backend, saying why; an explicit choice that can't be honoured fails.
 * A fallback on a host that has NVIDIA device nodes is a warning (and a
 * note for status): the operator almost certainly wanted the GPU. */
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/select.h"
#include "base/log.h"
#ifdef DEVQ_HAVE_CUDA
#include "device/cuda/backend_cuda.h"
#endif

/* Whether this host has NVIDIA GPU device nodes (/dev/nvidia0 ...). */
static bool have_nvidia_nodes(void)
{
	glob_t g;
	bool found = glob("/dev/nvidia[0-9]*", GLOB_NOSORT, NULL, &g) == 0 && g.gl_pathc > 0;
	globfree(&g);
	return found;
}

static int open_cpu(const struct devq_backend_config *bc, struct devq_backend **out)
{
	int r = devq_backend_cpu_open(bc, out);
	if (r < 0)
		log_err("cpu backend: %s", strerror(-r));
	return r;
}

int devq_select_backend(const struct devq_config *cfg, const struct devq_backend_config *bc,
			struct devq_backend **out, char *note, size_t notelen)
{
	if (notelen)
		note[0] = '\0';
	if (!strcmp(cfg->backend, "cpu"))
		return open_cpu(bc, out);

	char why[512];
#ifdef DEVQ_HAVE_CUDA
	/* DEVQ_CUDA_LIBRARY names another driver library (tests use the
	 * toolkit's stub to reach the driver-present-but-unusable path). */
	const char *lib = getenv("DEVQ_CUDA_LIBRARY");
	int r = devq_backend_cuda_open(bc, lib && *lib ? lib : NULL, cfg->device, out, why,
				       sizeof(why));
	if (r == 0) {
		log_info("backend %s: CUDA on %s; kernels: %s", cfg->backend, (*out)->device, why);
		return 0;
	}
#else
	snprintf(why, sizeof(why),
		 "this devqd was built without the CUDA backend (no nvcc at build time, or CUDA=0)");
#endif
	if (!strcmp(cfg->backend, "cuda")) {
		log_err("backend cuda: %s", why);
		return -ENODEV;
	}
	if (have_nvidia_nodes()) {
		snprintf(note, notelen, "CPU fallback on a host with NVIDIA GPUs: %s", why);
		log_warn("backend auto: %s; using the CPU backend", note);
	} else {
		log_info("backend auto: %s; using the CPU backend", why);
	}
	return open_cpu(bc, out);
}
