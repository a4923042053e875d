/* stderr logging: one line per event, prefixed with the level. */
#include <stdarg.h>
#include <stdio.h>

#include "daemon.h"

static int level = DEVQ_LOG_WARN;

void devq_log_set_level(int l)
{
	level = l;
}

void devq_log(int l, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warning", "info", "debug" };
	if (l > level)
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "devqd: %s: %s\n", names[l], line);
}
