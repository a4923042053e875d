/* SPDX-License-Identifier: Apache-2.0 */
/* Logging.  Under systemd (stderr is the journal stream named by
 * $JOURNAL_STREAM) each line goes to the journal with its priority and, for
 * session events, structured fields an operator can filter on
 * (journalctl DEVQ_CLIENT_UID=1000); otherwise one readable line per event
 * on stderr, prefixed with the level. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <syslog.h>
#include <unistd.h>

/* sd_journal_sendv would add this file's own CODE_FILE/LINE/FUNC: the
 * caller's come in a struct devq_log_src instead. */
#define SD_JOURNAL_SUPPRESS_LOCATION
#include <systemd/sd-journal.h>

#include "base/log.h"

/* Set on the loop thread (start, SIGHUP), read from every thread that logs
 * (backend threads, a repository rescan on the thread pool). */
static atomic_int level = DEVQ_LOG_NOTICE;
static int to_journal = -1; /* unknown until the first line */

void devq_log_set_level(int l)
{
	atomic_store_explicit(&level, l, memory_order_relaxed);
}

/* systemd sets JOURNAL_STREAM=DEV:INO for the stream it connected stderr
 * to; if stderr was redirected since (a shell wrapper, a test), that is
 * where the lines must go instead. */
static bool stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

static void emit(const struct devq_log_src *src, int l, const struct devq_log_ctx *s, int code,
		 int64_t queue, int64_t point, const char *msg)
{
	static const char *const names[] = { "error", "warning", "notice", "info", "debug" };
	static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO, LOG_DEBUG };
	if (to_journal < 0)
		to_journal = stderr_is_journal();
	if (!to_journal) {
		if (s && s->session)
			fprintf(stderr, "devqd: %s: session %" PRIu64 ": %s\n", names[l], s->session, msg);
		else
			fprintf(stderr, "devqd: %s: %s\n", names[l], msg);
		return;
	}
	char f[14][1100];
	struct iovec iov[14];
	int n = 0;
	snprintf(f[n++], sizeof(f[0]), "PRIORITY=%d", prio[l]);
	snprintf(f[n++], sizeof(f[0]), "SYSLOG_IDENTIFIER=devqd");
	if (s && s->session) {
		snprintf(f[n++], sizeof(f[0]), "MESSAGE=session %" PRIu64 ": %s", s->session, msg);
		snprintf(f[n++], sizeof(f[0]), "DEVQ_SESSION=%" PRIu64, s->session);
	} else {
		snprintf(f[n++], sizeof(f[0]), "MESSAGE=%s", msg);
	}
	if (s && s->pid > 0)
		snprintf(f[n++], sizeof(f[0]), "DEVQ_CLIENT_PID=%ld", s->pid);
	if (s)
		snprintf(f[n++], sizeof(f[0]), "DEVQ_CLIENT_UID=%u", (unsigned)s->uid);
	if (s && s->tenant)
		snprintf(f[n++], sizeof(f[0]), "DEVQ_TENANT=%s", s->tenant);
	if (queue >= 0)
		snprintf(f[n++], sizeof(f[0]), "DEVQ_QUEUE=%" PRId64, queue);
	if (point >= 0)
		snprintf(f[n++], sizeof(f[0]), "DEVQ_POINT=%" PRId64, point);
	if (code >= 0)
		snprintf(f[n++], sizeof(f[0]), "DEVQ_CODE=%d", code);
	snprintf(f[n++], sizeof(f[0]), "CODE_FILE=%s", src->file);
	snprintf(f[n++], sizeof(f[0]), "CODE_LINE=%d", src->line);
	snprintf(f[n++], sizeof(f[0]), "CODE_FUNC=%s", src->func);
	for (int i = 0; i < n; i++) {
		iov[i].iov_base = f[i];
		iov[i].iov_len = strlen(f[i]);
	}
	if (sd_journal_sendv(iov, n) < 0) /* journald gone: stderr still works */
		fprintf(stderr, "devqd: %s: %s\n", names[l], msg);
}

void devq_log_at(const struct devq_log_src *src, int l, const char *fmt, ...)
{
	if (l > atomic_load_explicit(&level, memory_order_relaxed))
		return;
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	emit(src, l, NULL, -1, -1, -1, line);
}

void devq_log_fields_at(const struct devq_log_src *src, int l, const struct devq_log_ctx *s,
			int code, int64_t queue, int64_t point, const char *fmt, ...)
{
	if (l > atomic_load_explicit(&level, memory_order_relaxed))
		return;
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	emit(src, l, s, code, queue, point, line);
}
